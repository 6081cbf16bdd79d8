"""Output tokens without usage (issue 36, item 4): every token total and tokens/s falls back
to the output events the client counted, says so (``tokens_source``), and compare and the gate
never read a missing count as 0 tokens/s."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from hopbench.config._profile import parse_profile
from hopbench.driver._judge import headline
from hopbench.driver._results import SCHEMA, summary_scopes
from hopbench.driver._single import run_profile
from hopbench.measure._counters import RunCounters
from hopbench.measure._meter import StreamMeter
from hopbench.measure._outcomes import TokensSource, output_tokens, rate_value, tokens_source, tokens_unlike
from hopbench.measure._recorder import ALL, Recorder
from hopbench.measure._rules import measure
from hopbench.measure._sinks import record_stream
from hopbench.protocols import ContentDelta, FirstContentToken, FirstToken, StreamEnd, StreamResult
from hopbench.views._compare import compare_summaries
from hopbench.views._gate import evaluate_gate
from hopbench.views._summary_table import render_summary, tokens_phrase

_BUDGET_NS = 12_000_000_000
_EVENTS = {"text": 5, "reasoning": 0, "tool": 0, "refusal": 0}


def _stream(outcome: str = "completed", output_tokens: int | None = None, events: int = 5) -> Any:
    """One measured stream: ``events`` text events 10 ms apart, usage ``output_tokens`` (None: none)."""
    m = StreamMeter(0, 0)
    m.on_headers(10_000_000)
    for i in range(events):
        t = 100_000_000 + i * 10_000_000
        m.on_read(t)
        m.on_observations(t, ([FirstToken("text"), FirstContentToken("text")] if i == 0 else [])
                          + [ContentDelta("text", 3)])
    m.on_read(200_000_000)
    m.on_observations(200_000_000, [StreamEnd(outcome)])
    m.close(200_000_000)
    result = StreamResult(outcome, output_tokens=output_tokens, events=dict(_EVENTS, text=events))
    return measure(m, 200_000_000, outcome, "", result, keepalive_budget_ns=_BUDGET_NS)


def test_tokens_source_classifies_streams_and_reads_older_results() -> None:
    assert tokens_source({}) == TokensSource("none", 0, 0)
    assert tokens_source({"output_tokens_from.usage": 3, "tokens.output.completed": 60}).source == "usage"
    assert tokens_source({"output_tokens_from.events": 2}) == TokensSource("events", 0, 2)
    mixed = tokens_source({"output_tokens_from.usage": 3, "output_tokens_from.events": 1})
    assert mixed == TokensSource("mixed", 3, 1) and mixed.label() == "~ partly counted from events (1 of 4 streams)"
    # a summary.json written before the counters existed counted usage only
    assert tokens_source({"tokens.output.completed": 60}) == TokensSource("usage", 0, 0)
    assert not tokens_source({"completed": 9}).counted
    assert TokensSource.from_json(mixed.to_json()) == mixed and TokensSource.from_json(None) is None


def test_record_stream_counts_output_events_of_streams_without_usage() -> None:
    rec = Recorder(["s"])
    record_stream(rec, "s", _stream(output_tokens=None, events=5))
    record_stream(rec, "s", _stream(output_tokens=8, events=5))
    record_stream(rec, "s", _stream("truncated", output_tokens=None, events=3))
    c = rec.snapshot().scopes["s"].counters
    assert (c["tokens.output_events.completed"], c["tokens.output_events.broken"], c["tokens.output.completed"]) \
        == (5, 3, 8)
    assert (c["output_tokens_from.usage"], c["output_tokens_from.events"]) == (1, 2)
    assert output_tokens(c) == 16 and tokens_source(c) == TokensSource("mixed", 1, 2)
    assert RunCounters(counts=dict(c)).output_tokens == 16
    assert rate_value("output_tokens_per_s", c, {}, 2.0)[0] == 8.0


def _summary(counters: dict[str, int], started: int = 100) -> dict[str, Any]:
    """A complete run's summary.json of one scenario with ``counters`` (e2e samples for the streams)."""
    rec = Recorder(["chat"])
    rec.incr("chat", "started", started)
    rec.incr("chat", "completed", started)
    for k, n in counters.items():
        rec.incr("chat", k, n)
    for i in range(started):
        rec.record("chat", "ttft", (100 + i % 7) * 1_000_000)
        rec.record("chat", "tpot", (10 + i % 3) * 1_000_000)
    snap = rec.snapshot()
    return {"schema": SCHEMA, "complete": True, "saturated": False, "load": {"measured_s": 10.0},
            "profile": {"run": {"requests": started}, "load": {"concurrency": 8}, "scenario": [{"name": "chat"}]},
            "headline": headline(snap, 10.0).to_json(), "scopes": summary_scopes(snap)}


_USAGE = {"tokens.output.completed": 2000, "output_tokens_from.usage": 100}
_EVENTS_ONLY = {"tokens.output_events.completed": 2000, "output_tokens_from.events": 100, "no_usage": 100}


def test_headline_and_terminal_count_tokens_from_events_and_say_so() -> None:
    s = _summary(_EVENTS_ONLY)
    head = s["headline"]
    assert head["output_tokens_per_s"] == 200.0
    assert head["tokens_source"] == {"source": "events", "usage_streams": 0, "events_streams": 100}
    assert tokens_phrase(head) == "200.0 output tok/s ~ counted from events"
    console = Console(record=True, width=120, color_system=None)
    render_summary(s, console)
    text = console.export_text()
    assert "200.0 output tok/s ~ counted from events" in text
    assert "0.000 output tok/s" not in text
    # input tokens come from usage only: none reported is unknown, not 0 (a new user's finding)
    assert "tokens in/out: completed - / ~2,000 · broken - / " in text, text


def test_a_run_without_usage_or_output_events_has_no_token_counts_not_zero() -> None:
    s = _summary({"no_usage": 100})
    assert s["headline"]["output_tokens_per_s"] is None
    assert s["headline"]["tokens_source"]["source"] == "none"
    console = Console(record=True, width=140, color_system=None)
    render_summary(s, console)
    text = console.export_text()
    assert "no token counts" in text and "output tok/s" not in text
    # not "tokens in/out: completed 0 / 0" beside "no token counts" (a new user's finding)
    assert "tokens in/out: none counted (no stream reported usage or carried a content event)" in text, text
    assert rate_value("output_tokens_per_s", s["scopes"][ALL]["counters"], {}, 10.0)[0] is None


@pytest.mark.parametrize("cand", [_EVENTS_ONLY, {"no_usage": 100}], ids=["events", "nothing"])
def test_compare_with_usage_against_without_is_never_minus_100_percent_worse(cand: dict[str, int]) -> None:
    c = compare_summaries(_summary(_USAGE), _summary(cand))
    rate = next(r for r in c.rates if r.name == "throughput.output_tokens_per_s")
    assert rate.verdict == "not_comparable" and rate.reason
    assert ("different units" if cand is _EVENTS_ONLY else "no token counts in the candidate") in rate.reason
    text = c.render("text")
    line = next(x for x in text.splitlines() if "throughput.output_tokens_per_s" in x)
    assert "-100" not in line and "WORSE" not in line and "not comparable" in line, line
    assert "WORSE" not in text
    js = json.loads(c.render("json"))["scopes"]["all"]["rates"]["throughput.output_tokens_per_s"]
    assert js["change"] == {"abs": None, "rel": None} and js["reason"] == rate.reason
    assert js["verdict"] == "not_comparable"
    judged = [f for f in c.verdicts.figures if f.name == "throughput.output_tokens_per_s"] if c.verdicts else []
    assert judged and rate.reason in judged[0].judged.reason
    # the same kind on both sides is judged as before
    same = compare_summaries(_summary(_EVENTS_ONLY), _summary(_EVENTS_ONLY))
    assert next(r for r in same.rates if r.name == "throughput.output_tokens_per_s").verdict != "not_comparable"


def test_compare_per_stream_token_figures_only_across_counts_of_one_kind() -> None:
    def tpot(base: dict[str, int], cand: dict[str, int]) -> Any:
        c = compare_summaries(_summary(base), _summary(cand), metrics=["tpot"])
        return next(m for m in c.metrics if m.scope == "all")

    unlike = tpot(_USAGE, _EVENTS_ONLY)
    assert unlike.verdict == "not_comparable" and "different units" in unlike.reasons[0]
    assert tpot(_EVENTS_ONLY, _EVENTS_ONLY).verdict == "same"
    # a summary.json from before output_tokens_from cannot say what its tpot counted: judged as before
    assert tpot({"tokens_source.events": 100}, _EVENTS_ONLY).verdict == "same"


def test_tokens_unlike_names_the_side_without_a_count() -> None:
    usage, none = TokensSource("usage", 3, 0), TokensSource("none", 0, 0)
    assert tokens_unlike(usage, usage) == ""
    assert "no token counts in the base and candidate" in tokens_unlike(none, none)
    assert "from usage, the candidate from output events" in tokens_unlike(usage, TokensSource("events", 0, 3))


def _gate_result(budget: dict[str, str], run: dict[str, Any], baseline: dict[str, Any] | None = None) -> Any:
    """The one budget's result of a gate on ``run`` (the run's checks left aside)."""
    report = evaluate_gate(run, budget, baseline, allow_load_not_held=True)
    return next(r for r in report.results if r.budget.rate == "output_tokens_per_s")


def test_gate_token_budget_without_counts_or_of_another_kind_is_inconclusive() -> None:
    got = _gate_result({"output_tokens_per_s": ">= 100"}, _summary({"no_usage": 100}))
    assert got.status == "inconclusive" and "no token counts" in got.reason
    assert _gate_result({"output_tokens_per_s": ">= 100"}, _summary(_EVENTS_ONLY)).status == "held"
    got = _gate_result({"output_tokens_per_s": ">= baseline * 0.9"}, _summary(_EVENTS_ONLY), _summary(_USAGE))
    assert got.status == "inconclusive" and "different units" in got.reason
    same = _gate_result({"output_tokens_per_s": ">= baseline * 0.9"}, _summary(_USAGE), _summary(_USAGE))
    assert same.status == "held"


_PROFILE = """
[run]
name = "tokens"
duration_s = 1.5
seed = 1
[load]
mode = "concurrency"
concurrency = 2
[target]
embedded = true
[emulator]
ttft_ms = 10
tokens_per_s = 400
output_tokens = {tokens}
[[scenario]]
name = "chat"
protocol = "chat"
model = "gpt-emu"
max_tokens = 32
include_usage = {usage}
"""


@pytest.mark.slow
def test_runs_without_usage_count_events_and_compare_says_not_comparable(tmp_path: Path) -> None:
    runs = {}
    for name, tokens, usage in (("usage", 12, "true"), ("events", 12, "false"), ("nothing", 0, "false")):
        text = _PROFILE.format(tokens=tokens, usage=usage)
        outcome = run_profile(parse_profile(text, tmp_path / f"{name}.toml"), out_dir=tmp_path / name)
        assert outcome.complete
        runs[name] = json.loads((tmp_path / name / "summary.json").read_text(encoding="utf-8"))
    head = runs["events"]["headline"]
    assert head["output_tokens_per_s"] > 0 and head["tokens_source"]["source"] == "events"
    assert runs["events"]["scopes"]["all"]["tokens"]["output_events"]["completed"] == 12 * head["completed"]
    assert runs["usage"]["headline"]["tokens_source"]["source"] == "usage"
    assert runs["nothing"]["headline"]["output_tokens_per_s"] is None
    assert runs["nothing"]["headline"]["tokens_source"]["source"] == "none"
    c = compare_summaries(runs["usage"], runs["events"], base_dir=tmp_path / "usage",
                          candidate_dir=tmp_path / "events")
    rate = next(r for r in c.rates if r.name == "throughput.output_tokens_per_s")
    line = next(x for x in c.render("text").splitlines() if "throughput.output_tokens_per_s" in x)
    assert rate.verdict == "not_comparable" and "-100" not in line and "different units" in line, line


def test_goodput_tokens_without_any_token_count_is_null_not_zero() -> None:
    from hopbench.measure._slo import Slo, slo_summary

    rec = Recorder(["chat"])
    for name in ("slo.judged", "slo.good", "no_usage"):
        rec.incr("chat", name, 4)
    out = slo_summary({"chat": Slo(ttft_ns=1_000_000, target=0.5)}, rec.snapshot(), 2.0)
    assert out is not None and out["chat"]["goodput_rps"] == 2.0
    assert out["chat"]["goodput_tokens_per_s"] is None and out["chat"]["tokens_source"] == "none"
    from hopbench.views._capacity_table import slo_lines

    # the terminal printed "goodput 2.0 req/s, None tok/s" (a new user's finding)
    (line,) = slo_lines({"slo": {"chat": out["chat"]}})
    assert "None" not in line and "goodput 2.0 req/s, no token counts (no usage reported, no content events)" in line
    rec.incr("chat", "output_tokens_from.events", 4)  # their output events were counted: 0 is a count
    rec.incr("chat", "slo.good_output_tokens", 6)
    out = slo_summary({"chat": Slo(ttft_ns=1_000_000, target=0.5)}, rec.snapshot(), 2.0)
    assert out is not None and out["chat"]["goodput_tokens_per_s"] == 3.0 and out["chat"]["tokens_source"] == "events"
    (line,) = slo_lines({"slo": {"chat": out["chat"]}})
    assert "goodput 2.0 req/s, ~3.0 tok/s (counted from events)" in line, line


def test_the_run_line_of_a_saturated_run_says_so() -> None:
    """A new user's finding: a saturated run's ``run:`` line read clean (``16,027 of 16,027
    streams completed · ... error rate 0.0%``); only the warnings below said otherwise."""
    s = _summary(_EVENTS_ONLY)
    for saturated, said in ((False, False), (True, True)):
        s["saturated"] = saturated
        console = Console(record=True, width=200, color_system=None)
        render_summary(s, console)
        (run,) = [line for line in console.export_text().splitlines() if line.startswith("run: ")]
        assert ("SATURATED: its latencies are the client's, not the target's (see warnings)" in run) == said, run
