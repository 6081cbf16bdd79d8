"""A stream's own inter-token gaps in bounded memory: a tiny log-linear histogram.

A per-request SLO on a percentile of the request's own ITL (``[slo] itl_stat =
"p90"``, docs/slo.md) needs the distribution of one stream's gaps, while a
stream of 20,000 tokens must not hold 20,000 gaps (docs/results.md, issue of
hours-long runs). A digest keeps counts per bucket of 8 significant bits, as
HdrHistogram does with 2 significant decimal digits: values below 256 ns are
exact, larger ones are reported as the highest value of their bucket, at most
1/128 (0.8 %) above the true gap. The number of buckets is bounded by the
value range (at most 128 per power of two), not by the stream's length.

Pure: no I/O, no clock.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

__all__ = ["SIGNIFICANT_BITS", "bucket_of", "bucket_width", "digest_percentile", "value_at_rank"]

#: significant bits kept per value: relative error below 2**-(SIGNIFICANT_BITS - 1)
SIGNIFICANT_BITS = 8


def bucket_of(value_ns: int) -> int:
    """The bucket of a gap: its highest equivalent value, ns (>= value_ns).

    Values below ``2**SIGNIFICANT_BITS`` are their own bucket; a negative
    value (a clock that went back: never from one monotonic clock) counts as 0.
    """
    if value_ns < (1 << SIGNIFICANT_BITS):
        return max(value_ns, 0)
    shift = value_ns.bit_length() - SIGNIFICANT_BITS
    return ((value_ns >> shift) << shift) + (1 << shift) - 1


def bucket_width(value_ns: int) -> int:
    """The width of the bucket holding ``value_ns``, ns: how far apart two gaps can truly be
    while reading the same bucket (1 below ``2**SIGNIFICANT_BITS``: exact; else 1/256 to 1/128
    of the value)."""
    return 1 << max(0, max(value_ns, 1).bit_length() - SIGNIFICANT_BITS)


def digest_percentile(buckets: Mapping[int, int] | Iterable[tuple[int, int]],
                      percentile: float) -> int | None:
    """A percentile of a digest by nearest rank.

    Args:
        buckets: ``{bucket_of(gap): count}`` or its items.
        percentile: in (0, 100]; 100 is the largest bucket.

    Returns:
        The bucket value (ns) holding the nearest-rank sample, None for an
        empty digest.
    """
    items: list[tuple[int, int]] = sorted(buckets.items() if isinstance(buckets, Mapping) else buckets)
    total = sum(c for _, c in items)
    if total <= 0:
        return None
    return value_at_rank(items, max(1, math.ceil(percentile / 100 * total)))


def value_at_rank(items: Sequence[tuple[int, int]], rank: int) -> int:
    """The value holding the ``rank``-th sample (1-based) of sorted ``(value,
    count)`` pairs; the last value when ``rank`` is past the total.

    Raises:
        IndexError: ``items`` is empty.
    """
    seen = 0
    for value, count in items:
        seen += count
        if seen >= rank:
            return value
    return items[-1][0]
