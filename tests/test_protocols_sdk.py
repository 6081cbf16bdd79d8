"""Differential tests: the official SDKs and decode_stream read the same streams alike.

Generated streams (random text fragments, empty deltas, keepalive comments,
usage, random network splits) are served through ``httpx.MockTransport`` to the
``openai`` and ``anthropic`` Python clients with streaming on; the text and usage
the SDK accumulates must equal what ``decode_stream`` returns.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator

import anthropic
import httpx
import openai

# anthropic 2.x is built on ``httpx2`` (an httpx fork with the same API) and
# rejects plain ``httpx`` clients; it installs with the SDK.
import httpx2
from hypothesis import given, settings
from hypothesis import strategies as st

from hopbench.protocols import decode_stream

_Body = list[bytes]
_current: dict[str, _Body] = {}


def _body() -> Iterator[bytes]:
    yield from list(_current["chunks"])


def _handler(request: httpx.Request) -> httpx.Response:
    return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=_body())


def _handler2(request: httpx2.Request) -> httpx2.Response:
    return httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=_body())


_OPENAI = openai.OpenAI(
    api_key="test", base_url="http://127.0.0.1:9/v1", max_retries=0,
    http_client=httpx.Client(transport=httpx.MockTransport(_handler)),
)
_ANTHROPIC = anthropic.Anthropic(
    api_key="test", base_url="http://127.0.0.1:9", max_retries=0,
    http_client=httpx2.Client(transport=httpx2.MockTransport(_handler2)),
)


def _ev(obj: object, event: str | None = None) -> bytes:
    head = f"event: {event}\n".encode() if event else b""
    return head + b"data: " + json.dumps(obj, ensure_ascii=False).encode() + b"\n\n"


fragments = st.lists(st.text(max_size=6), min_size=1, max_size=12)
counts = st.integers(min_value=0, max_value=100_000)


@st.composite
def served(draw: st.DrawFn, events: list[bytes]) -> _Body:
    """Insert keepalive comments between random events and split at random points."""
    out: list[bytes] = []
    for e in events:
        if draw(st.booleans()):
            out.append(draw(st.sampled_from([b": hopbase-keepalive\n\n", b": ping\n\n"])))
        out.append(e)
    body = b"".join(out)
    cuts = sorted(set(draw(st.lists(st.integers(0, len(body)), max_size=10))))
    return [body[a:b] for a, b in zip([0, *cuts], [*cuts, len(body)])]


def _run(chunks: _Body, read: Callable[[], tuple[str, int | None, int | None]]) -> tuple[str, int | None, int | None]:
    _current["chunks"] = chunks
    return read()


@settings(max_examples=25, deadline=None)
@given(parts=fragments, usage=st.one_of(st.none(), st.tuples(counts, counts)), data=st.data())
def test_decode_stream_chat_matches_openai_sdk(parts: list[str], usage: tuple[int, int] | None, data: st.DataObject) -> None:
    base = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    events = [_ev({**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]})]
    events += [_ev({**base, "choices": [{"index": 0, "delta": {"content": p}, "finish_reason": None}]}) for p in parts]
    events.append(_ev({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}))
    if usage is not None:
        u = {"prompt_tokens": usage[0], "completion_tokens": usage[1], "total_tokens": sum(usage)}
        events.append(_ev({**base, "choices": [], "usage": u}))
    events.append(b"data: [DONE]\n\n")
    chunks = data.draw(served(events))

    def read() -> tuple[str, int | None, int | None]:
        text, got = "", (None, None)
        stream = _OPENAI.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}], stream=True,
            stream_options={"include_usage": True},
        )
        for chunk in stream:
            if chunk.choices:
                text += chunk.choices[0].delta.content or ""
            if chunk.usage is not None:
                got = (chunk.usage.prompt_tokens, chunk.usage.completion_tokens)
        return text, *got

    result = decode_stream("chat", chunks)
    assert _run(chunks, read) == (result.text, result.input_tokens, result.output_tokens)
    assert result.outcome == "completed" and result.text == "".join(parts)


@settings(max_examples=25, deadline=None)
@given(parts=fragments, usage=st.tuples(counts, counts), event_lines=st.booleans(), data=st.data())
def test_decode_stream_responses_matches_openai_sdk(
    parts: list[str], usage: tuple[int, int], event_lines: bool, data: st.DataObject
) -> None:
    def ev(obj: dict[str, object]) -> bytes:
        return _ev(obj, str(obj["type"]) if event_lines else None)

    resp = {"id": "resp_1", "object": "response", "created_at": 1, "model": "m", "output": [], "status": "in_progress"}
    events = [ev({"type": "response.created", "sequence_number": 0, "response": resp})]
    events += [
        ev({"type": "response.output_text.delta", "sequence_number": i + 1, "item_id": "msg_1",
            "output_index": 0, "content_index": 0, "delta": p, "logprobs": []})
        for i, p in enumerate(parts)
    ]
    u = {"input_tokens": usage[0], "output_tokens": usage[1], "total_tokens": sum(usage)}
    events.append(ev({"type": "response.completed", "sequence_number": len(parts) + 1,
                      "response": {**resp, "status": "completed", "usage": u}}))
    chunks = data.draw(served(events))

    def read() -> tuple[str, int | None, int | None]:
        text, got = "", (None, None)
        for event in _OPENAI.responses.create(model="m", input="hi", stream=True):
            if event.type == "response.output_text.delta":
                text += event.delta
            elif event.type == "response.completed" and event.response.usage is not None:
                got = (event.response.usage.input_tokens, event.response.usage.output_tokens)
        return text, *got

    result = decode_stream("responses", chunks)
    assert _run(chunks, read) == (result.text, result.input_tokens, result.output_tokens)
    assert result.outcome == "completed" and result.text == "".join(parts)


@settings(max_examples=25, deadline=None)
@given(parts=fragments, usage=st.tuples(counts, counts), pings=st.booleans(), data=st.data())
def test_decode_stream_messages_matches_anthropic_sdk(
    parts: list[str], usage: tuple[int, int], pings: bool, data: st.DataObject
) -> None:
    message = {"id": "msg_1", "type": "message", "role": "assistant", "model": "m", "content": [],
               "stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": usage[0], "output_tokens": 1}}
    events = [_ev({"type": "message_start", "message": message}, "message_start")]
    events.append(_ev({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}, "content_block_start"))
    for p in parts:
        if pings:
            events.append(_ev({"type": "ping"}, "ping"))
        events.append(_ev({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": p}}, "content_block_delta"))
    events.append(_ev({"type": "content_block_stop", "index": 0}, "content_block_stop"))
    events.append(_ev({"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                       "usage": {"output_tokens": usage[1]}}, "message_delta"))
    events.append(_ev({"type": "message_stop"}, "message_stop"))
    chunks = data.draw(served(events))

    def read() -> tuple[str, int | None, int | None]:
        with _ANTHROPIC.messages.stream(model="m", max_tokens=10, messages=[{"role": "user", "content": "hi"}]) as stream:
            final = stream.get_final_message()
        text = "".join(block.text for block in final.content if block.type == "text")
        return text, final.usage.input_tokens, final.usage.output_tokens

    result = decode_stream("messages", chunks)
    assert _run(chunks, read) == (result.text, result.input_tokens, result.output_tokens)
    assert result.outcome == "completed" and result.stop_reason == "end_turn" and result.text == "".join(parts)


def test_decode_stream_chat_error_fails_where_openai_sdk_raises() -> None:
    base = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    chunks = [
        _ev({**base, "choices": [{"index": 0, "delta": {"content": "Hel"}, "finish_reason": None}]}),
        _ev({"error": {"message": "upstream died", "type": "server_error", "code": "upstream_error"}}),
    ]
    _current["chunks"] = chunks
    seen = ""
    try:
        for chunk in _OPENAI.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}], stream=True):
            seen += chunk.choices[0].delta.content or ""
    except openai.APIError as exc:
        assert "upstream died" in str(exc)
    else:
        raise AssertionError("the openai SDK did not raise on an in-band error")
    result = decode_stream("chat", chunks)
    assert (result.outcome, result.error_code, result.text) == ("failed", "upstream_error", seen)


def test_decode_stream_messages_error_fails_where_anthropic_sdk_raises() -> None:
    message = {"id": "m", "type": "message", "role": "assistant", "model": "m", "content": [],
               "stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": 3, "output_tokens": 1}}
    chunks = [
        _ev({"type": "message_start", "message": message}, "message_start"),
        _ev({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}, "content_block_start"),
        _ev({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hi"}}, "content_block_delta"),
        _ev({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}, "error"),
    ]
    _current["chunks"] = chunks
    try:
        with _ANTHROPIC.messages.stream(model="m", max_tokens=10, messages=[{"role": "user", "content": "x"}]) as stream:
            stream.get_final_message()
    except anthropic.APIStatusError as exc:
        assert "Overloaded" in str(exc)
    else:
        raise AssertionError("the anthropic SDK did not raise on an error event")
    result = decode_stream("messages", chunks)
    assert (result.outcome, result.error_code, result.text, result.input_tokens) == ("failed", "overloaded_error", "Hi", 3)


# Issue 13 item 8: the official SDKs parse each event with ``json.loads`` and let
# the error escape (openai-python ``_streaming.py`` ``Stream.__stream__``:
# ``data = sse.json()``; anthropic-sdk-python ``_streaming.py``:
# ``process_data(data=sse.json(), ...)``; ``ServerSentEvent.json`` is
# ``json.loads(self.data)`` in both), so a client built on them sees a broken
# stream. decode_stream calls such a stream failed ("malformed_event").

_MALFORMED = b'data: {"choices":[{"index":0,"delta":{"content":" five"\n\n'


def test_decode_stream_chat_malformed_event_fails_where_openai_sdk_raises() -> None:
    base = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    good = [_ev({**base, "choices": [{"index": 0, "delta": {"content": w}, "finish_reason": None}]})
            for w in ("One", " two", " three", " four")]
    chunks = [*good, _MALFORMED, _ev({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
              b"data: [DONE]\n\n"]
    _current["chunks"] = chunks
    seen = ""
    try:
        for chunk in _OPENAI.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}], stream=True):
            seen += chunk.choices[0].delta.content or ""
    except json.JSONDecodeError:
        pass
    else:
        raise AssertionError("the openai SDK did not raise on a malformed event")
    result = decode_stream("chat", chunks)
    assert (result.outcome, result.detail, seen) == ("failed", "malformed_event", "One two three four")
    assert result.text == seen and result.stop_reason == "stop"  # the rest was still decoded


def test_decode_stream_messages_malformed_event_fails_where_anthropic_sdk_raises() -> None:
    message = {"id": "m", "type": "message", "role": "assistant", "model": "m", "content": [],
               "stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": 3, "output_tokens": 1}}
    chunks = [
        _ev({"type": "message_start", "message": message}, "message_start"),
        _ev({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}, "content_block_start"),
        _ev({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hi"}}, "content_block_delta"),
        b"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\n\n",
        _ev({"type": "content_block_stop", "index": 0}, "content_block_stop"),
        _ev({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 2}}, "message_delta"),
        _ev({"type": "message_stop"}, "message_stop"),
    ]
    _current["chunks"] = chunks
    try:
        with _ANTHROPIC.messages.stream(model="m", max_tokens=10, messages=[{"role": "user", "content": "x"}]) as stream:
            stream.get_final_message()
    except json.JSONDecodeError:
        pass
    else:
        raise AssertionError("the anthropic SDK did not raise on a malformed event")
    result = decode_stream("messages", chunks)
    assert (result.outcome, result.detail, result.text, result.output_tokens) == ("failed", "malformed_event", "Hi", 2)
