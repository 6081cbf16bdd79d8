"""The runner's timing logic under trio's MockClock (autojump) with an in-memory body:
TTFT, TTFB, inter-token gaps, E2E, silences and the three read timeouts, exact to the
nanosecond, whatever the machine's load (no socket, no wall clock)."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing

from hopbench.engine import _runner
from hopbench.config._profile import parse_profile
from hopbench.measure._recorder import ALL, Recorder

from _fake_transport import Plan, fake_transport

S = 1_000_000_000


async def _run(plan: Plan, timeouts: str = "",
               requests: int = 2, run: str = "") -> tuple[Recorder, list[dict[str, Any]]]:
    transport = fake_transport(plan)
    profile = parse_profile(f'[run]\nrequests = {requests}\n{run}\n[run.timeouts]\n{timeouts}\n[load]\n'
                            'concurrency = 1\n[target]\nurl = "http://127.0.0.1:9"\n'
                            '[[scenario]]\nprotocol = "chat"\nmodel = "m"\n', "p.toml", env={})
    rec = Recorder(["chat-m"])
    lines: list[dict[str, Any]] = []
    await _runner.LoadRunner(profile, "http://127.0.0.1:9", rec, Recorder(["chat-m"]),
                             on_stream=lines.append, transport_factory=transport).run()
    return rec, lines


async def test_runner_clock_stream_figures_are_exact(autojump_clock: trio.testing.MockClock) -> None:
    plan = Plan(connect_s=0.25, head_s=0.5, gaps_s=(0.25, 0.125, 0.5), last_s=0.25, close_s=0.0)
    rec, lines = await _run(plan)
    assert [x["outcome"] for x in lines] == ["completed", "completed"]
    for x in lines:
        # closed loop: latencies count from the send (the request handed to the client)
        assert x["headers_ns"] - x["sent_ns"] == int(0.75 * S)            # connect + head
        assert x["ttft_ns"] == int(1.0 * S)                                # + first gap
        assert x["e2e_ns"] == int(1.875 * S)                               # + 0.125 + 0.5 + 0.25
        assert x["max_silence_ns"] == int(0.5 * S)
        assert x["content_events"] == 3
    # consecutive streams: the second starts when the first ends
    assert lines[1]["start_ns"] == lines[0]["end_ns"]
    snap = rec.snapshot()
    assert snap.histogram(ALL, "itl").count == 4                          # 2 gaps x 2 streams
    assert snap.histogram(ALL, "itl").percentile(25) == pytest.approx(0.125 * S, rel=1e-3)
    assert snap.histogram(ALL, "itl").percentile(100) == pytest.approx(0.5 * S, rel=1e-3)
    assert snap.histogram(ALL, "ttfb").percentile(50) == pytest.approx(0.75 * S, rel=1e-3)
    assert snap.histogram(ALL, "e2e").percentile(50) == pytest.approx(1.875 * S, rel=1e-3)
    assert snap.histogram(ALL, "connect_wait").count == 0  # only the hopbench transport reports it


@pytest.mark.parametrize(("plan", "timeouts", "detail", "e2e_s"), [
    # the head never comes within first_byte_s: cut exactly then
    (Plan(head_s=5.0), "first_byte_s = 1", "first_byte", 1.0),
    # headers, one token, then 3 s of silence: idle_s after the last read, plus at most
    # the re-arm slack (idle_s / 16)
    (Plan(gaps_s=(0.25, 3.0)), "idle_s = 1", "idle", (1.25, 1.25 + 1 / 16)),
    # a stream that keeps talking is cut by total_s, counted from the send
    (Plan(gaps_s=(0.25,) * 40), "total_s = 2\nidle_s = 1", "total", 2.0),
])
async def test_runner_clock_timeouts_fire_on_time(autojump_clock: trio.testing.MockClock, plan: Plan,
                                                  timeouts: str, detail: str,
                                                  e2e_s: float | tuple[float, float]) -> None:
    rec, lines = await _run(plan, timeouts, requests=1)
    (x,) = lines
    assert (x["outcome"], x["detail"]) == ("timeout", detail)
    if isinstance(e2e_s, tuple):
        assert e2e_s[0] * S <= x["e2e_ns"] <= e2e_s[1] * S
    else:
        assert x["e2e_ns"] == int(e2e_s * S)
    assert rec.snapshot().counter(ALL, f"timeout.{detail}") == 1


async def test_runner_clock_body_without_terminal_signal_is_truncated(
        autojump_clock: trio.testing.MockClock) -> None:
    rec, lines = await _run(Plan(gaps_s=(0.25, 0.25), last_s=None, close_s=0.5), requests=1)
    (x,) = lines
    assert (x["outcome"], x["detail"]) == ("truncated", "closed")
    assert x["e2e_ns"] == int(1.0 * S)  # the end of the body is the end of the stream
    assert rec.snapshot().histogram(ALL, "e2e").count == 0  # E2E counts completed streams only


@pytest.mark.parametrize(("max_event_bytes", "outcome"), [(100, "truncated"), (4096, "completed")])
async def test_runner_max_event_bytes_from_the_profile_reaches_the_scanner(
        autojump_clock: trio.testing.MockClock,
        max_event_bytes: int, outcome: str) -> None:
    # each content event is about 130 bytes
    rec, lines = await _run(Plan(), requests=1, run=f"max_event_bytes = {max_event_bytes}")
    (x,) = lines
    assert x["outcome"] == outcome
    if outcome == "truncated":
        assert x["detail"] == "oversize_event"
        assert rec.snapshot().counter(ALL, "truncated.oversize_event") == 1


@pytest.mark.slow
async def test_runner_clock_first_byte_counts_from_the_write_not_the_connect(
        autojump_clock: trio.testing.MockClock) -> None:
    # docs/profiles.md: first_byte_s runs from the request's write; a connect is bounded
    # by connect_s alone. A 3 s connect with first_byte_s = 1 is not a first-byte timeout.
    timeouts = "connect_s = 10\nfirst_byte_s = 1"
    _, lines = await _run(Plan(connect_s=3.0, head_s=0.5), timeouts, requests=1)
    (x,) = lines
    assert x["outcome"] == "completed"
    assert x["headers_ns"] - x["sent_ns"] == int(3.5 * S)
    # ... and a head that takes longer than first_byte_s after that write is one,
    # cut first_byte_s after the write (connect 0.5 s + 1 s)
    rec, lines = await _run(Plan(connect_s=0.5, head_s=5.0), timeouts, requests=1)
    (x,) = lines
    assert (x["outcome"], x["detail"]) == ("timeout", "first_byte")
    assert x["e2e_ns"] == int(1.5 * S)
    # total_s still bounds a slow connect
    _, lines = await _run(Plan(connect_s=8.0), "connect_s = 10\nfirst_byte_s = 1\ntotal_s = 2",
                          requests=1)
    (x,) = lines
    assert (x["outcome"], x["detail"]) == ("timeout", "total")
    assert x["e2e_ns"] == int(2.0 * S)


@pytest.mark.parametrize("load", [
    'mode = "rate"\nrate_rps = 5\narrival = "constant"',
    # a trace without loop: its schedule runs out by itself too (5 requests, 100 ms apart)
    'mode = "trace"\ntrace = "t.jsonl"',
])
async def test_runner_clock_open_loop_rate_is_over_the_schedule_not_the_drain(
        autojump_clock: trio.testing.MockClock, tmp_path: Any,
        load: str) -> None:
    # docs/results/in-flight.md, "Load held": the load's window ends one mean gap after the last
    # arrival was due, not when the 3 s streams still open after it have drained
    from hopbench.driver._judge import analyse

    (tmp_path / "t.jsonl").write_text("".join(
        f'{{"timestamp_ms": {100 * i}, "input_tokens": 4, "output_tokens": 4}}\n' for i in range(5)))
    transport = fake_transport(Plan(gaps_s=(1.0, 1.0, 1.0)))
    path = tmp_path / "p.toml"
    path.write_text(f'[run]\nrequests = 10\n[load]\n{load}\n[target]\nurl = "http://127.0.0.1:9"\n'
                    '[[scenario]]\nprotocol = "chat"\nmodel = "m"\n')
    from hopbench.config._profile import load_profile

    profile = load_profile(path)
    rec = Recorder(["chat-m"])
    runner = _runner.LoadRunner(profile, "http://127.0.0.1:9", rec, Recorder(["chat-m"]), transport_factory=transport)
    await runner.run()
    _, warnings, got = analyse(profile, runner.stats, rec.snapshot())
    n, window_s = (10, 2.0) if "rate" in load else (5, 0.5)   # 10 x 0.2 s; 400 ms + the mean gap
    assert runner.stats.stop_ns >= 3 * S                          # the streams drained after it
    assert got["load_window_s"] == window_s
    assert got["achieved_rate_rps"] == got["requested_rate_rps"] == n / window_s
    # an open loop's budget is judged as any schedule that ran out by itself (docs/results.md)
    assert got["held"] is True and not [w for w in warnings if "load not held" in w]


async def test_runner_clock_worker_share_ends_its_window_one_whole_run_gap_after_its_last_arrival(
        autojump_clock: trio.testing.MockClock, tmp_path: Any) -> None:
    # 2 workers at 10 requests/s constant, 10 requests: worker 1 sends at 0.1, 0.3, ..., 0.9 s.
    # The run's window ends at 1.0 s (its last arrival plus the whole run's 0.1 s gap), not at
    # 1.1 s (plus the worker's own 0.2 s gap): 10 requests / 1.0 s, the rate asked for
    from hopbench.config._profile import load_profile
    from hopbench.driver._share import share_profile, split_load

    transport = fake_transport(Plan(gaps_s=(1.0,)))
    path = tmp_path / "p.toml"
    path.write_text('[run]\nrequests = 10\n[load]\nmode = "rate"\nrate_rps = 10\narrival = "constant"\n'
                    '[target]\nurl = "http://127.0.0.1:9"\n[[scenario]]\nprotocol = "chat"\nmodel = "m"\n')
    profile = load_profile(path)
    share = split_load(profile, 2)[1]
    part = share_profile(profile, share)
    runner = _runner.LoadRunner(part, "http://127.0.0.1:9", Recorder(["chat-m"]), Recorder(["chat-m"]),
                                load=share.load, request_budget=share.request_budget,
                                arrival_offset_ns=share.arrival_offset_ns, transport_factory=transport)
    await runner.run()
    assert runner.stats.schedule_end_ns == int(1.0 * S)
