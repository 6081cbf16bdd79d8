"""Compare's figures and the gate's budgets judged against the runs' measured noise.

Role: take a :class:`hopbench.views._compare.Comparison` (its samples' tests) and
the two results folders (their noise: :mod:`hopbench.views._noise_record`) and
give every figure one of the three verdicts of :mod:`hopbench.views._noise`,
the family's false alarms bounded at alpha (Holm), with the effective n and
p-value of each. User documentation: docs/compare.md, "Verdicts beyond noise".

The figures: for every compared metric and scope its ``p50``, ``p90`` and
``p99`` (the samples' test: Mann-Whitney U for the median, the difference of the
two percentiles' order-statistic intervals for a tail), every outcome rate and the
throughput (their proportion and interval tests: counts carry their own noise,
so no allowance). Per-event metrics count streams (the effective n).

The gate (:func:`judge_gate`; docs/gate.md, "Noise: pass, fail, inconclusive"):

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
  (the run could not measure; retry on a quieter runner), never a regression,
  except arrivals dropped at ``max_in_flight`` (the target held them too long:
  a failure).
* Exit code: 1 when a budget fails or a run check fails (interrupted, nothing
  completed, ...); else 5 (:data:`hopbench._exit.EXIT_INCONCLUSIVE`) when a
  budget or a run check is inconclusive and not allowed to pass; else 0.

Invariants: pure apart from reading intervals.hlog and timeline.jsonl; O(buckets
+ log lines); a figure without data is ``not judged``, never ``same`` nor ``pass``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from statistics import NormalDist
from typing import Any, Final

from .._exit import EXIT_BREACH, EXIT_INCONCLUSIVE, EXIT_OK
from .._units import NS_PER_MS
from ..config._gate_spec import ARMS_DIGEST_FIGURES, default_min_count
from ..measure._digest import bucket_width
from ..measure._hdr import Histogram
from ..measure._metrics import METRICS
from ..measure._outcomes import RATES
from ._noise import (BETTER, FAIL, INCONCLUSIVE, NOT_JUDGED, PASS, SAME, WORSE, Figure, Judged, Limit, Noise,
                     effective_n, judge_family, judge_limits, relative_noise, spread_se)
from ._noise_record import (HIGHER_IS_BETTER, PER_EVENT, RunNoise, arms_paired, busier, interval_rates, metric_hist,
                            read_run_noise, runner_line, streams_of)
from ._stats import buckets, quantile_ci, quantile_ci_min_count

__all__ = ["GATE_ALPHA", "JUDGED_STATS", "CheckVerdict", "FigureVerdict", "GateVerdicts", "Verdicts",
           "judge_comparison", "judge_gate"]

JUDGED_STATS: Final = ("p50", "p90", "p99")
"""The statistics of each metric a compare judges (p99.9 and max are shown, not judged: a
short run has too few samples beyond them to tell anything)."""
_Q: Final = {"p50": 0.5, "p90": 0.9, "p99": 0.99}
_NORMAL = NormalDist()
_ONE_SE: Final = _NORMAL.cdf(1.0) - _NORMAL.cdf(-1.0)  # a quantile's interval of one standard error each side
_NO_NOISE = Noise(0.0, 0)  # counts and interval rates: their test carries their own noise


@dataclass(frozen=True, slots=True)
class FigureVerdict:
    """One judged figure.

    Attributes:
        scope: the scope (scenario, arm or ``all``).
        name: ``<metric>.<stat>`` (``ttft.p50``), a rate (``error_rate``) or
            ``throughput.<name>``.
        unit: reporting unit (``ms``, ``tokens/s``, ``""`` for proportions).
        base / candidate: the two runs' values (None when absent).
        judged: the verdict, its sentence, its p-values and effective n.
        one_per_run: a throughput (``throughput.*``: one figure per run, its own test carries
            its noise): no effective n (JSON null).
    """

    scope: str
    name: str
    unit: str
    base: float | None
    candidate: float | None
    judged: Judged
    one_per_run: bool = False

    @property
    def verdict(self) -> str:
        """One of :data:`hopbench.views._noise.VERDICTS`."""
        return self.judged.verdict

    def line(self) -> str:
        """``<scope> <name>: <sentence> [n = .., p = ..]``: one sentence per verdict."""
        j = self.judged
        n = ("one per run" if self.one_per_run else f"n = {j.n_base}" if j.n_base == j.n_cand
             else f"n = {j.n_base} vs {j.n_cand}")
        p = "" if j.p_samples is None else f", p(samples) = {j.p_samples:.2g}"
        pn = "" if j.p_noise is None else f", p(noise) = {j.p_noise:.2g}"
        return f"{self.scope} {self.name}: {j.reason} [{n}{p}{pn}]"

    def to_json(self) -> dict[str, Any]:
        """JSON-ready dict (docs/compare.md, "Verdicts beyond noise")."""
        j = self.judged
        return {"scope": self.scope, "figure": self.name, "unit": self.unit, "base": _finite(self.base),
                "candidate": _finite(self.candidate), "verdict": j.verdict, "reason": j.reason,
                "p_samples": j.p_samples, "p_noise": j.p_noise, "p_value": j.p_value,
                "p_adjusted": j.p_adjusted, "p_samples_adjusted": j.p_samples_adjusted,
                "n_base": None if self.one_per_run else j.n_base,
                "n_candidate": None if self.one_per_run else j.n_cand,
                "noise_floor": _finite(j.floor)}


def _finite(v: float | None) -> float | None:
    return v if v is None or math.isfinite(v) else None


@dataclass(frozen=True, slots=True)
class Verdicts:
    """Every figure of a compare, judged; ordered changed, inconclusive, the rest.

    Attributes:
        figures: in report order (scopes, then metrics, stats, rates).
        alpha: the family-wise level.
        runners: (base, candidate) runner lines (loop lag, neighbours, steal).
        notes: what the verdicts should be read with (a busier runner, a missing log).
    """

    figures: tuple[FigureVerdict, ...]
    alpha: float
    runners: tuple[str, str] = ("", "")
    notes: tuple[str, ...] = ()

    def of(self, *verdicts: str) -> list[FigureVerdict]:
        """The figures with one of ``verdicts``, in report order."""
        return [f for f in self.figures if f.verdict in verdicts]

    @property
    def verdict(self) -> str:
        """The pair's verdict: ``worse`` when any figure is, else ``inconclusive`` when any that
        points the worse way is, else ``better`` when any is, else ``same``; ``not judged``
        when no figure was (nothing in both runs: never ``same``)."""
        if len(self.of(NOT_JUDGED)) == len(self.figures):
            return NOT_JUDGED
        if self.of(WORSE):
            return WORSE
        if self.doubtful():
            return INCONCLUSIVE
        return BETTER if self.of(BETTER) else SAME

    def doubtful(self) -> list[FigureVerdict]:
        """The inconclusive figures that could be a regression (a change that points the better
        way cannot fail a release, so it does not make the pair inconclusive)."""
        return [f for f in self.of(INCONCLUSIVE) if f.judged.direction != BETTER]

    def exit_code(self, fail_on_worse: bool) -> int:
        """With ``--fail-on-worse``: 1 worse, 5 inconclusive (retry on a quieter runner) or nothing
        judged (a gate that checked nothing must not pass), 0 otherwise."""
        if not fail_on_worse:
            return EXIT_OK
        return {WORSE: EXIT_BREACH, INCONCLUSIVE: EXIT_INCONCLUSIVE, NOT_JUDGED: EXIT_INCONCLUSIVE}.get(
            self.verdict, EXIT_OK)

    def headline(self) -> str:
        """One sentence: the verdict and why (what ``-q`` prints)."""
        worse, inc, better = self.of(WORSE), self.doubtful(), self.of(BETTER)
        judged = len(self.figures) - len(self.of(NOT_JUDGED))
        if worse:
            return (f"compare: WORSE beyond noise: {_names(worse)} (of {judged} figures, family-wise alpha "
                    f"{self.alpha:g})")
        if inc:
            return (f"compare: INCONCLUSIVE: {_names(inc)} moved within what the runs' noise could explain; "
                    "retry on a quieter runner")
        if better:
            return f"compare: better beyond noise: {_names(better)}; nothing worse"
        if not judged:
            return "compare: nothing to judge: no figure has a value in both runs"
        return f"compare: same: no figure changed beyond noise ({judged} figures, family-wise alpha {self.alpha:g})"

    def lines(self) -> list[str]:
        """The report: runners, what changed beyond noise, then the inconclusive ones, then the rest."""
        out = [f"runner: base {self.runners[0] or 'unknown'}; candidate {self.runners[1] or 'unknown'}"]
        out += [f"note: {n}" for n in self.notes]
        judged = len(self.figures) - len(self.of(NOT_JUDGED))
        out.append(f"p: each figure's p-value adjusted by Holm across the {judged} figures judged (family-wise "
                   f"alpha {self.alpha:g}); n: streams (effective samples), not events")
        changed = self.of(WORSE, BETTER)
        inc = self.of(INCONCLUSIVE)
        rest = self.of(SAME, NOT_JUDGED)
        n_same = len(self.of(SAME))
        out.append(f"changed beyond noise ({len(changed)}):")
        out += [f"  {f.line()}" for f in changed] or ["  none"]
        out.append(f"inconclusive ({len(inc)}):")
        out += [f"  {f.line()}" for f in inc] or ["  none"]
        # judged = changed + inconclusive + same: the counts add up to the Holm line's
        out.append(f"same ({n_same}), not judged ({len(rest) - n_same}):")
        out += [f"  {f.line()}" for f in rest]
        out.append(self.headline())
        return out

    def to_json(self) -> dict[str, Any]:
        """JSON-ready dict: ``verdict``, ``alpha``, ``runners``, ``notes``, ``figures``."""
        return {"verdict": self.verdict, "headline": self.headline(), "alpha": self.alpha,
                "method": "holm", "runners": {"base": self.runners[0], "candidate": self.runners[1]},
                "notes": list(self.notes), "figures": [f.to_json() for f in self.figures]}


def _names(figs: Sequence[FigureVerdict]) -> str:
    shown = [f"{f.scope} {f.name}" for f in figs[:6]]
    return ", ".join(shown) + (f" and {len(figs) - 6} more" if len(figs) > 6 else "")


def quantile_p(ba: Sequence[tuple[int, int]], bb: Sequence[tuple[int, int]], q: float,
               deff_a: float, deff_b: float) -> float | None:
    """Two-sided p-value that two samples' ``q`` quantiles differ.

    Each quantile's standard error is read from its order-statistic interval
    (:func:`hopbench.views._stats.quantile_ci` at 68.27 %: one standard error each
    side, Conover §3.2), the difference tested by the normal approximation. The
    design effects widen the intervals as they widen compare's (streams, not events).

    Returns:
        the p-value, or None when a sample is too small for the interval.
    """
    ca, cb = quantile_ci(ba, q, _ONE_SE, deff_a), quantile_ci(bb, q, _ONE_SE, deff_b)
    if ca is None or cb is None:
        return None
    from ..measure._digest import value_at_rank

    na, nb = sum(c for _, c in ba), sum(c for _, c in bb)
    va = value_at_rank(ba, max(1, math.ceil(q * na)))
    vb = value_at_rank(bb, max(1, math.ceil(q * nb)))
    se = math.hypot((ca[1] - ca[0]) / 2, (cb[1] - cb[0]) / 2)
    if se <= 0:
        return 1.0 if va == vb else 0.0
    return math.erfc(abs(vb - va) / se / math.sqrt(2.0))


def _hist(summary: Mapping[str, Any], scope: str, metric: str) -> Histogram:
    scopes = summary.get("scopes")
    s = scopes.get(scope) if isinstance(scopes, Mapping) else None
    return metric_hist(s if isinstance(s, Mapping) else {}, metric, f"scopes.{scope}")


def judge_comparison(comparison: Any, base: Mapping[str, Any], cand: Mapping[str, Any], *,
                     base_dir: Path | None = None, cand_dir: Path | None = None,
                     base_noise: RunNoise | None = None, cand_noise: RunNoise | None = None,
                     min_effect: float | None = None, min_abs_ms: float | None = None) -> Verdicts:
    """Judge a compare's every figure against the two runs' measured noise.

    Args:
        comparison: the :class:`hopbench.views._compare.Comparison` of ``base`` and ``cand``.
        base / cand: the two summary.json dicts.
        base_dir / cand_dir: their folders (intervals.hlog); None: the spread is unknown.
        base_noise / cand_noise: noise records already read (tests, calibration), else read here.
        min_effect / min_abs_ms: the smallest change the user asked to hear of (``--min-effect``
            relative to the base, ``--min-abs-ms`` for times), None: none; a change under it is
            ``same`` whatever its p (docs/compare.md, "Why an effect floor").

    Returns:
        Verdicts.

    Raises:
        ResultsError: a malformed histogram or intervals.hlog (file:line).
    """
    scopes = sorted({m.scope for m in comparison.metrics})
    metrics = sorted({m.metric for m in comparison.metrics})
    tags = [f"{s}.{m}" for s in scopes for m in metrics]
    rn_a = base_noise or read_run_noise(base_dir, base, tags, comparison.base_dir)
    rn_b = cand_noise or read_run_noise(cand_dir, cand, tags, comparison.candidate_dir)
    saturated = " and ".join(label for label, s in ((comparison.base_dir, base), (comparison.candidate_dir, cand))
                             if s.get("saturated") is True) or None
    names: list[tuple[str, str, str, float | None, float | None]] = []
    figures: list[Figure] = []
    # a latency without a noise floor was taken as measured: its sentence says why (no intervals.hlog;
    # the A/B arms' one run)
    unfloored = "; ".join(dict.fromkeys(n for n in (rn_a.hlog_note, rn_b.hlog_note) if n)) or "no noise floor"
    vanished: dict[int, str] = {}  # figure index -> why: the base measured it, the candidate's streams carried none
    for m in comparison.metrics:
        if m.verdict == WORSE and m.base.get("count") and not m.candidate.get("count"):
            # e.g. ttft: every candidate stream completed without a content event (compare_metric's
            # rule, docs/compare.md): worse, never "not judged" (a release of empty answers would pass)
            vanished[len(figures)] = "; ".join(m.reasons) or "no samples in candidate"
        if m.verdict == "not_comparable" or len(figures) in vanished:  # a side without samples, or tokens of different kinds
            why = "" if not m.base.get("count") or not m.candidate.get("count") else "; ".join(m.reasons)
            for stat in JUDGED_STATS:
                names.append((m.scope, f"{m.metric}.{stat}", m.unit, m.base.get(stat), m.candidate.get(stat)))
                figures.append(Figure(None, None, m.unit, None, _NO_NOISE, _NO_NOISE, 0, 0, why=why))
            continue
        sa, sb = _scope(base, m.scope), _scope(cand, m.scope)
        ha, hb = _hist(base, m.scope, m.metric), _hist(cand, m.scope, m.metric)
        per_event = m.metric in PER_EVENT
        st_a, st_b = streams_of(sa), streams_of(sb)
        n_a = effective_n(ha.count, st_a, per_event)
        n_b = effective_n(hb.count, st_b, per_event)
        deff_a = ha.count / n_a if n_a else 1.0
        deff_b = hb.count / n_b if n_b else 1.0
        ba, bb = buckets(ha), buckets(hb)
        hib = m.metric not in HIGHER_IS_BETTER
        for stat in JUDGED_STATS:
            va, vb = m.base.get(stat), m.candidate.get(stat)
            change = None if va is None or vb is None else float(vb) - float(va)
            rel = None if change is None or not va else change / abs(float(va))
            p = m.test.p_value if stat == "p50" else quantile_p(ba, bb, _Q[stat], deff_a, deff_b)
            min_n = default_min_count(stat)
            if p is None:  # too few samples for the tail's interval: not judged (docs/compare.md)
                # the effective n each side's quantile interval needs (its events per stream
                # kept); never one a side already has (the interval then failed on its ties)
                need = max(math.ceil(quantile_ci_min_count(_Q[stat], _ONE_SE, d) / d)
                           for d in (max(deff_a, 1.0), max(deff_b, 1.0)))
                min_n = max(min_n, need, min(n_a, n_b) + 1)
                p = 1.0  # (not a test: a figure under min_n reports no p-value)
            names.append((m.scope, f"{m.metric}.{stat}", m.unit, _f(va), _f(vb)))
            floor_, why_ = _asked_floor(va, m.unit, min_effect, min_abs_ms)
            # a percentile is its bucket's top: the same figure can read one bucket apart in two
            # runs, so a change up to the histograms' resolution there is none (e2e p50 near 1.46 s:
            # buckets 1.05 ms wide, read "worse +1.05 ms" between two quiet A/A runs)
            res, res_why = _resolution(ha, hb, va, vb, m.unit)
            asked = floor_ >= res
            figures.append(Figure(change, rel, m.unit, p, rn_a.noise(m.scope, m.metric, stat),
                                  rn_b.noise(m.scope, m.metric, stat), n_a, n_b, min_n, hib, saturated,
                                  few_is_inconclusive=False, min_change=floor_ if asked else res,
                                  min_change_why=why_ if asked else res_why, min_change_asked=asked,
                                  unfloored=unfloored))
    for r in comparison.rates:
        va, vb = r.base[2], r.candidate[2]
        change = None if va is None or vb is None or r.verdict == "not_comparable" else vb - va
        rel = None if change is None or not va else change / abs(va)
        hib = r.name not in HIGHER_IS_BETTER
        n_a, n_b = int(r.base[1]) if not r.unit else 1, int(r.candidate[1]) if not r.unit else 1
        untested = r.method == "none"
        names.append((r.scope, r.name, r.unit, va, vb))
        floor_, why_ = _asked_floor(va, r.unit, min_effect, None)
        figures.append(Figure(None if untested else change, rel, r.unit, None if untested else r.p_value,
                              _NO_NOISE, _NO_NOISE, n_a, n_b, 1, hib,
                              saturated if r.name.startswith("throughput.") else None, why=r.reason,
                              min_change=floor_, min_change_why=why_))
    judged = judge_family(figures, comparison.alpha)
    # a rate's own test carries its noise: no noise record, no noise floor (null, not 0); a throughput
    # (tokens/s, requests/s) is one figure per run: no effective n either
    first_rate = len(figures) - len(comparison.rates)
    judged = [j if i < first_rate else dataclasses.replace(j, p_noise=None, floor=None) for i, j in enumerate(judged)]
    judged = _gateway_on_a_busier_runner(judged, names, base, cand)
    for i, why in vanished.items():  # the metric's first figure (p50) carries the verdict
        judged[i] = Judged(WORSE, f"worse: {why}", n_base=judged[i].n_base, n_cand=judged[i].n_cand)
    out = tuple(FigureVerdict(s, n, u, a, b, j, one_per_run=i >= first_rate and bool(u))
                for i, ((s, n, u, a, b), j) in enumerate(zip(names, judged)))
    notes = [x for x in (rn_a.hlog_note and f"{rn_a.label}: {rn_a.hlog_note}",
                         rn_b.hlog_note and f"{rn_b.label}: {rn_b.hlog_note}") if x]
    if busier(base, cand):
        notes.append(f"the candidate's runner was busier than the base's ({runner_line(cand)} against "
                     f"{runner_line(base)}): a change within its loop lag is the runner's")
    return Verdicts(out, comparison.alpha, (runner_line(base), runner_line(cand)), tuple(notes))


GATEWAY_FIGURES: Final = frozenset({"request_delay", "first_event_delay", "added_ttft", "event_delay", "added_e2e"})
"""The gateway-overhead metrics (``hopbench.driver._overhead.OVERHEAD_METRICS``' times): what a process
beside hopbench adds, timed on both legs, so no client allowance covers its own waits for a core."""


def _gateway_on_a_busier_runner(judged: list[Judged], names: Sequence[tuple[str, str, str, Any, Any]],
                                base: Mapping[str, Any], cand: Mapping[str, Any]) -> list[Judged]:
    """A gateway-overhead figure's ``worse`` when the candidate's runner was clearly busier (or its
    ``better`` when the base's was) is ``inconclusive``: the gateway shares that runner's cores and
    waits for one there, which no client allowance covers (issue 37's study through nginx: 20 of 60
    unpaired pairs of an unchanged gateway, idle base against a candidate beside one CPU-bound
    neighbour, read ``added_e2e.p50`` worse). :func:`hopbench.views._noise_record.busier` decides."""
    up, down = busier(base, cand), busier(cand, base)
    if not (up or down):
        return judged
    out = []
    for j, (_, name, _, _, _) in zip(judged, names):
        if name.split(".", 1)[0] in GATEWAY_FIGURES and ((up and j.verdict == WORSE) or (down and j.verdict == BETTER)):
            which = "candidate's" if up else "base's"
            j = dataclasses.replace(j, verdict=INCONCLUSIVE, reason=(
                f"inconclusive: {j.reason.removeprefix(j.verdict + ': ')}, but the {which} runner was busier "
                f"({runner_line(cand if up else base)} against {runner_line(base if up else cand)}): the gateway "
                "waits for a core there too, which no client allowance covers; compare runs from like "
                "runners, or both releases as A/B arms in one run (docs/ab-arms.md)"))
        out.append(j)
    return out


def _asked_floor(base: float | int | None, unit: str, min_effect: float | None,
                 min_abs_ms: float | None) -> tuple[float, str]:
    """The smallest change the user asked to hear of for a figure whose base is ``base``
    (reporting unit), and its words; (0, "") when none was asked."""
    floors = []
    if min_effect and base is not None:
        floors.append((min_effect * abs(float(base)), f"--min-effect {min_effect:g}"))
    if min_abs_ms and unit == "ms":
        floors.append((min_abs_ms, f"--min-abs-ms {min_abs_ms:g}"))
    if not floors:
        return 0.0, ""
    v, why = max(floors)
    return v, f"{why}: {v:.3g} {unit}".rstrip()


def _resolution(ha: Histogram, hb: Histogram, va: Any, vb: Any, unit: str) -> tuple[float, str]:
    """The histograms' resolution at a figure's two values (the wider bucket, reporting unit) and
    its words; (0, "") without both values."""
    if not isinstance(va, (int, float)) or not isinstance(vb, (int, float)):
        return 0.0, ""
    d = ha.spec.divisor
    at = max(abs(float(va)), abs(float(vb)))
    width = max(ha.resolution(round(at * d)), hb.resolution(round(at * d))) / d
    if width <= 0:
        return 0.0, ""
    return width, (f"one bucket, the resolution of the runs' histograms (a bucket is {width:.3g} {unit} wide "
                   f"near {at:.4g} {unit})").replace("  ", " ")


def _f(v: float | int | None) -> float | None:
    return None if v is None else float(v)


def _scope(summary: Mapping[str, Any], scope: str) -> Mapping[str, Any]:
    scopes = summary.get("scopes")
    s = scopes.get(scope) if isinstance(scopes, Mapping) else None
    return s if isinstance(s, Mapping) else {}


# -- the gate ----------------------------------------------------------------------

GATE_ALPHA: Final = 0.01
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
        notes: what the verdicts should be read with (no intervals.hlog).
    """

    budgets: tuple[tuple[str, Judged, bool], ...]
    checks: tuple[CheckVerdict, ...]
    runner: str = ""
    alpha: float = GATE_ALPHA
    notes: tuple[str, ...] = ()

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
            failed = [c.name for c in self.checks if c.verdict == FAIL] + [
                k for k, j, _ in self.budgets if j.verdict == FAIL]
            more = ", ".join(failed[1:4]) + (", ..." if len(failed) > 4 else "")
            return f"gate FAILED: {first}" + (f" (and {len(failed) - 1} more failed: {more})" if len(failed) > 1 else "")
        if v == INCONCLUSIVE:
            first = next((f"{c.name}: {c.detail}" for c in self.checks if c.verdict == INCONCLUSIVE), None) or next(
                f"{k}: {j.reason}" for k, j, ok in self.budgets if j.verdict == INCONCLUSIVE and not ok)
            # one cure for the cause: more samples for too few, a limit off the digest's resolution
            # (no runner can tell it), a quieter runner for noise or saturation
            cure = ("gate against a baseline with samples" if "too few samples in the baseline" in first
                    else "run longer for more samples" if "too few samples" in first
                    else "move the limit: no runner can tell it" if "no run can tell it" in first
                    else "retry on a quieter runner")
            return f"gate INCONCLUSIVE (exit 5: {cure}): {first}"
        held = sum(j.verdict == PASS for _, j, _ in self.budgets)
        rest = len(self.budgets) - held
        return f"gate passed: {held} held" + (f", {rest} inconclusive (allowed to pass)" if rest else "")

    def lines(self) -> list[str]:
        """One line per check and budget: verdict, name, sentence with its n and p."""
        out = [f"runner: {self.runner}"] if self.runner else []
        out += [f"note: {n}" for n in self.notes]
        width = max([len(c.name) for c in self.checks] + [len(k) for k, _, _ in self.budgets] + [4])
        for c in self.checks:
            out.append(f"{_MARK[c.verdict]:<12}  {c.name:<{width}}  {c.detail}")
        for k, j, ok in self.budgets:
            extra = " (passes: inconclusive = \"pass\")" if j.verdict == INCONCLUSIVE and ok else ""
            out.append(f"{_MARK[j.verdict]:<12}  {k:<{width}}  {j.reason}{extra} [n = {j.n_base}]")
        out.append(self.reason())
        return out

    def to_json(self) -> dict[str, Any]:
        """JSON-ready dict: ``verdict``, ``exit_code``, ``reason``, ``checks``, ``budgets``."""
        return {"verdict": self.verdict, "exit_code": self.exit_code, "reason": self.reason(),
                "alpha": self.alpha, "runner": self.runner, "notes": list(self.notes),
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
    if name == "run.load_held" and "dropped at max_in_flight" in detail:
        # arrivals dropped because max_in_flight streams were still open: the target was too
        # slow for the load, which is a finding about the target, not a client that could not measure
        return FAIL
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
        per = interval_rates(folder, summary)
        if not per:
            return Noise(None)
        values = [v / 1000.0 for v, c in per for _ in range(c)]  # milli-tokens/s -> tokens/s
        return Noise(spread_se(values), len(values))
    if value is not None and samples > 0:  # completed_per_s: Poisson counts over the measured duration
        return Noise(value / math.sqrt(samples), 1_000_000)
    return Noise(None)


def _digest_width(summary: Mapping[str, Any], figure: str, op: str) -> float | None:
    """One digest bucket at the held arm's baseline ``figure`` (ms), None when unknown."""
    got = arms_paired(summary, figure, op)
    base = got[1].get("base_p50") if got is not None else None
    return bucket_width(int(base * NS_PER_MS)) / NS_PER_MS if isinstance(base, (int, float)) and base > 0 else None


BURST_FIGURES: Final = frozenset({"itl", "tpot", "output_tokens_per_s"})
"""Figures made of the gaps between a stream's events: a client that reads late gets several
events in one read, their gaps 0, so a late client makes them look better (lower, or a higher
rate), never only worse."""

BURST_SHARE: Final = 0.05
"""The share of a scope's completed streams read in bursts of the client's own making
(``client_lagged``) from which a pass of a :data:`BURST_FIGURES` budget is inconclusive."""


def _client_bursts(summary: Mapping[str, Any], scope: str) -> str | None:
    """``"the client read N of M streams in bursts of its own making (client_lagged)"`` when at
    least :data:`BURST_SHARE` of ``scope``'s completed streams were, else None."""
    scopes = summary.get("scopes")
    sc = scopes.get(scope) if isinstance(scopes, Mapping) else None
    counters = sc.get("counters") if isinstance(sc, Mapping) else None
    if not isinstance(counters, Mapping):
        return None
    lagged, done = counters.get("client_lagged", 0), counters.get("completed", 0)
    if not isinstance(lagged, int) or not isinstance(done, int) or lagged <= 0 or lagged < BURST_SHARE * max(done, 1):
        return None
    return f"the client read {lagged:,} of {done:,} completed streams in bursts of its own making (client_lagged)"


def judge_gate(report: Any, summary: Mapping[str, Any], *, results_dir: Path | None = None,
               baseline: Mapping[str, Any] | None = None, baseline_dir: Path | None = None,
               alpha: float = GATE_ALPHA, run_noise: RunNoise | None = None,
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
    limits: list[Limit] = []
    for r in results:
        b = r.budget
        n = r.samples
        if b.metric in PER_EVENT and b.stat != "count":  # gaps: the effective n is the streams
            scopes = summary.get("scopes")
            scope = scopes.get(b.scope) if isinstance(scopes, Mapping) else None
            n = effective_n(r.samples, streams_of(scope) if isinstance(scope, Mapping) else None, True)
        hib = not ((b.metric is not None and METRICS[b.metric].higher_is_better)
                   or b.rate in ("output_tokens_per_s", "completed_per_s", "completion_rate")
                   or b.capacity is not None)
        limit = r.limit
        if b.metric is not None and b.stat not in (None, "count"):
            stat = b.stat or "p50"
            noise = rn.noise(b.scope, b.metric, stat)
            if b.client_included is not None and limit is not None and b.baseline_op is None:
                # a calibrated limit holds the calibration's client delay: it moves by what this run's
                # client delay exceeds it by, and nothing more is excused. Never tighter for a quieter
                # client: the loop lag does not track a figure's client delay one for one (tightening
                # false-alarmed 8 of 10 A/A runs in benchmarks/bench_gate_study.py)
                shift = max(noise.client - b.client_included, 0.0)
                limit = limit + (shift if hib else -shift)
                noise = Noise(noise.se, noise.batches, 0.0, "", noise.note)
            if b.baseline_op is not None and bn is not None:
                factor = b.baseline_operand if b.baseline_op == "*" else 1.0
                noise = relative_noise(noise, bn.noise(b.scope, b.metric, stat), factor)
        elif b.arms_figure is not None:  # the pairs' spread over time; no client allowance (both arms share it)
            got = arms_paired(summary, b.arms_figure, b.op)
            se = got[1].get("se") if got is not None else None
            batches = got[1].get("batches") if got is not None else 0
            noise = Noise(float(se) if isinstance(se, (int, float)) else None,
                          batches if isinstance(batches, int) else 0)
        elif b.rate is not None:
            noise = _rate_noise(b.rate, r.value, r.samples, results_dir, summary)
        else:  # counts, capacities: exact
            noise = _EXACT
        if r.status == "inconclusive":  # the gate's own: no data, too few samples, no baseline
            limits.append(Limit(None, None, b.op, b.unit, noise, n, b.min_count, hib))
            continue
        limits.append(Limit(r.value, limit, b.op, b.unit, noise, n, b.min_count, hib,
                            saturated if b.metric is not None else None,
                            written=r.limit if limit != r.limit else None))
    judged = judge_limits(limits, alpha)
    budgets = []
    for r, j, lim in zip(results, judged, limits):
        b = r.budget
        j = dataclasses.replace(j, limit=lim.limit)
        key = b.key if b.scope == "all" else f"{b.scope} {b.key}"
        if r.status == "inconclusive":
            j = Judged(INCONCLUSIVE, f"inconclusive: {r.reason.split(' (passes:')[0].split(' (fails:')[0]}",
                       n_base=r.samples, n_cand=r.samples)
        elif (b.arms_figure in ARMS_DIGEST_FIGURES and r.value is not None and lim.limit is not None
              and (width := _digest_width(summary, b.arms_figure, b.op)) is not None
              and abs(r.value - lim.limit) <= width):
            j = dataclasses.replace(j, verdict=INCONCLUSIVE, reason=(
                f"inconclusive: {r.value:+.3g} ms against the limit {b.op} {lim.limit:g} ms is within the resolution "
                f"of the streams' ITL digests ({width:.3g} ms): no run can tell it; set the limit at least one "
                "bucket from the difference (docs/ab-arms.md, \"Paired verdicts\")"))
        elif j.verdict == PASS and b.metric in BURST_FIGURES and b.stat != "count":
            bursts = _client_bursts(summary, b.scope)
            if bursts is not None:
                j = dataclasses.replace(j, verdict=INCONCLUSIVE, reason=f"inconclusive: {j.reason.removeprefix('pass: ')}, "
                                        f"but {bursts}: a late client reads a stream's events together, which "
                                        "shrinks its gaps and raises its token rate, so this pass may be the client's "
                                        "(docs/gate.md, \"A pass the client made\")")
        budgets.append((key, j, b.inconclusive_passes))
    checks = tuple(CheckVerdict(c.name, _check_verdict(c.name, c.passed, c.detail), c.detail) for c in report.checks)
    return GateVerdicts(tuple(budgets), checks, runner_line(summary), alpha,
                        (rn.hlog_note,) if rn.hlog_note and tags else ())
