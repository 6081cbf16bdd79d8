"""Capacity in the reports: the latency-vs-load table, [gate] capacity budgets, compare's capacity difference."""

from __future__ import annotations

from typing import Any

import pytest
from rich.console import Console

from hopbench.views._capacity_table import capacity_rows, compare_capacity, render_capacity
from hopbench.views._compare import compare_summaries
from hopbench._errors import ProfileError
from hopbench.views._gate import evaluate_gate


def _staged(rate: float | None, status: str = "found", resolution: float = 0.1,
            message: str = "capacity", saturated: bool = False) -> dict[str, Any]:
    stages = [{"load": load, "passed": rate is not None and load <= rate, "reasons": [] if
               rate is not None and load <= rate else ["slo"], "ttft_p50_ms": 100.0 + load,
               "ttft_p99_ms": 120.0 + 10 * load, "itl_p99_ms": 11.0, "good_fraction": 1.0,
               "good_fraction_lower": 0.96, "goodput_rps": load, "goodput_tokens_per_s": 11 * load}
              for load in (8.0, 16.0, 20.0, 22.0)]
    return {"schema": "hopbench.summary/1", "complete": True, "saturated": saturated, "scopes": {},
            "resolved_load": {"load.mode": "search", "search.min": 8},
            "stage_of_record": "probe-03-r20", "stages": stages,
            "capacity": {"mode": "rate", "unit": "requests/s", "status": status, "rate_rps": rate,
                         "concurrency": None, "resolution": resolution, "message": message,
                         "probes": 4, "client_saturated": status == "client_saturated"}}


def test_capacity_rows_sorted_with_the_knee_marked() -> None:
    rows = capacity_rows(_staged(20.0))
    assert [r["load"] for r in rows] == [8.0, 16.0, 20.0, 22.0]
    assert [r["knee"] for r in rows] == [False, False, True, False]
    assert rows[3]["verdict"] == "fail: slo" and rows[0]["verdict"] == "pass"
    assert capacity_rows({"scopes": {}}) == []


def test_render_capacity_prints_the_table_and_the_capacity_line() -> None:
    console = Console(record=True, width=140)
    render_capacity(_staged(20.0, message="capacity 20 requests/s (22 failed; resolution 0.1)"), console)
    text = console.export_text()
    assert "latency (ms) vs offered load (requests/s)" in text
    assert "20 ◀" in text and "320.0" in text  # TTFT p99 at 20 req/s
    assert "capacity: 20 requests/s (22 failed; resolution 0.1)" in text


def test_gate_capacity_budget_holds_breaches_and_is_inconclusive_without_capacity() -> None:
    held = evaluate_gate(_staged(20.0), {"capacity.rate_rps": ">= 15"})
    assert held.passed and held.exit_code == 0
    breached = evaluate_gate(_staged(12.0), {"capacity.rate_rps": ">= 15"})
    assert not breached.passed and breached.exit_code == 1
    assert "12.00 requests/s" in breached.render("text")
    none = evaluate_gate(_staged(None, status="client_saturated", message="no capacity reported: ... --workers"),
                         {"capacity.rate_rps": ">= 15", "allow_saturated": True})
    assert not none.passed and "no capacity measured (no capacity reported: ... --workers)" in none.render("text")
    plain = evaluate_gate({"schema": "hopbench.summary/1", "complete": True, "scopes": {}},
                          {"capacity.concurrency": ">= 4"})
    assert not plain.passed and "not a staged run" in plain.render("text")
    # an interrupted search knows a lower bound only: neither held nor breached
    cut = evaluate_gate(_staged(8.0, status="interrupted", message="search interrupted"),
                        {"capacity.rate_rps": ">= 15"})
    assert not cut.passed and "no capacity measured (search interrupted)" in cut.render("text")
    assert "breached" not in cut.render("text")
    # so does a search stopped by a probe with too few requests to judge (docs/slo.md)
    few = evaluate_gate(_staged(8.0, status="too_few_requests", message="inconclusive at 16 requests/s"),
                        {"capacity.rate_rps": ">= 4"})
    assert not few.passed and "no capacity measured (inconclusive at 16" in few.render("text")


@pytest.mark.parametrize(("budget", "message"), [
    ({"capacity.rps": ">= 1"}, "unknown capacity figure 'rps': expected one of capacity.rate_rps, capacity.concurrency"),
    ({"scenario": {"chat": {"capacity.rate_rps": ">= 1"}}}, "a capacity budget is for the whole run"),
    ({"capacity.rate_rps": ">= 10ms"}, "capacity.rate_rps"),
])
def test_gate_capacity_budget_bad_input(budget: dict[str, Any], message: str) -> None:
    summary = _staged(20.0)
    summary["scenarios"] = ["chat"]
    summary["scopes"] = {"chat": {}, "all": {}}
    with pytest.raises(ProfileError) as info:
        evaluate_gate(summary, budget)
    assert message in str(info.value)


def test_compare_capacity_verdicts() -> None:
    same = compare_capacity(_staged(20.0), _staged(21.0))
    assert same is not None and same["verdict"] == "same" and same["change"]["rel"] == pytest.approx(0.05)
    worse = compare_capacity(_staged(20.0), _staged(15.0))
    assert worse is not None and worse["verdict"] == "worse" and worse["change"]["abs"] == -5.0
    better = compare_capacity(_staged(20.0), _staged(30.0))
    assert better is not None and better["verdict"] == "better"
    unknown = compare_capacity(_staged(20.0), _staged(None, status="client_saturated",
                                                        message="no capacity reported: --workers"))
    assert unknown is not None and unknown["verdict"] == "unknown" and "--workers" in unknown["note"]
    assert compare_capacity({"scopes": {}}, {"scopes": {}}) is None


def test_compare_reports_a_lower_capacity_as_worse() -> None:
    c = compare_summaries(_staged(20.0), _staged(15.0))
    assert c.any_worse and c.capacity is not None
    text = c.render("text")
    assert "rate capacity (requests/s): 20.0 -> 15.0 (-25.0%): WORSE" in text
    assert text.rstrip().endswith("compare: WORSE: capacity")
    assert c.to_json()["capacity"]["verdict"] == "worse"
    assert "#### capacity" in c.render("markdown")
    assert not compare_summaries(_staged(20.0), _staged(20.0)).any_worse


def test_report_capacity_section_marks_the_knee() -> None:
    from hopbench.report._section_capacity import capacity_section

    figures: list[Any] = []

    def figure_html(fig: Any, div_id: str) -> str:
        figures.append(fig)
        return f'<div id="{div_id}"></div>'

    html = "".join(capacity_section(_staged(20.0, message="capacity 20 requests/s"), figure_html))
    assert "capacity 20 requests/s" in html  # the heading is the page's (report._page.purpose_sections)
    assert "20 ◀ capacity" in html and 'id="fig-capacity"' in html
    (fig,) = figures
    assert any(shape["x0"] == 20.0 for shape in fig.layout.shapes)  # the knee's vertical line
    assert capacity_section({"scopes": {}}, figure_html) == []


def test_slo_lines_for_the_terminal() -> None:
    from hopbench.views._capacity_table import slo_lines

    summary = {"slo": {"chat": {"judged": 600, "good": 597, "good_fraction": 0.995, "good_fraction_lower": 0.9885,
                                "goodput_rps": 9.95, "goodput_tokens_per_s": 477.6, "failed": {"ttft": 2},
                                "target": 0.99, "met": False},
                       "all": {"judged": 0, "good_fraction": None}}}
    assert slo_lines(summary) == [
        "slo chat: good 99.5% of 600 (lower bound 98.9%, target 0.99: NOT met) · goodput 9.95 req/s, "
        "477.6 tok/s · failed: ttft 2",
        "slo all: no request judged"]
    assert slo_lines({"slo": None}) == []


def test_render_capacity_prints_brackets_in_the_message_and_reasons_as_text() -> None:
    """The search's advice names a profile table ("lengthen [search] duration_s"): rich
    took it for a markup tag and printed "lengthen  duration_s" (found by review)."""
    summary = _staged(None, status="inconclusive",
                      message="inconclusive at 8 requests/s: lengthen [search] duration_s")
    summary["stages"][0]["reasons"] = ["too few requests: lengthen [search] duration_s"]
    console = Console(record=True, width=400)
    render_capacity(summary, console)
    text = console.export_text()
    assert "capacity: inconclusive at 8 requests/s: lengthen [search] duration_s" in text
    assert "fail: too few requests: lengthen [search] duration_s" in text


def test_render_capacity_is_readable_at_80_columns() -> None:
    """At 80 columns the table fits (rich cropped it: the verdict column and its reasons
    were cut), numbers are whole and each failing load's reasons are printed in full
    under the table."""
    summary = _staged(2560.0, message="capacity 2560 requests/s (2816 failed; resolution 0.1)")
    for st in summary["stages"]:
        st.update(load=st["load"] * 128, ttft_p50_ms=4880.0, ttft_p99_ms=17000.0, itl_p99_ms=9900.0,
                  goodput_rps=st["load"] * 128, goodput_tokens_per_s=30976.0)
        if st["load"] > 2560:
            st["passed"] = False
            st["reasons"] = ["slo: too few requests", "load not held", "client saturated", "run incomplete"]
    summary["capacity"]["rate_rps"] = 2560.0
    console = Console(record=True, width=80, color_system=None)
    render_capacity(summary, console)
    text = console.export_text()
    lines = text.splitlines()
    assert max(len(x) for x in lines) <= 80 and "…" not in text
    header = next(x for x in lines if "load" in x and "tok/s" in x)
    assert header.split() == ["load", "TTFT", "p50", "TTFT", "p99", "ITL", "p99", "good", "lower", "req/s",
                              "tok/s", "verdict"]
    row = next(x for x in lines if x.split()[:1] == ["2816"])
    assert row.split() == ["2816", "4880.0", "17000.0", "9900.0", "100.0%", "96.0%", "2816.00", "30976", "fail"]
    assert "2560 ◀" in text
    assert ("load 2816: fail: slo: too few requests, load not held, client saturated, run incomplete"
            in " ".join(text.split()))
