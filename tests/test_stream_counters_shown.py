"""Stop classes, per-stream flags, header values and client-lagged bursts reach
the terminal summary and report.html (from a summary.json, no run needed)."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from hopbench.measure._recorder import Recorder, Snapshot
from hopbench.report._page import _stop_table, _warnings
from hopbench.report._series import RunData
from hopbench.driver._results import ResultsWriter, environment
from hopbench.views._summary_table import render_summary


def _finish(tmp_path: Path, rec: Recorder) -> dict[str, object]:
    """summary.json of a complete run holding ``rec``'s counters, as the writer builds it."""
    w = ResultsWriter(tmp_path / "run")
    meta = {"profile": {"name": "t"}, "environment": environment(), "started_at": "2023-11-14T22:13:20Z",
            "started_at_unix_s": 1_700_000_000.0, "saturated": False, "warnings": []}
    w.start(meta)
    return w.finish(meta, rec.snapshot(), None, complete=True)


def _summary(tmp_path: Path) -> tuple[dict[str, object], Snapshot]:
    rec = Recorder(["chat"])
    for name, n in (("started", 10), ("completed", 7), ("failed", 2), ("failed.abort", 1),
                    ("failed.malformed_event", 1), ("truncated", 1), ("truncated.usage_missing", 1),
                    ("stop.stop", 6), ("stop.length", 1), ("stop.abort", 1), ("stop.none", 2),
                    ("refused", 1), ("hidden_reasoning", 2), ("no_done", 1), ("usage_total_mismatch", 1),
                    ("tokens_source.events", 3), ("client_lagged", 4),
                    ("header.x-litellm-attempted-retries=0", 8), ("header.x-litellm-attempted-retries=1", 2)):
        rec.incr("chat", name, n)
    rec.record("chat", "ttft", 5_000_000)
    return _finish(tmp_path, rec), rec.snapshot()


def test_summary_table_shows_stop_classes_flags_headers_and_client_lag(tmp_path: Path) -> None:
    summary, _ = _summary(tmp_path)
    console = Console(record=True, width=100, color_system=None)
    render_summary(summary, console)
    text = console.export_text()
    assert "stop reasons: stop 6 · length 1 · abort 1 · none 2" in text
    for needle in ("refused 1", "hidden reasoning 2", "no [DONE] 1", "total != in+out 1", "tpot from events 3",
                   "header x-litellm-attempted-retries: 0 ×8, 1 ×2", "failed.abort 1",
                   "failed.malformed_event 1", "truncated.usage_missing 1", "4 streams arrived in bursts"):
        assert needle in text, needle
    assert max(len(line) for line in text.splitlines()) <= 100


def test_report_shows_stop_classes_flags_headers_and_client_lag(tmp_path: Path) -> None:
    summary, snap = _summary(tmp_path)
    run = RunData(path=tmp_path / "run", summary=summary, snapshot=snap, timeline=[], intervals={}, notes=[])
    table = _stop_table(run).replace("<wbr>", "")  # the flags' headers may break after "_"
    assert "content_filter" in table and "tokens from events" in table and "client_lagged" in table
    assert "x-litellm-attempted-retries" in table
    assert "client_lagged" in _warnings(run)


def test_summary_and_report_do_not_warn_on_a_few_flagged_streams(tmp_path: Path) -> None:
    # 10 buffering and 20 client-lagged streams of 2,000 completed: flags, not warnings
    # (summary.json warns past half of the completed streams; breaker run of workloads.toml)
    rec = Recorder(["chat"])
    for name, n in (("started", 2000), ("completed", 2000), ("stop.stop", 2000),
                    ("proxy_buffering_suspected", 10), ("client_lagged", 20)):
        rec.incr("chat", name, n)
    rec.record("chat", "ttft", 5_000_000)
    summary = _finish(tmp_path, rec)
    console = Console(record=True, width=100, color_system=None)
    render_summary(summary, console)
    text = console.export_text()
    assert "arrived in bursts" not in text and "proxy buffering suspected" not in text
    run = RunData(path=tmp_path / "run", summary=summary, snapshot=rec.snapshot(), timeline=[], intervals={},
                  notes=[])
    assert "bursts" not in _warnings(run) and "proxy buffering" not in _warnings(run)


def test_the_load_held_is_shown_on_the_terminal_and_in_the_report(tmp_path: Path) -> None:
    from hopbench.report._page import _run_figures
    from hopbench.views._summary_table import load_text

    summary, snap = _summary(tmp_path)
    summary["load"] = {"mode": "rate", "requested_rate_rps": 50.0, "achieved_rate_rps": 48.5,
                       "due": 100, "sent": 97, "max_in_flight": 1000,
                       "schedule_lag_p99_ms": 0.84, "dispatcher_threads": 1, "dispatched": 97,
                       "spare_connections": 12, "max_in_flight_hits": 3}
    want = ("97 of 100 due arrivals sent (48.50 of 50.00 requests/s), 3 arrivals dropped at max_in_flight "
            "= 1,000 · schedule lag p99 0.840 ms · 97 written by the dispatcher thread, 12 spare connections")
    assert load_text(summary["load"]) == want  # type: ignore[arg-type]
    console = Console(record=True, width=200, color_system=None)
    render_summary(summary, console)
    assert f"load: {want}" in console.export_text()
    run = RunData(path=tmp_path / "run", summary=summary, snapshot=snap, timeline=[], intervals={}, notes=[])
    assert "load: 97 of 100 due arrivals sent (48.50 of 50.00 requests/s)" in _run_figures(run)
    # the event loop paced it: no dispatcher figures; a closed loop: its busy users
    assert load_text({"requested_rate_rps": 5, "achieved_rate_rps": 5, "schedule_lag_p99_ms": 2,
                      "dispatcher_threads": 0, "dispatched": 0}) == "5.00 of 5.00 requests/s sent · schedule lag p99 2.00 ms"
    assert load_text({"requested_concurrency": 8, "mean_busy": 7.9}) == "7.90 of 8 users busy with the target on average"
    assert load_text({}) is None


def test_the_report_headline_of_an_interrupted_run_is_never_green(tmp_path: Path) -> None:
    from hopbench.report._page import _run_figures

    summary, snap = _summary(tmp_path)
    summary["headline"] = {"started": 40, "completed": 40, "errors": 0, "completed_per_s": 4.0,
                           "output_tokens_per_s": 80.0}
    run = RunData(path=tmp_path / "run", summary=summary, snapshot=snap, timeline=[], intervals={}, notes=[])
    assert _run_figures(run).startswith('<div class="ok">')
    summary["complete"], summary["interrupted_by"] = False, "SIGINT"
    html = _run_figures(run)
    assert html.startswith('<div class="bad">') and "INCOMPLETE (interrupted by SIGINT)" in html
    summary["complete"], summary["saturated"] = True, True
    assert _run_figures(run).startswith('<div class="warn">')
