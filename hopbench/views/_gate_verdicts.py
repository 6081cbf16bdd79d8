"""A gate's budgets judged against the run's measured noise: pass, fail, inconclusive, not judged.

Role: take a :class:`hopbench.views._gate.GateReport` (each budget's value and
limit) and the results folder (the run's noise: :mod:`hopbench.views._noise_record`)
and give every budget and run check one of the verdicts of
:mod:`hopbench.views._noise`, with one sentence each, and the gate its exit
code. User documentation: docs/gate.md, "Noise: pass, fail, inconclusive".

* A budget whose measured value holds passes. A breach fails only beyond the
  run's noise (the client's allowance, then a one-sided t-test against the
  figure's standard error from its spread over time), the gate's breach tests
  adjusted together by Holm; a breach within it is ``inconclusive``. A limit
  relative to a baseline adds the baseline's spread (:func:`relative_noise`).
* Counts and capacities are exact: a breach fails. Proportions carry their
  binomial standard error; ``output_tokens_per_s`` (the run's) the spread of its
  per-interval rates (timeline.jsonl); ``completed_per_s`` its Poisson error.
* A run check that could not run (``load not judged``) is ``not judged``, never
  a pass. A saturated load generator or a load not held is ``inconclusive``
  (the run could not measure; retry on a quieter runner), never a regression.
* Exit code: 1 when a budget fails or a run check fails (interrupted, nothing
  completed, ...); else 5 (:data:`hopbench._exit.EXIT_INCONCLUSIVE`) when a
  budget or a run check is inconclusive and not allowed to pass; else 0.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from .._exit import EXIT_BREACH, EXIT_INCONCLUSIVE, EXIT_OK
from ..measure._outcomes import RATES
from ._noise import (FAIL, INCONCLUSIVE, NOT_JUDGED, PASS, Judged, Limit, Noise, effective_n, judge_limits,
                     relative_noise, spread_se)
from ._noise_record import RunNoise, read_run_noise, runner_line

__all__ = ["ALPHA", "CheckVerdict", "GateVerdicts", "judge_gate"]

ALPHA: Final = 0.01
"""The gate's family-wise false-alarm rate: at most 1 run in 100 of an unchanged target fails."""
_CANNOT_MEASURE: Final = frozenset({"run.not_saturated", "run.load_held"})
"""Run checks whose failure says the run could not measure (inconclusive), not that the target regressed."""
_EXACT: Final = Noise(0.0, 1_000_000)


@dataclass(frozen=True, slots=True)
class CheckVerdict:
    """A run check's verdict.

    Attributes:
        name: ``run.<check>``.
        verdict: ``pass``, ``fail``, ``inconclusive`` or ``not judged``.
        detail: the check's own sentence (docs/gate.md, "Run checks").
        allowed: an ``allow_*`` option let a failure pass.
    """

    name: str
    verdict: str
    detail: str


@dataclass(frozen=True, slots=True)
class GateVerdicts:
    """Every budget and run check of a gate, judged.

    Attributes:
        budgets: one (key as shown, :class:`Judged`, inconclusive passes) per budget, in order.
        checks: one per run check.
        runner: the run's runner line (loop lag, neighbours, steal).
        alpha: the family-wise level.
    """

    budgets: tuple[tuple[str, Judged, bool], ...]
    checks: tuple[CheckVerdict, ...]
    runner: str = ""
    alpha: float = ALPHA

    @property
    def verdict(self) -> str:
        """``fail`` when anything fails, else ``inconclusive`` when anything is and may not pass, else ``pass``."""
        if any(c.verdict == FAIL for c in self.checks) or any(j.verdict == FAIL for _, j, _ in self.budgets):
            return FAIL
        if any(c.verdict == INCONCLUSIVE for c in self.checks) or any(
                j.verdict == INCONCLUSIVE and not ok for _, j, ok in self.budgets):
            return INCONCLUSIVE
        return PASS

    @property
    def exit_code(self) -> int:
        """0 pass, 1 fail, 5 inconclusive (:mod:`hopbench._exit`)."""
        return {FAIL: EXIT_BREACH, INCONCLUSIVE: EXIT_INCONCLUSIVE}.get(self.verdict, EXIT_OK)

    def reason(self) -> str:
        """One sentence: the gate's verdict and the first reason for it (what ``-q`` prints)."""
        v = self.verdict
        if v == FAIL:
            first = next((f"{c.name}: {c.detail}" for c in self.checks if c.verdict == FAIL), None) or next(
                f"{k}: {j.reason}" for k, j, _ in self.budgets if j.verdict == FAIL)
            return f"gate FAILED: {first}"
        if v == INCONCLUSIVE:
            first = next((f"{c.name}: {c.detail}" for c in self.checks if c.verdict == INCONCLUSIVE), None) or next(
                f"{k}: {j.reason}" for k, j, ok in self.budgets if j.verdict == INCONCLUSIVE and not ok)
            return f"gate INCONCLUSIVE (exit 5: retry on a quieter runner): {first}"
        held = sum(j.verdict == PASS for _, j, _ in self.budgets)
        return f"gate passed: {held} of {len(self.budgets)} budgets held"

    def lines(self) -> list[str]:
        """One line per check and budget: verdict, name, sentence with its n and p."""
        out = [f"runner: {self.runner}"] if self.runner else []
        width = max([len(c.name) for c in self.checks] + [len(k) for k, _, _ in self.budgets] + [4])
        for c in self.checks:
            out.append(f"{_MARK[c.verdict]:<12}  {c.name:<{width}}  {c.detail}")
        for k, j, ok in self.budgets:
            p = "" if j.p_adjusted is None else f"; p = {j.p_adjusted:.2g} after Holm"
            extra = " (passes: inconclusive = \"pass\")" if j.verdict == INCONCLUSIVE and ok else ""
            out.append(f"{_MARK[j.verdict]:<12}  {k:<{width}}  {j.reason}{extra} [n = {j.n_base}{p}]")
        out.append(self.reason())
        return out

    def to_json(self) -> dict[str, Any]:
        """JSON-ready dict: ``verdict``, ``exit_code``, ``reason``, ``checks``, ``budgets``."""
        return {"verdict": self.verdict, "exit_code": self.exit_code, "reason": self.reason(),
                "alpha": self.alpha, "runner": self.runner,
                "checks": [{"name": c.name, "verdict": c.verdict, "detail": c.detail} for c in self.checks],
                "budgets": [{"key": k, "verdict": j.verdict, "reason": j.reason, "p_value": j.p_value,
                             "p_adjusted": j.p_adjusted, "n": j.n_base,
                             "noise_floor": j.floor if j.floor is None or math.isfinite(j.floor) else None,
                             "inconclusive_passes": ok}
                            for k, j, ok in self.budgets]}


_MARK: Final = {PASS: "PASS", FAIL: "FAIL", INCONCLUSIVE: "INCONCLUSIVE", NOT_JUDGED: "NOT JUDGED"}


def _check_verdict(name: str, passed: bool, detail: str) -> str:
    if "not judged" in detail and passed:
        return NOT_JUDGED
    if passed:
        return PASS
    return INCONCLUSIVE if name in _CANNOT_MEASURE else FAIL


def _rate_noise(rate: str, value: float | None, samples: int, folder: Path | None,
                summary: Mapping[str, Any]) -> Noise:
    spec = RATES[rate]
    if spec.fraction:
        if value is None or samples <= 0:
            return Noise(None)
        # binomial standard error; df large (a proportion of many streams)
        return Noise(math.sqrt(max(value * (1 - value), 1.0 / samples) / samples), 1_000_000)
    if rate == "output_tokens_per_s":
        from ._compare import _interval_rates

        per = _interval_rates(folder, summary)
        if not per:
            return Noise(None)
        values = [v / 1000.0 for v, c in per for _ in range(c)]  # milli-tokens/s -> tokens/s
        return Noise(spread_se(values), len(values))
    if value is not None and samples > 0:  # completed_per_s: Poisson counts over the measured duration
        return Noise(value / math.sqrt(samples), 1_000_000)
    return Noise(None)


def judge_gate(report: Any, summary: Mapping[str, Any], *, results_dir: Path | None = None,
               baseline: Mapping[str, Any] | None = None, baseline_dir: Path | None = None,
               alpha: float = ALPHA, run_noise: RunNoise | None = None,
               baseline_noise: RunNoise | None = None) -> GateVerdicts:
    """Judge a gate's budgets and run checks against the run's measured noise.

    Args:
        report: the :class:`hopbench.views._gate.GateReport` of ``summary``.
        summary: the gated run's summary.json dict.
        results_dir: its folder (intervals.hlog, timeline.jsonl); None: spreads unknown.
        baseline / baseline_dir: the ``--baseline`` run, for relative limits.
        alpha: family-wise level across the gate's breach tests.
        run_noise / baseline_noise: noise records already read, else read here.

    Returns:
        GateVerdicts.

    Raises:
        ResultsError: a malformed intervals.hlog (file:line).
    """
    results = list(report.results)
    tags = sorted({f"{r.budget.scope}.{r.budget.metric}" for r in results if r.budget.metric})
    rn = run_noise or read_run_noise(results_dir, summary, tags)
    bn = baseline_noise or (read_run_noise(baseline_dir, baseline, tags) if baseline is not None else None)
    saturated = str(results_dir or "the run") if summary.get("saturated") is True else None
    from ._compare import PER_EVENT, _streams

    limits: list[Limit] = []
    for r in results:
        b = r.budget
        n = r.samples
        if b.metric in PER_EVENT and b.stat != "count":  # gaps: the effective n is the streams
            scopes = summary.get("scopes")
            scope = scopes.get(b.scope) if isinstance(scopes, Mapping) else None
            n = effective_n(r.samples, _streams(scope) if isinstance(scope, Mapping) else None, True)
        hib = not (b.metric == "output_tokens_per_s" or b.rate in ("output_tokens_per_s", "completed_per_s",
                                                                    "completion_rate")
                   or b.capacity is not None)
        if b.metric is not None and b.stat not in (None, "count"):
            stat = b.stat or "p50"
            noise = rn.noise(b.scope, b.metric, stat)
            if b.baseline_op is not None and bn is not None:
                factor = b.baseline_operand if b.baseline_op == "*" else 1.0
                noise = relative_noise(noise, bn.noise(b.scope, b.metric, stat), factor)
        elif b.rate is not None:
            noise = _rate_noise(b.rate, r.value, r.samples, results_dir, summary)
        else:  # counts, capacities: exact
            noise = _EXACT
        if r.status == "inconclusive":  # the gate's own: no data, too few samples, no baseline
            limits.append(Limit(None, None, b.op, b.unit, noise, n, b.min_count, hib))
            continue
        limits.append(Limit(r.value, r.limit, b.op, b.unit, noise, n, b.min_count, hib,
                            saturated if b.metric is not None else None))
    judged = judge_limits(limits, alpha)
    budgets = []
    for r, j in zip(results, judged):
        b = r.budget
        key = b.key if b.scope == "all" else f"{b.scope} {b.key}"
        if r.status == "inconclusive":
            j = Judged(INCONCLUSIVE, f"inconclusive: {r.reason.split(' (passes:')[0].split(' (fails:')[0]}",
                       n_base=r.samples, n_cand=r.samples)
        budgets.append((key, j, b.inconclusive_passes))
    checks = tuple(CheckVerdict(c.name, _check_verdict(c.name, c.passed, c.detail), c.detail) for c in report.checks)
    return GateVerdicts(tuple(budgets), checks, runner_line(summary), alpha)
