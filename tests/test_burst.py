"""Flagged bursts judged again after the run against the origin's own record (hopbench.measure._burst).

Unit tests on hand-written ground-truth lines (docs/emulator.md) and streams.jsonl
lines (hopbench.measure._lines.stream_line); the post-run path from a measured stream to
summary.json's warning with a fake record; the flagged streams kept in memory
(FlaggedLog: its bound, a worker's message) and the driver's join of what workers
ship (hopbench.driver._merge.Merger.join_bursts); runs against the embedded emulator
(its bursts are the origin's, whatever the machine's load: never a proxy): one
process, ``hopbench run --workers 2`` (and a worker that dies before its final
message), ``run.stream_log = false``, and A/B arms each with its own emulator beside
a URL arm. The ``[upstream]`` case behind a holding proxy is in
tests/test_gateway_overhead.py.
"""

from __future__ import annotations

import pytest

import json
from pathlib import Path
from typing import Any

from hopbench.measure._burst import (
    BURST_COUNTERS,
    PACED_GAP_MIN_NS,
    FLAGGED_MAX,
    FlaggedBurst,
    FlaggedLog,
    burst_from_line,
    burst_warnings,
    join_bursts,
    judge_burst,
    not_rejudged,
    SUSPECTED,
    read_flagged,
    record_rejudged,
    rejudge,
)
from hopbench.measure._meter import StreamMeter
from hopbench.measure._rules import measure
from hopbench.measure._sinks import record_stream
from hopbench.measure._lines import stream_line
from hopbench.measure._recorder import ALL, Recorder
from hopbench.protocols import ContentDelta, FirstContentToken, FirstToken, StreamEnd, StreamResult

MS = 1_000_000


def _truth(rid: str = "0-1", *, gaps_ms: list[float] | None = None, ttft_ms: float | None = 40,
           queue_ms: float = 0, lag_ms: float = 0, **extra: Any) -> dict[str, Any]:
    """A ground-truth line as the emulator writes it (the fields the join reads)."""
    gaps = [0.01, 0.01, 0.01] if gaps_ms is None else gaps_ms
    return {"request_id": rid, "ttft_ns": None if ttft_ms is None else int(ttft_ms * MS),
            "gaps_ns": [int(g * MS) for g in gaps], "queue_ns": int(queue_ms * MS),
            "lag_max_ns": int(lag_ms * MS), "end": "completed", **extra}


def _burst(rid: str = "0-1", held_ms: float = 80, events: int = 4, scope: str = "chat") -> FlaggedBurst:
    return FlaggedBurst(rid, scope, int(held_ms * MS), events)


# -- one stream ---------------------------------------------------------------------------------

def test_judge_burst_origin_wrote_the_events_at_once() -> None:
    """4 events within 0.03 ms at the origin: its own burst, not a proxy's."""
    assert judge_burst(_burst(), _truth(gaps_ms=[0.01, 0.01, 0.01]), proxy_possible=True) == "origin_burst"
    # the span is judged on the origin's own events: (4 - 1) x 1 ms is the line
    just_under = [(3 * PACED_GAP_MIN_NS - 1) / MS / 3] * 3
    assert judge_burst(_burst(), _truth(gaps_ms=just_under), proxy_possible=True) == "origin_burst"


def test_judge_burst_paced_origin_is_confirmed_behind_a_proxy() -> None:
    """20 ms between events at the origin, one burst at the client 100 ms after the head."""
    paced = _truth(gaps_ms=[20, 20, 20])
    assert judge_burst(_burst(held_ms=100), paced, proxy_possible=True) == "proxy_buffering_confirmed"
    # the embedded emulator: nothing between the client and it can buffer
    assert judge_burst(_burst(held_ms=100), paced, proxy_possible=False) == "burst_unexplained"


def test_judge_burst_origin_lateness_covers_the_hold() -> None:
    """The origin's own queue and lateness take the hold below a paced answer's 3 ms."""
    paced = dict(gaps_ms=[1.5, 1.5, 1.5])
    assert judge_burst(_burst(held_ms=60), _truth(**paced, queue_ms=40, lag_ms=18),
                       proxy_possible=True) == "origin_burst"          # 60 - 58 = 2 ms < 3 ms
    assert judge_burst(_burst(held_ms=60), _truth(**paced, queue_ms=40, lag_ms=10),
                       proxy_possible=True) == "proxy_buffering_confirmed"  # 60 - 50 = 10 ms


def test_judge_burst_without_a_line_or_a_usable_one() -> None:
    assert judge_burst(_burst(), None, proxy_possible=True) == "burst_unmatched"
    # no content event written (ttft_ns null), one event, or garbage gaps: the origin wrote no paced answer
    assert judge_burst(_burst(), _truth(ttft_ms=None), proxy_possible=True) == "origin_burst"
    assert judge_burst(_burst(), _truth(gaps_ms=[]), proxy_possible=True) == "origin_burst"
    assert judge_burst(_burst(), {"request_id": "0-1", "ttft_ns": 5, "gaps_ns": "x", "lag_max_ns": "y"},
                       proxy_possible=True) == "origin_burst"


# -- a run's bursts -----------------------------------------------------------------------------

def test_rejudge_joins_by_request_id_marker_and_last_attempt() -> None:
    truths = [
        _truth("a", gaps_ms=[20, 20, 20]),                           # paced
        {"request_id": None, **{k: v for k, v in _truth("x").items() if k != "request_id"}, "marker_id": "b"},
        _truth("c", gaps_ms=[20, 20, 20]),                           # retried by the gateway:
        _truth("c", gaps_ms=[0.0, 0.0, 0.0]),                        # the last attempt answered
        "not a dict line" and {"request_id": 7},                     # malformed: matches nothing
    ]
    got = rejudge([_burst("a"), _burst("b", scope="other"), _burst("c"), _burst("d")], truths, proxy_possible=True)
    assert got == {"chat": {"proxy_buffering_confirmed": 1, "origin_burst": 1, "burst_unmatched": 1},
                   "other": {"origin_burst": 1}}


def test_record_rejudged_counts_per_scope_and_skips_unknown_scopes() -> None:
    rec = Recorder(["chat"])
    record_rejudged(rec, {"chat": {"origin_burst": 2}, "gone": {"origin_burst": 5}}, rec.scopes)
    snap = rec.snapshot()
    assert snap.counter("chat", "origin_burst") == 2 and snap.counter(ALL, "origin_burst") == 2


def test_record_rejudged_without_a_proxy_takes_origin_bursts_out_of_the_flag() -> None:
    """The embedded emulator (issue 36): a burst its own record explains is no proxy's; one it
    does not explain (burst_unexplained) stays flagged. Flags of another scope are left alone."""
    rec = Recorder(["chat", "other"])
    rec.incr("chat", "proxy_buffering_suspected", 5)
    rec.incr("other", "proxy_buffering_suspected", 1)
    record_rejudged(rec, {"chat": {"origin_burst": 4, "burst_unexplained": 1}}, rec.scopes, withdraw_origin=True)
    snap = rec.snapshot()
    assert snap.counter("chat", "proxy_buffering_suspected") == 1 and snap.counter("chat", "origin_burst") == 4
    assert snap.counter(ALL, "proxy_buffering_suspected") == 2 and snap.counter("other", "proxy_buffering_suspected") == 1
    # behind a gateway the client's flag stays (the re-judged counters are subsets of it)
    gw = Recorder(["chat"])
    gw.incr("chat", "proxy_buffering_suspected", 5)
    record_rejudged(gw, {"chat": {"origin_burst": 4}}, gw.scopes)
    assert gw.snapshot().counter(ALL, "proxy_buffering_suspected") == 5


def test_burst_from_line_reads_flagged_measured_lines_only() -> None:
    line = {"id": "0-3", "scenario": "chat", "start_ns": 5 * MS, "output_events": 6,
            "burst": "proxy_buffering_suspected", "burst_held_ns": 70 * MS}
    assert burst_from_line(line) == FlaggedBurst("0-3", "chat", 70 * MS, 6)
    assert burst_from_line(line, warmup_ns=10 * MS) is None           # a warm-up stream
    assert burst_from_line({**line, "burst": "client_lagged"}) is None
    assert burst_from_line({**line, "arm": "b"}) == FlaggedBurst("0-3", "b", 70 * MS, 6)
    assert burst_from_line({**line, "burst_held_ns": None}) is None


# -- the warning --------------------------------------------------------------------------------

def test_burst_warnings_without_a_record_say_suspected_as_before() -> None:
    c = {"completed": 10, "proxy_buffering_suspected": 6}
    assert burst_warnings(c, embedded=False) == [
        "proxy buffering suspected: 6 of 10 streams arrived as one burst (TTFT close to E2E)"]
    assert burst_warnings({**c, "proxy_buffering_suspected": 5}, embedded=False) == []   # half: no warning


def test_burst_warnings_confirmed_by_the_record() -> None:
    c = {"completed": 10, "proxy_buffering_suspected": 9, "proxy_buffering_confirmed": 8, "origin_burst": 1}
    (w,) = burst_warnings(c, embedded=False)
    assert w.startswith("proxy buffering confirmed by the upstream's record: 8 of 10 streams arrived as one burst")


def test_burst_warnings_origin_bursts_are_not_proxy_buffering() -> None:
    c = {"completed": 10, "proxy_buffering_suspected": 9, "origin_burst": 9}
    (w,) = burst_warnings(c, embedded=False)
    assert w.startswith("origin_burst: 9 of 10 streams") and "not a buffering proxy" in w
    assert "proxy buffering suspected" not in w


def test_burst_warnings_embedded_never_names_a_proxy() -> None:
    """The embedded emulator: the client talks straight to it; joined or not, confirmed or not."""
    # unjoined (the client's flags), and joined: the origin_burst streams left proxy_buffering_suspected
    for c in ({"completed": 6000, "proxy_buffering_suspected": 3577},
              {"completed": 6000, "proxy_buffering_suspected": 77, "origin_burst": 3500, "burst_unexplained": 77}):
        (w,) = burst_warnings(c, embedded=True)
        assert w.startswith("origin_burst: 3577 of 6000 streams arrived as one burst from the embedded emulator")
        assert "proxy buffering" not in w


# -- from a measured stream to summary.json's warning, with a fake record -------------------------

def _held_burst(t0: int, *, head_ms: float, burst_ms: float) -> StreamMeter:
    """A completed 4-event stream: head at ``head_ms``, all 4 events and the end in one read at ``burst_ms``."""
    m = StreamMeter(t0, t0)
    m.on_headers(t0 + int(head_ms * MS))
    t = t0 + int(burst_ms * MS)
    m.on_read(t, 0)
    m.on_observations(t, [FirstToken("text"), FirstContentToken("text"), ContentDelta("text", 1)])
    for _ in range(3):
        m.on_observations(t, [ContentDelta("text", 1)])
    m.on_observations(t, [StreamEnd("completed")])
    m.close(t)
    return m


def _result() -> StreamResult:
    return StreamResult("completed", output_tokens=4, events={"text": 4, "reasoning": 0, "tool": 0, "refusal": 0})


def test_post_run_join_turns_suspected_into_origin_burst(tmp_path: Path) -> None:
    # two measured bursts (held 80 ms after the head): the client flags both
    rec = Recorder(["chat"])
    lines = []
    for i in (1, 2):
        m = _held_burst(0, head_ms=1, burst_ms=81)
        r = measure(m, 81 * MS, "completed", "", _result(), keepalive_budget_ns=10**12)
        assert r.proxy_buffering_suspected and r.burst_held_ns == 80 * MS
        record_stream(rec, "chat", r)
        lines.append(stream_line(r, f"0-{i}", "chat", 0))
    assert lines[0]["burst"] == "proxy_buffering_suspected" and lines[0]["burst_held_ns"] == 80 * MS
    streams = tmp_path / "streams.jsonl"
    streams.write_text("".join(json.dumps(x, separators=(",", ":")) + "\n" for x in lines) + "{cut")
    assert [b.request_id for b in read_flagged(streams)] == ["0-1", "0-2"]
    # the origin's record: 0-1 written at once (its own burst), 0-2 paced 20 ms apart
    truths = [_truth("0-1"), _truth("0-2", gaps_ms=[20, 20, 20])]
    read: list[int] = []

    def reader() -> list[dict[str, Any]]:
        read.append(1)
        return truths

    flagged = FlaggedLog()
    for b in read_flagged(streams):  # the file and the runner's memory hold the same bursts
        flagged.add(b)
    assert join_bursts(rec, flagged, reader, proxy_possible=True, record="gt.jsonl") == []
    c = rec.snapshot().scopes[ALL].counters
    assert (c["proxy_buffering_suspected"], c["origin_burst"], c["proxy_buffering_confirmed"]) == (2, 1, 1)
    assert read == [1]
    # a run without a flagged stream never reads the record
    assert join_bursts(rec, FlaggedLog(), reader, proxy_possible=True, record="gt.jsonl") == [] and read == [1]
    # a flagged stream the record does not hold stays suspected, and the run says so
    (w,) = join_bursts(Recorder(["chat"]), flagged, lambda: truths[:1], proxy_possible=True, record="gt.jsonl")
    assert w.startswith("bursts: 1 of 2 streams flagged proxy_buffering_suspected have no line")


def test_meter_lines_carry_the_burst_flag_only_on_bursts() -> None:
    m = _held_burst(0, head_ms=1, burst_ms=81)
    r = measure(m, 81 * MS, "completed", "", _result(), keepalive_budget_ns=10**12)
    assert {k: stream_line(r, "0-1", "chat", 0)[k] for k in ("burst", "burst_held_ns")} == \
        {"burst": "proxy_buffering_suspected", "burst_held_ns": 80 * MS}
    # the head came with the burst after a short wait: an unpaced origin, not flagged, no field
    quick = measure(_held_burst(0, head_ms=2, burst_ms=2), 2 * MS, "completed", "", _result(),
                    keepalive_budget_ns=10**12)
    assert not quick.proxy_buffering_suspected and quick.burst_held_ns is None
    line = stream_line(quick, "0-2", "chat", 0)
    assert (line["burst"], line["burst_held_ns"]) == (None, None)


def test_burst_counters_are_defined_in_results_md() -> None:
    doc = (Path(__file__).resolve().parents[1] / "docs" / "results" / "counters.md").read_text()
    for name in BURST_COUNTERS:
        assert f"| `{name}` |" in doc, name
    # the note for what cannot be re-judged, each of its reasons, and the bound
    assert "| `" + not_rejudged(0, "WHY").replace("0 streams", "N streams") + "` |" in doc
    for why in ("a load generator keeps at most 100,000 flagged streams", "worker K ended before its final message",
                "its target is a URL (URL), whose origin's record hopbench does not hold"):
        assert why in doc, why
    assert f"{FLAGGED_MAX:,}" == "100,000"


# -- end to end: the embedded emulator --------------------------------------------------------------

def test_run_embedded_bursts_are_the_origins_never_a_proxy(tmp_path: Path) -> None:
    """The embedded emulator with ``tokens_per_s = 0`` writes each answer at once, 50 ms
    after the request: every stream reaches the client as one burst. Whether the client
    flags it (``proxy_buffering_suspected``) or its own lag explains it
    (``client_lagged``) depends on the machine's load; every flagged stream is then
    judged against ground_truth.jsonl, where the emulator wrote the 8 events in one go:
    ``origin_burst``, and no warning names a proxy. No timing threshold: the verdict
    follows from what the emulator recorded."""
    from hopbench.config._profile import parse_profile
    from hopbench.driver._single import run_profile

    profile = parse_profile('[run]\nrequests = 8\n[load]\nconcurrency = 2\n[target]\nembedded = true\n'
                            '[emulator]\nttft_ms = 50\ntokens_per_s = 0\noutput_tokens = 8\nkeepalive_interval_s = 0\n'
                            '[[scenario]]\nname = "chat"\nprotocol = "chat"\nmodel = "m"\nprompts = ["hi"]\n',
                            tmp_path / "p.toml", env={})
    run_profile(profile, out_dir=tmp_path / "run")
    s = json.loads((tmp_path / "run" / "summary.json").read_text())
    c = s["scopes"]["all"]["counters"]
    truth = [json.loads(x) for x in (tmp_path / "run" / "ground_truth.jsonl").read_text().splitlines()]
    at_once = sum(sum(t["gaps_ns"]) < 7 * PACED_GAP_MIN_NS for t in truth)
    print({k: c.get(k, 0) for k in ("completed", "proxy_buffering_suspected", "client_lagged", *BURST_COUNTERS)},
          "written at once:", at_once)
    assert c["completed"] == 8
    assert c.get("origin_burst", 0) + c.get("client_lagged", 0) == 8, c
    # each flagged stream joined and judged the origin's (as many as the record shows written at once),
    # and, with no proxy in between, no longer counted proxy_buffering_suspected (issue 36)
    assert c.get("origin_burst", 0) <= at_once and c.get("proxy_buffering_suspected", 0) == 0, c
    assert not any(c.get(k, 0) for k in ("proxy_buffering_confirmed", "burst_unexplained", "burst_unmatched")), c
    assert not any("proxy buffering" in w for w in s["warnings"]), s["warnings"]
    if c.get("proxy_buffering_suspected", 0) > 4:
        assert any(w.startswith("origin_burst: ") and "embedded emulator" in w for w in s["warnings"])
    flagged = [json.loads(x) for x in (tmp_path / "run" / "streams.jsonl").read_text().splitlines()]
    # streams.jsonl keeps the client's flag as measured
    assert sum(x.get("burst") == "proxy_buffering_suspected" for x in flagged) == c.get("origin_burst", 0)


# -- the run's judge and the views ------------------------------------------------------------------

def _judge_bursts(target: str, counts: dict[str, int]) -> list[str]:
    from hopbench.driver._judge import judge
    from hopbench.driver._summary import Part, RunEnd
    from hopbench.measure._counters import RunCounters
    from hopbench.config._profile import parse_profile
    from hopbench.driver._common import base_meta
    from hopbench.engine._runner import RunStats

    profile = parse_profile(f'[run]\nrequests = 10\n[load]\nconcurrency = 2\n[target]\n{target}\n'
                            '[[scenario]]\nname = "chat"\nprotocol = "chat"\nmodel = "m"\n', env={})
    rec = Recorder(["chat"])
    for name, n in counts.items():
        rec.incr("chat", name, n)
    total = rec.snapshot()
    meta = dict(base_meta(profile), started_at_unix_s=1.0)
    doc = judge(profile, [Part(profile, RunCounters.of(RunStats(stop_ns=10**9), total), total)], total, None, meta,
                RunEnd(ended_at_unix_s=2.0, intervals=1)).to_json()
    return [w for w in doc["warnings"] if "burst" in w]


def test_judge_embedded_target_never_warns_of_a_proxy_even_unjoined() -> None:
    """Flagged streams not re-judged (a worker that died before its final message, past
    FLAGGED_MAX): the counters stay the client's; the embedded target still gets no proxy
    warning (the reported case: 3,577 of 6,000 streams)."""
    counts = {"started": 6000, "completed": 6000, "tokens.output.completed": 24000, "proxy_buffering_suspected": 3577}
    (w,) = _judge_bursts("embedded = true", counts)
    assert w.startswith("origin_burst: 3577 of 6000 streams arrived as one burst from the embedded emulator")
    assert "proxy buffering" not in w
    (w,) = _judge_bursts('url = "http://127.0.0.1:9"', counts)
    assert w.startswith("proxy buffering suspected: 3577 of 6000 streams arrived as one burst")
    (w,) = _judge_bursts('url = "http://127.0.0.1:9"', {**counts, "proxy_buffering_confirmed": 3500, "origin_burst": 77})
    assert w.startswith("proxy buffering confirmed by the upstream's record: 3500 of 6000")


def test_terminal_summary_falls_back_to_the_same_rule() -> None:
    """An older summary without the warning: the terminal applies burst_warnings itself, once."""
    from rich.console import Console

    from hopbench.views._summary_table import render_summary

    counters = {"started": 10, "completed": 10, "proxy_buffering_suspected": 9, "origin_burst": 9}
    for target, want in (("http://gw", "origin_burst: 9 of 10 streams"), ("embedded", "from the embedded emulator")):
        console = Console(record=True, width=400)
        render_summary({"complete": True, "target": target, "warnings": [],
                        "scopes": {"all": {"counters": counters}}}, console)
        text = console.export_text()
        assert want in text and "proxy buffering" not in text and text.count("origin_burst:") == 1, text


# -- the flagged streams in memory (LoadRunner.flagged), bounded ----------------------------------

def test_flagged_log_keeps_at_most_its_limit_and_counts_the_rest() -> None:
    log = FlaggedLog(limit=2)
    for b in (_burst("0-1"), _burst("0-2", scope="b"), _burst("0-3", scope="b"), _burst("0-4")):
        log.add(b)
    assert [b.request_id for b in log.bursts] == ["0-1", "0-2"]
    assert dict(log.dropped) == {"b": 1, "chat": 1} and len(log) == 4
    # as a worker ships it, and back (the driver applies no limit of its own)
    doc = json.loads(json.dumps(log.to_json()))
    back = FlaggedLog.from_json(doc)
    assert back.bursts == log.bursts and back.dropped == log.dropped and back.limit == FLAGGED_MAX
    # a malformed message reads as nothing, an entry of the wrong shape as absent
    assert len(FlaggedLog.from_json(None)) == 0 and len(FlaggedLog.from_json({"bursts": "x", "dropped": 3})) == 0
    odd = FlaggedLog.from_json({"bursts": [["0-9", "chat", 5, 4], ["0-8", "chat", "5", 4], [1, 2]],
                                "dropped": {"chat": 2, "b": -1, "c": "x"}})
    assert odd.bursts == [FlaggedBurst("0-9", "chat", 5, 4)] and dict(odd.dropped) == {"chat": 2}
    # several workers' logs, then one arm's part of them
    back.merge(odd)
    assert len(back) == 7 and dict(back.dropped) == {"b": 1, "chat": 3}
    arm = back.only("b")
    assert [b.request_id for b in arm.bursts] == ["0-2"] and dict(arm.dropped) == {"b": 1}


def test_join_bursts_names_the_flagged_streams_past_the_bound() -> None:
    """Past FLAGGED_MAX the streams are only counted: a note says so, the rest are judged."""
    log = FlaggedLog(limit=1)
    log.add(_burst("0-1"))
    log.add(_burst("0-2"))
    rec = Recorder(["chat"])
    (note,) = join_bursts(rec, log, lambda: [_truth("0-1")], proxy_possible=False, record="ground_truth.jsonl")
    assert note == ("bursts: 1 streams flagged proxy_buffering_suspected were not re-judged: a load generator "
                    "keeps at most 1 flagged streams for the join with ground_truth.jsonl, and these came after; "
                    "they stay suspected")
    assert rec.snapshot().counter("chat", "origin_burst") == 1
    # only drops: the record is not read
    only = FlaggedLog(limit=0)
    only.add(_burst("0-1"))

    def unread() -> list[dict[str, Any]]:
        raise AssertionError("the record was read")

    (note,) = join_bursts(rec, only, unread, proxy_possible=False, record="gt")
    assert note.startswith("bursts: 1 streams flagged proxy_buffering_suspected were not re-judged")


# -- --workers: the driver re-judges what the workers shipped -------------------------------------

def _done(k: int, bursts: list[FlaggedBurst], suspected: dict[str, int]) -> dict[str, Any]:
    """A worker's final message: its counters (the flag) and its flagged streams."""
    rec = Recorder(["chat", "other"])
    for scope, n in suspected.items():
        rec.incr(scope, "completed", n)
        rec.incr(scope, "proxy_buffering_suspected", n)
    log = FlaggedLog()
    for b in bursts:
        log.add(b)
    return {"kind": "done", "worker": k, "total": rec.snapshot().to_json(),
            "warmup": Recorder(["chat", "other"]).snapshot().to_json(),
            "counters": {"stop_ns": 10**9, "ended_ns": 10**9}, "bursts": log.to_json()}


def test_merger_rejudges_the_workers_bursts_as_one_process_would(tmp_path: Path) -> None:
    """Three workers: two ship their flagged streams with their end (as the client cancels
    travel), one dies after an interval in which it flagged 2. The merged counters are
    exactly those of rejudge() over all the shipped streams (one process's verdicts); the
    dead worker's 2 are named in a note, not re-judged in part."""
    import io

    from hopbench.config._profile import parse_profile
    from hopbench.driver._results import ResultsWriter
    from hopbench.driver._merge import Merger
    from hopbench.driver._share import split_load

    profile = parse_profile('[run]\nrequests = 30\nworkers = 3\n[load]\nconcurrency = 3\n[target]\nembedded = true\n'
                            '[[scenario]]\nname = "chat"\nprotocol = "chat"\nprompts = ["hi"]\n'
                            '[[scenario]]\nname = "other"\nprotocol = "chat"\nprompts = ["hi"]\n', env={})
    shares = split_load(profile, 3)
    writer = ResultsWriter(tmp_path / "run")
    writer.start({"started_at_unix_s": 0.0})
    merger = Merger(profile, shares, writer, io.StringIO(), {"interrupted_by": None, "started_at_unix_s": 0.0})
    shipped = {0: [_burst("0-1"), _burst("0-2", held_ms=100), _burst("0-3", scope="other")],
               1: [_burst("1-1", held_ms=100), _burst("1-2"), _burst("1-9")]}
    truths = [_truth("0-1"), _truth("0-2", gaps_ms=[20, 20, 20]), _truth("0-3"),
              _truth("1-1", gaps_ms=[20, 20, 20]), _truth("1-2", queue_ms=78, gaps_ms=[2, 2, 2])]
    record = tmp_path / "run" / "ground_truth.jsonl"
    record.write_text("".join(json.dumps(t) + "\n" for t in truths))
    for k, bursts in shipped.items():
        merger.handle(_done(k, bursts, {"chat": sum(b.scope == "chat" for b in bursts),
                                        "other": sum(b.scope == "other" for b in bursts)}))
    dead = Recorder(["chat", "other"])
    dead.incr("chat", "proxy_buffering_suspected", 2)
    merger.handle({"kind": "interval", "worker": 2, "iv": dead.take_interval(0, 10**9).to_json(),
                   "warm": Recorder(["chat", "other"]).take_interval(0, 10**9).to_json(),
                   "line": {"start_ns": 0, "end_ns": 10**9}})
    merger.lost(2, "killed")
    notes = merger.join_bursts(record)
    assert notes == [
        "bursts: 1 of 6 streams flagged proxy_buffering_suspected have no line with their request id in "
        "ground_truth.jsonl: they stay suspected (burst_unmatched)",
        "bursts: 2 streams flagged proxy_buffering_suspected were not re-judged: worker 2 ended before its final "
        "message, which carries its flagged streams to the driver; they stay suspected"]
    one = Recorder(["chat", "other"])  # what one process would have counted
    record_rejudged(one, rejudge([b for bs in shipped.values() for b in bs], truths, proxy_possible=False),
                    one.scopes)
    total, _ = merger.totals()
    for scope in ("chat", "other", ALL):
        for name in BURST_COUNTERS:
            assert total.counter(scope, name) == one.snapshot().counter(scope, name), (scope, name)
    assert (total.counter(ALL, "origin_burst"), total.counter(ALL, "burst_unexplained"),
            total.counter(ALL, "burst_unmatched"), total.counter(ALL, "proxy_buffering_suspected")) == (3, 2, 1, 5)
    # (8 flagged: the 3 origin bursts left the flag, no proxy being possible in front of the embedded emulator)
    # into summary.json, the notes among its warnings (as _workers._drive_run hands them over)
    merger.meta["notes"] = notes
    summary, _ = merger.finish(None, "local")
    assert summary["scopes"]["all"]["counters"]["burst_unexplained"] == 2
    assert all(n in summary["warnings"] for n in notes)


# -- end to end: --workers, run.stream_log = false, embedded A/B arms ----------------------------------

_AT_ONCE = ('[run]\nrequests = {n}\n{run}[load]\nconcurrency = {c}\n{target}'
            '[emulator]\nttft_ms = 300\ntokens_per_s = 0\noutput_tokens = 8\nkeepalive_interval_s = 0\n{arms}'
            '[[scenario]]\nname = "chat"\nprotocol = "chat"\nmodel = "m"\nprompts = ["hi"]\n')
"""The emulator writes each answer at once, 300 ms after the request: each stream reaches
the client as one burst held 300 ms, flagged unless the client's own lag reached 30 ms
(then ``client_lagged``). The verdicts follow from the emulator's record, not from a clock."""


def _all_rejudged(c: dict[str, int], record: Path) -> None:
    """Every flagged stream joined with the origin's record and judged by it: ``origin_burst``
    (then, with no proxy in between, no longer counted ``proxy_buffering_suspected``: issue 36),
    or ``burst_unexplained`` only for as many streams as the record shows the emulator wrote
    paced (a busy machine can stall it between two events; it never is most of them)."""
    truth = [json.loads(x) for x in record.read_text().splitlines()]
    paced = sum(sum(t["gaps_ns"]) >= 7 * PACED_GAP_MIN_NS for t in truth)
    assert c.get("burst_unexplained", 0) == c.get(SUSPECTED, 0), c
    assert c.get("burst_unexplained", 0) <= paced, (c, paced)
    assert not any(c.get(k, 0) for k in ("proxy_buffering_confirmed", "burst_unmatched")), c


@pytest.mark.slow
def test_run_workers_rejudge_the_bursts_in_the_driver(tmp_path: Path) -> None:
    """``hopbench run --workers 2``: no streams.jsonl; the workers ship their flagged
    streams, the driver judges them against ground_truth.jsonl: the same verdicts as
    one process."""
    from hopbench import _exit
    from hopbench.cli import main

    path = tmp_path / "p.toml"
    path.write_text(_AT_ONCE.format(n=8, c=4, run="", target="[target]\nembedded = true\n", arms=""))
    assert main(["run", str(path), "--workers", "2", "--out", str(tmp_path / "run"), "--no-report",
                 "--quiet"]) == _exit.EXIT_OK
    s = json.loads((tmp_path / "run" / "summary.json").read_text())
    c = s["scopes"]["all"]["counters"]
    print({k: c.get(k, 0) for k in ("completed", SUSPECTED, "client_lagged", *BURST_COUNTERS)})
    assert s["workers"] == 2 and c["completed"] == 8, s["warnings"]
    # the workers' per-stream records, merged (one line a stream: issue 39 item 9)
    assert len((tmp_path / "run" / "streams.jsonl").read_text().splitlines()) == 8
    assert c.get(SUSPECTED, 0) + c.get("origin_burst", 0) + c.get("client_lagged", 0) == 8, c
    _all_rejudged(c, tmp_path / "run" / "ground_truth.jsonl")
    assert not any("proxy buffering" in w or "not re-judged" in w for w in s["warnings"]), s["warnings"]


def test_run_without_stream_log_still_rejudges_the_bursts(tmp_path: Path) -> None:
    """``run.stream_log = false``: streams.jsonl stays empty, the flagged streams are kept in
    memory (LoadRunner.flagged) and judged against ground_truth.jsonl all the same."""
    from hopbench.config._profile import parse_profile
    from hopbench.driver._single import run_profile

    profile = parse_profile(_AT_ONCE.format(n=6, c=3, run="stream_log = false\n",
                                            target="[target]\nembedded = true\n", arms=""),
                            tmp_path / "p.toml", env={})
    s = run_profile(profile, out_dir=tmp_path / "run").summary
    c = s["scopes"]["all"]["counters"]
    print({k: c.get(k, 0) for k in ("completed", SUSPECTED, "client_lagged", *BURST_COUNTERS)})
    assert (tmp_path / "run" / "streams.jsonl").read_text() == ""
    assert c["completed"] == 6 and c.get(SUSPECTED, 0) + c.get("origin_burst", 0) + c.get("client_lagged", 0) == 6, c
    _all_rejudged(c, tmp_path / "run" / "ground_truth.jsonl")
    assert not any("proxy buffering" in w or "not re-judged" in w for w in s["warnings"]), s["warnings"]


@pytest.mark.slow
def test_run_arms_rejudge_each_arm_against_its_own_record(tmp_path: Path) -> None:
    """Three arms: ``a`` and ``c`` each with an embedded emulator of its own (``c`` answers
    100 ms sooner), ``b`` a URL (an emulator the test started, whose record the run does not
    hold). Each embedded arm's flagged streams are judged against its own
    ground_truth.<arm>.jsonl (against the other's they would match nothing:
    ``burst_unmatched``); ``b``'s cannot be, and a note says so."""
    from hopbench.config._profile import parse_profile
    from hopbench.driver._single import run_profile
    from hopbench.emulator import EmbeddedEmulator

    arms = ('[[arm]]\nname = "a"\nurl = "embedded"\n[[arm]]\nname = "b"\nurl = "{url}"\n'
            '[[arm]]\nname = "c"\nurl = "embedded"\nemulator = {{ ttft_ms = 200 }}\n')
    first = parse_profile(_AT_ONCE.format(n=9, c=3, run="", target="", arms=arms.format(url="embedded")),
                          tmp_path / "p.toml", env={})
    with EmbeddedEmulator(first.arms[0].emulator_config, record_path=None) as other:
        profile = parse_profile(_AT_ONCE.format(n=9, c=3, run="", target="", arms=arms.format(url=other.base_url)),
                                tmp_path / "p.toml", env={})
        s = run_profile(profile, out_dir=tmp_path / "run").summary
    scopes = s["scopes"]
    for name in ("a", "b", "c"):
        c = scopes[name]["counters"]
        print(name, {k: c.get(k, 0) for k in ("completed", SUSPECTED, "client_lagged", *BURST_COUNTERS)})
        assert c["completed"] == 3 and c.get(SUSPECTED, 0) + c.get("origin_burst", 0) + c.get("client_lagged", 0) == 3, (
            name, c)
    for name in ("a", "c"):
        _all_rejudged(scopes[name]["counters"], tmp_path / "run" / f"ground_truth.{name}.jsonl")
    b = scopes["b"]["counters"]
    assert not any(b.get(k, 0) for k in BURST_COUNTERS), b  # nothing to judge it against
    notes = [w for w in s["warnings"] if "not re-judged" in w]
    if b.get(SUSPECTED, 0):
        assert notes == [f"arm b: bursts: {b[SUSPECTED]} streams flagged proxy_buffering_suspected were not "
                         f"re-judged: its target is a URL ({other.base_url}), whose origin's record hopbench "
                         "does not hold; they stay suspected"], s["warnings"]
    else:
        assert notes == [], s["warnings"]


class _NoFinalMessage:
    """A worker's pipe that dies (exit 3) instead of sending the final message."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    def send(self, msg: dict[str, Any]) -> None:
        if msg.get("kind") == "done":
            import os

            os._exit(3)
        self.conn.send(msg)

    def recv(self) -> Any:
        return self.conn.recv()

    def close(self) -> None:
        self.conn.close()


def _worker_one_dies_before_its_end(profile: Any, base_url: str, share: Any, conn: Any) -> None:
    """Worker target: worker 1 runs its share, ships its intervals, then dies before "done"."""
    from hopbench.driver._workers import _process_main

    _process_main(profile, base_url, share, conn if share.index != 1 else _NoFinalMessage(conn))


@pytest.mark.slow
def test_run_workers_name_a_dead_workers_bursts_as_not_rejudged(tmp_path: Path) -> None:
    """Worker 1 dies before its final message (which carries its flagged streams): its
    flagged streams, counted from the intervals it shipped, are named in a note; worker
    0's are re-judged. Every flagged stream is one or the other, none silently suspected."""
    from hopbench.config._profile import parse_profile
    from hopbench.driver._workers import _run_local

    profile = parse_profile(_AT_ONCE.format(n=8, c=4, run="workers = 2\n", target="[target]\nembedded = true\n",
                                            arms=""), tmp_path / "p.toml", env={})
    out = _run_local(profile, out_dir=tmp_path / "run", on_line=None, progress=None, base_url=None,
                     target=_worker_one_dies_before_its_end)
    s = out.summary
    c = s["scopes"]["all"]["counters"]
    print({k: c.get(k, 0) for k in ("completed", SUSPECTED, "client_lagged", *BURST_COUNTERS)}, s["warnings"])
    assert not out.complete and any(w.startswith("worker 1 died") for w in s["warnings"]), s["warnings"]
    assert c["completed"] == 8 and c.get(SUSPECTED, 0) + c.get("origin_burst", 0) + c.get("client_lagged", 0) == 8, c
    notes = [w for w in s["warnings"] if "not re-judged" in w]
    lost = 0
    if notes:
        (note,) = notes
        assert note.endswith("were not re-judged: worker 1 ended before its final message, which carries its "
                             "flagged streams to the driver; they stay suspected"), note
        lost = int(note.split()[1])
    assert c.get("burst_unexplained", 0) + lost == c.get(SUSPECTED, 0), c  # (origin_burst: withdrawn)
    assert not any(c.get(k, 0) for k in ("proxy_buffering_confirmed", "burst_unmatched")), c


def test_rejudge_bursts_one_process_picks_each_arms_record(tmp_path: Path) -> None:
    """hopbench.driver._single.rejudge_bursts without a run: each embedded arm's streams against its
    own file; a URL arm beside it noted; URL arms only (no record at all) note nothing."""
    from hopbench.driver._single import rejudge_bursts

    log = FlaggedLog()
    for b in (_burst("0-1", scope="a"), _burst("0-2", scope="b", held_ms=100), _burst("0-3", scope="u")):
        log.add(b)
    (tmp_path / "ground_truth.a.jsonl").write_text(json.dumps(_truth("0-1")) + "\n")
    (tmp_path / "ground_truth.b.jsonl").write_text(json.dumps(_truth("0-2", gaps_ms=[20, 20, 20])) + "\n{cut")
    arms = [{"name": "a", "target": "embedded", "ground_truth": "ground_truth.a.jsonl"},
            {"name": "b", "target": "embedded", "ground_truth": "ground_truth.b.jsonl"},
            {"name": "u", "target": "http://127.0.0.1:9", "ground_truth": None}]
    rec = Recorder(["a", "b", "u"])
    assert rejudge_bursts(rec, log, tmp_path, {"arms": arms}) == [
        "arm u: " + not_rejudged(1, "its target is a URL (http://127.0.0.1:9), whose origin's record hopbench "
                                    "does not hold")]
    snap = rec.snapshot()
    assert (snap.counter("a", "origin_burst"), snap.counter("b", "burst_unexplained")) == (1, 1)
    assert not any(snap.counter("u", k) for k in BURST_COUNTERS)
    assert rejudge_bursts(Recorder(["a", "b", "u"]), log, tmp_path, {"arms": arms[2:]}) == []


@pytest.mark.slow
def test_run_warmup_streams_are_not_rejudged(tmp_path: Path) -> None:
    """Streams that started in the warm-up are neither counted nor kept for the join
    (LoadRunner.flagged takes the measured ones only): the re-judged counters stay a
    subset of the measured flag, and the warm-up's own bursts are in the record."""
    from hopbench.config._profile import parse_profile
    from hopbench.driver._single import run_profile

    profile = parse_profile(_AT_ONCE.format(n=1, c=2, run="stream_log = false\nduration_s = 1.6\nwarmup_s = 0.7\n",
                                            target="[target]\nembedded = true\n", arms="")
                            .replace("requests = 1\n", ""), tmp_path / "p.toml", env={})
    s = run_profile(profile, out_dir=tmp_path / "run").summary
    c = s["scopes"]["all"]["counters"]
    warm = s["warmup"]["all"]["counters"] if s.get("warmup") else {}
    truth = (tmp_path / "run" / "ground_truth.jsonl").read_text().splitlines()
    print({k: c.get(k, 0) for k in ("completed", SUSPECTED, "client_lagged", *BURST_COUNTERS)},
          "warm-up:", {k: warm.get(k, 0) for k in ("completed", SUSPECTED)}, "record lines:", len(truth))
    assert len(truth) > c["completed"] >= 1  # the warm-up's streams are in the record too
    _all_rejudged(c, tmp_path / "run" / "ground_truth.jsonl")
