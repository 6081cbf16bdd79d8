"""ScheduledCollector: the cyclic collector runs on the run's clock, and only there."""

from __future__ import annotations

import gc
import weakref

import pytest

from hopbench._collector import ScheduledCollector


class _Node:
    def __init__(self) -> None:
        self.me = self  # a reference cycle: only the cyclic collector frees it


def test_no_automatic_collection_inside_and_state_restored_after() -> None:
    assert gc.isenabled()
    with ScheduledCollector() as c:
        assert not gc.isenabled()
        assert gc.get_freeze_count() > 0  # start-up objects are out of the scans
        before = c.collections
        for _ in range(50_000):  # far past the 700-object young threshold
            _Node()
        assert c.collections == before
    assert gc.isenabled() and gc.get_freeze_count() == 0


def test_tick_frees_cycles_and_follows_the_1_10_10_schedule() -> None:
    gens: list[int] = []

    def spy(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            gens.append(info["generation"])

    with ScheduledCollector() as c:
        gc.callbacks.append(spy)
        try:
            node = _Node()
            ref = weakref.ref(node)
            del node
            assert ref() is not None
            c.tick()
            assert ref() is None  # one interval later the cycle is gone
            for _ in range(99):
                c.tick()
        finally:
            gc.callbacks.remove(spy)
    assert len(gens) == 100
    assert [i + 1 for i, g in enumerate(gens) if g == 2] == [100]
    assert [i + 1 for i, g in enumerate(gens) if g == 1] == [10, 20, 30, 40, 50, 60, 70, 80, 90]
    assert c.collections == 100 and c.pause_ns > 0 and 0 < c.pause_max_ns <= c.pause_ns


def test_state_restored_after_an_error_and_a_disabled_collector_stays_disabled() -> None:
    gc.disable()
    try:
        with pytest.raises(RuntimeError):
            with ScheduledCollector():
                raise RuntimeError("boom")
        assert not gc.isenabled() and gc.get_freeze_count() == 0
    finally:
        gc.enable()
