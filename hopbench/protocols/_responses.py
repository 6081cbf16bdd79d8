"""Decoder for OpenAI Responses streams (semantic events over SSE).

Role: one ``ResponsesDecoder`` per stream; see ``_base.Decoder`` for the contract
and the rules shared by all protocols.

Rules (OpenAI API reference, "Responses streaming events"; PROTOCOLS.md):
- The event type is the JSON ``type`` field, falling back to the SSE event
  name: LiteLLM drops ``event:`` lines and some mock servers omit them.
- Output channels: ``response.output_text.delta`` (text);
  ``response.refusal.delta`` (refusal: ``refusal_text``, not ``text``);
  ``response.reasoning_summary_text.delta`` and ``response.reasoning_text.delta``
  (reasoning); ``response.function_call_arguments.delta`` (tool arguments,
  matched by ``item_id`` else ``output_index`` to the ``function_call`` item);
  ``response.custom_tool_call_input.delta``, ``response.mcp_call_arguments.delta``
  and ``response.code_interpreter_call_code.delta`` (tool input the model
  writes: counted as tool fragments, not kept).
- Generated fragments: ``response.output_item.added`` of a ``function_call``,
  ``custom_tool_call`` or ``mcp_call`` item carries the call's ``name``, which
  the model generated: it is the call's first tool fragment (starts TTFT and
  content TTFT; chars = the name's length; counted once per call, also when the
  name first shows in ``output_item.done``). ``output_item.added`` of a
  ``message`` or ``reasoning`` item and ``content_part.added`` carry no
  generated characters and are not.
- Completed: ``response.completed`` or ``response.incomplete``; stop_reason =
  ``incomplete_details.reason``, else ``response.status``. The event is the terminal signal; a status / reason that is not
  a real string (``""``, whitespace, null, numbers) falls back to the event's
  own name ("completed", "incomplete", "failed").
- Failed: ``response.failed`` (``response.error.code`` / ``.type`` /
  ``.message``) or an ``error`` event: the official flat one (``code``,
  ``message``; its ``type`` is the event's, "error") or a gateway's nested
  ``error`` object (``code``, ``type``, ``message``).
- Usage: ``response.usage`` of the terminal event (``input_tokens``,
  ``output_tokens``, ``total_tokens``, ``output_tokens_details.reasoning_tokens``).
- Hidden reasoning: a ``reasoning`` output item or reasoning tokens in usage,
  and no reasoning delta (encrypted / unsummarised reasoning).
- Every other official type is known and ignored; anything else is counted as
  anomaly ``unknown_event``, never fatal.
- Sequence: ``sequence_number`` goes up by one per event; an event other than
  a text delta whose number is not the next one after the events counted so
  far is anomaly ``sequence_gap`` (events lost, repeated or reordered), never
  fatal (``_sequence``).
"""

from __future__ import annotations

from typing import Any

from ..sse import SSEEvent
from . import _base
from ._base import _CACHED_CHARS, _DELTA_TUPLES, NOTHING, Decoder, Observations, ToolCallState
from ._signals import reason
from ._observations import Observation
from ._template import INT, STR, match

__all__ = ["ResponsesDecoder", "KNOWN_EVENT_TYPES"]

_TEXT = "response.output_text.delta"
_TEXT_DELTAS = _DELTA_TUPLES["text"]
_TEXT_PATH: tuple[str | int, ...] = ("delta",)
# fields of a text delta the decoder never reads that change per event
_IGNORED = (("sequence_number", INT), ("obfuscation", STR))
_REFUSAL = "response.refusal.delta"
_REASONING = frozenset({"response.reasoning_summary_text.delta", "response.reasoning_text.delta"})
_TOOL = "response.function_call_arguments.delta"
# Other model-generated tool input, streamed as ``delta`` strings.
_TOOL_INPUT = frozenset(
    {
        "response.custom_tool_call_input.delta",
        "response.mcp_call_arguments.delta",
        "response.code_interpreter_call_code.delta",
    }
)
_DELTAS = frozenset({_TEXT, _REFUSAL, _TOOL}) | _REASONING | _TOOL_INPUT
# Output items whose ``name`` the model generated when it started the call.
_CALL_ITEMS = frozenset({"function_call", "custom_tool_call", "mcp_call"})
_TERMINAL = frozenset({"response.completed", "response.incomplete", "response.failed", "error"})

# The server event types of the official API (openai-python's ResponseStreamEvent
# union, 2025), so that none of them is miscounted as unknown.
KNOWN_EVENT_TYPES: frozenset[str] = frozenset(
    {
        "response.created",
        "response.in_progress",
        "response.queued",
        "response.completed",
        "response.incomplete",
        "response.failed",
        "error",
        "response.output_item.added",
        "response.output_item.done",
        "response.content_part.added",
        "response.content_part.done",
        "response.output_text.delta",
        "response.output_text.done",
        "response.output_text.annotation.added",
        "response.refusal.delta",
        "response.refusal.done",
        "response.reasoning_summary_part.added",
        "response.reasoning_summary_part.done",
        "response.reasoning_summary_text.delta",
        "response.reasoning_summary_text.done",
        "response.reasoning_text.delta",
        "response.reasoning_text.done",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.custom_tool_call_input.delta",
        "response.custom_tool_call_input.done",
        "response.file_search_call.in_progress",
        "response.file_search_call.searching",
        "response.file_search_call.completed",
        "response.web_search_call.in_progress",
        "response.web_search_call.searching",
        "response.web_search_call.completed",
        "response.code_interpreter_call.in_progress",
        "response.code_interpreter_call.interpreting",
        "response.code_interpreter_call.completed",
        "response.code_interpreter_call_code.delta",
        "response.code_interpreter_call_code.done",
        "response.image_generation_call.in_progress",
        "response.image_generation_call.generating",
        "response.image_generation_call.partial_image",
        "response.image_generation_call.completed",
        "response.mcp_call.in_progress",
        "response.mcp_call.completed",
        "response.mcp_call.failed",
        "response.mcp_call_arguments.delta",
        "response.mcp_call_arguments.done",
        "response.mcp_list_tools.in_progress",
        "response.mcp_list_tools.completed",
        "response.mcp_list_tools.failed",
        "response.audio.delta",
        "response.audio.done",
        "response.audio.transcript.delta",
        "response.audio.transcript.done",
        "response.compaction.compacting",
        "response.shell_call_command.added",
        "response.shell_call_command.delta",
        "response.shell_call_command.done",
        "response.shell_call_output_content.delta",
        "response.shell_call_output_content.done",
    }
)


def _cached(details: object) -> object:
    """``usage.input_tokens_details.cached_tokens`` (OpenAI API reference:
    the response usage object), else None."""
    return details.get("cached_tokens") if type(details) is dict else None


class ResponsesDecoder(Decoder):
    """Decoder for ``POST /v1/responses`` with ``"stream": true``."""

    protocol = "responses"
    __slots__ = ("_calls", "_by_item", "_seq_seen", "_seq_origin")

    def __init__(self, *, keep_text: bool = True, expect_usage: bool = False) -> None:
        super().__init__(keep_text=keep_text, expect_usage=expect_usage)
        self._calls: dict[int, ToolCallState] = {}  # output_index -> call
        self._by_item: dict[str, ToolCallState] = {}  # item id -> call
        # Sequence check (``_sequence``): events counted so far (every text
        # delta, and every other event that carries a sequence_number), and
        # the sequence_number the count started from (None: none seen yet).
        self._seq_seen = 0
        self._seq_origin: int | None = None

    def _tool_calls(self) -> list[dict[str, object]]:
        calls: list[dict[str, object]] = []
        for _, c in sorted(self._calls.items()):
            args = "".join(c.arguments)
            if not args and c.final and self._keep_text:
                args = c.final  # a server that sent only the .done event
            calls.append({"index": c.index, "id": c.id, "name": c.name, "arguments": args})
        return calls

    def _on_event(self, event: SSEEvent) -> Observations:
        fast = _base._fast_loads  # read per call: tests swap it
        if fast is None:
            tpl = self._tpl
            if tpl is not None and event.event == tpl.event:
                # the stream's text-delta frame with another text and sequence
                # number (``_template``): the stdlib's parse is the cost to cut
                text = match(tpl, event.data, None)
                if text:  # "" and misses take the full parse
                    self._seq_seen += 1
                    if self._keep_text:
                        self._text.append(text)
                    chars = len(text)
                    if self._first_content and chars < _CACHED_CHARS:  # _emit's shared tuple, inlined
                        self._events["text"] += 1
                        return _TEXT_DELTAS[chars]
                    return self._emit("text", chars)
            body, kind, bad = self._typed_body(event)
        else:
            # orjson parses a delta in ~0.4 us, about what three template holes
            # cost: parse inline and shortcut the text delta instead
            try:
                parsed = fast(event.data)
            except (_base._FastError, ValueError, RecursionError):
                parsed = None  # _typed_body's full path decides (stdlib, anomalies)
            if type(parsed) is dict:
                body, bad = parsed, NOTHING
                named = parsed.get("type")
                if named == _TEXT and self._fast:
                    delta = parsed.get("delta")
                    if delta and type(delta) is str:
                        self._seq_seen += 1
                        if self._keep_text:
                            self._text.append(delta)
                        chars = len(delta)
                        if self._first_content and chars < _CACHED_CHARS:  # _emit's shared tuple, inlined
                            self._events["text"] += 1
                            return _TEXT_DELTAS[chars]
                        return self._emit("text", chars)
                kind = named if type(named) is str else event.event
            else:
                body, kind, bad = self._typed_body(event)
        if body is None:
            if event.data.strip() != b"[DONE]":
                self._seq_seen += 1  # an unusable event still took its number
            return bad
        if kind == _TEXT:
            self._seq_seen += 1  # as the fast paths count it: no check here
        else:
            seq = body.get("sequence_number")
            if type(seq) is int:
                bad = self._sequence(seq, bad)
        if kind in _DELTAS:
            delta = body.get("delta")
            if not delta or type(delta) is not str:
                return bad
            if kind == _TEXT:
                if self._keep_text:
                    self._text.append(delta)
                if self._tries and not bad and _base._fast_loads is None:
                    self._learn(event, body, _TEXT_PATH, _IGNORED)
                return self._emit("text", len(delta), bad)
            if kind == _TOOL:
                if self._keep_text:
                    self._call_for(body).arguments.append(delta)
                return self._emit("tool", len(delta), bad)
            if kind == _REFUSAL:
                if self._keep_text:
                    self._refusal.append(delta)
                return self._emit("refusal", len(delta), bad)
            if kind in _REASONING:
                if self._keep_text:
                    self._reasoning.append(delta)
                return self._emit("reasoning", len(delta), bad)
            # custom tool input, MCP arguments, interpreter code
            return self._emit("tool", len(delta), bad)
        if kind in _TERMINAL:
            return bad + self._terminal(kind, body)
        if kind == "response.output_item.added" or kind == "response.output_item.done":
            chars = self._item(body, kind == "response.output_item.added")
            if chars:
                out = list(bad) if bad else []
                self._content(out, "tool", chars)
                return tuple(out)
            return bad
        if kind == "response.function_call_arguments.done":
            args = body.get("arguments")
            if type(args) is str:
                self._call_for(body).final = args
            return bad
        if kind in KNOWN_EVENT_TYPES:
            return bad
        return bad + self._anomaly("unknown_event", kind)

    def _sequence(self, seq: int, bad: Observations) -> Observations:
        """Check an event's ``sequence_number`` against the events counted.

        OpenAI API reference, Responses streaming events: every event carries
        ``sequence_number``, one more than the event before. Text deltas are
        only counted (their fast paths never read the number); every other
        event that carries one is checked: not the count's next number means
        events were lost, repeated or reordered on the way (anomaly
        ``sequence_gap``, never fatal; the count then restarts from it).
        An unusable event (not JSON) is counted as one event: it is already
        a failure (``malformed_event``), not also a gap. Checking only there
        makes the verdict the same on every path.

        Returns:
            ``bad`` plus the ``sequence_gap`` anomaly when the number is off.
        """
        self._seq_seen += 1
        origin = self._seq_origin
        if origin is not None:
            expected = origin + self._seq_seen
            if seq == expected:
                return bad
            bad = bad + self._anomaly("sequence_gap", f"expected {expected}, got {seq}")
        self._seq_origin = seq - self._seq_seen
        return bad

    def _call_for(self, body: dict[str, Any]) -> ToolCallState:
        """The function call an arguments event belongs to (created when unseen)."""
        item_id = body.get("item_id")
        if type(item_id) is str:
            call = self._by_item.get(item_id)
            if call is not None:
                return call
        index = body.get("output_index")
        if type(index) is not int:
            # Neither a known item_id nor an output_index: continue the latest call.
            index = max(self._calls, default=0)
        call = self._calls.get(index)
        if call is None:
            call = self._calls[index] = ToolCallState(index)
        if type(item_id) is str:
            self._by_item[item_id] = call
        return call

    def _item(self, body: dict[str, Any], added: bool) -> int:
        """Register a tool-call output item (call_id, name, arguments).

        Returns the characters of the call's name when this is the first time
        the name is seen (a generated fragment: it starts TTFT), else 0.
        Only ``function_call`` items are kept as ``tool_calls``; the other
        call items (custom tool, MCP) count their name and nothing more.
        """
        item = body.get("item")
        if type(item) is not dict:
            return 0
        itype = item.get("type")
        if type(itype) is not str or itype not in _CALL_ITEMS:  # a list would raise in the set lookup
            if itype == "reasoning" and added:
                self._reasoning_items += 1  # hidden unless summary / text deltas follow
            return 0
        name = item.get("name")
        if itype != "function_call":
            if not added or not name or type(name) is not str:
                return 0
            return len(name)
        index = body.get("output_index")
        if type(index) is not int:
            index = len(self._calls)
        call = self._calls.get(index)
        if call is None:
            call = self._calls[index] = ToolCallState(index)
        item_id = item.get("id")
        if type(item_id) is str:
            self._by_item[item_id] = call
        call_id = item.get("call_id")
        if call.id is None:
            call.id = call_id if type(call_id) is str else (item_id if type(item_id) is str else None)
        args = item.get("arguments")
        if type(args) is str and args:
            call.final = args
        if call.name is None and name and type(name) is str:
            call.name = name
            return len(name)
        return 0

    def _terminal(self, kind: str, body: dict[str, Any]) -> Observations:
        """``response.completed`` / ``.incomplete`` / ``.failed`` / ``error``.

        The event type is the terminal signal; ``status`` and
        ``incomplete_details.reason`` only name it when they are real strings
        (``real``): "" / whitespace / non-strings fall back to the event's own
        name ("completed", "incomplete", "failed").
        """
        if kind == "error":
            error = body.get("error")
            if type(error) is dict:  # a gateway's nested error object
                code, message = self._error(error)
            else:  # the official flat event: its "type" is "error" itself
                code, message = self._error(body, typed=False)
            return (self._end("failed", error_code=code, error_message=message),)
        response = body.get("response")
        if type(response) is not dict:
            response = {}
        out: list[Observation] = []
        usage = response.get("usage")
        if type(usage) is dict:
            details = usage.get("output_tokens_details")
            report = self._usage(
                usage.get("input_tokens"),
                usage.get("output_tokens"),
                usage.get("total_tokens"),
                details.get("reasoning_tokens") if type(details) is dict else None,
                _cached(usage.get("input_tokens_details")),
            )
            if report is not None:
                out.append(report)
        status = reason(response.get("status"))
        if kind == "response.failed":
            error = response.get("error")
            code = message = None
            if type(error) is dict:
                code, message = self._error(error)
            out.append(
                self._end(
                    "failed", stop_reason=status or "failed", error_code=code, error_message=message
                )
            )
        else:
            # incomplete_details.reason names the stop also when a gateway ends
            # an incomplete response with response.completed (status "incomplete")
            details = response.get("incomplete_details")
            why = reason(details.get("reason")) if type(details) is dict else None
            fallback = "incomplete" if kind == "response.incomplete" else "completed"
            out.append(self._end("completed", stop_reason=why or status or fallback))
        return tuple(out)
