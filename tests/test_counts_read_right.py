"""Figures that read wrong in the terminal (issue 39, item 5): an ITL of events that
shared a read, and pointers at an empty ``error_samples``."""

from __future__ import annotations

import io
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from rich.console import Console

from hopbench.views._summary_table import SHARED_READ_NOTE, render_summary


def _render(summary: dict[str, Any]) -> str:
    buf = io.StringIO()
    render_summary(summary, Console(file=buf, width=200))
    return buf.getvalue()


def test_summary_table_itl_of_events_that_shared_a_read_is_not_a_bare_zero() -> None:
    # a gap of 0 (events in one read) is recorded as 1 ns: 0.000001 ms, printed 0.000 before
    itl = {"unit": "ms", "count": 300, "p50": 0.000001, "p90": 0.000001, "p99": 0.000001, "p999": 2.5,
           "max": 3.0}
    ttft = {"unit": "ms", "count": 10, "p50": 12.0, "p90": 14.0, "p99": 15.0, "p999": 15.0, "max": 15.0}
    scope = {"counters": {"started": 10, "completed": 10}, "metrics": {"ttft": ttft, "itl": itl}, "tokens": {}}
    summary = {"name": "t", "complete": True, "scopes": {"chat": scope, "all": scope}}
    text = _render(summary)
    row = next(line for line in text.splitlines() if line.strip().startswith("itl"))
    assert row.split()[2:] == ["300", "<0.001", "<0.001", "<0.001", "2.50", "3.00"], row
    assert "0.000" not in row and SHARED_READ_NOTE in " ".join(text.split())
    assert summary["scopes"]["all"]["metrics"]["itl"]["p50"] == 0.000001  # the JSON keeps the number
    clean = {"counters": {"started": 10, "completed": 10}, "metrics": {"ttft": ttft}, "tokens": {}}
    assert SHARED_READ_NOTE not in " ".join(_render({"scopes": {"chat": clean}}).split())


def test_run_exit_points_at_error_samples_only_when_there_are_some(tmp_path: Path) -> None:
    from hopbench._run_command import _run_exit_code
    from hopbench.config._profile import parse_profile

    profile = parse_profile('[run]\nrequests = 3\n[load]\nconcurrency = 1\n[[scenario]]\nprotocol = "chat"\n'
                            'model = "m"\n', "p.toml", env={})
    outcome = SimpleNamespace(out_dir=tmp_path, crashed=None, complete=True)

    def said(summary: dict[str, Any]) -> str:
        buf = io.StringIO()
        assert _run_exit_code(profile, outcome, summary, 0, Console(file=buf, width=500)) == 4  # type: ignore[arg-type]
        return buf.getvalue()

    head = {"headline": {"started": 3, "completed": 0}}
    assert "error_samples" not in said(dict(head, error_samples={}))
    assert "see the warnings and error_samples in" in said(dict(head, error_samples={"http_error.500": ["x"]}))


def test_summary_table_shows_the_warm_ups_broken_streams() -> None:
    # a target that failed from the start: every failure fell in the warm-up, the measured
    # scopes read 0 broken; the table must not hide them (a fresh tester's finding)
    import io

    from rich.console import Console

    from hopbench.views._summary_table import render_summary

    warm = {"all": {"counters": {"started": 20, "http_error": 20, "http_error.501": 20}}}
    summary = {"scopes": {"all": {"counters": {"started": 0}, "metrics": {}}}, "warmup": warm}
    buf = io.StringIO()
    render_summary(summary, Console(file=buf, width=200, color_system=None))
    assert "warm-up (not in the figures above): started 20 · http_error 20; details: http_error.501 20" in buf.getvalue()
    clean = {"scopes": summary["scopes"], "warmup": {"all": {"counters": {"started": 3, "completed": 3}}}}
    buf = io.StringIO()
    render_summary(clean, Console(file=buf, width=200, color_system=None))
    assert "warm-up" not in buf.getvalue()
