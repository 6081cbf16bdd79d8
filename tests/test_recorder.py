"""Tests for hopbench.measure._recorder: recording, intervals, snapshots and merging."""

from __future__ import annotations

import json
import random

import pytest

from hopbench._errors import ResultsError, UsageError
from hopbench.measure._hdr import Histogram
from hopbench.measure._recorder import IntervalSnapshot, Recorder, Snapshot, merge

HOUR_NS = 3_600_000_000_000


def test_recorder_rejects_all_and_bad_scopes() -> None:
    with pytest.raises(UsageError, match='"all" is implied'):
        Recorder(["a", "all"])
    with pytest.raises(UsageError, match="unique"):
        Recorder(["a", "a"])
    with pytest.raises(UsageError):
        Recorder(["a,b"])
    with pytest.raises(UsageError):
        Recorder([""])
    r = Recorder(["a"])
    with pytest.raises(UsageError, match="unknown scope 'b'"):
        r.record("b", "ttft", 1)
    with pytest.raises(UsageError, match="record_global"):
        r.record("all", "ttft", 1)
    with pytest.raises(UsageError, match="unknown metric"):
        r.record("a", "nope", 1)
    with pytest.raises(UsageError):
        r.incr("all", "started")


def test_recorder_records_into_scope_and_all() -> None:
    r = Recorder(["a", "b"])
    r.record("a", "ttft", 10_000_000)
    r.record("b", "ttft", 20_000_000)
    r.record_global("loop_lag", 1000)
    r.incr("a", "started")
    r.incr("b", "started", 2)
    r.incr_global("workers_ready")
    s = r.snapshot()
    assert set(s.scopes) == {"a", "b", "all"}
    assert s.histogram("a", "ttft").count == 1
    assert s.histogram("b", "ttft").count == 1
    assert s.histogram("all", "ttft").count == 2
    assert s.histogram("all", "loop_lag").count == 1
    assert "loop_lag" not in s.scopes["a"].histograms
    assert s.counter("a", "started") == 1
    assert s.counter("all", "started") == 3
    assert s.counter("all", "workers_ready") == 1
    assert s.counter("a", "workers_ready") == 0


def test_recorder_zero_value_counts() -> None:
    r = Recorder(["a"])
    r.record("a", "itl", 0)
    r.record("a", "itl", 0)
    s = r.snapshot()
    assert s.histogram("a", "itl").count == 2
    assert s.counter("a", "out_of_range.itl") == 0


def test_recorder_out_of_range_is_counted_not_dropped() -> None:
    r = Recorder(["a"])
    r.record("a", "e2e", HOUR_NS + 1)
    r.record("a", "e2e", -5)
    r.record("a", "e2e", 1000)
    r.record_global("loop_lag", HOUR_NS * 2)
    s = r.snapshot()
    assert s.counter("a", "out_of_range.e2e") == 2
    assert s.counter("all", "out_of_range.e2e") == 2
    assert s.counter("all", "out_of_range.loop_lag") == 1
    assert s.histogram("a", "e2e").count == 1
    iv = r.take_interval(0, 1_000_000_000)
    assert iv.counter("a", "out_of_range.e2e") == 2
    assert iv.counter("all", "out_of_range.loop_lag") == 1


def test_recorder_interval_resets_and_cumulative_keeps() -> None:
    r = Recorder(["a"])
    for v in (1_000, 2_000, 3_000):
        r.record("a", "itl", v)
    r.incr("a", "completed")
    r.record_global("loop_lag", 500)
    iv1 = r.take_interval(0, 1_000_000_000)
    assert (iv1.start_ns, iv1.end_ns) == (0, 1_000_000_000)
    assert iv1.histogram("a", "itl").count == 3
    assert iv1.histogram("all", "itl").count == 3
    assert iv1.histogram("all", "loop_lag").count == 1
    assert iv1.counter("a", "completed") == 1
    r.record("a", "itl", 4_000)
    iv2 = r.take_interval(1_000_000_000, 2_000_000_000)
    assert iv2.histogram("a", "itl").count == 1
    assert iv2.histogram("all", "loop_lag").count == 0
    assert iv2.counter("a", "completed") == 0
    iv3 = r.take_interval(2_000_000_000, 3_000_000_000)
    assert iv3.scopes["a"].histograms == {} and iv3.scopes["all"].counters == {}
    s = r.snapshot()
    assert s.histogram("a", "itl").count == 4
    assert s.histogram("all", "itl").count == 4
    assert s.counter("all", "completed") == 1
    # cumulative == sum of the intervals, exactly
    summed = Histogram("itl")
    for iv in (iv1, iv2, iv3):
        summed.add(iv.histogram("all", "itl"))
    assert summed == s.histogram("all", "itl")


def test_recorder_snapshot_is_a_deep_copy() -> None:
    r = Recorder(["a"])
    r.record("a", "ttft", 5)
    r.incr("a", "started")
    s = r.snapshot()
    r.record("a", "ttft", 6)
    r.incr("a", "started")
    assert s.histogram("a", "ttft").count == 1
    assert s.counter("a", "started") == 1


def _feed(rec: Recorder, items: list[tuple[str, str, int]]) -> None:
    for scope, metric, value in items:
        rec.record(scope, metric, value)
        rec.incr(scope, "completed")


def test_snapshot_merge_equals_one_recorder() -> None:
    rnd = random.Random(7)
    metrics = ["ttft", "itl", "e2e", "output_tokens_per_s"]
    items = [
        (rnd.choice(["a", "b"]), rnd.choice(metrics), int(10 ** rnd.uniform(0, 11)))
        for _ in range(4000)
    ]
    one = Recorder(["a", "b"])
    _feed(one, items)
    workers = [Recorder(["a", "b"]) for _ in range(4)]
    for i, item in enumerate(items):
        _feed(workers[i % 4], [item])
        if i == 1000:
            workers[0].take_interval(0, 1)  # folding must not change totals
    # through JSON, as worker processes ship them
    shipped = [Snapshot.from_json(json.loads(json.dumps(w.snapshot().to_json()))) for w in workers]
    merged = Snapshot.merge(shipped)
    expected = one.snapshot()
    assert merged.scopes.keys() == expected.scopes.keys()
    for scope in ("a", "b", "all"):
        assert merged.scopes[scope].counters == expected.scopes[scope].counters
        assert merged.scopes[scope].histograms.keys() == expected.scopes[scope].histograms.keys()
        for m in metrics:
            assert merged.histogram(scope, m) == expected.histogram(scope, m)
            assert merged.histogram(scope, m).stats() == expected.histogram(scope, m).stats()
    assert merge([]).scopes == {}


def test_snapshot_from_json_rejects_bad_shapes() -> None:
    with pytest.raises(ResultsError, match="scopes"):
        Snapshot.from_json({"nope": 1})
    with pytest.raises(ResultsError, match="counters"):
        Snapshot.from_json({"scopes": {"a": {"counters": {"x": "1"}, "histograms": {}}}})
    with pytest.raises(ResultsError, match="unknown metric"):
        Snapshot.from_json({"scopes": {"a": {"counters": {}, "histograms": {"zz": "x"}}}})
    iv = IntervalSnapshot(1, 2, {})
    assert IntervalSnapshot.from_json(iv.to_json()) == iv


def test_snapshot_absent_histogram_and_counter_are_empty() -> None:
    s = Recorder(["a"]).snapshot()
    assert s.histogram("a", "ttft").count == 0
    assert s.histogram("zz", "ttft").count == 0
    assert s.counter("zz", "x") == 0


def test_recorder_sink_records_into_the_open_interval_and_counts_out_of_range() -> None:
    rec = Recorder(["a"])
    sink = rec.sink("a")
    sink("itl", 5)
    first = rec.take_interval(0, 1)
    sink("itl", 7)
    sink("itl", -1)  # out of range: counted, not recorded
    second = rec.take_interval(1, 2)
    assert first.histogram("a", "itl").count == 1 and second.histogram("a", "itl").count == 1
    assert second.histogram("all", "itl").count == 1
    assert second.counter("a", "out_of_range.itl") == second.counter("all", "out_of_range.itl") == 1
    assert rec.snapshot().histogram("a", "itl").count == 2
    with pytest.raises(UsageError, match="unknown scope"):
        rec.sink("b")
    with pytest.raises(UsageError, match="unknown scope"):
        rec.sink("all")


def _stream(rec: Recorder, scope: str, e2e_ns: int) -> None:
    """One completed stream as the meter records it: one synchronous step."""
    rec.incr(scope, "completed")
    rec.record(scope, "e2e", e2e_ns)


def test_recorder_folded_snapshot_counters_agree_with_its_histograms() -> None:
    """The checkpoint (``folded_snapshot``, taken in the publishing thread while the loop
    records on) pairs the counters and the histograms of one instant, the last detach:
    after a SIGKILL the checkpointed summary.json's e2e count equals its ``completed``."""
    rec = Recorder(["a", "b"])
    for i in range(5):
        _stream(rec, "a" if i % 2 else "b", (i + 1) * 1_000_000)
    rec.incr_global("dropped")
    detached = rec.detach_interval(0, 1_000_000_000)
    # the loop goes on between the detach and the fold (another thread folds)
    for i in range(7):
        _stream(rec, "a", 3_000_000)
    rec.fold(detached)
    for i in range(3):  # and between the fold and the checkpoint
        _stream(rec, "b", 4_000_000)
    snap = rec.folded_snapshot()
    for scope, done in (("a", 2), ("b", 3), ("all", 5)):
        assert snap.counter(scope, "completed") == done
        assert snap.histogram(scope, "e2e").count == done
    assert snap.counter("all", "dropped") == 1
    # out-of-range values: the counter and the histogram stay paired too
    rec.record("a", "e2e", 10**18)
    rec.fold(rec.detach_interval(1_000_000_000, 2_000_000_000))
    snap = rec.folded_snapshot()
    assert snap.counter("all", "completed") == 15 == snap.histogram("all", "e2e").count
    assert snap.counter("a", "out_of_range.e2e") == 1
    # the live snapshot has everything, folded or not
    assert rec.snapshot().counter("all", "completed") == 15
