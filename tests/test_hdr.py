"""Tests for hopbench.measure._hdr: the metric table and the typed hdrh facade."""

from __future__ import annotations

import math
import random
import re

import pytest
from hdrh.histogram import HdrHistogram

from hopbench._errors import ResultsError, UsageError
from hopbench.measure._hdr import SIGNIFICANT_FIGURES, Histogram
from hopbench.measure._metrics import METRICS

HOUR_NS = 3_600_000_000_000


def _samples(n: int, seed: int = 1) -> list[int]:
    rnd = random.Random(seed)
    # log-uniform over 1 us .. 100 s, the realistic span of hopbench times
    return [int(10 ** rnd.uniform(3, 11)) for _ in range(n)]


def test_metrics_table_units_and_ranges() -> None:
    expected = {
        "ttfb", "ttft", "ttft_content", "itl", "tpot", "e2e", "output_tokens_per_s",
        "keepalive_interval", "max_silence", "queue_delay", "schedule_lag", "loop_lag", "client_read_lag",
        "ttft_from_send", "e2e_from_send", "connect_wait", "tail", "cancel_delay", "request_write",
        # gateway overhead (docs/gateway-overhead.md)
        "request_delay", "first_event_delay", "added_ttft", "event_delay", "added_e2e",
        "upstream_silence", "injected_keepalive_interval", "client_silence_in_upstream_silence",
    }
    assert set(METRICS) == expected
    for name, spec in METRICS.items():
        assert spec.name == name
        if name == "output_tokens_per_s":
            assert (spec.unit, spec.divisor, spec.lowest, spec.highest) == ("tokens/s", 1000, 1, 10**12)
        else:
            assert (spec.unit, spec.divisor, spec.lowest, spec.highest) == ("ms", 1_000_000, 1, HOUR_NS)


def test_histogram_unknown_metric_raises() -> None:
    with pytest.raises(UsageError, match="unknown metric 'nope'"):
        Histogram("nope")


def test_histogram_zero_is_recorded_as_lowest() -> None:
    h = Histogram("itl")
    assert h.record(0) is True
    assert h.record(1) is True
    assert h.count == 2
    assert h.min == 1 and h.max == 1
    assert h.stats()["max"] == pytest.approx(1e-6)


def test_histogram_out_of_range_returns_false_and_records_nothing() -> None:
    h = Histogram("e2e")
    assert h.record(-1) is False
    assert h.record(HOUR_NS + 1) is False
    assert h.count == 0
    assert h.record(HOUR_NS) is True
    assert h.count == 1
    r = Histogram("output_tokens_per_s")
    assert r.record(10**12 + 1) is False
    assert r.record(10**12) is True


def test_histogram_is_lazy_until_first_record() -> None:
    h = Histogram("ttft")
    assert h._h is None
    assert h.count == 0
    h.encode()
    assert h._h is None
    h.record(5)
    assert h._h is not None
    h.reset()
    assert h._h is None and h.count == 0


def test_histogram_stats_match_hdrh() -> None:
    values = _samples(5000)
    h = Histogram("ttft")
    ref = HdrHistogram(1, HOUR_NS, SIGNIFICANT_FIGURES)
    for v in values:
        assert h.record(v)
        ref.record_value(v)
    for p in (0.0, 1.0, 50.0, 90.0, 99.0, 99.9, 100.0):
        assert h.percentile(p) == ref.get_value_at_percentile(p)
    assert h.mean == pytest.approx(ref.get_mean_value(), rel=1e-12)
    st = h.stats()
    assert st["count"] == 5000
    assert st["p99"] == ref.get_value_at_percentile(99.0) / 1e6
    assert st["max"] == ref.get_max_value() / 1e6
    assert st["min"] == ref.get_min_value() / 1e6
    # 3 significant figures: every statistic is within 0.1 % of the exact value
    assert st["max"] == pytest.approx(max(values) / 1e6, rel=1e-3)
    assert st["min"] == pytest.approx(min(values) / 1e6, rel=1e-3)
    assert st["mean"] == pytest.approx(sum(values) / len(values) / 1e6, rel=1e-3)


def test_histogram_empty_stats_are_none() -> None:
    st = Histogram("tpot").stats()
    assert st == {"count": 0, "min": None, "mean": None, "p50": None, "p90": None,
                  "p99": None, "p999": None, "max": None}


def test_histogram_encode_decode_roundtrip_is_exact() -> None:
    h = Histogram("e2e")
    for v in _samples(2000, seed=2):
        h.record(v)
    g = Histogram.decode("e2e", h.encode())
    assert g == h
    assert (g.count, g.min, g.max, g.mean) == (h.count, h.min, h.max, h.mean)
    assert g.stats() == h.stats()


def test_histogram_decode_rejects_garbage_and_other_range() -> None:
    with pytest.raises(ResultsError, match="not a valid hdrh encoding"):
        Histogram.decode("ttft", "not base64 at all!")
    other = HdrHistogram(1000, HOUR_NS, 3)
    other.record_value(5000)
    with pytest.raises(ResultsError, match="range/precision"):
        Histogram.decode("ttft", other.encode().decode())
    tps = Histogram("output_tokens_per_s")
    tps.record(5)
    with pytest.raises(ResultsError, match="range/precision"):
        Histogram.decode("ttft", tps.encode())


def test_histogram_add_equals_recording_everything() -> None:
    values = _samples(3000, seed=3)
    whole = Histogram("itl")
    parts = [Histogram("itl") for _ in range(3)]
    for i, v in enumerate(values):
        whole.record(v)
        parts[i % 3].record(v)
    merged = Histogram("itl")
    for p in parts:
        merged.add(Histogram.decode("itl", p.encode()))
    assert merged == whole
    # hdrh's own add() into an empty histogram reports min 0: ours keeps it
    assert merged.min == whole.min > 0


def test_histogram_add_rejects_other_metric() -> None:
    with pytest.raises(UsageError):
        Histogram("itl").add(Histogram("output_tokens_per_s"))


def _footer(text: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for key, val in re.findall(r"(Mean|StdDeviation|Max|Total count|Buckets|SubBuckets)\s*=\s*([\d.]+)", text):
        out[key] = float(val)
    return out


def test_histogram_hgrm_footer_matches_independent_values() -> None:
    values = _samples(4000, seed=4)
    h = Histogram("ttft")
    for v in values:
        h.record(v)
    text = h.hgrm_text()
    foot = _footer(text)
    n = len(values)
    mean_ms = sum(values) / n / 1e6
    std_ms = math.sqrt(sum((v / 1e6 - mean_ms) ** 2 for v in values) / n)
    assert foot["Total count"] == n
    assert foot["Mean"] == pytest.approx(mean_ms, rel=2e-3)
    # StdDeviation is scaled to ms (hdrh's own footer prints it in ns)
    assert foot["StdDeviation"] == pytest.approx(std_ms, rel=2e-3)
    assert foot["Max"] == pytest.approx(max(values) / 1e6, rel=1e-3, abs=1e-3)
    assert foot["Buckets"] == 32 and foot["SubBuckets"] == 2048
    lines = text.splitlines()
    assert lines[0].split() == ["Value", "Percentile", "TotalCount", "1/(1-Percentile)"]
    assert lines[1] == ""
    rows = [ln.split() for ln in lines[2:] if not ln.startswith("#")]
    assert rows[-1][1] == "1.000000000000" and int(rows[-1][2]) == n and len(rows[-1]) == 3
    assert all(len(r) == 4 for r in rows[:-1])
    counts = [int(r[2]) for r in rows]
    assert counts == sorted(counts)
    assert float(rows[-1][0]) == pytest.approx(foot["Max"])


def test_histogram_hgrm_rate_metric_in_tokens_per_s() -> None:
    h = Histogram("output_tokens_per_s")
    for rate in (40.0, 50.0, 60.0):
        h.record(int(rate * 1000))
    foot = _footer(h.hgrm_text())
    assert foot["Mean"] == pytest.approx(50.0, rel=1e-3)
    assert foot["Max"] == pytest.approx(60.0, rel=1e-3)
    assert h.stats()["p50"] == pytest.approx(50.0, rel=1e-3)


def test_histogram_record_matches_hdrh_record_value() -> None:
    rnd = random.Random(9)
    values = [rnd.randint(1, 5000) for _ in range(3000)]
    values += [int(10 ** rnd.uniform(0, 12.5)) for _ in range(3000)] + [1, 2047, 2048, HOUR_NS]
    h = Histogram("e2e")
    ref = HdrHistogram(1, HOUR_NS, SIGNIFICANT_FIGURES)
    for v in values:
        assert h.record(v)
        assert ref.record_value(v)
    assert h.encode() == ref.encode().decode()
    assert (h.min, h.max, h.count) == (ref.get_min_value(), ref.get_max_value(), ref.get_total_count())
    assert h.mean == pytest.approx(ref.get_mean_value(), rel=1e-12)


@pytest.mark.parametrize("metric", ["ttft", "output_tokens_per_s"])
def test_histogram_tables_match_hdrh(metric: str) -> None:
    """The per-index tables behind stats() and percentile() give, for every counts
    index of each layout, hdrh's own lowest, highest and median equivalent value."""
    from hopbench.measure._hdr import _tables
    from hopbench.measure._metrics import METRICS

    spec = METRICS[metric]
    ref = HdrHistogram(spec.lowest, spec.highest, SIGNIFICANT_FIGURES)
    lows, highs, mids = _tables(ref)
    assert len(lows) == ref.counts_len
    for i in range(ref.counts_len):
        v = ref.get_value_from_index(i)
        assert lows[i] == ref.get_lowest_equivalent_value(v) == v, i
        assert highs[i] == ref.get_highest_equivalent_value(v), i
        assert mids[i] == ref._hdr_median_equiv_value(v), i


def test_histogram_stats_match_hdrh_across_the_range() -> None:
    """Values from 1 ns to an hour (every bucket size): the percentiles of every
    whole percent, the mean and standard deviation are hdrh's."""
    rng = random.Random(7)
    h = Histogram("e2e")
    ref = HdrHistogram(1, HOUR_NS, SIGNIFICANT_FIGURES)
    for _ in range(20000):
        v = int(10 ** rng.uniform(0, 12.5))
        h.record(v)
        ref.record_value(v)
    for p in [0.0, 0.1, 99.9, 99.99, 100.0] + [float(k) for k in range(1, 100)]:
        assert h.percentile(p) == ref.get_value_at_percentile(p), p
    assert h.mean == pytest.approx(ref.get_mean_value(), rel=1e-12)
    assert h._mean_stddev(h._nonzero())[1] == pytest.approx(ref.get_stddev(), rel=1e-9)
    assert h.buckets() == [(ref.get_highest_equivalent_value(ref.get_value_from_index(i)), c)
                           for i, c in enumerate(ref.counts[:ref.counts_len]) if c]


@pytest.mark.parametrize("seed,n,ticks", [(1, 1, 5), (2, 2, 5), (3, 7, 5), (4, 1000, 5), (5, 20000, 5),
                                          (6, 3000, 1), (7, 3000, 10), (8, 50, 5)])
def test_percentile_rows_match_hdrh_iterator(seed: int, n: int, ticks: int) -> None:
    """The .hgrm rows are hdrh's PercentileIterator's: value, level and count, exactly
    (one value, a few, many over the whole range, repeated values, other tick counts)."""
    rng = random.Random(seed)
    h = Histogram("e2e")
    ref = HdrHistogram(1, HOUR_NS, SIGNIFICANT_FIGURES)
    for _ in range(n):
        v = int(10 ** rng.uniform(0, 12.5)) if seed % 2 else rng.choice([5, 5, 5, 1000, 123456789])
        h.record(v)
        ref.record_value(v)
    want = [(it.value_iterated_to, it.percentile_level_iterated_to, it.total_count_to_this_value)
            for it in ref.get_percentile_iterator(ticks)]
    assert h._percentile_rows(ticks) == want
    assert Histogram("e2e")._percentile_rows(ticks) == []


def test_histogram_record_n_is_n_records() -> None:
    a, b = Histogram("itl"), Histogram("itl")
    for v in (0, 5, 1_234_567):
        assert a.record_n(v, 7)
        for _ in range(7):
            b.record(v)
    assert a == b and a.count == 21
    assert not a.record_n(-1, 3) and a.count == 21 and a.record_n(9, 0) and a.count == 21
