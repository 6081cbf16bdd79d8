"""hopbench.engine._pacer: the open loop's wake-ups (never before the deadline, on a
timerfd or trio's sleep) and its bounded bursts of due arrivals; and the
runner's use of it (due trace arrivals sent in one wake, the burst bound).

No wall-clock thresholds: on the real clock only "not early" is checked; the
burst tests run under trio's MockClock and detect a yield with a cancel scope
cancelled beforehand (a checkpoint raises Cancelled, a return without one does not).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import trio
import trio.testing

from hopbench.engine import _open_loop, _pacer, _runner
from hopbench._clock import NS_PER_MS, now_ns
from hopbench.engine._pacer import BURST_MAX, Pacer, read_run_delay_ns, timerfd_available
from hopbench.config._profile import load_profile
from hopbench.measure._recorder import ALL, Recorder

from _fake_transport import Plan, fake_transport

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="timerfd is Linux only")


async def _yielded(pacer: Pacer, deadline_ns: int) -> bool:
    """Whether ``pacer.wait(deadline_ns)`` reached a checkpoint (it was cancelled there)."""
    with trio.CancelScope() as scope:
        scope.cancel()
        await pacer.wait(deadline_ns)
    return scope.cancelled_caught


async def test_pacer_mock_clock_falls_back_and_wakes_exactly_at_the_deadline(
        autojump_clock: trio.testing.MockClock) -> None:
    pacer = Pacer()
    assert not pacer.uses_timerfd  # MockClock: trio's sleep, so time can jump
    t = now_ns()
    for k in (1, 7, 250, 1_000):
        deadline = t + k * NS_PER_MS + 3
        await pacer.wait(deadline)
        assert now_ns() == deadline
    assert pacer.stats.wakes == 4 and pacer.stats.timerfd_waits == 0
    pacer.close()


@linux
async def test_pacer_timerfd_never_wakes_before_its_deadline() -> None:
    assert timerfd_available()
    pacer = Pacer()
    assert pacer.uses_timerfd
    for k in range(40):
        deadline = now_ns() + 20_000 * (k % 7 + 1) + k  # 20-140 us ahead, odd ns
        await pacer.wait(deadline)
        assert now_ns() >= deadline
    # every call slept on the timerfd, but one whose deadline had passed by the time the
    # pacer read the clock (the process descheduled for 20 us on a busy machine: seen
    # once, 39 of 40) returns as a due arrival instead
    st = pacer.stats
    assert st.wakes + st.in_burst == 40 and 1 <= st.timerfd_waits <= st.wakes
    pacer.close()
    pacer.close()  # idempotent
    assert not pacer.uses_timerfd


async def test_pacer_fallback_on_the_real_clock_never_wakes_early() -> None:
    pacer = Pacer(use_timerfd=False)
    assert not pacer.uses_timerfd
    for k in range(20):
        deadline = now_ns() + 50_000 * (k % 5 + 1) + k
        await pacer.wait(deadline)
        assert now_ns() >= deadline
    assert pacer.stats.timerfd_waits == 0
    pacer.close()


async def test_pacer_sends_due_arrivals_without_yielding_up_to_the_bound(
        autojump_clock: trio.testing.MockClock) -> None:
    pacer = Pacer(burst_max=4)
    await trio.sleep(1)
    past = now_ns() - 1
    # 4 due arrivals in a row return at once; the 5th yields, starting a new wake of 4
    seen = [await _yielded(pacer, past) for _ in range(13)]
    assert seen == [False] * 4 + [True] + [False] * 3 + [True] + [False] * 3 + [True]
    assert pacer.stats.wakes == 3 and pacer.stats.in_burst == 10
    # an arrival not yet due always sleeps, and ends the burst
    assert await _yielded(pacer, now_ns() + NS_PER_MS)
    pacer.close()


async def test_pacer_log_records_each_wait(autojump_clock: trio.testing.MockClock) -> None:
    pacer = Pacer(burst_max=2)
    pacer.stats.log = []
    t = now_ns()
    for d in (t + 5, t + 5, t + 5, t + 9):
        await pacer.wait(d)
    log = pacer.stats.log
    assert [e[4] for e in log] == [True, False, True, True]  # slept, joined the burst, bound, slept
    assert all(e[3] >= e[0] for e in log)  # returned at or after the deadline
    assert log[1][2] == log[0][2] == t + 5  # the burst member names its wake
    pacer.close()


def test_pacer_rejects_a_burst_bound_below_one() -> None:
    with pytest.raises(ValueError, match="burst_max: expected a positive integer, got 0"):
        Pacer(burst_max=0)


@linux
def test_pacer_run_delay_reads_schedstat() -> None:
    v = read_run_delay_ns()
    assert v is None or v >= 0  # None where the kernel has no schedstats


def test_pacer_monkeypatched_clock_falls_back(monkeypatch: pytest.MonkeyPatch) -> None:
    async def main() -> None:
        assert not Pacer().uses_timerfd
    monkeypatch.setattr("hopbench._clock._current_time", lambda: 1.0)
    trio.run(main)
    assert _pacer.BURST_MAX == BURST_MAX == 16


def _trace_case(tmp_path: Path, n: int) -> Path:
    (tmp_path / "t.jsonl").write_text("".join(
        json.dumps({"timestamp_ms": 0, "input_tokens": 8, "output_tokens": 2, "hash_ids": [i]}) + "\n"
        for i in range(n)), encoding="utf-8")
    prof = tmp_path / "p.toml"
    prof.write_text("""[run]
name = "t"
stream_log = false

[load]
mode = "trace"
trace = "t.jsonl"
block_tokens = 8

[target]
url = "http://127.0.0.1:9"

[[scenario]]
name = "a"
protocol = "chat"
model = "m"
""", encoding="utf-8")
    return prof


@pytest.mark.slow
async def test_pacer_runner_sends_due_trace_arrivals_in_bounded_bursts(
        autojump_clock: trio.testing.MockClock, tmp_path: Path) -> None:
    # 40 arrivals all due at the start: 16 at once, then a yield, 16 more, a yield, the last 8
    transport = fake_transport(Plan(head_s=0.1, gaps_s=(0.1,), last_s=0.1))
    rec = Recorder(["a"])
    runner = _runner.LoadRunner(load_profile(_trace_case(tmp_path, 40)), "http://127.0.0.1:9", rec,
                                Recorder(["a"]), transport_factory=transport)
    before = sys.getswitchinterval()
    stats = await runner.run()
    assert sys.getswitchinterval() == before  # restored after the run
    assert runner.pacer is not None
    assert runner.pacer.stats.in_burst == 38 and runner.pacer.stats.wakes == 2
    assert not runner.pacer.uses_timerfd  # MockClock (and closed after the run anyway)
    assert stats.arrivals == 40 and rec.snapshot().counter("a", "completed") == 40
    assert rec.snapshot().histogram(ALL, "schedule_lag").max <= 1  # MockClock: on time


@pytest.mark.slow
async def test_pacer_switch_interval_during_an_open_loop_run(
        autojump_clock: trio.testing.MockClock, tmp_path: Path) -> None:
    seen: list[float] = []

    class Watch(fake_transport(Plan(head_s=0.1, gaps_s=(), last_s=0.1))):  # type: ignore[misc]
        async def handle_async_request(self, request):  # type: ignore[no-untyped-def]
            seen.append(sys.getswitchinterval())
            return await super().handle_async_request(request)

    transport = Watch
    runner = _runner.LoadRunner(load_profile(_trace_case(tmp_path, 3)), "http://127.0.0.1:9", Recorder(["a"]),
                                Recorder(["a"]), transport_factory=transport)
    await runner.run()
    assert seen == [pytest.approx(_open_loop.SWITCH_INTERVAL_S, rel=0.01)] * 3  # (kept to the microsecond)
