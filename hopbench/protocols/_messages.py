"""Decoder for Anthropic Messages streams (typed events over SSE).

Role: one ``MessagesDecoder`` per stream; see ``_base.Decoder`` for the contract
and the rules shared by all protocols.

Rules (Anthropic API reference, "Streaming Messages"; PROTOCOLS.md):
- The event type is the JSON ``type`` field, falling back to the SSE event name.
- ``message_start``: ``message.usage.input_tokens`` plus
  ``cache_read_input_tokens`` and ``cache_creation_input_tokens`` (Anthropic
  counts those apart; the sum is the whole prompt, as the OpenAI protocols'
  input figure is); ``cache_read_input_tokens`` is the cached-token count.
- ``content_block_start``: ``text`` or ``thinking`` (non-empty initial text /
  thinking counts as output); a tool-use block (``tool_use``,
  ``server_tool_use``, ``mcp_tool_use``: ``id``, ``name``) is the call's first
  generated fragment: a tool ``ContentDelta`` of the name's length, which
  starts TTFT and content TTFT (its ``input`` is always ``{}``; the arguments
  follow as ``input_json_delta``). ``redacted_thinking`` blocks are counted as
  reasoning that was not shown.
- ``content_block_delta``: ``text_delta`` (text), ``thinking_delta`` (reasoning),
  ``input_json_delta`` (``partial_json``, tool arguments joined by block index);
  ``signature_delta`` and ``citations_delta`` are known and carry no tokens.
- ``message_delta``: ``delta.stop_reason`` when it is a real string (``""``,
  whitespace, null and non-strings are no reason); ``usage.output_tokens`` is
  cumulative, the last one wins; the input-side counts (``input_tokens`` and
  the cache fields) are cumulative too and never go down: each keeps the
  largest value sent, so a placeholder 0 in ``message_delta`` keeps
  ``message_start``'s figure (``_prompt``).
- Completed: ``message_stop`` (a stop reason alone, without it, is no end).
  Failed: ``error`` (``error.type``, ``error.message``; a gateway's extra
  ``error.code`` is ranked by ``_signals.error_name``). ``ping`` and
  ``content_block_stop`` carry nothing. Messages has no refusal text channel:
  a refusal is ``stop_reason: "refusal"``.
- Hidden reasoning: a ``thinking`` or ``redacted_thinking`` block started and
  no ``thinking`` text arrived (redacted or omitted thinking). Usage has no
  reasoning count, so ``reasoning_tokens`` stays None.
- Unknown event or delta types are counted as anomaly ``unknown_event``.
"""

from __future__ import annotations

from typing import Any

from ..sse import SSEEvent
from . import _base
from ._base import _CACHED_CHARS, _DELTA_TUPLES, Decoder, Observations, ToolCallState
from ._signals import reason
from ._observations import Observation
from ._template import match

__all__ = ["MessagesDecoder"]

_TOOL_BLOCKS = frozenset({"tool_use", "server_tool_use", "mcp_tool_use"})
_SILENT_DELTAS = frozenset({"signature_delta", "citations_delta"})
_TEXT_DELTAS = _DELTA_TUPLES["text"]
_TEXT_PATH: tuple[str | int, ...] = ("delta", "text")


_INPUT_KEYS = ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")


def _prompt(usage: dict[str, Any], seen: dict[str, int]) -> int | None:
    """The whole prompt's tokens so far: ``input_tokens`` plus the cache reads
    and writes, which Anthropic counts apart (Anthropic API reference, prompt
    caching: total input = cache_read_input_tokens +
    cache_creation_input_tokens + input_tokens); the OpenAI protocols count
    cached tokens inside their input figure, so all three then agree.

    ``seen`` holds the stream's input-side counts so far, updated here. The
    usage of ``message_delta`` is cumulative and each of its fields optional
    (Anthropic API reference, streaming: "the token counts in the usage field
    of the message_delta event are cumulative"; ``MessageDeltaUsage``), so a
    count never goes down: each keeps the largest value sent. A delta that
    leaves out the cache fields keeps those of ``message_start``, and one
    that sends ``input_tokens: 0`` (SGLang's Anthropic endpoint and some
    gateways put a placeholder 0 there) keeps the prompt; a bridge that sends
    0 in ``message_start`` and the real count at the end gets the real count.

    Returns:
        The sum, or None while no ``input_tokens`` (a non-negative int) was
        seen. Counts that are not non-negative ints are ignored.
    """
    for key in _INPUT_KEYS:
        v = usage.get(key)
        if type(v) is int and v > seen.get(key, -1):
            seen[key] = v
    if "input_tokens" not in seen:
        return None
    return sum(seen.values())


def _cached(seen: dict[str, int]) -> int | None:
    """The cache reads seen so far (``cache_read_input_tokens``), or None."""
    return seen.get("cache_read_input_tokens")


class MessagesDecoder(Decoder):
    """Decoder for ``POST /v1/messages`` with ``"stream": true``."""

    protocol = "messages"
    __slots__ = ("_tools", "_cache_seen")

    def __init__(self, *, keep_text: bool = True, expect_usage: bool = False) -> None:
        super().__init__(keep_text=keep_text, expect_usage=expect_usage)
        self._tools: dict[int, ToolCallState] = {}  # content block index -> tool-use block
        self._cache_seen: dict[str, int] = {}  # input-side counts reported so far (_prompt)

    def _tool_calls(self) -> list[dict[str, object]]:
        return [b.as_dict() for _, b in sorted(self._tools.items())]

    def _on_event(self, event: SSEEvent) -> Observations:
        tpl = self._tpl
        if tpl is not None and event.event == tpl.event:
            # the stream's text_delta frame with another text (``_template``)
            text = match(tpl, event.data, _base._fast_loads)
            if text:  # "" and misses take the full parse
                if self._keep_text:
                    self._text.append(text)
                chars = len(text)
                if self._first_content and chars < _CACHED_CHARS:  # _emit's shared tuple, inlined
                    self._events["text"] += 1
                    return _TEXT_DELTAS[chars]
                return self._emit("text", chars)
        body, kind, bad = self._typed_body(event)
        if body is None:
            return bad
        if kind == "content_block_delta":
            return self._delta(event, body, bad)
        if kind == "ping" or kind == "content_block_stop":
            return bad
        if kind == "content_block_start":
            return self._block_start(body, bad)
        if kind == "message_delta":
            delta = body.get("delta")
            if type(delta) is dict:
                stop = reason(delta.get("stop_reason"))
                if stop is not None:
                    self._stop_reason = stop
            usage = body.get("usage")
            if type(usage) is dict:
                report = self._usage(
                    _prompt(usage, self._cache_seen), usage.get("output_tokens"),
                    usage.get("total_tokens"), None, _cached(self._cache_seen),
                )
                if report is not None:
                    return bad + (report,)
            return bad
        if kind == "message_start":
            message = body.get("message")
            usage = message.get("usage") if type(message) is dict else None
            if type(usage) is dict:
                report = self._usage(_prompt(usage, self._cache_seen), None, None, None,
                                     _cached(self._cache_seen))
                if report is not None:
                    return bad + (report,)
            return bad
        if kind == "message_stop":
            return bad + (self._end("completed"),)
        if kind == "error":
            error = body.get("error")
            if type(error) is dict:
                code, message = self._error(error)
            else:
                code, message = None, body.get("message")
                message = message if type(message) is str else None
            return bad + (self._end("failed", error_code=code, error_message=message),)
        return bad + self._anomaly("unknown_event", kind)

    def _delta(self, event: SSEEvent, body: dict[str, Any], bad: Observations) -> Observations:
        delta = body.get("delta")
        if type(delta) is not dict:
            return bad + self._anomaly("unexpected_shape", "content_block_delta without delta")
        dtype = delta.get("type")
        if type(dtype) is not str:  # a list would raise in the set lookups below
            return bad + self._anomaly("unknown_event", f"content_block_delta/{dtype}")
        if dtype == "text_delta":
            fragment = delta.get("text")
            kind = "text"
        elif dtype == "input_json_delta":
            fragment = delta.get("partial_json")
            kind = "tool"
        elif dtype == "thinking_delta":
            fragment = delta.get("thinking")
            kind = "reasoning"
        elif dtype in _SILENT_DELTAS:
            return bad
        else:
            return bad + self._anomaly("unknown_event", f"content_block_delta/{dtype}")
        if not fragment or type(fragment) is not str:
            return bad
        if kind == "text" and self._tries and not bad:
            self._learn(event, body, _TEXT_PATH)
        if self._keep_text:
            if kind == "text":
                self._text.append(fragment)
            elif kind == "tool":
                self._block(body).arguments.append(fragment)
            else:
                self._reasoning.append(fragment)
        return self._emit(kind, len(fragment), bad)  # type: ignore[arg-type]

    def _block(self, body: dict[str, Any]) -> ToolCallState:
        """The tool-use block at ``body["index"]`` (created when unseen)."""
        index = body.get("index")
        if type(index) is not int:
            index = -1
        block = self._tools.get(index)
        if block is None:
            block = self._tools[index] = ToolCallState(index)
        return block

    def _block_start(self, body: dict[str, Any], bad: Observations) -> Observations:
        block = body.get("content_block")
        if type(block) is not dict:
            return bad + self._anomaly("unexpected_shape", "content_block_start without block")
        btype = block.get("type")
        if type(btype) is not str:  # a list would raise in the set lookup
            return bad
        if btype in _TOOL_BLOCKS:
            # The block carries the tool's name, which the model generated:
            # the call's first fragment (TTFT starts here, not at the first
            # input_json_delta; the initial ``input`` is always {}).
            state = self._block(body)
            block_id, name = block.get("id"), block.get("name")
            state.id = block_id if type(block_id) is str else None
            state.name = name if type(name) is str else None
            if not state.name:
                return bad
            out: list[Observation] = list(bad) if bad else []
            self._content(out, "tool", len(state.name))
            return tuple(out)
        if btype == "text":
            fragment, kind = block.get("text"), "text"
        elif btype == "thinking":
            self._reasoning_items += 1
            fragment, kind = block.get("thinking"), "reasoning"
        elif btype == "redacted_thinking":
            self._reasoning_items += 1
            return bad
        else:
            return bad
        if not fragment or type(fragment) is not str:
            return bad
        if self._keep_text:
            (self._text if kind == "text" else self._reasoning).append(fragment)
        out = list(bad) if bad else []
        self._content(out, kind, len(fragment))  # type: ignore[arg-type]
        return tuple(out)
