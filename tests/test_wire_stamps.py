"""Times from the wire: the meter's stamps, their error bounds, the percentile error
bounds and the rule that marks a figure (pure: synthetic stamps, no clock, no sockets)."""

from __future__ import annotations

import random
from typing import Any

from hopbench.measure._error_bound import (ERROR_MIN_NS, ERROR_SHARE, error_bound_warnings, error_bounds,
                                           uncertain)
from hopbench.measure._hdr import Histogram
from hopbench.measure._meter import StreamMeter
from hopbench.measure._rules import measure
from hopbench.measure._recorder import ALL, Recorder, Snapshot
from hopbench.measure._sinks import record_stream
from hopbench.protocols import ContentDelta, FirstContentToken, FirstToken, StreamEnd, StreamResult

_BUDGET_NS = 12_000_000_000
_MS = 1_000_000


class _Bounds:
    def __init__(self) -> None:
        self.got: list[tuple[str, int, int, int]] = []

    def __call__(self, metric: str, value: int, below: int, above: int, n: int) -> None:
        self.got += [(metric, value, below, above)] * n


def _token(m: StreamMeter, stamp: int, first: bool = False) -> None:
    obs = [FirstToken("text"), FirstContentToken("text")] if first else []
    m.on_observations(stamp, [*obs, ContentDelta("text", 1)])


def test_meter_kernel_stamp_is_the_event_time_not_the_read() -> None:
    m = StreamMeter(start_ns=0, sent_ns=0)
    assert m.on_headers(90 * _MS, rx_ns=10 * _MS) == 10 * _MS  # the head's bytes arrived at 10 ms
    # read 30 ms late (a busy loop): the first token is stamped when it reached the socket
    w = m.on_read(130 * _MS, lag_ns=30 * _MS, rx_ns=100 * _MS)
    assert w == 100 * _MS
    _token(m, w, first=True)
    w = m.on_read(121 * _MS + 30 * _MS, lag_ns=30 * _MS, rx_ns=120 * _MS)
    _token(m, w)
    m.on_observations(w, [StreamEnd("completed")])
    r = measure(m, 160 * _MS, "completed", "", StreamResult("completed", content_events=2),
                keepalive_budget_ns=_BUDGET_NS)
    assert (r.ttfb_ns, r.ttft_ns, r.e2e_ns) == (10 * _MS, 100 * _MS, 120 * _MS)
    assert r.itl_max_ns == 20 * _MS  # the gap on the wire, not the reads' (21 ms)
    assert r.bounds == () and (r.items_exact, r.items_bounded) == (2, 0)


def test_meter_earlier_events_of_one_read_are_bounded_by_the_previous_read() -> None:
    bounds = _Bounds()
    m = StreamMeter(start_ns=0, sent_ns=0, bounds=bounds)
    m.on_headers(10 * _MS, rx_ns=10 * _MS)
    w = m.on_read(41 * _MS, rx_ns=40 * _MS)  # one event: exact
    _token(m, w, first=True)
    # three events in one read (the client was late): only the last one's bytes carry the stamp
    w = m.on_read(100 * _MS, lag_ns=35 * _MS, rx_ns=90 * _MS, items=3)
    _token(m, w)
    _token(m, w)
    m.at_last_item()
    _token(m, w)
    assert (m.items_exact, m.items_bounded) == (2, 2)
    # each earlier event arrived between 40 ms (the previous read's stamp) and 90 ms
    m.close(m.last_byte_ns or 0)  # (the last run of alike ITL bounds goes over at close)
    # (in no particular order: the bounds are histograms; runs go over when they end)
    assert sorted(bounds.got) == sorted([("itl", 50 * _MS, 50 * _MS, 0), ("itl", 0, 50 * _MS, 50 * _MS),
                                         ("itl", 0, 0, 50 * _MS)])


def test_meter_earlier_events_of_a_read_that_waited_are_bounded_by_the_loop_turn() -> None:
    # tokens_per_s = 0: the whole answer in one write 150 ms after the head. The read waited
    # for it (the socket was empty), so none of its bytes arrived before the end of the loop's
    # I/O wait before the one that woke it (since_ns = 147 ms): the earlier events are known
    # to 3 ms, not to the 140 ms since the head's stamp
    bounds = _Bounds()
    m = StreamMeter(start_ns=0, sent_ns=0, bounds=bounds)
    m.on_headers(10 * _MS, rx_ns=10 * _MS)
    truth = [149 * _MS, 149 * _MS, 150 * _MS]  # when each event's bytes reached the socket
    w = m.on_read(152 * _MS, lag_ns=2 * _MS, rx_ns=150 * _MS, items=3, since_ns=147 * _MS)
    _token(m, w, first=True)
    _token(m, w)
    m.at_last_item()
    _token(m, w)
    assert w == 150 * _MS and m.first_token_bound_ns == 3 * _MS
    m.close(m.last_byte_ns or 0)  # (the last run of alike ITL bounds goes over at close)
    assert bounds.got == [("itl", 0, 3 * _MS, 3 * _MS), ("itl", 0, 0, 3 * _MS)]
    # a true bound: each event's true arrival lies in [stamp - bound, stamp]
    assert w - m.first_token_bound_ns <= truth[0] <= w
    got = [(w - below, w) for _, _, below, _ in bounds.got]
    assert all(lo <= t <= hi for (lo, hi), t in zip(got, truth[1:]))


def test_meter_a_floor_before_the_previous_stamp_or_past_the_read_changes_nothing_false() -> None:
    # since_ns earlier than the previous read's stamp: that stamp is the tighter floor
    a = StreamMeter(start_ns=0, sent_ns=0)
    a.on_headers(10 * _MS, rx_ns=10 * _MS)
    _token(a, a.on_read(100 * _MS, rx_ns=90 * _MS, items=2, since_ns=5 * _MS), first=True)
    assert a.first_token_bound_ns == 80 * _MS
    # since_ns past the stamp (the kernel's stamp converted to the runner's clock is
    # microseconds off): the events count as exact, never a negative bound
    b = StreamMeter(start_ns=0, sent_ns=0)
    b.on_headers(10 * _MS, rx_ns=10 * _MS)
    _token(b, b.on_read(100 * _MS, rx_ns=90 * _MS, items=2, since_ns=90 * _MS + 3_000), first=True)
    assert b.first_token_bound_ns == 0
    # without a kernel stamp the last item's bound is the lag, at most the time since the floor
    c = StreamMeter(start_ns=0, sent_ns=0)
    c.on_headers(10 * _MS, rx_ns=10 * _MS)
    _token(c, c.on_read(100 * _MS, lag_ns=30 * _MS, since_ns=95 * _MS), first=True)
    assert c.first_token_bound_ns == 5 * _MS


def test_meter_body_end_is_its_last_bytes_arrival_exact_with_a_kernel_stamp() -> None:
    m = StreamMeter(start_ns=0, sent_ns=0)
    m.on_headers(10 * _MS, rx_ns=10 * _MS)
    _token(m, m.on_read(100 * _MS, rx_ns=90 * _MS), first=True)
    # the chunked terminator's read, stamped 95 ms; the read loop ended at 120 ms
    assert m.on_body_end(120 * _MS, rx_ns=95 * _MS) == 95 * _MS and m.body_end_bound_ns == 0
    # without a kernel stamp: the loop time, bounded back to the latest read's bytes' earliest
    # arrival (its stamp 100 ms less its 30 ms lag: the terminator came with or after them)
    n = StreamMeter(start_ns=0, sent_ns=0)
    n.on_headers(10 * _MS)
    _token(n, n.on_read(100 * _MS, lag_ns=30 * _MS), first=True)
    assert n.on_body_end(120 * _MS) == 120 * _MS and n.body_end_bound_ns == 50 * _MS


def test_meter_without_kernel_stamps_the_loop_time_is_bounded_by_the_client_lag() -> None:
    bounds = _Bounds()
    m = StreamMeter(start_ns=0, sent_ns=0, bounds=bounds)
    m.on_headers(10 * _MS, lag_ns=2 * _MS)
    w = m.on_read(50 * _MS, lag_ns=4 * _MS)  # httpx's transport, TLS: no kernel stamp
    assert w == 50 * _MS
    _token(m, w, first=True)
    w = m.on_read(52 * _MS, lag_ns=30 * _MS)  # the lag is more than the time since the last read
    _token(m, w)
    m.on_observations(w, [StreamEnd("completed")])
    r = measure(m, 60 * _MS, "completed", "", StreamResult("completed", content_events=2),
                keepalive_budget_ns=_BUDGET_NS)
    assert ("ttfb", 10 * _MS, 2 * _MS, 0) in r.bounds
    assert ("ttft", 50 * _MS, 4 * _MS, 0) in r.bounds
    assert ("e2e", 52 * _MS, 2 * _MS, 0) in r.bounds  # at most back to the previous read's stamp
    m.close(m.last_byte_ns or 0)  # (the last run of alike ITL bounds goes over at close)
    assert bounds.got == [("itl", 2 * _MS, 2 * _MS, 4 * _MS)]
    assert (r.items_exact, r.items_bounded) == (0, 2)  # loop times are never exact


def test_meter_a_read_that_ends_inside_an_event_stamps_none_exactly() -> None:
    m = StreamMeter(start_ns=0, sent_ns=0)
    m.on_headers(10 * _MS, rx_ns=10 * _MS)
    w = m.on_read(30 * _MS, rx_ns=25 * _MS, tail=False)  # the event's bytes and part of the next
    _token(m, w, first=True)
    assert m.first_token_bound_ns == 15 * _MS and (m.items_exact, m.items_bounded) == (0, 1)


def test_meter_kernel_stamp_is_kept_between_the_previous_stamp_and_the_read() -> None:
    m = StreamMeter(start_ns=0, sent_ns=5 * _MS)
    assert m.on_headers(10 * _MS, rx_ns=1 * _MS) == 5 * _MS  # not before the send
    assert m.on_read(20 * _MS, rx_ns=25 * _MS) == 20 * _MS  # not after the read


def test_meter_records_the_client_read_lag_of_every_read() -> None:
    rec = Recorder(["s"])
    m = StreamMeter(start_ns=0, sent_ns=0, sink=rec.sink("s"))
    m.on_headers(1 * _MS)
    for i, lag in enumerate((0, 3 * _MS, 7 * _MS)):
        m.on_read((i + 2) * 10 * _MS, lag_ns=lag)
    h = rec.snapshot().histogram("s", "client_read_lag")
    assert h.count == 3 and 6.99 * _MS <= h.max <= 7.01 * _MS


def _brute(values: list[tuple[int, int, int]], p: float) -> tuple[int, int]:
    """The p-th percentile of the lower and of the upper bounds, by sorting (nearest rank)."""
    n = len(values)
    k = max(int(p * n / 100 + 0.5), 1) - 1
    lows = sorted(v - b for v, b, _ in values)
    highs = sorted(v + a for v, _, a in values)
    return lows[k], highs[k]


def test_error_bounds_hold_the_true_percentile_between_them() -> None:
    rnd = random.Random(36)
    rec = Recorder(["s"])
    samples: list[tuple[int, int, int]] = []
    for _ in range(5_000):
        v = rnd.randint(1 * _MS, 40 * _MS)
        below = rnd.choice((0, 0, 0, rnd.randint(0, 20 * _MS)))
        above = rnd.choice((0, 0, rnd.randint(0, 5 * _MS)))
        rec.record("s", "event_delay", v)
        if below or above:
            rec.record_bound("s", "event_delay", v, below, above)
        samples.append((v, below, above))
    snap = Snapshot.from_json(rec.snapshot().to_json())  # as a worker ships it
    reported = snap.histogram("s", "event_delay")
    eb = error_bounds("event_delay", reported, snap.scopes["s"].bounds)
    for key, p in (("p50", 50.0), ("p90", 90.0), ("p99", 99.0), ("p999", 99.9)):
        lo, hi = _brute(samples, p)
        rep = reported.percentile(p)
        want = max(rep - lo, hi - rep) / _MS
        assert abs(eb[key] - want) <= 0.002 * max(rep, hi) / _MS + 0.001, (key, eb[key], want)
    # "all" holds the same bounds; exact samples alone have none
    assert error_bounds("event_delay", snap.histogram(ALL, "event_delay"), snap.scopes[ALL].bounds) == eb
    exact = Recorder(["s"])
    exact.record("s", "itl", 5 * _MS)
    s2 = exact.snapshot()
    assert error_bounds("itl", s2.histogram("s", "itl"), s2.scopes["s"].bounds) == {
        "p50": 0.0, "p90": 0.0, "p99": 0.0, "p999": 0.0}
    assert error_bounds("itl", Histogram("itl"), {}) == {}


def test_bound_histograms_merge_across_workers() -> None:
    a, b = Recorder(["s"]), Recorder(["s"])
    for rec, v in ((a, 10 * _MS), (b, 30 * _MS)):
        rec.record("s", "ttft", v)
        rec.bound_sink("s")("ttft", v, 8 * _MS, 0, 1)
    merged = Snapshot.merge([a.snapshot(), b.snapshot()])
    assert Histogram.decode("ttft", merged.scopes["s"].bounds["ttft~lo"]).count == 2
    eb = error_bounds("ttft", merged.histogram("s", "ttft"), merged.scopes["s"].bounds)
    assert 7.9 <= eb["p99"] <= 8.1


def test_record_stream_keeps_the_bounds_of_a_streams_figures() -> None:
    rec = Recorder(["s"])
    m = StreamMeter(start_ns=0, sent_ns=0, sink=rec.sink("s"), bounds=rec.bound_sink("s"))
    m.on_headers(10 * _MS, rx_ns=10 * _MS)
    w = m.on_read(60 * _MS, rx_ns=50 * _MS, items=3)  # the whole answer in one read
    _token(m, w, first=True)
    _token(m, w)
    m.at_last_item()
    m.on_observations(w, [StreamEnd("completed")])
    r = measure(m, 61 * _MS, "completed", "", StreamResult("completed", content_events=2),
                keepalive_budget_ns=_BUDGET_NS)
    record_stream(rec, "s", r)
    snap = rec.snapshot()
    assert snap.counter("s", "wire.items_exact") == 1 and snap.counter("s", "wire.items_bounded") == 2
    eb = error_bounds("ttft", snap.histogram("s", "ttft"), snap.scopes["s"].bounds)
    assert 39.9 <= eb["p50"] <= 40.1  # the first token came between the head (10 ms) and 50 ms
    e2e = error_bounds("e2e", snap.histogram("s", "e2e"), snap.scopes["s"].bounds)
    assert e2e["p50"] == 0.0  # the terminal event was the read's last bytes


def test_uncertain_needs_both_the_share_and_the_floor() -> None:
    assert ERROR_SHARE == 0.10 and ERROR_MIN_NS == 1 * _MS
    stats = {"p50": 3.6, "p90": 5.0, "p99": 25.5, "p999": 0.5,
             "error_bound_ms": {"p50": 0.2, "p90": 1.2, "p99": 21.8, "p999": 0.4}}
    # p50: under 1 ms; p90: over 1 ms and over 10 %; p99 too; p999: 80 % but under 1 ms
    assert uncertain(stats) == [("p90", 5.0, 1.2), ("p99", 25.5, 21.8)]
    assert uncertain({"p50": 5000.0, "error_bound_ms": {"p50": 20.0}}) == []  # 20 ms on 5 s: 0.4 %
    assert uncertain({"p50": 3.0}) == []


def test_error_bound_warnings_name_the_figure_the_bound_and_the_cure() -> None:
    metrics = {"event_delay": {"p50": 3.6, "p90": 5.0, "p99": 25.5, "p999": 30.0,
                               "error_bound_ms": {"p50": 0.1, "p90": 0.2, "p99": 21.8, "p999": 26.0}},
               "ttft": {"p50": 100.0, "p90": 101.0, "p99": 120.0, "p999": 130.0,
                        "error_bound_ms": {"p50": 0.0, "p90": 0.0, "p99": 0.5, "p999": 3.0}}}
    w = error_bound_warnings(metrics, scope="chat")
    assert len(w) == 1
    assert "chat event_delay p999 30.000 ms" in w[0] and "+-26.000 ms" in w[0] and "also p99" in w[0]
    # one cure (hopbench._advice: "--workers ... or a quieter machine" gave two)
    assert "--workers" in w[0] and "quieter machine" not in w[0]


# -- the burst rule with kernel stamps on and off (issue 36, item 3) ---------------------------------

def _burst_meter(*, rx: bool, lag_ms: float, head_ms: float = 5, arrived_ms: float = 90,
                 read_ms: float = 120) -> StreamMeter:
    """A completed 6-event stream whose events all came in one read at ``read_ms``; with
    ``rx`` the kernel says its last bytes arrived at ``arrived_ms``."""
    m = StreamMeter(0, 0)
    m.on_headers(head_ms * _MS, rx_ns=int(head_ms * _MS) if rx else 0)
    w = m.on_read(int(read_ms * _MS), lag_ns=int(lag_ms * _MS), rx_ns=int(arrived_ms * _MS) if rx else 0, items=7)
    _token(m, w, first=True)
    for _ in range(4):
        _token(m, w)
    _token(m, w)
    m.at_last_item()
    m.on_observations(w, [StreamEnd("completed")])
    return m


def _verdict(m: StreamMeter) -> tuple[bool, bool, int | None]:
    r = measure(m, 121 * _MS, "completed", "", StreamResult("completed", content_events=6, events={"text": 6, "reasoning": 0, "tool": 0, "refusal": 0}),
                keepalive_budget_ns=_BUDGET_NS)
    return r.proxy_buffering_suspected, r.client_lagged, r.burst_held_ns


def test_burst_the_clients_lag_explains_is_client_lagged_with_and_without_kernel_stamps() -> None:
    # the client's loop served the read 30 ms late: the events piled up in its own socket
    # (with a kernel stamp its lateness is at least read - arrival; the probe saw 30 ms)
    for rx in (True, False):
        assert _verdict(_burst_meter(rx=rx, lag_ms=30)) == (False, True, None), rx


def test_burst_held_is_counted_to_its_arrival_on_the_wire() -> None:
    # an on-time client (lag 0.2 ms): a held burst is flagged, its hold counted to the kernel's
    # stamp of its arrival (85 ms after the head), not to the read's loop time (115 ms)
    assert _verdict(_burst_meter(rx=True, lag_ms=0.2)) == (True, False, 85 * _MS)
    # without kernel stamps: the read's loop time less the client's lag
    assert _verdict(_burst_meter(rx=False, lag_ms=0.2)) == (True, False, 115 * _MS - 200_000)
    # a burst that arrived 3 ms after the head (an unpaced origin) is never flagged, though the
    # read came 100 ms later and the probe missed it: the kernel stamp says when it arrived
    assert _verdict(_burst_meter(rx=True, lag_ms=0.2, arrived_ms=8, read_ms=108)) == (False, False, None)


def test_scope_error_bounds_lists_each_time_metric_with_its_bounds() -> None:
    from hopbench.measure._error_bound import scope_error_bounds

    rec = Recorder(["s"])
    for v in range(1, 101):
        rec.record("s", "itl", v * _MS // 10)  # 0.1 .. 10 ms
    rec.record_bound("s", "itl", 10 * _MS, 9 * _MS, 0)  # the top sample: anywhere from 1 ms
    rec.record("s", "output_tokens_per_s", 50_000)  # not a time: no bound
    snap = rec.snapshot().scopes["s"]
    got = scope_error_bounds(snap.histograms, snap.bounds)
    assert list(got) == ["itl"]
    e = got["itl"]
    # one sample moved down shifts every rank by at most one: 0.1 ms apart here
    assert all(0.09 <= e["error_bound_ms"][k] <= 0.11 for k in ("p50", "p90", "p99", "p999"))
    # p999 of 100 samples is the top one: 10 ms, known only down to the 99th (9.9 ms) once it may be 1 ms
    assert abs(e["p999"] - 10.0) < 0.01 and abs(e["error_bound_ms"]["p999"] - 0.1) < 0.01
    assert error_bound_warnings(got) == []  # 0.1 ms: under the 1 ms floor


# -- summary.json and the run's warnings ----------------------------------------------------------

def _bounded_snapshot() -> Snapshot:
    rec = Recorder(["chat"])
    # ttft 100 .. 110 ms, the first half exact, the second known only to 20 ms below (read late);
    # upstream_silence has no bounds kept (the silences between the upstream's writes)
    for i in range(100):
        rec.record("chat", "ttft", 100 * _MS + i * _MS // 10)
        rec.record("chat", "upstream_silence", 3 * _MS)
        if i >= 50:
            rec.record_bound("chat", "ttft", 100 * _MS + i * _MS // 10, 20 * _MS, 0)
    return rec.snapshot()


def test_summary_writes_error_bound_ms_beside_each_bounded_time_figure() -> None:
    from hopbench.driver._results import summary_scopes

    scopes = summary_scopes(_bounded_snapshot())
    for name in ("chat", "all"):
        m = scopes[name]["metrics"]
        eb = m["ttft"]["error_bound_ms"]
        assert list(eb) == ["p50", "p90", "p99", "p999"]
        # the true p50 may be as low as 89.9 ms (the bounded half all 20 ms earlier), the true p99
        # as low as 104.8 ms (the exact half's top): ranks move only as far as the bounds take them
        assert abs(eb["p50"] - 15.0) < 0.1 and abs(eb["p99"] - 5.0) < 0.1, eb
        assert "error_bound_ms" not in m["upstream_silence"]  # its bounds are not kept: absent, never 0


def test_run_warnings_name_an_uncertain_tail_whatever_the_loop_lag() -> None:
    from hopbench.config._profile import parse_profile
    from hopbench.driver._warnings import run_warnings
    from hopbench.engine._runner import RunStats

    profile = parse_profile('[run]\nrequests = 100\n[load]\nconcurrency = 2\n[target]\nurl = "http://x"\n'
                            '[[scenario]]\nname = "chat"\nprotocol = "chat"\nmodel = "m"\n', env={})
    w = [x for x in run_warnings(profile, RunStats(), _bounded_snapshot()) if x.startswith("error bound:")]
    # p50: 15 ms on 104.9 (over 10 % and 1 ms); p90 .. p999: 5 ms on ~109 ms, under 10 %
    assert len(w) == 1 and "all ttft p50 104.923 ms is known only to +-15.008 ms" in w[0] and "--workers" in w[0], w


def test_summary_table_marks_an_uncertain_percentile_and_keys_the_mark() -> None:
    from rich.console import Console

    from hopbench.measure._error_bound import UNCERTAIN_MARK
    from hopbench.views._summary_table import render_summary

    entry = {"count": 100, "p50": 3.6, "p90": 5.0, "p99": 25.5, "p999": 30.0, "max": 31.0, "unit": "ms",
             "error_bound_ms": {"p50": 0.1, "p90": 0.2, "p99": 21.8, "p999": 26.0}}
    summary = {"complete": True, "warnings": [], "scopes": {"all": {"counters": {"started": 1, "completed": 1},
                                                                    "metrics": {"ttft": entry}}}}
    console = Console(record=True, width=100)
    render_summary(summary, console)
    text = console.export_text()
    assert "25.50" + UNCERTAIN_MARK in text and "30.00" + UNCERTAIN_MARK in text and "3.600" + UNCERTAIN_MARK not in text
    assert "error bound over 10 % of the value and over 1 ms" in text
    entry["error_bound_ms"] = {"p50": 0.0, "p90": 0.0, "p99": 0.0, "p999": 0.0}
    console = Console(record=True, width=100)
    render_summary(summary, console)
    assert UNCERTAIN_MARK not in console.export_text()


def test_meter_a_bound_under_the_floor_counts_as_exact() -> None:
    from hopbench.measure._meter import BOUND_FLOOR_NS

    bounds = _Bounds()
    m = StreamMeter(start_ns=0, sent_ns=0, bounds=bounds)
    m.on_headers(10 * _MS)
    for i in range(1, 4):  # loop-time stamps of a quiet machine: 50 us of lag
        _token(m, m.on_read(10 * _MS + i * 20 * _MS, lag_ns=BOUND_FLOOR_NS // 2), first=i == 1)
    w = m.on_read(80 * _MS, lag_ns=2 * BOUND_FLOOR_NS)  # this one's bound counts
    _token(m, w)
    m.close(m.last_byte_ns or 0)  # (the last run of alike ITL bounds goes over at close)
    assert bounds.got == [("itl", 10 * _MS, 2 * BOUND_FLOOR_NS, 0)]
    assert m.items_bounded == 4  # still not exact stamps: loop times


def test_meter_hands_the_read_lags_over_in_batches() -> None:
    from hopbench.measure._meter import BOUND_FLOOR_NS, LAG_BATCH

    got: list[tuple[list[int], int]] = []
    m = StreamMeter(start_ns=0, sent_ns=0, sink=None, read_lags=lambda v, z: got.append((list(v), z)))
    m.on_headers(1)
    for i in range(LAG_BATCH + 3):  # every tenth read late by 1 ms, the others on time (50 us)
        m.on_read(10 + i, lag_ns=_MS if i % 10 == 0 else BOUND_FLOOR_NS // 2)
    assert [(len(v), z) for v, z in got] == [(7, LAG_BATCH - 7)]
    m.close(10_000)
    assert [(len(v), z) for v, z in got] == [(7, LAG_BATCH - 7), (0, 3)] and got[0][0] == [_MS] * 7
    rec = Recorder(["s"])
    m = StreamMeter(start_ns=0, sent_ns=0, read_lags=rec.many_sink("s", "client_read_lag"))
    m.on_read(5, lag_ns=-3)  # on time: 0
    m.on_read(6, lag_ns=3 * _MS)
    m.close(7)
    h = rec.snapshot().histogram(ALL, "client_read_lag")
    assert h.count == 2 and h.min <= 1 and 2.99 * _MS <= h.max <= 3.01 * _MS


def test_overhead_line_carries_each_content_events_bound() -> None:
    from hopbench.measure._lines import overhead_line

    m = StreamMeter(start_ns=0, sent_ns=0)
    m.event_chars, m.event_read_ns = [], []  # gateway overhead (the runner sets them)
    m.on_headers(10 * _MS, rx_ns=10 * _MS)
    w = m.on_read(50 * _MS, rx_ns=40 * _MS, items=2)
    _token(m, w, first=True)
    m.at_last_item()
    _token(m, w)
    line = overhead_line(m, 0)
    assert line["content_read_ns"] == [40 * _MS, 40 * _MS]
    assert line["content_bound_ns"] == [30 * _MS, 0] and line["first_read_bound_ns"] == 30 * _MS


def test_meter_body_bytes_read_with_the_head_share_its_stamp_and_bound_both() -> None:
    """One recv carried the head and the first events (a late client, an unpaced server): its
    one kernel stamp is of the latest bytes, so the head and every event but the last are
    bounded back to the send (docs/results/units.md, "Times from the wire")."""
    bounds = _Bounds()
    m = StreamMeter(start_ns=0, sent_ns=2 * _MS, bounds=bounds)
    m.event_chars, m.event_read_ns = [], []
    m.on_headers(60 * _MS, rx_ns=50 * _MS)
    w = m.on_read(60 * _MS, rx_ns=50 * _MS, items=2)  # the rest of that recv (the same stamp)
    _token(m, w, first=True)
    m.at_last_item()
    _token(m, w)
    assert w == 50 * _MS and m.headers_bound_ns == 48 * _MS and m.first_read_bound_ns == 48 * _MS
    assert m.event_bound_ns == [48 * _MS, 0]
    w = m.on_read(80 * _MS, rx_ns=70 * _MS)  # a recv of its own: after the previous stamp
    _token(m, w)
    m.close(m.last_byte_ns or 0)  # (the last run of alike ITL bounds goes over at close)
    assert bounds.got == [("itl", 0, 0, 48 * _MS)]  # the next gap is between exact stamps: none
    assert m.items_exact == 2 and m.items_bounded == 1


def test_meter_the_head_read_on_time_with_its_first_bytes_shares_their_exact_stamp() -> None:
    """The same recv carried the head and the first event, served within 0.1 ms of its kernel
    stamp by a loop that was not lagging: the client was waiting on the socket, so the head came
    with those bytes (a server writes its head with its first chunk) and nothing is bounded. A
    late recv (the test above) bounds both back to the send. (A fresh tester's finding: every
    smoke run warned that TTFB was known only to +-TTFB.)"""
    bounds = _Bounds()
    m = StreamMeter(start_ns=0, sent_ns=2 * _MS, bounds=bounds)
    m.event_chars, m.event_read_ns = [], []
    m.on_headers(50 * _MS + 20_000, rx_ns=50 * _MS)  # read 20 us after its bytes arrived
    w = m.on_read(50 * _MS + 20_000, rx_ns=50 * _MS, items=1)
    _token(m, w, first=True)
    assert w == 50 * _MS and m.headers_bound_ns == 0 and m.first_read_bound_ns == 0
    assert m.event_bound_ns == [0] and m.items_exact == 1 and m.items_bounded == 0


def test_error_bound_warning_of_a_gap_inside_one_read_is_not_a_bare_zero() -> None:
    # ITL of events that shared a read is 0 (HDR keeps 1 ns): "<0.001", as the table prints it
    metrics = {"itl": {"p50": 0.000001, "p90": 0.000001, "p99": 0.000001, "p999": 0.000001,
                       "error_bound_ms": {"p50": 0.0, "p90": 0.0, "p99": 0.0, "p999": 2.5}}}
    (w,) = error_bound_warnings(metrics)
    assert "all itl p999 <0.001 ms is known only to -<0.001/+2.500 ms" in w and "0.000 ms" not in w


def test_error_bound_warning_of_a_bound_over_the_value_gives_its_two_sides() -> None:
    # a new user read "itl p999 41.2 ms ... +-192 ms" as a time that may be negative: the bound
    # is the larger side, and the lower one is at most the value
    metrics = {"itl": {"p50": 12.0, "p90": 14.0, "p99": 20.0, "p999": 41.2,
                       "error_bound_ms": {"p50": 0.0, "p90": 0.0, "p99": 0.0, "p999": 192.0}}}
    (w,) = error_bound_warnings(metrics)
    assert "all itl p999 41.200 ms is known only to -41.200/+192.000 ms" in w and "+-" not in w, w
    metrics["itl"]["error_bound_ms"]["p999"] = 41.2  # at the value: one figure either side
    (w,) = error_bound_warnings(metrics)
    assert "is known only to +-41.200 ms" in w, w


def test_meter_hands_a_run_of_alike_itl_bounds_over_once_and_the_histograms_are_the_same() -> None:
    # an unpaced stream: 50 events in one read, then 50 in the next. The events inside a read
    # have the same gap (0) and bounds: one call with their count, not 49 (the recorder wrote 6
    # histogram records an event for them: benchmarks/bench_instructions.py, +28 % instructions
    # an event unpaced); the bound histograms come out as one call per sample makes them
    calls: list[tuple[str, int, int, int, int]] = []
    rec, ref = Recorder(["s"]), Recorder(["s"])
    sink = rec.bound_sink("s")

    def counting(metric: str, value: int, below: int, above: int, n: int) -> None:
        calls.append((metric, value, below, above, n))
        sink(metric, value, below, above, n)

    m = StreamMeter(start_ns=0, sent_ns=0, bounds=counting)
    m.on_headers(10 * _MS, rx_ns=10 * _MS)
    for k, (t, rx) in enumerate(((60 * _MS, 50 * _MS), (95 * _MS, 90 * _MS))):
        w = m.on_read(t, rx_ns=rx, items=50)
        for i in range(50):
            if i == 49:
                m.at_last_item()
            _token(m, w, first=k == 0 and i == 0)
    m.close(100 * _MS)
    assert sum(n for *_, n in calls) == 99 and len(calls) == 5, calls  # 99 gaps in 5 calls
    for metric, value, below, above, n in calls:
        for _ in range(n):
            ref.record_bound("s", metric, value, below, above)
    assert rec.snapshot().scopes["s"].bounds == ref.snapshot().scopes["s"].bounds
    assert rec.snapshot().scopes["all"].bounds == ref.snapshot().scopes["all"].bounds


def test_meter_records_a_reads_gap_0_samples_once_in_that_reads_interval() -> None:
    # 5 events in one read that is not exactly stamped (it does not end at an event
    # boundary): every one shares the read's bound, so the 4 after the first are gap 0 with
    # bounds (read's bound, read's bound). The meter counts them and end_read records them
    # at once, into the interval the read came in; nothing is lost or counted twice.
    rec = Recorder(["s"])
    m = StreamMeter(0, 0, rec.sink("s"), itl_digest=True, bounds=rec.bound_sink("s"))
    m.on_headers(10 * _MS, rx_ns=10 * _MS)
    w = m.on_read(41 * _MS, rx_ns=40 * _MS)
    _token(m, w, first=True)
    w = m.on_read(100 * _MS, lag_ns=35 * _MS, rx_ns=90 * _MS, items=5, tail=False)
    for _ in range(5):
        _token(m, w)
    assert m.zero_run == 4 and m.itl_count == 5
    m.end_read()
    assert m.zero_run == 0
    first = rec.detach_interval(0, 100 * _MS).histograms["s"]["itl"]
    assert (first.count, first.min) == (5, 1)  # 0 records as the lowest value, 1 ns
    assert abs(first.max - 50 * _MS) <= 50 * _MS // 1000  # (3 significant digits)
    assert first.percentile(80) == 1
    w = m.on_read(120 * _MS, rx_ns=120 * _MS)  # the next read: its own interval
    _token(m, w)
    m.close(130 * _MS)
    second = rec.detach_interval(100 * _MS, 130 * _MS).histograms["s"]["itl"]
    assert second.count == 1
    assert m.itl_digest is not None and sum(m.itl_digest.values()) == m.itl_count == 6
    bnd = rec.snapshot().scopes["s"].bounds
    x, lo, hi = (Histogram.decode("itl", bnd[f"itl~{k}"]) for k in ("x", "lo", "hi"))
    # the first event's gap (50 ms, from the previous read's exact stamp) and the 4 gap-0 ones
    # are bounded; the next read's gap (90 ms read's bound below, exact above) is too
    assert (x.count, lo.count, hi.count) == (6, 6, 6)
    # the gap-0 samples: up to the read's bound (with the per-request ITL digest on too: it
    # once overwrote the previous event's bound with its bucket)
    assert abs(hi.percentile(50) - 50 * _MS) <= 50 * _MS // 1000


def test_meter_without_end_read_records_a_reads_gap_0_samples_at_the_next_read() -> None:
    got: list[tuple[str, int, int]] = []
    m = StreamMeter(0, 0, lambda metric, v, n=1: got.append((metric, v, n)))
    w = m.on_read(10 * _MS, items=3)
    for _ in range(3):
        _token(m, w)
    itl = [g for g in got if g[0] == "itl"]
    assert itl == [] and m.zero_run == 2
    m.on_read(20 * _MS)
    assert [g for g in got if g[0] == "itl"] == [("itl", 0, 2)] and m.zero_run == 0


def test_summary_says_what_share_of_its_items_had_an_exact_stamp() -> None:
    """Issue 36 item 1: "the run says what share of its events carried an exact time". A new
    user found it only in summary.json's counters (and a httpx-transport run, 0 exact, said
    nothing): the terminal's ``stamps:`` line says it."""
    from hopbench.views._summary_table import stamps_phrase

    def summary(exact: int, bounded: int) -> dict[str, Any]:
        return {"scopes": {"all": {"counters": {"wire.items_exact": exact, "wire.items_bounded": bounded}}}}

    assert stamps_phrase(summary(973, 27)) == ("97.3% of 1,000 SSE items exact (the kernel's receive stamp of "
                                               "their read), 27 bounded (earlier items of a read: error_bound_ms)")
    assert stamps_phrase(summary(0, 6716)).startswith("none of 6,716 SSE items had a kernel receive stamp "
                                                     "(transport httpx, TLS, or a platform without them)")
    assert stamps_phrase(summary(0, 0)) == "" and stamps_phrase({}) == ""
