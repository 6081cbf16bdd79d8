"""Client cancellation (hopbench.workload._cancel): the scenario key, the seeded choice,
the runner's cancel under MockClock, the join with the upstream's record, and
the whole path against the embedded emulator on 127.0.0.1."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from hopbench.engine import _runner
from hopbench.workload._cancel import (CancelSpec, ClientCancel, chooses, join_cancels, join_record,
                              record_join)
from hopbench._errors import ProfileError
from hopbench.measure._outcomes import rate_value
from hopbench.config._profile import parse_profile
from hopbench.measure._recorder import ALL, Recorder
from hopbench.driver._single import run_profile

from _fake_transport import Plan, fake_transport

S = 1_000_000_000
MS = 1_000_000

_BASE = ('[run]\nrequests = 4\n[load]\nconcurrency = 1\n[target]\nurl = "http://127.0.0.1:9"\n'
         '[[scenario]]\nprotocol = "chat"\nmodel = "m"\n')


def _profile(cancel: str) -> Any:
    return parse_profile(_BASE + cancel + "\n", "p.toml", env={})


# -- the key -------------------------------------------------------------------

def test_cancel_key_parses_both_forms() -> None:
    assert _profile("cancel = { fraction = 0.2, after_events = 10 }").scenarios[0].cancel == \
        CancelSpec(0.2, 10, None)
    assert _profile("cancel = { after_ms = 250 }").scenarios[0].cancel == CancelSpec(1.0, None, 250 * MS)
    assert _profile("").scenarios[0].cancel is None


@pytest.mark.parametrize(("cancel", "words"), [
    ("cancel = { fraction = 0.2 }", "exactly one of after_events"),
    ("cancel = { after_events = 3, after_ms = 5 }", "got both"),
    ("cancel = { fraction = 0, after_events = 3 }", "positive"),
    ("cancel = { fraction = 1.5, after_events = 3 }", "(0, 1]"),
    ("cancel = { after_events = 0 }", "after_events"),
    ("cancel = { after_ms = -1 }", "after_ms"),
    ("cancel = { after_event = 3 }", "after_event"),
    ("cancel = 3", "expected a table"),
])
def test_cancel_key_bad_input_names_the_key(cancel: str, words: str) -> None:
    with pytest.raises(ProfileError) as err:
        _profile(cancel)
    text = str(err.value)
    assert "p.toml:" in text and "scenario[0].cancel" in text and words in text


def test_cancel_choice_is_seeded_and_near_the_fraction() -> None:
    spec = CancelSpec(0.2, 3)
    a = [chooses(spec, random.Random("s")) for _ in range(1)]
    rng1, rng2 = random.Random("s"), random.Random("s")
    draws1 = [chooses(spec, rng1) for _ in range(2000)]
    draws2 = [chooses(spec, rng2) for _ in range(2000)]
    assert draws1 == draws2 and a
    assert 0.15 < sum(draws1) / 2000 < 0.25
    assert not chooses(None, rng1)


def test_cancel_rates_leave_client_cancels_out() -> None:
    counters = {"started": 10, "completed": 6, "client_cancelled": 4}
    assert rate_value("completion_rate", counters, {}, None) == (1.0, 6, 6)
    assert rate_value("error_rate", counters, {}, None) == (0.0, 0, 6)


# -- the runner, under the fake clock ---------------------------------------------

async def _run(plan: Plan, cancel: str,
               requests: int = 4) -> tuple[Recorder, list[dict[str, Any]], _runner.LoadRunner]:
    transport = fake_transport(plan)
    profile = parse_profile(_BASE.replace("requests = 4", f"requests = {requests}") + cancel + "\n",
                            "p.toml", env={})
    rec = Recorder(["chat-m"])
    lines: list[dict[str, Any]] = []
    runner = _runner.LoadRunner(profile, "http://127.0.0.1:9", rec, Recorder(["chat-m"]), on_stream=lines.append,
                                transport_factory=transport)
    await runner.run()
    return rec, lines, runner


async def test_cancel_after_events_stops_reading_there(autojump_clock: trio.testing.MockClock) -> None:
    plan = Plan(head_s=0.5, gaps_s=(0.25,) * 10, last_s=0.25)
    rec, lines, runner = await _run(plan, "cancel = { after_events = 3 }")
    assert [(x["outcome"], x["detail"]) for x in lines] == [("client_cancelled", "after_events")] * 4
    for x in lines:
        assert x["content_events"] == 3
        assert x["end_ns"] - x["sent_ns"] == int(1.25 * S)  # head + 3 gaps: closed at the third event
    snap = rec.snapshot()
    assert snap.counter(ALL, "client_cancelled") == 4 and snap.counter(ALL, "completed") == 0
    # what came before the cancel counts; the stream's end does not
    assert snap.histogram(ALL, "ttft").count == 4 and snap.histogram(ALL, "itl").count == 8
    assert snap.histogram(ALL, "e2e").count == 0
    assert [c.events_read for c in runner.cancels] == [3] * 4
    assert len({c.request_id for c in runner.cancels}) == 4


async def test_cancel_after_ms_fires_exactly_even_in_a_silence(autojump_clock: trio.testing.MockClock) -> None:
    # one event at 0.75 s, then a 10 s silence: the cancel at 1 s must not wait for a read
    plan = Plan(head_s=0.5, gaps_s=(0.25, 10.0), last_s=0.25)
    rec, lines, _ = await _run(plan, "cancel = { after_ms = 1000 }", requests=2)
    for x in lines:
        assert (x["outcome"], x["detail"]) == ("client_cancelled", "after_ms")
        assert x["end_ns"] - x["sent_ns"] == 1 * S
        assert x["content_events"] == 1
    # before the head: the client leaves while waiting for it
    rec, lines, _ = await _run(Plan(head_s=5.0), "cancel = { after_ms = 1000 }", requests=1)
    assert [(x["outcome"], x["end_ns"] - x["sent_ns"]) for x in lines] == [("client_cancelled", 1 * S)]


async def test_cancel_after_the_end_is_no_cancel(autojump_clock: trio.testing.MockClock) -> None:
    # the stream ends (3 events) before either limit: it completed
    plan = Plan(head_s=0.5, gaps_s=(0.25,) * 3, last_s=0.25)
    _, lines, runner = await _run(plan, "cancel = { after_events = 5 }", requests=2)
    assert [x["outcome"] for x in lines] == ["completed"] * 2 and runner.cancels == []
    _, lines, _ = await _run(plan, "cancel = { after_ms = 60000 }", requests=2)
    assert [x["outcome"] for x in lines] == ["completed"] * 2


async def test_cancel_fraction_picks_a_share(autojump_clock: trio.testing.MockClock) -> None:
    plan = Plan(head_s=0.01, gaps_s=(0.01,) * 4, last_s=0.01)
    _, lines, _ = await _run(plan, "cancel = { fraction = 0.5, after_events = 2 }", requests=40)
    outcomes = [x["outcome"] for x in lines]
    n = outcomes.count("client_cancelled")
    assert 8 <= n <= 32 and outcomes.count("completed") == 40 - n
    _, again, _ = await _run(plan, "cancel = { fraction = 0.5, after_events = 2 }", requests=40)
    assert [x["outcome"] for x in again] == outcomes  # seeded


# -- the join ------------------------------------------------------------------------

def _truth(rid: str, t0: int, closed: int | None, end: str, ttft: int = 10 * MS,
           gaps: tuple[int, ...] = (5 * MS,) * 9) -> dict[str, Any]:
    return {"request_id": rid, "t0_mono_ns": t0, "client_closed_ns": closed, "end": end,
            "ttft_ns": ttft, "gaps_ns": list(gaps)}


def test_cancel_join_delay_wasted_tokens_and_runs_to_completion() -> None:
    t0 = 1_000 * S
    cancels = [ClientCancel("a", "s", t0 + 22 * MS, 3),   # noticed 3 ms later
               ClientCancel("b", "s", t0 + 22 * MS, 3),   # never noticed: ran on to the end
               ClientCancel("c", "s", t0, 0)]             # no line
    truths = [_truth("a", t0, 25 * MS, "client_closed", gaps=(5 * MS, 5 * MS)),
              _truth("b", t0, None, "completed"),
              {"request_id": "zz"}, {"no": "id"}]
    matches, unmatched = join_cancels(cancels, truths)
    assert [c.request_id for c in unmatched] == ["c"]
    a, b = matches
    # tokens at 10, 15, 20 ms (a) and 10..55 ms (b); the client left at 22 ms
    assert (a.delay_ns, a.wasted_tokens, a.upstream_completed) == (3 * MS, 0, False)
    assert (b.delay_ns, b.wasted_tokens, b.upstream_completed) == (None, 7, True)
    rec = Recorder(["s"])
    record_join(rec, matches, unmatched)
    snap = rec.snapshot()
    assert snap.counter("s", "cancel.matched") == 2 and snap.counter("s", "cancel.unmatched") == 1
    assert snap.counter("s", "cancel.wasted_tokens") == 7
    assert snap.counter("s", "cancel.upstream_completed") == 1
    assert snap.counter("s", "cancel.upstream_not_closed") == 1
    h = snap.histogram("s", "cancel_delay")
    assert h.count == 1 and h.percentile(50) == pytest.approx(3 * MS, rel=1e-3)


def test_cancel_join_an_upstream_that_had_finished_is_no_missed_cancel() -> None:
    """Only an upstream still writing when the client closed can show that a cancel did not arrive
    (issue 38: 36 of 47 "ran to their end" behind LiteLLM had finished a median 675 ms earlier)."""
    t0 = 1_000 * S
    cancels = [ClientCancel("done", "s", t0 + 80 * MS, 10),  # its last bytes at 60 ms: finished first
               ClientCancel("runs", "s", t0 + 22 * MS, 3)]   # still writing at 22 ms, ran to its end
    truths = [{**_truth("done", t0, None, "completed"), "final_write_ns": 60 * MS},
              {**_truth("runs", t0, None, "completed"), "final_write_ns": 60 * MS}]
    (done, runs), _ = join_cancels(cancels, truths)
    assert (done.finished_first, done.upstream_completed, done.wasted_tokens) == (True, False, 0)
    assert (runs.finished_first, runs.upstream_completed, runs.wasted_tokens) == (False, True, 7)
    rec = Recorder(["s"])
    record_join(rec, [done, runs], [])
    snap = rec.snapshot()
    assert snap.counter("s", "cancel.upstream_completed") == 1 and snap.counter("s", "cancel.upstream_not_closed") == 1
    assert snap.counter("s", "cancel.upstream_finished_first") == 1


def test_cancel_join_record_file_warns_about_missing_lines(tmp_path: Path) -> None:
    path = tmp_path / "record.jsonl"
    path.write_text(json.dumps(_truth("a", 0, 1 * MS, "client_closed")) + "\n{cut", encoding="utf-8")
    rec = Recorder(["s"])
    warnings = join_record(rec, [ClientCancel("a", "s", 0, 0), ClientCancel("b", "s", 0, 0)], path)
    assert len(warnings) == 1 and "1 of 2" in warnings[0] and "record.jsonl" in warnings[0]
    assert join_record(rec, [], path) == []


# -- end to end on the embedded emulator ------------------------------------------------

_E2E = """
[run]
requests = {n}
seed = 5
[load]
concurrency = 4
[target]
embedded = true
[emulator]
ttft_ms = 20
tokens_per_s = 100
output_tokens = 30
[[scenario]]
name = "c"
protocol = "{protocol}"
max_tokens = 64
cancel = {{ {cancel} }}
"""


@pytest.mark.slow
@pytest.mark.parametrize(("protocol", "cancel"), [("chat", "after_events = 3"),
                                                  ("messages", "after_ms = 60")])
def test_cancel_embedded_emulator_records_the_close(tmp_path: Path, protocol: str, cancel: str) -> None:
    n = 8
    profile = parse_profile(_E2E.format(n=n, protocol=protocol, cancel=cancel), tmp_path / "p.toml", env={})
    out = run_profile(profile, out_dir=tmp_path / "out")
    summary = out.summary
    c = summary["scopes"]["c"]["counters"]
    lines = [json.loads(x) for x in (out.out_dir / "streams.jsonl").read_text().splitlines()]
    truths = [json.loads(x) for x in (out.out_dir / "ground_truth.jsonl").read_text().splitlines()]
    # after_ms on a busy machine: a stream cancelled before any response head may have
    # left before the emulator's handler read its request (no ground-truth line): that
    # one, and only that one, is unmatched. Every stream that got a head is matched.
    seen = {t["request_id"] for t in truths}
    unseen = {x["id"] for x in lines} - seen
    assert all(x["headers_ns"] is None for x in lines if x["id"] in unseen)
    assert protocol == "messages" or not unseen  # after_events: every stream had its events
    assert c["client_cancelled"] == n and c.get("completed", 0) == 0
    assert c["cancel.matched"] == n - len(unseen) and c.get("cancel.unmatched", 0) == len(unseen)
    assert "cancel.upstream_completed" not in c  # the emulator stops when its client leaves
    assert summary["scopes"]["c"]["metrics"]["cancel_delay"]["count"] == n - len(unseen)
    assert "e2e" not in summary["scopes"]["c"]["metrics"]
    assert not [w for w in summary["warnings"] if "completed" in w or ("cancel" in w and not unseen)]
    assert [t["end"] for t in truths] == ["client_closed"] * (n - len(unseen))
    assert all(isinstance(t["client_closed_ns"], int) and t["tokens_after_close"] == 0 for t in truths)
    # the close came after what the client read: the emulator sent at least that much
    # (after_ms: on a busy machine the emulator may not have sent a token within 60 ms,
    # and the client then read none; the bound is what this stream read, not 1)
    read = {x["id"]: x["output_events"] for x in map(json.loads, (out.out_dir / "streams.jsonl")
                                                     .read_text().splitlines())}
    assert all(t["output_tokens_sent"] >= read[t["request_id"]] for t in truths)
    assert protocol == "messages" or all(read[t["request_id"]] >= 3 for t in truths)  # after_events
    # the terminal summary says it per scope
    import io

    from rich.console import Console

    from hopbench.views._summary_table import render_summary

    buf = io.StringIO()
    render_summary(summary, Console(file=buf, width=240, color_system=None))
    shown = buf.getvalue()
    assert f"client cancels {n} · upstream noticed p50/p99" in shown
    assert "upstream ran to the end 0 · not noticed 0" in shown


@pytest.mark.slow
def test_cancel_workers_join_in_the_driver(tmp_path: Path) -> None:
    from hopbench.driver._workers import run_profile_workers

    n = 8
    text = _E2E.format(n=n, protocol="chat", cancel="after_events = 2").replace("seed = 5", "seed = 5\nworkers = 2")
    profile = parse_profile(text, tmp_path / "p.toml", env={})
    out = run_profile_workers(profile, out_dir=tmp_path / "out")
    c = out.summary["scopes"]["c"]["counters"]
    assert c["client_cancelled"] == n and c["cancel.matched"] == n, out.summary["warnings"]
    assert out.summary["scopes"]["c"]["metrics"]["cancel_delay"]["count"] == n


def test_cancel_every_stream_is_no_failed_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from hopbench import _exit
    from hopbench.cli import main

    path = tmp_path / "p.toml"
    path.write_text(_E2E.format(n=4, protocol="responses", cancel="after_events = 2"), encoding="utf-8")
    # fraction 1: nothing completes, on purpose: not "the target failed the run" (exit 4)
    assert main(["run", str(path), "--out", str(tmp_path / "out"), "--no-report", "--quiet"]) == _exit.EXIT_OK
    summary = json.loads((tmp_path / "out" / "summary.json").read_text(encoding="utf-8"))
    assert summary["headline"]["client_cancelled"] == 4 and summary["headline"]["completed"] == 0
    assert not [w for w in summary["warnings"] if "nothing completed" in w]


def test_cancel_every_stream_with_some_cut_by_the_stop_is_judged_on_its_cancels(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """cancel fraction 1 in a timed run: the streams still short of their cancel point at the
    stop (grace 0) are cancelled there; with the rest closed by the cancel key, the run did what it
    asked: exit 0 with the cancel figures, no "nothing completed" (was exit 4, issue 38)."""
    from hopbench import _exit
    from hopbench.cli import main

    path = tmp_path / "p.toml"
    text = _E2E.format(n=1, protocol="chat", cancel="fraction = 1, after_ms = 300").replace(
        "requests = 1", "duration_s = 1\ngrace_s = 0").replace("output_tokens = 30", "output_tokens = 90")
    path.write_text(text, encoding="utf-8")
    assert main(["run", str(path), "--out", str(tmp_path / "out"), "--no-report", "--no-progress"]) == _exit.EXIT_OK
    shown = capsys.readouterr()
    summary = json.loads((tmp_path / "out" / "summary.json").read_text(encoding="utf-8"))
    head = summary["headline"]
    # every user had a stream under way at the stop, started less than 300 ms before it
    assert head["cancelled"] >= 1 and head["client_cancelled"] >= 1 and head["completed"] == 0, head
    assert head["started"] == head["cancelled"] + head["client_cancelled"]
    assert not [w for w in summary["warnings"] if "nothing completed" in w], summary["warnings"]
    assert [w for w in summary["warnings"] if w.startswith("cancelled at the stop: ")
            and "judged on its cancels" in w], summary["warnings"]
    assert f"client cancels {head['client_cancelled']} · upstream noticed" in shown.out
    assert "no stream completed" not in shown.err


def test_cancel_by_design_is_no_failure_but_errors_are() -> None:
    from hopbench.driver._warnings import arm_failed, cancelled_by_design

    ok = {"started": 10, "client_cancelled": 7, "cancelled": 3}
    assert cancelled_by_design(ok) and not arm_failed(ok)
    assert cancelled_by_design({"started": 5, "completed": 0, "errors": 0, "cancelled": 1, "client_cancelled": 4})
    # an error, a completed stream, or no cancel by the key at all: judged as before
    assert not cancelled_by_design({**ok, "started": 11, "timeout": 1}) and arm_failed({**ok, "started": 11,
                                                                                          "timeout": 1})
    assert not cancelled_by_design({**ok, "started": 11, "completed": 1})
    assert not cancelled_by_design({"started": 3, "cancelled": 3})


def test_cancel_upstream_that_runs_on_wastes_tokens(tmp_path: Path) -> None:
    # on_client_close = "finish": the emulator hears of the close but runs on (as an
    # upstream behind a gateway that does not pass the cancel on would)
    n = 6
    text = _E2E.format(n=n, protocol="chat", cancel="after_events = 3").replace(
        "output_tokens = 30", "output_tokens = 30\non_client_close = \"finish\"")
    out = run_profile(parse_profile(text, tmp_path / "p.toml", env={}), out_dir=tmp_path / "out")
    c = out.summary["scopes"]["c"]["counters"]
    truths = [json.loads(x) for x in (out.out_dir / "ground_truth.jsonl").read_text().splitlines()]
    assert [t["end"] for t in truths] == ["completed"] * n
    assert all(t["output_tokens_sent"] == 30 and t["tokens_after_close"] > 0 for t in truths)
    assert c["client_cancelled"] == n and c["cancel.upstream_completed"] == n
    # every token handed over after the client's close is wasted: at least those after the notice
    assert c["cancel.wasted_tokens"] >= sum(t["tokens_after_close"] for t in truths) >= n * 20
    assert out.summary["scopes"]["c"]["metrics"]["cancel_delay"]["count"] == n
    # and the run says so: cancels that never reach the upstream are what this measures
    ran_on = [w for w in out.summary["warnings"] if "ran to their end upstream" in w]
    assert ran_on and ran_on[0].startswith(f"client cancellation: {n} of {n} cancelled streams"), \
        out.summary["warnings"]


def test_cancel_emulator_on_client_close_is_checked() -> None:
    with pytest.raises(ProfileError) as err:
        parse_profile(_E2E.format(n=1, protocol="chat", cancel="after_events = 1").replace(
            "output_tokens = 30", 'output_tokens = 30\non_client_close = "later"'), "p.toml", env={})
    assert "emulator.on_client_close" in str(err.value) and "'finish'" in str(err.value)
