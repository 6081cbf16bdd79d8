"""A schedule that runs out by itself (a trace without loop, a request budget) and a
client that fell behind it: the arrivals it took up after the load's window ended are
not load the window held (docs/results.md, "Load held"; hopbench._schedule.WindowCount
``raise_floor``/``end``).

Timing runs under trio's MockClock (autojump): exact whatever the machine's load."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from hopbench import _runner
from hopbench._finish import analyse
from hopbench._profile import Profile, load_profile
from hopbench._recorder import Recorder
from hopbench._schedule import LATER_SENT, SENT, TAKEN, WindowCount

from _fake_transport import Plan, fake_transport

S = 1_000_000_000
_TARGET = '[target]\nurl = "http://127.0.0.1:9"\n[[scenario]]\nprotocol = "chat"\nmodel = "m"\n'


def _profile(tmp_path: Path, run: str, load: str, trace: list[float] | None = None) -> Profile:
    if trace is not None:
        (tmp_path / "t.jsonl").write_text("".join(
            f'{{"timestamp_ms": {t}, "input_tokens": 4, "output_tokens": 4}}\n' for t in trace))
    path = tmp_path / "p.toml"
    path.write_text(f"[run]\n{run}\n[load]\n{load}\n{_TARGET}")
    return load_profile(path)


async def _run(profile: Profile) -> tuple[_runner.LoadRunner, Recorder]:
    rec = Recorder(["chat-m"])
    runner = _runner.LoadRunner(profile, "http://127.0.0.1:9", rec, Recorder(["chat-m"]))
    await runner.run()
    return runner, rec


def _late_pacer(monkeypatch: pytest.MonkeyPatch, late_s: float) -> None:
    """Each arrival taken up ``late_s`` after the one before was (a client slower than its schedule)."""
    class LatePacer(_runner.Pacer):
        async def wait(self, deadline_ns: int) -> None:
            await super().wait(deadline_ns)
            await trio.sleep(late_s)

    monkeypatch.setattr(_runner, "Pacer", LatePacer)


async def test_load_held_late_trace_counts_only_what_was_sent_in_its_window(
        autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # 20 entries at 10/s (0 .. 1.9 s): the window ends one gap after the last, at 2.0 s. The
    # client takes each up 0.15 s after the one before: at 0.15, 0.30, ..., 3.0 s. It wrote
    # all 20, 13 of them taken up (and written) in the window. Before: "20 of 20 due arrivals sent (10.00 of 10.00
    # requests/s)", held, with every request up to 1.1 s late (seen at 1,000/s with two
    # workers on a busy machine: "6,000 of 6,000 ... schedule lag p99 2,905 ms")
    monkeypatch.setattr(_runner, "StreamTransport", fake_transport(Plan(gaps_s=(0.01,))))
    _late_pacer(monkeypatch, 0.15)
    profile = _profile(tmp_path, "", 'mode = "trace"\ntrace = "t.jsonl"',
                       [100.0 * i for i in range(20)])
    runner, rec = await _run(profile)
    _, warnings, load = analyse(profile, runner.stats, rec.snapshot())
    assert runner.stats.arrivals == 20 and runner.stats.schedule_end_ns == 2 * S
    assert load["due"] == 20
    assert load["sent"] == 13
    assert load["achieved_rate_rps"] == load["arrival_rate_rps"] == 6.5
    assert load["held"] is False
    assert [w for w in warnings if "load not held" in w] == [
        "load not held: 13 of the 20 arrivals due in the load's window were sent to the target "
        "(6.5 requests/s, 10 requested by the trace)"]


async def test_load_held_on_time_trace_still_counts_every_request(
        autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # the same trace on time: every send is before its floor; the last one at 1.9 s < 2.0 s
    monkeypatch.setattr(_runner, "StreamTransport", fake_transport(Plan(gaps_s=(0.01,))))
    profile = _profile(tmp_path, "", 'mode = "trace"\ntrace = "t.jsonl"',
                       [100.0 * i for i in range(20)])
    runner, rec = await _run(profile)
    _, warnings, load = analyse(profile, runner.stats, rec.snapshot())
    assert load["due"] == load["sent"] == 20 and load["achieved_rate_rps"] == 10.0
    assert load["held"] is True and not [w for w in warnings if "load not held" in w]


async def test_load_held_late_request_budget_reads_the_rate_it_achieved(
        autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # 20 requests at 10/s (a budget: not judged held, but its rate is shown): 13 in the window
    monkeypatch.setattr(_runner, "StreamTransport", fake_transport(Plan(gaps_s=(0.01,))))
    _late_pacer(monkeypatch, 0.15)
    profile = _profile(tmp_path, "requests = 20", 'mode = "rate"\nrate_rps = 10\narrival = "constant"')
    runner, rec = await _run(profile)
    _, _, load = analyse(profile, runner.stats, rec.snapshot())
    assert runner.stats.arrivals == 20
    assert load["sent"] == 13 and load["achieved_rate_rps"] == 6.5  # before: 20 and 10.0
    assert load["held"] is None


def test_window_count_takes_up_to_the_end_of_a_schedule_that_ran_out() -> None:
    # hopbench._schedule.WindowCount, pure: the window from 0; a finite schedule's end
    # is known only once its last arrival is taken up
    w = WindowCount(0)
    w.raise_floor(100)
    w.note(TAKEN, 10, 20)                    # taken before the floor: in at once
    w.note(SENT, 10, 60, taken_ns=20)
    w.note(TAKEN, 90, 150)                   # taken at or after the floor: waits
    w.note(SENT, 90, 170, taken_ns=150)
    w.note(TAKEN, 95, 260)
    assert w.counts == [1, 1, 0]
    w.raise_floor(50)                        # a lower floor changes nothing
    assert w.counts == [1, 1, 0]
    w.raise_floor(151)                       # the arrival taken at 150 is now surely in
    assert w.counts == [2, 2, 0]
    w.end(200)                               # the one taken at 260 was after the window
    assert w.counts == [2, 2, 0]
    w.note(SENT, 95, 300, taken_ns=260)      # its request, written later: not counted either
    w.note(LATER_SENT, 120, 310)             # a later session turn: not an arrival, no take-up rule
    w.stop(400)
    assert w.counts == [2, 2, 1]
    s = WindowCount(0)                       # a stop before the schedule ran out: it ends the window
    s.raise_floor(100)
    s.note(TAKEN, 90, 150)
    s.stop(180)
    s.note(SENT, 90, 190, taken_ns=150)      # written after the stop: due and taken before it
    assert s.counts == [1, 1, 0]


async def test_load_held_is_null_when_the_run_measured_nothing(
        autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # a stop during warm-up (a signal in start-up, a target down at the start): nothing was
    # due in the window, no user was measured busy; both read "held": true
    monkeypatch.setattr(_runner, "StreamTransport", fake_transport(Plan(gaps_s=(0.01,))))
    for load_text in ('mode = "rate"\nrate_rps = 10', "concurrency = 2\nramp_up_s = 0"):
        profile = _profile(tmp_path, "duration_s = 60\nwarmup_s = 5", load_text)
        rec = Recorder(["chat-m"])
        runner = _runner.LoadRunner(profile, "http://127.0.0.1:9", rec, Recorder(["chat-m"]))
        async with trio.open_nursery() as n:
            async def stop() -> None:
                await trio.sleep(1)
                runner.request_stop("SIGINT")
            n.start_soon(stop)
            await runner.run()
        _, warnings, load = analyse(profile, runner.stats, rec.snapshot())
        assert load["held"] is None, (load_text, load)
        assert not [w for w in warnings if "load not held" in w]
