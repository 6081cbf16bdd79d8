"""``hopbench gate``: hold a results folder to budgets (k6 thresholds for LLM streams).

Role: evaluate budgets (a profile's ``[gate]`` table, recorded in summary.json, or
a ``--budget`` TOML file, parsed by :mod:`hopbench.config._gate_spec`) against
summary.json's statistics and counters, and render the verdict as text,
Markdown, JSON or JUnit XML. Works
from the results folder only (never re-runs, never reads raw logs): a gate of
any folder takes milliseconds. User documentation: docs/gate.md.

Invariants:

* Exit codes: 0 every budget held (and the run was complete, not saturated,
  and held the load it asked for); 1 a budget breached, an inconclusive
  budget that must not pass, or a failed run check; 2 bad input
  (``ProfileError``/``ResultsError``/``UsageError``, naming the file, line
  and key), including a baseline whose load shape differs from the run's
  (the rule is compare's, :func:`hopbench.views._compare.shape_differences`) unless
  ``force``.
* Values are compared in the metric's reporting unit (``_hdr.METRICS``: ms
  for times, tokens/s for rates); a limit's unit (ns, us, ms, s) is
  converted once at parse time.
* Percentiles are HdrHistogram's (the highest value equivalent to the bucket
  holding the target rank, within 0.1 % of a recorded value).
* Rates are defined once, in :data:`hopbench.measure._outcomes.RATES`, and documented in docs/gate.md.
"""

from __future__ import annotations

import json
import math
import xml.etree.ElementTree as ET
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from ..config._gate_spec import Budget, GateOptions, load_budget_file, parse_budgets, table_from_mapping
from ._compare import load_shape, shape_differences
from .._errors import ProfileError, ResultsError, UsageError
from .._exit import EXIT_BREACH, EXIT_OK
from .._format import fmt_num, load_phrase
from ..measure._hdr import Histogram
from ..measure._outcomes import RATES, measured_duration_s, rate_value
from ..measure._recorder import ALL
from .._toml import Table

__all__ = [
    "BudgetResult",
    "GateReport",
    "RunCheck",
    "evaluate_gate",
    "gate_command",
]


_OPS: Final[dict[str, Callable[[float, float], bool]]] = {
    "<=": lambda v, lim: v <= lim,
    "<": lambda v, lim: v < lim,
    ">=": lambda v, lim: v >= lim,
    ">": lambda v, lim: v > lim,
}


# -- evaluation ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BudgetResult:
    """The verdict on one budget.

    Attributes:
        budget: the budget.
        value: the measured value in the reporting unit (None when no data).
        limit: the limit in the reporting unit (resolved from the baseline when relative).
        baseline: the baseline value for a relative budget, else None.
        samples: sample count (metric) or the rate's denominator.
        status: ``"held"``, ``"breached"`` or ``"inconclusive"``.
        passed: whether this budget lets the gate pass.
        reason: one line on why (inconclusive: what was missing).
    """

    budget: Budget
    value: float | None
    limit: float | None
    baseline: float | None
    samples: int
    status: str
    passed: bool
    reason: str


@dataclass(frozen=True, slots=True)
class RunCheck:
    """A check on the run itself (complete, not saturated, load held, ...; docs/gate.md).

    Attributes:
        name: ``run.<check>``, e.g. ``run.load_held``.
        passed: whether this check lets the gate pass (an allowed failure passes).
        detail: one line quoting the summary's own figures; ``"; allowed (<option>)"``
            at its end when an ``allow_*`` option let a failure pass.
    """

    name: str
    passed: bool
    detail: str


def _scopes(summary: Mapping[str, Any], where: str) -> Mapping[str, Any]:
    scopes = summary.get("scopes")
    if not isinstance(scopes, Mapping):
        raise ResultsError(f"{where}: expected a \"scopes\" object")
    return scopes


def _stat_value(scope: Mapping[str, Any], b: Budget, where: str) -> tuple[float | None, int]:
    """(value in the reporting unit or None, sample count) of a metric budget in one scope."""
    assert b.metric is not None and b.stat is not None
    metrics = scope.get("metrics", {})
    m = metrics.get(b.metric) if isinstance(metrics, Mapping) else None
    if not isinstance(m, Mapping):
        return (0.0 if b.stat == "count" else None), 0
    count = m.get("count", 0)
    if not isinstance(count, int) or isinstance(count, bool):
        raise ResultsError(f"{where}: metrics.{b.metric}.count: expected an integer, got {count!r}")
    if b.stat == "count":
        return float(count), count
    if not count:
        return None, 0
    field_name = {"p50": "p50", "p90": "p90", "p99": "p99", "p99.9": "p999",
                  "min": "min", "mean": "mean", "max": "max", "p100": "max"}.get(b.stat)
    if field_name is not None:
        v = m.get(field_name)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return float(v), count
    text = m.get("hdr")
    if not isinstance(text, str):
        raise ResultsError(f"{where}: metrics.{b.metric}.hdr: expected a string")
    try:
        h = Histogram.decode(b.metric, text)
    except ResultsError as exc:
        raise ResultsError(f"{where}: metrics.{b.metric}.hdr: {exc}") from exc
    assert b.percentile is not None
    return h.percentile(b.percentile) / h.spec.divisor, count


def _measure(summary: Mapping[str, Any], b: Budget, measured_s: float | None,
             where: str) -> tuple[float | None, int] | None:
    """(value, samples) of ``b`` in ``summary``; None when the scope is absent."""
    if b.capacity is not None:  # summary.json's capacity block (hopbench.driver._stages; docs/slo.md)
        cap = summary.get("capacity")
        if not isinstance(cap, Mapping):
            return None, 0
        # an interrupted search, or one stopped by too few requests, knows only a
        # lower bound: no verdict either way
        value = cap.get(b.capacity) if cap.get("status") not in ("interrupted", "too_few_requests") else None
        probes = cap.get("probes")
        n = probes if isinstance(probes, int) and not isinstance(probes, bool) else 0
        return (float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None), n
    scope = _scopes(summary, where).get(b.scope)
    if not isinstance(scope, Mapping):
        return None
    if b.rate is not None:
        counters = scope.get("counters", {})
        metrics = scope.get("metrics", {})
        value, _num, den = rate_value(b.rate, counters if isinstance(counters, Mapping) else {},
                                      metrics if isinstance(metrics, Mapping) else {}, measured_s)
        return value, den
    return _stat_value(scope, b, f"{where}: scopes.{b.scope}")


def _resolve_limit(b: Budget, base_value: float) -> float:
    match b.baseline_op:
        case "*":
            return base_value * b.baseline_operand
        case "+":
            return base_value + b.baseline_operand
        case "-":
            return base_value - b.baseline_operand
    return base_value


def _evaluate_one(b: Budget, summary: Mapping[str, Any], baseline: Mapping[str, Any] | None,
                  measured_s: float | None, base_measured_s: float | None, where: str,
                  base_where: str) -> BudgetResult:
    got = _measure(summary, b, measured_s, where)
    value, samples = got if got is not None else (None, 0)
    limit = b.limit
    base_value: float | None = None

    def inconclusive(reason: str) -> BudgetResult:
        verdict = "passes" if b.inconclusive_passes else "fails"
        return BudgetResult(b, value, limit, base_value, samples, "inconclusive",
                            b.inconclusive_passes, f"{reason} ({verdict}: inconclusive = "
                            f"\"{'pass' if b.inconclusive_passes else 'fail'}\")")

    if b.baseline_op is not None:
        if baseline is None:
            return inconclusive("relative to the baseline, but no baseline was given")
        bgot = _measure(baseline, b, base_measured_s, base_where)
        if bgot is None or bgot[0] is None or bgot[1] < b.min_count:
            n = 0 if bgot is None else bgot[1]
            return inconclusive(f"baseline has {n} samples, {b.min_count} needed")
        base_value = bgot[0]
        limit = _resolve_limit(b, base_value)
    if b.capacity is not None and value is None:
        cap = summary.get("capacity")
        why = cap.get("message") if isinstance(cap, Mapping) else "not a staged run: no capacity block"
        return inconclusive(f"no capacity measured ({why})")
    if samples < b.min_count:
        return inconclusive(f"{samples} samples, {b.min_count} needed")
    if value is None:
        if b.rate is not None and not RATES[b.rate].fraction and samples:
            return inconclusive("measured duration unknown")
        return inconclusive("no samples")
    assert limit is not None
    held = _OPS[b.op](value, limit)
    status = "held" if held else "breached"
    return BudgetResult(b, value, limit, base_value, samples, status, held,
                        f"{_fmt(value, b)} {b.op} {_fmt(limit, b)}" + ("" if held else ": breached"))


def _run_checks(summary: Mapping[str, Any], opts: GateOptions) -> list[RunCheck]:
    checks = []
    complete = summary.get("complete") is True
    by = summary.get("interrupted_by")
    if complete:
        detail = "run ran to its end (not interrupted)"
    elif by:
        detail = f"run did not complete (interrupted_by: {by})"
    elif "ended_at" in summary and summary.get("ended_at") is None:
        # the checkpoint written every few seconds during the load (hopbench.driver._single): the
        # process never wrote its final summary (SIGKILL, out of memory, a power cut)
        detail = ("run did not complete (complete: false): summary.json is a checkpoint written during "
                  "the load (ended_at null): the run was killed before its final write")
    else:
        detail = "run did not complete (complete: false)"
    if not complete and opts.allow_incomplete:
        detail += "; allowed (allow_incomplete)"
    checks.append(RunCheck("run.complete", complete or opts.allow_incomplete, detail))
    # "complete" means "ran to its end", not "streams completed": a run whose every
    # stream failed is complete and must still fail its gate (hopbench run exits 4).
    head = summary.get("headline")
    # streams the scenario's cancel key closed on purpose count neither way (docs/results.md)
    if isinstance(head, Mapping) and not head.get("completed") and (
            (head.get("started") or 0) - (head.get("client_cancelled") or 0) > 0):
        checks.append(RunCheck("run.streams_completed", False,
                               f"no stream completed of {head.get('started'):,} started"))
    elif isinstance(head, Mapping) and head.get("started") == 0:
        # every stream started in the warm-up (or none at all): nothing to judge, never a pass
        checks.append(RunCheck("run.streams_measured", False,
                               "no stream was measured (none started after the warm-up)"))
    elif isinstance(head, Mapping) and head.get("completed") and not _output_measured(summary):
        # every stream ended with its terminal event, none carried output: nothing was measured
        checks.append(RunCheck("run.output_measured", False,
                               f"none of the {head.get('completed'):,} completed streams carried output "
                               "(no ttft sample, no output tokens)"))
    empty = [str(st.get("folder") or "?") for st in _staged_stages(summary) if st.get("measured") is False]
    if empty and not any(c.name in ("run.streams_completed", "run.streams_measured") for c in checks):
        # a plain [[stage]] run: every stage is load the profile asked for; one that measured
        # nothing is no evidence (hopbench run exits 4 for it; docs/slo.md)
        checks.append(RunCheck("run.streams_measured", False,
                               f"no stream was measured in stage{'s' if len(empty) > 1 else ''} {', '.join(empty)} "
                               "(none started after the warm-up)"))
    failed = _failed_parts(summary)
    if failed and not any(c.name == "run.streams_completed" for c in checks):
        # one scenario (or A/B arm) of several completed nothing: `hopbench run` exits 4 for it
        # (a wrong path, a model the gateway does not route); the others' budgets may all hold
        checks.append(RunCheck("run.scenarios_completed", False, "; ".join(failed)))
    saturated = summary.get("saturated") is True
    # a plain [[stage]] run: every stage is load the profile asked for (as run.load_held)
    stage = summary.get("stage_of_record")
    others = [str(st.get("folder") or "?") for st in _staged_stages(summary)
              if st.get("saturated") is True and st.get("folder") != stage]
    if saturated or others:
        warnings = [w for w in summary.get("warnings") or [] if isinstance(w, str) and "saturated" in w]
        detail = warnings[0] if warnings else "load generator saturated"
        if others:
            detail = ((detail + "; and " if saturated else "")
                      + f"load generator saturated in stage{'s' if len(others) > 1 else ''} {', '.join(others)}")
        if opts.allow_saturated:
            detail += "; allowed (allow_saturated)"
    else:
        detail = "load generator not saturated"
    saturated = saturated or bool(others)
    checks.append(RunCheck("run.not_saturated", (not saturated) or opts.allow_saturated, detail))
    checks.append(_load_held_check(summary, opts))
    return checks


def _load_held_check(summary: Mapping[str, Any], opts: GateOptions) -> RunCheck:
    """``run.load_held``: the run held the load it asked for (summary.json ``load.held``).

    The rule is the run's own (``hopbench.driver._finish.analyse``; docs/results.md,
    "Load held"): a closed loop of N users holds when on average at least 90 %
    of N were busy with the target; an open loop when the requests sent reach
    90 % of the arrivals its schedule had due in the load's window (``load.due``)
    and no arrival was dropped at ``max_in_flight``. Budgets measured under a
    lighter load than asked are no evidence of the gateway at that load, so
    ``held: false`` fails unless ``allow_load_not_held``. ``held`` null passes (a
    run bounded by ``run.requests`` is not judged: its end is not a failure to
    hold load; nor is a run with nothing due or measured, which other checks
    fail), and so does a summary without it; the detail gives the reason
    (:func:`_not_judged_reason`). The figures are said in the
    words of the terminal's ``load:`` line (``hopbench._format.load_phrase``).

    As ``run.not_saturated`` reads the top-level ``saturated``, this reads the
    top-level ``load``: with workers it is the merged load of all of them (the
    load the target saw; ``worker_detail`` records no ``held`` of its own). A
    staged folder's top-level ``load`` is its stage of record's:

    * plain ``[[stage]]`` entries (``stages_kind`` "stages"): every stage is a
      load the profile asked for, so any stage in ``stages`` whose ``held`` is
      false fails the check too: the first such stage (or the stage of record)
      leads the detail with its figures, the others are named after it;
    * a capacity search (``stages_kind`` "search"): only the stage of record is
      judged; probes above the capacity are expected not to hold their load
      (their ``held`` is part of their probe verdicts).

    Args:
        summary: a summary.json dict.
        opts: the gate's options (``allow_load_not_held``).

    Returns:
        the check; never raises on a malformed summary (what is missing is not judged).
    """
    load = summary.get("load")
    load = load if isinstance(load, Mapping) else {}
    held = load.get("held")
    figures = load_phrase(load)
    stage = summary.get("stage_of_record")
    where = f"stage of record {stage}: " if isinstance(stage, str) and stage else ""
    failed = _stages_not_held(summary)
    if held is not False and not failed:
        if held is True and figures:
            return RunCheck("run.load_held", True, f"{where}load held: {figures}")
        if held is True:  # held with no figure: no load reached the target (e.g. unreachable)
            return RunCheck("run.load_held", True, f"{where}load not judged (load.held true without "
                            "figures: nothing was measured)")
        return RunCheck("run.load_held", True, f"{where}load not judged ({_not_judged_reason(summary, load)})")
    if held is False:
        if not figures:  # a summary without the figures: the run's own words
            warned = [w for w in summary.get("warnings") or [] if isinstance(w, str) and "load not held" in w]
            figures = warned[0].split("load not held: ", 1)[-1] if warned else "load.held: false"
        detail = f"{where}load not held: {figures}"
        # the stage of record is one of the stages: the others are named after it
        failed = [f for f in failed if f.get("folder") != stage]
    else:
        first = failed.pop(0)
        detail = f"stage {first.get('folder') or '?'}: load not held: {_stage_figures(first)}"
    if failed:
        detail += (f"; and {len(failed)} more stage{'s' if len(failed) > 1 else ''} not held: "
                   + ", ".join(str(f.get("folder") or "?") for f in failed))
    if opts.allow_load_not_held:
        detail += "; allowed (allow_load_not_held)"
    return RunCheck("run.load_held", opts.allow_load_not_held, detail)


def _not_judged_reason(summary: Mapping[str, Any], load: Mapping[str, Any]) -> str:
    """Why a run's ``load.held`` is null, from what its summary.json shows (docs/gate.md).

    The run leaves ``held`` null (``hopbench.driver._finish.analyse``) for a run bounded by
    ``run.requests``, an open loop with no arrival due in its measured window
    (``load.due`` 0: a short Poisson run, a run stopped in its warm-up), and a closed
    loop with no steady window (``mean_busy`` null); an interruption is said beside it.

    Args:
        summary: a summary.json dict (``profile.run.requests``, ``stages_kind``,
            ``headline.started``, ``complete``, ``interrupted_by``).
        load: its ``load`` block.

    Returns:
        The reason, e.g. ``load.held null: no arrival was due in the measured window
        (load.due 0); no stream was measured``. Never raises.
    """
    if "held" not in load:
        return "summary.json has no load.held"
    profile = summary.get("profile")
    run = profile.get("run") if isinstance(profile, Mapping) else None
    # a stage's or probe's run never has a request budget (hopbench.driver._stages.stage_profile)
    # (an open loop with a budget is judged: its window ends one mean gap after its last arrival)
    if not summary.get("stages_kind") and isinstance(run, Mapping) and run.get("requests") is not None \
            and load.get("mode") not in ("rate", "trace"):
        return "load.held null: a run bounded by run.requests"
    why: list[str] = []
    if load.get("mode") in ("rate", "trace") and load.get("due") == 0:
        why.append("no arrival was due in the measured window (load.due 0)")
    elif load.get("mode") == "concurrency" and load.get("mean_busy") is None:
        why.append("no steady window was measured (load.mean_busy null)")
    head = summary.get("headline")
    if isinstance(head, Mapping) and head.get("started") == 0:
        why.append("no stream was measured")
    if summary.get("complete") is False and summary.get("interrupted_by"):
        why.append(f"the run was interrupted ({summary.get('interrupted_by')})")
    return "load.held null: " + ("; ".join(why) if why else "the run did not judge it")


def _interruption_note(summary: Mapping[str, Any]) -> list[str]:
    """One warning when the run warned of streams cancelled at its stop and a budget
    names ``interruption_rate``: the two are different quantities (docs/gate.md).

    The budget's ``interruption_rate`` is (failed + truncated + timeout) / responded
    (``hopbench.measure._outcomes.RATES``): streams broken after a response. The run's
    ``cancelled at the stop X% (> 5%)`` warning (``hopbench.driver._finish.outcome_warnings``)
    counts the streams cancelled at the stop (the headline's ``interrupted_rate``,
    cancelled / started), which no rate budget counts. Returns [] or one warning.
    """
    said = next((w for w in summary.get("warnings") or () if isinstance(w, str)
                 and w.startswith("cancelled at the stop ")), None)
    if said is None:
        return []
    head = summary.get("headline")
    value = head.get("interrupted_rate") if isinstance(head, Mapping) else None
    share = f"{value:.1%}" if isinstance(value, (int, float)) and not isinstance(value, bool) else "?"
    return [f"the budget interruption_rate counts streams broken after a response ((failed + truncated + timeout) "
            f"/ responded), not the streams cancelled at the stop that the run's \"{said.split(':')[0]}\" "
            f"warning counts (headline interrupted_rate {share}: cancelled / started)"]


def _staged_stages(summary: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The stages of a plain ``[[stage]]`` run (its ``stages`` entries), in the order run;
    [] for a capacity search (its probes above capacity are expected to fail) and for a
    run without stages."""
    kind = summary.get("stages_kind")
    if kind is None:  # (a folder written before stages_kind: its load shape says it)
        shape = summary.get("resolved_load")
        kind = shape.get("load.mode") if isinstance(shape, Mapping) else None
    stages = summary.get("stages")
    if kind != "stages" or not isinstance(stages, list):
        return []
    return [st for st in stages if isinstance(st, Mapping)]


def _stages_not_held(summary: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The stages of a plain ``[[stage]]`` run whose ``held`` is false, in the order run
    ([] for a capacity search, whose probes above capacity are expected to fail it, and
    for a run without stages)."""
    return [st for st in _staged_stages(summary) if st.get("held") is False]


def _stage_figures(stage: Mapping[str, Any]) -> str:
    """A stage's load figures (its entry in ``stages``): the shared phrase when the
    entry has them, else its load and achieved rate or busy users."""
    text = load_phrase(stage)
    if text:
        return text
    load, mode = stage.get("load"), stage.get("mode")
    if not isinstance(load, (int, float)):
        return "held: false"
    if mode == "rate":  # the stage's own load is the rate it asked
        return load_phrase({"requested_rate_rps": load, "achieved_rate_rps": stage.get("achieved_rate_rps")}) \
            or "held: false"
    return load_phrase({"requested_concurrency": int(load), "mean_busy": stage.get("mean_busy")}) or "held: false"


def _shape_text(summary: Mapping[str, Any]) -> str:
    """A run's load shape in a few words (``closed loop, 16 users``), for messages."""
    shape = load_shape(summary)
    mode = shape.get("load.mode")
    if mode == "concurrency":
        return f"closed loop, {shape.get('load.concurrency')} users"
    if mode == "rate":
        rate = shape.get("load.rate_rps")
        return f"open loop, {fmt_num(rate) if rate is not None else '?'} requests/s"
    return f"load.mode {mode}"


def _check_baseline_shape(summary: Mapping[str, Any], baseline: Mapping[str, Any], force: bool,
                          run_label: str, base_label: str) -> list[str]:
    """Refuse a baseline of another load shape, as ``hopbench compare`` refuses the pair.

    Returns:
        warnings for the report: one when ``force`` let a different shape through, else none.

    Raises:
        UsageError: the shapes differ and not ``force``.
    """
    diffs = shape_differences(baseline, summary)
    if not diffs:
        return []
    both = f"baseline {_shape_text(baseline)}, run {_shape_text(summary)}"
    if not force:
        raise UsageError(f"{base_label} and {run_label}: the runs' load shapes differ ({both}; "
                         + "; ".join(diffs) + " [baseline vs run]): a limit relative to a baseline "
                         "measured under another load says nothing about the gateway; pass --force "
                         "to use it anyway")
    return [f"load shapes differ ({both}; baseline used with --force): " + "; ".join(diffs)]


def _output_measured(summary: Mapping[str, Any]) -> bool:
    """Whether the "all" scope holds a TTFT sample or output tokens of completed
    streams; True when the summary does not say (an older or partial summary.json)."""
    scopes = summary.get("scopes")
    scope = scopes.get("all") if isinstance(scopes, Mapping) else None
    if not isinstance(scope, Mapping):
        return True
    metrics = scope.get("metrics")
    counters = scope.get("counters")
    if not isinstance(metrics, Mapping) or not isinstance(counters, Mapping):
        return True
    ttft = metrics.get("ttft")
    return bool(isinstance(ttft, Mapping) and ttft.get("count")) or bool(counters.get("tokens.output.completed"))


def _failed_parts(summary: Mapping[str, Any]) -> list[str]:
    """Of several scenarios, or of the A/B arms, those that completed none of their streams
    (``hopbench.driver._finish.failed_scenarios`` / ``failed_arms``, the rule ``hopbench run`` exits 4
    by), each said by the run's own warning, or ``scenario NAME: no stream completed``."""
    from ..driver._warnings import NO_OUTPUT_WARNING, failed_arms, failed_scenarios

    scopes = summary.get("scopes")  # the scenarios' resolved names (the profile may not write them)
    names = [k for k in scopes if k != ALL] if isinstance(scopes, Mapping) else []
    warnings = [w for w in summary.get("warnings") or () if isinstance(w, str)]
    out = []
    for kind, failed in (("arm", failed_arms(summary)), ("scenario", failed_scenarios(summary, names))):
        for name in failed:
            said = next((w for w in warnings if w.startswith(f"{kind} {name}: nothing completed")), None)
            out.append(said or f"{kind} {name}: no stream completed")
    # streams of one scenario completed, none carried output: nothing of it was measured (exit 4 too)
    out += [w for w in warnings if w.startswith("scenario ") and f": {NO_OUTPUT_WARNING}" in w]
    return out


def _scenario_names(summary: Mapping[str, Any]) -> set[str]:
    profile = summary.get("profile")
    scen = profile.get("scenario") if isinstance(profile, Mapping) else None
    if not isinstance(scen, list):
        return set()
    return {s["name"] for s in scen if isinstance(s, Mapping) and isinstance(s.get("name"), str)}


def evaluate_gate(summary: dict[str, Any], budget: Mapping[str, Any] | Table | None = None,
                  baseline: dict[str, Any] | None = None, *, source: str = "summary.json [gate]",
                  results_dir: Path | None = None, baseline_dir: Path | None = None,
                  allow_incomplete: bool = False, allow_saturated: bool = False,
                  allow_load_not_held: bool = False, force: bool = False,
                  missing_baseline: str = "error") -> GateReport:
    """Hold a run's summary to budgets.

    Args:
        summary: a summary.json dict (``read_summary`` or ``RunOutcome.summary``).
        budget: the budget table: a ``Table`` (from :func:`load_budget_file`,
            errors then carry file:line) or a mapping in the ``[gate]`` form;
            None: ``summary["gate"]``.
        baseline: the baseline run's summary, for budgets relative to ``baseline``.
        source: names the budget table in messages when it is a mapping.
        results_dir: the run's folder (for the measured duration from timeline.jsonl).
        baseline_dir: the baseline's folder, likewise.
        allow_incomplete: an interrupted run does not fail the gate by itself.
        allow_saturated: a saturated load generator does not fail the gate by itself.
        allow_load_not_held: a run that did not hold its load (summary.json
            ``load.held`` false) does not fail the gate by itself.
        force: use a baseline whose load shape differs from the run's (the
            report then carries a warning), as ``hopbench compare --force``.
        missing_baseline: ``"error"`` (a relative budget without a baseline is
            bad input) or ``"inconclusive"`` (e.g. at the end of ``hopbench run``).

    Returns:
        GateReport (``.passed``, ``.exit_code`` 0 or 1, ``.render(fmt)``).

    Raises:
        ProfileError: a malformed budget (file:line: key), a scenario the run
            does not have, or a relative budget with no baseline.
        ResultsError: the summary is malformed.
        UsageError: no budgets at all; or a baseline whose load shape differs
            from the run's (:func:`hopbench.views._compare.shape_differences`, the
            rule ``hopbench compare`` refuses a pair by) and not ``force``.
    """
    if budget is None:
        budget = summary.get("gate")
        if not budget:
            raise UsageError(f"{source}: no budgets: the profile had no [gate] table; pass --budget FILE")
    t = budget if isinstance(budget, Table) else table_from_mapping(budget, source)
    budgets, opts = parse_budgets(t)
    if not budgets:
        where = t.doc.path if isinstance(budget, Table) and t.doc is not None and t.doc.path else source
        raise UsageError(f"{where}: the [gate] table holds no budgets")
    known = set(_scopes(summary, source)) | _scenario_names(summary) | {ALL}
    for b in budgets:
        key = b.key if b.scope == ALL else f"scenario.{b.scope}.{b.key}"
        if b.scope not in known:
            raise ProfileError(f"scenario {b.scope!r} is not in the run (scenarios: "
                               f"{', '.join(sorted(known - {ALL})) or 'none'})", path=b.file, line=b.line, key=key)
        if b.baseline_op is not None and baseline is None and missing_baseline == "error":
            raise ProfileError(f"{b.limit_text!r} is relative to the baseline: pass --baseline BASE_RESULTS_DIR",
                               path=b.file, line=b.line, key=key)
    warnings: list[str] = []
    if baseline is not None:
        warnings = _check_baseline_shape(
            summary, baseline, force, str(results_dir) if results_dir is not None else "run",
            str(baseline_dir) if baseline_dir is not None else "baseline")
    opts = GateOptions(opts.allow_incomplete or allow_incomplete, opts.allow_saturated or allow_saturated,
                       opts.allow_load_not_held or allow_load_not_held)
    measured_s, measured_src = measured_duration_s(summary, results_dir)
    base_measured_s = measured_duration_s(baseline, baseline_dir)[0] if baseline is not None else None
    where = f"{results_dir}/summary.json" if results_dir is not None else "summary"
    base_where = f"{baseline_dir}/summary.json" if baseline_dir is not None else "baseline summary"
    results = tuple(_evaluate_one(b, summary, baseline, measured_s, base_measured_s, where, base_where)
                    for b in budgets)
    if any(b.rate == "interruption_rate" for b in budgets):
        warnings += _interruption_note(summary)
    name = summary.get("name")
    return GateReport(
        name=name if isinstance(name, str) else None,
        results_dir=None if results_dir is None else str(results_dir),
        source=str(t.doc.path) if t.doc and t.doc.path else source,
        results=results,
        checks=tuple(_run_checks(summary, opts)),
        measured_s=measured_s,
        measured_source=measured_src,
        warnings=tuple(warnings),
    )


# -- report --------------------------------------------------------------------


def _num(v: float) -> str:
    if v == 0:
        return "0"
    a = abs(v)
    if a >= 100:
        text = f"{v:.0f}" if a >= 100_000 else f"{v:.1f}"
        return text.removesuffix(".0")
    if a >= 1:
        return f"{v:.2f}"
    return f"{v:.3g}"


def _fmt(v: float | None, b: Budget) -> str:
    if v is None:
        return "n/a"
    if b.stat == "count":  # a limit of 159.4 is shown as written, never rounded to the count it fails
        return f"{v:.0f}" if float(v).is_integer() else f"{v:g}"
    if b.rate is not None and RATES[b.rate].fraction:
        return f"{v:.4g} ({v * 100:.3g} %)"
    return f"{_num(v)} {b.unit}".rstrip()


def _limit_display(r: BudgetResult) -> str:
    b = r.budget
    if b.baseline_op is None:
        return f"{b.op} {_fmt(r.limit, b)}"
    if r.limit is None:
        return b.limit_text
    return f"{b.op} {_fmt(r.limit, b)} ({b.limit_text.removeprefix(b.op).strip()})"


_MARK = {"held": "PASS", "breached": "FAIL", "inconclusive": "????"}


@dataclass(frozen=True, slots=True)
class GateReport:
    """The outcome of a gate: every budget's verdict and the run checks.

    Attributes:
        name: the run's name.
        results_dir: the results folder, when known.
        source: where the budgets came from (file, or ``summary.json [gate]``).
        results: one :class:`BudgetResult` per budget, in table order.
        checks: run checks (complete, not saturated, load held, ...).
        measured_s: measured duration used by per-second rates (None: unknown).
        measured_source: where ``measured_s`` came from.
        warnings: what the verdict should be read with, e.g. a baseline of
            another load shape used with ``force``; possibly empty.
    """

    name: str | None
    results_dir: str | None
    source: str
    results: tuple[BudgetResult, ...]
    checks: tuple[RunCheck, ...]
    measured_s: float | None = None
    measured_source: str = field(default="unknown")
    warnings: tuple[str, ...] = ()

    @property
    def passed(self) -> bool:
        """True when every budget passed and every run check passed."""
        return all(r.passed for r in self.results) and all(c.passed for c in self.checks)

    @property
    def exit_code(self) -> int:
        """0 when passed, else 1."""
        return EXIT_OK if self.passed else EXIT_BREACH

    def _counts(self) -> tuple[int, int, int, int]:
        held = sum(r.status == "held" for r in self.results)
        breached = sum(r.status == "breached" for r in self.results)
        inc = sum(r.status == "inconclusive" for r in self.results)
        checks = sum(not c.passed for c in self.checks)
        return held, breached, inc, checks

    def headline(self) -> str:
        """One line: ``gate passed: 5 held`` or ``gate FAILED: 1 breached, ...``."""
        held, breached, inc, checks = self._counts()
        parts = [f"{held} held"]
        if breached:
            parts.append(f"{breached} breached")
        if inc:
            parts.append(f"{inc} inconclusive")
        if checks:
            parts.append(f"{checks} run check{'s' if checks > 1 else ''} failed")
        return ("gate passed: " if self.passed else "gate FAILED: ") + ", ".join(parts)

    def render(self, fmt: str) -> str:
        """Render as ``"text"``, ``"markdown"``, ``"json"`` or ``"junit"`` (XML).

        Raises:
            UsageError: an unknown format.
        """
        match fmt:
            case "text":
                return self._text()
            case "markdown":
                return self._markdown()
            case "json":
                return json.dumps(self.to_json(), indent=2, allow_nan=False) + "\n"
            case "junit":
                return self._junit()
        raise UsageError(f"unknown format {fmt!r}: expected text, markdown, json or junit")

    def _text(self) -> str:
        lines = [f"warning: {w}" for w in self.warnings]
        width = max([len(f"{r.budget.scope} {r.budget.key}") for r in self.results]
                    + [len(c.name) for c in self.checks])
        for c in self.checks:
            lines.append(f"{'PASS' if c.passed else 'FAIL'}  {c.name:<{width}}  {c.detail}")
        for r in self.results:
            label = f"{r.budget.scope} {r.budget.key}"
            tail = f"{r.status}" if r.status != "inconclusive" else f"inconclusive: {r.reason}"
            mark = _MARK[r.status] if r.status != "inconclusive" else ("pass" if r.passed else "FAIL")
            lines.append(f"{mark:<4}  {label:<{width}}  {_fmt(r.value, r.budget):>18}  "
                         f"{_limit_display(r):<28}  n={r.samples:<7} {tail}")
        lines.append(self.headline())
        return "\n".join(lines) + "\n"

    def _markdown(self) -> str:
        head = f"### hopbench gate{f': {self.name}' if self.name else ''}: " + (
            "passed :white_check_mark:" if self.passed else "FAILED :x:")
        out = [head, "", self.headline(), ""]
        out += [f"> warning: {_md(w)}" for w in self.warnings] + ([""] if self.warnings else [])
        out += ["| result | scope | budget | value | limit | samples |",
               "|---|---|---|---|---|---|"]
        for c in self.checks:
            out.append(f"| {'✅ pass' if c.passed else '❌ fail'} | | {_md(c.name)} | {_md(c.detail)} | | |")
        for r in self.results:
            mark = {"held": "✅ held", "breached": "❌ breached"}.get(
                r.status, "⚠️ inconclusive" + ("" if r.passed else " (fails)"))
            out.append(f"| {mark} | {_md(r.budget.scope)} | `{_md(r.budget.key)}` | {_md(_fmt(r.value, r.budget))} "
                       f"| {_md(_limit_display(r))} | {r.samples} |")
        return "\n".join(out) + "\n"

    def to_json(self) -> dict[str, Any]:
        """The report as a JSON-ready dict (see docs/gate.md)."""
        def clean(v: float | None) -> float | None:
            return v if v is None or math.isfinite(v) else None

        return {
            "name": self.name,
            "results_dir": self.results_dir,
            "source": self.source,
            "passed": self.passed,
            "exit_code": self.exit_code,
            "measured_s": self.measured_s,
            "measured_source": self.measured_source,
            "warnings": list(self.warnings),
            "checks": [{"name": c.name, "passed": c.passed, "detail": c.detail} for c in self.checks],
            "budgets": [
                {
                    "key": r.budget.key, "scope": r.budget.scope, "where": r.budget.where,
                    "limit_text": r.budget.limit_text, "op": r.budget.op,
                    "value": clean(r.value), "limit": clean(r.limit), "baseline": clean(r.baseline),
                    "unit": r.budget.unit, "samples": r.samples, "min_count": r.budget.min_count,
                    "status": r.status, "passed": r.passed, "reason": r.reason,
                }
                for r in self.results
            ],
        }

    def _junit(self) -> str:
        cases = len(self.checks) + len(self.results)
        failures = sum(not c.passed for c in self.checks) + sum(not r.passed for r in self.results)
        skipped = sum(r.status == "inconclusive" and r.passed for r in self.results)
        suites = ET.Element("testsuites", name="hopbench gate", tests=str(cases), failures=str(failures))
        suite = ET.SubElement(suites, "testsuite", name=f"hopbench gate{f' {self.name}' if self.name else ''}",
                              tests=str(cases), failures=str(failures), errors="0", skipped=str(skipped))
        for c in self.checks:
            case = ET.SubElement(suite, "testcase", classname="hopbench.gate.run", name=c.name)
            if not c.passed:
                ET.SubElement(case, "failure", message=c.detail, type="run_check").text = c.detail
        for r in self.results:
            b = r.budget
            case = ET.SubElement(suite, "testcase", classname=f"hopbench.gate.{b.scope}",
                                 name=f"{b.key} {b.limit_text}")
            text = f"{b.scope} {b.key} = {_fmt(r.value, b)}; limit {_limit_display(r)}; samples {r.samples}"
            if r.status == "breached":
                ET.SubElement(case, "failure", message=r.reason, type="breached").text = text
            elif r.status == "inconclusive":
                if r.passed:
                    ET.SubElement(case, "skipped", message=r.reason)
                else:
                    ET.SubElement(case, "failure", message=r.reason, type="inconclusive").text = text
            ET.SubElement(case, "system-out").text = text
        if self.warnings:
            ET.SubElement(suite, "system-err").text = "\n".join(f"warning: {w}" for w in self.warnings)
        ET.indent(suites)
        return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


# -- command ---------------------------------------------------------------------


def gate_command(results_dir: Path, *, budget_path: Path | None = None, baseline_dir: Path | None = None,
                 junit: Path | None = None, allow_incomplete: bool = False,
                 allow_saturated: bool = False, allow_load_not_held: bool = False,
                 force: bool = False) -> GateReport:
    """``hopbench gate``: read a results folder, hold it to budgets, write JUnit XML.

    The arguments are parsed by :mod:`hopbench.cli`, which prints the report
    and exits with ``report.exit_code``.

    Args:
        results_dir: a folder written by ``hopbench run`` (or a summary.json).
        budget_path: a budget TOML file (its ``[gate]`` table, or the whole
            file); None: the profile's ``[gate]`` recorded in summary.json.
        baseline_dir: the results folder ``baseline`` in a limit refers to.
        junit: also write JUnit XML (one test case per budget) here.
        allow_incomplete: an interrupted run does not fail the gate by itself.
        allow_saturated: a saturated load generator does not fail the gate by itself.
        allow_load_not_held: a run that did not hold its load does not fail the gate by itself.
        force: use a baseline whose load shape differs from the run's.

    Returns:
        GateReport.

    Raises:
        HopbenchError: bad input (a ``ProfileError``, ``ResultsError`` or
            ``UsageError`` naming the file, line and key), a baseline of
            another load shape without ``force`` (``UsageError``), or a JUnit
            file that cannot be written (``UsageError``).
    """
    from ..driver._results import read_summary

    summary = read_summary(results_dir)
    baseline = read_summary(baseline_dir) if baseline_dir is not None else None
    budget: Table | None = load_budget_file(budget_path) if budget_path is not None else None
    report = evaluate_gate(summary, budget, baseline,
                           source=f"{results_dir}/summary.json [gate]",
                           results_dir=results_dir if results_dir.is_dir() else None,
                           baseline_dir=baseline_dir if baseline_dir and baseline_dir.is_dir() else None,
                           allow_incomplete=allow_incomplete, allow_saturated=allow_saturated,
                           allow_load_not_held=allow_load_not_held, force=force)
    if junit is not None:
        try:
            junit.parent.mkdir(parents=True, exist_ok=True)
            junit.write_text(report.render("junit"), encoding="utf-8")
        except OSError as exc:
            # mkdir(exist_ok) on a path through a file says "File exists": name the file instead
            blocker = next((p for p in junit.parents if p.exists() and not p.is_dir()), None)
            why = f"{blocker} is a file, not a directory" if blocker is not None else (exc.strerror or str(exc))
            raise UsageError(f"--junit: cannot write {junit}: {why}") from exc
    return report
