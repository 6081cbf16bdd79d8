"""Statistical tests over HDR histograms and counters, for ``hopbench compare``.

Role: decide whether a candidate run differs from a base run by more than
noise, from the data a results folder keeps: the exact HDR histograms (bucket
value, count) and the outcome counters. Pure and synchronous; no scipy, no
numpy (neither is a dependency).

Methods (documented for users in docs/compare.md):

* :func:`mann_whitney`: Mann-Whitney U (Wilcoxon rank-sum) with tie
  correction, normal approximation with continuity correction, two-sided.
  Values in one HDR bucket are ties (they are indistinguishable at 3
  significant figures), so ranks come from cumulative bucket counts and the
  test costs O(buckets), whatever the sample count.
* :func:`quantile_ci`: the distribution-free confidence interval of a
  quantile from order statistics (binomial normal approximation), read from
  the histogram at the two ranks.
* :func:`two_proportions`: two-sided two-proportion z-test with a pooled
  variance, or Fisher's exact test when an expected cell count is below 5.
* :func:`signed_rank`: Wilcoxon's signed-rank test of paired differences (the
  A/B arms' adjacent requests: docs/ab-arms.md, "Paired verdicts"), tie
  correction, normal approximation with continuity correction, two-sided.

Invariants: every function is O(buckets) or O(min cell count); none raises on
empty input (a test on no data returns p = 1.0, "no evidence").
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist

from ..measure._digest import value_at_rank
from ..measure._hdr import Histogram

__all__ = [
    "Buckets",
    "MannWhitney",
    "ProportionTest",
    "buckets",
    "mann_whitney",
    "quantile_ci",
    "SignedRank",
    "signed_rank",
    "two_proportions",
    "z_two_sided",
]

Buckets = Sequence[tuple[int, int]]
"""Non-empty HDR buckets as (value in the recorded unit, count), ascending by value."""

_NORMAL = NormalDist()


def buckets(h: Histogram) -> list[tuple[int, int]]:
    """The non-empty buckets of ``h`` as (highest equivalent value, count), ascending.

    Values are in the recorded unit (ns, milli-tokens/s); a bucket's highest
    equivalent value is what :meth:`Histogram.percentile` reports, so a rank
    read from these buckets matches the histogram's own percentiles.

    Returns:
        list of (value, count), possibly empty. O(buckets).
    """
    return [(int(v), int(c)) for v, c in h.buckets()]


def z_two_sided(z: float) -> float:
    """Two-sided p-value of a standard normal statistic ``z``."""
    return math.erfc(abs(z) / math.sqrt(2.0))


@dataclass(frozen=True, slots=True)
class MannWhitney:
    """Result of :func:`mann_whitney`.

    Attributes:
        n_a: sample count of ``a``.
        n_b: sample count of ``b``.
        u_a: the U statistic of ``a`` (pairs where a > b, ties counting one half).
        z: normal approximation of U, tie-corrected, with continuity correction;
            positive when ``b`` tends to be larger than ``a``.
        p_value: two-sided p-value (1.0 when either sample is empty or all
            values are tied).
        superiority: P(b > a) + P(b = a) / 2, the common-language effect size
            (0.5: no shift; above: ``b`` larger).
    """

    n_a: int
    n_b: int
    u_a: float
    z: float
    p_value: float
    superiority: float


def mann_whitney(a: Buckets, b: Buckets, deff: float = 1.0) -> MannWhitney:
    """Mann-Whitney U test of two samples given as bucketed counts.

    Each bucket is one group of tied values: its members all get the mean rank
    of the group, and the variance carries the tie correction
    ``n_a n_b / 12 * ((N + 1) - sum(t^3 - t) / (N (N - 1)))``
    (Lehmann, *Nonparametrics*, 1975, ch. 1 §4; the same formula as
    ``scipy.stats.mannwhitneyu(method="asymptotic")``).

    Args:
        a: buckets of the first sample, (value, count) ascending by value.
        b: buckets of the second sample, same value scale.
        deff: design effect (>= 1): the samples come in correlated clusters (the
            events of one stream), so the variance of U is this many times the
            independent samples' (Kish, *Survey Sampling*, 1965, §8.2); 1: independent.

    Returns:
        MannWhitney. Never raises on empty input.
    """
    n_a = sum(c for _, c in a)
    n_b = sum(c for _, c in b)
    if not n_a or not n_b:
        return MannWhitney(n_a, n_b, 0.0, 0.0, 1.0, 0.5)
    n = n_a + n_b
    i = j = 0
    below = 0  # values ranked before the current group
    rank_sum_a2 = 0  # twice the rank sum of a (keeps integers exact)
    tie_term = 0
    while i < len(a) or j < len(b):
        va = a[i][0] if i < len(a) else None
        vb = b[j][0] if j < len(b) else None
        if vb is None or (va is not None and va < vb):
            ca, cb, i = a[i][1], 0, i + 1
        elif va is None or vb < va:
            ca, cb, j = 0, b[j][1], j + 1
        else:
            ca, cb, i, j = a[i][1], b[j][1], i + 1, j + 1
        t = ca + cb
        # ranks below+1 .. below+t: mean rank (2*below + t + 1) / 2
        rank_sum_a2 += ca * (2 * below + t + 1)
        tie_term += t * t * t - t
        below += t
    u_a = rank_sum_a2 / 2 - n_a * (n_a + 1) / 2
    mean_u = n_a * n_b / 2
    var_u = n_a * n_b / 12 * ((n + 1) - tie_term / (n * (n - 1))) * max(deff, 1.0) if n > 1 else 0.0
    superiority = 1.0 - u_a / (n_a * n_b)
    if var_u <= 0:
        return MannWhitney(n_a, n_b, u_a, 0.0, 1.0, superiority)
    diff = mean_u - u_a  # > 0 when b is larger
    cc = 0.5 if diff > 0 else -0.5 if diff < 0 else 0.0
    z = (diff - cc) / math.sqrt(var_u) if abs(diff) > 0.5 else 0.0
    return MannWhitney(n_a, n_b, u_a, z, z_two_sided(z), superiority)


def quantile_ci(bk: Buckets, q: float, confidence: float, deff: float = 1.0) -> tuple[int, int] | None:
    """Distribution-free confidence interval of the ``q`` quantile.

    The ranks ``n q -/+ z sqrt(n q (1 - q))`` (binomial order statistics,
    normal approximation; Conover, *Practical Nonparametric Statistics*,
    3rd ed., §3.2) are read from the buckets.

    Args:
        bk: buckets (value, count) ascending.
        q: quantile in (0, 1), e.g. 0.99.
        confidence: e.g. 0.99.
        deff: design effect (>= 1): the rank's variance is this many times the
            independent samples' (clustered samples, as ``mann_whitney``).

    Returns:
        (low, high) in the buckets' unit, or None when the sample is too small
        for the interval to lie inside it (the rank would fall below 1 or
        above n): no conclusion can be drawn about that quantile.
    """
    n = sum(c for _, c in bk)
    if not n or not 0.0 < q < 1.0:
        return None
    z = _NORMAL.inv_cdf(0.5 + confidence / 2)
    half = z * math.sqrt(n * q * (1 - q) * max(deff, 1.0))
    lo = math.floor(n * q - half)
    hi = math.ceil(n * q + half) + 1
    if lo < 1 or hi > n:
        return None
    return value_at_rank(bk, lo), value_at_rank(bk, hi)


def quantile_ci_min_count(q: float, confidence: float, deff: float = 1.0) -> int:
    """The fewest samples for which :func:`quantile_ci` has an interval.

    The smallest ``n`` with ``floor(n q - half) >= 1`` and ``ceil(n q + half) + 1 <= n``
    (``half = z sqrt(n q (1 - q) deff)``: :func:`quantile_ci`'s ranks), found by
    doubling and bisection (the conditions only get easier as ``n`` grows).

    Args:
        q: quantile in (0, 1).
        confidence: e.g. 0.6827 (one standard error each side).
        deff: design effect (>= 1).

    Returns:
        n, samples (events when ``deff`` is the events' per stream).

    Raises:
        ValueError: ``q`` not in (0, 1).
    """
    if not 0.0 < q < 1.0:
        raise ValueError(f"quantile {q!r}: expected 0 < q < 1")
    z = _NORMAL.inv_cdf(0.5 + confidence / 2)
    v = q * (1 - q) * max(deff, 1.0)

    def ok(n: int) -> bool:
        half = z * math.sqrt(n * v)
        return math.floor(n * q - half) >= 1 and math.ceil(n * q + half) + 1 <= n

    hi = 1
    while not ok(hi):
        hi *= 2
    lo = hi // 2  # not ok (or 0)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if ok(mid):
            hi = mid
        else:
            lo = mid
    return hi


@dataclass(frozen=True, slots=True)
class SignedRank:
    """Wilcoxon's signed-rank test of paired differences.

    Attributes:
        n: non-zero differences tested (zeros are dropped: Wilcoxon's method).
        zeros: differences that were exactly 0.
        w_plus: the sum of the ranks of the positive differences.
        z: the normal statistic (positive: the differences lean positive).
        p_value: two-sided p-value (1.0 with no non-zero difference).
    """

    n: int
    zeros: int
    w_plus: float
    z: float
    p_value: float


def signed_rank(diffs: Sequence[float]) -> SignedRank:
    """Wilcoxon's signed-rank test that paired differences are centred on 0.

    The non-zero differences are ranked by absolute value (ties share their
    mean rank); ``W+`` is the rank sum of the positive ones, with mean
    ``n (n + 1) / 4`` and variance ``n (n + 1) (2n + 1) / 24 - sum(t^3 - t) / 48``
    over the tie groups t (Hollander, Wolfe and Chicken, *Nonparametric
    Statistical Methods*, 3rd ed., §3.1; ``scipy.stats.wilcoxon(zero_method="wilcox",
    correction=True, method="approx")``); normal approximation with continuity
    correction, two-sided.

    Args:
        diffs: the pairs' differences (candidate - base), any unit, any order.

    Returns:
        SignedRank. Never raises; no non-zero difference gives p = 1.0. O(n log n).
    """
    nz = sorted((abs(d), d > 0) for d in diffs if d != 0)
    n, zeros = len(nz), len(diffs) - len(nz)
    if n == 0:
        return SignedRank(0, zeros, 0.0, 0.0, 1.0)
    w_plus2 = 0  # twice W+ (mean ranks of ties are halves)
    tie_term = 0
    i = 0
    while i < n:
        j = i
        while j + 1 < n and nz[j + 1][0] == nz[i][0]:
            j += 1
        t = j - i + 1  # ranks i+1 .. j+1 share (i + j + 2) / 2
        w_plus2 += sum(1 for k in range(i, j + 1) if nz[k][1]) * (i + j + 2)
        tie_term += t * t * t - t
        i = j + 1
    w_plus = w_plus2 / 2
    mean = n * (n + 1) / 4
    var = n * (n + 1) * (2 * n + 1) / 24 - tie_term / 48
    if var <= 0:
        return SignedRank(n, zeros, w_plus, 0.0, 1.0)
    diff = w_plus - mean
    z = (diff - math.copysign(0.5, diff)) / math.sqrt(var) if abs(diff) > 0.5 else 0.0
    return SignedRank(n, zeros, w_plus, z, z_two_sided(z))


@dataclass(frozen=True, slots=True)
class ProportionTest:
    """Result of :func:`two_proportions`.

    Attributes:
        method: ``"two-proportion z"`` or ``"fisher exact"``.
        p_value: two-sided p-value (1.0 when either denominator is 0).
    """

    method: str
    p_value: float


def _log_comb(n: int, k: int) -> float:
    return math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)


def _fisher(k_a: int, n_a: int, k_b: int, n_b: int) -> float:
    # Hypergeometric over the first cell with fixed margins; two-sided by
    # summing every table no more likely than the one observed (R's fisher.test).
    k = k_a + k_b
    n = n_a + n_b
    lo, hi = max(0, k - n_b), min(k, n_a)
    log_total = _log_comb(n, k)

    def logp(x: int) -> float:
        return _log_comb(n_a, x) + _log_comb(n_b, k - x) - log_total

    observed = logp(k_a)
    p = sum(math.exp(lp) for x in range(lo, hi + 1) if (lp := logp(x)) <= observed + 1e-7)
    return min(p, 1.0)


def two_proportions(k_a: int, n_a: int, k_b: int, n_b: int) -> ProportionTest:
    """Two-sided test that ``k_a / n_a`` and ``k_b / n_b`` are the same proportion.

    Fisher's exact test when any expected cell count under the pooled
    proportion is below 5 (the usual validity rule of the normal
    approximation), else the pooled two-proportion z-test.

    Returns:
        ProportionTest. Never raises; p = 1.0 when a denominator is 0.
    """
    if n_a <= 0 or n_b <= 0:
        return ProportionTest("none", 1.0)
    pooled = (k_a + k_b) / (n_a + n_b)
    expected = min(n_a * pooled, n_a * (1 - pooled), n_b * pooled, n_b * (1 - pooled))
    if expected < 5:
        # cheap: the smaller margin bounds the loop, and it is small here
        return ProportionTest("fisher exact", _fisher(k_a, n_a, k_b, n_b))
    se = math.sqrt(pooled * (1 - pooled) * (1 / n_a + 1 / n_b))
    z = (k_b / n_b - k_a / n_a) / se
    return ProportionTest("two-proportion z", z_two_sided(z))


def poisson_rates(k_a: int, t_a: float, k_b: int, t_b: float) -> ProportionTest:
    """Two-sided test that ``k_a`` events in ``t_a`` and ``k_b`` in ``t_b`` come from one rate.

    The conditional test of two Poisson rates (Przyborowski and Wilenski, 1940):
    given ``n = k_a + k_b``, ``k_b`` is Binomial(n, t_b / (t_a + t_b)) under the
    null hypothesis. Exact binomial (two-sided: every outcome no more likely
    than the one observed) when n * p * (1 - p) < 5, else its normal approximation.

    Args:
        k_a, k_b: event counts (e.g. completed streams) of the two runs.
        t_a, t_b: the measured durations they were counted over, any one unit.

    Returns:
        ProportionTest with method ``"poisson rates (exact)"`` or ``"poisson rates z"``;
        p = 1.0 when a duration is not positive or no event happened. Never raises.
    """
    n = k_a + k_b
    if t_a <= 0 or t_b <= 0 or n <= 0:
        return ProportionTest("none", 1.0)
    p0 = t_b / (t_a + t_b)
    var = n * p0 * (1 - p0)
    if var >= 5:
        return ProportionTest("poisson rates z", z_two_sided((k_b - n * p0) / math.sqrt(var)))

    def logp(x: int) -> float:
        return _log_comb(n, x) + x * math.log(p0) + (n - x) * math.log1p(-p0)

    observed = logp(k_b)
    p = sum(math.exp(lp) for x in range(n + 1) if (lp := logp(x)) <= observed + 1e-7)
    return ProportionTest("poisson rates (exact)", min(p, 1.0))
