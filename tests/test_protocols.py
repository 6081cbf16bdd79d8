"""Tests for hopbench.protocols: verdicts, observations and anomalies per protocol.

Streams are built as bytes and decoded through the real SSE scanner
(``decode_stream``), or fed item by item to a decoder to check observations.
Captured / hand-made streams with golden outputs live in tests/data/protocols/
(``<protocol>__<name>.sse`` beside ``<protocol>__<name>.json``).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import hopbench.protocols as protocols
from hopbench._errors import UsageError
from hopbench.protocols import (
    PROTOCOLS,
    Anomaly,
    ContentDelta,
    FirstContentToken,
    FirstToken,
    Keepalive,
    StreamEnd,
    StreamResult,
    UsageReport,
    decode_stream,
    new_decoder,
)
from hopbench.protocols._responses import KNOWN_EVENT_TYPES
from hopbench.sse import SSEComment, SSEEvent, SSEScanner

DATA = Path(__file__).parent / "data" / "protocols"
SSE_FILES = sorted(DATA.glob("*.sse"))


def _ev(data: object, event: str | None = None) -> bytes:
    """One SSE event; ``data`` is JSON-encoded unless it is bytes."""
    raw = data if isinstance(data, bytes) else json.dumps(data, ensure_ascii=False).encode()
    head = f"event: {event}\n".encode() if event else b""
    return head + b"data: " + raw + b"\n\n"


def _chunk(content: str | None = None, finish: str | None = None, **delta: object) -> bytes:
    d: dict[str, object] = dict(delta)
    if content is not None:
        d["content"] = content
    return _ev({"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": d, "finish_reason": finish}]})


DONE = b"data: [DONE]\n\n"
ROLE = _chunk("", role="assistant")
USAGE = _ev({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}})


def _resp(kind: str, event_line: bool = True, **fields: object) -> bytes:
    return _ev({"type": kind, **fields}, kind if event_line else None)


def _rtext(delta: str) -> bytes:
    return _resp("response.output_text.delta", item_id="m", output_index=0, content_index=0, delta=delta)


R_CREATED = _resp("response.created", response={"id": "r", "status": "in_progress"})
R_DONE = _resp(
    "response.completed",
    response={"id": "r", "status": "completed", "usage": {"input_tokens": 4, "output_tokens": 2, "total_tokens": 6}},
)


def _msg(kind: str, **fields: object) -> bytes:
    return _ev({"type": kind, **fields}, kind)


def _mtext(text: str, index: int = 0) -> bytes:
    return _msg("content_block_delta", index=index, delta={"type": "text_delta", "text": text})


M_START = _msg("message_start", message={"id": "m", "role": "assistant", "content": [], "usage": {"input_tokens": 9, "output_tokens": 1}})
M_BLOCK = _msg("content_block_start", index=0, content_block={"type": "text", "text": ""})
M_DELTA = _msg("message_delta", delta={"stop_reason": "end_turn", "stop_sequence": None}, usage={"output_tokens": 5})
M_STOP = _msg("message_stop")
PING = _msg("ping")


def _observe(protocol: str, body: bytes) -> tuple[list[object], StreamResult]:
    """Decode ``body`` in one read; return all observations and the result."""
    scanner = SSEScanner()
    dec = new_decoder(protocol)
    out: list[object] = []
    for item in scanner.feed(body):
        out.extend(dec.feed(item))
    return out, dec.finish(discarded_partial=scanner.close())


def _splits(body: bytes) -> list[list[bytes]]:
    """The body whole, byte by byte with empty reads, and in uneven pieces."""
    return [
        [body],
        [b for i in range(len(body)) for b in (body[i : i + 1], b"")],
        [body[i : i + 7] for i in range(0, len(body), 7)],
    ]


# -- golden files (seeds and hand-made streams) --------------------------------


@pytest.mark.parametrize("path", SSE_FILES, ids=lambda p: p.stem)
def test_decode_stream_matches_golden_at_any_split(path: Path) -> None:
    body = path.read_bytes()
    protocol = path.stem.split("__")[0]
    golden = json.loads(path.with_suffix(".json").read_text(encoding="utf-8"))
    for chunks in _splits(body):
        assert dataclasses.asdict(decode_stream(protocol, chunks)) == golden


@pytest.mark.parametrize("name", ["chat__seed_hopbase", "responses__seed_hopbase", "messages__seed_hopbase"])
def test_decode_stream_same_at_every_two_piece_split(name: str) -> None:
    body = (DATA / f"{name}.sse").read_bytes()
    protocol = name.split("__")[0]
    whole = decode_stream(protocol, [body])
    for i in range(len(body) + 1):
        assert decode_stream(protocol, [body[:i], body[i:]]) == whole


def test_decode_stream_seed_examples_give_documented_values() -> None:
    # Values stated in shared/seeds/hopbase-streaming-events.txt and
    # openai-compatible-streaming-guide.txt.
    chat = decode_stream("chat", [(DATA / "chat__seed_hopbase.sse").read_bytes()])
    assert (chat.outcome, chat.text, chat.stop_reason) == ("completed", "我是", "stop")
    assert (chat.input_tokens, chat.output_tokens) == (14, 52)
    guide = decode_stream("chat", [(DATA / "chat__seed_guide.sse").read_bytes()])
    assert (guide.outcome, guide.text, guide.content_events) == ("completed", "串流輸出", 2)
    assert (guide.input_tokens, guide.output_tokens) == (None, None)
    resp = decode_stream("responses", [(DATA / "responses__seed_hopbase.sse").read_bytes()])
    assert (resp.outcome, resp.text, resp.input_tokens, resp.output_tokens) == ("completed", "我是", 14, 58)
    msgs = decode_stream("messages", [(DATA / "messages__seed_hopbase.sse").read_bytes()])
    assert (msgs.outcome, msgs.text, msgs.stop_reason) == ("completed", "你好！", "end_turn")
    assert (msgs.input_tokens, msgs.output_tokens) == (9, 14)
    err = decode_stream("messages", [(DATA / "messages__seed_hopbase_error.sse").read_bytes()])
    assert (err.outcome, err.error_code) == ("failed", "api_error")
    assert err.error_message == "Response stream interrupted, please retry"


# -- observations ----------------------------------------------------------------


def test_chat_role_only_first_chunk_is_not_a_token() -> None:
    obs, result = _observe("chat", ROLE + _chunk("") + _chunk("Hi") + _chunk(None, "stop") + DONE)
    assert obs == [FirstToken("text"), FirstContentToken("text"), ContentDelta("text", 2), StreamEnd("completed", None, "stop")]
    assert result.content_events == 1


def test_chat_reasoning_gives_first_token_before_first_content_token() -> None:
    body = ROLE + _chunk(None, reasoning_content="ab") + _chunk("xyz") + _chunk("q") + DONE
    obs, result = _observe("chat", body)
    assert obs[:5] == [
        FirstToken("reasoning"),
        ContentDelta("reasoning", 2),
        FirstContentToken("text"),
        ContentDelta("text", 3),
        ContentDelta("text", 1),
    ]
    assert (result.reasoning_text, result.text) == ("ab", "xyzq")


def test_decoder_feed_returns_shared_empty_tuple_when_quiet() -> None:
    for protocol, body in [("chat", ROLE), ("responses", R_CREATED), ("messages", PING)]:
        dec = new_decoder(protocol)
        (item,) = SSEScanner().feed(body)
        first = dec.feed(item)
        assert first == () and first is dec.feed(item)


def test_decoder_content_delta_counts_code_points() -> None:
    obs, _ = _observe("messages", M_START + _mtext("你好😀é") + M_STOP)
    assert ContentDelta("text", 4) in obs


def test_decoder_keepalive_comments_reported_verbatim() -> None:
    obs, result = _observe("chat", b": hopbase-keepalive\n\n" + _chunk("a") + b":\n" + DONE + b": ping\n\n")
    assert [o for o in obs if isinstance(o, Keepalive)] == [Keepalive(b" hopbase-keepalive"), Keepalive(b""), Keepalive(b" ping")]
    assert (result.keepalives, result.anomalies) == (3, {})


def test_decoder_usage_report_emitted_with_stream_values() -> None:
    obs, _ = _observe("messages", M_START + _mtext("a") + M_DELTA + M_STOP)
    assert [o for o in obs if isinstance(o, UsageReport)] == [UsageReport(9, None), UsageReport(9, 5)]


def test_decoder_feed_after_finish_is_usage_error() -> None:
    dec = new_decoder("chat")
    dec.finish()
    with pytest.raises(UsageError):
        dec.feed(SSEComment(b"x"))


def test_decoder_ended_flag_follows_terminal_signal() -> None:
    dec = new_decoder("responses")
    assert not dec.ended
    for item in SSEScanner().feed(R_DONE):
        dec.feed(item)
    assert dec.ended


def test_new_decoder_unknown_protocol_names_allowed_values() -> None:
    with pytest.raises(UsageError, match="'chat', 'responses', 'messages'"):
        new_decoder("gemini")
    with pytest.raises(UsageError):
        decode_stream("Chat", [b""])


def test_protocols_exports_are_listed_and_present() -> None:
    assert PROTOCOLS == ("chat", "responses", "messages")
    for name in protocols.__all__:
        assert hasattr(protocols, name), name
    required = {"new_decoder", "decode_stream", "Decoder", "PROTOCOLS", "StreamResult", "FirstToken",
                "FirstContentToken", "ContentDelta", "Keepalive", "UsageReport", "StreamEnd", "Anomaly"}
    assert required <= set(protocols.__all__)
    for protocol in PROTOCOLS:
        assert isinstance(new_decoder(protocol), protocols.Decoder)


def test_decode_stream_keep_text_false_counts_without_text() -> None:
    body = (DATA / "messages__thinking_tool_use.sse").read_bytes()
    full = decode_stream("messages", [body])
    lean = decode_stream("messages", [body], keep_text=False)
    assert (lean.text, lean.reasoning_text, lean.tool_calls[0]["arguments"]) == ("", "", "")
    assert lean.content_events == full.content_events and lean.output_tokens == full.output_tokens
    assert lean.tool_calls[0]["name"] == "get_weather"


# -- chat outcomes -----------------------------------------------------------------


def test_chat_done_missing_with_finish_reason_is_completed() -> None:
    r = decode_stream("chat", [ROLE + _chunk("hi") + _chunk(None, "stop")])
    assert (r.outcome, r.stop_reason, r.text) == ("completed", "stop", "hi")


def test_chat_done_missing_without_finish_reason_is_truncated() -> None:
    r = decode_stream("chat", [ROLE + _chunk("hi") + _chunk(" there")])
    assert (r.outcome, r.stop_reason, r.text, r.anomalies) == ("truncated", None, "hi there", {})


def test_chat_cut_mid_event_is_truncated_with_partial_event() -> None:
    body = ROLE + _chunk("hi") + _chunk(None, "stop")
    r = decode_stream("chat", [ROLE + _chunk("hi") + body[len(ROLE) + len(_chunk("hi")) :][:20]])
    assert (r.outcome, r.text, r.anomalies) == ("truncated", "hi", {"partial_event": 1})


def test_chat_done_with_whitespace_and_without_blank_line_variants() -> None:
    assert decode_stream("chat", [_chunk("a") + b"data:  [DONE] \n\n"]).outcome == "completed"
    assert decode_stream("chat", [_chunk("a") + b"data: [DONE]"]).outcome == "truncated"
    r = decode_stream("chat", [_chunk("a") + b"data: [DONE]x\n\n"])
    assert (r.outcome, r.detail, r.anomalies) == ("failed", "malformed_event", {"malformed_json": 1})


def test_chat_usage_absent_gives_none() -> None:
    r = decode_stream("chat", [ROLE + _chunk("a", "stop") + DONE])
    assert (r.input_tokens, r.output_tokens) == (None, None)


def test_chat_usage_on_chunk_with_choices_counts() -> None:
    last = _ev({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 7, "completion_tokens": 1, "total_tokens": 8}})
    r = decode_stream("chat", [_chunk("a", usage=None) + last + DONE])
    assert (r.input_tokens, r.output_tokens, r.stop_reason) == (7, 1, "stop")


def test_chat_usage_null_on_every_chunk_then_final_usage_chunk() -> None:
    body = b"".join(_ev({"choices": [{"index": 0, "delta": {"content": c}, "finish_reason": None}], "usage": None}) for c in "abc")
    r = decode_stream("chat", [body + _chunk(None, "stop") + USAGE + DONE])
    assert (r.text, r.input_tokens, r.output_tokens, r.anomalies) == ("abc", 3, 2, {})


def test_chat_error_after_text_keeps_text_and_fails() -> None:
    err = _ev({"error": {"message": "boom", "type": "server_error", "code": None}})
    r = decode_stream("chat", [ROLE + _chunk("Hel") + _chunk("lo") + err + _chunk("late") + DONE])
    assert (r.outcome, r.error_code, r.error_message, r.text) == ("failed", "server_error", "boom", "Hello")
    assert r.content_events == 2 and r.anomalies == {"data_after_end": 2}


def test_chat_error_code_preferred_over_type_and_int_code_formatted() -> None:
    r = decode_stream("chat", [_ev({"error": {"message": "m", "type": "server_error", "code": 429}})])
    assert (r.outcome, r.error_code, r.error_type) == ("failed", "429", "server_error")
    r = decode_stream("chat", [_ev({"error": {"message": "m", "type": "t", "code": "quota"}})])
    assert (r.outcome, r.error_code, r.error_type) == ("failed", "quota", "t")


def test_chat_error_event_name_means_failed() -> None:
    r = decode_stream("chat", [_chunk("a") + _ev({"error": {"message": "x", "type": "overloaded"}}, "error")])
    assert (r.outcome, r.error_code, r.error_message, r.text) == ("failed", "overloaded", "x", "a")


def test_chat_data_after_done_is_anomaly_and_ignored() -> None:
    r = decode_stream("chat", [_chunk("a", "stop") + DONE + _chunk("b") + USAGE])
    assert (r.outcome, r.text, r.input_tokens, r.anomalies) == ("completed", "a", None, {"data_after_end": 2})


def test_chat_tool_calls_split_over_many_chunks() -> None:
    args = '{"query": "weather in 東京", "units": "c"}'
    first = _chunk(None, role="assistant", tool_calls=[{"index": 0, "id": "call_1", "type": "function", "function": {"name": "search", "arguments": ""}}])
    pieces = b"".join(_chunk(None, tool_calls=[{"index": 0, "function": {"arguments": args[i : i + 3]}}]) for i in range(0, len(args), 3))
    second = _chunk(None, tool_calls=[{"index": 1, "id": "call_2", "function": {"name": "f2", "arguments": "{}"}}])
    obs, r = _observe("chat", first + pieces + second + _chunk(None, "tool_calls") + DONE)
    assert r.tool_calls == [
        {"index": 0, "id": "call_1", "name": "search", "arguments": args},
        {"index": 1, "id": "call_2", "name": "f2", "arguments": "{}"},
    ]
    assert obs[:2] == [FirstToken("tool"), FirstContentToken("tool")]
    # the name fragment of each call is an event of its own (issue 13 item 2)
    assert r.content_events == len(range(0, len(args), 3)) + 2 and r.stop_reason == "tool_calls"


def test_chat_multiple_choices_text_from_index_zero() -> None:
    two = _ev({"choices": [{"index": 0, "delta": {"content": "A"}, "finish_reason": None},
                           {"index": 1, "delta": {"content": "BB"}, "finish_reason": None}]})
    only_one = _ev({"choices": [{"index": 1, "delta": {"content": "C"}, "finish_reason": "stop"}]})
    obs, r = _observe("chat", two + only_one + _chunk(None, "stop") + DONE)
    assert (r.text, r.content_events, r.stop_reason, r.choices) == ("A", 1, "stop", 2)
    assert [o for o in obs if isinstance(o, ContentDelta)] == [ContentDelta("text", 1)]


def test_chat_unknown_event_name_and_ping_event() -> None:
    r = decode_stream("chat", [_chunk("a") + _ev({"x": 1}, "weird") + _ev({}, "ping") + DONE])
    assert (r.outcome, r.text, r.anomalies) == ("completed", "a", {"unknown_event": 1})


def test_chat_odd_shapes_are_anomalies() -> None:
    body = _ev([1, 2]) + _ev({"choices": "no"}) + _ev({"id": "x"}) + _ev({"choices": [], "usage": 5}) + _chunk("a") + DONE
    r = decode_stream("chat", [body])
    # a chunk that is not an object is unusable: the stream failed (issue 13 item 8)
    assert (r.outcome, r.detail, r.text, r.anomalies) == ("failed", "malformed_event", "a", {"unexpected_shape": 4})
    body = _ev({"choices": "no"}) + _ev({"id": "x"}) + _ev({"choices": [], "usage": 5}) + _chunk("a") + DONE
    r = decode_stream("chat", [body])
    assert (r.outcome, r.detail, r.text, r.anomalies) == ("completed", None, "a", {"unexpected_shape": 3})


# -- responses outcomes -------------------------------------------------------------


def test_responses_completed_with_usage() -> None:
    obs, r = _observe("responses", R_CREATED + _rtext("Hi") + _rtext("") + _rtext("!") + R_DONE)
    assert (r.outcome, r.text, r.stop_reason, r.input_tokens, r.output_tokens) == ("completed", "Hi!", "completed", 4, 2)
    assert obs[-2:] == [UsageReport(4, 2, 6), StreamEnd("completed", None, "completed")]
    assert r.total_tokens == 6
    assert r.content_events == 2


def test_responses_failed_after_text_keeps_text_and_tokens() -> None:
    failed = _resp("response.failed", response={"status": "failed", "error": {"code": "rate_limit_exceeded", "message": "slow down"},
                                                "usage": {"input_tokens": 4, "output_tokens": 1}})
    r = decode_stream("responses", [R_CREATED + _rtext("Par") + failed + _rtext("late")])
    assert (r.outcome, r.error_code, r.error_message, r.text) == ("failed", "rate_limit_exceeded", "slow down", "Par")
    assert (r.input_tokens, r.output_tokens, r.anomalies) == (4, 1, {"data_after_end": 1})


def test_responses_error_event_is_failed() -> None:
    err = _resp("error", code="server_error", message="oops", param=None, sequence_number=3)
    r = decode_stream("responses", [R_CREATED + _rtext("a") + err])
    assert (r.outcome, r.error_code, r.error_message, r.text, r.input_tokens) == ("failed", "server_error", "oops", "a", None)


def test_responses_incomplete_is_completed_with_reason() -> None:
    inc = _resp("response.incomplete", response={"status": "incomplete", "incomplete_details": {"reason": "content_filter"}})
    r = decode_stream("responses", [R_CREATED + _rtext("a") + inc])
    assert (r.outcome, r.stop_reason, r.input_tokens) == ("completed", "content_filter", None)


def test_responses_truncated_between_and_mid_event() -> None:
    between = decode_stream("responses", [R_CREATED + _rtext("a")])
    assert (between.outcome, between.text, between.anomalies) == ("truncated", "a", {})
    mid = decode_stream("responses", [R_CREATED + _rtext("a") + R_DONE[:-30]])
    assert (mid.outcome, mid.anomalies, mid.input_tokens) == ("truncated", {"partial_event": 1}, None)


def test_responses_without_event_lines_decoded_by_type() -> None:
    body = _resp("response.created", False, response={}) + _resp("response.output_text.delta", False, delta="x") + \
        _resp("response.completed", False, response={"status": "completed", "usage": {"input_tokens": 1, "output_tokens": 1}})
    r = decode_stream("responses", [body])
    assert (r.outcome, r.text, r.output_tokens, r.anomalies) == ("completed", "x", 1, {})


def test_responses_event_name_used_when_type_missing() -> None:
    body = _ev({"delta": "y"}, "response.output_text.delta") + _ev({"response": {"status": "completed"}}, "response.completed")
    r = decode_stream("responses", [body])
    assert (r.outcome, r.text) == ("completed", "y")


def test_responses_known_event_types_are_not_unknown() -> None:
    body = b"".join(_ev({"type": t}, t) for t in sorted(KNOWN_EVENT_TYPES - {"response.completed", "response.incomplete", "response.failed", "error"}))
    r = decode_stream("responses", [body + _resp("response.made_up.delta", delta="z") + R_DONE])
    assert (r.outcome, r.anomalies, r.text) == ("completed", {"unknown_event": 1}, "")


def test_responses_refusal_and_reasoning_deltas() -> None:
    body = R_CREATED + _resp("response.reasoning_text.delta", delta="r1") + \
        _resp("response.reasoning_summary_text.delta", delta="r2") + _resp("response.refusal.delta", delta="no") + R_DONE
    obs, r = _observe("responses", body)
    assert (r.reasoning_text, r.text, r.refusal_text, r.content_events) == ("r1r2", "", "no", 3)
    assert obs[0] == FirstToken("reasoning") and FirstContentToken("refusal") in obs


def test_responses_function_call_args_only_in_done_event() -> None:
    added = _resp("response.output_item.added", output_index=0, item={"id": "fc", "type": "function_call", "call_id": "c1", "name": "f", "arguments": ""})
    done = _resp("response.function_call_arguments.done", item_id="fc", output_index=0, arguments='{"a":1}')
    r = decode_stream("responses", [added + done + R_DONE])
    assert r.tool_calls == [{"index": 0, "id": "c1", "name": "f", "arguments": '{"a":1}'}]
    assert r.events == {"text": 0, "reasoning": 0, "tool": 1, "refusal": 0}  # the name


# -- messages outcomes ----------------------------------------------------------------


def test_messages_completed_with_ping_and_usage() -> None:
    obs, r = _observe("messages", M_START + PING + M_BLOCK + PING + _mtext("Hi") + _mtext("") + M_DELTA + PING + M_STOP)
    assert (r.outcome, r.text, r.stop_reason, r.input_tokens, r.output_tokens) == ("completed", "Hi", "end_turn", 9, 5)
    assert r.anomalies == {} and r.content_events == 1
    assert obs[-1] == StreamEnd("completed", None, "end_turn")


def test_messages_error_after_text_keeps_text_and_tokens() -> None:
    err = _msg("error", error={"type": "overloaded_error", "message": "Overloaded"})
    r = decode_stream("messages", [M_START + M_BLOCK + _mtext("Par") + err + M_STOP])
    assert (r.outcome, r.error_code, r.error_message, r.text, r.input_tokens) == ("failed", "overloaded_error", "Overloaded", "Par", 9)
    assert r.anomalies == {"data_after_end": 1}


def test_messages_truncated_between_events_and_missing_stop() -> None:
    r = decode_stream("messages", [M_START + M_BLOCK + _mtext("a") + M_DELTA])
    assert (r.outcome, r.stop_reason, r.output_tokens, r.anomalies) == ("truncated", "end_turn", 5, {})


def test_messages_output_tokens_last_message_delta_wins() -> None:
    d1 = _msg("message_delta", delta={"stop_reason": None}, usage={"output_tokens": 3})
    d2 = _msg("message_delta", delta={"stop_reason": "max_tokens"}, usage={"output_tokens": 11, "input_tokens": 12})
    r = decode_stream("messages", [M_START + _mtext("a") + d1 + d2 + M_STOP])
    assert (r.output_tokens, r.input_tokens, r.stop_reason) == (11, 12, "max_tokens")


def test_messages_unknown_event_and_delta_types_counted() -> None:
    odd = _msg("content_block_delta", index=0, delta={"type": "sparkle_delta", "x": 1}) + _msg("mystery")
    r = decode_stream("messages", [M_START + odd + _mtext("a") + M_STOP])
    assert (r.outcome, r.text, r.anomalies) == ("completed", "a", {"unknown_event": 2})


def test_messages_signature_delta_is_not_a_token() -> None:
    sig = _msg("content_block_delta", index=0, delta={"type": "signature_delta", "signature": "abc"})
    obs, r = _observe("messages", M_START + sig + M_STOP)
    assert not any(isinstance(o, (FirstToken, ContentDelta)) for o in obs) and r.content_events == 0


# -- bad input and keepalives everywhere --------------------------------------------------

BODIES = {
    "chat": [ROLE, _chunk("a"), _chunk("b", "stop"), USAGE, DONE],
    "responses": [R_CREATED, _rtext("a"), _rtext("b"), R_DONE],
    "messages": [M_START, M_BLOCK, _mtext("a"), _mtext("b"), M_DELTA, M_STOP],
}


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_decoder_keepalive_in_every_position_changes_nothing_else(protocol: str) -> None:
    events = BODIES[protocol]
    base = decode_stream(protocol, [b"".join(events)])
    assert base.outcome == "completed" and base.text == "ab"
    for i in range(len(events) + 1):
        for comment in (b": hopbase-keepalive\n\n", b": ping\n", b":\r\n"):
            body = b"".join(events[:i]) + comment + b"".join(events[i:])
            r = decode_stream(protocol, [body])
            assert dataclasses.replace(r, keepalives=0) == base


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_decoder_malformed_json_and_invalid_utf8_are_counted(protocol: str) -> None:
    events = BODIES[protocol]
    bad = b"data: {not json\n\n" + b"data: \xff\xfe\n\n"
    r = decode_stream(protocol, [events[0] + bad + b"".join(events[1:])])
    # unusable events fail the stream; the rest is still decoded (issue 13 item 8)
    assert (r.outcome, r.detail, r.text) == ("failed", "malformed_event", "ab")
    assert r.anomalies == {"malformed_json": 2, "invalid_utf8": 1}


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_decoder_invalid_utf8_inside_json_string_replaced(protocol: str) -> None:
    text_event = BODIES[protocol][1] if protocol != "messages" else BODIES[protocol][2]
    broken = text_event.replace(b'"a"', b'"a\xff"')
    r = decode_stream(protocol, [b"".join(broken if e is text_event else e for e in BODIES[protocol])])
    assert r.text == "a\ufffdb" and r.anomalies == {"invalid_utf8": 1}


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_decode_stream_empty_body_is_truncated(protocol: str) -> None:
    assert decode_stream(protocol, []) == StreamResult()


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_decode_stream_oversized_event_is_counted_not_raised(protocol: str) -> None:
    r = decode_stream(protocol, [BODIES[protocol][0] + b"data: " + b"x" * 5000 + b"\n\n"], max_event_bytes=1024)
    assert r.outcome == "truncated" and r.anomalies.get("event_too_large") == 1


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_decoder_deeply_nested_json_is_malformed_not_crash(protocol: str) -> None:
    r = decode_stream(protocol, [b"data: " + b"[" * 100_000 + b"\n\n"])
    assert r.anomalies == {"malformed_json": 1}


_SSE_BITS = st.sampled_from(
    [b"data: ", b"event: ", b"error", b"message_stop", b"response.completed", b"[DONE]", b"\n", b"\r\n", b"\n\n",
     b":", b"{", b"}", b'"type"', b'"error"', b'"choices"', b"[", b"]", b",", b'"delta"', b'"text"', b"\xff", b"\xe4\xbd"]
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    protocol=st.sampled_from(PROTOCOLS),
    body=st.one_of(st.binary(max_size=400), st.lists(_SSE_BITS | st.binary(max_size=8), max_size=60).map(b"".join)),
    cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=8),
)
def test_decode_stream_never_raises_on_random_bytes(protocol: str, body: bytes, cuts: list[int]) -> None:
    points = sorted({min(c, len(body)) for c in cuts})
    chunks = [body[a:b] for a, b in zip([0, *points], [*points, len(body)])]
    r = decode_stream(protocol, chunks)
    assert isinstance(r, StreamResult) and r.outcome in ("completed", "failed", "truncated")
    assert r == decode_stream(protocol, [body])


@settings(max_examples=60, deadline=None)
@given(
    protocol=st.sampled_from(PROTOCOLS),
    events=st.lists(
        st.fixed_dictionaries({"type": st.sampled_from(["response.output_text.delta", "content_block_delta", "message_delta",
                                                        "response.completed", "error", "message_stop", "x"])},
                              optional={"choices": st.just([{"index": 0, "delta": {"content": None}}]),
                                        "delta": st.one_of(st.none(), st.text(max_size=3), st.just({"type": "text_delta", "text": 5})),
                                        "response": st.one_of(st.none(), st.just({"usage": {"input_tokens": "7"}})),
                                        "error": st.one_of(st.none(), st.integers(), st.text(max_size=3)),
                                        "usage": st.one_of(st.none(), st.just({"output_tokens": True}))}),
        max_size=8,
    ),
)
def test_decoder_never_raises_on_wrongly_typed_fields(protocol: str, events: list[dict[str, object]]) -> None:
    dec = new_decoder(protocol)
    for e in events:
        for o in dec.feed(SSEEvent(str(e["type"]), json.dumps(e).encode())):
            assert isinstance(o, (FirstToken, FirstContentToken, ContentDelta, Keepalive, UsageReport, StreamEnd, Anomaly))
    r = dec.finish()
    assert r.input_tokens is None or type(r.input_tokens) is int
    assert r.output_tokens is None or type(r.output_tokens) is int


def test_protocols_import_no_trio_or_httpx() -> None:
    # Sans-I/O (STYLE.md §1): the decoders must not pull in the async stack.
    import subprocess
    import sys

    code = "import sys, hopbench.protocols; print(sorted(m for m in ('trio', 'httpx', 'httpx2') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60,
                         cwd=Path(__file__).parent.parent)
    assert out.stdout.strip() == "[]"


def test_chat_tool_call_fragments_without_index_continue_latest_call() -> None:
    body = _chunk(None, tool_calls=[{"id": "c1", "function": {"name": "f", "arguments": "{\"a\""}}]) + \
        _chunk(None, tool_calls=[{"function": {"arguments": ":1}"}}]) + \
        _chunk(None, tool_calls=[{"id": "c2", "function": {"name": "g", "arguments": "{}"}}]) + DONE
    r = decode_stream("chat", [body])
    assert r.tool_calls == [{"index": 0, "id": "c1", "name": "f", "arguments": '{"a":1}'},
                            {"index": 1, "id": "c2", "name": "g", "arguments": "{}"}]


# -- issue 13: stream semantics, round 2 --------------------------------------------


def _timed(protocol: str, reads: list[tuple[int, bytes]], *, expect_usage: bool = False,
           ) -> tuple[dict[str, int], list[object], StreamResult]:
    """Feed one read per (ms, bytes) pair through a scanner and a decoder.

    Returns the time (ms) of the read that gave the first FirstToken,
    FirstContentToken and StreamEnd (keys "ttft", "ttft_content", "end"),
    all observations, and the result.
    """
    scanner, dec = SSEScanner(), new_decoder(protocol, expect_usage=expect_usage)
    times: dict[str, int] = {}
    out: list[object] = []
    names = {FirstToken: "ttft", FirstContentToken: "ttft_content", StreamEnd: "end"}
    for ms, data in reads:
        for item in scanner.feed(data):
            for ob in dec.feed(item):
                out.append(ob)
                if type(ob) in names:
                    times.setdefault(names[type(ob)], ms)
    return times, out, dec.finish(discarded_partial=scanner.close())


def _lines(*lines: bytes) -> list[tuple[int, bytes]]:
    return [(i, line) for i, line in enumerate(lines)]


# item 1: a terminal signal must be a real one


def test_issue13_chat_empty_finish_reason_is_not_a_finish() -> None:
    body = [
        b'data: {"id":"c1","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":""}]}\n\n',
        b'data: {"id":"c1","choices":[{"index":0,"delta":{"content":"Blue"},"finish_reason":""}]}\n\n',
        b'data: {"id":"c1","choices":[{"index":0,"delta":{"content":" sky"},"finish_reason":""}]}\n\n',
    ]
    r = decode_stream("chat", body)
    assert (r.outcome, r.text, r.stop_reason, r.no_done, r.detail) == ("truncated", "Blue sky", None, False, None)


@pytest.mark.parametrize("value", ["", " ", "\n\t", None, 0, 1, False, True, [], ["stop"], {}, {"x": "stop"}, 1.5])
def test_chat_finish_reason_that_only_looks_present_is_no_finish(value: object) -> None:
    finish = _ev({"choices": [{"index": 0, "delta": {}, "finish_reason": value}]})
    cut = decode_stream("chat", [ROLE + _chunk("a") + finish])
    assert (cut.outcome, cut.stop_reason, cut.text) == ("truncated", None, "a")
    done = decode_stream("chat", [ROLE + _chunk("a") + finish + DONE])
    assert (done.outcome, done.stop_reason) == ("completed", None)


def test_chat_finish_reason_is_stripped() -> None:
    r = decode_stream("chat", [_chunk("a", " stop\n")])
    assert (r.outcome, r.stop_reason, r.no_done) == ("completed", "stop", True)


@pytest.mark.parametrize("value", ["", "  ", None, 3, [], {}])
def test_messages_stop_reason_that_only_looks_present_is_none(value: object) -> None:
    delta = _msg("message_delta", delta={"stop_reason": value, "stop_sequence": None}, usage={"output_tokens": 5})
    r = decode_stream("messages", [M_START + M_BLOCK + _mtext("a") + delta + M_STOP])
    assert (r.outcome, r.stop_reason) == ("completed", None)
    # a real stop_reason without message_stop is still no end
    real_delta = M_DELTA
    cut = decode_stream("messages", [M_START + M_BLOCK + _mtext("a") + real_delta])
    assert (cut.outcome, cut.stop_reason) == ("truncated", "end_turn")


@pytest.mark.parametrize("value", ["", " ", None, 7, ["completed"]])
def test_responses_status_and_reason_that_only_look_present_fall_back(value: object) -> None:
    done = _resp("response.completed", response={"status": value})
    assert decode_stream("responses", [R_CREATED + _rtext("a") + done]).stop_reason == "completed"
    inc = _resp("response.incomplete", response={"status": value, "incomplete_details": {"reason": value}})
    assert decode_stream("responses", [R_CREATED + _rtext("a") + inc]).stop_reason == "incomplete"
    failed = _resp("response.failed", response={"status": value, "error": {"code": value, "message": "m"}})
    r = decode_stream("responses", [R_CREATED + failed])
    expect_code = "7" if value == 7 else None  # an int error code is a code
    assert (r.outcome, r.stop_reason, r.error_code) == ("failed", "failed", expect_code)


@pytest.mark.parametrize("value", ["", " ", None, {}, 0, False])
def test_chat_error_that_only_looks_present_is_no_error(value: object) -> None:
    r = decode_stream("chat", [_chunk("a") + _ev({"choices": [{"index": 0, "delta": {"content": "b"}}], "error": value}) + DONE])
    assert (r.outcome, r.text, r.error_code) == ("completed", "ab", None)


# item 2: TTFT starts at the first generated fragment, tool names included

TOOL_ROLE = b'data: {"choices":[{"index":0,"delta":{"role":"assistant","content":null},"finish_reason":null}]}\n\n'


def test_issue13_chat_tool_call_ttft_starts_at_name_fragment() -> None:
    reads = [
        (0, TOOL_ROLE),
        (300, b'data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_7","type":"function","function":{"name":"lookup","arguments":""}}]}}]}\n\n'),
        (350, b'data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\\"q\\":"}}]}}]}\n\n'),
        (400, b'data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\\"tides\\"}"}}]}}]}\n\n'),
        (410, b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}\n\n'),
        (420, DONE),
    ]
    times, obs, r = _timed("chat", reads)
    assert times == {"ttft": 300, "ttft_content": 300, "end": 420}
    assert [o for o in obs if isinstance(o, ContentDelta)] == [
        ContentDelta("tool", 6), ContentDelta("tool", 5), ContentDelta("tool", 8)]
    assert r.tool_calls == [{"index": 0, "id": "call_7", "name": "lookup", "arguments": '{"q":"tides"}'}]
    assert (r.outcome, r.stop_reason, r.events["tool"], r.content_events) == ("completed", "tool_calls", 3, 3)


def test_chat_tool_name_repeated_in_every_fragment_counts_once() -> None:
    frag = [_chunk(None, tool_calls=[{"index": 0, "id": "c", "function": {"name": "f", "arguments": a}}]) for a in ("", "{", "}")]
    obs, r = _observe("chat", b"".join(frag) + _chunk(None, "tool_calls") + DONE)
    assert [o for o in obs if isinstance(o, ContentDelta)] == [ContentDelta("tool", 1)] * 3
    assert r.tool_calls[0]["arguments"] == "{}"


def test_chat_legacy_function_call_name_starts_ttft() -> None:
    reads = [(0, ROLE), (300, _chunk(None, function_call={"name": "lookup", "arguments": ""})),
             (350, _chunk(None, function_call={"arguments": "{}"})), (360, _chunk(None, "function_call")), (370, DONE)]
    times, _, r = _timed("chat", reads)
    assert times["ttft"] == 300 and r.tool_calls[0]["name"] == "lookup" and r.tool_calls[0]["arguments"] == "{}"


def test_messages_tool_use_block_start_starts_ttft() -> None:
    reads = [
        (0, M_START),
        (300, _msg("content_block_start", index=0, content_block={"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {}})),
        (350, _msg("content_block_delta", index=0, delta={"type": "input_json_delta", "partial_json": '{"q":'})),
        (400, _msg("content_block_delta", index=0, delta={"type": "input_json_delta", "partial_json": '"tides"}'})),
        (410, _msg("content_block_stop", index=0)),
        (420, _msg("message_delta", delta={"stop_reason": "tool_use"}, usage={"output_tokens": 9})),
        (430, M_STOP),
    ]
    times, obs, r = _timed("messages", reads)
    assert times == {"ttft": 300, "ttft_content": 300, "end": 430}
    assert [o for o in obs if isinstance(o, ContentDelta)][0] == ContentDelta("tool", 6)
    assert r.tool_calls == [{"index": 0, "id": "toolu_1", "name": "lookup", "arguments": '{"q":"tides"}'}]


def test_responses_function_call_item_added_starts_ttft() -> None:
    item = {"id": "fc_1", "type": "function_call", "call_id": "call_7", "name": "lookup", "arguments": "", "status": "in_progress"}
    reads = [
        (0, R_CREATED),
        (100, _resp("response.output_item.added", output_index=0, item={"id": "rs_1", "type": "reasoning", "summary": []})),
        (300, _resp("response.output_item.added", output_index=1, item=item)),
        (350, _resp("response.function_call_arguments.delta", item_id="fc_1", output_index=1, delta='{"q":')),
        (400, _resp("response.function_call_arguments.delta", item_id="fc_1", output_index=1, delta='"tides"}')),
        (410, _resp("response.output_item.done", output_index=1, item={**item, "arguments": '{"q":"tides"}', "status": "completed"})),
        (420, R_DONE),
    ]
    times, _, r = _timed("responses", reads)
    assert times == {"ttft": 300, "ttft_content": 300, "end": 420}
    assert r.tool_calls == [{"index": 1, "id": "call_7", "name": "lookup", "arguments": '{"q":"tides"}'}]
    assert r.events == {"text": 0, "reasoning": 0, "tool": 3, "refusal": 0}


def test_responses_message_item_added_is_not_generated_output() -> None:
    added = _resp("response.output_item.added", output_index=0, item={"id": "m", "type": "message", "role": "assistant", "content": []})
    part = _resp("response.content_part.added", item_id="m", output_index=0, content_index=0, part={"type": "output_text", "text": ""})
    times, _, _ = _timed("responses", [(0, R_CREATED), (100, added), (150, part), (300, _rtext("Hi")), (400, R_DONE)])
    assert times["ttft"] == 300


# item 3: refusals are their own channel


def test_issue13_chat_refusal_is_its_own_channel() -> None:
    reads = _lines(
        ROLE,
        _ev({"choices": [{"index": 0, "delta": {"refusal": "I can't"}, "finish_reason": None}]}),
        _ev({"choices": [{"index": 0, "delta": {"refusal": " share that."}, "finish_reason": None}]}),
        _chunk(None, "stop"),
        DONE,
    )
    times, obs, r = _timed("chat", reads)
    assert (r.outcome, r.text, r.refusal_text, r.stop_reason) == ("completed", "", "I can't share that.", "stop")
    assert r.events == {"text": 0, "reasoning": 0, "tool": 0, "refusal": 2} and r.content_events == 2
    assert times == {"ttft": 1, "ttft_content": 1, "end": 4}
    assert obs[:3] == [FirstToken("refusal"), FirstContentToken("refusal"), ContentDelta("refusal", 7)]


def test_chat_refusal_beside_text_in_one_chunk_and_not_kept_without_keep_text() -> None:
    body = _ev({"choices": [{"index": 0, "delta": {"content": "x", "refusal": "no"}}]}) + _chunk(None, "stop") + DONE
    r = decode_stream("chat", [body])
    assert (r.text, r.refusal_text, r.events["text"], r.events["refusal"]) == ("x", "no", 1, 1)
    lean = decode_stream("chat", [body], keep_text=False)
    assert (lean.text, lean.refusal_text, lean.events) == ("", "", r.events)


def test_responses_refusal_delta_is_refusal_channel() -> None:
    ref = _resp("response.refusal.delta", item_id="m", output_index=0, content_index=0, delta="I can't")
    times, obs, r = _timed("responses", [(0, R_CREATED), (200, ref), (300, R_DONE)])
    assert (r.text, r.refusal_text, times["ttft"], times["ttft_content"]) == ("", "I can't", 200, 200)


# item 4: stop reasons broken down; abort; cut after the finish chunk


@pytest.mark.parametrize(("reason", "klass"), [
    ("stop", "stop"), ("end_turn", "stop"), ("stop_sequence", "stop"), ("completed", "stop"),
    ("length", "length"), ("max_tokens", "length"), ("max_output_tokens", "length"),
    ("tool_calls", "tool_calls"), ("tool_use", "tool_calls"), ("function_call", "tool_calls"),
    ("content_filter", "content_filter"), ("refusal", "content_filter"), ("pause_turn", "pause_turn"),
    ("abort", "abort"), ("model_context_window_exceeded", "length"), ("repetition", "other"), ("STOP", "other"), (None, "none"),
])
def test_stop_class(reason: str | None, klass: str) -> None:
    assert protocols.stop_class(reason) == klass and klass in protocols.STOP_CLASSES


def test_issue13_chat_engine_abort_is_failed() -> None:
    times, obs, r = _timed("chat", _lines(ROLE, _chunk("par"), _chunk(None, "abort"), DONE))
    assert (r.outcome, r.detail, r.stop_reason, r.text, r.error_code) == ("failed", "abort", "abort", "par", None)
    assert obs[-1] == StreamEnd("failed", None, "abort", "abort") and times["end"] == 3
    cut = decode_stream("chat", [ROLE + _chunk("par") + _chunk(None, "abort")])
    assert (cut.outcome, cut.detail) == ("failed", "abort")


def test_issue13_chat_cut_after_finish_with_usage_requested_is_truncated() -> None:
    body = [ROLE, _chunk("Hi"), _chunk(None, "stop")]
    r = decode_stream("chat", body, expect_usage=True)
    assert (r.outcome, r.detail, r.stop_reason, r.text, r.no_done) == ("truncated", "usage_missing", "stop", "Hi", False)
    with_usage = decode_stream("chat", [*body, USAGE], expect_usage=True)
    assert (with_usage.outcome, with_usage.detail, with_usage.no_done, with_usage.total_tokens) == ("completed", None, True, 5)
    with_done = decode_stream("chat", [*body, DONE], expect_usage=True)
    assert (with_done.outcome, with_done.no_done) == ("completed", False)


def test_issue13_chat_cut_after_finish_without_usage_request_is_completed_no_done() -> None:
    r = decode_stream("chat", [ROLE, _chunk("Hi"), _chunk(None, "stop")])
    assert (r.outcome, r.detail, r.no_done) == ("completed", None, True)
    assert decode_stream("chat", [ROLE, _chunk("Hi"), _chunk(None, "stop"), DONE]).no_done is False


def test_chat_usage_before_the_finish_chunk_does_not_stand_for_the_usage_chunk() -> None:
    early = _ev({"choices": [{"index": 0, "delta": {"content": "a"}}], "usage": {"prompt_tokens": 1, "completion_tokens": 1}})
    r = decode_stream("chat", [early, _chunk(None, "stop")], expect_usage=True)
    assert (r.outcome, r.detail) == ("truncated", "usage_missing")
    both = _ev({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}], "usage": {"prompt_tokens": 1, "completion_tokens": 1}})
    assert decode_stream("chat", [early, both], expect_usage=True).outcome == "completed"


@pytest.mark.parametrize("protocol", ["responses", "messages"])
def test_expect_usage_changes_nothing_on_typed_protocols(protocol: str) -> None:
    body = b"".join(BODIES[protocol])
    assert decode_stream(protocol, [body], expect_usage=True) == decode_stream(protocol, [body])
    cut = b"".join(BODIES[protocol][:-1])
    assert decode_stream(protocol, [cut], expect_usage=True).outcome == "truncated"


# item 6: several choices


def test_issue13_chat_several_choices_measure_choice_zero() -> None:
    def c(i: int, text: str | None = None, finish: str | None = None) -> bytes:
        delta = {} if text is None else {"content": text}
        return _ev({"choices": [{"index": i, "delta": delta, "finish_reason": finish}]})
    usage = _ev({"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 6, "total_tokens": 11}})
    reads = [(0, c(0, "") + c(1, "")), (100, c(1, "Other")), (200, c(0, "Blue")), (250, c(1, " one")),
             (300, c(0, " sky")), (320, c(1, None, "stop")), (330, c(0, None, "stop")), (340, usage), (350, DONE)]
    times, obs, r = _timed("chat", reads, expect_usage=True)
    assert times == {"ttft": 200, "ttft_content": 200, "end": 350}
    assert [o for o in obs if isinstance(o, ContentDelta)] == [ContentDelta("text", 4), ContentDelta("text", 4)]
    assert (r.text, r.choices, r.content_events, r.output_tokens, r.stop_reason) == ("Blue sky", 2, 2, 6, "stop")


def test_chat_choice_indexes_counted_distinct_and_odd_indexes_ignored() -> None:
    chunk = _ev({"choices": [{"index": i, "delta": {"content": "x"}} for i in (0, 1, 2, 2, None)] + [{"index": [1], "delta": {}}]})
    r = decode_stream("chat", [chunk + DONE])
    assert (r.choices, r.text, r.events["text"]) == (3, "xx", 1)


# item 7: hidden reasoning


def test_issue13_chat_hidden_reasoning_flagged_from_usage() -> None:
    usage = {"prompt_tokens": 5, "completion_tokens": 70, "total_tokens": 75, "completion_tokens_details": {"reasoning_tokens": 64}}
    r = decode_stream("chat", [ROLE + _chunk("Hi") + _chunk(None, "stop") + _ev({"choices": [], "usage": usage}) + DONE])
    assert (r.hidden_reasoning, r.reasoning_tokens, r.total_tokens) == (True, 64, 75)
    shown = decode_stream("chat", [ROLE + _chunk(None, reasoning_content="hmm") + _chunk("Hi") + _ev({"choices": [], "usage": usage}) + DONE])
    assert (shown.hidden_reasoning, shown.reasoning_tokens) == (False, 64)
    usage["completion_tokens_details"] = {"reasoning_tokens": 0}
    none = decode_stream("chat", [ROLE + _chunk("Hi") + _ev({"choices": [], "usage": usage}) + DONE])
    assert (none.hidden_reasoning, none.reasoning_tokens) == (False, 0)


def test_responses_hidden_reasoning_from_usage_and_from_reasoning_item() -> None:
    usage = {"input_tokens": 4, "output_tokens": 40, "total_tokens": 44, "output_tokens_details": {"reasoning_tokens": 32}}
    done = _resp("response.completed", response={"status": "completed", "usage": usage})
    r = decode_stream("responses", [R_CREATED + _rtext("Hi") + done])
    assert (r.hidden_reasoning, r.reasoning_tokens, r.total_tokens) == (True, 32, 44)
    item = _resp("response.output_item.added", output_index=0, item={"id": "rs", "type": "reasoning", "summary": []})
    assert decode_stream("responses", [R_CREATED + item + _rtext("Hi") + R_DONE]).hidden_reasoning is True
    summary = _resp("response.reasoning_summary_text.delta", item_id="rs", output_index=0, summary_index=0, delta="plan")
    assert decode_stream("responses", [R_CREATED + item + summary + _rtext("Hi") + done]).hidden_reasoning is False


def test_messages_hidden_reasoning_from_redacted_or_empty_thinking_blocks() -> None:
    redacted = _msg("content_block_start", index=0, content_block={"type": "redacted_thinking", "data": "EmwKAhgB"})
    text = _msg("content_block_start", index=1, content_block={"type": "text", "text": ""}) + _mtext("Hi", 1)
    r = decode_stream("messages", [M_START + redacted + _msg("content_block_stop", index=0) + text + M_DELTA + M_STOP])
    assert (r.hidden_reasoning, r.text, r.reasoning_tokens) == (True, "Hi", None)
    thinking = _msg("content_block_start", index=0, content_block={"type": "thinking", "thinking": ""})
    sig = _msg("content_block_delta", index=0, delta={"type": "signature_delta", "signature": "abc"})
    assert decode_stream("messages", [M_START + thinking + sig + text + M_DELTA + M_STOP]).hidden_reasoning is True
    thought = _msg("content_block_delta", index=0, delta={"type": "thinking_delta", "thinking": "hmm"})
    assert decode_stream("messages", [M_START + thinking + thought + sig + text + M_DELTA + M_STOP]).hidden_reasoning is False


# item 8: a malformed event is a broken stream


def test_issue13_chat_malformed_event_after_five_chunks_fails_and_measurement_continues() -> None:
    chunks = [ROLE] + [_chunk(w) for w in ("One", " two", " three", " four")]
    rest = [_chunk(" six"), _chunk(None, "stop"), USAGE, DONE]
    reads = _lines(*chunks, b'data: {"choices":[{"index":0,"delta":{"content":" five"\n\n', *rest)
    times, obs, r = _timed("chat", reads, expect_usage=True)
    assert (r.outcome, r.detail, r.error_code) == ("failed", "malformed_event", None)
    assert (r.text, r.stop_reason, r.input_tokens, r.output_tokens) == ("One two three four six", "stop", 3, 2)
    assert r.anomalies == {"malformed_json": 1} and r.events["text"] == 5
    assert obs[-1] == StreamEnd("failed", None, "stop", "malformed_event") and times["end"] == 9


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("payload", [b"{not json", b"[1, 2]", b'"text"', b"null", b"17"])
def test_unusable_event_fails_every_protocol(protocol: str, payload: bytes) -> None:
    events = BODIES[protocol]
    r = decode_stream(protocol, [events[0] + b"data: " + payload + b"\n\n" + b"".join(events[1:])])
    assert (r.outcome, r.detail, r.text) == ("failed", "malformed_event", "ab")
    assert sum(r.anomalies.values()) == 1
    cut = decode_stream(protocol, [events[0] + b"data: " + payload + b"\n\n" + b"".join(events[1:-1])])
    assert (cut.outcome, cut.detail) == ("failed", "malformed_event")


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_malformed_data_after_the_end_does_not_fail(protocol: str) -> None:
    r = decode_stream(protocol, [b"".join(BODIES[protocol]) + b"data: {oops\n\n"])
    assert (r.outcome, r.detail, r.anomalies) == ("completed", None, {"data_after_end": 1})


# item 9: error codes that say little


def test_issue13_numeric_error_code_loses_to_specific_type() -> None:
    err = _ev({"error": {"message": "database down", "type": "no_db_connection", "code": "400"}})
    r = decode_stream("chat", [ROLE + _chunk("a") + err])
    assert (r.outcome, r.error_code, r.error_type, r.error_wire_code, r.error_message) == (
        "failed", "no_db_connection", "no_db_connection", "400", "database down")


@pytest.mark.parametrize(("code", "etype", "name"), [
    ("400", "no_db_connection", "no_db_connection"), (400, "no_db_connection", "no_db_connection"),
    ("api_error", "no_db_connection", "no_db_connection"), ("Error", "budget_exceeded", "budget_exceeded"),
    ("rate_limit_exceeded", "invalid_request_error", "rate_limit_exceeded"), ("429", "server_error", "429"),
    ("context_length_exceeded", "quota", "context_length_exceeded"), (None, "server_error", "server_error"),
    ("", "overloaded", "overloaded"), ("  ", None, None), ("500", "", "500"),
])
def test_error_name_rule_across_protocols(code: object, etype: object, name: str | None) -> None:
    error = {"message": "m", "type": etype, "code": code}
    chat = decode_stream("chat", [_ev({"error": error})])
    failed = _resp("response.failed", response={"status": "failed", "error": error})
    resp = decode_stream("responses", [R_CREATED + failed])
    nested = decode_stream("responses", [_resp("error", error=error)])
    msg = decode_stream("messages", [M_START + _msg("error", error=error)])
    for r in (chat, resp, nested, msg):
        assert (r.outcome, r.error_code) == ("failed", name)
    both = name is not None and code not in (None, "", "  ") and etype not in (None, "")
    assert chat.error_type == (str(etype).strip() if both else None)


def test_responses_flat_error_event_type_is_not_the_error_type() -> None:
    r = decode_stream("responses", [R_CREATED + _resp("error", code="400", message="bad")])
    assert (r.error_code, r.error_type, r.error_wire_code) == ("400", None, "400")


# item 13: usage consistency


def test_issue13_total_tokens_recorded_where_sent() -> None:
    chat = decode_stream("chat", [_chunk("a", "stop") + USAGE + DONE])
    resp = decode_stream("responses", [R_CREATED + _rtext("a") + R_DONE])
    msg = decode_stream("messages", [b"".join(BODIES["messages"])])
    assert (chat.total_tokens, resp.total_tokens, msg.total_tokens) == (5, 6, None)
    odd = _ev({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 9}})
    assert decode_stream("chat", [_chunk("a", "stop") + odd + DONE]).total_tokens == 9  # sent, never computed


def test_usage_report_carries_total_and_reasoning_tokens() -> None:
    usage = {"prompt_tokens": 5, "completion_tokens": 7, "total_tokens": 12, "completion_tokens_details": {"reasoning_tokens": 3}}
    obs, _ = _observe("chat", _chunk("a", "stop") + _ev({"choices": [], "usage": usage}) + DONE)
    assert UsageReport(5, 7, 12, 3) in obs


def test_result_defaults_keep_the_old_meaning() -> None:
    r = StreamResult()
    assert (r.refusal_text, r.detail, r.error_type, r.total_tokens, r.reasoning_tokens, r.choices) == ("", None, None, None, None, 1)
    assert (r.events, r.hidden_reasoning, r.no_done) == ({"text": 0, "reasoning": 0, "tool": 0, "refusal": 0}, False, False)
    assert tuple(r.events) == protocols.EVENT_CHANNELS


# Captured from llmock 0.2.2 (PyPI; ``llmock serve --tool-mode off``), one fault
# queued per stream through its admin API: ``{"type": "stream_fault", "kind":
# "malformed", "after_chunks": 5}`` (the sixth event's JSON cut in half, the
# rest sent), and ``"kind": "truncate", "after_chunks": 11`` (the body ends
# cleanly right after the finish chunk: no usage chunk, no ``[DONE]``). Chat
# requests asked for ``stream_options.include_usage``.


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_issue13_llmock_malformed_fault_is_failed_and_measured(protocol: str) -> None:
    r = decode_stream(protocol, [(DATA / f"{protocol}__llmock_malformed.sse").read_bytes()], expect_usage=True)
    assert (r.outcome, r.detail, r.anomalies) == ("failed", "malformed_event", {"malformed_json": 1})
    assert r.output_tokens == {"chat": 13, "responses": 13, "messages": 17}[protocol]  # usage still read
    assert r.stop_reason == {"chat": "stop", "responses": "completed", "messages": "end_turn"}[protocol]


def test_issue13_llmock_truncate_after_finish_chunk() -> None:
    body = (DATA / "chat__llmock_truncate_after_finish.sse").read_bytes()
    asked = decode_stream("chat", [body], expect_usage=True)
    assert (asked.outcome, asked.detail, asked.stop_reason, asked.no_done) == ("truncated", "usage_missing", "stop", False)
    assert asked.text == "Hi there. This is a simulated reply from gpt-4o-mini."
    plain = decode_stream("chat", [body])
    assert (plain.outcome, plain.detail, plain.no_done) == ("completed", None, True)


@pytest.mark.parametrize("finish", ["", " ", None])
def test_chat_fast_path_equals_general_path_for_blank_finish_reasons(finish: object, monkeypatch: pytest.MonkeyPatch) -> None:
    from hopbench.protocols._chat import ChatDecoder

    chunks = [_ev({"choices": [{"index": 0, "delta": {"content": c}, "finish_reason": finish}]}) for c in ("a", "bc")]
    body = ROLE + b"".join(chunks)
    fast = _observe("chat", body)
    monkeypatch.setattr(ChatDecoder, "_text_only", lambda self, choice: None)
    assert _observe("chat", body) == fast and fast[1].outcome == "truncated"


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("empty", [b"data:\n\n", b"data: \n\n", b"data:  \t\n\n"])
def test_empty_data_event_is_counted_not_malformed(protocol: str, empty: bytes) -> None:
    events = BODIES[protocol]
    r = decode_stream(protocol, [events[0] + empty + b"".join(events[1:])])
    assert (r.outcome, r.detail, r.text, r.anomalies) == ("completed", None, "ab", {"empty_data": 1})


def test_chat_error_event_with_plain_text_data_fails_with_its_message() -> None:
    r = decode_stream("chat", [_chunk("a") + b"event: error\ndata: upstream timed out\n\n"])
    assert (r.outcome, r.detail, r.error_message, r.text) == ("failed", None, "upstream timed out", "a")


def test_chat_other_choice_finishing_does_not_end_the_measured_answer() -> None:
    other = _ev({"choices": [{"index": 1, "delta": {"content": "B"}, "finish_reason": "length"}]})
    r = decode_stream("chat", [ROLE + _chunk("A") + other])
    assert (r.outcome, r.stop_reason, r.choices, r.text) == ("truncated", None, 2, "A")
    done = decode_stream("chat", [ROLE + _chunk("A") + other + _chunk(None, "stop")])
    assert (done.outcome, done.stop_reason, done.no_done) == ("completed", "stop", True)


def test_responses_completed_event_with_incomplete_details_names_the_reason() -> None:
    done = _resp("response.completed", response={"status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"}})
    r = decode_stream("responses", [R_CREATED + _rtext("a") + done])
    assert (r.outcome, r.stop_reason, protocols.stop_class(r.stop_reason)) == ("completed", "max_output_tokens", "length")
