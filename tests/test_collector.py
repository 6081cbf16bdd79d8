"""CollectorWatch: start-up objects frozen, automatic collection kept, pauses measured."""

from __future__ import annotations

import gc
import weakref

import pytest

from hopbench.engine._collector import CollectorWatch


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


def test_thresholds_set_inside_and_restored_late_freeze_and_pause_percentile() -> None:
    from hopbench.engine._collector import THRESHOLDS

    before = gc.get_threshold()
    with CollectorWatch() as c:
        assert gc.get_threshold() == THRESHOLDS != before
        frozen = gc.get_freeze_count()
        kept = [[i] for i in range(1000)]  # long-lived state made after entry
        c.freeze_now()
        assert gc.get_freeze_count() >= frozen + 1000 and c.frozen_late >= 1000
        for _ in range(20_000):
            _Node()
        assert c.collections > 0
        p99 = c.pause_percentile_ns(99.0)
        assert 0 < c.pause_percentile_ns(50.0) <= p99 <= c.pause_max_ns
        del kept
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0
    assert CollectorWatch().pause_percentile_ns(99.0) == 0  # no pause yet


@pytest.mark.slow
@pytest.mark.parametrize("load", ["concurrency = 8", 'mode = "rate"\nrate_rps = 200'])
def test_a_finished_stream_leaves_no_cyclic_garbage(tmp_path: object, load: str) -> None:
    """Issue 16 item 5: a finished stream is freed by reference counting alone (the
    runner breaks httpx's response <-> body-stream cycle; hdrh's histogram <->
    encoder link is weak), so the collector has nothing per stream to scan for.
    Before, each stream left ~30 objects of cyclic garbage (160 streams: ~4,800)."""
    import trio

    from hopbench.engine import _runner
    from hopbench.config._profile import parse_profile
    from hopbench.measure._recorder import ALL, Recorder
    from hopbench.emulator import EmbeddedEmulator

    # (the open loop: the dispatcher's planned requests too, hopbench.engine._dispatch)
    profile = parse_profile('[run]\nrequests = 160\n[load]\n' + load + '\n[emulator]\nttft_ms = 0\n'
                            'tokens_per_s = 0\noutput_tokens = 8\n[[scenario]]\nprotocol = "chat"\nmodel = "m"\n',
                            "p.toml")
    freed = [0]

    def count(phase: str, info: dict[str, int]) -> None:
        if phase == "stop":
            freed[0] += info["collected"]

    class Watch(CollectorWatch):
        """The run's watch, counting what the collector freed inside it, then once more at its end."""

        def __enter__(self) -> CollectorWatch:
            out = super().__enter__()
            gc.callbacks.append(count)
            return out

        def __exit__(self, *exc: object) -> None:
            gc.collect()
            gc.callbacks.remove(count)
            super().__exit__(*exc)  # type: ignore[arg-type]

    with EmbeddedEmulator(profile.emulator_config, record_path=None) as emu:
        rec = Recorder(["chat-m"])
        runner = _runner.LoadRunner(profile, emu.base_url, rec, Recorder(["chat-m"]), collector_factory=Watch)
        trio.run(runner.run)
    assert rec.snapshot().counter(ALL, "completed") == 160
    assert freed[0] < 160, freed  # under one object per stream (the interval histograms' ctypes types)


def test_freeze_now_does_not_count_the_frozen_objects(monkeypatch: pytest.MonkeyPatch) -> None:
    """``gc.get_freeze_count`` walks every frozen object (ms of GIL on the event
    loop, where ``freeze_now`` is called): only reading ``frozen_late`` counts."""
    with CollectorWatch() as c:
        kept = [[i] for i in range(500)]
        real = gc.get_freeze_count

        def boom() -> int:
            raise AssertionError("counted on the loop")
        monkeypatch.setattr(gc, "get_freeze_count", boom)
        c.freeze_now()
        monkeypatch.setattr(gc, "get_freeze_count", real)
        assert c.frozen_late >= 500
        del kept
