"""Tests for hopbench.driver._results and hopbench.views._summary_table."""

from __future__ import annotations

import io
import json
import random
import sys
from pathlib import Path

import pytest
from hdrh.histogram import HdrHistogram
from hdrh.log import HistogramLogReader
from rich.console import Console

from hopbench._errors import ResultsError, UsageError
from hopbench.measure._hdr import Histogram
from hopbench.measure._metrics import METRICS
from hopbench.measure._recorder import Recorder, Snapshot
from hopbench.driver._results import (
    SCHEMA,
    ResultsWriter,
    environment,
    read_summary,
    snapshot_from_summary,
)
from hopbench.views._summary_table import render_summary

START_S = 1_700_000_000.25
SEC = 1_000_000_000


def _meta(**extra: object) -> dict[str, object]:
    meta: dict[str, object] = {
        "profile": {"name": "t", "load": {"concurrency": 2}},
        "environment": environment(),
        "started_at": "2023-11-14T22:13:20Z",
        "started_at_unix_s": START_S,
        "saturated": False,
        "warnings": [],
    }
    meta.update(extra)
    return meta


def _run(writer: ResultsWriter, seconds: int = 3) -> tuple[Recorder, list[tuple[str, str, int]]]:
    rnd = random.Random(11)
    rec = Recorder(["chat", "msgs"])
    writer.start(_meta())
    recorded: list[tuple[str, str, int]] = []
    for sec in range(seconds):
        for _ in range(200):
            scope = rnd.choice(["chat", "msgs"])
            v = int(10 ** rnd.uniform(5, 10))
            rec.record(scope, "ttft", v)
            rec.record(scope, "itl", 0 if rnd.random() < 0.1 else v // 50)
            rec.incr(scope, "completed")
            recorded.append((scope, "ttft", v))
        rec.record_global("loop_lag", 200_000 * (sec + 1))
        writer.write_interval(rec.take_interval(sec * SEC, (sec + 1) * SEC))
    return rec, recorded


def test_writer_unwritable_folder_raises(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(ResultsError, match=r"cannot write results to .*file/run"):
        ResultsWriter(blocker / "run")


def test_writer_creates_parents_and_leaves_no_probe(tmp_path: Path) -> None:
    w = ResultsWriter(tmp_path / "a" / "b")
    assert w.path.is_dir()
    assert list(w.path.iterdir()) == []


def test_writer_start_alone_leaves_valid_incomplete_summary(tmp_path: Path) -> None:
    w = ResultsWriter(tmp_path / "run")
    w.start(_meta())
    data = json.loads((w.path / "summary.json").read_text())
    assert data["complete"] is False
    assert data["schema"] == SCHEMA
    assert data["profile"]["name"] == "t"
    assert read_summary(w.path)["scopes"] == {}
    hlog = (w.path / "intervals.hlog").read_text().splitlines()
    assert hlog[1].startswith(f"#[StartTime: {START_S:.3f} (seconds since epoch), 2023-11-14T")
    assert hlog[-1] == '"StartTimestamp","Interval_Length","Interval_Max","Interval_Compressed_Histogram"'
    w.close()


def test_writer_write_interval_before_start_raises(tmp_path: Path) -> None:
    w = ResultsWriter(tmp_path / "run")
    with pytest.raises(UsageError):
        w.write_interval(Recorder([]).take_interval(0, 1))


def test_writer_hlog_reads_back_with_hdrh_reader(tmp_path: Path) -> None:
    w = ResultsWriter(tmp_path / "run")
    rec, _ = _run(w, seconds=3)
    w.close()
    reader = HistogramLogReader(str(w.path / "intervals.hlog"), HdrHistogram(1, 3_600_000_000_000, 3))
    counts: dict[str, int] = {}
    starts: dict[str, list[float]] = {}
    while (h := reader.get_next_interval_histogram()) is not None:
        tag = h.get_tag()
        counts[tag] = counts.get(tag, 0) + h.get_total_count()
        starts.setdefault(tag, []).append(h.get_start_time_stamp() / 1000.0 - START_S)
    reader.close()
    snap = rec.snapshot()
    for scope in ("chat", "msgs", "all"):
        for metric in ("ttft", "itl"):
            assert counts[f"{scope}.{metric}"] == snap.histogram(scope, metric).count
    assert counts["all.loop_lag"] == 3
    assert "chat.loop_lag" not in counts
    assert starts["all.ttft"] == pytest.approx([0.0, 1.0, 2.0], abs=1e-3)


def test_writer_hlog_max_column_is_exact_ms(tmp_path: Path) -> None:
    w = ResultsWriter(tmp_path / "run")
    w.start(_meta())
    rec = Recorder(["a"])
    rec.record("a", "e2e", 1_234_567)  # 1.234567 ms: hdrh's writer would print 1.0
    rec.record("a", "output_tokens_per_s", 42_500)
    w.write_interval(rec.take_interval(0, SEC))
    w.close()
    lines = [ln for ln in (w.path / "intervals.hlog").read_text().splitlines() if ln.startswith("Tag=")]
    by_tag = {ln.split(",")[0]: ln.split(",") for ln in lines}
    e2e_max = Histogram("e2e")
    e2e_max.record(1_234_567)
    assert by_tag["Tag=a.e2e"][1:4] == ["0.000", "1.000", f"{e2e_max.max / 1e6:.6f}"]
    assert float(by_tag["Tag=a.e2e"][3]) == pytest.approx(1.234567, rel=1e-3)
    assert float(by_tag["Tag=all.output_tokens_per_s"][3]) == pytest.approx(42.5, rel=1e-3)


def test_writer_finish_writes_summary_and_hgrm(tmp_path: Path) -> None:
    w = ResultsWriter(tmp_path / "run")
    rec, recorded = _run(w, seconds=2)
    rec.incr("chat", "tokens.output.completed", 500)
    rec.incr("chat", "tokens.input.broken", 7)
    rec.record("chat", "e2e", 4 * 3_600_000_000_000)  # out of range
    total = rec.snapshot()
    summary = w.finish(_meta(ended_at="x", duration_s=2.0), total, None, complete=True)
    on_disk = read_summary(w.path)
    assert on_disk == json.loads(json.dumps(summary))
    assert on_disk["complete"] is True and on_disk["warmup"] is None
    assert list(on_disk["scopes"]) == ["chat", "msgs", "all"]
    chat = on_disk["scopes"]["chat"]
    assert chat["tokens"]["output"]["completed"] == 500
    assert chat["tokens"]["input"]["broken"] == 7
    assert on_disk["scopes"]["all"]["tokens"]["output"]["completed"] == 500
    ttft = chat["metrics"]["ttft"]
    n = sum(1 for s, _, _ in recorded if s == "chat")
    assert ttft["count"] == n and ttft["unit"] == "ms" and ttft["divisor"] == 1_000_000
    assert ttft["p99"] == total.histogram("chat", "ttft").stats()["p99"]
    assert chat["metrics"]["e2e"]["out_of_range"] == 1
    assert chat["metrics"]["e2e"]["count"] == 0 and chat["metrics"]["e2e"]["p50"] is None
    # hgrm files for non-empty histograms only, footer count matches
    assert (w.path / "all.loop_lag.hgrm").exists()
    assert not (w.path / "chat.loop_lag.hgrm").exists()
    assert not (w.path / "chat.e2e.hgrm").exists()
    assert f"Total count    = {n:>12d}]" in (w.path / "chat.ttft.hgrm").read_text()
    # the hdr fields rebuild the exact snapshot
    back = snapshot_from_summary(on_disk)
    for scope in ("chat", "msgs", "all"):
        assert back.scopes[scope].counters == total.scopes[scope].counters
        for metric in total.scopes[scope].histograms:
            assert back.histogram(scope, metric) == total.histogram(scope, metric)
    merged = Snapshot.merge([back, back])
    assert merged.histogram("all", "ttft").count == 2 * total.histogram("all", "ttft").count
    assert not list(w.path.glob(".*.tmp"))


def test_writer_update_checkpoints_atomically(tmp_path: Path) -> None:
    w = ResultsWriter(tmp_path / "run")
    w.start(_meta())
    rec = Recorder(["a"])
    rec.record("a", "ttft", 5_000_000)
    w.update(_meta(), rec.snapshot())
    data = read_summary(w.path)
    assert data["complete"] is False
    assert data["scopes"]["a"]["metrics"]["ttft"]["count"] == 1
    w.close()


def test_writer_warmup_section(tmp_path: Path) -> None:
    w = ResultsWriter(tmp_path / "run")
    w.start(_meta())
    warm = Recorder(["a"])
    warm.record("a", "ttft", 9_000_000)
    main = Recorder(["a"])
    summary = w.finish(_meta(), main.snapshot(), warm.snapshot(), complete=False)
    assert summary["warmup"]["a"]["metrics"]["ttft"]["count"] == 1
    assert snapshot_from_summary(summary, "warmup").histogram("all", "ttft").count == 1
    assert summary["scopes"]["a"]["metrics"] == {}
    with pytest.raises(ResultsError, match="nope"):
        snapshot_from_summary(summary, "nope")


def test_read_summary_errors_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(ResultsError, match="cannot read .*summary.json"):
        read_summary(tmp_path)
    bad = tmp_path / "summary.json"
    bad.write_text("{not json")
    with pytest.raises(ResultsError, match="summary.json: not valid JSON"):
        read_summary(tmp_path)
    bad.write_text('{"schema": "other/1", "scopes": {}}')
    with pytest.raises(ResultsError, match="summary.json: expected \"schema\""):
        read_summary(bad)


def test_snapshot_from_summary_rejects_bad_hdr(tmp_path: Path) -> None:
    summary = {"scopes": {"a": {"counters": {}, "metrics": {"ttft": {"hdr": "garbage"}}}}}
    with pytest.raises(ResultsError, match=r"scopes\.a\.metrics\.ttft\.hdr"):
        snapshot_from_summary(summary)


def test_environment_has_versions() -> None:
    env = environment()
    assert env["hdrh"] and env["trio"] and env["httpx"] and env["python"]
    assert isinstance(env["cpu_count"], int)


def _render(summary: dict[str, object]) -> str:
    console = Console(record=True, width=100, color_system=None)
    render_summary(summary, console)
    return console.export_text()


def test_render_summary_shows_numbers_and_warnings(tmp_path: Path) -> None:
    rec = Recorder(["chat"])
    for ms in range(1, 101):
        rec.record("chat", "ttft", ms * 1_000_000)
        rec.record("chat", "output_tokens_per_s", 50_000)
    rec.incr("chat", "started", 103)
    rec.incr("chat", "completed", 100)
    rec.incr("chat", "failed", 2)
    rec.incr("chat", "failed.rate_limit_error", 2)
    rec.incr("chat", "truncated", 1)
    rec.incr("chat", "tokens.input.completed", 1234)
    rec.incr("chat", "tokens.output.completed", 5678)
    rec.incr("chat", "keepalives", 40)
    rec.incr("chat", "keepalive_violations", 1)
    rec.incr("chat", "proxy_buffering_suspected", 60)  # > half of the 100 completed: a warning
    rec.record("chat", "e2e", -1)
    w = ResultsWriter(tmp_path / "run")
    w.start(_meta())
    summary = w.finish(
        _meta(saturated=True, interrupted_by="SIGINT", warnings=["custom warning here"],
              load={"held": False}),
        rec.snapshot(), None, complete=False,
    )
    text = _render(summary)
    assert max(len(line) for line in text.splitlines()) <= 100
    # piped into a CI log or a diff (the console run_command uses off a terminal): no line
    # carries trailing blanks, a table's edge or its empty top rule
    from hopbench._run_command import _console

    piped = io.StringIO()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sys, "stdout", piped)
        render_summary(summary, _console(stderr=False))
    assert [line for line in piped.getvalue().splitlines() if line != line.rstrip()] == []
    ttft = summary["scopes"]["chat"]["metrics"]["ttft"]
    row = next(line for line in text.splitlines() if line.strip().startswith("ttft "))
    assert "100" in row  # count
    assert f"{ttft['p50']:.2f}" in row and f"{ttft['p99']:.2f}" in row
    assert "50.0" in next(line for line in text.splitlines() if "output_tokens_per_s" in line)
    assert "completed 100" in text and "failed 2" in text and "truncated 1" in text
    assert "1,234" in text and "5,678" in text
    assert "keepalives 40" in text
    for needle in ("INCOMPLETE", "SIGINT", "SATURATED", "proxy buffering", "load not held",
                   "out of range", "custom warning here"):
        assert needle in text, needle


def test_render_summary_clean_run_has_no_warnings(tmp_path: Path) -> None:
    rec = Recorder(["a", "b"])
    rec.record("a", "ttft", 3_000_000)
    rec.incr("a", "completed")
    w = ResultsWriter(tmp_path / "run")
    w.start(_meta())
    summary = w.finish(_meta(), rec.snapshot(), None, complete=True)
    text = _render(summary)
    assert "INCOMPLETE" not in text and "SATURATED" not in text
    assert "no warnings" in text
    assert all(m in METRICS for m in summary["scopes"]["a"]["metrics"])
