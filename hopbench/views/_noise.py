"""Three-valued verdicts: a change beyond the runs' own measured noise, or not.

Role: the statistics ``hopbench compare`` and ``hopbench gate`` reach their
verdicts by (issue 37; user documentation: docs/compare.md, "How the verdict is
reached", and docs/gate.md, "Noise"). Pure and synchronous: no file, no clock;
:mod:`hopbench.views._noise_record` reads a results folder into the
:class:`Noise` records used here.

A verdict has three values, and a fourth for a check that did not run:

* ``same`` / ``pass``: no change beyond noise (compare), the budget held (gate);
* ``worse`` / ``better`` / ``fail``: a change the samples show *and* that the
  runs' measured noise cannot explain;
* ``inconclusive``: the samples show a change, but the runs' noise (per-interval
  spread, the client's own delay) could explain it; or too few samples; or a
  saturated load generator. Always with its reason. CI retries these on a
  quieter runner (their own exit code, :data:`hopbench._exit.EXIT_INCONCLUSIVE`);
* ``not judged``: nothing to judge (never a pass).

How (each rule's source is cited where it is applied):

1. **Samples.** The caller's test of the two samples (Mann-Whitney U over the
   HDR buckets, or a quantile comparison) gives ``p_samples``; per-event metrics
   count streams, not events (the effective n, :func:`effective_n`).
2. **Noise.** Each run's figure carries a standard error from the spread of the
   figure over time, by *batch means* (consecutive intervals batched until each
   batch holds enough samples for the statistic; the batches' spread over their
   square root: Law, *Simulation Modeling and Analysis*, 5th ed., §9.5.3): what
   the machine, the target and the client did from second to second, which
   samples pooled over the run do not show. And a *client allowance*: how much of
   a change the client itself could have made (its error bound per figure when
   summary.json records one, else its event-loop lag at the same percentile).
   ``p_noise`` tests the change less the allowance against the two standard errors
   (Student's t with Welch's degrees of freedom from the batches: a run of a dozen
   batches knows its spread only roughly, and the normal would false-alarm).
3. **Both.** A change counts only when both tests reject: the p-value of the pair
   is ``max(p_samples, p_noise)`` (an intersection-union test is level alpha
   with the larger p: Berger, *Technometrics* 24, 1982).
4. **Family.** The p-values of every test one compare (or one gate) runs are
   adjusted together by Holm's step-down method (Holm, *Scand. J. Statist.* 6,
   1979), which bounds the chance of *any* false alarm in the family at alpha
   under any dependence between the tests (the figures of one run are strongly
   dependent: ttft, e2e and their percentiles move together). A CI gate wants
   exactly that guarantee (one false alarm fails the build), which
   Benjamini-Hochberg's false discovery rate does not give.

Invariants: every function is O(inputs); none raises on empty input (no data is
``inconclusive`` or ``not judged``, never ``same`` nor ``pass``).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Final

from .._format import fmt_tiny

__all__ = [
    "BETTER",
    "BORDERLINE_P",
    "FAIL",
    "INCONCLUSIVE",
    "NOT_JUDGED",
    "PASS",
    "SAME",
    "VERDICTS",
    "WORSE",
    "Judged",
    "Noise",
    "batch_means",
    "batches",
    "spread_se",
    "effective_n",
    "holm",
    "Figure",
    "judge_family",
    "Limit",
    "judge_limits",
    "relative_noise",
    "one_sentence",
    "p_noise",
]

SAME: Final = "same"
WORSE: Final = "worse"
BETTER: Final = "better"
PASS: Final = "pass"
FAIL: Final = "fail"
INCONCLUSIVE: Final = "inconclusive"
NOT_JUDGED: Final = "not judged"
VERDICTS: Final = (SAME, WORSE, BETTER, PASS, FAIL, INCONCLUSIVE, NOT_JUDGED)

_NORMAL = NormalDist()

BORDERLINE_P: Final = 0.1
"""A worse change within the noise floor whose noise test's (raw, two-sided) p-value is below
this is ``inconclusive``, not ``same``: the change less the client's allowance is past about 1.7
standard errors, so the runs' own noise could explain it, but only just (issue 37; docs/compare.md,
"Verdicts beyond noise"). Well inside the floor (p >= 0.1) it reads ``same``."""


def _betacf(a: float, b: float, x: float) -> float:
    # continued fraction of the incomplete beta function (Lentz; Press et al., *Numerical
    # Recipes*, 3rd ed., §6.4)
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-12:
            break
    return h


def _betai(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b), x in [0, 1]."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    lbt = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(lbt) * _betacf(a, b, x) / a
    return 1.0 - math.exp(lbt) * _betacf(b, a, 1.0 - x) / b


def t_sf(t: float, df: float) -> float:
    """P(T > t) of Student's t with ``df`` degrees of freedom (df = inf: the normal)."""
    if not math.isfinite(df) or df > 1e6:
        return 1.0 - _NORMAL.cdf(t)
    tail = 0.5 * _betai(df / 2.0, 0.5, df / (df + t * t))
    return tail if t >= 0 else 1.0 - tail


def t_isf(p: float, df: float) -> float:
    """The t with ``P(T > t) = p`` (0 < p < 1/2), by bisection on :func:`t_sf` (df to 0.01)."""
    return _t_isf(p, round(df, 2) if math.isfinite(df) else math.inf)


@functools.lru_cache(maxsize=1024)
def _t_isf(p: float, df: float) -> float:
    lo, hi = 0.0, 1.0
    while t_sf(hi, df) > p and hi < 1e6:
        hi *= 2.0
    for _ in range(60):
        mid = (lo + hi) / 2.0
        if t_sf(mid, df) > p:
            lo = mid
        else:
            hi = mid
    return hi


def welch_df(a: Noise, b: Noise) -> float:
    """Welch-Satterthwaite degrees of freedom of ``se_a^2 + se_b^2`` from each run's batches
    (``batches - 1`` each; Welch, *Biometrika* 34, 1947). Infinite when a standard error is 0."""
    assert a.se is not None and b.se is not None
    va, vb = a.se ** 2, b.se ** 2
    den = (va * va / max(a.batches - 1, 1) if va else 0.0) + (vb * vb / max(b.batches - 1, 1) if vb else 0.0)
    return (va + vb) ** 2 / den if den > 0 else math.inf


@dataclass(frozen=True, slots=True)
class Noise:
    """What one run's figure could be off by, in the figure's reporting unit (ms, tokens/s).

    Attributes:
        se: standard error of the figure from its spread over time (batch means);
            None when the run has too few batches to measure it (fewer than 3).
        batches: the batches behind ``se`` (0 when unknown).
        client: the client-side allowance (>= 0): how far the client's own delay
            could have moved the figure (its error bound, else its loop lag at the
            same percentile); 0 for figures the client's delay does not move.
        client_source: where ``client`` came from, for reasons
            (``"error bound"``, ``"loop lag p99"``, ``""``).
        note: how ``se`` was had when not by batch means, for reasons ("" when it was).
    """

    se: float | None
    batches: int = 0
    client: float = 0.0
    client_source: str = ""
    note: str = ""


def batches(counts: Sequence[int], min_per_batch: int) -> list[list[int]]:
    """Consecutive intervals joined into batches of at least ``min_per_batch`` values.

    Args:
        counts: values in each interval, in time order.
        min_per_batch: values a batch needs for its statistic to mean anything
            (e.g. 100 for a p99: :func:`hopbench.config._gate_spec.default_min_count`).

    Returns:
        lists of interval indexes, one per batch, in time order; the last short
        batch folds into the one before (nothing is dropped once one batch formed).
    """
    out: list[list[int]] = []
    cur: list[int] = []
    have = 0
    for i, c in enumerate(counts):
        cur.append(i)
        have += c
        if have >= max(min_per_batch, 1):
            out.append(cur)
            cur, have = [], 0
    if cur and out:
        out[-1].extend(cur)
    return out


def spread_se(figures: Sequence[float]) -> float | None:
    """Standard error of a run's figure from its batches' figures (batch means: Law,
    *Simulation Modeling and Analysis*, 5th ed., §9.5.3): their sample standard
    deviation over ``sqrt(batches)``.

    Returns:
        the standard error, or None for fewer than 3 batches (the spread of two
        points is no measurement).
    """
    if len(figures) < 3:
        return None
    mean = sum(figures) / len(figures)
    var = sum((f - mean) ** 2 for f in figures) / (len(figures) - 1)
    return math.sqrt(var / len(figures))


def batch_means(groups: Sequence[Sequence[float]], min_per_batch: int,
                statistic: Callable[[Sequence[float]], float]) -> tuple[float | None, int]:
    """Standard error of a statistic of a run, from its spread over time.

    Consecutive intervals are joined into batches (:func:`batches`); the
    statistic of each batch varies by what the run's time did (drift, a
    neighbour, a GC) as well as by sampling; :func:`spread_se` of the batches'
    figures is the run figure's standard error.

    Args:
        groups: the values of each interval, in time order (any unit).
        min_per_batch: values a batch needs.
        statistic: the figure of one batch's values, e.g. a percentile.

    Returns:
        (standard error or None, batches): None below 3 batches. Never raises.
    """
    figures = [statistic([v for i in b for v in groups[i]]) for b in batches([len(g) for g in groups],
                                                                              min_per_batch)]
    return spread_se(figures), len(figures)


def effective_n(samples: int, streams: int | None, per_event: bool) -> int:
    """The effective number of independent samples behind a figure.

    A per-event metric (``itl``, ``event_delay``...) has many samples per stream,
    and a stream's samples share its path and the machine's state while it ran:
    its tests count streams (Kish's design effect at its conservative bound,
    *Survey Sampling*, 1965, §8.2). Other metrics have one sample per stream.

    Args:
        samples: the histogram's count.
        streams: streams behind it (None: unknown).
        per_event: the metric has many samples per stream.

    Returns:
        ``min(samples, streams)`` for a per-event metric with known streams, else ``samples``.
    """
    if per_event and streams is not None and streams > 0:
        return min(samples, streams)
    return samples


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values (Holm, *Scand. J. Statist.* 6, 1979).

    With m tests sorted by p ascending, ``adj(i) = max_{j <= i} min(1, (m - j) p(j))``
    (0-based j); a test is significant at family-wise level alpha when its
    adjusted p is below alpha. Valid under any dependence between the tests.

    Args:
        p_values: raw p-values in any order, each in [0, 1].

    Returns:
        adjusted p-values, in the input's order. ``[]`` for ``[]``.
    """
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    out = [1.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p_values[i]))
        out[i] = running
    return out


def p_noise(change: float, base: Noise, cand: Noise, *, higher_is_worse: bool) -> float | None:
    """Two-sided p-value that ``change`` (candidate - base) is more than the runs' noise.

    The client's allowance is taken off first, in the direction it acts: a
    candidate whose client lagged more reads higher times (worse when higher is
    worse), a base whose client lagged more makes the candidate look better. What
    is left is tested against ``sqrt(se_base^2 + se_cand^2)`` (normal
    approximation, the batch means' central limit).

    Args:
        change: candidate minus base, reporting unit.
        base / cand: the two runs' noise of this figure.
        higher_is_worse: True for times (a higher figure is worse).

    Returns:
        p-value in [0, 1]; 1.0 when the allowance covers the change; None when a
        standard error is unknown (too few batches). Never raises.
    """
    worse = (change > 0) == higher_is_worse
    allowance = _allowance(base, cand, worse)
    left = max(abs(change) - allowance, 0.0)
    if left == 0.0:
        return 1.0
    if base.se is None or cand.se is None:
        return None
    se = math.hypot(base.se, cand.se)
    if se <= 0:
        return 0.0
    return min(1.0, 2.0 * t_sf(left / se, welch_df(base, cand)))


def _allowance(base: Noise, cand: Noise, worse: bool) -> float:
    # the client only ever adds delay: a worse candidate is explained by its own client, a
    # better one by the base's (docs/compare.md, "Noise")
    return cand.client if worse else base.client


def floor(base: Noise, cand: Noise, alpha: float, *, worse: bool) -> float | None:
    """The smallest change (reporting unit) the noise test would call real at ``alpha``.

    Returns:
        allowance + t(1 - alpha / 2, Welch df) * sqrt(se_base^2 + se_cand^2); None when a
        standard error is unknown.
    """
    if base.se is None or cand.se is None:
        return None
    return _allowance(base, cand, worse) + t_isf(alpha / 2, welch_df(base, cand)) * math.hypot(base.se, cand.se)


@dataclass(frozen=True, slots=True)
class Judged:
    """One figure's verdict, with everything its sentence says.

    Attributes:
        verdict: one of :data:`VERDICTS`.
        reason: one sentence, why (never empty).
        p_samples: the samples' test p-value (raw), None when not tested.
        p_noise: the noise test's p-value (raw), None when unknown.
        p_value: the figure's p-value: max of the two (None when not tested).
        p_adjusted: the pair p-value after Holm across the family (:func:`judge_family`).
        n_base / n_cand: effective n of each side (streams for per-event metrics).
        floor: the noise floor of the change (reporting unit), None when unknown.
        direction: ``"worse"`` or ``"better"``: the way the change points ("" when none).
        p_samples_adjusted: the samples' p-value after Holm across the family (what a
            ``same: ... within sampling noise (p = ..)`` sentence shows), None when not tested.
        limit: a gate budget's limit as judged, reporting unit (a calibrated limit moved by the
            run's client delay past the calibration's: ``hopbench.views._verdicts.judge_gate``);
            None for a compare figure or a budget without one.
    """

    verdict: str
    reason: str
    p_samples: float | None = None
    p_noise: float | None = None
    p_value: float | None = None
    p_adjusted: float | None = None
    n_base: int = 0
    n_cand: int = 0
    floor: float | None = None
    direction: str = ""
    p_samples_adjusted: float | None = None
    limit: float | None = None


def _fmt(v: float, unit: str) -> str:
    a = abs(v)
    text = ("+<0.001" if v > 0 else "-<0.001") if v and a < 0.001 else f"{v:+.3g}" if a < 10 else f"{v:+.1f}"
    return f"{text} {unit}".rstrip()


@dataclass(frozen=True, slots=True)
class Figure:
    """One compare figure before its verdict: the inputs of :func:`judge_family`.

    Attributes:
        change: candidate - base, reporting unit (None: a side has no value).
        rel: the relative change, or None.
        unit: the reporting unit, for the sentence.
        p_samples: the samples' two-sided p-value (None: no test possible).
        base / cand: each run's :class:`Noise` for this figure.
        n_base / n_cand: effective n of each side (:func:`effective_n`).
        min_n: effective n each side needs for a verdict (e.g. 100 for a p99).
        higher_is_worse: True for times.
        saturated: a saturated run's folder, or None: a change the samples show but
            its (wide: :mod:`hopbench.views._noise_record`) noise floor covers is then
            ``inconclusive``, not ``same``.
        few_is_inconclusive: fewer than ``min_n`` samples is ``inconclusive`` (a figure
            someone asked for); False: ``not judged`` (a tail a short run cannot have).
        why: why the figure has no change to judge, for its ``not judged`` sentence
            ("": a side has no value).
        whose: whose noise floor the sentence names (``"runs'"``; ``"pairs'"`` for the A/B
            arms' paired differences).
        min_change: the smallest change the user asked to hear of (``compare --min-effect`` /
            ``--min-abs-ms``), reporting unit; a smaller one is ``same`` whatever its p (0: none).
        min_change_why: what ``min_change`` came from, for the sentence.
        min_change_asked: ``min_change`` is the user's (``is under the smallest change asked
            for``: a smaller one is ``same``); False: the figure's own resolution (``is within``
            it, e.g. a digest's bucket: a change up to and with it is ``same``).
        unfloored: why the figure has no noise floor, for a ``worse``/``better`` sentence
            (a count or rate; a figure taken as measured, e.g. the A/B arms' unpaired table).
    """

    change: float | None
    rel: float | None
    unit: str
    p_samples: float | None
    base: Noise
    cand: Noise
    n_base: int
    n_cand: int
    min_n: int = 2
    higher_is_worse: bool = True
    saturated: str | None = None
    few_is_inconclusive: bool = True
    why: str = ""
    whose: str = "runs'"
    min_change: float = 0.0
    min_change_why: str = ""
    min_change_asked: bool = True
    unfloored: str = "a count or rate: its own test carries its noise"


def judge_family(figures: Sequence[Figure], alpha: float) -> list[Judged]:
    """The verdicts of every figure one compare judges, the family's false alarms bounded at ``alpha``.

    Each figure's pair p-value (``max(p_samples, p_noise)``, module docstring
    rule 3) and, to tell ``same`` from ``inconclusive``, its samples' p-value are
    each adjusted by :func:`holm` across the figures that were tested. Then:

    * a side without value: ``not judged``; fewer than ``min_n``: ``inconclusive``;
    * the adjusted pair p < alpha: ``worse`` / ``better`` (a saturated run too: its
      client allowance is then its loop lag p99, so a change past it is no client's);
    * the adjusted samples' p >= alpha: ``same`` (no change in the samples);
    * a run too short to measure its spread: ``inconclusive``;
    * the change no larger than the noise floor (:func:`floor`; the client's
      allowance alone when a spread is unknown): ``same``, within the noise: no test
      on this runner could call it a change; but ``inconclusive`` when it points the
      worse way and either a run was saturated or it is near the floor's edge (its
      noise test's raw p below :data:`BORDERLINE_P`): the runs' noise could explain
      it, but only just, so retry where the floor is lower;
    * else ``inconclusive``: past the floor of one test, but not significant once the
      family is accounted for (Holm).

    Args:
        figures: the family, in report order.
        alpha: family-wise significance level, e.g. 0.01.

    Returns:
        one :class:`Judged` per figure, in order. Never raises.
    """
    pn: list[float | None] = []
    tested: list[int] = []
    for i, f in enumerate(figures):
        if f.change is None or f.p_samples is None:
            pn.append(None)
            continue
        pn.append(p_noise(f.change, f.base, f.cand, higher_is_worse=f.higher_is_worse))
        if min(f.n_base, f.n_cand) >= f.min_n:
            tested.append(i)
    pairs = holm([max(figures[i].p_samples or 0.0, 1.0 if pn[i] is None else pn[i] or 0.0) for i in tested])
    samples = holm([figures[i].p_samples or 0.0 for i in tested])
    adj = {i: (pairs[k], samples[k]) for k, i in enumerate(tested)}
    out = [_judge(f, pn[i], adj.get(i), alpha, len(tested)) for i, f in enumerate(figures)]
    return [dataclasses.replace(j, p_samples_adjusted=adj[i][1]) if i in adj else j for i, j in enumerate(out)]


def _judge(f: Figure, pn: float | None, adj: tuple[float, float] | None, alpha: float, family: int) -> Judged:
    if f.change is None or f.p_samples is None:
        return Judged(NOT_JUDGED, f"not judged: {f.why or 'a side has no value'}", n_base=f.n_base,
                      n_cand=f.n_cand)
    if adj is None:
        if not f.few_is_inconclusive:  # (no test ran: no p-value to show)
            return Judged(NOT_JUDGED, f"not judged: too few samples for it (n = {f.n_base} and {f.n_cand}, "
                          f"{f.min_n} needed on each side)", None, None, None, None, f.n_base, f.n_cand)
        if f.whose == "pairs'":  # one n: the pairs
            return Judged(INCONCLUSIVE, f"inconclusive: too few pairs ({f.n_base}, {f.min_n} needed)", f.p_samples,
                          pn, None, None, f.n_base, f.n_cand)
        return Judged(INCONCLUSIVE, f"inconclusive: too few samples (n = {f.n_base} and {f.n_cand}, "
                      f"{f.min_n} needed on each side)", f.p_samples, pn, None, None, f.n_base, f.n_cand)
    padj, psamp = adj
    worse = (f.change > 0) == f.higher_is_worse
    fl = floor(f.base, f.cand, alpha, worse=worse)
    p = max(f.p_samples, 1.0 if pn is None else pn)
    what = f"{_fmt(f.change, f.unit)}" + (f" ({f.rel:+.1%})" if f.rel is not None else "")
    args = (f.p_samples, pn, p, padj, f.n_base, f.n_cand, fl, WORSE if worse else BETTER)
    # (a relative 1e-9: two bucket tops a bucket apart differ by the width give or take a float's
    # rounding: -0.03200000000000003 tokens/s against a 0.032-wide bucket read worse, p = 2.7e-24)
    if f.min_change and abs(f.change) <= f.min_change * (1 + 1e-9) and not f.min_change_asked:  # cannot tell
        return Judged(SAME, f"same: {what} is within {f.min_change_why}", *args)
    if f.min_change and abs(f.change) < f.min_change:  # the user's own floor: a smaller change is no news
        return Judged(SAME, f"same: {what} is under the smallest change asked for ({f.min_change_why})", *args)
    if padj < alpha:
        v = WORSE if worse else BETTER
        beyond = f", beyond the noise floor of {_fmt(fl, f.unit)[1:]}" if fl else f" ({f.unfloored})"
        return Judged(v, f"{v}: {what}{beyond} (p = {padj:.2g})", *args)
    if psamp >= alpha:
        return Judged(SAME, f"same: {what} is within sampling noise (p = {psamp:.2g})", *args)
    if pn is None:
        return Judged(INCONCLUSIVE, f"inconclusive: {what} shows in the samples (p = {psamp:.2g}), but a "
                      "run is too short to measure its noise over time (fewer than 3 batches)", *args)
    within = fl if fl is not None else _allowance(f.base, f.cand, worse)
    if abs(f.change) <= within and f.saturated and worse:  # a better one within the floor is no doubt
        return Judged(INCONCLUSIVE, f"inconclusive: {what} shows in the samples (p = {psamp:.2g}) but is within "
                      f"the noise floor of {_fmt(within, f.unit)[1:]} of a saturated load generator "
                      f"({f.saturated})", *args)
    if abs(f.change) <= within and worse and pn < BORDERLINE_P:  # the noise could explain it, but only just
        return Judged(INCONCLUSIVE, f"inconclusive: {what} shows in the samples (p = {psamp:.2g}) but is within "
                      f"the {f.whose} noise floor of {_fmt(within, f.unit)[1:]}, near its edge (p(noise) = {pn:.2g} "
                      f">= {alpha:g}){_noise_words(f.base, f.cand, worse, f.unit)}", *args)
    if abs(f.change) <= within:
        return Judged(SAME, f"same: {what} is within the {f.whose} noise floor of {_fmt(within, f.unit)[1:]}"
                      f"{_noise_words(f.base, f.cand, worse, f.unit)}", *args)
    return Judged(INCONCLUSIVE, f"inconclusive: {what} is past the noise floor of {_fmt(within, f.unit)[1:]}, "
                  f"but not significant among the {family} figures judged (p = {padj:.2g} after Holm)", *args)


def _noise_words(base: Noise, cand: Noise, worse: bool, unit: str = "") -> str:
    side = cand if worse else base
    words = [f"client delay up to {f'{side.client:.3g} {unit}'.rstrip()} from {side.client_source}"] \
        if side.client > 0 and side.client_source else []
    words += [n for n in dict.fromkeys((base.note, cand.note)) if n]
    return (": " + "; ".join(words)) if words else ""


@dataclass(frozen=True, slots=True)
class Limit:
    """One gate budget before its verdict: the inputs of :func:`judge_limits`.

    Attributes:
        value: the run's figure (None: no data).
        limit: the limit, same unit (None: unresolved, e.g. a baseline without data).
        op: ``<=``, ``<``, ``>=`` or ``>``.
        unit: reporting unit, for the sentence.
        noise: the figure's :class:`Noise` (for a limit relative to a baseline, the
            two runs' standard errors combined: :func:`relative_noise`).
        n / min_n: effective samples and the budget's ``min_count``.
        higher_is_worse: True for times (the client's allowance can only raise a
            time, lower a rate).
        saturated: a saturated run's folder, or None (said in an inconclusive sentence;
            its client allowance is already its loop lag p99).
        written: the limit as the budget wrote it when the run moved it (a calibrated limit
            moved by the run's client delay beyond ``client_included``), else None; a breach's
            sentence then shows both (``limit <= 128 ms (this run: 128.3 ms)``).
    """

    value: float | None
    limit: float | None
    op: str
    unit: str
    noise: Noise
    n: int
    min_n: int
    higher_is_worse: bool = True
    saturated: str | None = None
    written: float | None = None


def relative_noise(run: Noise, baseline: Noise, factor: float = 1.0) -> Noise:
    """The noise of ``run - factor * baseline``: standard errors in quadrature, the run's client allowance."""
    se = None if run.se is None or baseline.se is None else math.hypot(run.se, factor * baseline.se)
    return Noise(se, min(run.batches, baseline.batches), run.client, run.client_source)


def _held(value: float, limit: float, op: str) -> bool:
    match op:
        case "<=":
            return value <= limit
        case "<":
            return value < limit
        case ">=":
            return value >= limit
    return value > limit


def _breach_p(b: Limit) -> tuple[float | None, float]:
    """(one-sided p that the breach is beyond noise or None when unknown, the client allowance)."""
    assert b.value is not None and b.limit is not None
    distance = abs(b.value - b.limit)
    # the client's delay raises a time and lowers a rate: a breach that way may be the client's
    allowance = b.noise.client if (b.op in ("<=", "<")) == b.higher_is_worse else 0.0
    left = max(distance - allowance, 0.0)
    if left == 0.0:
        return 1.0, allowance
    if b.noise.se is None:
        return None, allowance
    return (0.0 if b.noise.se <= 0 else t_sf(left / b.noise.se, max(b.noise.batches - 1, 1))), allowance


def judge_limits(budgets: Sequence[Limit], alpha: float) -> list[Judged]:
    """The verdicts of a gate's budgets: pass, fail, inconclusive or not judged.

    A measured value on the right side of its limit passes. One on the wrong side
    fails only when its distance from the limit is beyond the run's noise: the
    client's allowance first, then a one-sided test against the figure's standard
    error (Student's t, ``batches - 1`` degrees of freedom); the breach tests' p-values are adjusted by :func:`holm` across the
    gate's budgets (a budget that held counts in the family with p = 1), so the
    gate as a whole false-alarms at most ``alpha`` of the time. A breach the noise
    could explain is ``inconclusive``, with that sentence.

    Args:
        budgets: every budget of the gate, in order.
        alpha: family-wise level, e.g. 0.01.

    Returns:
        one :class:`Judged` per budget, in order. Never raises.
    """
    raw: list[float] = []
    info: list[tuple[float | None, float]] = []
    for b in budgets:
        if b.value is None or b.limit is None or b.n < b.min_n or _held(b.value, b.limit, b.op):
            info.append((1.0, 0.0))
            raw.append(1.0)
            continue
        p, allowance = _breach_p(b)
        info.append((p, allowance))
        raw.append(1.0 if p is None else p)
    adjusted = holm(raw)
    out = []
    for b, (p, allowance), padj in zip(budgets, info, adjusted):
        n = b.n
        if b.value is None or b.limit is None:
            out.append(Judged(NOT_JUDGED, "not judged: no value", n_base=n, n_cand=n))
            continue
        if n < b.min_n:
            out.append(Judged(INCONCLUSIVE, f"inconclusive: too few samples ({n}, {b.min_n} needed)",
                              n_base=n, n_cand=n))
            continue
        shown = f"{_num(b.value)} {b.op} {_num(b.limit)} {b.unit}".rstrip()
        if _held(b.value, b.limit, b.op):
            out.append(Judged(PASS, f"pass: {shown}", n_base=n, n_cand=n))
            continue
        fl = None if b.noise.se is None else allowance + t_isf(alpha, max(b.noise.batches - 1, 1)) * b.noise.se
        by = f"{_num(abs(b.value - b.limit))} {b.unit}".rstrip()
        # "125, limit >= 150: short by 25": the observed against the limit, never "125 >= 150 is breached"
        lim = f"{_num(b.limit)} {b.unit}".rstrip()
        if b.written is not None and _num(b.written) != _num(b.limit):
            lim = f"{_num(b.written)} {b.unit}".rstrip() + f" (this run: {lim})"
        missed = (f"{_num(b.value)} {b.unit}".rstrip() + f", limit {b.op} {lim}"
                  + f": {'short' if b.op in ('>=', '>') else 'over'} by {by}")
        args = (None, p, p, padj, n, n, fl)
        if p is None:
            out.append(Judged(INCONCLUSIVE, f"inconclusive: {missed}, but the run is too "
                              "short to measure its noise over time (fewer than 3 batches)", *args))
        elif padj >= alpha:
            sat = f"; the load generator was saturated in {b.saturated}" if b.saturated else ""
            out.append(Judged(INCONCLUSIVE, f"inconclusive: {missed}, within the run's "
                              f"noise ({(_num(fl if fl is not None else allowance) + ' ' + b.unit).rstrip()}"
                              f"{_noise_words(b.noise, b.noise, True, b.unit)}{sat}; p = {padj:.2g} after Holm)", *args))
        else:
            noise = (f", beyond the run's noise ({_num(fl)} {b.unit}".rstrip() + f"; p = {padj:.2g} after Holm)") if fl else \
                " (exact: no noise to weigh it by)"
            out.append(Judged(FAIL, f"fail: {missed}{noise}", *args))
    return out


def _num(v: float) -> str:
    tiny = fmt_tiny(v)  # a same-read gap (0 ns kept as HDR's 1 ns): never "1e-06"
    if tiny is not None:
        return tiny
    if abs(v) >= 100:
        return f"{v:.1f}".removesuffix(".0")
    return f"{v:.3g}"


def one_sentence(j: Judged) -> str:
    """The verdict's sentence with the effective n and p-value (what ``-q`` prints)."""
    n = f"n = {j.n_base}" if j.n_base == j.n_cand else f"n = {j.n_base} vs {j.n_cand}"
    return f"{j.reason} [{n}]"
