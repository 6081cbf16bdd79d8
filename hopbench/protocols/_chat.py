"""Decoder for OpenAI Chat Completions streams (``chat.completion.chunk`` over SSE).

Role: one ``ChatDecoder`` per stream; see ``_base.Decoder`` for the contract
and the rules shared by all protocols (real signals, generated fragments,
malformed events, error names, abort, hidden reasoning).

Rules (OpenAI API reference, "The chat completion chunk object"; PROTOCOLS.md):
- Each event's data is one chunk. Channels of ``choices[i].delta``: text
  ``content`` (a string; or, from Mistral, a list of typed chunks whose
  ``text`` chunks are text and ``thinking`` chunks reasoning: ``_parts``); reasoning ``reasoning_content`` or ``reasoning`` (DeepSeek,
  vLLM, OpenRouter); refusal ``refusal`` (its own channel: ``refusal_text``,
  never joined into ``text``); tool ``tool_calls[j]`` joined by ``index``
  (the deprecated ``function_call`` delta too). A tool call's first fragment
  carries its ``name`` with empty ``arguments``: the name is generated output,
  so it is a tool ``ContentDelta`` (chars = the name's length) and starts TTFT
  and content TTFT; a name repeated in later fragments counts once.
- Several choices (``n`` > 1): only choice 0 (or a choice without ``index``)
  is measured: text, tool calls, content events, the observations that give
  TTFT / ITL, the stop reason and the end-of-body verdict (a real
  ``finish_reason``) come from it alone. Other indexes are counted
  (``choices``); their content and finish reasons are ignored; usage
  (``completion_tokens``) covers all choices.
- A ``finish_reason`` is real only when it is a string with a non-whitespace
  character (stripped): ``""``, whitespace, null, numbers, booleans, lists and
  objects are no finish (issue 13 item 1). Likewise ``error`` must be a
  non-empty object or a real string to fail the stream.
- Completed: data exactly ``[DONE]`` (ASCII whitespace around it tolerated), or
  the body ends after a chunk with a real ``finish_reason`` (providers and
  gateways that omit ``[DONE]``): then ``no_done`` is True. Exception: when the
  request asked for usage (``expect_usage``: ``stream_options.include_usage``)
  and neither a usage object (in the finish chunk or later) nor ``[DONE]``
  arrived, the stream is "truncated" with detail "usage_missing".
- ``finish_reason: "abort"`` (vLLM / SGLang engine abort) is an interruption:
  "failed" with detail "abort", with or without ``[DONE]``.
- Failed: ``data: {"error": {...}}`` (no ``event:`` line), or an event named
  ``error`` (some servers). ``error_code`` by ``_signals.error_name`` from
  ``error.code`` and ``error.type``. Also TGI's ``{"error": "<message>",
  "error_type": "<kind>"}`` (the kind names it) and an unwrapped error object
  streamed as a chunk, ``{"object": "error", "message", "type", "code"}``
  (vLLM's ``ErrorResponse``): both fail the stream, also when ``[DONE]`` follows.
- ``finish_reason: "error"`` (vLLM: a retryable internal error) is an
  interruption: "failed" with detail "engine_error" (``_base._INTERRUPTED``).
- Usage: any non-null ``usage`` object (the ``choices: []`` chunk of
  ``stream_options.include_usage``, or a chunk with choices; some providers send
  it on every chunk): the last one wins. ``total_tokens`` and
  ``completion_tokens_details.reasoning_tokens`` are kept as sent; cached
  prompt tokens are ``prompt_tokens_details.cached_tokens``, else DeepSeek's
  ``prompt_cache_hit_tokens``.
"""

from __future__ import annotations

from typing import Any

from ..sse import SSEEvent
from . import _base
from ._base import _CACHED_CHARS, _DELTA_TUPLES, NOTHING, UNPARSED, Decoder, Observations, ToolCallState
from ._signals import as_str, real, reason
from ._observations import Observation
from ._template import STR, match

__all__ = ["ChatDecoder"]

_DONE = b"[DONE]"
_TEXT_DELTAS = _DELTA_TUPLES["text"]
_TEXT_PATH: tuple[str | int, ...] = ("choices", 0, "delta", "content")
_IGNORED = (("obfuscation", STR),)  # OpenAI's per-chunk padding: never read


def _cached(usage: dict[str, Any]) -> object:
    """``usage.prompt_tokens_details.cached_tokens`` (OpenAI API reference: the
    completion usage object), else DeepSeek's ``usage.prompt_cache_hit_tokens``
    (DeepSeek API reference, context caching), else None."""
    details = usage.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if type(details) is dict else None
    return cached if type(cached) is int else usage.get("prompt_cache_hit_tokens")


def _parts(content: list[Any]) -> tuple[list[str], list[str]]:
    """The (text, thinking) fragments of a ``delta.content`` sent as a list of
    typed chunks (Mistral API reference, chat completion chunk: ``TextChunk``
    ``{"type": "text", "text": ...}`` and ``ThinkChunk`` ``{"type":
    "thinking", "thinking": [TextChunk, ...]}``; a plain string in
    ``thinking`` is taken too). Non-empty strings only, in order; other chunk
    types (references, images) carry no generated text."""
    text: list[str] = []
    thinking: list[str] = []
    for part in content:
        if type(part) is not dict:
            continue
        ptype = part.get("type")
        if ptype == "text":
            value = part.get("text")
            if value and type(value) is str:
                text.append(value)
        elif ptype == "thinking":
            inner = part.get("thinking")
            if inner and type(inner) is str:
                thinking.append(inner)
            elif type(inner) is list:
                for sub in inner:
                    if type(sub) is dict:
                        value = sub.get("text")
                        if value and type(value) is str:
                            thinking.append(value)
    return text, thinking


class ChatDecoder(Decoder):
    """Decoder for ``POST /v1/chat/completions`` with ``"stream": true``."""

    protocol = "chat"
    __slots__ = ("_finish_seen", "_calls", "_others", "_usage_after_finish")

    def __init__(self, *, keep_text: bool = True, expect_usage: bool = False) -> None:
        super().__init__(keep_text=keep_text, expect_usage=expect_usage)
        self._finish_seen = False
        self._calls: dict[int, ToolCallState] = {}
        self._others: set[object] = set()  # choice indexes other than 0
        self._usage_after_finish = False

    def _completed_at_eof(self) -> bool | str:
        if not self._finish_seen:
            return False
        if self._expect_usage and not self._usage_after_finish:
            return "usage_missing"
        return True

    def _no_done(self, outcome: str) -> bool:
        return not self.ended and self._completed_at_eof() is True

    def _choice_count(self) -> int:
        return 1 + len(self._others)

    def _tool_calls(self) -> list[dict[str, object]]:
        return [c.as_dict() for _, c in sorted(self._calls.items())]

    def _on_event(self, event: SSEEvent) -> Observations:
        tpl = self._tpl
        if tpl is not None and event.event == tpl.event:
            # the stream's text-delta frame with another text (``_template``)
            text = match(tpl, event.data, _base._fast_loads)
            if text:  # "" and misses take the full parse
                if self._keep_text:
                    self._text.append(text)
                chars = len(text)
                if self._first_content and chars < _CACHED_CHARS:
                    self._events["text"] += 1
                    return _TEXT_DELTAS[chars]
                return self._emit("text", chars)
        data = event.data
        if data[:1] != b"{" and data.strip() == _DONE:
            return (self._end("completed"),)
        name = event.event
        if name != "message" and name != "error":
            if name == "ping":
                return NOTHING
            return self._anomaly("unknown_event", name)
        malformed = self._malformed
        fast = _base._fast_loads  # read per call: tests swap it
        if fast is not None:  # orjson inline (the hot path); anything odd goes through _parse
            try:
                chunk, bad = fast(data), NOTHING
            except (ValueError, RecursionError):
                chunk, bad = self._parse(data)
        else:
            chunk, bad = self._parse(data)
        if type(chunk) is not dict:
            if chunk is UNPARSED:
                if name == "error":  # an error event whose data is a plain message
                    self._malformed = malformed
                    message = data.decode("utf-8", "replace").strip() or None
                    return bad + (self._end("failed", error_message=message),)
                return bad
            self._malformed = True
            return bad + self._anomaly("unexpected_shape", "chunk is not an object")
        error = chunk.get("error")
        if name == "error" or (error and (type(error) is dict or real(error) is not None)):
            if type(error) is str and real(chunk.get("error_type")) is not None:
                # TGI: {"error": "<message>", "error_type": "<kind>"}
                error = {"message": error, "type": chunk["error_type"]}
            return bad + (self._fail(chunk if error is None else error),)
        choices = chunk.get("choices")
        if (self._fast and not bad and type(choices) is list and len(choices) == 1
                and chunk.get("usage") is None):
            fast = self._text_only(choices[0])
            if fast is not None:
                if self._tries:
                    # observations from here on depend only on the text
                    self._learn(event, chunk, _TEXT_PATH, _IGNORED)
                return fast
        if chunk.get("object") == "error":
            # an unwrapped error object streamed as a chunk (vLLM's
            # ErrorResponse: object, message, type, param, code); after the
            # fast path, which never takes a chunk without one choice
            return bad + (self._fail(chunk),)
        out: list[Observation] = list(bad) if bad else []
        if choices:
            if type(choices) is list:
                self._choices(choices, out)
            else:
                out.extend(self._anomaly("unexpected_shape", "choices is not a list"))
        usage = chunk.get("usage")
        if usage is not None:
            if type(usage) is dict:
                details = usage.get("completion_tokens_details")
                report = self._usage(
                    usage.get("prompt_tokens"),
                    usage.get("completion_tokens"),
                    usage.get("total_tokens"),
                    details.get("reasoning_tokens") if type(details) is dict else None,
                    _cached(usage),
                )
                if self._finish_seen:
                    self._usage_after_finish = True
                if report is not None:
                    out.append(report)
            else:
                out.extend(self._anomaly("unexpected_shape", "usage is not an object"))
        elif choices is None and "usage" not in chunk:
            out.extend(self._anomaly("unexpected_shape", "no choices, usage or error"))
        return tuple(out) if out else NOTHING

    def _text_only(self, choice: Any) -> Observations | None:
        """Fast path for the common chunk: one choice 0 whose delta carries only
        text (``{"content": ...}``, optionally with ``role``) and no finish
        reason. Returns None when the chunk is anything else; the general path
        (``_choices``) then decodes it, with the same result."""
        if type(choice) is not dict:
            return None
        finish = choice.get("finish_reason")
        if finish is not None and finish != "":
            return None
        if choice.get("index", 0) not in (0, None):
            return None
        delta = choice.get("delta")
        if type(delta) is not dict:
            return None
        content = delta.get("content")
        n = len(delta)
        if not (type(content) is str and content and (n == 1 or (n == 2 and "role" in delta))):
            return None
        if self._keep_text:
            self._text.append(content)
        chars = len(content)
        if self._first_content and chars < _CACHED_CHARS:  # _emit's shared tuple, inlined
            self._events["text"] += 1
            return _TEXT_DELTAS[chars]
        return self._emit("text", chars)

    def _fail(self, error: Any) -> Observation:
        if type(error) is dict:
            code, message = self._error(error)
            return self._end("failed", error_code=code, error_message=message)
        return self._end("failed", error_message=error if type(error) is str else str(error))

    def _choices(self, choices: list[Any], out: list[Observation]) -> None:
        """Decode the choices of one chunk, appending observations to ``out``.

        Only choice 0 (or a choice without index) is measured: its fragments
        give observations, text and tool calls, its ``finish_reason`` the stop
        reason and the end-of-body verdict. Other choices are only counted in
        ``_others``.
        One event yields at most one ``ContentDelta`` per kind (reasoning,
        refusal, text, then tool).
        """
        reasoning_chars = text_chars = refusal_chars = tool_chars = 0
        for choice in choices:
            if type(choice) is not dict:
                continue
            index = choice.get("index", 0)
            primary = index == 0 or index is None
            if not primary:
                if type(index) is int or type(index) is str:
                    self._others.add(index)
                continue
            finish = reason(choice.get("finish_reason"))
            if finish is not None:
                self._finish_seen = True
                self._stop_reason = finish
            delta = choice.get("delta")
            if type(delta) is not dict or not delta:
                continue
            reasoning = delta.get("reasoning_content") or delta.get("reasoning")
            if reasoning and type(reasoning) is str:
                reasoning_chars += len(reasoning)
                if self._keep_text:
                    self._reasoning.append(reasoning)
            refusal = delta.get("refusal")
            if refusal and type(refusal) is str:
                refusal_chars += len(refusal)
                if self._keep_text:
                    self._refusal.append(refusal)
            content = delta.get("content")
            if content and type(content) is str:
                text_chars += len(content)
                if self._keep_text:
                    self._text.append(content)
            elif content and type(content) is list:
                text, thinking = _parts(content)
                for fragment in thinking:
                    reasoning_chars += len(fragment)
                    if self._keep_text:
                        self._reasoning.append(fragment)
                for fragment in text:
                    text_chars += len(fragment)
                    if self._keep_text:
                        self._text.append(fragment)
            calls = delta.get("tool_calls")
            if calls and type(calls) is list:
                tool_chars += self._tool_deltas(calls)
            elif type(delta.get("function_call")) is dict:  # the deprecated functions API
                tool_chars += self._tool_deltas([{"index": 0, **delta["function_call"]}], legacy=True)
        if reasoning_chars:
            self._content(out, "reasoning", reasoning_chars)
        if refusal_chars:
            self._content(out, "refusal", refusal_chars)
        if text_chars:
            self._content(out, "text", text_chars)
        if tool_chars:
            self._content(out, "tool", tool_chars)

    def _tool_deltas(self, calls: list[Any], legacy: bool = False) -> int:
        """Join the measured choice's tool-call fragments; return the generated
        characters seen: the call's name (once per call, when first seen) plus
        its argument fragment."""
        chars = 0
        for call in calls:
            if type(call) is not dict:
                continue
            function = call if legacy else call.get("function")
            args = function.get("arguments") if type(function) is dict else None
            if args and type(args) is str:
                chars += len(args)
            index = call.get("index")
            if type(index) is not int:
                # No index (some older servers): a fragment with a new id starts
                # a new call, any other fragment continues the latest one.
                latest = max(self._calls, default=None)
                new_id = call.get("id")
                if latest is None or (new_id and new_id != self._calls[latest].id):
                    index = 0 if latest is None else latest + 1
                else:
                    index = latest
            state = self._calls.get(index)
            if state is None:
                state = self._calls[index] = ToolCallState(index)
            # id and name arrive whole in the first fragment; some servers repeat
            # them in every fragment, so the first non-empty value wins and only
            # the first one counts as generated output.
            if state.id is None and call.get("id"):
                state.id = as_str(call.get("id"))
            if type(function) is dict:
                name = function.get("name")
                if state.name is None and name and type(name) is str:
                    state.name = name
                    chars += len(name)
            if args and type(args) is str and self._keep_text:
                state.arguments.append(args)
        return chars
