"""Outcome, detail and rate names are defined once (hopbench.measure._outcomes) and every
view of a run shows the same details: terminal summary, report.html, compare."""

from __future__ import annotations

import io
import json
from pathlib import Path

from rich.console import Console

from hopbench.views._compare import compare_summaries
from hopbench.measure._outcomes import BROKEN, DETAIL_PREFIXES, OUTCOMES, RATES, rate_value
from hopbench.measure._recorder import Snapshot, ScopeSnapshot
from hopbench.report._figures import outcome_figure as _outcome_figure
from hopbench.report._series import RunData
from hopbench.views._summary_table import render_summary

# one detail of every broken outcome, as the runner names them (engine._stream.StreamMixin._record)
DETAILS = {"failed.rate_limit_error": 1, "truncated.closed": 2, "timeout.idle": 3,
           "connect_error.refused": 4, "http_error.429": 5, "http_error_code.rate_limit_exceeded": 5}


def _counters() -> dict[str, int]:
    c = {"started": 40, "completed": 20, "failed": 1, "truncated": 2, "timeout": 3,
         "connect_error": 4, "http_error": 5}
    return c | DETAILS


def _summary() -> dict[str, object]:
    scope = {"counters": _counters(), "metrics": {}, "tokens": {}}
    return {"name": "t", "complete": True, "profile": {}, "scopes": {"chat": scope, "all": scope}}


def test_outcomes_names_cover_every_broken_detail() -> None:
    assert set(BROKEN) < set(OUTCOMES)
    for key in DETAILS:
        assert key.startswith(DETAIL_PREFIXES), key


def test_outcomes_terminal_summary_shows_connect_error_details() -> None:
    buf = io.StringIO()
    render_summary(_summary(), Console(file=buf, width=100))
    text = buf.getvalue()
    for key in DETAILS:  # the error body's code beside its status (a sub-detail, not a second tally)
        assert key.removeprefix("http_error_code.") in text, key


def test_outcomes_report_html_shows_connect_error_details() -> None:
    snap = Snapshot({"chat": ScopeSnapshot(_counters(), {}), "all": ScopeSnapshot(_counters(), {})})
    run = RunData(Path("r"), dict(_summary()), snap, [], {}, [])
    fig = _outcome_figure([run])
    shown = " | ".join(y for trace in fig.data if trace.orientation == "h" for y in trace.y)
    for key in DETAILS:  # the error body's code is shown beside its status, not as a bar of its own
        assert key.removeprefix("http_error_code.") in shown, key


def test_outcomes_details_count_each_broken_stream_once() -> None:
    # 12 streams broke with HTTP 500, their bodies carrying two codes, and 3 were truncated
    # (one flagged twice): the details and the chart's bars sum to the 15 broken streams
    counters = {"started": 20, "completed": 5, "http_error": 12, "truncated": 3, "http_error.500": 12,
                "http_error_code.server_error": 8, "http_error_code.overloaded": 4, "truncated.closed": 3,
                "anomaly.partial_event": 3, "anomaly.wrong_content_type": 2}
    scope = {"counters": counters, "metrics": {}, "tokens": {}}
    buf = io.StringIO()
    render_summary({"name": "t", "complete": True, "profile": {}, "scopes": {"chat": scope, "all": scope}},
                   Console(file=buf, width=300))
    details = next(line for line in buf.getvalue().splitlines() if line.startswith("details: "))
    assert details == ("details: http_error.500 12 (error codes overloaded 4, server_error 8), "
                       "truncated.closed 3")
    assert "anomalies (flags, not outcomes): anomaly.partial_event 3, anomaly.wrong_content_type 2" in buf.getvalue()
    snap = Snapshot({"chat": ScopeSnapshot(counters, {}), "all": ScopeSnapshot(counters, {})})
    fig = _outcome_figure([RunData(Path("r"), {}, snap, [], {}, [])])
    (bars,) = [t for t in fig.data if t.orientation == "h" and t.name == "count"]
    assert sum(bars.x) == 15 == counters["http_error"] + counters["truncated"]
    assert list(bars.y) == ["http_error.500 (error codes overloaded 4, server_error 8)", "truncated.closed"]


def test_outcomes_compare_tests_connect_error_details() -> None:
    s = _summary()
    comparison = compare_summaries(s, json.loads(json.dumps(s)))
    names = {r.name for r in comparison.rates if r.scope == "all"}
    assert set(DETAILS) <= names, set(DETAILS) - names


def test_outcomes_rate_value_knows_every_rate() -> None:
    for name in RATES:
        rate_value(name, _counters(), {}, 10.0)


def test_outcomes_rate_units_reach_the_budget_grammar() -> None:
    from hopbench.config._gate_spec import parse_budgets, table_from_mapping

    for spec in RATES.values():
        assert (spec.unit == "") == spec.fraction, spec.name
        (budget,), _ = parse_budgets(table_from_mapping({spec.name: "<= 1"}, "t"))
        assert (budget.rate, budget.unit) == (spec.name, spec.unit)


def test_outcomes_runner_details_are_in_the_list() -> None:
    import httpx
    import trio

    from hopbench._errors import SSEError
    from hopbench.engine._classify import classify_exception
    from hopbench.engine._transport import MalformedResponse

    req = httpx.Request("POST", "http://127.0.0.1/")
    errors: list[BaseException] = [
        httpx.ConnectTimeout("t"), httpx.PoolTimeout("t"), httpx.ReadTimeout("t"),
        httpx.ConnectError("connection refused"), httpx.ConnectError("no route"), SSEError("big"),
        MalformedResponse("bad", request=req), httpx.RemoteProtocolError("cut"), httpx.ReadError("reset"),
        trio.BrokenResourceError(), OSError("x"), httpx.DecodingError("gzip"),
    ]
    for exc in errors:
        for phase in ("headers", "body"):
            outcome, detail = classify_exception(exc, phase)
            assert outcome in BROKEN, (exc, phase)
            assert f"{outcome}.{detail}".startswith(DETAIL_PREFIXES), (exc, phase)
