"""``hopbench export``: summary figures and stream records round-trip through
csv, jsonl (and parquet when pyarrow is installed); bad output folders and a
missing pyarrow are clear errors (hopbench.views._export)."""

from __future__ import annotations

import csv
import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

from hopbench import ResultsError
from hopbench._errors import UsageError
from hopbench.views._export import SCRAPE_COLUMNS, SUMMARY_COLUMNS, export_results, summary_rows, trust_rows
from hopbench.config._profile import parse_profile
from hopbench.driver._single import run_profile
from hopbench.cli import main

PROFILE = """
[run]
duration_s = 1
[load]
concurrency = 3
[target]
embedded = true
[emulator]
ttft_ms = 10
tokens_per_s = 300
output_tokens = 6
[emulator.faults]
midstream_error = 0.3
[[scenario]]
protocol = "chat"
[[scenario]]
protocol = "messages"
[[scrape]]
url = "embedded"
interval_s = 0.3
timeout_s = 10
"""


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("export") / "run"
    outcome = run_profile(parse_profile(PROFILE, env={}), out_dir=out)
    assert outcome.complete
    return out


def _streams(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (run_dir / "streams.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_export_csv_round_trips(run_dir: Path, tmp_path: Path) -> None:
    assert main(["export", str(run_dir), "--format", "csv", "--out", str(tmp_path)]) == 0
    summary = json.loads((run_dir / "summary.json").read_text())
    with open(tmp_path / "summary.csv", encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    assert tuple(rows[0]) == SUMMARY_COLUMNS
    got = {(r["scope"], r["kind"], r["name"]): float(r["value"]) for r in rows}
    c = summary["scopes"]["all"]["counters"]
    assert got[("all", "counter", "started")] == c["started"] > 0
    assert got[("all", "metric", "ttft.p99")] == summary["scopes"]["all"]["metrics"]["ttft"]["p99"]
    assert got[("all", "tokens", "output.completed")] == summary["scopes"]["all"]["tokens"]["output"]["completed"]
    assert {r["unit"] for r in rows if r["name"] == "ttft.p50"} == {"ms"}
    with open(tmp_path / "streams.csv", encoding="utf-8", newline="") as f:
        streams = list(csv.DictReader(f))
    want = _streams(run_dir)
    assert len(streams) == len(want) > 0
    def cell(v: Any) -> str:  # nested fields (events, headers) are JSON text in a cell
        if v is None:
            return ""
        return json.dumps(v, separators=(",", ":")) if isinstance(v, (dict, list)) else str(v)

    for row, rec in zip(streams, want):  # the run columns first, then the record; declared columns it lacks empty
        assert list(row)[:2] == ["run", "run_dir"] and row["run"] == row["run_dir"] == run_dir.name
        assert row == {"run": run_dir.name, "run_dir": run_dir.name, **{c: "" for c in row if c not in ("run", "run_dir")},
                       **{k: cell(v) for k, v in rec.items()}}
    assert "cached_tokens" in streams[0] and "headers" in streams[0]  # no value in this run, still a column
    assert any(json.loads(r["events"])["text"] for r in streams)
    assert any(r["detail"] for r in streams) and any(not r["detail"] for r in streams)


@pytest.mark.slow
def test_export_jsonl_round_trips(run_dir: Path, tmp_path: Path) -> None:
    paths = export_results(run_dir, "jsonl", tmp_path)
    summary = json.loads((run_dir / "summary.json").read_text())
    # the figures first, as they always were; then whether the run can be trusted
    assert [json.loads(x) for x in paths[0].read_text().splitlines()] == [
        dict(r, run_dir=run_dir.name) for r in summary_rows(summary) + trust_rows(summary)]
    got = [json.loads(x) for x in paths[1].read_text().splitlines()]
    assert [{k: v for k, v in r.items() if k in rec} for r, rec in zip(got, _streams(run_dir))] == [
        {k: rec[k] for k in r if k in rec} for r, rec in zip(got, _streams(run_dir))]
    assert len(got) == len(_streams(run_dir)) and {r["run"] for r in got} == {run_dir.name}
    assert all(set(r) - set(rec) <= {"run", "run_dir", "cached_tokens", "headers"}
               for r, rec in zip(got, _streams(run_dir)))
    # the scraped samples, one row each, back to scrape.jsonl's records
    rows = [json.loads(x) for x in paths[2].read_text().splitlines()]
    scrapes = [json.loads(x) for x in (run_dir / "scrape.jsonl").read_text().splitlines()]
    back: dict[tuple[str, float], dict[str, Any]] = {}
    for r in rows:
        assert tuple(r) == SCRAPE_COLUMNS and r["error"] is None
        back.setdefault((r["url"], r["t_ms"]), {})[r["series"]] = r["value"]
    assert back == {(x["url"], x["t_ms"]): x["s"] for x in scrapes} and len(back) >= 2


@pytest.mark.slow
def test_export_without_scrape_writes_no_scrape_table(run_dir: Path, tmp_path: Path) -> None:
    import shutil

    plain = tmp_path / "plain"
    shutil.copytree(run_dir, plain, ignore=shutil.ignore_patterns("scrape.jsonl", "export"))
    assert [p.name for p in export_results(plain, "csv")] == ["summary.csv", "streams.csv"]


@pytest.mark.slow
def test_export_parquet_round_trips_or_names_the_extra(run_dir: Path, tmp_path: Path) -> None:
    if importlib.util.find_spec("pyarrow") is None:
        with pytest.raises(UsageError, match=r"pip install 'hopbench\[parquet\]'"):
            export_results(run_dir, "parquet", tmp_path)
        assert not list(tmp_path.iterdir())
        return
    import pyarrow.parquet as pq

    paths = export_results(run_dir, "parquet", tmp_path)
    got = pq.read_table(paths[1]).to_pylist()
    assert [{k: r[k] for k in rec} for r, rec in zip(got, _streams(run_dir))] == _streams(run_dir)
    assert len(got) == len(_streams(run_dir)) and {r["run"] for r in got} == {run_dir.name}
    summary = json.loads((run_dir / "summary.json").read_text())
    assert pq.read_table(paths[0]).to_pylist() == [
        dict(r, run_dir=run_dir.name) for r in summary_rows(summary) + trust_rows(summary)]


@pytest.mark.slow
def test_export_unwritable_folder_is_a_clear_error(run_dir: Path, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    with pytest.raises(ResultsError, match="cannot write the export to .*a-file"):
        export_results(run_dir, "csv", blocker / "sub")
    assert main(["export", str(run_dir), "--out", str(blocker / "sub")]) == 2
    assert "pick a writable folder" in capsys.readouterr().err
    assert main(["export", str(tmp_path / "missing")]) == 2


@pytest.mark.slow
def test_export_skips_a_cut_last_line_with_a_warning(run_dir: Path, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """A crash mid-write cuts streams.jsonl's last line: the complete lines are exported,
    the cut one is named and skipped; a broken line in the middle is still an error."""
    import shutil

    cut = tmp_path / "cut"
    shutil.copytree(run_dir, cut, ignore=shutil.ignore_patterns("export"))
    lines = (cut / "streams.jsonl").read_text().splitlines(keepends=True)
    assert len(lines) >= 3
    (cut / "streams.jsonl").write_text("".join(lines) + lines[0][:25], encoding="utf-8")
    assert main(["export", str(cut), "--format", "jsonl", "--out", str(tmp_path / "x")]) == 0
    err = capsys.readouterr().err
    assert f"{cut / 'streams.jsonl'}:{len(lines) + 1}: the last line was cut" in err
    got = (tmp_path / "x" / "streams.jsonl").read_text().splitlines()
    assert [json.loads(x)["id"] for x in got] == [json.loads(x)["id"] for x in lines]
    # the same cut line in the middle of the file is corruption, not a crash: an error naming file:line
    (cut / "streams.jsonl").write_text(lines[0][:25] + "\n" + "".join(lines), encoding="utf-8")
    assert main(["export", str(cut), "--out", str(tmp_path / "y")]) == 2
    assert f"{cut / 'streams.jsonl'}:1: not JSON" in capsys.readouterr().err
    # a broken last line that did end with its newline was written whole: an error too
    (cut / "streams.jsonl").write_text("".join(lines) + "{oops\n", encoding="utf-8")
    with pytest.raises(ResultsError, match=rf"streams.jsonl:{len(lines) + 1}: not JSON"):
        export_results(cut, "csv", tmp_path / "z")


@pytest.mark.slow
@pytest.mark.parametrize("name", ["streams.jsonl", "scrape.jsonl", "summary.json"])
def test_export_non_utf8_bytes_name_file_and_line_exit_2(run_dir: Path, tmp_path: Path, name: str,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """Bytes that are not UTF-8 (a damaged file) are an error naming file:line and the byte
    within the line, exit 2, no traceback: in the middle of a file or on a whole last line."""
    import shutil

    bad = tmp_path / "bad"
    shutil.copytree(run_dir, bad, ignore=shutil.ignore_patterns("export"))
    path = bad / name
    raw = path.read_bytes()
    n = raw.count(b"\n") + (1 if raw.endswith(b"\n") else 2)  # the line appended
    path.write_bytes(raw + (b"" if raw.endswith(b"\n") else b"\n") + b"\xff\xfe\n")
    assert main(["export", str(bad), "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert f"{path}:{n}: not UTF-8 text (byte 1 of the line: 0xff)" in err, err
    assert "Traceback" not in err


@pytest.mark.slow
def test_export_a_last_line_cut_inside_a_character_is_skipped(run_dir: Path, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    import shutil

    cut = tmp_path / "cut"
    shutil.copytree(run_dir, cut, ignore=shutil.ignore_patterns("export"))
    raw = (cut / "streams.jsonl").read_bytes()
    n = raw.count(b"\n")
    (cut / "streams.jsonl").write_bytes(raw + '{"id": "caf\u00e9'.encode()[:-1])  # é cut after its first byte
    assert main(["export", str(cut), "--format", "jsonl", "--out", str(tmp_path / "x")]) == 0
    assert f"{cut / 'streams.jsonl'}:{n + 1}: the last line was cut" in capsys.readouterr().err
    assert len((tmp_path / "x" / "streams.jsonl").read_text().splitlines()) == n


def _staged(run_dir: Path, tmp_path: Path, missing: bool = False) -> Path:
    """A staged results folder (docs/slo.md) made of two copies of one run as its stages."""
    import shutil

    top = tmp_path / "staged"
    for name in ("stage-01-c1", "stage-02-c2"):
        if not (missing and name == "stage-02-c2"):
            shutil.copytree(run_dir, top / name, ignore=shutil.ignore_patterns("export"))
    summary = json.loads((run_dir / "summary.json").read_text())
    summary["stage_of_record"] = "stage-01-c1"
    summary["stages_kind"] = "stages"
    summary["stages"] = [
        {"load": 1.0, "mode": "concurrency", "folder": "stage-01-c1", "passed": True, "reasons": [],
         "good_fraction": 1.0, "ttft_p99_ms": 12.5, "goodput_rps": 3.0, "saturation": None},
        {"load": 2.0, "mode": "concurrency", "folder": "stage-02-c2", "passed": False, "reasons": ["slo"],
         "good_fraction": 0.5, "ttft_p99_ms": 40.0, "goodput_rps": 2.0, "saturation": None}]
    summary["capacity"] = {"mode": "concurrency", "unit": "users", "status": "stages", "rate_rps": None,
                           "concurrency": 1, "lowest_failing": 2, "target": 0.9,
                           "emulator_knee": {"concurrency": 4, "rate_rps": 20.0}}
    (top / "summary.json").write_text(json.dumps(summary), encoding="utf-8")
    return top


@pytest.mark.slow
def test_export_staged_folder_exports_every_stage_with_a_stage_column(run_dir: Path, tmp_path: Path) -> None:
    """A staged/search folder keeps its streams in stage-NN-*/ sub-folders: they are all
    exported, each row naming its stage; the stage and capacity figures are summary rows."""
    top = _staged(run_dir, tmp_path)
    assert main(["export", str(top), "--format", "jsonl", "--out", str(tmp_path / "x")]) == 0
    n = len(_streams(run_dir))
    streams = [json.loads(x) for x in (tmp_path / "x" / "streams.jsonl").read_text().splitlines()]
    assert len(streams) == 2 * n > 0
    assert [r["stage"] for r in streams] == ["stage-01-c1"] * n + ["stage-02-c2"] * n
    assert list(streams[0])[:3] == ["run", "run_dir", "stage"] and {r["run"] for r in streams} == {"staged"}
    assert [r["id"] for r in streams[:n]] == [r["id"] for r in _streams(run_dir)]
    rows = [json.loads(x) for x in (tmp_path / "x" / "summary.jsonl").read_text().splitlines()]
    assert list(rows[0]) == ["run", "stage", "scope", "kind", "name", "value", "unit", "run_dir"]
    assert {r["run_dir"] for r in rows} == {r["run_dir"] for r in streams} == {"staged"}
    fig = {(r["stage"], r["kind"], r["name"]): r["value"] for r in rows}
    assert fig[("stage-01-c1", "stage", "passed")] == 1 and fig[("stage-02-c2", "stage", "passed")] == 0
    assert fig[("stage-01-c1", "stage", "of_record")] == 1 and fig[("stage-02-c2", "stage", "of_record")] == 0
    assert fig[("stage-02-c2", "stage", "ttft_p99_ms")] == 40.0
    assert fig[(None, "capacity", "concurrency")] == 1 and fig[(None, "capacity", "status.stages")] == 1
    assert fig[(None, "capacity", "emulator_knee.rate_rps")] == 20.0
    summary = json.loads((run_dir / "summary.json").read_text())
    assert fig[("stage-02-c2", "counter", "completed")] == summary["scopes"]["all"]["counters"]["completed"]
    scrape = (tmp_path / "x" / "scrape.jsonl").read_text().splitlines()
    assert scrape and {json.loads(x)["stage"] for x in scrape} == {"stage-01-c1", "stage-02-c2"}


@pytest.mark.slow
def test_export_staged_folder_missing_stage_warns(run_dir: Path, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    top = _staged(run_dir, tmp_path, missing=True)
    assert main(["export", str(top), "--out", str(tmp_path / "x")]) == 0
    assert "stage 'stage-02-c2' has no results folder" in capsys.readouterr().err


def test_export_nothing_to_export_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "summary.json").write_text(json.dumps({"schema": "hopbench.summary/1", "scopes": {}}),
                                           encoding="utf-8")
    assert main(["export", str(tmp_path), "--out", str(tmp_path / "x")]) == 2
    assert "nothing to export" in capsys.readouterr().err


# -- whether the run can be trusted (trust_rows), on built summaries: no load runs ---------------

_SCOPES = {"all": {"counters": {"completed": 5, "started": 7},
                   "tokens": {"output": {"completed": 30}},
                   "metrics": {"ttft": {"unit": "ms", "count": 5, "p50": 12.5, "p99": 40.0}}}}


def _summary(**extra: Any) -> dict[str, Any]:
    """A summary.json as a partial, saturated open-loop run writes it (docs/results.md)."""
    doc: dict[str, Any] = {
        "schema": "hopbench.summary/1", "name": "nightly",
        "profile": {"_source": "profiles/nightly.toml", "run": {"name": "nightly"}},
        "environment": {"hopbench": "0.1.0", "python": "3.11.9"},
        "saturated": True,
        "warnings": ["run interrupted (SIGINT): results are partial (complete: false)",
                     "load generator saturated: loop lag p99 80 ms (> 25 ms)",
                     "load not held: 6.0 requests/s sent to the target, 10 requested"],
        "interrupted_by": "SIGINT",
        "load": {"mode": "rate", "held": False, "requested_rate_rps": 10.0, "achieved_rate_rps": 6.0,
                 "due": 98, "sent": 60, "mean_busy": 2.5, "peak_in_flight": 4},
        "gate": {"ttft.p99": "< 500 ms"},
        "complete": False, "scopes": _SCOPES, "warmup": None}
    doc.update(extra)
    return doc


def _folder(tmp_path: Path, summary: dict[str, Any], name: str = "run", streams: bool = True) -> Path:
    """A results folder of ``summary`` and (``streams``) a streams.jsonl of one stream."""
    out = tmp_path / name
    out.mkdir()
    (out / "summary.json").write_text(json.dumps(summary), encoding="utf-8")
    if streams:
        (out / "streams.jsonl").write_text(json.dumps({"id": "0-1", "scenario": "chat", "outcome": "completed",
                                                       "start_ns": 5, "burst": None}) + "\n", encoding="utf-8")
    return out


def test_trust_rows_of_a_partial_saturated_run() -> None:
    rows = trust_rows(_summary())
    assert {(r["run"], r["scope"]) for r in rows} == {("nightly", "all")}
    assert [(r["kind"], r["name"], r["value"], r["unit"]) for r in rows] == [
        ("run", "complete", 0, ""),
        ("run", "interrupted_by.SIGINT", 1, ""),
        ("run", "saturated", 1, ""),
        ("run", "load.held", 0, ""),
        ("run", "load.requested_rate_rps", 10.0, "requests/s"),
        ("run", "load.achieved_rate_rps", 6.0, "requests/s"),
        ("run", "load.due", 98, ""),
        ("run", "load.sent", 60, ""),
        ("run", "load.mean_busy", 2.5, ""),
        ("run", "warnings", 3, ""),
        ("run", "profile.profiles/nightly.toml", 1, ""),
        ("run", "hopbench_version.0.1.0", 1, ""),
        ("warning", "run interrupted (SIGINT): results are partial (complete: false)", 1, ""),
        ("warning", "load generator saturated: loop lag p99 80 ms (> 25 ms)", 2, ""),
        ("warning", "load not held: 6.0 requests/s sent to the target, 10 requested", 3, "")]


def test_trust_rows_of_a_complete_closed_loop_run_and_of_an_old_summary() -> None:
    good = _summary(saturated=False, warnings=[], interrupted_by=None, complete=True,
                    load={"mode": "concurrency", "held": True, "requested_concurrency": 8, "mean_busy": 7.9})
    got = {r["name"]: r["value"] for r in trust_rows(good)}
    assert got == {"complete": 1, "saturated": 0, "load.held": 1, "load.requested_concurrency": 8,
                   "load.mean_busy": 7.9, "warnings": 0, "profile.profiles/nightly.toml": 1,
                   "hopbench_version.0.1.0": 1}
    # a summary without those facts (older, hand-made) gets no invented ones
    assert trust_rows({"name": "x", "scopes": _SCOPES, "load": {"mean_busy": None}}) == []


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_export_adds_trust_rows_after_the_unchanged_figures(tmp_path: Path, fmt: str) -> None:
    """The figure rows are byte for byte what they were (with the folder's name, ``run_dir``,
    last); the trust rows follow them and keep ``value`` numeric (the text facts are in ``name``)."""
    summary = _summary()
    run = _folder(tmp_path, summary)
    figures = [dict(r, run_dir="run") for r in summary_rows(summary)]
    export_results(run, fmt, tmp_path / "x")
    text = (tmp_path / "x" / f"summary.{fmt}").read_text(encoding="utf-8")
    lines = text.splitlines(keepends=True)
    if fmt == "csv":
        with open(tmp_path / "old.csv", "w", encoding="utf-8", newline="") as f:
            w = csv.writer(f)
            w.writerow(SUMMARY_COLUMNS)
            for r in figures:
                w.writerow(["" if r[c] is None else r[c] for c in SUMMARY_COLUMNS])
        old = (tmp_path / "old.csv").read_text(encoding="utf-8")
        rows = list(csv.DictReader(lines))
        assert all(float(r["value"]) == float(r["value"]) for r in rows)  # numbers, every one
    else:
        old = "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in figures)
        rows = [json.loads(x) for x in lines]
        assert all(isinstance(r["value"], (int, float)) for r in rows)
    assert text.startswith(old) and len(lines) > len(old.splitlines())
    trust = rows[len(figures):]
    assert {(r["kind"], r["name"]) for r in trust} >= {("run", "complete"), ("run", "interrupted_by.SIGINT"),
                                                        ("run", "saturated"), ("run", "load.held")}
    assert [r["name"] for r in trust if r["kind"] == "warning"] == summary["warnings"]


def test_export_warns_on_an_incomplete_saturated_unheld_run(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    run = _folder(tmp_path, _summary())
    assert main(["export", str(run), "--out", str(tmp_path / "x")]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err == [
        f"hopbench export: warning: exported run {run} is incomplete (interrupted by SIGINT): its figures "
        "cover only part of the planned run: run interrupted (SIGINT): results are partial (complete: false)",
        f"hopbench export: warning: exported run {run} is saturated: the load generator was the bottleneck, "
        "its latencies include client-side delay: load generator saturated: loop lag p99 80 ms (> 25 ms)",
        f"hopbench export: warning: exported run {run} did not hold its load: load not held: 6.0 requests/s "
        "sent to the target, 10 requested"]
    # a complete run that held its load exports in silence
    good = _folder(tmp_path, _summary(complete=True, interrupted_by=None, saturated=False, warnings=[],
                                      load={"held": True}), "good")
    assert main(["export", str(good), "--out", str(tmp_path / "y")]) == 0
    assert capsys.readouterr().err == ""


def test_export_staged_folder_adds_each_stage_trust_rows(tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """Per stage, its own summary's trust rows (``stage`` its folder); then the whole staged
    run's (``stage`` null); the stage, capacity and figure rows before them unchanged."""
    top = tmp_path / "staged"
    top.mkdir()
    ok = _summary(complete=True, interrupted_by=None, saturated=False, warnings=[],
                  load={"mode": "rate", "held": True, "requested_rate_rps": 4.0, "achieved_rate_rps": 4.0})
    _folder(top, ok, "probe-01-r4")
    _folder(top, _summary(), "probe-02-r10")
    whole = _summary(stage_of_record="probe-01-r4", stages_kind="search", saturated=False,
                     load=ok["load"], warnings=["run interrupted (SIGINT): results are partial (complete: false)"],
                     stages=[{"load": 4.0, "folder": "probe-01-r4", "passed": True, "held": True},
                             {"load": 10.0, "folder": "probe-02-r10", "passed": False, "held": False}],
                     capacity={"mode": "rate", "status": "interrupted", "rate_rps": 4.0})
    (top / "summary.json").write_text(json.dumps(whole), encoding="utf-8")
    assert main(["export", str(top), "--format", "jsonl", "--out", str(tmp_path / "x")]) == 0
    err = capsys.readouterr().err
    assert f"exported run {top} is incomplete (interrupted by SIGINT)" in err
    assert "saturated" not in err and "did not hold" not in err  # the stage of record held its load
    rows = [json.loads(x) for x in (tmp_path / "x" / "summary.jsonl").read_text().splitlines()]
    kinds = [r["kind"] for r in rows]
    first = kinds.index("run")
    assert set(kinds[first:]) == {"run", "warning"} and "capacity" in kinds[:first]
    fig = {(r["stage"], r["kind"], r["name"]): r["value"] for r in rows[first:]}
    assert fig[("probe-01-r4", "run", "complete")] == 1 and fig[("probe-01-r4", "run", "load.held")] == 1
    assert fig[("probe-02-r10", "run", "complete")] == 0 and fig[("probe-02-r10", "run", "saturated")] == 1
    assert fig[("probe-02-r10", "run", "interrupted_by.SIGINT")] == 1
    assert fig[("probe-02-r10", "warning", "load not held: 6.0 requests/s sent to the target, 10 requested")] == 3
    assert fig[(None, "run", "complete")] == 0 and fig[(None, "run", "warnings")] == 1
    assert fig[(None, "run", "load.achieved_rate_rps")] == 4.0


@pytest.mark.slow
def test_run_writes_its_gate_verdict_and_export_carries_it(tmp_path: Path) -> None:
    prof = tmp_path / "g.toml"
    prof.write_text('[run]\nname = "g"\nrequests = 6\n[load]\nconcurrency = 2\n[target]\nembedded = true\n'
                    '[emulator]\nttft_ms = 1\ntokens_per_s = 2000\nkeepalive_interval_s = 0\n'
                    '[[scenario]]\nprotocol = "chat"\nmodel = "m"\nmax_tokens = 4\n'
                    '[gate]\n"error_rate" = "<= 1%"\n"ttft.count" = ">= 1000"\n', encoding="utf-8")
    out = tmp_path / "r"
    code = main(["run", str(prof), "--out", str(out), "--quiet"])
    verdict = json.loads((out / "gate.json").read_text(encoding="utf-8"))
    # 6 requests cannot make 1,000 ttft samples (a count is exact, no noise excuses it): exit 1
    assert code == verdict["exit_code"] == 1 and verdict["passed"] is False
    export_results(out, "jsonl")
    rows = [json.loads(x) for x in (out / "export" / "summary.jsonl").read_text(encoding="utf-8").splitlines()]
    gate = {r["name"]: r["value"] for r in rows if r["name"].startswith("gate.")}
    assert gate == {"gate.passed": 0, "gate.exit_code": 1, "gate.budget.error_rate": 1, "gate.budget.ttft.count": 0}
    # a folder without gate.json (no [gate]) has no gate rows; a broken one is an error
    (out / "gate.json").write_text("[]", encoding="utf-8")
    with pytest.raises(ResultsError, match='boolean "passed"'):
        export_results(out, "jsonl")


def test_export_warns_when_nothing_completed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # every stream a 401 (a wrong key): `hopbench run` exits 4, and the export must say so too,
    # or the ttfb of the error responses reads like a gateway's latency in a notebook
    nothing = "nothing completed: none of the 519 streams completed (http_error.401 519)"
    run = _folder(tmp_path, _summary(complete=True, interrupted_by=None, saturated=False, load={"held": True},
                                     headline={"started": 519, "completed": 0, "client_cancelled": 0},
                                     warnings=[nothing, "scenario chat: nothing completed: none of its 275 "
                                               "streams completed (http_error.401 275); its figures are not "
                                               "measured"]))
    assert main(["export", str(run), "--out", str(tmp_path / "x")]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err == [f"hopbench export: warning: exported run {run}: no stream completed (519 started): its "
                   f"figures are of failures, not answers: {nothing}"], err
    none = _folder(tmp_path, _summary(complete=True, interrupted_by=None, saturated=False, load={"held": True},
                                      headline={"started": 0, "completed": 0}, warnings=[]), "none")
    assert main(["export", str(none), "--out", str(tmp_path / "y")]) == 0
    assert capsys.readouterr().err.splitlines() == [
        f"hopbench export: warning: exported run {none}: no stream was measured (none started after the warm-up)"]


@pytest.mark.parametrize("case", ["stream_log_off", "old_workers", "empty"])
def test_export_without_stream_records_warns_why(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                 case: str) -> None:
    """No per-stream record is said on stderr with its reason, never an empty file in silence:
    the streams table still has its declared columns (csv header, exit 0)."""
    good = dict(complete=True, interrupted_by=None, saturated=False, warnings=[], load={"held": True},
                started_at="2026-01-01T00:00:00.000+00:00")
    summary = _summary(**good)
    if case == "stream_log_off":
        summary["profile"]["run"]["stream_log"] = False
    elif case == "old_workers":
        summary["workers"] = 2
    run = _folder(tmp_path, summary, streams=False)
    if case == "empty":
        (run / "streams.jsonl").write_text("", encoding="utf-8")
    assert main(["export", str(run), "--out", str(tmp_path / "x")]) == 0
    why = {"stream_log_off": "streams.jsonl missing: run.stream_log = false in the profile",
           "old_workers": "streams.jsonl missing: a --workers run by an older hopbench, which wrote none",
           "empty": "streams.jsonl is empty: no stream ended"}[case]
    err = capsys.readouterr().err
    assert f"hopbench export: warning: {run}: this run kept no per-stream records ({why}" in err, err
    assert "its streams table has its columns and no row" in err
    header = (tmp_path / "x" / "streams.csv").read_text(encoding="utf-8").splitlines()
    assert len(header) == 1 and header[0].startswith("run,run_dir,id,scenario,warmup,outcome,")


def test_export_stream_columns_keep_their_types_in_a_run_without_bursts(tmp_path: Path) -> None:
    """A column no row gives a value (no burst, no cached tokens, no headers) keeps its declared
    type and place: csv, jsonl and parquet have the same columns as a run that had them."""
    line = {"id": "0-1", "scenario": "chat", "outcome": "completed", "detail": None, "status": 200,
            "start_ns": 5, "events": {"text": 3, "reasoning": 0, "tool": 0, "refusal": 0},
            "burst": None, "burst_held_ns": None}
    bursty = dict(line, burst="proxy_buffering_suspected", burst_held_ns=7, cached_tokens=4,
                  headers={"x-cache": "hit"})
    runs = {}
    for name, rec in (("calm", line), ("bursty", bursty)):
        run = _folder(tmp_path, _summary(complete=True, warnings=[]), name, streams=False)
        (run / "streams.jsonl").write_text(json.dumps(rec) + "\n", encoding="utf-8")
        runs[name] = run
    for fmt in ("csv", "jsonl"):
        heads = [export_results(r, fmt, tmp_path / f"{n}-{fmt}")[1].read_text().splitlines()[0] for n, r in runs.items()]
        keys = [h.split(",") if fmt == "csv" else list(json.loads(h)) for h in heads]
        assert keys[0] == keys[1] and keys[0][0] == "run" and "burst_held_ns" in keys[0]
    if importlib.util.find_spec("pyarrow") is None:
        return
    import pyarrow as pa
    import pyarrow.parquet as pq

    schemas = [pq.read_schema(export_results(r, "parquet", tmp_path / f"{n}-pq")[1]) for n, r in runs.items()]
    assert schemas[0] == schemas[1]
    types = {f.name: f.type for f in schemas[0]}
    assert types["burst"] == pa.string() and types["burst_held_ns"] == pa.int64()
    assert types["cached_tokens"] == pa.int64() and types["detail"] == pa.string()
    assert not any(pa.types.is_null(t) for t in types.values()), types
    summaries = [pq.read_schema(export_results(r, "parquet", tmp_path / f"{n}-pq")[0]) for n, r in runs.items()]
    assert summaries[0] == summaries[1] and summaries[0].field("value").type == pa.float64()


def test_export_parquet_scrape_value_is_float_with_nan_and_inf(tmp_path: Path) -> None:
    """A scrape's NaN and +Inf (text in scrape.jsonl, csv and jsonl) are floats in parquet: the
    value column is float64 in every run (it was a conversion error when a sample was NaN)."""
    if importlib.util.find_spec("pyarrow") is None:
        pytest.skip("pyarrow is not installed")
    import math

    import pyarrow as pa
    import pyarrow.parquet as pq

    run = _folder(tmp_path, _summary(complete=True, warnings=[]))
    (run / "scrape.jsonl").write_text(json.dumps({"url": "http://x/metrics", "t_ms": 1.5,
                                                  "s": {"a": 2, "b": "NaN", "c": "+Inf"}}) + "\n", encoding="utf-8")
    path = export_results(run, "parquet", tmp_path / "x")[2]
    table = pq.read_table(path)
    assert table.schema.field("value").type == pa.float64() and table.schema.field("error").type == pa.string()
    values = table.column("value").to_pylist()
    assert values[0] == 2.0 and math.isnan(values[1]) and values[2] == math.inf


def test_export_parquet_value_of_the_wrong_type_names_its_column(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    if importlib.util.find_spec("pyarrow") is None:
        pytest.skip("pyarrow is not installed")
    run = _folder(tmp_path, _summary(complete=True, warnings=[]), streams=False)
    (run / "streams.jsonl").write_text(json.dumps({"id": "0-1", "status": "two hundred"}) + "\n", encoding="utf-8")
    assert main(["export", str(run), "--format", "parquet", "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert "cannot export streams.parquet: column 'status': expected int values" in err and "Traceback" not in err


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_export_summary_and_streams_join_on_run_dir_and_mark_warmup_streams(tmp_path: Path, fmt: str) -> None:
    """summary.<ext>'s ``run`` is the run's name and streams.<ext>'s the folder's: both tables
    carry ``run_dir`` (the folder's name), so they join; ``warmup`` marks warm-up streams
    (issue 39 follow-up)."""
    run = _folder(tmp_path, _summary(), "nightly-20260102T030405Z", streams=False)
    (run / "streams.jsonl").write_text("".join(json.dumps({"id": f"0-{i}", "scenario": "chat", "outcome": "completed",
                                                           "start_ns": i, "warmup": i == 1}) + "\n"
                                               for i in (1, 2)), encoding="utf-8")
    summary_path, streams_path = export_results(run, fmt, tmp_path / "x")
    if fmt == "csv":
        with open(summary_path, encoding="utf-8", newline="") as f:
            summary = list(csv.DictReader(f))
        with open(streams_path, encoding="utf-8", newline="") as f:
            streams = list(csv.DictReader(f))
    else:
        summary = [json.loads(x) for x in summary_path.read_text().splitlines()]
        streams = [json.loads(x) for x in streams_path.read_text().splitlines()]
    assert {r["run"] for r in summary} == {"nightly"}  # the documented column keeps its meaning
    assert {r["run_dir"] for r in summary} == {r["run_dir"] for r in streams} == {run.name}
    assert [r["warmup"] for r in streams] == (["True", "False"] if fmt == "csv" else [True, False])
