"""The one finish path (hopbench.driver._judge): counters merge exactly, one judge for one
process and for workers, and a real run gives the same summary.json shape both ways."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Any

import pytest

from hopbench._errors import ResultsError
from hopbench.driver._judge import BUDGET_WINDOW_MIN_S, judge
from hopbench.driver._summary import Part, RunEnd, WorkerInfo
from hopbench.measure._counters import RunCounters
from hopbench.config._profile import parse_profile
from hopbench.measure._recorder import ALL, Recorder, Snapshot
from hopbench.driver._results import ResultsWriter
from hopbench.driver._common import base_meta
from hopbench.driver._single import run_profile
from hopbench.engine._runner import RunStats
from hopbench.driver._merge import Merger
from hopbench.driver._share import share_profile, split_load
from hopbench.driver._workers import _process_main, _run_local

_PROFILE = """
[run]
name = "finish"
requests = {requests}
seed = 3
workers = {workers}
interval_s = 0.5

[load]
mode = "concurrency"
concurrency = 8

[target]
embedded = true

[emulator]
ttft_ms = 5
tokens_per_s = 2000
output_tokens = 8
seed = 5

[emulator.faults]
http_500 = 0.3

[[scenario]]
name = "chat"
protocol = "chat"
model = "gpt-emu"
max_tokens = 8
"""


def _snap(started: int, completed: int, errors: int) -> Snapshot:
    rec = Recorder(["chat"])
    rec.incr("chat", "started", started)
    if completed:
        rec.incr("chat", "completed", completed)
        rec.incr("chat", "tokens.output.completed", 8 * completed)
    if errors:
        rec.incr("chat", "http_error", errors)
        rec.incr("chat", "http_error.500", errors)
    return rec.snapshot()


def test_finish_counters_merge_adds_like_one_generator() -> None:
    a = RunCounters.of(RunStats(stop_ns=5, ended_ns=7, steady_from_ns=2, requests_started=3, peak_in_flight=2,
                                steady_phase_area={"streaming": 10}, gc_pause_max_ns=4,
                                error_samples={"http_error.500": ["boom"]}, codes_folded=1),
                       _snap(3, 2, 1))
    b = RunCounters.of(RunStats(stop_ns=9, ended_ns=6, steady_from_ns=1, requests_started=4, peak_in_flight=3,
                                steady_phase_area={"streaming": 5, "connecting": 1}, gc_pause_max_ns=2,
                                interrupted_by="SIGINT", error_samples={"http_error.500": ["bang"]}),
                       _snap(4, 4, 0))
    m = a.merge(b)
    assert (m.started, m.completed, m.errors, m.output_tokens) == (7, 6, 1, 48)
    assert m.count("http_error.500") == 1 and m.codes_folded == 1
    assert (m.stop_ns, m.ended_ns, m.steady_from_ns, m.gc_pause_max_ns) == (9, 7, 1, 4)
    assert (m.requests_started, m.peak_in_flight) == (7, 5)
    assert m.steady_phase_area == {"streaming": 15, "connecting": 1}
    assert m.interrupted_by == "SIGINT" and m.error_samples == {"http_error.500": ("boom", "bang")}
    assert a.merge(b).merge(RunCounters(steady_from_ns=1)) == m  # associative, empty adds nothing


def test_finish_counters_cross_processes_as_json() -> None:
    c = RunCounters.of(RunStats(stop_ns=5, cpu_fractions=[0.5, 0.25], error_samples={"timeout": ["x"]},
                                cancelled_by="run.grace_s"), _snap(3, 2, 1))
    assert RunCounters.from_json(json.loads(json.dumps(c.to_json()))) == c
    assert RunCounters.from_json({"stop_ns": 7}) == RunCounters(stop_ns=7)
    with pytest.raises(ResultsError, match="counters: unknown field"):
        RunCounters.from_json({"stop_nss": 7})


def _judged(workers: int, **meta: Any) -> dict[str, Any]:
    """The same measured streams judged as one process or split over ``workers`` parts."""
    profile = parse_profile(_PROFILE.format(requests=40, workers=workers))
    stats = {"stop_ns": 2 * 10**9, "steady_area": 8 * 2 * 10**9, "steady_phase_area": {"streaming": 16 * 10**9}}
    snaps = [_snap(40 // workers, 30 // workers, 10 // workers) for _ in range(workers)]
    total = Snapshot.merge(snaps)
    if workers == 1:
        parts = [Part(profile, RunCounters.of(RunStats(**stats), total), total)]
    else:
        parts = [Part(share_profile(profile, sh), RunCounters.of(RunStats(**stats), snaps[sh.index]),
                      snaps[sh.index], WorkerInfo(sh.index, "h", 1, "done", None, {"concurrency": 4}))
                 for sh in split_load(profile, workers)]
    m = dict(base_meta(profile), started_at_unix_s=1.0, **meta)
    return judge(profile, parts, total, None, m, RunEnd(ended_at_unix_s=3.0, intervals=4)).to_json()


def test_finish_judge_one_process_and_workers_agree() -> None:
    one, two = _judged(1), _judged(2)
    assert set(two) - set(one) == {"engine", "hosts", "worker_detail"}
    assert set(one["load"]) <= set(two["load"])
    for key in ("complete", "saturated", "warnings", "headline", "error_samples", "interrupted_by"):
        assert one[key] == two[key], key
    # run.requests: judged as a duration is, up to when its last request was taken (issue 39)
    assert one["headline"]["errors"] == 10 and one["load"]["held"] is True
    assert any(w.startswith("error rate 25.0%") and "http_error.500 10" in w for w in one["warnings"])
    # an interrupted run says so in the same words whatever the engine
    one, two = _judged(1, interrupted_by="SIGINT"), _judged(2, interrupted_by="SIGINT")
    assert one["warnings"][0] == two["warnings"][0] == (
        "run interrupted (SIGINT): results are partial (complete: false)")
    assert one["complete"] is two["complete"] is False


def test_finish_merger_says_interrupted_like_one_process(tmp_path: Path) -> None:
    profile = parse_profile(_PROFILE.format(requests=40, workers=2))
    shares = split_load(profile, 2)
    writer = ResultsWriter(tmp_path)
    meta = dict(base_meta(profile), interrupted_by="SIGTERM")
    writer.start(meta)
    merger = Merger(profile, shares, writer, io.StringIO(), meta)
    for sh in shares:
        rec = Recorder(["chat"])
        merger.handle({"kind": "done", "worker": sh.index, "total": rec.snapshot().to_json(),
                       "warmup": rec.snapshot().to_json(), "counters": {"stop_ns": 10**9}, "start_skew_ns": 0})
    summary, complete = merger.finish(None, "local")
    assert not complete
    assert summary["warnings"][0] == "run interrupted (SIGTERM): results are partial (complete: false)"
    assert json.loads((tmp_path / "summary.json").read_text()) == summary


def _keys(obj: Any, prefix: str = "") -> set[str]:
    """Every key path of a JSON object ("load.held", ...); lists and hdr blobs not entered."""
    if not isinstance(obj, dict):
        return set()
    out: set[str] = set()
    for k, v in obj.items():
        path = f"{prefix}{k}"
        out.add(path)
        if k not in ("profile", "environment", "scopes", "warmup", "error_samples", "scrape"):
            out |= _keys(v, path + ".")
    return out


_ENGINE_ONLY = {"engine", "hosts", "worker_detail", "load.peak_in_flight_note", "load.peak_open_note"}
# figures that depend on the machine's load at that moment, not on the engine (also how late the
# client read, "error bound", and a request budget's window a busy machine stretched past 1 s)
_MACHINE = ("load generator saturated", "worker ", "the embedded emulator fell behind", "client_lagged",
            "proxy buffering suspected", "load not held", "error bound")


@pytest.mark.slow
def test_finish_one_process_and_two_workers_write_the_same_summary_shape(tmp_path: Path) -> None:
    """The same seeded emulator profile, single-process and with --workers 2: the same
    summary.json keys, the same verdict, and progress called the same way."""
    seen: dict[int, list[dict[str, Any]]] = {1: [], 2: []}
    one = run_profile(parse_profile(_PROFILE.format(requests=60, workers=1)), out_dir=tmp_path / "one",
                      progress=lambda iv, line: seen[1].append(line))
    two = _run_local(parse_profile(_PROFILE.format(requests=60, workers=2)), out_dir=tmp_path / "two",
                     on_line=None, progress=lambda iv, line: seen[2].append(line), base_url=None,
                     target=_process_main)
    s1 = json.loads((tmp_path / "one" / "summary.json").read_text())
    s2 = json.loads((tmp_path / "two" / "summary.json").read_text())
    assert (one.summary, two.summary) == (s1, s2)  # what the run returns is what it wrote
    assert seen[1] and seen[2]
    # the host figures too: with workers the driver's one sample of the machine, every
    # worker's CPU in client_cpu_cores, the workers' verdicts merged (generator.saturation)
    k1, k2 = _keys(s1), _keys(s2) - _ENGINE_ONLY
    assert k1 == k2, k1 ^ k2
    assert "generator.saturation" in _keys(s1) and all("saturation" in d for d in s2["worker_detail"])
    if Path("/proc/stat").exists():
        g = s2["generator"]
        assert g["machine_busy_share"] is not None and g["neighbours_cpu_cores"] is not None
        assert g["emulator_cpu_cores"] is not None and g["emulator_cpu_note"] is None
        workers_cpu = sum(d["host_cpu"]["process_cpu_cores"] for d in s2["worker_detail"])
        assert g["client_cpu_cores"] == pytest.approx(g["process_cpu_cores"] + workers_cpu, abs=3e-4)
    assert set(s1["scopes"]) == set(s2["scopes"]) == {"chat", ALL}
    for s in (s1, s2):
        c = s["scopes"][ALL]["counters"]
        assert s["headline"]["started"] == c["started"] == 60
        assert s["headline"]["errors"] == c.get("http_error", 0) > 0
    for key in ("complete", "interrupted_by"):
        assert s1[key] == s2[key], key
    # 60 requests of ~10 ms streams: a budget's window under BUDGET_WINDOW_MIN_S is not judged
    # (on a machine busy enough to stretch the window past it, it is, like any other)
    assert s1["complete"] is True
    for s in (s1, s2):
        assert s["load"]["held"] is None or s["load"]["measured_s"] >= BUDGET_WINDOW_MIN_S, s["load"]
    # which outcome details are shown: the same detail counters, the same warnings
    details = [{k for k in s["scopes"][ALL]["counters"] if k.startswith("http_error.")} for s in (s1, s2)]
    assert details[0] == details[1] == {"http_error.500"}
    kinds = [sorted(re.sub(r"[0-9.]+%?", "N", w.split(":")[0]) for w in s["warnings"]
                    if not w.startswith(_MACHINE)) for s in (s1, s2)]
    assert kinds[0] == kinds[1]


def test_merge_saturation_keeps_one_primary_cause_with_advice() -> None:
    """--workers: the merged verdict has one primary cause (the kind most workers named
    primary) with advice; every other kind is secondary, without advice (each worker's
    verdict named its own primary: merged, two kinds came with contradictory advice)."""
    from hopbench.driver._judge import merge_saturation

    def v(*causes: tuple[str, str]) -> dict[str, Any]:
        return {"saturated": True, "symptoms": ["lag"],
                "causes": [{"kind": k, "figure": f"{k} fig", "advice": f"{k} advice" if r == "primary" else None,
                            "role": r} for k, r in causes]}

    merged = merge_saturation([(0, v(("emulator", "primary"), ("machine_busy", "secondary"))),
                               (1, v(("machine_busy", "primary"), ("emulator", "secondary"))),
                               (2, v(("machine_busy", "primary"))), (3, None)])
    assert merged["saturated"] and merged["symptoms"] == ["worker 0: lag", "worker 1: lag", "worker 2: lag"]
    assert [(c["kind"], c["role"], c["advice"], c["workers"]) for c in merged["causes"]] == [
        ("machine_busy", "primary", "machine_busy advice", [0, 1, 2]),
        ("emulator", "secondary", None, [0, 1])]
    assert merged["causes"][0]["figure"] == "worker 1: machine_busy fig"  # the first to name it primary
    # an older summary's causes (no role): each worker's first is its primary
    old = merge_saturation([(0, {"saturated": True, "symptoms": [], "causes": [
        {"kind": "client_cpu", "figure": "f", "advice": "a"}, {"kind": "collector", "figure": "g", "advice": "b"}]})])
    assert [(c["kind"], c["role"], c["advice"]) for c in old["causes"]] == [
        ("client_cpu", "primary", "a"), ("collector", "secondary", None)]
    assert merge_saturation([]) == {"saturated": False, "symptoms": [], "causes": []}
