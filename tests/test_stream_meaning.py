"""Stream meaning at the edges the specs allow: what a crafted stream decodes to.

Each test feeds a stream built from the wire shapes of the OpenAI and Anthropic
API references (and of OpenAI-compatible servers: vLLM, TGI, Mistral) through
the real SSE scanner and a decoder, whole and split at every byte, and checks
the outcome and its kind, the first-token observations (TTFT) and the token
counts. The rules are in docs/results/decoder-rules.md, "Decoder rules"; what was checked and
found right is listed there too ("Stream shapes checked").
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hopbench.protocols import (
    FirstContentToken,
    FirstToken,
    StreamResult,
    decode_stream,
    new_decoder,
    stop_class,
)
from hopbench.protocols._observations import Anomaly
from hopbench.sse import SSEScanner


def _ev(data: object, event: str | None = None) -> bytes:
    raw = data if isinstance(data, bytes) else json.dumps(data, ensure_ascii=False).encode()
    head = f"event: {event}\n".encode() if event else b""
    return head + b"data: " + raw + b"\n\n"


def _chunk(delta: dict[str, Any], finish: str | None = None, index: int = 0) -> bytes:
    return _ev({"object": "chat.completion.chunk", "choices": [{"index": index, "delta": delta, "finish_reason": finish}]})


def _typed(kind: str, **fields: object) -> bytes:
    return _ev({"type": kind, **fields}, kind)


DONE = b"data: [DONE]\n\n"


def _decode_all_splits(protocol: str, body: bytes, **kw: Any) -> StreamResult:
    """The result of ``body`` in one read; the same at every two-piece split."""
    whole = decode_stream(protocol, [body], **kw)
    for i in range(len(body) + 1):
        assert decode_stream(protocol, [body[:i], body[i:]], **kw) == whole, i
    return whole


def _firsts(protocol: str, body: bytes) -> list[object]:
    dec = new_decoder(protocol)
    out: list[object] = []
    for item in SSEScanner().feed(body):
        out.extend(o for o in dec.feed(item) if type(o) in (FirstToken, FirstContentToken))
    return out


# -- Chat Completions -----------------------------------------------------------


def test_chat_bare_object_error_chunk_fails_the_stream() -> None:
    # The error object some OpenAI-compatible servers stream as a chunk of its
    # own, unwrapped (vLLM's ErrorResponse shape: object "error", message,
    # type, code); [DONE] after it does not make the stream completed.
    body = (
        _chunk({"role": "assistant", "content": "Hi"})
        + _ev({"object": "error", "message": "CUDA out of memory", "type": "InternalServerError", "param": None, "code": 500})
        + DONE
    )
    r = _decode_all_splits("chat", body)
    assert (r.outcome, r.error_code, r.error_message) == ("failed", "InternalServerError", "CUDA out of memory")
    assert (r.error_wire_code, r.error_type) == ("500", "InternalServerError")
    assert r.anomalies == {"data_after_end": 1}


def test_chat_error_string_with_error_type_names_the_failure() -> None:
    # TGI's in-stream error: {"error": "<message>", "error_type": "<kind>"}.
    body = _chunk({"content": "Hi"}) + _ev({"error": "Request failed during generation: out of memory", "error_type": "generation"})
    r = _decode_all_splits("chat", body)
    assert (r.outcome, r.error_code, r.error_message) == ("failed", "generation", "Request failed during generation: out of memory")


def test_chat_finish_reason_error_is_an_interruption() -> None:
    # vLLM FinishReason.ERROR: "retryable request-level internal error".
    body = _chunk({"content": "Hi"}) + _chunk({}, "error") + DONE
    r = _decode_all_splits("chat", body)
    assert (r.outcome, r.detail, r.stop_reason) == ("failed", "engine_error", "error")
    assert stop_class("error") == "other"


def test_chat_content_as_a_list_of_parts_is_output() -> None:
    # Mistral's reasoning models stream delta.content as a list of chunks:
    # {"type": "thinking", "thinking": [{"type": "text", "text": ...}]} and
    # {"type": "text", "text": ...}.
    body = (
        _chunk({"role": "assistant", "content": ""})
        + _chunk({"content": [{"type": "thinking", "thinking": [{"type": "text", "text": "Let me see"}]}]})
        + _chunk({"content": [{"type": "thinking", "thinking": "."}]})
        + _chunk({"content": [{"type": "text", "text": "Four"}]})
        + _chunk({"content": [{"type": "text", "text": "."}, {"type": "reference", "reference_ids": [1]}]})
        + _chunk({}, "stop")
        + DONE
    )
    r = _decode_all_splits("chat", body)
    assert (r.outcome, r.text, r.reasoning_text) == ("completed", "Four.", "Let me see.")
    assert r.events == {"text": 2, "reasoning": 2, "tool": 0, "refusal": 0}
    assert r.anomalies == {}
    assert _firsts("chat", body) == [FirstToken("reasoning"), FirstContentToken("text")]


# -- Responses -------------------------------------------------------------------


def _rseq(seqs: list[int]) -> bytes:
    """created, one text delta per middle number, completed; numbered by ``seqs``."""
    first, *middle, last = seqs
    body = _typed("response.created", response={"id": "r", "status": "in_progress"}, sequence_number=first)
    for n in middle:
        body += _typed("response.output_text.delta", item_id="m", output_index=0, content_index=0, delta="x", sequence_number=n)
    return body + _typed("response.completed", response={"id": "r", "status": "completed"}, sequence_number=last)


def test_responses_sequence_numbers_in_step_are_no_anomaly() -> None:
    r = _decode_all_splits("responses", _rseq([0, 1, 2, 3, 4]))
    assert (r.outcome, r.anomalies, r.events["text"]) == ("completed", {}, 3)


def test_responses_sequence_gap_is_counted_not_fatal() -> None:
    # sequence_number is one more per event (OpenAI API reference, Responses
    # streaming events): a jump means the stream lost events on the way.
    r = _decode_all_splits("responses", _rseq([0, 1, 2, 4, 5]))
    assert (r.outcome, r.anomalies) == ("completed", {"sequence_gap": 1})


def test_responses_sequence_gap_detail_says_expected_and_seen() -> None:
    dec = new_decoder("responses")
    seen: list[object] = []
    for item in SSEScanner().feed(_rseq([0, 1, 7])):
        seen.extend(o for o in dec.feed(item) if type(o) is Anomaly)
    assert seen == [Anomaly("sequence_gap", "expected 2, got 7")]


def test_responses_stream_without_sequence_numbers_is_no_anomaly() -> None:
    body = (
        _typed("response.created", response={"id": "r"})
        + _typed("response.output_text.delta", delta="x")
        + _typed("response.completed", response={"status": "completed"})
    )
    assert decode_stream("responses", [body]).anomalies == {}


# -- Messages --------------------------------------------------------------------


def test_messages_context_window_exceeded_is_a_length_stop() -> None:
    # Anthropic API reference, stop_reason: "model_context_window_exceeded"
    # (the output was cut by the context window, as max_tokens cuts it).
    assert stop_class("model_context_window_exceeded") == "length"
    body = (
        _typed("message_start", message={"usage": {"input_tokens": 9, "output_tokens": 1}})
        + _typed("content_block_delta", index=0, delta={"type": "text_delta", "text": "Hi"})
        + _typed("message_delta", delta={"stop_reason": "model_context_window_exceeded"}, usage={"output_tokens": 3})
        + _typed("message_stop")
    )
    r = _decode_all_splits("messages", body)
    assert (r.outcome, r.stop_reason, r.output_tokens) == ("completed", "model_context_window_exceeded", 3)


@pytest.mark.parametrize("reason", ["repetition", "compaction"])
def test_stop_reasons_without_a_class_are_other(reason: str) -> None:
    assert stop_class(reason) == "other"


def _mstart(**usage: int) -> bytes:
    return _typed("message_start", message={"id": "m", "role": "assistant", "content": [], "usage": usage})


def _mend(**usage: int) -> bytes:
    return (
        _typed("content_block_delta", index=0, delta={"type": "text_delta", "text": "Hi"})
        + _typed("message_delta", delta={"stop_reason": "end_turn"}, usage=usage)
        + _typed("message_stop")
    )


def test_messages_zero_input_in_message_delta_keeps_the_prompt() -> None:
    # message_delta usage is cumulative (Anthropic streaming docs), so a 0 there is a
    # placeholder (SGLang's Anthropic endpoint, some gateways), not a prompt that shrank.
    body = _mstart(input_tokens=15, cache_read_input_tokens=100, output_tokens=1) + _mend(
        input_tokens=0, cache_read_input_tokens=0, output_tokens=7
    )
    r = _decode_all_splits("messages", body)
    assert (r.input_tokens, r.cached_tokens, r.output_tokens) == (115, 100, 7)


def test_messages_input_only_in_message_delta_is_taken() -> None:
    # Bridges that know the prompt only at the end: message_start says 0.
    body = _mstart(input_tokens=0, output_tokens=0) + _mend(input_tokens=11, output_tokens=5)
    r = _decode_all_splits("messages", body)
    assert (r.input_tokens, r.cached_tokens, r.output_tokens) == (11, None, 5)


def test_messages_cache_counts_only_in_message_delta_update_the_prompt() -> None:
    body = _mstart(input_tokens=4, output_tokens=1) + _mend(cache_read_input_tokens=96, output_tokens=5)
    r = _decode_all_splits("messages", body)
    assert (r.input_tokens, r.cached_tokens) == (100, 96)


# -- [DONE] outside Chat Completions ---------------------------------------------


def test_responses_done_sentinel_without_completed_is_truncated_not_malformed() -> None:
    # openai-python stops reading at data "[DONE]" on every stream
    # (_streaming.py); without response.completed the answer was cut.
    body = (
        _typed("response.created", response={"id": "r"}, sequence_number=0)
        + _typed("response.output_text.delta", delta="x", sequence_number=1)
        + DONE
    )
    r = _decode_all_splits("responses", body)
    assert (r.outcome, r.detail, r.anomalies) == ("truncated", None, {"done_sentinel": 1})


def test_responses_done_sentinel_mid_stream_takes_no_sequence_number() -> None:
    body = (
        _typed("response.created", response={"id": "r"}, sequence_number=0)
        + DONE
        + _typed("response.completed", response={"status": "completed"}, sequence_number=1)
    )
    r = _decode_all_splits("responses", body)
    assert (r.outcome, r.anomalies) == ("completed", {"done_sentinel": 1})


def test_messages_done_sentinel_is_ignored() -> None:
    # anthropic-sdk-python dispatches by event name: a nameless "[DONE]" is skipped.
    body = (
        _typed("message_start", message={"usage": {"input_tokens": 3}})
        + _typed("content_block_delta", index=0, delta={"type": "text_delta", "text": "x"})
        + _typed("message_delta", delta={"stop_reason": "end_turn"}, usage={"output_tokens": 2})
        + DONE
        + _typed("message_stop")
    )
    r = _decode_all_splits("messages", body)
    assert (r.outcome, r.detail, r.anomalies) == ("completed", None, {"done_sentinel": 1})


def test_chat_deepseek_cache_hit_tokens_are_the_cached_tokens() -> None:
    # DeepSeek API reference (context caching): usage.prompt_cache_hit_tokens /
    # prompt_cache_miss_tokens instead of prompt_tokens_details.cached_tokens.
    usage = {"prompt_tokens": 100, "completion_tokens": 5, "total_tokens": 105,
             "prompt_cache_hit_tokens": 64, "prompt_cache_miss_tokens": 36}
    body = _chunk({"content": "Hi"}, "stop") + _ev({"choices": [], "usage": usage}) + DONE
    r = _decode_all_splits("chat", body)
    assert (r.input_tokens, r.cached_tokens) == (100, 64)
    both = dict(usage, prompt_tokens_details={"cached_tokens": 60})
    r = decode_stream("chat", [_chunk({"content": "Hi"}, "stop") + _ev({"choices": [], "usage": both}) + DONE])
    assert r.cached_tokens == 60  # OpenAI's own field first


# -- SSE framing as the decoders see it ------------------------------------------


def test_chat_chunk_split_over_two_data_lines_parses() -> None:
    # WHATWG HTML §9.2.6: data lines of one event are joined with LF.
    body = b'data: {"choices":[{"index":0,\ndata: "delta":{"content":"Hi"},"finish_reason":"stop"}]}\n\n' + DONE
    r = _decode_all_splits("chat", body)
    assert (r.outcome, r.text, r.anomalies) == ("completed", "Hi", {})


def test_chat_usage_null_on_every_chunk_is_no_usage() -> None:
    # OpenAI with stream_options.include_usage: "usage": null on every chunk but the last.
    def c(delta: dict[str, Any], finish: str | None = None) -> bytes:
        return _ev({"choices": [{"index": 0, "delta": delta, "finish_reason": finish}], "usage": None})
    body = c({"role": "assistant", "content": ""}) + c({"content": "Hi"}) + c({}, "stop")
    cut = _decode_all_splits("chat", body, expect_usage=True)
    assert (cut.outcome, cut.detail, cut.input_tokens) == ("truncated", "usage_missing", None)
    whole = body + _ev({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}}) + DONE
    r = _decode_all_splits("chat", whole, expect_usage=True)
    assert (r.outcome, r.input_tokens, r.output_tokens, r.anomalies) == ("completed", 3, 1, {})


def test_chat_done_without_its_blank_line_is_not_seen() -> None:
    # §9.2.6: the end of the body discards a pending event; the finish reason completes it.
    r = _decode_all_splits("chat", _chunk({"content": "Hi"}, "stop") + b"data: [DONE]\n")
    assert (r.outcome, r.no_done, r.anomalies) == ("completed", True, {"partial_event": 1})


def test_messages_stop_without_its_blank_line_is_truncated() -> None:
    body = (
        _typed("message_start", message={"usage": {"input_tokens": 3}})
        + _typed("content_block_delta", index=0, delta={"type": "text_delta", "text": "x"})
        + _typed("message_delta", delta={"stop_reason": "end_turn"}, usage={"output_tokens": 2})
        + b'event: message_stop\ndata: {"type":"message_stop"}\n'
    )
    r = _decode_all_splits("messages", body)
    assert (r.outcome, r.stop_reason, r.output_tokens, r.anomalies) == ("truncated", "end_turn", 2, {"partial_event": 1})


# -- never raises on server input ------------------------------------------------


@pytest.mark.parametrize("odd", [[], ["tool_use"], {"a": 1}])
def test_decoders_never_raise_on_an_unhashable_type_field(odd: object) -> None:
    # A "type" that is a list or an object once raised TypeError in a set lookup.
    resp = _typed("response.output_item.added", output_index=0, item={"type": odd, "name": "f"})
    msgs = (
        _typed("content_block_start", index=0, content_block={"type": odd, "name": "f"})
        + _typed("content_block_delta", index=0, delta={"type": odd, "text": "x"})
    )
    for protocol, body in (("responses", resp), ("messages", msgs)):
        r = _decode_all_splits(protocol, body)
        assert (r.outcome, r.content_events) == ("truncated", 0)


_KEYS = [
    # the keys decoders dispatch on, several times: drawn more often
    *["type"] * 8, *["item", "content_block", "delta", "choices", "error"] * 3,
    "choices", "delta", "content", "reasoning_content", "refusal", "tool_calls", "function",
    "name", "arguments", "index", "id", "finish_reason", "usage", "error", "object", "error_type",
    "text", "thinking", "response", "status", "incomplete_details", "reason", "item", "item_id",
    "output_index", "sequence_number", "message", "content_block", "partial_json", "stop_reason",
    "input_tokens", "output_tokens", "prompt_tokens", "completion_tokens", "cache_read_input_tokens",
    "prompt_tokens_details", "cached_tokens", "output_tokens_details", "reasoning_tokens", "code",
]
_NAMES = [
    "response.output_item.added", "response.output_text.delta", "response.completed",
    "response.failed", "error", "content_block_start", "content_block_delta", "message_delta",
    "message_start", "message_stop", "function_call", "tool_use", "text_delta", "text", "thinking",
    "stop", "abort",
]
_LEAVES = st.one_of(
    st.none(), st.booleans(), st.integers(-2, 2**70), st.floats(allow_nan=False),
    st.sampled_from(_NAMES), st.text(max_size=3),
)
_JSON = st.recursive(
    _LEAVES,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(_KEYS), inner, max_size=5),
    max_leaves=25,
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    protocol=st.sampled_from(["chat", "responses", "messages"]),
    events=st.lists(
        st.tuples(
            st.sampled_from([None, "error", *_NAMES]),
            _JSON | st.builds(lambda t, rest: {**rest, "type": t}, st.sampled_from(_NAMES), st.dictionaries(st.sampled_from(_KEYS), _JSON, max_size=4)),
        ),
        max_size=6,
    ),
)
def test_decoders_never_raise_on_any_json_shape(protocol: str, events: list[tuple[str | None, object]]) -> None:
    # Every field of every protocol, at any depth, with any JSON type (lists and
    # objects where strings belong included): counted, never raised.
    body = b"".join(_ev(data, name) for name, data in events)
    r = decode_stream(protocol, [body])
    assert r.outcome in ("completed", "failed", "truncated")
    assert r.input_tokens is None or type(r.input_tokens) is int
    lean = decode_stream(protocol, [body], keep_text=False)
    assert (lean.outcome, lean.events, lean.anomalies) == (r.outcome, r.events, r.anomalies)
