"""``hopbench export``: summary figures and stream records round-trip through
csv, jsonl (and parquet when pyarrow is installed); bad output folders and a
missing pyarrow are clear errors (hopbench._export)."""

from __future__ import annotations

import csv
import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

from hopbench import ResultsError
from hopbench._errors import UsageError
from hopbench._export import SCRAPE_COLUMNS, SUMMARY_COLUMNS, export_results, summary_rows
from hopbench._profile import parse_profile
from hopbench._run import run_profile
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

    for row, rec in zip(streams, want):
        assert row == {k: cell(v) for k, v in rec.items()}
    assert any(json.loads(r["events"])["text"] for r in streams)
    assert any(r["detail"] for r in streams) and any(not r["detail"] for r in streams)


def test_export_jsonl_round_trips(run_dir: Path, tmp_path: Path) -> None:
    paths = export_results(run_dir, "jsonl", tmp_path)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert [json.loads(x) for x in paths[0].read_text().splitlines()] == summary_rows(summary)
    assert [json.loads(x) for x in paths[1].read_text().splitlines()] == _streams(run_dir)
    # the scraped samples, one row each, back to scrape.jsonl's records
    rows = [json.loads(x) for x in paths[2].read_text().splitlines()]
    scrapes = [json.loads(x) for x in (run_dir / "scrape.jsonl").read_text().splitlines()]
    back: dict[tuple[str, float], dict[str, Any]] = {}
    for r in rows:
        assert tuple(r) == SCRAPE_COLUMNS and r["error"] is None
        back.setdefault((r["url"], r["t_ms"]), {})[r["series"]] = r["value"]
    assert back == {(x["url"], x["t_ms"]): x["s"] for x in scrapes} and len(back) >= 2


def test_export_without_scrape_writes_no_scrape_table(run_dir: Path, tmp_path: Path) -> None:
    import shutil

    plain = tmp_path / "plain"
    shutil.copytree(run_dir, plain, ignore=shutil.ignore_patterns("scrape.jsonl", "export"))
    assert [p.name for p in export_results(plain, "csv")] == ["summary.csv", "streams.csv"]


def test_export_parquet_round_trips_or_names_the_extra(run_dir: Path, tmp_path: Path) -> None:
    if importlib.util.find_spec("pyarrow") is None:
        with pytest.raises(UsageError, match=r"pip install 'hopbench\[parquet\]'"):
            export_results(run_dir, "parquet", tmp_path)
        assert not list(tmp_path.iterdir())
        return
    import pyarrow.parquet as pq

    paths = export_results(run_dir, "parquet", tmp_path)
    assert pq.read_table(paths[1]).to_pylist() == _streams(run_dir)
    assert len(pq.read_table(paths[0]).to_pylist()) == len(summary_rows(json.loads(
        (run_dir / "summary.json").read_text())))


def test_export_unwritable_folder_is_a_clear_error(run_dir: Path, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    with pytest.raises(ResultsError, match="cannot write the export to .*a-file"):
        export_results(run_dir, "csv", blocker / "sub")
    assert main(["export", str(run_dir), "--out", str(blocker / "sub")]) == 2
    assert "pick a writable folder" in capsys.readouterr().err
    assert main(["export", str(tmp_path / "missing")]) == 2


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


def test_export_staged_folder_exports_every_stage_with_a_stage_column(run_dir: Path, tmp_path: Path) -> None:
    """A staged/search folder keeps its streams in stage-NN-*/ sub-folders: they are all
    exported, each row naming its stage; the stage and capacity figures are summary rows."""
    top = _staged(run_dir, tmp_path)
    assert main(["export", str(top), "--format", "jsonl", "--out", str(tmp_path / "x")]) == 0
    n = len(_streams(run_dir))
    streams = [json.loads(x) for x in (tmp_path / "x" / "streams.jsonl").read_text().splitlines()]
    assert len(streams) == 2 * n > 0
    assert [r["stage"] for r in streams] == ["stage-01-c1"] * n + ["stage-02-c2"] * n
    assert list(streams[0])[0] == "stage"
    assert [r["id"] for r in streams[:n]] == [r["id"] for r in _streams(run_dir)]
    rows = [json.loads(x) for x in (tmp_path / "x" / "summary.jsonl").read_text().splitlines()]
    assert list(rows[0]) == ["run", "stage", "scope", "kind", "name", "value", "unit"]
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
