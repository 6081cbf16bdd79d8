"""StreamMeter: stamps in, per-stream figures out (pure, no clock)."""

from __future__ import annotations

from typing import Any

from hopbench.measure._meter import StreamMeter
from hopbench.protocols import ContentDelta, FirstContentToken, FirstToken, Keepalive, UsageReport


class _Gaps:
    """A gap sink that keeps what it was given, in order (tests only: the runner's
    sink records into histograms)."""

    def __init__(self) -> None:
        self.got: list[tuple[str, int]] = []

    def __call__(self, metric: str, value_ns: int, n: int = 1) -> None:
        self.got.extend([(metric, value_ns)] * n)

    def of(self, metric: str) -> list[int]:
        return [v for m, v in self.got if m == metric]


def test_meter_itl_zero_for_events_of_one_read_and_silences() -> None:
    gaps = _Gaps()
    m = StreamMeter(start_ns=0, sent_ns=0, sink=gaps)
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
    assert gaps.of("itl") == [500, 0] and (m.itl_count, m.itl_max_ns) == (2, 500)
    assert m.max_silence_ns == 4_000  # from the last read to the end counts
    # headers -> keepalive, keepalive -> next read, read before -> keepalive (still open at the end)
    assert gaps.of("keepalive_interval") == [90, 900, 100] and m.keepalive_gap_count == 3
    # each gap reached the sink when it was measured, in stream order
    assert [g for g in gaps.got if g[0] != "client_read_lag"] == [
        ("keepalive_interval", 90), ("keepalive_interval", 900), ("itl", 500), ("itl", 0), ("keepalive_interval", 100)]
    assert gaps.of("client_read_lag") == [0, 0, 0, 0]  # one per read (no lag given)
    assert (m.input_tokens, m.output_tokens) == (5, 7)
    assert m.content_reads == 2


# -- measure(): the metric rules, without trio or sockets ----------------------

from hopbench.measure._rules import StreamRecord, measure
from hopbench.measure._sinks import outcome_counters, record_stream, recorder_sink
from hopbench.measure._lines import stream_line
from hopbench.measure._recorder import Recorder  # noqa: E402
from hopbench.protocols import Observation, StreamEnd, StreamResult  # noqa: E402

_BUDGET_NS = 12_000_000_000


def _ev(text: int = 0, reasoning: int = 0, tool: int = 0, refusal: int = 0) -> dict[str, int]:
    """``StreamResult.events``: output events per channel, as the decoder counts them."""
    return {"text": text, "reasoning": reasoning, "tool": tool, "refusal": refusal}


def _terminal(m: StreamMeter, t_ns: int) -> None:
    """The read at ``t_ns`` carries the terminal event ([DONE], message_stop, ...)."""
    m.on_read(t_ns)
    m.on_observations(t_ns, [StreamEnd("completed")])


def _paced_meter(start_ns: int = 0, sent_ns: int = 0, tokens: int = 5,
                 sink: Any = None) -> StreamMeter:
    """Headers at 10 ms, then one text token a read every 10 ms from 100 ms."""
    m = StreamMeter(start_ns=start_ns, sent_ns=sent_ns, sink=sink)
    m.on_headers(10_000_000)
    for i in range(tokens):
        t = 100_000_000 + i * 10_000_000
        m.on_read(t)
        obs: list[Observation] = [FirstToken("text"), FirstContentToken("text")] if i == 0 else []
        m.on_observations(t, obs + [ContentDelta("text", 3)])
    return m


def test_measure_completed_stream_latencies_tpot_and_rate() -> None:
    m = _paced_meter()
    _terminal(m, 200_000_000)
    m.close(200_000_000)
    r = measure(m, 200_000_000, "completed", "", StreamResult("completed", input_tokens=3, output_tokens=5,
                                                               content_events=5, events=_ev(5)),
                keepalive_budget_ns=_BUDGET_NS)
    assert (r.ttfb_ns, r.ttft_ns, r.ttft_content_ns, r.e2e_ns) == (10_000_000, 100_000_000, 100_000_000,
                                                                    200_000_000)
    assert r.tpot_ns == (200_000_000 - 100_000_000) // 4
    assert r.output_milli_tokens_per_s == 25_000  # 5 tokens in 0.2 s
    assert (r.itl_count, r.itl_max_ns) == (4, 10_000_000) and r.content_events == 5
    assert r.max_silence_ns == 90_000_000 and not r.keepalive_violation
    assert (r.queue_delay_ns, r.ttft_from_send_ns, r.e2e_from_send_ns) == (None, None, None)
    assert not r.proxy_buffering_suspected and not r.no_usage


def test_measure_open_loop_keeps_the_uncorrected_figures() -> None:
    m = _paced_meter(start_ns=0, sent_ns=4_000_000)
    _terminal(m, 200_000_000)
    m.close(200_000_000)
    r = measure(m, 200_000_000, "completed", "", StreamResult("completed", output_tokens=5),
                keepalive_budget_ns=_BUDGET_NS)
    assert (r.queue_delay_ns, r.ttft_from_send_ns, r.e2e_from_send_ns) == (4_000_000, 96_000_000, 196_000_000)
    assert r.ttft_ns == 100_000_000  # from the intended start


def test_measure_broken_stream_has_no_e2e_tpot_or_rate_but_keeps_gaps() -> None:
    gaps = _Gaps()
    m = _paced_meter(sink=gaps)
    m.close(300_000_000)
    r = measure(m, 300_000_000, "truncated", "closed", StreamResult("truncated", output_tokens=5),
                keepalive_budget_ns=_BUDGET_NS)
    assert (r.e2e_ns, r.tpot_ns, r.output_milli_tokens_per_s) == (None, None, None)
    assert r.elapsed_ns == 300_000_000 and r.ttft_ns == 100_000_000 and r.itl_count == 4
    assert gaps.of("itl") == [10_000_000] * 4


def test_measure_without_usage_counts_events_and_no_usage() -> None:
    m = _paced_meter()
    _terminal(m, 200_000_000)
    m.close(200_000_000)
    r = measure(m, 200_000_000, "completed", "", StreamResult("completed", events=_ev(5)),
                keepalive_budget_ns=_BUDGET_NS)
    assert (r.tokens_source, r.tpot_ns, r.no_usage) == ("events", 100_000_000 // 4, True)
    one = measure(m, 200_000_000, "completed", "", StreamResult("completed", output_tokens=1),
                  keepalive_budget_ns=_BUDGET_NS)
    assert one.tpot_ns is None and one.output_milli_tokens_per_s == 5_000 and one.tokens_source == "usage"
    zero = measure(m, 200_000_000, "completed", "", StreamResult("completed", output_tokens=0),
                   keepalive_budget_ns=_BUDGET_NS)
    assert (zero.tokens_source, zero.tpot_ns, zero.output_milli_tokens_per_s) == (None, None, None)


def test_measure_tokens_from_meter_when_no_result() -> None:
    m = StreamMeter(0, 0)
    m.on_headers(5)
    m.on_read(10)
    m.on_observations(10, [UsageReport(4, 2)])
    m.close(20)
    r = measure(m, 20, "timeout", "idle", None, keepalive_budget_ns=_BUDGET_NS)
    assert (r.input_tokens, r.output_tokens, r.no_usage, r.anomalies) == (4, 2, False, ())


def test_measure_http_error_has_no_silence() -> None:
    # an error response's body is no stream: a dead target's instant 501s must not
    # enter max_silence (compare read them as "better" silences)
    m = StreamMeter(0, 0)
    m.on_headers(10)
    m.on_read(20_000_000_000)
    m.close(20_000_000_000)
    r = measure(m, 20_000_000_000, "http_error", "501", None, keepalive_budget_ns=_BUDGET_NS)
    assert (r.max_silence_ns, r.keepalive_violation) == (None, False)
    assert r.ttfb_ns == 10


def test_measure_no_usage_only_for_streams_with_a_body() -> None:
    m = StreamMeter(0, 0)
    m.close(50)
    for outcome in ("http_error", "connect_error", "cancelled"):
        assert not measure(m, 50, outcome, "", None, keepalive_budget_ns=_BUDGET_NS).no_usage
    # a first-byte timeout never got a response: no chance to report usage
    assert not measure(m, 50, "timeout", "first_byte", None, keepalive_budget_ns=_BUDGET_NS).no_usage
    r = measure(m, 50, "connect_error", "refused", None, keepalive_budget_ns=_BUDGET_NS)
    assert (r.ttfb_ns, r.max_silence_ns, r.keepalive_violation) == (None, None, False)
    m.on_headers(10)
    assert measure(m, 50, "timeout", "idle", None, keepalive_budget_ns=_BUDGET_NS).no_usage


def test_measure_keepalive_violation_above_budget_only() -> None:
    m = StreamMeter(0, 0)
    m.on_headers(0)
    m.close(1_000)
    assert not measure(m, 1_000, "timeout", "idle", None, keepalive_budget_ns=1_000).keepalive_violation
    assert measure(m, 1_000, "timeout", "idle", None, keepalive_budget_ns=999).keepalive_violation


def test_measure_proxy_buffering_suspected_on_one_late_burst() -> None:
    def burst(end_ns: int) -> StreamMeter:
        m = StreamMeter(0, 0)
        m.on_headers(1 * _MS)
        m.on_read(95 * _MS)
        m.on_observations(95 * _MS, [FirstToken("text"), FirstContentToken("text"), ContentDelta("text", 1)])
        for _ in range(3):  # one read, four events
            m.on_observations(95 * _MS, [ContentDelta("text", 1)])
        _terminal(m, end_ns)
        m.close(end_ns)
        return m

    res = StreamResult("completed", output_tokens=4, content_events=4, events=_ev(4))
    assert measure(burst(100 * _MS), 100 * _MS, "completed", "", res,
                   keepalive_budget_ns=_BUDGET_NS).proxy_buffering_suspected
    # the same burst on a stream that ended much later (ttft < 90 % of e2e): not suspected
    assert not measure(burst(200 * _MS), 200 * _MS, "completed", "", res,
                       keepalive_budget_ns=_BUDGET_NS).proxy_buffering_suspected
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
    rec = Recorder(["s"])
    m = _paced_meter(sink=recorder_sink(rec, "s"))
    m.on_read(150_000_000)
    m.on_observations(150_000_000, [Keepalive(b""), Keepalive(b"")])
    m.close(200_000_000)
    res = StreamResult("completed", input_tokens=3, output_tokens=5, content_events=5,
                       anomalies={"unknown_event": 2})
    r = measure(m, 200_000_000, "completed", "", res, keepalive_budget_ns=_BUDGET_NS)
    assert rec.snapshot().histogram("s", "itl").count == 4  # recorded as they came, before the end
    record_stream(rec, "s", r)
    snap = rec.snapshot()
    c = snap.scopes["s"].counters
    # every read's item is bounded: no kernel stamp was given (loop-time stamps are never exact)
    assert c == {"completed": 1, "keepalives": 2, "anomaly.unknown_event": 2, "stop.none": 1,
                 "tokens_source.usage": 1, "output_tokens_from.usage": 1, "tokens.input.completed": 3,
                 "tokens.output.completed": 5, "wire.items_bounded": 6}
    for metric, n in (("ttfb", 1), ("max_silence", 1), ("ttft", 1), ("ttft_content", 1), ("itl", 4),
                      ("keepalive_interval", 2), ("e2e", 1), ("tpot", 1), ("output_tokens_per_s", 1)):
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
    assert c == {"truncated": 1, "truncated.reset": 1, "tokens.output.broken": 7, "stop.none": 1,
                 "http_error": 1, "http_error.429": 1, "output_tokens_from.usage": 1}


def test_stream_line_relative_stamps_and_every_field() -> None:
    m = _paced_meter(start_ns=1_000, sent_ns=1_000)
    m.status = 200
    m.close(300_000_000)
    r = measure(m, 300_000_000, "timeout", "idle", StreamResult("truncated", output_tokens=5, events=_ev(5)),
                keepalive_budget_ns=_BUDGET_NS)
    line = stream_line(r, "0-1", "s", t0_ns=1_000)
    assert line == {
        "id": "0-1", "scenario": "s", "outcome": "timeout", "detail": "idle", "status": 200,
        "start_ns": 0, "sent_ns": 0, "headers_ns": 10_000_000 - 1_000, "first_token_ns": 100_000_000 - 1_000,
        "first_content_ns": 100_000_000 - 1_000, "terminal_ns": None, "end_ns": 300_000_000 - 1_000,
        "ttft_ns": 100_000_000 - 1_000, "ttft_content_ns": 100_000_000 - 1_000,
        "e2e_ns": 300_000_000 - 1_000, "tail_ns": None,  # no terminal event: the whole stream
        "content_events": 5, "output_events": 5, "events": {"text": 5, "reasoning": 0, "tool": 0, "refusal": 0}, "input_tokens": None, "output_tokens": 5, "total_tokens": None,
        "tokens_source": None, "stop_class": "none",
        "max_silence_ns": 160_000_000, "keepalives": 0, "client_lag_ns": 0, "burst": None, "burst_held_ns": None,
    }
    assert isinstance(r, StreamRecord)


# -- the decoder's stream through the meter, as the runner does it (no trio) ----

from hopbench.measure._lines import HEADER_VALUES_MAX, HeaderValues, capture_headers  # noqa: E402
from hopbench.protocols import new_decoder  # noqa: E402
from hopbench.sse import SSEScanner  # noqa: E402

_MS = 1_000_000


def _through(protocol: str, reads: list[tuple[float, bytes]], end_ms: float, *, headers_ms: float = 0.0,
             expect_usage: bool = False, outcome: str | None = None, sink: Any = None) -> StreamRecord:
    """Stamp each read at its time (ms), decode it, close the body at ``end_ms``."""
    m = StreamMeter(0, 0, sink)
    m.on_headers(int(headers_ms * _MS))
    scanner, dec = SSEScanner(), new_decoder(protocol, keep_text=False, expect_usage=expect_usage)
    for t_ms, chunk in reads:
        t = int(t_ms * _MS)
        m.on_read(t)
        for item in scanner.feed(chunk):
            obs = dec.feed(item)
            if obs:
                m.on_observations(t, obs)
    end = int(end_ms * _MS)
    m.close(end)
    res = dec.finish(discarded_partial=scanner.close())
    detail = res.detail or ("" if res.outcome == "completed" else "closed")
    return measure(m, end, outcome or res.outcome, detail, res, keepalive_budget_ns=_BUDGET_NS)


def _chat(delta: str, finish: str | None = None, index: int = 0) -> bytes:
    f = "null" if finish is None else f'"{finish}"'
    return f'data: {{"id":"c","choices":[{{"index":{index},"delta":{delta},"finish_reason":{f}}}]}}\n\n'.encode()


def _chat_usage(inp: int, out: int, extra: str = "") -> bytes:
    return f'data: {{"id":"c","choices":[],"usage":{{"prompt_tokens":{inp},"completion_tokens":{out}{extra}}}}}\n\n'.encode()


DONE = b"data: [DONE]\n\n"


def test_measure_e2e_tpot_and_rate_end_at_the_terminal_event_not_the_body() -> None:
    # [DONE] at 12 ms, the body closed 0.8 s later: the answer was complete at 12 ms
    reads = [(2.0, _chat('{"role":"assistant","content":"a"}'))]
    reads += [(2.0 + i, _chat('{"content":"b"}')) for i in range(1, 10)]
    reads += [(11.0, _chat("{}", "stop") + _chat_usage(5, 10)), (12.0, DONE)]
    r = _through("chat", reads, 811.0)
    assert r.outcome == "completed" and r.terminal_ns == 12 * _MS
    assert (r.e2e_ns, r.tail_ns) == (12 * _MS, 799 * _MS)
    assert r.tpot_ns == (12 - 2) * _MS // 9  # answer end - first token over 9 gaps
    assert r.output_milli_tokens_per_s == 10 * 1000 * 1000 // 12
    assert r.max_silence_ns == 2 * _MS  # silence checks end at the terminal event too
    assert r.elapsed_ns == 12 * _MS and r.stop_class == "stop"
    rec = Recorder(["s"])
    record_stream(rec, "s", r)
    assert rec.snapshot().histogram("s", "tail").count == 1


def test_measure_completed_without_terminal_event_ends_at_the_last_byte() -> None:
    # chat completed by its finish_reason, no [DONE] (some gateways drop it), body closed later
    reads = [(5.0, _chat('{"content":"a"}')), (6.0, _chat('{"content":"b"}', "stop"))]
    r = _through("chat", reads, 500.0)
    assert (r.outcome, r.no_done, r.terminal_ns, r.tail_ns) == ("completed", True, None, None)
    assert r.e2e_ns == 6 * _MS and r.max_silence_ns == 494 * _MS
    assert r.tokens_source == "events" and r.tpot_ns == 1 * _MS  # no usage: 2 content events


def test_measure_without_usage_tpot_and_rate_from_content_events() -> None:
    reads = [(10.0 + 10 * i, _chat('{"content":"x"}')) for i in range(5)] + [(60.0, _chat("{}", "stop") + DONE)]
    r = _through("chat", reads, 60.0)
    assert (r.tokens_source, r.answer_tokens, r.no_usage) == ("events", 5.0, True)
    assert r.tpot_ns == (60 - 10) * _MS // 4 and r.output_milli_tokens_per_s == 5 * 1000 * 1000 // 60
    rec = Recorder(["s"])
    record_stream(rec, "s", r)
    assert rec.snapshot().scopes["s"].counters["tokens_source.events"] == 1


def test_measure_per_answer_tpot_with_several_choices() -> None:
    reads = []
    for i in range(4):  # choices 0 and 1 interleave; 8 completion tokens in all
        reads.append((10.0 + 10 * i, _chat('{"content":"x"}', index=0) + _chat('{"content":"y"}', index=1)))
    reads.append((50.0, _chat("{}", "stop", 0) + _chat("{}", "stop", 1) + _chat_usage(3, 8) + DONE))
    r = _through("chat", reads, 50.0)
    assert (r.choices, r.output_tokens, r.answer_tokens, r.tokens_source) == (2, 8, 4.0, "usage")
    assert r.tpot_ns == (50 - 10) * _MS // 3  # per answer: 4 tokens, not 8
    assert r.output_milli_tokens_per_s == 4 * 1000 * 1000 // 50


def test_measure_keepalive_gaps_include_headers_and_the_next_event() -> None:
    # queued: headers at 0, one ": ping" at 5 s, first token at 7 s
    reads = [(5000.0, b": ping\n\n"), (7000.0, _chat('{"content":"x"}', "stop") + DONE)]
    gaps = _Gaps()
    r = _through("chat", reads, 7000.0, sink=gaps)
    assert gaps.of("keepalive_interval") == [5000 * _MS, 2000 * _MS]
    assert (r.keepalive_gaps, r.keepalives) == (2, 1)


def test_record_stream_sixteen_streams_with_one_ping_each_record_intervals() -> None:
    rec = Recorder(["s"])
    for _ in range(16):
        reads = [(300.0, b": ping\n\n"), (400.0, _chat('{"content":"x"}', "stop") + DONE)]
        record_stream(rec, "s", _through("chat", reads, 400.0, sink=recorder_sink(rec, "s")))
    h = rec.snapshot().histogram("s", "keepalive_interval")
    assert h.count == 32  # headers -> ping and ping -> first event, per stream


def test_meter_keepalives_and_silences_after_the_terminal_event_do_not_count() -> None:
    gaps = _Gaps()
    m = StreamMeter(0, 0, gaps)
    m.on_headers(0)
    m.on_read(10)
    m.on_observations(10, [Keepalive(b"")])
    m.on_read(20)
    m.on_observations(20, [StreamEnd("completed")])
    m.on_read(5_000)
    m.on_observations(5_000, [Keepalive(b"")])
    m.close(9_000)
    assert gaps.of("keepalive_interval") == [10, 10] and m.keepalives == 1
    assert m.max_silence_ns == 10 and m.terminal_ns == 20


def test_meter_two_keepalives_in_one_read_and_back_to_back_reads() -> None:
    gaps = _Gaps()
    m = StreamMeter(0, 0, gaps)
    m.on_headers(0)
    m.on_read(100)
    m.on_observations(100, [Keepalive(b""), Keepalive(b"")])
    m.on_read(250)
    m.on_observations(250, [Keepalive(b"")])
    m.on_read(300)
    m.on_observations(300, [ContentDelta("text", 1)])
    assert gaps.of("keepalive_interval") == [100, 0, 150, 50]


def test_measure_stop_classes_refusal_and_engine_abort() -> None:
    refusal = [(1.0, _chat('{"role":"assistant","content":""}')), (2.0, _chat('{"refusal":"I can\'t"}')),
               (3.0, _chat('{"refusal":" share that."}')), (4.0, _chat("{}", "stop") + DONE)]
    r = _through("chat", refusal, 4.0)
    assert (r.outcome, r.refused, r.stop_class, dict(r.events)["refusal"]) == ("completed", True, "stop", 2)
    assert r.ttft_ns == 2 * _MS
    abort = [(1.0, _chat('{"content":"a"}')), (2.0, _chat("{}", "abort") + DONE)]
    a = _through("chat", abort, 2.0)
    assert (a.outcome, a.detail, a.stop_class, a.e2e_ns) == ("failed", "abort", "abort", None)
    rec = Recorder(["s"])
    record_stream(rec, "s", r)
    record_stream(rec, "s", a)
    c = rec.snapshot().scopes["s"].counters
    assert (c["refused"], c["stop.stop"], c["stop.abort"], c["failed.abort"]) == (1, 1, 1, 1)


def test_measure_usage_missing_and_malformed_event_are_broken_with_their_detail() -> None:
    cut = [(1.0, _chat('{"content":"a"}')), (2.0, _chat("{}", "stop"))]
    r = _through("chat", cut, 3.0, expect_usage=True)
    assert (r.outcome, r.detail, r.e2e_ns) == ("truncated", "usage_missing", None)
    bad = [(1.0, _chat('{"content":"a"}')), (2.0, b"data: {not json\n\n"), (3.0, _chat("{}", "stop") + DONE)]
    b = _through("chat", bad, 3.0)
    assert (b.outcome, b.detail) == ("failed", "malformed_event")
    rec = Recorder(["s"])
    record_stream(rec, "s", r)
    record_stream(rec, "s", b)
    c = rec.snapshot().scopes["s"].counters
    assert (c["truncated.usage_missing"], c["failed.malformed_event"]) == (1, 1)


def test_measure_hidden_reasoning_and_total_token_mismatch() -> None:
    usage = _chat_usage(5, 10, ',"total_tokens":40,"completion_tokens_details":{"reasoning_tokens":25}')
    reads = [(100.0, _chat('{"content":"x"}')), (101.0, _chat("{}", "stop") + usage + DONE)]
    r = _through("chat", reads, 101.0)
    assert (r.hidden_reasoning, r.total_tokens, r.usage_total_mismatch) == (True, 40, True)
    rec = Recorder(["s"])
    record_stream(rec, "s", r)
    c = rec.snapshot().scopes["s"].counters
    assert (c["hidden_reasoning"], c["usage_total_mismatch"]) == (1, 1)
    ok = _through("chat", [(1.0, _chat('{"content":"x"}', "stop") + _chat_usage(1, 1, ',"total_tokens":2') + DONE)],
                  1.0)
    assert not ok.usage_total_mismatch and not ok.hidden_reasoning


def test_capture_headers_bounded_values_and_counters() -> None:
    got = {"x-litellm-attempted-retries": " 2 ", "x-cache": "HIT\x01" + "y" * 100}
    pairs = capture_headers(got.get, ("x-litellm-attempted-retries", "x-cache", "x-absent"))
    assert pairs[0] == ("x-litellm-attempted-retries", "2")
    assert pairs[1][1].startswith("HIT?") and len(pairs[1][1]) == 64 and len(pairs) == 2
    hv = HeaderValues()
    names = {hv.counter("x-id", str(i)) for i in range(HEADER_VALUES_MAX + 5)}
    assert len(names) == HEADER_VALUES_MAX + 1 and "header.x-id=(other)" in names
    assert hv.counter("x-id", "0") == "header.x-id=0"
    m = StreamMeter(0, 0)
    m.on_headers(1)
    m.headers = pairs
    m.close(2)
    rec = Recorder(["s"])
    r = measure(m, 2, "truncated", "closed", StreamResult("truncated"), keepalive_budget_ns=_BUDGET_NS)
    record_stream(rec, "s", r, hv)
    assert rec.snapshot().scopes["s"].counters["header.x-litellm-attempted-retries=2"] == 1
    assert stream_line(r, "1", "s", 0)["headers"]["x-litellm-attempted-retries"] == "2"


def test_stream_line_content_ttft_and_events_per_channel_do_not_mix_reasoning() -> None:
    # the stream: 2 reasoning events, then 2 text events (before: content_events 4)
    reads = [(10.0, _chat('{"reasoning_content":"hmm"}')), (20.0, _chat('{"reasoning_content":" ok"}')),
             (30.0, _chat('{"content":"Blue"}')), (40.0, _chat('{"content":" sky"}', "stop") + DONE)]
    line = stream_line(_through("chat", reads, 40.0), "1", "s", 0)
    assert (line["ttft_ns"], line["ttft_content_ns"], line["first_content_ns"]) == (10 * _MS, 30 * _MS, 30 * _MS)
    assert line["events"] == {"text": 2, "reasoning": 2, "tool": 0, "refusal": 0}
    assert (line["content_events"], line["output_events"]) == (2, 4)
    refusal = [(1.0, _chat('{"content":"a"}')), (2.0, _chat('{"refusal":"no"}', "stop") + DONE)]
    r = stream_line(_through("chat", refusal, 2.0), "2", "s", 0)
    assert r["events"] == {"text": 1, "reasoning": 0, "tool": 0, "refusal": 1} and r["content_events"] == 2


def _burst_meter(lag_ns: int, headers_ns: int = 1 * _MS) -> StreamMeter:
    """An unpaced answer: headers at 1 ms, 8 events in one read at 60 ms (served
    ``lag_ns`` late by the client's loop), [DONE] in the same read."""
    m = StreamMeter(0, 0)
    m.on_headers(headers_ns)
    m.on_read(60 * _MS, lag_ns)
    m.on_observations(60 * _MS, [FirstToken("text"), FirstContentToken("text"), ContentDelta("text", 1)])
    for _ in range(7):
        m.on_observations(60 * _MS, [ContentDelta("text", 1)])
    m.on_observations(60 * _MS, [StreamEnd("completed")])
    m.close(60 * _MS)
    return m


def test_measure_burst_read_late_on_the_client_is_not_a_buffering_proxy() -> None:
    res = StreamResult("completed", output_tokens=8, events=_ev(8))
    lagged = measure(_burst_meter(40 * _MS), 60 * _MS, "completed", "", res, keepalive_budget_ns=_BUDGET_NS)
    assert (lagged.proxy_buffering_suspected, lagged.client_lagged, lagged.client_lag_ns) == (False, True, 40 * _MS)
    # the same burst, served on time: the client is not the cause
    prompt = measure(_burst_meter(0), 60 * _MS, "completed", "", res, keepalive_budget_ns=_BUDGET_NS)
    assert (prompt.proxy_buffering_suspected, prompt.client_lagged) == (True, False)
    # a lag far shorter than the silence it ended (< 10 % of 59 ms) does not explain a burst
    short = measure(_burst_meter(5 * _MS), 60 * _MS, "completed", "", res, keepalive_budget_ns=_BUDGET_NS)
    assert (short.proxy_buffering_suspected, short.client_lagged) == (True, False)
    # headers held back until the burst (same lag window): the silence counts from the send
    held = measure(_burst_meter(5 * _MS, headers_ns=59 * _MS), 60 * _MS, "completed", "", res,
                   keepalive_budget_ns=_BUDGET_NS)
    assert (held.proxy_buffering_suspected, held.client_lagged) == (True, False)
    held_lagged = measure(_burst_meter(7 * _MS, headers_ns=59 * _MS), 60 * _MS, "completed", "", res,
                          keepalive_budget_ns=_BUDGET_NS)
    assert (held_lagged.proxy_buffering_suspected, held_lagged.client_lagged) == (False, True)
    rec = Recorder(["s"])
    record_stream(rec, "s", lagged)
    c = rec.snapshot().scopes["s"].counters
    assert c["client_lagged"] == 1 and "proxy_buffering_suspected" not in c


def test_meter_client_lag_counts_only_reads_that_carried_content() -> None:
    m = StreamMeter(0, 0)
    m.on_headers(0)
    m.on_read(10, 500)  # a keepalive read, served late
    m.on_observations(10, [Keepalive(b"")])
    m.on_read(20, 7)
    m.on_observations(20, [FirstToken("text"), ContentDelta("text", 1)])
    m.on_read(30, 3)
    m.on_observations(30, [ContentDelta("text", 1)])
    assert m.content_read_lag_max_ns == 7


def _unpaced_meter(events: int, at_ns: int, lag_ns: int = 0, head_ns: int = 0) -> StreamMeter:
    """An origin that writes its whole answer at once: the head at ``head_ns``, ``events``
    events and [DONE] in one read at ``at_ns`` (served ``lag_ns`` late)."""
    m = StreamMeter(0, 0)
    m.on_headers(head_ns)
    m.on_read(at_ns, lag_ns)
    m.on_observations(at_ns, [FirstToken("text"), FirstContentToken("text"), ContentDelta("text", 1)])
    for _ in range(events - 1):
        m.on_observations(at_ns, [ContentDelta("text", 1)])
    m.on_observations(at_ns, [StreamEnd("completed")])
    m.close(at_ns)
    return m


def test_measure_unpaced_origin_is_not_a_buffering_proxy() -> None:
    """Issue 20: an origin that wrote 32 events at once after a 20 ms TTFT (no proxy,
    the client on time) is no evidence of a proxy: 32 events held 20 ms is not a paced
    answer held back (31 x PACED_GAP_MIN_NS = 31 ms). Held 60 ms it could be: flagged.
    The hold counts from the response head, or from the send when the head came with
    the burst."""
    from hopbench.measure._burst import PACED_GAP_MIN_NS

    res = StreamResult("completed", output_tokens=32, events=_ev(32))
    unpaced = measure(_unpaced_meter(32, 20 * _MS), 20 * _MS, "completed", "", res, keepalive_budget_ns=_BUDGET_NS)
    assert (unpaced.proxy_buffering_suspected, unpaced.client_lagged) == (False, False)
    edge = 31 * PACED_GAP_MIN_NS  # held exactly 31 gaps (from the send, minus the lag)
    assert measure(_unpaced_meter(32, edge + 2 * _MS, 2 * _MS), edge + 2 * _MS, "completed", "", res,
                   keepalive_budget_ns=_BUDGET_NS).proxy_buffering_suspected
    assert not measure(_unpaced_meter(32, edge + 2 * _MS - 1, 2 * _MS), edge + 2 * _MS - 1, "completed", "", res,
                       keepalive_budget_ns=_BUDGET_NS).proxy_buffering_suspected
    held = measure(_unpaced_meter(32, 60 * _MS), 60 * _MS, "completed", "", res, keepalive_budget_ns=_BUDGET_NS)
    assert (held.proxy_buffering_suspected, held.client_lagged) == (True, False)
    # a busy server got to the request 15 ms late (its head at 15 ms), then answered at once
    # 20 ms later: the hold counts from its head, 20 ms: not a paced answer held back
    late = measure(_unpaced_meter(32, 35 * _MS, head_ns=15 * _MS), 35 * _MS, "completed", "", res,
                   keepalive_budget_ns=_BUDGET_NS)
    assert (late.proxy_buffering_suspected, late.client_lagged) == (False, False)
    # a proxy holding the whole response (its head comes with the burst, as nginx with gzip
    # sends it): the hold counts from the send
    whole = measure(_unpaced_meter(32, 60 * _MS, head_ns=59_500_000), 60 * _MS, "completed", "", res,
                    keepalive_budget_ns=_BUDGET_NS)
    assert (whole.proxy_buffering_suspected, whole.client_lagged) == (True, False)
