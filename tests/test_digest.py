"""The per-stream ITL digest (hopbench.measure._digest): bounded, and never more than 1/128 off."""

from __future__ import annotations

import math
import random

from hopbench.measure._digest import bucket_of, digest_percentile
from hopbench.measure._meter import StreamMeter
from hopbench.protocols import ContentDelta


def test_small_values_are_exact_and_large_ones_within_one_128th_above() -> None:
    for v in range(0, 256):
        assert bucket_of(v) == v
    rng = random.Random(7)
    for _ in range(20_000):
        v = rng.randrange(256, 10**12)
        b = bucket_of(v)
        assert v <= b <= v + v / 128, (v, b)
        assert bucket_of(b) == b  # a bucket's value is its own bucket


def test_percentile_by_nearest_rank_matches_sorted_gaps_within_the_bucket_error() -> None:
    rng = random.Random(11)
    gaps = [rng.randrange(1_000, 500_000_000) for _ in range(5_001)]
    digest: dict[int, int] = {}
    for g in gaps:
        digest[bucket_of(g)] = digest.get(bucket_of(g), 0) + 1
    ordered = sorted(gaps)
    for p in (1.0, 50.0, 90.0, 99.0, 99.9, 100.0):
        exact = ordered[max(1, math.ceil(p / 100 * len(ordered))) - 1]
        got = digest_percentile(digest, p)
        assert got is not None and exact <= got <= exact + exact / 128, (p, exact, got)
    assert digest_percentile({}, 50.0) is None


def test_the_meters_digest_stays_bounded_however_long_the_stream() -> None:
    m = StreamMeter(0, 0, itl_digest=True)
    t = 0
    first = None
    rng = random.Random(3)
    for _ in range(50_000):  # gaps of 5-50 ms: one decade
        t += rng.randrange(5_000_000, 50_000_000)
        m.on_read(t)
        m.on_observations(t, [ContentDelta("text", 1)])
        first = t if first is None else first
    assert m.itl_count == 49_999 and m.itl_digest is not None
    # 128 buckets per power of two at most: a decade spans < 4 powers of two
    assert len(m.itl_digest) <= 4 * 128
    assert first is not None and m.itl_sum_ns == t - first  # the gaps' exact sum
    assert StreamMeter(0, 0).itl_digest is None  # not asked for: nothing kept
