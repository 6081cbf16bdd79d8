"""Wire encoders: the exact SSE events and JSON bodies of each protocol.

Role: one encoder object per request turns "a text/reasoning/tool token",
"finish with this reason", "fail with this code" into bytes, following
docs/protocols.md and, where it is silent, the OpenAI and Anthropic API
references. No clock, no I/O.

Invariants:
- Every method returning events returns ``list[bytes]``, one complete SSE event
  (ending in a blank line) per element, so the caller counts events exactly.
- The per-token hot path concatenates pre-encoded bytes: a per-request prefix,
  the token's JSON string (cached), a constant suffix. JSON is written with
  ``ensure_ascii=False`` so Chinese text travels as multi-byte UTF-8.
- Content kinds are "reasoning", "text" and "tool", sent in that order.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["ChatWire", "ResponsesWire", "MessagesWire", "Wire", "http_error_body",
           "KEEPALIVE", "STREAM_INTERRUPTED"]

#: The gateway's keepalive comment (docs/protocols.md, SSE framing).
KEEPALIVE = b": hopbase-keepalive\n\n"
#: The gateway's message when an upstream Claude stream breaks (docs/protocols.md, Messages stream).
STREAM_INTERRUPTED = "Response stream interrupted, please retry"

_JSON_CACHE: dict[str, bytes] = {}


def _js(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


def _tok(text: str) -> bytes:
    """The JSON string literal of ``text`` (cached: the vocabulary is small)."""
    b = _JSON_CACHE.get(text)
    if b is None:
        b = _js(text)
        if len(_JSON_CACHE) < 4096:
            _JSON_CACHE[text] = b
    return b


def _data(obj: Any) -> bytes:
    return b"data: " + _js(obj) + b"\n\n"


def _named(name: str, obj: Any) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + _js(obj) + b"\n\n"


_OPENAI_ERRORS: dict[int, tuple[str, str, str]] = {
    401: ("invalid_request_error", "invalid_api_key", "Incorrect API key provided."),
    404: ("invalid_request_error", "not_found", "Unknown endpoint."),
    400: ("invalid_request_error", "invalid_request", "Invalid request body."),
    429: ("rate_limit_error", "rate_limit_exceeded", "Rate limit reached, please retry later."),
    500: ("server_error", "server_error", "The server had an error processing your request."),
    503: ("server_error", "service_unavailable", "The upstream model is overloaded."),
}
_ANTHROPIC_ERRORS: dict[int, tuple[str, str]] = {
    401: ("authentication_error", "invalid x-api-key"),
    404: ("not_found_error", "Unknown endpoint."),
    400: ("invalid_request_error", "Invalid request body."),
    429: ("rate_limit_error", "Rate limit reached, please retry later."),
    500: ("api_error", "Internal server error"),
    503: ("overloaded_error", "Overloaded"),
}


def http_error_body(protocol: str, status: int, message: str | None = None) -> bytes:
    """The JSON error body of an HTTP error before any stream.

    OpenAI style ``{"error": {"message", "type", "param", "code"}}`` for chat and
    responses; Anthropic style ``{"type": "error", "error": {"type", "message"}}``
    for messages.
    """
    if protocol == "messages":
        etype, msg = _ANTHROPIC_ERRORS.get(status, ("api_error", "Error"))
        return _js({"type": "error", "error": {"type": etype, "message": message or msg}})
    etype, code, msg = _OPENAI_ERRORS.get(status, ("server_error", "server_error", "Error"))
    return _js({"error": {"message": message or msg, "type": etype, "param": None, "code": code}})


_MIDSTREAM_MESSAGES = {
    "rate_limit_exceeded": "Rate limit reached during generation, please retry.",
    "server_error": "The upstream model failed during generation.",
    "invalid_prompt": "The prompt was flagged during generation.",
}


class Wire:
    """Common state of a per-request encoder.

    Args:
        rid: the response id (deterministic per request).
        model: the request's model name.
        created_s: creation time, Unix seconds.
        input_tokens: input tokens to report.
    """

    def __init__(self, rid: str, model: str, created_s: int, input_tokens: int) -> None:
        self.rid = rid
        self.model = model
        self.created_s = created_s
        self.input_tokens = input_tokens
        self.kind: str | None = None
        self.sent = 0
        #: output tokens the closing usage reported, None when it reported none.
        self.reported_output: int | None = None
        #: prompt tokens the prefix cache held, None without a prefix cache (then
        #: usage carries no cache fields, except Responses' own 0)
        self.cached_tokens: int | None = None
        #: prompt tokens newly cached (Anthropic ``cache_creation_input_tokens``)
        self.cache_creation_tokens = 0

    def opening(self) -> list[bytes]:
        raise NotImplementedError

    def switch(self, kind: str, tool_name: str) -> list[bytes]:
        """Events that open content of ``kind`` (closing the previous kind's part)."""
        raise NotImplementedError

    def delta(self, kind: str, token: str) -> bytes:
        raise NotImplementedError

    def closing(self, finish: str, *, omit_done: bool) -> list[bytes]:
        raise NotImplementedError

    def error(self, code: str) -> list[bytes]:
        raise NotImplementedError

    def body(self, finish: str, reasoning: str, text: str, tool_name: str, tool_args: str,
             output_tokens: int) -> bytes:
        """The whole non-streaming response body."""
        raise NotImplementedError


class ChatWire(Wire):
    """Chat Completions (``chat.completion.chunk``; ``data: [DONE]`` at the end).

    Args:
        include_usage: the request's ``stream_options.include_usage``.
    """

    def __init__(self, rid: str, model: str, created_s: int, input_tokens: int,
                 include_usage: bool) -> None:
        super().__init__(rid, model, created_s, input_tokens)
        self.include_usage = include_usage
        head = (b'data: {"id":' + _js(rid) + b',"object":"chat.completion.chunk","created":'
                + str(created_s).encode() + b',"model":' + _js(model)
                + b',"choices":[{"index":0,"delta":{')
        self._head = head
        self._text_pre = head + b'"content":'
        self._reason_pre = head + b'"reasoning_content":'
        self._tool_pre = head + b'"tool_calls":[{"index":0,"function":{"arguments":'
        self._suffix = b'},"finish_reason":null}]}\n\n'
        self._tool_suffix = b'}}]},"finish_reason":null}]}\n\n'

    def _chunk(self, choices: list[Any], **extra: Any) -> dict[str, Any]:
        d = {"id": self.rid, "object": "chat.completion.chunk", "created": self.created_s,
             "model": self.model, "choices": choices}
        d.update(extra)
        return d

    def opening(self) -> list[bytes]:
        return [self._head + b'"role":"assistant","content":""' + self._suffix]

    def switch(self, kind: str, tool_name: str) -> list[bytes]:
        self.kind = kind
        if kind != "tool":
            return []
        call = {"index": 0, "id": "call_" + self.rid[-12:], "type": "function",
                "function": {"name": tool_name, "arguments": ""}}
        return [_data(self._chunk([{"index": 0, "delta": {"tool_calls": [call]},
                                    "finish_reason": None}]))]

    def delta(self, kind: str, token: str) -> bytes:
        self.sent += 1
        if kind == "text":
            return self._text_pre + _tok(token) + self._suffix
        if kind == "reasoning":
            return self._reason_pre + _tok(token) + self._suffix
        return self._tool_pre + _tok(token) + self._tool_suffix

    def closing(self, finish: str, *, omit_done: bool) -> list[bytes]:
        out = [_data(self._chunk([{"index": 0, "delta": {}, "finish_reason": finish}]))]
        if self.include_usage:
            self.reported_output = self.sent
            out.append(_data(self._chunk([], usage=self._usage(self.sent))))
        if not omit_done:
            out.append(b"data: [DONE]\n\n")
        return out

    def _usage(self, output_tokens: int) -> dict[str, Any]:
        usage: dict[str, Any] = {"prompt_tokens": self.input_tokens, "completion_tokens": output_tokens,
                                 "total_tokens": self.input_tokens + output_tokens}
        if self.cached_tokens is not None:  # OpenAI: cached tokens are part of prompt_tokens
            usage["prompt_tokens_details"] = {"cached_tokens": self.cached_tokens}
        return usage

    def error(self, code: str) -> list[bytes]:
        etype = "rate_limit_error" if code == "rate_limit_exceeded" else (
            "invalid_request_error" if code == "invalid_prompt" else "server_error")
        return [_data({"error": {"message": _MIDSTREAM_MESSAGES[code], "type": etype,
                                 "param": None, "code": code}})]

    def body(self, finish: str, reasoning: str, text: str, tool_name: str, tool_args: str,
             output_tokens: int) -> bytes:
        message: dict[str, Any] = {"role": "assistant", "content": text}
        if reasoning:
            message["reasoning_content"] = reasoning
        if tool_name:
            message["tool_calls"] = [{"id": "call_" + self.rid[-12:], "type": "function",
                                      "function": {"name": tool_name, "arguments": tool_args}}]
        return _js({"id": self.rid, "object": "chat.completion", "created": self.created_s,
                    "model": self.model,
                    "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                    "usage": self._usage(output_tokens)})


class ResponsesWire(Wire):
    """OpenAI Responses (named events whose ``type`` equals the event name).

    Output items: a reasoning item, a message item with one ``output_text`` part,
    a ``function_call`` item, opened in that order as content of each kind starts.
    """

    def __init__(self, rid: str, model: str, created_s: int, input_tokens: int) -> None:
        super().__init__(rid, model, created_s, input_tokens)
        self.seq = 0
        self.items: list[dict[str, Any]] = []
        self._acc: list[str] = []
        self._pre = b""
        self._mid = b""

    def _ev(self, name: str, payload: dict[str, Any]) -> bytes:
        obj = {"type": name, **payload, "sequence_number": self.seq}
        self.seq += 1
        return _named(name, obj)

    def _response(self, status: str, **extra: Any) -> dict[str, Any]:
        r: dict[str, Any] = {
            "id": self.rid, "object": "response", "created_at": self.created_s, "status": status,
            "error": None, "incomplete_details": None, "model": self.model,
            "output": self.items if status != "in_progress" else [],
            "parallel_tool_calls": True, "tool_choice": "auto", "tools": [],
            "usage": None,
        }
        r.update(extra)
        return r

    def opening(self) -> list[bytes]:
        return [self._ev("response.created", {"response": self._response("in_progress")}),
                self._ev("response.in_progress", {"response": self._response("in_progress")})]

    def _close_item(self) -> list[bytes]:
        if not self.items or self.items[-1]["status"] != "in_progress":
            return []
        item = self.items[-1]
        idx = len(self.items) - 1
        full = "".join(self._acc)
        out: list[bytes] = []
        item["status"] = "completed"
        if item["type"] == "message":
            part = {"type": "output_text", "text": full, "annotations": []}
            item["content"] = [part]
            out.append(self._ev("response.output_text.done", {
                "item_id": item["id"], "output_index": idx, "content_index": 0, "text": full,
                "logprobs": []}))
            out.append(self._ev("response.content_part.done", {
                "item_id": item["id"], "output_index": idx, "content_index": 0, "part": part}))
        elif item["type"] == "reasoning":
            item["content"] = [{"type": "reasoning_text", "text": full}]
            out.append(self._ev("response.reasoning_text.done", {
                "item_id": item["id"], "output_index": idx, "content_index": 0, "text": full}))
        else:
            item["arguments"] = full
            out.append(self._ev("response.function_call_arguments.done", {
                "item_id": item["id"], "output_index": idx, "arguments": full}))
        out.append(self._ev("response.output_item.done", {"output_index": idx, "item": item}))
        return out

    def switch(self, kind: str, tool_name: str) -> list[bytes]:
        out = self._close_item()
        self.kind = kind
        self._acc = []
        idx = len(self.items)
        n = str(idx)
        if kind == "text":
            item: dict[str, Any] = {"id": f"msg_{self.rid[5:]}_{n}", "type": "message",
                                    "status": "in_progress", "role": "assistant", "content": []}
            delta_type = "response.output_text.delta"
        elif kind == "reasoning":
            item = {"id": f"rs_{self.rid[5:]}_{n}", "type": "reasoning", "status": "in_progress",
                    "summary": [], "content": []}
            delta_type = "response.reasoning_text.delta"
        else:
            item = {"id": f"fc_{self.rid[5:]}_{n}", "type": "function_call",
                    "status": "in_progress", "call_id": "call_" + self.rid[-12:],
                    "name": tool_name, "arguments": ""}
            delta_type = "response.function_call_arguments.delta"
        self.items.append(item)
        out.append(self._ev("response.output_item.added", {"output_index": idx, "item": dict(item)}))
        if kind == "text":
            out.append(self._ev("response.content_part.added", {
                "item_id": item["id"], "output_index": idx, "content_index": 0,
                "part": {"type": "output_text", "text": "", "annotations": []}}))
        content_index = b'' if kind == "tool" else b'"content_index":0,'
        self._pre = (b"event: " + delta_type.encode() + b'\ndata: {"type":"' + delta_type.encode()
                     + b'","item_id":' + _js(item["id"]) + b',"output_index":' + n.encode() + b","
                     + content_index + b'"delta":')
        self._mid = (b',"logprobs":[],"sequence_number":' if kind == "text"
                     else b',"sequence_number":')
        return out

    def delta(self, kind: str, token: str) -> bytes:
        self.sent += 1
        self._acc.append(token)
        seq = self.seq
        self.seq += 1
        return self._pre + _tok(token) + self._mid + str(seq).encode() + b"}\n\n"

    def _usage(self, output_tokens: int) -> dict[str, Any]:
        return {"input_tokens": self.input_tokens, "output_tokens": output_tokens,
                "total_tokens": self.input_tokens + output_tokens,
                "input_tokens_details": {"cached_tokens": self.cached_tokens or 0},
                "output_tokens_details": {"reasoning_tokens": 0}}

    def closing(self, finish: str, *, omit_done: bool) -> list[bytes]:
        out = self._close_item()
        self.reported_output = self.sent
        usage = self._usage(self.sent)
        if finish == "length":
            out.append(self._ev("response.incomplete", {"response": self._response(
                "incomplete", usage=usage,
                incomplete_details={"reason": "max_output_tokens"})}))
        else:
            out.append(self._ev("response.completed",
                                {"response": self._response("completed", usage=usage)}))
        return out

    def error(self, code: str) -> list[bytes]:
        self.reported_output = self.sent
        return [self._ev("response.failed", {"response": self._response(
            "failed", usage=self._usage(self.sent),
            error={"code": code, "message": _MIDSTREAM_MESSAGES[code]})})]

    def body(self, finish: str, reasoning: str, text: str, tool_name: str, tool_args: str,
             output_tokens: int) -> bytes:
        items: list[dict[str, Any]] = []
        if reasoning:
            items.append({"id": f"rs_{self.rid[5:]}_0", "type": "reasoning", "status": "completed",
                          "summary": [], "content": [{"type": "reasoning_text", "text": reasoning}]})
        items.append({"id": f"msg_{self.rid[5:]}_{len(items)}", "type": "message",
                      "status": "completed", "role": "assistant",
                      "content": [{"type": "output_text", "text": text, "annotations": []}]})
        if tool_name:
            items.append({"id": f"fc_{self.rid[5:]}_{len(items)}", "type": "function_call",
                          "status": "completed", "call_id": "call_" + self.rid[-12:],
                          "name": tool_name, "arguments": tool_args})
        self.items = items
        status = "incomplete" if finish == "length" else "completed"
        extra: dict[str, Any] = {"usage": self._usage(output_tokens)}
        if finish == "length":
            extra["incomplete_details"] = {"reason": "max_output_tokens"}
        return _js(self._response(status, **extra))


_STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}


class MessagesWire(Wire):
    """Anthropic Messages (message_start, ping, content blocks, message_delta, message_stop)."""

    def __init__(self, rid: str, model: str, created_s: int, input_tokens: int) -> None:
        super().__init__(rid, model, created_s, input_tokens)
        self.block = -1
        self._pre = b""
        self._suffix = b'}}\n\n'

    def _input_usage(self, output_tokens: int) -> dict[str, Any]:
        """Anthropic usage: with a prefix cache, ``input_tokens`` counts only the
        tokens after the cached and newly cached ones (Anthropic API reference,
        prompt caching: total input = cache_read_input_tokens +
        cache_creation_input_tokens + input_tokens)."""
        if self.cached_tokens is None:
            return {"input_tokens": self.input_tokens, "output_tokens": output_tokens}
        created = min(self.cache_creation_tokens, self.input_tokens - self.cached_tokens)
        return {"input_tokens": self.input_tokens - self.cached_tokens - created,
                "cache_creation_input_tokens": created,
                "cache_read_input_tokens": self.cached_tokens, "output_tokens": output_tokens}

    def opening(self) -> list[bytes]:
        message: dict[str, Any] = {"id": self.rid, "type": "message", "role": "assistant", "model": self.model,
                   "content": [], "stop_reason": None, "stop_sequence": None,
                   "usage": self._input_usage(1)}
        return [_named("message_start", {"type": "message_start", "message": message}),
                _named("ping", {"type": "ping"})]

    def _stop_block(self) -> list[bytes]:
        if self.block < 0 or self.kind is None:
            return []
        self.kind = None
        return [_named("content_block_stop", {"type": "content_block_stop", "index": self.block})]

    def switch(self, kind: str, tool_name: str) -> list[bytes]:
        out = self._stop_block()
        self.kind = kind
        self.block += 1
        if kind == "text":
            block: dict[str, Any] = {"type": "text", "text": ""}
            dtype, field = b"text_delta", b"text"
        elif kind == "reasoning":
            block = {"type": "thinking", "thinking": "", "signature": ""}
            dtype, field = b"thinking_delta", b"thinking"
        else:
            block = {"type": "tool_use", "id": "toolu_" + self.rid[-12:], "name": tool_name,
                     "input": {}}
            dtype, field = b"input_json_delta", b"partial_json"
        out.append(_named("content_block_start", {"type": "content_block_start",
                                                  "index": self.block, "content_block": block}))
        self._pre = (b'event: content_block_delta\ndata: {"type":"content_block_delta","index":'
                     + str(self.block).encode() + b',"delta":{"type":"' + dtype + b'","'
                     + field + b'":')
        return out

    def delta(self, kind: str, token: str) -> bytes:
        self.sent += 1
        return self._pre + _tok(token) + self._suffix

    def closing(self, finish: str, *, omit_done: bool) -> list[bytes]:
        out = self._stop_block()
        self.reported_output = self.sent
        out.append(_named("message_delta", {
            "type": "message_delta",
            "delta": {"stop_reason": _STOP_REASONS[finish], "stop_sequence": None},
            "usage": {"output_tokens": self.sent}}))
        out.append(_named("message_stop", {"type": "message_stop"}))
        return out

    def error(self, code: str) -> list[bytes]:
        return [_named("error", {"type": "error",
                                 "error": {"type": "api_error", "message": STREAM_INTERRUPTED}})]

    def body(self, finish: str, reasoning: str, text: str, tool_name: str, tool_args: str,
             output_tokens: int) -> bytes:
        content: list[dict[str, Any]] = []
        if reasoning:
            content.append({"type": "thinking", "thinking": reasoning, "signature": ""})
        content.append({"type": "text", "text": text})
        if tool_name:
            try:
                args = json.loads(tool_args)
            except ValueError:
                args = {}
            content.append({"type": "tool_use", "id": "toolu_" + self.rid[-12:],
                            "name": tool_name, "input": args})
        return _js({"id": self.rid, "type": "message", "role": "assistant", "model": self.model,
                    "content": content, "stop_reason": _STOP_REASONS[finish],
                    "stop_sequence": None,
                    "usage": self._input_usage(output_tokens)})
