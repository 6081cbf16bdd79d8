"""hopbench.report._series: report.html's time series folded into a bounded number of points
(issue 16 item 2), exact percentiles per bucket, rates over real interval lengths."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hopbench._errors import ResultsError
from hopbench.measure._hdr import Histogram
from hopbench.measure._recorder import ALL, IntervalSnapshot, ScopeSnapshot
from hopbench.driver._results import HLOG_NAME, ResultsWriter
from hopbench.report._series import (SERIES_PERCENTILES, bucket_ns_for, fold_hlog, fold_timeline, span_ns)

S = 1_000_000_000
MS = 1_000_000


def _hlog(tmp_path: Path, per_interval: list[list[int]], length_s: float = 1.0) -> tuple[Path, list[Histogram]]:
    """An intervals.hlog written by ResultsWriter: interval i holds ``per_interval[i]``
    as all.itl (ns), each interval as a warm-up line and a measured line (halves)."""
    w = ResultsWriter(tmp_path / "run")
    w.start({"started_at_unix_s": 1_700_000_000.0})
    hists = []
    for i, values in enumerate(per_interval):
        start, end = int(i * length_s * S), int((i + 1) * length_s * S)
        whole = Histogram("itl")
        whole.record_many(values)
        hists.append(whole)
        for part in (values[: len(values) // 2], values[len(values) // 2:]):
            h = Histogram("itl")
            h.record_many(part)
            scopes = {ALL: ScopeSnapshot({}, {"itl": h.encode()} if h.count else {})}
            w.write_interval(IntervalSnapshot(start, end, scopes))
    w.close()
    return tmp_path / "run" / HLOG_NAME, hists


def test_bucket_ns_fits_the_span_in_max_points() -> None:
    assert bucket_ns_for(60 * S, 720) == -(-60 * S // 720)  # shorter than an interval: one point each
    assert bucket_ns_for(3600 * S, 720) == 5 * S
    assert bucket_ns_for(0, 720) == 1
    with pytest.raises(ValueError, match="positive"):
        bucket_ns_for(S, 0)


def test_fold_hlog_short_run_keeps_every_interval_exactly(tmp_path: Path) -> None:
    path, hists = _hlog(tmp_path, [[(i + 1) * MS, (i + 2) * MS, 40 * MS, 7 * MS] for i in range(10)])
    points = fold_hlog(path, ["all.itl"], bucket_ns_for(span_ns(path, None), 720))["all.itl"]
    assert [(p.start_ns, p.end_ns, p.count) for p in points] == [(i * S, (i + 1) * S, 4) for i in range(10)]
    for p, h in zip(points, hists):
        assert p.values == tuple(h.percentile(q) / MS for q in SERIES_PERCENTILES)


def test_fold_hlog_long_run_is_bounded_and_each_bucket_exact(tmp_path: Path) -> None:
    """100 intervals folded into at most 8 points: each point's percentiles are those of
    the sum of its intervals' histograms (a mean of per-interval p99s would differ)."""
    per = [[(i % 7 + 1) * MS] * 50 + [(200 + i) * MS] * (i % 3) for i in range(100)]
    path, hists = _hlog(tmp_path, per)
    bucket = bucket_ns_for(span_ns(path, None), 8)
    points = fold_hlog(path, ["all.itl", "all.ttft"], bucket)["all.itl"]
    assert len(points) <= 8 and sum(p.count for p in points) == sum(len(v) for v in per)
    i = 0
    for p in points:
        acc = Histogram("itl")
        while i < len(hists) and i * S < p.end_ns:
            acc.add(hists[i])
            i += 1
        assert p.values == tuple(acc.percentile(q) / MS for q in SERIES_PERCENTILES)
    assert i == 100


def test_fold_hlog_cut_last_line_ignored_malformed_line_named(tmp_path: Path) -> None:
    path, _ = _hlog(tmp_path, [[MS] * 4, [2 * MS] * 4])
    text = path.read_text()
    path.write_text(text + "Tag=all.itl,2.000,1.000,1.0,HISTFAAAAC")  # a crash mid-write
    assert len(fold_hlog(path, ["all.itl"], S)["all.itl"]) == 2
    lines = text.splitlines()
    n = next(k for k, ln in enumerate(lines) if ln.startswith("Tag=")) + 1
    lines[n - 1] = "Tag=all.itl,0.000,1.000,1.0,not-base64"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ResultsError, match=rf"{HLOG_NAME}:{n}: malformed interval line"):
        fold_hlog(path, ["all.itl"], S)


def test_fold_timeline_sums_counts_and_weights_means_by_real_length(tmp_path: Path) -> None:
    # a late interval of 3 s between 1 s ones, folded in 5 s buckets
    recs = [{"start_ns": 0, "end_ns": S, "in_flight_mean": 2.0, "in_flight_now": 2, "cpu": 0.1,
             "completed": 4, "started": 4, "output_tokens": 40},
            {"start_ns": S, "end_ns": 4 * S, "in_flight_mean": 1.0, "in_flight_now": 1, "cpu": 0.5,
             "completed": 3, "started": 2, "output_tokens": 30},
            {"start_ns": 4 * S, "end_ns": 5 * S, "in_flight_mean": 0.0, "in_flight_now": 0, "cpu": 0.2,
             "completed": 1, "started": 0, "output_tokens": 10},
            {"start_ns": 5 * S, "end_ns": 6 * S, "in_flight_mean": 3.0, "in_flight_now": 3, "cpu": 0.3,
             "completed": 0, "started": 3, "output_tokens": 0}]
    path = tmp_path / "timeline.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    assert span_ns(None, path) == 6 * S
    first, second = fold_timeline(path, 5 * S)
    assert (first["start_ns"], first["end_ns"]) == (0, 5 * S)
    assert (first["completed"], first["started"], first["output_tokens"]) == (8, 6, 80)
    assert first["in_flight_mean"] == pytest.approx((2 * 1 + 1 * 3 + 0 * 1) / 5)
    assert first["cpu"] == pytest.approx((0.1 + 0.5 * 3 + 0.2) / 5)
    assert (first["cpu_max"], first["in_flight_now"]) == (0.5, 0)
    assert second == {"start_ns": 5 * S, "end_ns": 6 * S, "in_flight_mean": 3.0, "in_flight_now": 3,
                      "cpu": 0.3, "cpu_max": 0.3, "completed": 0, "started": 3, "output_tokens": 0}
    # one point per interval when the bucket is shorter than an interval: records unchanged
    # (but for cpu_max)
    assert [dict(r, cpu_max=None) for r in fold_timeline(path, S // 2)] == [dict(r, cpu_max=None) for r in recs]


def test_fold_timeline_malformed_line_named_last_line_cut_ignored(tmp_path: Path) -> None:
    path = tmp_path / "timeline.jsonl"
    path.write_text('{"start_ns": 0, "end_ns": 1}\n{"start_ns": 1, "end_n')
    assert len(fold_timeline(path, 1)) == 1
    path.write_text('{"start_ns": 0, "end_ns": 1}\n[1]\n{"start_ns": 1, "end_ns": 2}\n')
    with pytest.raises(ResultsError, match=r"timeline.jsonl:2: malformed timeline line"):
        fold_timeline(path, 1)
    assert fold_timeline(tmp_path / "missing.jsonl", 1) == []


def test_fold_timeline_non_utf8_line_named_last_line_cut_inside_a_character_ignored(tmp_path: Path) -> None:
    path = tmp_path / "timeline.jsonl"
    path.write_bytes(b'{"start_ns": 0, "end_ns": 1}\n{"start_ns": 1, "end_ns": 2, "x": "\xff"}\n'
                     b'{"start_ns": 2, "end_ns": 3}\n')
    with pytest.raises(ResultsError, match=r"timeline.jsonl:2: not UTF-8 text \(byte 36 of the line: 0xff\)"):
        fold_timeline(path, 1)
    with pytest.raises(ResultsError, match=r"timeline.jsonl:2: not UTF-8"):
        span_ns(None, path)
    path.write_bytes(b'{"start_ns": 0, "end_ns": 1}\n{"start_ns": 1, "end_ns": 2, "x": "caf\xc3')
    assert len(fold_timeline(path, 1)) == 1
