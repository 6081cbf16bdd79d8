"""A compare's figures judged against the two runs' measured noise: what changed, what cannot be told.

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

Invariants: pure apart from reading intervals.hlog; O(buckets + log lines); a
figure without data is ``not judged``, never ``same``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from statistics import NormalDist
from typing import Any, Final

from .._exit import EXIT_BREACH, EXIT_INCONCLUSIVE, EXIT_OK
from ..config._gate_spec import default_min_count
from ..measure._hdr import METRICS, Histogram
from ._noise import (BETTER, INCONCLUSIVE, NOT_JUDGED, SAME, WORSE, Figure, Judged, Noise, effective_n,
                     judge_family)
from ._noise_record import RunNoise, busier, read_run_noise, runner_line
from ._stats import buckets, quantile_ci

__all__ = ["JUDGED_STATS", "FigureVerdict", "Verdicts", "judge_comparison"]

JUDGED_STATS: Final = ("p50", "p90", "p99")
"""The statistics of each metric a compare judges (p99.9 and max are shown, not judged: a
short run has too few samples beyond them to tell anything)."""
_Q: Final = {"p50": 0.5, "p90": 0.9, "p99": 0.99}
_NORMAL = NormalDist()
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
    """

    scope: str
    name: str
    unit: str
    base: float | None
    candidate: float | None
    judged: Judged

    @property
    def verdict(self) -> str:
        """One of :data:`hopbench.views._noise.VERDICTS`."""
        return self.judged.verdict

    def line(self) -> str:
        """``<scope> <name>: <sentence> [n = .., p = ..]``: one sentence per verdict."""
        j = self.judged
        n = f"n = {j.n_base}" if j.n_base == j.n_cand else f"n = {j.n_base} vs {j.n_cand}"
        p = "" if j.p_samples is None else f", p(samples) = {j.p_samples:.2g}"
        pn = "" if j.p_noise is None else f", p(noise) = {j.p_noise:.2g}"
        return f"{self.scope} {self.name}: {j.reason} [{n}{p}{pn}]"

    def to_json(self) -> dict[str, Any]:
        """JSON-ready dict (docs/compare.md, "Verdicts beyond noise")."""
        j = self.judged
        return {"scope": self.scope, "figure": self.name, "unit": self.unit, "base": _finite(self.base),
                "candidate": _finite(self.candidate), "verdict": j.verdict, "reason": j.reason,
                "p_samples": j.p_samples, "p_noise": j.p_noise, "p_value": j.p_value,
                "p_adjusted": j.p_adjusted, "n_base": j.n_base, "n_candidate": j.n_cand,
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
        """The pair's verdict: ``worse`` when any figure is, else ``inconclusive`` when any is,
        else ``better`` when any is, else ``same``."""
        for v in (WORSE, INCONCLUSIVE, BETTER):
            if self.of(v):
                return v
        return SAME

    def exit_code(self, fail_on_worse: bool) -> int:
        """With ``--fail-on-worse``: 1 worse, 5 inconclusive (retry on a quieter runner), 0 otherwise."""
        if not fail_on_worse:
            return EXIT_OK
        return {WORSE: EXIT_BREACH, INCONCLUSIVE: EXIT_INCONCLUSIVE}.get(self.verdict, EXIT_OK)

    def headline(self) -> str:
        """One sentence: the verdict and why (what ``-q`` prints)."""
        worse, inc, better = self.of(WORSE), self.of(INCONCLUSIVE), self.of(BETTER)
        judged = len(self.figures) - len(self.of(NOT_JUDGED))
        if worse:
            return (f"compare: WORSE beyond noise: {_names(worse)} (of {judged} figures, family-wise alpha "
                    f"{self.alpha:g})")
        if inc:
            return (f"compare: INCONCLUSIVE: {_names(inc)} moved within what the runs' noise could explain; "
                    "retry on a quieter runner")
        if better:
            return f"compare: better beyond noise: {_names(better)}; nothing worse"
        return f"compare: same: no figure changed beyond noise ({judged} figures, family-wise alpha {self.alpha:g})"

    def lines(self) -> list[str]:
        """The report: runners, what changed beyond noise, then the inconclusive ones, then the rest."""
        out = [f"runner: base {self.runners[0] or 'unknown'}; candidate {self.runners[1] or 'unknown'}"]
        out += [f"note: {n}" for n in self.notes]
        changed = self.of(WORSE, BETTER)
        inc = self.of(INCONCLUSIVE)
        rest = self.of(SAME, NOT_JUDGED)
        out.append(f"changed beyond noise ({len(changed)}):")
        out += [f"  {f.line()}" for f in changed] or ["  none"]
        out.append(f"inconclusive ({len(inc)}):")
        out += [f"  {f.line()}" for f in inc] or ["  none"]
        out.append(f"same or not judged ({len(rest)}):")
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
    conf = _NORMAL.cdf(1.0) - _NORMAL.cdf(-1.0)
    ca, cb = quantile_ci(ba, q, conf, deff_a), quantile_ci(bb, q, conf, deff_b)
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
    from ._compare import _hist as read_hist

    scopes = summary.get("scopes")
    s = scopes.get(scope) if isinstance(scopes, Mapping) else None
    return read_hist(s if isinstance(s, Mapping) else {}, metric, f"scopes.{scope}")


def judge_comparison(comparison: Any, base: Mapping[str, Any], cand: Mapping[str, Any], *,
                     base_dir: Path | None = None, cand_dir: Path | None = None,
                     base_noise: RunNoise | None = None, cand_noise: RunNoise | None = None) -> Verdicts:
    """Judge a compare's every figure against the two runs' measured noise.

    Args:
        comparison: the :class:`hopbench.views._compare.Comparison` of ``base`` and ``cand``.
        base / cand: the two summary.json dicts.
        base_dir / cand_dir: their folders (intervals.hlog); None: the spread is unknown.
        base_noise / cand_noise: noise records already read (tests, calibration), else read here.

    Returns:
        Verdicts.

    Raises:
        ResultsError: a malformed histogram or intervals.hlog (file:line).
    """
    from ._compare import HIGHER_IS_BETTER, PER_EVENT, _streams

    scopes = sorted({m.scope for m in comparison.metrics})
    metrics = sorted({m.metric for m in comparison.metrics})
    tags = [f"{s}.{m}" for s in scopes for m in metrics]
    rn_a = base_noise or read_run_noise(base_dir, base, tags, comparison.base_dir)
    rn_b = cand_noise or read_run_noise(cand_dir, cand, tags, comparison.candidate_dir)
    saturated = " and ".join(label for label, s in ((comparison.base_dir, base), (comparison.candidate_dir, cand))
                             if s.get("saturated") is True) or None
    names: list[tuple[str, str, str, float | None, float | None]] = []
    figures: list[Figure] = []
    for m in comparison.metrics:
        if m.verdict == "not_comparable" and (not m.base.get("count") or not m.candidate.get("count")):
            for stat in JUDGED_STATS:
                names.append((m.scope, f"{m.metric}.{stat}", m.unit, m.base.get(stat), m.candidate.get(stat)))
                figures.append(Figure(None, None, m.unit, None, _NO_NOISE, _NO_NOISE, 0, 0))
            continue
        sa, sb = _scope(base, m.scope), _scope(cand, m.scope)
        ha, hb = _hist(base, m.scope, m.metric), _hist(cand, m.scope, m.metric)
        per_event = m.metric in PER_EVENT
        st_a, st_b = _streams(sa), _streams(sb)
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
                min_n = max(min_n, n_a + 1, n_b + 1)
                p = 1.0
            names.append((m.scope, f"{m.metric}.{stat}", m.unit, _f(va), _f(vb)))
            figures.append(Figure(change, rel, m.unit, p, rn_a.noise(m.scope, m.metric, stat),
                                  rn_b.noise(m.scope, m.metric, stat), n_a, n_b, min_n, hib, saturated,
                                  few_is_inconclusive=False))
    for r in comparison.rates:
        va, vb = r.base[2], r.candidate[2]
        change = None if va is None or vb is None or r.verdict == "not_comparable" else vb - va
        rel = None if change is None or not va else change / abs(va)
        hib = r.name not in HIGHER_IS_BETTER
        n_a, n_b = int(r.base[1]) if not r.unit else 1, int(r.candidate[1]) if not r.unit else 1
        untested = r.method == "none"
        names.append((r.scope, r.name, r.unit, va, vb))
        figures.append(Figure(None if untested else change, rel, r.unit, None if untested else r.p_value,
                              _NO_NOISE, _NO_NOISE, n_a, n_b, 1, hib,
                              saturated if r.name.startswith("throughput.") else None))
    judged = judge_family(figures, comparison.alpha)
    out = tuple(FigureVerdict(s, n, u, a, b, j) for (s, n, u, a, b), j in zip(names, judged))
    notes = [x for x in (rn_a.hlog_note and f"{rn_a.label}: {rn_a.hlog_note}",
                         rn_b.hlog_note and f"{rn_b.label}: {rn_b.hlog_note}") if x]
    if busier(base, cand):
        notes.append(f"the candidate's runner was busier than the base's ({runner_line(cand)} against "
                     f"{runner_line(base)}): a change within its loop lag is the runner's")
    return Verdicts(out, comparison.alpha, (runner_line(base), runner_line(cand)), tuple(notes))


def _f(v: float | int | None) -> float | None:
    return None if v is None else float(v)


def _scope(summary: Mapping[str, Any], scope: str) -> Mapping[str, Any]:
    scopes = summary.get("scopes")
    s = scopes.get(scope) if isinstance(scopes, Mapping) else None
    return s if isinstance(s, Mapping) else {}
