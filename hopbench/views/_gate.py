"""``hopbench gate``: hold a results folder to budgets (k6 thresholds for LLM streams).

Role: evaluate budgets (a profile's ``[gate]`` table, recorded in summary.json, or
a ``--budget`` TOML file, parsed by :mod:`hopbench.config._gate_spec`) against
summary.json's statistics and counters, and render the verdict as text,
Markdown, JSON or JUnit XML; the checks on the run itself (complete, not
saturated, load held, ...) are :mod:`hopbench.views._gate_checks`'. Works
from the results folder only (never re-runs, never reads raw logs): a gate of
any folder takes milliseconds. User documentation: docs/gate.md.

Invariants:

* Every budget and run check ends in a verdict weighed against the run's
  measured noise (:mod:`hopbench.views._verdicts`: pass, fail, inconclusive,
  not judged), one sentence each; the text leads with the runner's state.
* Exit codes: 0 every budget held (and the run was complete, not saturated,
  and held the load it asked for); 1 a budget breached beyond the run's noise or
  a failed run check; 5 inconclusive (a breach within the noise, too few
  samples, a saturated run or a load not held, not allowed to pass); 2 bad input
  (``ProfileError``/``ResultsError``/``UsageError``, naming the file, line
  and key), including a baseline whose load shape differs from the run's
  (the rule is compare's, :func:`hopbench.views._load_shape.shape_differences`) unless
  ``force``.
* Values are compared in the metric's reporting unit (``_metrics.METRICS``: ms
  for times, tokens/s for rates); a limit's unit (ns, us, ms, s) is
  converted once at parse time.
* Percentiles are HdrHistogram's (the highest value equivalent to the bucket
  holding the target rank, within 0.1 % of a recorded value).
* Rates are defined once, in :data:`hopbench.measure._outcomes.RATES`, and documented in docs/gate.md.
"""

from __future__ import annotations

import dataclasses
import json
import math
import xml.etree.ElementTree as ET
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from ..config._gate_spec import Budget, GateOptions, load_budget_file, parse_budgets, table_from_mapping
from ._gate_checks import RunCheck, run_checks
from ._load_shape import load_shape, shape_differences
from ._noise_record import arms_paired
from .._errors import ProfileError, ResultsError, UsageError
from .._exit import EXIT_BREACH, EXIT_OK
from .._format import fmt_limit, fmt_num
from ..measure._hdr import Histogram
from ..measure._outcomes import RATES, TokensSource, measured_duration_s, rate_value, tokens_source, tokens_unlike
from ..measure._recorder import ALL
from .._toml import Table

__all__ = [
    "BudgetResult",
    "GateReport",
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
        # an interrupted search, or one stopped by too few requests or by hopbench's own
        # saturation, knows only a lower bound: no verdict either way
        value = (cap.get(b.capacity) if cap.get("status") not in ("interrupted", "too_few_requests",
                                                                   "client_saturated") else None)
        probes = cap.get("probes")
        n = probes if isinstance(probes, int) and not isinstance(probes, bool) else 0
        return (float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None), n
    if b.arms_figure is not None:  # the worst arm's paired difference (docs/gate.md, "A/B arms")
        got = arms_paired(summary, b.arms_figure, b.op)
        if got is None:
            return None, 0
        pairs = got[1].get("n")
        return float(got[1]["p50_diff"]), pairs if isinstance(pairs, int) and not isinstance(pairs, bool) else 0
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


def _tokens_of(summary: Mapping[str, Any], scope: str, where: str) -> TokensSource:
    """Where a scope's output tokens came from (``measure._outcomes.tokens_source``)."""
    s = _scopes(summary, where).get(scope)
    counters = s.get("counters") if isinstance(s, Mapping) else None
    return tokens_source(counters if isinstance(counters, Mapping) else {})


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

    if b.rate == "output_tokens_per_s" or b.metric in ("output_tokens_per_s", "tpot"):
        # a token figure without a count, or against a baseline that counted tokens otherwise
        # (usage against output events), is no measurement: never 0 tokens/s
        # (docs/gate.md; measure._outcomes.tokens_unlike)
        src = _tokens_of(summary, b.scope, where)
        if not src.counted and (b.rate is not None or not samples):
            return inconclusive("no token counts in the run (no stream reported usage or carried an "
                                "output event): a missing count is not 0")
        if b.baseline_op is not None and baseline is not None:
            base_src = _tokens_of(baseline, b.scope, base_where)
            # a per-stream figure with samples had a count: only counts of different kinds matter
            unlike = ("" if b.rate is None and not (base_src.counted and src.counted)
                      else tokens_unlike(base_src, src, ("baseline", "run")))
            if unlike:
                return inconclusive(unlike)
    if b.baseline_op is not None:
        if baseline is None:
            return inconclusive("relative to the baseline, but no baseline was given")
        bgot = _measure(baseline, b, base_measured_s, base_where)
        if bgot is None or bgot[0] is None or bgot[1] < b.min_count:
            n = 0 if bgot is None else bgot[1]
            return inconclusive(f"too few samples in the baseline ({n}, {b.min_count} needed)")
        base_value = bgot[0]
        limit = _resolve_limit(b, base_value)
    if b.capacity is not None and value is None:
        cap = summary.get("capacity")
        if isinstance(cap, Mapping):
            from ..driver._search import message_head

            # without the saturation cause: the capacity line and the run's warning give it
            why = message_head(str(cap.get("message")))
        else:
            why = "not a staged run: no capacity block"
        return inconclusive(f"no capacity measured ({why})")
    if b.arms_figure is not None and value is None:
        return inconclusive(f"no paired {b.arms_figure} ({_no_pairs_why(summary)})")
    if samples < b.min_count:
        return inconclusive(f"too few samples ({samples}, {b.min_count} needed)")
    if value is None:
        if b.rate is not None and not RATES[b.rate].fraction and samples:
            return inconclusive("measured duration unknown")
        return inconclusive("no samples")
    assert limit is not None
    held = _OPS[b.op](value, limit)
    status = "held" if held else "breached"
    return BudgetResult(b, value, limit, base_value, samples, status, held,
                        f"{_fmt(value, b)} {b.op} {_fmt(limit, b)}" + ("" if held else ": breached"))


def _interruption_note(summary: Mapping[str, Any]) -> list[str]:
    """One warning when the run warned of streams cancelled at its stop and a budget
    names ``interruption_rate``: the two are different quantities (docs/gate.md).

    The budget's ``interruption_rate`` is (failed + truncated + timeout) / responded
    (``hopbench.measure._outcomes.RATES``): streams broken after a response. The run's
    ``cancelled at the stop X% (> 5%)`` warning (``hopbench.driver._warnings.outcome_warnings``)
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
    """Refuse a baseline of another load shape, or one that did not complete, as ``hopbench
    compare`` refuses the pair (docs/gate.md, "The baseline: same load shape only").

    Returns:
        warnings for the report: one for each thing ``force`` let through, else none.

    Raises:
        UsageError: the shapes differ, or the baseline did not complete (``complete`` not true),
            and not ``force``.
    """
    from ._compare import _partial_why

    warnings = []
    if baseline.get("complete") is not True:  # compare's rule: a cut-short run is no baseline
        why = _partial_why(baseline)
        if not force:
            raise UsageError(f"{base_label}: the baseline run did not complete ({why}): its figures cover only "
                             "part of the planned load, so a limit relative to it says nothing about the "
                             "gateway; gate against a complete baseline, or pass --force to use it anyway")
        warnings.append(f"{base_label}: the baseline run did not complete ({why}; used with --force)")
    diffs = shape_differences(baseline, summary)
    if not diffs:
        return warnings
    both = f"baseline {_shape_text(baseline)}, run {_shape_text(summary)}"
    if not force:
        raise UsageError(f"{base_label} and {run_label}: the runs' load shapes differ ({both}; "
                         + "; ".join(diffs) + " [baseline vs run]): a limit relative to a baseline "
                         "measured under another load says nothing about the gateway; pass --force "
                         "to use it anyway")
    return warnings + [f"load shapes differ ({both}; baseline used with --force): " + "; ".join(diffs)]


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
        GateReport (``.passed``, ``.exit_code`` 0, 1 or 5, ``.verdicts``, ``.render(fmt)``).

    Raises:
        ProfileError: a malformed budget (file:line: key), a scenario the run
            does not have, a relative budget with no baseline, or an ``arms.*`` budget on
            a run without A/B arms.
        ResultsError: the summary is malformed.
        UsageError: no budgets at all; or a baseline whose load shape differs
            from the run's (:func:`hopbench.views._load_shape.shape_differences`, the
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
        if b.arms_figure is not None and not isinstance(summary.get("arm_differences"), Mapping):
            # never a retry (exit 5): no runner makes a run without [[arm]] tables paired
            raise ProfileError(f"{b.key!r} is a budget on the A/B arms' paired difference, and {source} is not "
                               "an A/B arms run (no arm_differences): gate it on a run with [[arm]] tables "
                               "(docs/ab-arms.md)", path=b.file, line=b.line, key=key)
        if b.baseline_op is not None and baseline is None and missing_baseline == "error":
            raise ProfileError(f"{b.limit_text!r} is relative to the baseline: pass --baseline BASE_RESULTS_DIR",
                               path=b.file, line=b.line, key=key)
    warnings: list[str] = []
    if baseline is not None:
        warnings = _check_baseline_shape(
            summary, baseline, force, str(results_dir) if results_dir is not None else "run",
            str(baseline_dir) if baseline_dir is not None else "baseline")
    mixed = [b.key for b in budgets if b.scope == ALL and b.arms_figure is None and b.metric is not None]
    if mixed and isinstance(summary.get("arm_differences"), Mapping):
        # an A/B arms run's "all" holds every arm's streams: a budget there is held by their mix
        arms = [str(a.get("name")) for a in (summary.get("profile") or {}).get("arm") or [] if isinstance(a, Mapping)]
        warnings.append(f"{', '.join(mixed)}: scope all of an A/B arms run mixes the arms' streams "
                        f"({', '.join(arms) or 'its arms'}): gate an arm's own scope ([scenario.<arm>] "
                        "budgets) or the paired difference (arms.<figure>.p50_diff)")
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
    report = GateReport(
        name=name if isinstance(name, str) else None,
        results_dir=None if results_dir is None else str(results_dir),
        source=str(t.doc.path) if t.doc and t.doc.path else source,
        results=results,
        checks=tuple(run_checks(summary, opts)),
        measured_s=measured_s,
        measured_source=measured_src,
        warnings=tuple(warnings),
    )
    from ._verdicts import judge_gate  # the verdicts weighed against the run's noise (docs/gate.md)

    verdicts = judge_gate(report, summary, results_dir=results_dir, baseline=baseline, baseline_dir=baseline_dir)
    return dataclasses.replace(report, verdicts=verdicts)


# -- report --------------------------------------------------------------------


def _fmt(v: float | None, b: Budget) -> str:
    if v is None:
        return "n/a"
    if b.stat == "count":  # a limit of 159.4 is shown as written, never rounded to the count it fails
        return f"{v:.0f}" if float(v).is_integer() else f"{v:g}"
    if b.rate is not None and RATES[b.rate].fraction:
        return f"{v:.4g} ({v * 100:.3g} %)"
    return f"{fmt_limit(v)} {b.unit}".rstrip()


def _no_pairs_why(summary: Mapping[str, Any]) -> str:
    """Why an ``arms.`` budget found no paired figure: not an arms run, no streams.jsonl, or no
    round whose two streams both measured it (an arm that failed its requests)."""
    block = summary.get("arm_differences")
    pairs = block.get("pairs") if isinstance(block, Mapping) else None
    if not isinstance(pairs, list) or not pairs:
        return "not an A/B arms run"
    if not any(isinstance(p, Mapping) and isinstance(p.get("paired"), Mapping) for p in pairs):
        return "no paired verdicts: the run kept no streams.jsonl (run.stream_log)"
    return ("no round had it on both arms' streams: an arm's requests failed or carried no output "
            "(see the arms' error rates)")


def _limit_display(r: BudgetResult, applied: float | None = None) -> str:
    """The limit column: as written (a relative one with its text); ``applied``, the limit the
    verdict was judged against, follows when it differs (a calibrated limit moved by the run's
    client delay: ``hopbench.views._verdicts.judge_gate``), so the column and the sentence agree."""
    b = r.budget
    if b.baseline_op is None:
        moved = applied is not None and r.limit is not None and _fmt(applied, b) != _fmt(r.limit, b)
        return f"{b.op} {_fmt(r.limit, b)}" + (f" (this run: {_fmt(applied, b)})" if moved else "")
    if r.limit is None:
        return b.limit_text
    return f"{b.op} {_fmt(r.limit, b)} ({b.limit_text.removeprefix(b.op).strip()})"


_MARK = {"pass": "PASS", "fail": "FAIL", "inconclusive": "INCONCLUSIVE", "not judged": "NOT JUDGED"}
_MD_MARK = {"pass": "✅ pass", "fail": "❌ fail", "inconclusive": "⚠️ inconclusive", "not judged": "⚪ not judged"}


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
        verdicts: the budgets' and checks' verdicts weighed against the run's noise
            (:class:`hopbench.views._verdicts.GateVerdicts`); None only for a report
            built by hand, which is then judged by its statuses alone.
    """

    name: str | None
    results_dir: str | None
    source: str
    results: tuple[BudgetResult, ...]
    checks: tuple[RunCheck, ...]
    measured_s: float | None = None
    measured_source: str = field(default="unknown")
    warnings: tuple[str, ...] = ()
    verdicts: Any = None

    @property
    def passed(self) -> bool:
        """True when the gate's verdict is ``pass`` (every budget and run check passed or may pass)."""
        if self.verdicts is not None:
            return bool(self.verdicts.verdict == "pass")
        return all(r.passed for r in self.results) and all(c.passed for c in self.checks)

    @property
    def exit_code(self) -> int:
        """0 pass, 1 fail, 5 inconclusive (:mod:`hopbench._exit`)."""
        if self.verdicts is not None:
            return int(self.verdicts.exit_code)
        return EXIT_OK if self.passed else EXIT_BREACH

    def _verdict_of(self, i: int) -> tuple[str, str]:
        """(verdict, sentence with n and p) of budget ``i``."""
        if self.verdicts is None:
            r = self.results[i]
            return {"held": "pass", "breached": "fail"}.get(r.status, "inconclusive"), r.reason
        _, j, ok = self.verdicts.budgets[i]
        extra = " (passes: inconclusive = \"pass\")" if j.verdict == "inconclusive" and ok else ""
        return j.verdict, f"{j.reason}{extra} [n = {j.n_base}]"

    def _check_verdicts(self) -> list[str]:
        if self.verdicts is None:
            return ["pass" if c.passed else "fail" for c in self.checks]
        return [c.verdict for c in self.verdicts.checks]

    def _counts(self) -> tuple[int, int, int, int]:
        held = sum(r.status == "held" for r in self.results)
        breached = sum(r.status == "breached" for r in self.results)
        inc = sum(r.status == "inconclusive" for r in self.results)
        checks = sum(not c.passed for c in self.checks)
        return held, breached, inc, checks

    def headline(self) -> str:
        """One sentence: the gate's verdict and its first reason (``gate FAILED: ttft.p50: fail: ...``,
        ``gate INCONCLUSIVE (exit 5: ...): ...``, ``gate passed: 6 of 6 budgets held``): what ``-q`` prints."""
        if self.verdicts is not None:
            return str(self.verdicts.reason())
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
        if self.verdicts is not None:
            lines += [f"runner: {self.verdicts.runner}"] if self.verdicts.runner else []
            lines += [f"note: {n}" for n in self.verdicts.notes]
        width = max([len(f"{r.budget.scope} {r.budget.key}") for r in self.results]
                    + [len(c.name) for c in self.checks])
        # every row's mark padded to the widest mark in the table, so INCONCLUSIVE keeps the columns in line
        marks = self._check_verdicts() + [self._verdict_of(i)[0] for i in range(len(self.results))]
        mark = max([len(_MARK[v]) for v in marks] + [4])
        for c, v in zip(self.checks, self._check_verdicts()):
            lines.append(f"{_MARK[v]:<{mark}}  {c.name:<{width}}  {c.detail}")
        for i, r in enumerate(self.results):
            label = f"{r.budget.scope} {r.budget.key}"
            v, sentence = self._verdict_of(i)
            lines.append(f"{_MARK[v]:<{mark}}  {label:<{width}}  {_fmt(r.value, r.budget):>18}  "
                         f"{_limit_display(r, self._applied(i)):<28}  {sentence}")
        lines.append(self.headline())
        return "\n".join(lines) + "\n"

    def _markdown(self) -> str:
        head = f"### hopbench gate{f': {self.name}' if self.name else ''}: " + (
            "passed :white_check_mark:" if self.passed else "INCONCLUSIVE :warning:" if self.exit_code == 5
            else "FAILED :x:")
        out = [head, "", self.headline(), ""]
        out += [f"> warning: {_md(w)}" for w in self.warnings] + ([""] if self.warnings else [])
        out += ["| result | scope | budget | value | limit | samples |",
               "|---|---|---|---|---|---|"]
        out[-2:] = ["| result | scope | budget | value | limit | samples | why |", "|---|---|---|---|---|---|---|"]
        for c, v in zip(self.checks, self._check_verdicts()):
            # a failure an allow_* option let pass is no green tick (a saturated run, allowed)
            mark = "➖ allowed" if v == "pass" and "; allowed (allow_" in c.detail else _MD_MARK[v]
            out.append(f"| {mark} | | {_md(c.name)} | {_md(c.detail)} | | | |")
        for i, r in enumerate(self.results):
            v, sentence = self._verdict_of(i)
            out.append(f"| {_MD_MARK[v]} | {_md(r.budget.scope)} | `{_md(r.budget.key)}` | "
                       f"{_md(_fmt(r.value, r.budget))} | {_md(_limit_display(r, self._applied(i)))} | {r.samples} | {_md(sentence)} |")
        return "\n".join(out) + "\n"

    def to_json(self) -> dict[str, Any]:
        """The report as a JSON-ready dict (see docs/gate.md)."""
        return {
            "name": self.name,
            "results_dir": self.results_dir,
            "source": self.source,
            "passed": self.passed,
            "exit_code": self.exit_code,
            "measured_s": self.measured_s,
            "measured_source": self.measured_source,
            "verdict": None if self.verdicts is None else self.verdicts.verdict,
            "reason": self.headline(),
            "warnings": list(self.warnings),
            "checks": [{"name": c.name, "passed": c.passed, "detail": c.detail, "verdict": v}
                       for c, v in zip(self.checks, self._check_verdicts())],
            "budgets": [dict(_budget_json(r), **self._budget_verdict_json(i)) for i, r in enumerate(self.results)],
            "noise": None if self.verdicts is None else {"runner": self.verdicts.runner, "alpha": self.verdicts.alpha,
                                                         "notes": list(self.verdicts.notes)},
        }

    def _applied(self, i: int) -> float | None:
        """Budget ``i``'s limit as judged (None without verdicts)."""
        return None if self.verdicts is None else self.verdicts.budgets[i][1].limit

    def _budget_verdict_json(self, i: int) -> dict[str, Any]:
        """A budget's verdict fields in the JSON (docs/gate.md, "Output")."""
        if self.verdicts is None:
            return {}
        _, j, _ = self.verdicts.budgets[i]
        return {"verdict": j.verdict, "verdict_reason": j.reason, "p_value": j.p_value, "p_adjusted": j.p_adjusted,
                "effective_n": j.n_base, "noise_floor": _clean(j.floor), "limit_applied": _clean(j.limit)}

    def _junit(self) -> str:
        cases = len(self.checks) + len(self.results)
        checks = self._check_verdicts()
        budgets = [self._verdict_of(i)[0] for i in range(len(self.results))]
        passes = [True] * len(budgets) if self.verdicts is None else [ok for _, _, ok in self.verdicts.budgets]
        failures = sum(v in ("fail", "inconclusive") for v in checks) + sum(
            v == "fail" or (v == "inconclusive" and not ok) for v, ok in zip(budgets, passes))
        skipped = sum(v == "inconclusive" and ok for v, ok in zip(budgets, passes)) + sum(
            v == "not judged" for v in checks + budgets)
        suites = ET.Element("testsuites", name="hopbench gate", tests=str(cases), failures=str(failures))
        suite = ET.SubElement(suites, "testsuite", name=f"hopbench gate{f' {self.name}' if self.name else ''}",
                              tests=str(cases), failures=str(failures), errors="0", skipped=str(skipped))
        for c, v in zip(self.checks, checks):
            case = ET.SubElement(suite, "testcase", classname="hopbench.gate.run", name=c.name)
            if v in ("fail", "inconclusive"):
                ET.SubElement(case, "failure", message=c.detail,
                              type="run_check" if v == "fail" else "inconclusive").text = c.detail
            elif v == "not judged":
                ET.SubElement(case, "skipped", message=c.detail)
        for i, r in enumerate(self.results):
            v, sentence = self._verdict_of(i)
            _junit_case(suite, r, v, sentence, passes[i], self._applied(i))
        if self.warnings:
            ET.SubElement(suite, "system-err").text = "\n".join(f"warning: {w}" for w in self.warnings)
        ET.indent(suites)
        return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"


def _clean(v: float | None) -> float | None:
    """A figure for JSON: None for NaN and infinities (``allow_nan=False``)."""
    return v if v is None or math.isfinite(v) else None


def _budget_json(r: BudgetResult) -> dict[str, Any]:
    """One budget's verdict as the report's JSON ``budgets`` entry (docs/gate.md)."""
    return {
        "key": r.budget.key, "scope": r.budget.scope, "where": r.budget.where,
        "limit_text": r.budget.limit_text, "op": r.budget.op,
        "value": _clean(r.value), "limit": _clean(r.limit), "baseline": _clean(r.baseline),
        "unit": r.budget.unit, "samples": r.samples, "min_count": r.budget.min_count,
        "status": r.status, "passed": r.passed, "reason": r.reason,
    }


def _junit_case(suite: ET.Element, r: BudgetResult, verdict: str, sentence: str, passes: bool,
                applied: float | None = None) -> None:
    """One budget's JUnit test case in ``suite``: a failure when it fails or is
    inconclusive and may not pass, skipped when an inconclusive passes or it is not judged."""
    b = r.budget
    case = ET.SubElement(suite, "testcase", classname=f"hopbench.gate.{b.scope}",
                         name=f"{b.key} {b.limit_text}")
    text = f"{b.scope} {b.key} = {_fmt(r.value, b)}; limit {_limit_display(r, applied)}; samples {r.samples}; {sentence}"
    if verdict == "fail":
        ET.SubElement(case, "failure", message=sentence, type="breached").text = text
    elif verdict == "inconclusive":
        if passes:
            ET.SubElement(case, "skipped", message=sentence)
        else:
            ET.SubElement(case, "failure", message=sentence, type="inconclusive").text = text
    elif verdict == "not judged":
        ET.SubElement(case, "skipped", message=sentence)
    ET.SubElement(case, "system-out").text = text


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
                           source=(f"{results_dir} [gate]" if results_dir.name == "summary.json"
                                   else f"{results_dir}/summary.json [gate]"),
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
