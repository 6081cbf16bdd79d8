"""The loop thread's run-queue wait (hopbench.engine._runqueue) and a read's client lag
(``LoadRunner._client_lag_ns``: the largest of the kernel stamp's lateness, the
loop-lag probe's estimate and the run-queue wait; docs/results/in-flight.md, "Client lag per read")."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import trio
import trio.testing

from hopbench.config._profile import parse_profile
from hopbench.measure._recorder import Recorder
from hopbench.engine._runner import LoadRunner
from hopbench.engine._runqueue import SCHEDSTAT, RunQueueWatch, read_wait_ns


def test_runqueue_read_wait_ns_takes_the_second_field_and_never_raises(tmp_path: Path) -> None:
    f = tmp_path / "schedstat"
    f.write_text("55315002 23739936 22\n")
    fd = os.open(f, os.O_RDONLY)
    try:
        assert read_wait_ns(fd) == 23739936
        f.write_text("1 2 3\n")  # read again from the start: the new value
        assert read_wait_ns(fd) == 2
        f.write_text("garbage\n")
        assert read_wait_ns(fd) == 0
    finally:
        os.close(fd)
    assert read_wait_ns(None) == 0


async def test_runqueue_watch_keeps_the_wait_of_the_latest_turn(tmp_path: Path) -> None:
    """After each I/O wait: the run-queue wait since the I/O wait before ended, and when
    that one ended (the earliest a byte read in this batch can have arrived)."""
    from hopbench._clock import now_ns

    f = tmp_path / "schedstat"
    f.write_text("0 1000 1\n")
    with RunQueueWatch(str(f)) as watch:
        assert watch.available
        f.write_text("0 4000 2\n")
        watch.after_io_wait(0.01)
        assert watch.wait_ns == 3000
        first_end = now_ns()
        f.write_text("0 9000 3\n")
        watch.after_io_wait(0)
        assert watch.wait_ns == 5000
        assert 0 < watch.turn_from_ns <= first_end
        watch.after_io_wait(0)              # no wait since
        assert watch.wait_ns == 0
        for _ in range(3):
            await trio.sleep(0.001)         # installed as an instrument of the running loop
        assert watch.wait_ns == 0 and watch.turn_from_ns > first_end
    assert watch._fd is None  # closed on exit


async def test_runqueue_watch_without_the_file_says_zero(tmp_path: Path) -> None:
    with RunQueueWatch(str(tmp_path / "missing")) as watch:
        for _ in range(3):
            await trio.sleep(0.001)
        assert (watch.available, watch.wait_ns) == (False, 0)
        assert watch.turn_from_ns > 0  # the turns are still timed


def test_runqueue_watch_is_off_under_a_fake_clock() -> None:
    """A wait in real ns means nothing on trio's MockClock: none is taken."""
    async def main() -> tuple[bool, int]:
        with RunQueueWatch() as watch:
            await trio.sleep(1)
            return watch.available, watch.wait_ns, watch.turn_from_ns

    assert trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0)) == (False, 0, 0)


@pytest.mark.skipif(not os.path.exists(SCHEDSTAT), reason="no per-thread schedstat (not Linux)")
async def test_runqueue_watch_reads_this_threads_schedstat() -> None:
    with RunQueueWatch() as watch:
        assert watch.available
        for _ in range(5):
            await trio.sleep(0.001)
        assert watch.wait_ns >= 0


def _runner() -> LoadRunner:
    profile = parse_profile('[run]\nrequests = 1\n[load]\nconcurrency = 1\n[target]\nurl = "http://127.0.0.1:9"\n'
                            '[[scenario]]\nprotocol = "chat"\nmodel = "m"\n', "p.toml", env={})
    return LoadRunner(profile, "http://127.0.0.1:9", Recorder(["chat-m"]), Recorder(["chat-m"]))


def test_client_lag_is_the_largest_of_the_three_measures() -> None:
    """Issue 20: the kernel stamp's lateness no longer replaces the loop's estimate:
    a read of coalesced segments carries the latest one's stamp, which says nothing of
    how long the first of them waited. The probe's estimate is capped at the loop's
    latest turn (no byte of the read arrived before it). The second figure (the latest
    bytes' lateness, for in flight) stays the stamp's when there is one."""
    r = _runner()
    t = 1_000_000_000
    r._probe_due_ns = t - 7_000_000         # the probe is 7 ms overdue
    assert r._client_lag_ns(t, t - 1_000_000, True) == (7_000_000, 1_000_000)   # stamp: 1 ms late
    assert r._client_lag_ns(t, t - 9_000_000, True) == (9_000_000, 9_000_000)   # stamp the larger
    assert r._client_lag_ns(t, 0, True) == (7_000_000, 7_000_000)               # no stamp
    r._runq.turn_from_ns = t - 4_000_000    # the loop's turn began 4 ms ago: the cap
    assert r._client_lag_ns(t, t - 1_000_000, True) == (4_000_000, 1_000_000)
    # but not for a read that found its bytes waiting after a read that did too: they can be
    # a whole turn older than the turn's start (issue 36's remainder; _Body.after_turn False)
    assert r._client_lag_ns(t, t - 1_000_000, after_turn=False) == (7_000_000, 1_000_000)
    r._runq.wait_ns = 6_000_000              # the loop thread waited 6 ms for a core
    assert r._client_lag_ns(t, t - 1_000_000, True) == (6_000_000, 1_000_000)
    r._runq.turn_from_ns = r._runq.wait_ns = 0
    r._probe_due_ns = t + 5_000_000          # not due: the lag it just measured, if recent
    r._lag_ns, r._lag_at_ns = 3_000_000, t - 2_000_000
    assert r._client_lag_ns(t, t, True) == (3_000_000, 0)
    r._lag_at_ns = t - 20_000_000            # an old probe measure no longer counts
    assert r._client_lag_ns(t, 0, True) == (0, 0)
