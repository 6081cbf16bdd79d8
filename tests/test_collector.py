"""CollectorWatch: start-up objects frozen, automatic collection kept, pauses measured."""

from __future__ import annotations

import gc
import weakref

import pytest

from hopbench._collector import CollectorWatch


class _Node:
    def __init__(self) -> None:
        self.me = self  # a reference cycle: only the cyclic collector frees it


def test_startup_objects_frozen_cycles_still_collected_and_pauses_measured() -> None:
    assert gc.isenabled()
    with CollectorWatch() as c:
        assert gc.isenabled()  # CPython keeps its own pace: no growth of uncollected cycles
        assert gc.get_freeze_count() > 0  # start-up objects are out of the scans
        node = _Node()
        ref = weakref.ref(node)
        del node
        for _ in range(20_000):  # far past the 700-object young threshold
            _Node()
        assert ref() is None  # collected automatically, no call needed
        assert c.collections > 0
        assert 0 < c.pause_max_ns <= c.pause_ns
    assert gc.isenabled() and gc.get_freeze_count() == 0


def test_state_restored_after_an_error_and_a_disabled_collector_stays_disabled() -> None:
    gc.disable()
    try:
        with pytest.raises(RuntimeError), CollectorWatch():
            raise RuntimeError("boom")
        assert not gc.isenabled() and gc.get_freeze_count() == 0
        assert gc.callbacks == [] or all(getattr(cb, "__self__", None) is None for cb in gc.callbacks)
    finally:
        gc.enable()
