"""Whether an open loop held its load, judged on the arrivals its schedule had due
(summary.json ``load.due``; docs/results/in-flight.md, "Load held"), over the whole run: a short
seeded Poisson run, a client that falls behind, a trace replay, workers, a trace at one
instant, every stage of a staged run, the words the terminal and the gate share, a
schedule that ran out by itself while its client was behind it, and a run that measured nothing.

Timing runs under trio's MockClock (autojump): exact whatever the machine's load."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from hopbench.engine import _runner
from hopbench.engine._pacer import Pacer
from hopbench.measure._counters import RunCounters
from hopbench.driver._judge import LOAD_HELD_FRACTION, analyse, judge
from hopbench.driver._summary import Part, RunEnd, WorkerInfo
from hopbench._format import load_phrase
from hopbench.views._gate import evaluate_gate
from hopbench.config._profile import load_profile
from hopbench.config._records import Profile
from hopbench.measure._recorder import ALL, Recorder, Snapshot
from hopbench.engine._schedule import LATER_SENT, SENT, TAKEN, Arrivals, DueCount, WindowCount
from hopbench.views._summary_table import load_text

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


async def _run(profile: Profile, stop_s: float | None = None, scope: str = "chat-m", **kw: Any,
               ) -> tuple[_runner.LoadRunner, Recorder]:
    """Run ``profile`` (its one scenario's scope ``scope``) on the fake transport; a
    SIGINT-like stop at ``stop_s`` (fake clock)."""
    rec = Recorder([scope])
    runner = _runner.LoadRunner(profile, "http://127.0.0.1:9", rec, Recorder([scope]), **kw)
    async with trio.open_nursery() as n:
        if stop_s is not None:
            async def stop() -> None:
                await trio.sleep(stop_s)
                runner.request_stop("SIGINT")
            n.start_soon(stop)
        await runner.run()
        n.cancel_scope.cancel()
    return runner, rec


def _session_profile(tmp_path: Path, rate_rps: float, turns: int) -> Profile:
    """An open loop of ``rate_rps`` sessions/s of ``turns`` turns, 0.5 s of think time (scope "s")."""
    path = tmp_path / "p.toml"
    path.write_text(f'[run]\nduration_s = 60\n[load]\nmode = "rate"\nrate_rps = {rate_rps}\n'
                    'arrival = "constant"\n[target]\nurl = "http://127.0.0.1:9"\n[[scenario]]\nname = "s"\n'
                    'protocol = "chat"\nmodel = "m"\nprompts = ["p"]\n'
                    f'session = {{ turns = {turns}, think_time_s = 0.5 }}\n')
    return load_profile(path)


def _not_held(warnings: list[str]) -> list[str]:
    return [w for w in warnings if "load not held" in w]


# -- 1. a short seeded Poisson run ------------------------------------------------

@pytest.mark.slow
async def test_load_held_short_poisson_run_is_judged_on_its_due_arrivals(
        autojump_clock: trio.testing.MockClock, tmp_path: Path) -> None:
    # breaker: Poisson at 10/s, Ctrl-C after 1.2 s. Seed 4's schedule had 9 arrivals in
    # [0, 1.2 s) where rate x window expects 12; the client sent every one on time, and the
    # run said "load not held: 7.5 requests/s sent to the target, 10 requested"
    transport = fake_transport(Plan(gaps_s=(0.1,)))
    profile = _profile(tmp_path, "duration_s = 60\nseed = 4",
                       'mode = "rate"\nrate_rps = 10\narrival = "poisson"')
    lines: list[dict[str, Any]] = []
    runner, rec = await _run(profile, 1.2, on_stream=lines.append, transport_factory=transport)
    _, warnings, load = analyse(profile, runner.stats, rec.snapshot())
    assert runner.stats.stop_ns == int(1.2 * S)
    # the schedule's own arrivals before the stop, each sent at its time
    starts = sorted(x["start_ns"] for x in lines)
    assert len(starts) == 9 and starts[-1] < 1.2 * S
    assert load["due"] == load["sent"] == 9
    assert load["requested_rate_rps"] == 10.0  # what the profile asked, kept
    assert load["achieved_rate_rps"] < LOAD_HELD_FRACTION * load["requested_rate_rps"]  # the noise
    assert load["held"] is True and not _not_held(warnings)
    assert load_text(load) is not None and load_text(load).startswith(  # type: ignore[union-attr]
        "9 of 9 due arrivals sent (7.50 of 10.00 requests/s)")


@pytest.mark.slow
async def test_load_held_a_client_behind_its_schedule_is_not_held(
        autojump_clock: trio.testing.MockClock, tmp_path: Path) -> None:
    # the loop takes 0.15 s more than the schedule per arrival (constant, 10/s): by the stop at
    # 2 s it has taken up 13 of the 20 arrivals due; the 7 it never reached were due all the same
    transport = fake_transport(Plan(gaps_s=(0.1,)))
    profile = _profile(tmp_path, "duration_s = 2", 'mode = "rate"\nrate_rps = 10\narrival = "constant"')
    runner, rec = await _run(profile, transport_factory=transport, pacer_factory=_late_pacer(0.15))
    _, warnings, load = analyse(profile, runner.stats, rec.snapshot())
    assert load["due"] == 20                       # 0, 0.1, ..., 1.9 s
    assert load["sent"] == runner.stats.arrivals == 13  # taken up at 0.15, 0.30, ..., 1.95 s (late)
    assert load["held"] is False
    assert _not_held(warnings) == ["load not held: 13 of the 20 arrivals due in the load's window were sent "
                                   "to the target (6.5 requests/s, 10 requested)"]


def test_load_held_due_count_takes_the_planned_and_the_unreached_arrivals() -> None:
    # hopbench.engine._schedule, pure: constant 10/s from 0, measured from 0.25 s
    arrivals = Arrivals(0, 10.0, False, random.Random(0))
    due = DueCount(int(0.25 * S))
    for t in (next(arrivals) for _ in range(5)):  # 0 .. 0.4 s planned, the last one pending
        due.pending(t)
        due.passed(t)
        due.planned()
    assert due.at_stop(int(0.45 * S)) == 2                       # 0.3, 0.4 (not 0.0-0.2: warm-up)
    assert due.at_stop(int(1.0 * S), arrivals.fork()) == 7       # + 0.5 .. 0.9, not reached
    assert due.at_stop(int(1.0 * S), arrivals.fork(), limit=2) == 4  # what was left of a budget
    due.pending(next(arrivals))
    assert due.at_stop(int(0.5 * S), arrivals.fork()) == 2       # 0.5 s is at the stop: not due
    assert due.at_stop(int(0.51 * S), arrivals.fork()) == 3      # pending 0.5 s: due, not taken up
    due.ended()                                                  # a budget ran out there
    assert due.at_stop(int(5 * S), arrivals.fork()) == 2


def test_load_held_poisson_fork_continues_the_same_schedule() -> None:
    a = Arrivals(0, 50.0, True, random.Random(7))
    [next(a) for _ in range(10)]
    fork = a.fork()
    assert [next(fork) for _ in range(20)] == [next(a) for _ in range(20)]  # the same stream, copied
    # ... and drawing from the fork leaves the run's own stream where it was
    b, c = Arrivals(0, 50.0, True, random.Random(7)), Arrivals(0, 50.0, True, random.Random(7))
    [next(c.fork()) for _ in range(5)]
    assert [next(b) for _ in range(5)] == [next(c) for _ in range(5)]


# -- 2. a trace replay, and a trace at one instant -------------------------------

@pytest.mark.slow
async def test_load_held_trace_due_is_the_entries_due_in_the_window(
        autojump_clock: trio.testing.MockClock, tmp_path: Path) -> None:
    transport = fake_transport(Plan(gaps_s=(0.1,)))
    profile = _profile(tmp_path, "duration_s = 60", 'mode = "trace"\ntrace = "t.jsonl"',
                       [0, 10, 20, 700, 1100, 1300, 2000])
    runner, rec = await _run(profile, 1.2, transport_factory=transport)
    _, warnings, load = analyse(profile, runner.stats, rec.snapshot())
    assert load["due"] == load["sent"] == load["trace"]["scheduled"] == 5  # 0 .. 1100 ms
    assert load["held"] is True and not _not_held(warnings)


@pytest.mark.slow
@pytest.mark.parametrize("trace", [[500.0], [500.0, 500.0, 500.0]])
async def test_load_held_trace_at_one_instant_has_no_rate(
        autojump_clock: trio.testing.MockClock, tmp_path: Path,
        trace: list[float]) -> None:
    # breaker: 3 entries at one timestamp made a 0.33 ms window: "9,000 of 9,000 requests/s"
    from hopbench.workload._trace import replay_plan

    transport = fake_transport(Plan(gaps_s=(0.1,)))
    profile = _profile(tmp_path, "duration_s = 60", 'mode = "trace"\ntrace = "t.jsonl"', trace)
    runner, rec = await _run(profile, transport_factory=transport)
    _, warnings, load = analyse(profile, runner.stats, rec.snapshot())
    n = len(trace)
    assert profile.load.trace.one_instant
    assert load["requested_rate_rps"] is load["achieved_rate_rps"] is load["arrival_rate_rps"] is None
    assert load["trace"]["trace_rate_rps"] is load["trace"]["mean_rate_rps"] is None
    assert "one instant" in load["requested_rate_note"] and "no load window" in load["requested_rate_note"]
    # breaker: load_window_s was the made-up gap after the instant (0.33 ms for 3 entries)
    assert load["load_window_s"] is None and load["measured_s"] > 0
    assert load["due"] == load["sent"] == n and load["held"] is True and not _not_held(warnings)
    text = load_text(load)
    assert text is not None and text.startswith(f"{n} of {n} due arrivals sent · ") and "requests/s" not in text
    assert "requests/s" not in replay_plan(profile.load.trace, None, None)[0]
    # a looped one repeats: its period is its rate
    looped = _profile(tmp_path, "duration_s = 60", 'mode = "trace"\ntrace = "t.jsonl"\nloop = true', trace)
    assert not looped.load.trace.one_instant


@pytest.mark.slow
@pytest.mark.parametrize("trace", [[1234.5] * 3, [0.0] * 30, [500.0]])
async def test_load_held_trace_at_one_instant_taken_up_late_is_sent(
        autojump_clock: trio.testing.MockClock, tmp_path: Path,
        trace: list[float]) -> None:
    # breaker: 3 entries at one timestamp, taken up 13-97 ms late on a busy machine, read
    # "load: 0 of 3 due arrivals sent", held false, and failed the gate's run.load_held,
    # although all 3 completed: the made-up window after the instant (1 ms / 3) ended
    # before the client took them up, and WindowCount.end left them out
    transport = fake_transport(Plan(gaps_s=(0.01,)))
    profile = _profile(tmp_path, "duration_s = 60", 'mode = "trace"\ntrace = "t.jsonl"', trace)
    runner, rec = await _run(profile, transport_factory=transport, pacer_factory=_late_pacer(0.013))
    _, warnings, load = analyse(profile, runner.stats, rec.snapshot())
    n = len(trace)
    assert profile.load.trace.one_instant
    assert rec.snapshot().counter(ALL, "completed") == runner.stats.arrivals == n
    assert load["due"] == load["sent"] == n and load["held"] is True and not _not_held(warnings)
    assert load["load_window_s"] is None and runner.stats.schedule_end_ns == 0
    text = load_text(load)
    assert text is not None and text.startswith(f"{n} of {n} due arrivals sent · ")


def test_load_held_trace_at_one_instant_short_of_its_due_is_not_held(tmp_path: Path) -> None:
    profile = _profile(tmp_path, "duration_s = 60", 'mode = "trace"\ntrace = "t.jsonl"', [0.0] * 10)
    counters = RunCounters(stop_ns=5 * S, schedule_end_ns=int(0.0001 * S), due=10, sent_in_window=5)
    _, warnings, load = analyse(profile, counters, Snapshot.merge([]))
    assert load["held"] is False
    assert _not_held(warnings) == ["load not held: 5 of the 10 arrivals due in the load's window were sent "
                                   "to the target"]


# -- 3. workers: the due counts add up ---------------------------------------------

@pytest.mark.slow
async def test_load_held_workers_due_adds_up(
        autojump_clock: trio.testing.MockClock, tmp_path: Path) -> None:
    from hopbench.driver._share import share_profile, split_load

    transport = fake_transport(Plan(gaps_s=(0.1,)))
    profile = _profile(tmp_path, "duration_s = 60\nseed = 4", 'mode = "rate"\nrate_rps = 10\narrival = "poisson"')
    parts, snaps = [], []
    for share in split_load(profile, 2):
        part = share_profile(profile, share)
        runner, rec = await _run(part, 1.2, load=share.load, request_budget=share.request_budget,
                                 seed_offset=share.index, arrival_offset_ns=share.arrival_offset_ns,
                                 transport_factory=transport)
        snap = rec.snapshot()
        snaps.append(snap)
        parts.append(Part(part, runner.counters(), snap,
                          WorkerInfo(share.index, "h", 1, "done", None, {"rate_rps": share.load.rate_rps})))
    total = Snapshot.merge(snaps)
    doc = judge(profile, parts, total, None, {"started_at_unix_s": 1.0}, RunEnd(ended_at_unix_s=3.0)).to_json()
    dues = [p.counters.due for p in parts]
    assert all(d > 0 for d in dues)
    assert doc["load"]["due"] == sum(dues) == total.counter(ALL, "started")
    assert doc["load"]["sent"] == sum(p.counters.sent_in_window for p in parts)
    assert doc["load"]["held"] is True and not _not_held(doc["warnings"])
    assert RunCounters.from_json(parts[0].counters.to_json()).due == dues[0]  # shipped between processes


# -- 4. every stage of a staged run; a search's stage of record only --------------

_STAGES = [
    {"load": 10.0, "mode": "rate", "folder": "stage-00-r10", "held": True, "passed": True,
     "requested_rate_rps": 10.0, "achieved_rate_rps": 10.0, "due": 50, "sent": 50},
    {"load": 40.0, "mode": "rate", "folder": "stage-01-r40", "held": False, "passed": False,
     "requested_rate_rps": 40.0, "achieved_rate_rps": 30.0, "due": 200, "sent": 150},
    {"load": 20.0, "mode": "rate", "folder": "stage-02-r20", "held": True, "passed": True,
     "requested_rate_rps": 20.0, "achieved_rate_rps": 20.0, "due": 100, "sent": 100},
]


def _staged(kind: str, stages: list[dict[str, Any]] = _STAGES, record: int = 2) -> dict[str, Any]:
    rec = stages[record]
    load = {k: rec[k] for k in ("requested_rate_rps", "achieved_rate_rps", "due", "sent")}
    return {"complete": True, "saturated": False, "warnings": [],
            "headline": {"started": 100, "completed": 100},
            "scopes": {"all": {"metrics": {"ttft": {"count": 100, "p50": 10.0}}, "counters": {"started": 100,
                                                                                               "completed": 100}}},
            "load": dict(load, mode="rate", held=rec["held"]), "stage_of_record": rec["folder"],
            "stages_kind": kind, "stages": stages}


def test_load_held_gate_fails_a_staged_run_whose_any_stage_did_not_hold() -> None:
    # breaker: [[stage]] 10, 40, 20 requests/s; the 40/s stage sent 150 of its 200 arrivals,
    # the gate judged only the stage of record (20/s, held) and passed
    c = next(c for c in evaluate_gate(_staged("stages"), {"ttft.p50": "<= 1s"}).checks
             if c.name == "run.load_held")
    assert not c.passed
    assert c.detail == "stage stage-01-r40: load not held: 150 of 200 due arrivals sent (30.00 of 40.00 requests/s)"
    allowed = evaluate_gate(_staged("stages"), {"ttft.p50": "<= 1s"}, allow_load_not_held=True)
    assert allowed.passed
    # a folder written before stages_kind: its load shape says "stages"
    old = _staged("stages")
    del old["stages_kind"]
    old["resolved_load"] = {"load.mode": "stages"}
    assert not evaluate_gate(old, {"ttft.p50": "<= 1s"}).passed
    # a stage entry without the new figures: its own load and achieved rate
    bare = [dict(s) for s in _STAGES]
    for k in ("requested_rate_rps", "due", "sent"):
        bare[1].pop(k)
    c = next(c for c in evaluate_gate(_staged("stages", bare), {"ttft.p50": "<= 1s"}).checks
             if c.name == "run.load_held")
    assert c.detail == "stage stage-01-r40: load not held: 30.00 of 40.00 requests/s sent"


def test_load_held_gate_names_the_record_first_then_counts_the_others() -> None:
    stages = [dict(s) for s in _STAGES]
    stages[0]["held"] = False
    stages[2] = dict(stages[2], held=False, sent=80, achieved_rate_rps=16.0)
    c = next(c for c in evaluate_gate(_staged("stages", stages), {"ttft.p50": "<= 1s"}).checks
             if c.name == "run.load_held")
    assert not c.passed and c.detail == (
        "stage of record stage-02-r20: load not held: 80 of 100 due arrivals sent (16.00 of 20.00 requests/s); "
        "and 2 more stages not held: stage-00-r10, stage-01-r40")


def test_load_held_gate_a_search_judges_its_stage_of_record_only() -> None:
    # probes above the capacity are expected not to hold their load
    report = evaluate_gate(_staged("search"), {"ttft.p50": "<= 1s"})
    c = next(c for c in report.checks if c.name == "run.load_held")
    assert report.passed and c.passed
    assert c.detail == "stage of record stage-02-r20: load held: 100 of 100 due arrivals sent (20.00 of 20.00 requests/s)"


def test_load_held_stage_probe_keeps_the_figures_the_gate_quotes() -> None:
    from hopbench.driver._search import stage_probe

    load = {"mode": "rate", "held": False, "requested_rate_rps": 40.0, "achieved_rate_rps": 30.0,
            "due": 200, "sent": 150, "max_in_flight": 100, "max_in_flight_hits": 3}
    p = stage_probe(40.0, {"load": load, "complete": True})
    assert p.figures["held"] is False and "load not held" in p.reasons
    assert load_phrase(p.figures) == load_phrase(load) == (
        "150 of 200 due arrivals sent (30.00 of 40.00 requests/s), 3 arrivals dropped at max_in_flight = 100")


# -- 5. one phrase for the terminal, report.html and the gate ----------------------

@pytest.mark.parametrize("load", [
    {"mode": "rate", "requested_rate_rps": 15.0, "achieved_rate_rps": 5.5, "due": 101, "sent": 44,
     "max_in_flight": 5, "max_in_flight_hits": 57, "schedule_lag_p99_ms": 1.0, "held": False},
    {"mode": "concurrency", "requested_concurrency": 16, "mean_busy": 10.2, "held": False},
    {"mode": "trace", "requested_rate_rps": None, "achieved_rate_rps": None, "due": 3, "sent": 2,
     "schedule_lag_p99_ms": 1.0, "held": False},
])
def test_load_held_gate_and_terminal_share_one_phrase(load: dict[str, Any]) -> None:
    phrase = load_phrase(load)
    assert phrase
    c = next(c for c in evaluate_gate({"load": load, "complete": True, "headline": {"started": 1, "completed": 1},
                                       "scopes": {"all": {"metrics": {"ttft": {"count": 1, "p50": 1.0}}}}},
                                      {"ttft.p50": "<= 1s"}).checks if c.name == "run.load_held")
    assert c.detail == f"load not held: {phrase}"
    text = load_text(load)
    assert text is not None and (text == phrase or text.startswith(phrase + " · "))


# -- sessions: the arrivals are sessions, not their turns ------------------------------

@pytest.mark.slow
async def test_load_held_open_loop_sessions_count_sessions_not_their_later_turns(
        autojump_clock: trio.testing.MockClock, tmp_path: Path) -> None:
    # breaker (real llmock): rate_rps = 4 sessions/s of 4 turns read "load: 9.50 of 4.00
    # requests/s sent", and a shortfall of sessions would have hidden behind later turns
    transport = fake_transport(Plan(gaps_s=(0.05,)))
    profile = _session_profile(tmp_path, 4, 4)
    lines: list[dict[str, Any]] = []
    runner, rec = await _run(profile, 1.9, "s", on_stream=lines.append, transport_factory=transport)
    _, warnings, load = analyse(profile, runner.stats, rec.snapshot())
    firsts = [x for x in lines if x["turn"] == 1]
    later = [x for x in lines if x["turn"] > 1 and x["start_ns"] < 1.9 * S]
    assert len(firsts) == 8 and later  # sessions at 0, 0.25, ..., 1.75 s; their turns after
    assert load["due"] == load["sent"] == 8 and load["later_turns_sent"] == len(later)
    assert runner.stats.sent_measured == 8 + len(later)  # the gauge counts every request written
    assert load["achieved_rate_rps"] == load["arrival_rate_rps"] == round(8 / 1.9, 3) and load["held"] is True
    assert not _not_held(warnings)
    assert load_phrase(load) == f"8 of 8 due arrivals sent (4.21 of 4.00 requests/s), and {len(later)} later session turns"
    counters = rec.snapshot().scopes["s"].counters
    assert counters["session.later_turns_sent"] == counters["session.later_turns_started"] == len(later)


def test_load_held_a_staged_run_warns_of_every_stage_that_did_not_hold(tmp_path: Path) -> None:
    # the terminal, report.html and summary.json's warnings were the stage of record's
    # alone: a middle stage that dropped arrivals was named only by `hopbench gate`
    from hopbench.driver._common import RunOutcome
    from hopbench.driver._stages import run_stages

    path = tmp_path / "p.toml"
    path.write_text('[run]\nduration_s = 5\n[load]\nconcurrency = 1\n' + _TARGET
                    + "[[stage]]\nrate_rps = 10\nduration_s = 2\n[[stage]]\nrate_rps = 40\nduration_s = 2\n"
                    "[[stage]]\nrate_rps = 20\nduration_s = 2\n")
    profile = load_profile(path)

    def runner(p: Profile, out_dir: Path, progress: Any = None) -> RunOutcome:
        rate = p.load.rate_rps
        held = rate != 40
        warnings = [] if held else ["load not held: 150 of the 200 arrivals due in the load's window were sent"]
        load = {"mode": "rate", "requested_rate_rps": rate, "achieved_rate_rps": rate if held else 30.0,
                "due": int(rate * 5), "sent": int(rate * 5) if held else 150, "held": held}
        summary = {"load": load, "warnings": warnings, "saturated": False, "complete": True,
                   "scopes": {}}
        return RunOutcome(summary, out_dir, True, None)

    out = run_stages(profile, tmp_path / "out", runner)
    assert out.summary["stage_of_record"] == "stage-03-r20"
    assert out.summary["load"]["held"] is True  # the stage of record's
    assert out.summary["warnings"] == [
        "stage stage-02-r40: load not held: 150 of the 200 arrivals due in the load's window were sent"]


def test_gate_not_saturated_judges_every_stage_of_a_staged_run_not_a_searchs_probes() -> None:
    # reviewer: a [[stage]] run whose 3,000/s stage saturated the client passed
    # run.not_saturated (only the stage of record was read), while run.load_held failed it
    stages = [dict(s) for s in _STAGES]
    stages[1]["saturated"] = True
    checks = {c.name: c for c in evaluate_gate(_staged("stages", stages), {"ttft.p50": "<= 1s"}).checks}
    c = checks["run.not_saturated"]
    assert not c.passed and c.detail == "load generator saturated in stage stage-01-r40"
    allowed = evaluate_gate(_staged("stages", stages), {"ttft.p50": "<= 1s"}, allow_saturated=True)
    assert next(c for c in allowed.checks if c.name == "run.not_saturated").passed
    # a search's probe past capacity may saturate the client: only its stage of record counts
    search = {c.name: c for c in evaluate_gate(_staged("search", stages), {"ttft.p50": "<= 1s"}).checks}
    assert search["run.not_saturated"].passed
    # the stage of record's own saturation is the top-level flag, said once
    top = _staged("stages", [dict(s, saturated=True) if i == 2 else s for i, s in enumerate(_STAGES)])
    top["saturated"], top["warnings"] = True, ["load generator saturated: loop lag p99 40 ms"]
    c = next(c for c in evaluate_gate(top, {"ttft.p50": "<= 1s"}).checks if c.name == "run.not_saturated")
    assert not c.passed and c.detail == "load generator saturated: loop lag p99 40 ms"


# -- the window's edges: one half-open window [start, stop) on the due times -------

async def test_load_held_an_arrival_due_before_the_stop_and_written_after_it_is_sent(
        autojump_clock: trio.testing.MockClock, tmp_path: Path) -> None:
    # breaker: 1/s for 2.5 s, each connect 0.7 s: the arrival due at 2.0 s was written at 2.7 s,
    # after the stop; due counted it, sent did not: "load not held: 2 of the 3 arrivals due"
    transport = fake_transport(Plan(connect_s=0.7, gaps_s=(0.05,)))
    profile = _profile(tmp_path, "duration_s = 2.5", 'mode = "rate"\nrate_rps = 1\narrival = "constant"')
    lines: list[dict[str, Any]] = []
    runner, rec = await _run(profile, on_stream=lines.append, transport_factory=transport)
    _, warnings, load = analyse(profile, runner.stats, rec.snapshot())
    assert runner.stats.stop_ns == int(2.5 * S)
    assert sorted(x["start_ns"] for x in lines) == [0, 1 * S, 2 * S]  # all three written (in the grace)
    assert runner.stats.sent_measured == 2  # the gauge: written before the stop
    assert load["due"] == load["sent"] == 3 and load["arrival_rate_rps"] == round(3 / 2.5, 3)
    assert load["held"] is True and not _not_held(warnings)


async def test_load_held_an_arrival_due_in_the_warm_up_and_written_after_it_is_not_sent(
        autojump_clock: trio.testing.MockClock, tmp_path: Path) -> None:
    # the other edge: the arrival due at 0 s (warm-up to 0.5 s), written at 0.7 s, is neither
    # due nor sent; those due at 1, 2, 3 s are (the one at 3 s written at 3.7 s, after the stop)
    transport = fake_transport(Plan(connect_s=0.7, gaps_s=(0.05,)))
    profile = _profile(tmp_path, "duration_s = 3.5\nwarmup_s = 0.5",
                       'mode = "rate"\nrate_rps = 1\narrival = "constant"')
    runner, rec = await _run(profile, transport_factory=transport)
    _, warnings, load = analyse(profile, runner.stats, rec.snapshot())
    assert load["due"] == load["sent"] == 3 and runner.stats.arrivals_in_window == 3
    assert load["held"] is True and not _not_held(warnings)


async def test_load_held_an_arrival_taken_up_at_the_stop_instant_is_in_no_figure(
        autojump_clock: trio.testing.MockClock, tmp_path: Path) -> None:
    # breaker: 4/s stopped at 2.0 s: the loop took up the arrival due at 2.0 s before it saw the
    # stop; arrival_rate_rps counted it (9 / 2 s = 4.5) where due did not (8: 4.0)
    transport = fake_transport(Plan(gaps_s=(0.05,)))
    profile = _profile(tmp_path, "duration_s = 60", 'mode = "rate"\nrate_rps = 4\narrival = "constant"')
    lines: list[dict[str, Any]] = []
    runner, rec = await _run(profile, 2.0, on_stream=lines.append, transport_factory=transport)
    _, warnings, load = analyse(profile, runner.stats, rec.snapshot())
    assert runner.stats.stop_ns == 2 * S
    assert max(x["start_ns"] for x in lines) == 2 * S  # (it was taken up: the breaker's condition)
    assert load["due"] == load["sent"] == 8
    assert load["arrival_rate_rps"] == load["achieved_rate_rps"] == 4.0
    assert load["held"] is True and not _not_held(warnings)


async def test_load_held_a_later_turn_due_before_the_stop_and_written_after_it_counts_apart(
        autojump_clock: trio.testing.MockClock, tmp_path: Path) -> None:
    # breaker: a session at 0 s (connect 0.3 s, done at 0.4 s, think 0.5 s): its second turn due
    # at 0.9 s was written at 1.2 s, after the stop at 0.95 s. It was subtracted from a sent count
    # that had never held it: "load not held: 0 of the 1 arrivals due"
    transport = fake_transport(Plan(connect_s=0.3, gaps_s=(0.05,),
                                                                         last_s=0.05))
    profile = _session_profile(tmp_path, 1, 2)
    lines: list[dict[str, Any]] = []
    runner, rec = await _run(profile, 0.95, "s", on_stream=lines.append, transport_factory=transport)
    _, warnings, load = analyse(profile, runner.stats, rec.snapshot())
    assert [x["turn"] for x in lines] == [1, 2] and lines[1]["start_ns"] == pytest.approx(0.9 * S, abs=1000)
    assert rec.snapshot().scopes["s"].counters["session.later_turns_sent"] == 1
    assert load["due"] == load["sent"] == 1 and load["later_turns_sent"] == 1
    assert load["held"] is True and not _not_held(warnings)


def test_load_held_window_count_is_half_open_on_due_times() -> None:
    # hopbench.engine._schedule, pure: measured from 1 s, deadline at 10 s
    w = WindowCount(1 * S, 10 * S)
    w.note(TAKEN, 0, 0)                      # warm-up: never
    w.note(TAKEN, 2 * S, 2 * S + 5)          # before a later stop: counted now
    w.note(TAKEN, 3 * S, 3 * S)              # at the instant it is noted: the stop may fall on it
    assert w.counts == [1, 0, 0]
    w.note(SENT, 4 * S, 4 * S)               # the clock passed 3 s: it was before the stop
    assert w.counts == [2, 0, 0]
    w.stop(4 * S)                            # [1 s, 4 s): 4 s is out
    assert w.counts == [2, 0, 0]
    w.note(SENT, 2 * S, 5 * S)               # written after the stop, due before it: sent
    w.note(LATER_SENT, 3 * S + 1, 6 * S)
    w.note(SENT, 4 * S, 6 * S)               # due at the stop: out
    w.stop(9 * S)                            # (a second stop changes nothing)
    w.note(SENT, 5 * S, 9 * S)
    assert w.counts == [2, 1, 1]
    at = WindowCount(0)                      # the stop at the very instant an arrival was noted
    at.note(TAKEN, 3 * S, 3 * S)
    at.stop(3 * S)
    assert at.counts == [0, 0, 0]
    m = WindowCount(0)                       # (a fake clock notes at the due instant: kept until passed)
    for t in range(1, 6):
        m.note(TAKEN, t, t)
    assert m.counts == [4, 0, 0] and len(m._undecided) == 1
    d = WindowCount(0, 2 * S)                # the deadline bounds it before the stop is read
    d.note(LATER_SENT, 2 * S, 3 * S)
    d.note(LATER_SENT, 2 * S - 1, 3 * S)
    assert d.counts == [0, 0, 1]


# -- a schedule that runs out by itself, and a client behind it (WindowCount.end) --------

def _late_pacer(late_s: float) -> type[Pacer]:
    """A pacer (``LoadRunner``'s ``pacer_factory``) that takes each arrival up
    ``late_s`` after the one before was (a client slower than its schedule)."""
    class LatePacer(Pacer):
        async def wait(self, deadline_ns: int) -> None:
            await super().wait(deadline_ns)
            await trio.sleep(late_s)

    return LatePacer


async def test_load_held_late_trace_counts_only_what_was_sent_in_its_window(
        autojump_clock: trio.testing.MockClock, tmp_path: Path) -> None:
    # 20 entries at 10/s (0 .. 1.9 s): the window ends one gap after the last, at 2.0 s. The
    # client takes each up 0.15 s after the one before: at 0.15, 0.30, ..., 3.0 s. It wrote
    # all 20, 13 of them taken up (and written) in the window. Before: "20 of 20 due arrivals sent (10.00 of 10.00
    # requests/s)", held, with every request up to 1.1 s late (seen at 1,000/s with two
    # workers on a busy machine: "6,000 of 6,000 ... schedule lag p99 2,905 ms")
    transport = fake_transport(Plan(gaps_s=(0.01,)))
    profile = _profile(tmp_path, "", 'mode = "trace"\ntrace = "t.jsonl"',
                       [100.0 * i for i in range(20)])
    runner, rec = await _run(profile, transport_factory=transport, pacer_factory=_late_pacer(0.15))
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
        autojump_clock: trio.testing.MockClock, tmp_path: Path) -> None:
    # the same trace on time: every send is before its floor; the last one at 1.9 s < 2.0 s
    transport = fake_transport(Plan(gaps_s=(0.01,)))
    profile = _profile(tmp_path, "", 'mode = "trace"\ntrace = "t.jsonl"',
                       [100.0 * i for i in range(20)])
    runner, rec = await _run(profile, transport_factory=transport)
    _, warnings, load = analyse(profile, runner.stats, rec.snapshot())
    assert load["due"] == load["sent"] == 20 and load["achieved_rate_rps"] == 10.0
    assert load["held"] is True and not [w for w in warnings if "load not held" in w]


@pytest.mark.slow
async def test_load_held_late_request_budget_is_judged_as_the_same_trace(
        autojump_clock: trio.testing.MockClock, tmp_path: Path) -> None:
    # 20 requests at 10/s, each taken up 0.15 s after the one before: 13 in the window. A
    # budget's end is not a failure to hold load (its window ends one gap after its last
    # arrival), but a client behind it is: the same schedule as a trace without loop reads
    # the same. breaker: 400 requests at 800/s read "240 of 400 due arrivals sent (480.0 of
    # 800.0 requests/s)", held null, no warning, and passed the gate's run.load_held
    # where the same trace was not held ("384 of 800")
    transport = fake_transport(Plan(gaps_s=(0.01,)))
    budget = _profile(tmp_path, "requests = 20", 'mode = "rate"\nrate_rps = 10\narrival = "constant"')
    trace = _profile(tmp_path, "", 'mode = "trace"\ntrace = "t.jsonl"', [100.0 * i for i in range(20)])
    seen = []
    for profile in (budget, trace):
        runner, rec = await _run(profile, transport_factory=transport, pacer_factory=_late_pacer(0.15))
        _, warnings, load = analyse(profile, runner.stats, rec.snapshot())
        assert runner.stats.arrivals == 20
        assert load["due"] == 20 and load["sent"] == 13 and load["achieved_rate_rps"] == 6.5  # before: 20, 10.0
        assert load["held"] is False
        (warning,) = _not_held(warnings)
        assert warning.startswith("load not held: 13 of the 20 arrivals due in the load's window were sent")
        seen.append(load_text(load))
    assert seen[0] == seen[1] and seen[0] is not None and seen[0].startswith("13 of 20 due arrivals sent (6.50 of 10.00")


@pytest.mark.slow
@pytest.mark.parametrize("run", ["", "duration_s = 60"])
async def test_load_held_window_of_a_trace_that_ran_out_ends_one_gap_after_its_last_arrival(
        autojump_clock: trio.testing.MockClock, tmp_path: Path,
        run: str) -> None:
    # docs/results/in-flight.md, "Load held": one mean gap after the last arrival was due, whether the
    # streams drained before that or after it. breaker: a trace at 0/1000/2000 ms whose
    # streams drained by 2.05 s read a 2.048 s window and a requested rate of 1.465/s; the
    # window is the trace's own period (2 s + the mean gap: 3 s, as a looped replay's)
    transport = fake_transport(Plan(gaps_s=(0.25,)))
    trace = [0.0, 1000.0, 2000.0]
    profile = _profile(tmp_path, run or "requests = 3", 'mode = "trace"\ntrace = "t.jsonl"', trace)
    runner, rec = await _run(profile, transport_factory=transport)
    _, warnings, got = analyse(profile, runner.stats, rec.snapshot())
    assert runner.stats.stop_ns < 3 * S                           # the streams drained before it
    assert got["load_window_s"] == 3.0 and got["trace"]["scheduled"] == 3
    assert got["requested_rate_rps"] == got["achieved_rate_rps"] == 1.0
    assert got["due"] == got["sent"] == 3 and got["held"] is True and not _not_held(warnings)
    looped = _profile(tmp_path, "duration_s = 60", 'mode = "trace"\ntrace = "t.jsonl"\nloop = true', trace)
    assert looped.load.trace.period_ms == 3000.0


def test_load_held_window_of_a_budget_is_not_cut_by_the_drain(tmp_path: Path) -> None:
    # requests = 1 at 1/s: the dispatcher thread plans an arrival ahead of its time, the
    # stream ended by 0.75 s; breaker: a 0.753 s window, "1.33 of 1.00 requests/s"
    profile = _profile(tmp_path, "requests = 1", 'mode = "rate"\nrate_rps = 1\narrival = "constant"')
    counters = RunCounters(stop_ns=int(0.753 * S), schedule_end_ns=S, due=1, sent_in_window=1,
                           arrivals_in_window=1)
    _, warnings, load = analyse(profile, counters, Snapshot.merge([]))
    assert load["load_window_s"] == 1.0 and load["achieved_rate_rps"] == load["requested_rate_rps"] == 1.0
    assert load["held"] is True and not _not_held(warnings)


@pytest.mark.slow
@pytest.mark.parametrize(("requests", "rate_rps"), [(1, 1), (2, 2)])
def test_load_held_window_of_a_budget_on_the_embedded_emulator(
        tmp_path: Path, requests: int, rate_rps: int) -> None:
    # the real path (the dispatcher thread, 127.0.0.1): breaker "requests = 1" at 1/s read a
    # 0.753 s window ("1.33 of 1.00 requests/s"), "requests = 2" at 2/s 0.752 s. The window's
    # end is the schedule's (the last arrival plus one gap), exact whatever the machine's load
    import json

    from hopbench.driver._single import run_profile

    path = tmp_path / "p.toml"
    path.write_text(f'[run]\nrequests = {requests}\n[load]\nmode = "rate"\nrate_rps = {rate_rps}\n'
                    'arrival = "constant"\n[target]\nembedded = true\n[[scenario]]\nprotocol = "chat"\n'
                    'model = "m"\n[emulator]\nttft_ms = 5\ntokens_per_s = 2000\noutput_tokens = 8\nseed = 5\n')
    run_profile(load_profile(path), out_dir=tmp_path / "out")
    load = json.loads((tmp_path / "out" / "summary.json").read_text())["load"]
    assert load["load_window_s"] == 1.0
    assert load["requested_rate_rps"] == rate_rps
    assert load["due"] == requests and load["achieved_rate_rps"] == load["sent"] / 1.0


def test_load_held_window_ends_at_the_deadline_when_the_stop_is_read_late(tmp_path: Path) -> None:
    # breaker: run.duration_s = 1 at 800/s, the stop read 1.03-1.23 s into the run on a busy
    # loop: load_window_s 1.23, "287 of 800 requests/s" though 352 were sent in the 1 s window
    # (the due and sent counts were already bounded by the deadline: WindowCount, DueCount)
    profile = _profile(tmp_path, "duration_s = 1", 'mode = "rate"\nrate_rps = 800\narrival = "constant"')
    counters = RunCounters(stop_ns=int(1.23 * S), due=800, sent_in_window=352, arrivals_in_window=352)
    _, warnings, load = analyse(profile, counters, Snapshot.merge([]))
    assert load["load_window_s"] == 1.0 and load["achieved_rate_rps"] == load["arrival_rate_rps"] == 352.0
    assert load["measured_s"] == 1.23                                # how long the run measured: as read
    assert _not_held(warnings) == ["load not held: 352 of the 800 arrivals due in the load's window were "
                                   "sent to the target (352.0 requests/s, 800 requested)"]
    # with a warm-up: [warm-up end, deadline)
    warm = _profile(tmp_path, "duration_s = 3\nwarmup_s = 1", 'mode = "rate"\nrate_rps = 10')
    _, _, load = analyse(warm, RunCounters(stop_ns=int(3.2 * S), due=20, sent_in_window=20), Snapshot.merge([]))
    assert load["load_window_s"] == 2.0 and load["achieved_rate_rps"] == 10.0
    # a budget that ran out after the deadline: the deadline still bounds it
    both = _profile(tmp_path, "duration_s = 1\nrequests = 10", 'mode = "rate"\nrate_rps = 5')
    _, _, load = analyse(both, RunCounters(stop_ns=int(1.1 * S), schedule_end_ns=int(1.2 * S), due=5,
                                           sent_in_window=5), Snapshot.merge([]))
    assert load["load_window_s"] == 1.0


def test_window_count_takes_up_to_the_end_of_a_schedule_that_ran_out() -> None:
    # hopbench.engine._schedule.WindowCount, pure: the window from 0; a finite schedule's end
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
        autojump_clock: trio.testing.MockClock, tmp_path: Path) -> None:
    # a stop during warm-up (a signal in start-up, a target down at the start): nothing was
    # due in the window, no user was measured busy; both read "held": true
    transport = fake_transport(Plan(gaps_s=(0.01,)))
    for load_text in ('mode = "rate"\nrate_rps = 10', "concurrency = 2\nramp_up_s = 0"):
        profile = _profile(tmp_path, "duration_s = 60\nwarmup_s = 5", load_text)
        runner, rec = await _run(profile, 1, transport_factory=transport)
        _, warnings, load = analyse(profile, runner.stats, rec.snapshot())
        assert load["held"] is None, (load_text, load)
        assert not [w for w in warnings if "load not held" in w]


def test_the_rest_of_a_very_high_rate_is_counted_not_walked() -> None:
    """A client far behind 1e9 requests/s: the stop reads at most WALK_MAX of the
    schedule's arrivals and counts the rest as the rate's mean count (walking
    30 million of them held the stop 25 s, deaf to signals)."""
    from hopbench.engine._schedule import WALK_MAX, Arrivals, DueCount

    class Counting(Arrivals):
        __slots__ = ("drawn",)

        def __next__(self) -> int:
            self.drawn = getattr(self, "drawn", 0) + 1
            return super().__next__()

    for poisson in (True, False):
        rest = Counting(0.0, 1e9, poisson, random.Random(1))
        due = DueCount(0)
        stop = 2 * 10**9  # 2 s: 2e9 arrivals due
        n = due.at_stop(stop, rest)
        assert rest.drawn <= WALK_MAX + 1
        assert abs(n - 2e9) < 2e9 * 1e-3
        limited = DueCount(0).at_stop(stop, Counting(0.0, 1e9, poisson, random.Random(1)), limit=250_000)
        assert limited == 250_000  # a run.requests budget still bounds it
    small = DueCount(0).at_stop(10**9, Arrivals(0.0, 1000.0, False, random.Random(1)))
    assert small == 1000  # under WALK_MAX: every arrival read, exactly


@pytest.mark.slow
async def test_load_held_a_request_budget_is_judged_and_counts_users_closing(
        autojump_clock: trio.testing.MockClock, tmp_path: Path) -> None:
    # issue 39: a run.requests closed loop whose users spend 0.8 s of each 1 s closing a
    # finished stream holds ~0.8 of 4 users: it warns as a duration-bounded run does, and
    # the users closing are counted in the message
    slow_close = fake_transport(Plan(gaps_s=(0.1,), last_s=0.1, close_s=0.8))
    for run in ("requests = 40", "duration_s = 10"):
        profile = _profile(tmp_path, run, "concurrency = 4\nramp_up_s = 0")
        runner, rec = await _run(profile, transport_factory=slow_close)
        _, warnings, load = analyse(profile, runner.stats, rec.snapshot())
        (warned,) = _not_held(warnings)
        assert load["held"] is False, (run, load)
        assert warned.startswith("load not held: 0.8 of 4 users busy with the target on average"), warned
        assert ("while the request budget lasted" in warned) == run.startswith("requests")
        assert "and 3.2 closing a finished stream on the client side" in warned, warned


@pytest.mark.slow
async def test_load_held_a_request_budget_that_held_is_not_cut_by_its_drain(
        autojump_clock: trio.testing.MockClock, tmp_path: Path) -> None:
    # the users drain one by one after the last request is taken: not a failure to hold load
    profile = _profile(tmp_path, "requests = 41", "concurrency = 4\nramp_up_s = 0")
    runner, rec = await _run(profile, transport_factory=fake_transport(Plan()))
    _, warnings, load = analyse(profile, runner.stats, rec.snapshot())
    assert load["held"] is True and not _not_held(warnings), (load, warnings)
    assert load["mean_busy"] == pytest.approx(4.0, abs=0.01)


def test_load_held_arrivals_the_target_refused_are_the_targets(tmp_path: Path) -> None:
    # issue 39: "30 of the 60 arrivals were sent" read as the client's fault when the target
    # refused the other 30 connections: the warning says whose they were
    from hopbench.measure._recorder import ScopeSnapshot

    profile = _profile(tmp_path, "duration_s = 6", 'mode = "rate"\nrate_rps = 10\narrival = "constant"')
    stats = _runner.RunStats(stop_ns=6 * S, due=60, arrivals_in_window=60, sent_in_window=30)

    def warned(**counters: int) -> str:
        scope = ScopeSnapshot({"started": 60, "completed": 30, **counters}, {})
        _, warnings, load = analyse(profile, stats, Snapshot({"chat-m": scope, ALL: scope}))
        assert load["held"] is False
        (w,) = _not_held(warnings)
        return w

    assert warned(connect_error=30, **{"connect_error.refused": 30}) == (
        "load not held: 30 of the 60 arrivals due in the load's window were sent to the target (5.0 requests/s, "
        "10 requested); 30 of the 30 not sent: the target refused or failed their connections "
        "(connect_error.refused 30)")
    assert warned(connect_error=20, **{"connect_error.refused": 20}).endswith(
        "20 of the 30 not sent: the target refused or failed their connections (connect_error.refused 20); "
        "the other 10 the client did not send in time")
    # hopbench's own file-descriptor limit is the client's, not the target's
    assert warned(connect_error=30, **{"connect_error.fd_limit": 30}).endswith("(5.0 requests/s, 10 requested)")


async def test_load_held_closed_loop_users_thinking_between_turns_hold_their_load(
        autojump_clock: trio.testing.MockClock, tmp_path: Path) -> None:
    # issue 39 follow-up: profiles/sessions.toml warned "load not held" on an idle machine:
    # 4 users whose sessions spend 3 think times of 0.5 s per 4 streams of 0.5 s are busy
    # with the target 4/7 of the time and thinking the other 3/7; thinking holds the load
    path = tmp_path / "p.toml"
    path.write_text('[run]\nduration_s = 10\n[load]\nconcurrency = 4\nramp_up_s = 0\n'
                    '[target]\nurl = "http://127.0.0.1:9"\n[[scenario]]\nname = "s"\nprotocol = "chat"\n'
                    'model = "m"\nprompts = ["p"]\nsession = { turns = 4, think_time_s = 0.5 }\n')
    profile = load_profile(path)
    runner, rec = await _run(profile, scope="s", transport_factory=fake_transport(Plan(gaps_s=(0.25,))))
    _, warnings, load = analyse(profile, runner.stats, rec.snapshot())
    assert load["mean_busy"] == pytest.approx(4 * 4 / 7, abs=0.1), load
    assert load["mean_thinking"] == pytest.approx(4 * 3 / 7, abs=0.1), load
    assert load["mean_busy"] + load["mean_thinking"] == pytest.approx(4.0, abs=0.02)
    assert load["held"] is True and not _not_held(warnings), warnings
    assert load_phrase(load) == (f"{load['mean_busy']:.2f} of 4 users busy with the target and "
                                 f"{load['mean_thinking']:.2f} thinking between session turns on average")
