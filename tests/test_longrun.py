"""Long runs and long streams (issue 16 items 1 and 3): gaps recorded when they are
measured, per-stream memory independent of the stream's length, and intervals measured
by their real duration when the ticker runs late. Runner tests use trio's MockClock
(autojump) and an in-memory body: exact whatever the machine's load."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing

from hopbench.engine import _runner
from hopbench.measure._meter import StreamMeter
from hopbench.measure._rules import measure
from hopbench.config._profile import parse_profile
from hopbench.measure._recorder import ALL, IntervalSnapshot, Recorder
from hopbench.engine._runner import TICK_SLACK_NS, interval_end
from hopbench.protocols import ContentDelta, FirstToken, Keepalive, StreamEnd, StreamResult

from _fake_transport import Plan, fake_transport

S = 1_000_000_000


def _publish_on_the_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    """The ticker publishes intervals in a worker thread; under an autojump clock
    the clock would race ahead while it runs: publish on the loop instead."""
    async def run_sync(fn: Any, *args: Any, **_: Any) -> Any:
        return fn(*args)

    monkeypatch.setattr(trio.to_thread, "run_sync", run_sync)


def _profile(run: str, load: str) -> Any:
    return parse_profile(f"[run]\n{run}\n[load]\n{load}\n[target]\nurl = \"http://127.0.0.1:9\"\n"
                         '[[scenario]]\nprotocol = "chat"\nmodel = "m"\n', "p.toml", env={})


# -- the meter: scalars only -----------------------------------------------------------


def test_meter_memory_does_not_grow_with_the_stream() -> None:
    """A 20,000-token stream leaves the meter holding scalars only: no slot grows with
    the stream (before issue 16 it kept every gap: ~75 bytes a token)."""
    seen: list[int] = []
    m = StreamMeter(0, 0, lambda metric, v, n=1: seen.append(v) if len(seen) < 3 else None)
    m.on_headers(1)
    for i in range(20_000):
        t = 10 + i * 1_000
        m.on_read(t)
        m.on_observations(t, [FirstToken("text")] if i == 0 else [ContentDelta("text", 1)])
        if i % 1000 == 0:
            m.on_observations(t, [Keepalive(b"")])
    m.on_read(30_000_000)
    m.on_observations(30_000_000, [StreamEnd("completed")])
    for name in StreamMeter.__slots__:
        value = getattr(m, name)
        assert value is None or isinstance(value, (int, bool)) or callable(value) or value == (), (name, value)
    r = measure(m, 30_000_000, "completed", "", StreamResult("completed"), keepalive_budget_ns=S)
    assert (r.itl_count, r.itl_max_ns, r.keepalives) == (19_998, 1_000, 20)
    assert r.keepalive_gaps == 40  # the read before -> each keepalive, each keepalive -> the read after


# -- the runner: gaps land in the interval they occurred in ------------------------------


@pytest.mark.slow
async def test_runner_itl_lands_in_the_interval_it_occurred_in(
        autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch) -> None:
    """One stream of 21 tokens 0.25 s apart, from 0.35 s to 5.35 s, in 1 s intervals:
    each interval holds the gaps measured in it (4 a second), not all 20 at the end."""
    plan = Plan(head_s=0.1, gaps_s=(0.25,) * 21, last_s=0.25)
    transport = fake_transport(plan)
    _publish_on_the_loop(monkeypatch)
    got: list[tuple[int, int, int]] = []

    def on_interval(iv: IntervalSnapshot, warm: IntervalSnapshot, line: dict[str, Any]) -> None:
        got.append((iv.start_ns, iv.end_ns, iv.histogram(ALL, "itl").count))

    rec = Recorder(["chat-m"])
    await _runner.LoadRunner(_profile("requests = 1", "concurrency = 1"), "http://127.0.0.1:9", rec,
                             Recorder(["chat-m"]), on_interval=on_interval, transport_factory=transport).run()
    assert rec.snapshot().histogram(ALL, "itl").count == 20
    # tokens at 0.1 + 0.25 k s (k = 1..21): gaps end at 0.6, 0.85, ..., 5.35
    assert got[:5] == [(0, S, 2), (S, 2 * S, 4), (2 * S, 3 * S, 4), (3 * S, 4 * S, 4), (4 * S, 5 * S, 4)]
    assert sum(n for _, _, n in got) == 20 and got[5][2] == 2


# -- the ticker: intervals measured by their real duration -------------------------------


def test_interval_end_keeps_the_grid_on_time_and_the_truth_when_late() -> None:
    assert interval_end(3 * S + 5, 3 * S) == 3 * S
    assert interval_end(3 * S + TICK_SLACK_NS, 3 * S) == 3 * S
    assert interval_end(3 * S + TICK_SLACK_NS + 1, 3 * S) == 3 * S + TICK_SLACK_NS + 1
    assert interval_end(int(5.8 * S), 4 * S) == int(5.8 * S)


@pytest.mark.slow
async def test_runner_late_ticker_rates_and_in_flight_use_the_real_duration(
        autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two users, 1.1 s streams; the loop is blocked for 2.5 s at 3.45 s (the clock jumps
    with no task running), so the tick due at 4 s closes at 5.95 s. That interval covers
    2.95 s: in flight never more than the 2 users, the rate of completed streams what they
    really did, and the next tick is the one due at 6 s (no catch-up intervals)."""
    plan = Plan(head_s=0.1, gaps_s=(0.25, 0.25, 0.25), last_s=0.25)
    transport = fake_transport(plan)
    _publish_on_the_loop(monkeypatch)
    lines: list[dict[str, Any]] = []
    ivs: list[IntervalSnapshot] = []

    def on_interval(iv: IntervalSnapshot, warm: IntervalSnapshot, line: dict[str, Any]) -> None:
        lines.append(line)
        ivs.append(iv)

    runner = _runner.LoadRunner(_profile("duration_s = 8\ngrace_s = 5", "concurrency = 2"),
                                "http://127.0.0.1:9", Recorder(["chat-m"]), Recorder(["chat-m"]),
                                on_interval=on_interval, transport_factory=transport)

    async def block_the_loop() -> None:
        await trio.sleep(3.45)
        autojump_clock.jump(2.5)  # a 2.5 s stall: nothing runs, time passes

    async with trio.open_nursery() as n:
        n.start_soon(block_the_loop)
        await runner.run()
    t_late = int(5.95 * S)
    bounds = [(ln["start_ns"], ln["end_ns"]) for ln in lines]
    assert bounds[:5] == [(0, S), (S, 2 * S), (2 * S, 3 * S), (3 * S, t_late), (t_late, 6 * S)]
    for ln in lines:
        assert ln["in_flight_mean"] <= 2 + 1e-6, ln
        assert ln["in_flight_now"] <= 2
    late = lines[3]
    assert late["in_flight_mean"] == pytest.approx(2.0, abs=1e-6)  # both users busy the whole 2.95 s
    # the two streams that ended at 3.3 s: 2 in 2.95 s, not 2 in a nominal 1 s
    completed = ivs[3].counter(ALL, "completed")
    assert completed == 2
    dur_s = (late["end_ns"] - late["start_ns"]) / S
    assert completed / dur_s == pytest.approx(2 / 2.95)


@pytest.mark.slow
async def test_runner_keeps_a_bounded_number_of_timeline_records(
        autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch) -> None:
    """RunStats holds the last RECENT_INTERVALS timeline records, not one per interval
    of the run (an hour-long run must not grow with its length); the count is kept."""
    transport = fake_transport(Plan())
    _publish_on_the_loop(monkeypatch)
    n_lines: list[int] = []
    runner = _runner.LoadRunner(_profile("duration_s = 20\ninterval_s = 0.1", "concurrency = 1"),
                                "http://127.0.0.1:9", Recorder(["chat-m"]), Recorder(["chat-m"]),
                                on_interval=lambda iv, w, line: n_lines.append(1), transport_factory=transport)
    stats = await runner.run()
    assert stats.interval_count == len(n_lines) >= 200
    assert len(stats.intervals) <= 2 * _runner.RECENT_INTERVALS
    assert stats.intervals[-1]["end_ns"] == stats.ended_ns


def test_live_progress_in_flight_weighted_by_real_interval_length() -> None:
    """The live figures divide by the time the intervals covered: a late interval of 3 s
    weighs three times one of 1 s."""
    from rich.console import Console

    from hopbench.observe._progress import LiveProgress

    profile = parse_profile('[run]\nduration_s = 30\n[load]\nconcurrency = 4\n[target]\nembedded = true\n'
                            '[[scenario]]\nprotocol = "chat"\nmodel = "m"\n', "p.toml", env={})
    p = LiveProgress(profile, Console(record=True), plain=False)
    empty = IntervalSnapshot(0, 0, {})
    p.on_interval(empty, {"start_ns": 0, "end_ns": S, "in_flight_mean": 4.0, "cpu": 0.5, "completed": 4})
    p.on_interval(empty, {"start_ns": S, "end_ns": 4 * S, "in_flight_mean": 2.0, "cpu": 0.1, "completed": 4})
    fig = p.figures()
    assert fig is not None
    assert fig.in_flight_mean == pytest.approx((4 * 1 + 2 * 3) / 4)
    assert fig.completed_per_s == pytest.approx(8 / 4)
    assert fig.cpu == pytest.approx((0.5 + 0.1 * 3) / 4)
