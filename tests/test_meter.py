"""StreamMeter: stamps in, per-stream figures out (pure, no clock)."""

from __future__ import annotations

from hopbench._meter import StreamMeter
from hopbench.protocols import ContentDelta, FirstContentToken, FirstToken, Keepalive, UsageReport


def test_meter_itl_zero_for_events_of_one_read_and_silences() -> None:
    m = StreamMeter(start_ns=0, sent_ns=0)
    m.on_headers(10)
    m.on_read(100)
    m.on_observations(100, [Keepalive(b" hopbase-keepalive")])
    m.on_read(1_000)
    m.on_observations(1_000, [FirstToken("reasoning"), ContentDelta("reasoning", 3)])
    m.on_read(1_500)
    m.on_observations(1_500, [FirstContentToken("text"), ContentDelta("text", 2), ContentDelta("text", 1)])
    m.on_read(1_600)
    m.on_observations(1_600, [Keepalive(b""), UsageReport(5, 7)])
    m.close(5_600)
    assert (m.first_token_ns, m.first_content_ns) == (1_000, 1_500)
    assert m.itl_ns == [500, 0]
    assert m.max_silence_ns == 4_000  # from the last read to the end counts
    assert m.keepalive_gaps() == [1_500]
    assert (m.input_tokens, m.output_tokens) == (5, 7)
    assert m.content_reads == 2


# -- measure(): the metric rules, without trio or sockets ----------------------

from hopbench._meter import StreamRecord, measure, outcome_counters, record_stream, stream_line  # noqa: E402
from hopbench._recorder import Recorder  # noqa: E402
from hopbench.protocols import StreamResult  # noqa: E402

_BUDGET_NS = 12_000_000_000


def _paced_meter(start_ns: int = 0, sent_ns: int = 0, tokens: int = 5) -> StreamMeter:
    """Headers at 10 ms, then one text token a read every 10 ms from 100 ms."""
    m = StreamMeter(start_ns=start_ns, sent_ns=sent_ns)
    m.on_headers(10_000_000)
    for i in range(tokens):
        t = 100_000_000 + i * 10_000_000
        m.on_read(t)
        obs = [FirstToken("text"), FirstContentToken("text")] if i == 0 else []
        m.on_observations(t, obs + [ContentDelta("text", 3)])
    return m


def test_measure_completed_stream_latencies_tpot_and_rate() -> None:
    m = _paced_meter()
    m.close(200_000_000)
    r = measure(m, 200_000_000, "completed", "", StreamResult("completed", input_tokens=3, output_tokens=5,
                                                               content_events=5),
                keepalive_budget_ns=_BUDGET_NS)
    assert (r.ttfb_ns, r.ttft_ns, r.ttft_content_ns, r.e2e_ns) == (10_000_000, 100_000_000, 100_000_000,
                                                                    200_000_000)
    assert r.tpot_ns == (200_000_000 - 100_000_000) // 4
    assert r.output_milli_tokens_per_s == 25_000  # 5 tokens in 0.2 s
    assert r.itl_ns == (10_000_000,) * 4 and r.content_events == 5
    assert r.max_silence_ns == 90_000_000 and not r.keepalive_violation
    assert (r.queue_delay_ns, r.ttft_from_send_ns, r.e2e_from_send_ns) == (None, None, None)
    assert not r.proxy_buffering_suspected and not r.no_usage


def test_measure_open_loop_keeps_the_uncorrected_figures() -> None:
    m = _paced_meter(start_ns=0, sent_ns=4_000_000)
    m.close(200_000_000)
    r = measure(m, 200_000_000, "completed", "", StreamResult("completed", output_tokens=5),
                keepalive_budget_ns=_BUDGET_NS)
    assert (r.queue_delay_ns, r.ttft_from_send_ns, r.e2e_from_send_ns) == (4_000_000, 96_000_000, 196_000_000)
    assert r.ttft_ns == 100_000_000  # from the intended start


def test_measure_broken_stream_has_no_e2e_tpot_or_rate_but_keeps_gaps() -> None:
    m = _paced_meter()
    m.close(300_000_000)
    r = measure(m, 300_000_000, "truncated", "closed", StreamResult("truncated", output_tokens=5),
                keepalive_budget_ns=_BUDGET_NS)
    assert (r.e2e_ns, r.tpot_ns, r.output_milli_tokens_per_s) == (None, None, None)
    assert r.elapsed_ns == 300_000_000 and r.ttft_ns == 100_000_000 and len(r.itl_ns) == 4


def test_measure_without_usage_no_tpot_and_no_usage_counted() -> None:
    m = _paced_meter()
    m.close(200_000_000)
    r = measure(m, 200_000_000, "completed", "", StreamResult("completed"), keepalive_budget_ns=_BUDGET_NS)
    assert (r.tpot_ns, r.output_milli_tokens_per_s, r.no_usage) == (None, None, True)
    one = measure(m, 200_000_000, "completed", "", StreamResult("completed", output_tokens=1),
                  keepalive_budget_ns=_BUDGET_NS)
    assert one.tpot_ns is None and one.output_milli_tokens_per_s == 5_000


def test_measure_tokens_from_meter_when_no_result() -> None:
    m = StreamMeter(0, 0)
    m.on_headers(5)
    m.on_read(10)
    m.on_observations(10, [UsageReport(4, 2)])
    m.close(20)
    r = measure(m, 20, "timeout", "idle", None, keepalive_budget_ns=_BUDGET_NS)
    assert (r.input_tokens, r.output_tokens, r.no_usage, r.anomalies) == (4, 2, False, ())


def test_measure_no_usage_only_for_streams_with_a_body() -> None:
    m = StreamMeter(0, 0)
    m.close(50)
    for outcome in ("http_error", "connect_error", "cancelled"):
        assert not measure(m, 50, outcome, "", None, keepalive_budget_ns=_BUDGET_NS).no_usage
    assert measure(m, 50, "timeout", "first_byte", None, keepalive_budget_ns=_BUDGET_NS).no_usage
    r = measure(m, 50, "connect_error", "refused", None, keepalive_budget_ns=_BUDGET_NS)
    assert (r.ttfb_ns, r.max_silence_ns, r.keepalive_violation) == (None, None, False)


def test_measure_keepalive_violation_above_budget_only() -> None:
    m = StreamMeter(0, 0)
    m.on_headers(0)
    m.close(1_000)
    assert not measure(m, 1_000, "timeout", "idle", None, keepalive_budget_ns=1_000).keepalive_violation
    assert measure(m, 1_000, "timeout", "idle", None, keepalive_budget_ns=999).keepalive_violation


def test_measure_proxy_buffering_suspected_on_one_late_burst() -> None:
    m = StreamMeter(0, 0)
    m.on_headers(1_000)
    m.on_read(95_000)
    m.on_observations(95_000, [FirstToken("text"), FirstContentToken("text")]
                      + [ContentDelta("text", 1)] * 4)
    m.close(100_000)
    res = StreamResult("completed", output_tokens=4, content_events=4)
    assert measure(m, 100_000, "completed", "", res, keepalive_budget_ns=_BUDGET_NS).proxy_buffering_suspected
    # the same burst on a stream that ended much later (ttft < 90 % of e2e): not suspected
    assert not measure(m, 200_000, "completed", "", res, keepalive_budget_ns=_BUDGET_NS).proxy_buffering_suspected
    # a paced stream (one event a read) is never suspected
    paced = _paced_meter()
    paced.close(140_000_001)
    assert not measure(paced, 140_000_001, "completed", "", StreamResult("completed", content_events=5),
                       keepalive_budget_ns=_BUDGET_NS).proxy_buffering_suspected


def test_outcome_counters_by_outcome_and_detail() -> None:
    assert outcome_counters("http_error", "429:rate_limit") == (
        "http_error", "http_error.429", "http_error_code.rate_limit")
    assert outcome_counters("http_error", "503") == ("http_error", "http_error.503")
    assert outcome_counters("timeout", "idle") == ("timeout", "timeout.idle")
    assert outcome_counters("truncated", "") == ("truncated",)
    assert outcome_counters("failed", "") == ("failed", "failed.unknown")
    assert outcome_counters("completed", "") == ("completed",)


def test_record_stream_histograms_counters_and_tokens() -> None:
    m = _paced_meter()
    m.on_read(150_000_000)
    m.on_observations(150_000_000, [Keepalive(b""), Keepalive(b"")])
    m.close(200_000_000)
    res = StreamResult("completed", input_tokens=3, output_tokens=5, content_events=5,
                       anomalies={"unknown_event": 2})
    r = measure(m, 200_000_000, "completed", "", res, keepalive_budget_ns=_BUDGET_NS)
    rec = Recorder(["s"])
    record_stream(rec, "s", r)
    snap = rec.snapshot()
    c = snap.scopes["s"].counters
    assert c == {"completed": 1, "keepalives": 2, "anomaly.unknown_event": 2,
                 "tokens.input.completed": 3, "tokens.output.completed": 5}
    for metric, n in (("ttfb", 1), ("max_silence", 1), ("ttft", 1), ("ttft_content", 1), ("itl", 4),
                      ("keepalive_interval", 1), ("e2e", 1), ("tpot", 1), ("output_tokens_per_s", 1)):
        assert snap.histogram("s", metric).count == n, metric
    assert "queue_delay" not in snap.scopes["s"].histograms


def test_record_stream_broken_tokens_and_http_errors_count_no_tokens() -> None:
    rec = Recorder(["s"])
    m = StreamMeter(0, 0)
    m.on_headers(5)
    m.close(10)
    record_stream(rec, "s", measure(m, 10, "truncated", "reset", StreamResult("truncated", output_tokens=7),
                                    keepalive_budget_ns=_BUDGET_NS))
    record_stream(rec, "s", measure(m, 10, "http_error", "429", None, keepalive_budget_ns=_BUDGET_NS))
    c = rec.snapshot().scopes["s"].counters
    assert c == {"truncated": 1, "truncated.reset": 1, "tokens.output.broken": 7,
                 "http_error": 1, "http_error.429": 1}


def test_stream_line_relative_stamps_and_every_field() -> None:
    m = _paced_meter(start_ns=1_000, sent_ns=1_000)
    m.status = 200
    m.close(300_000_000)
    r = measure(m, 300_000_000, "timeout", "idle", StreamResult("truncated", output_tokens=5),
                keepalive_budget_ns=_BUDGET_NS)
    line = stream_line(r, "0-1", "s", t0_ns=1_000)
    assert line == {
        "id": "0-1", "scenario": "s", "outcome": "timeout", "detail": "idle", "status": 200,
        "start_ns": 0, "sent_ns": 0, "headers_ns": 10_000_000 - 1_000, "first_token_ns": 100_000_000 - 1_000,
        "end_ns": 300_000_000 - 1_000, "ttft_ns": 100_000_000 - 1_000, "e2e_ns": 300_000_000 - 1_000,
        "content_events": 5, "input_tokens": None, "output_tokens": 5,
        "max_silence_ns": 160_000_000, "keepalives": 0,
    }
    assert isinstance(r, StreamRecord)
