"""The request side of the three protocols: names, paths, headers and the one body encoder.

Role: everything hopbench writes to a target before the stream starts, per
protocol, in one place: the protocol names (``PROTOCOLS``), each one's wire
facts (``WIRES``: default path, auth style, fixed headers, where the
conversation and the system prompt go, whether usage must be asked for),
the request body (``encode_body``) and whether a body asks for usage in the
stream (``asks_usage``). The response side (decoders) is in ``_decode`` and
the modules it picks from.

API references (the only arbiters of a body's shape):
- chat: OpenAI "Create chat completion" (``messages``; system is a message;
  ``max_tokens``; ``stream_options.include_usage`` asks for a usage chunk).
- responses: OpenAI "Create a model response" (``input``, a string or a list
  of messages whose text parts are ``input_text`` / ``output_text``;
  ``instructions``; ``max_output_tokens``).
- messages: Anthropic "Messages" (``messages`` of user and assistant turns
  only; ``system`` at the top level; ``max_tokens`` is required;
  ``anthropic-version`` header, "Versions").

Invariants:
- Pure: no clock, no I/O. Bodies are encoded once per distinct request, at
  profile load (or once per template: trace replay, session turns), never per
  event.
- A body is compact UTF-8 JSON (non-ASCII kept), keys in the order written
  below, ``extra`` merged last: the bytes are pinned by
  tests/test_request_bodies.py.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["ANTHROPIC_VERSION", "DEFAULT_PATHS", "Message", "PROTOCOLS", "Protocol", "WIRES", "Wire",
           "asks_usage", "auth_style", "encode_body"]

Protocol = Literal["chat", "responses", "messages"]
PROTOCOLS: tuple[str, ...] = ("chat", "responses", "messages")
"""The protocol names: OpenAI Chat Completions, OpenAI Responses, Anthropic Messages."""

ANTHROPIC_VERSION = "2023-06-01"
"""The ``anthropic-version`` header every Messages request carries (Anthropic API reference, "Versions")."""


@dataclass(frozen=True, slots=True)
class Wire:
    """One protocol's request-side facts.

    Attributes:
        path: the default request path (``[target.paths]`` overrides it).
        auth: the auth style of ``target.auth = "auto"``: ``"bearer"``
            (``Authorization: Bearer KEY``) or ``"x-api-key"``.
        headers: headers every request carries (lower-case names).
        conversation: the body key holding the conversation.
        text_input: the conversation may be a bare string (one user turn).
        text_part: the ``type`` of a text part in a user message's content list.
        system: the top-level key of the system prompt, or None when the
            system prompt is a message of the conversation.
        usage_option: usage in the stream must be asked for
            (``stream_options.include_usage``; the profile's ``include_usage``).
    """

    path: str
    auth: Literal["bearer", "x-api-key"]
    conversation: str
    text_part: str
    system: str | None
    usage_option: bool = False
    text_input: bool = False
    headers: Mapping[str, str] = field(default_factory=dict)


WIRES: dict[str, Wire] = {
    "chat": Wire("/v1/chat/completions", "bearer", "messages", "text", None, usage_option=True),
    "responses": Wire("/v1/responses", "bearer", "input", "input_text", "instructions", text_input=True),
    "messages": Wire("/v1/messages", "x-api-key", "messages", "text", "system",
                     headers={"anthropic-version": ANTHROPIC_VERSION}),
}
DEFAULT_PATHS: dict[str, str] = {p: w.path for p, w in WIRES.items()}


@dataclass(frozen=True, slots=True)
class Message:
    """One chat turn: role ``"system"``, ``"user"`` or ``"assistant"``, and its text."""

    role: str
    text: str


def auth_style(protocol: str, auth: str) -> str | None:
    """The auth header style a request of ``protocol`` uses.

    Args:
        protocol: one of ``PROTOCOLS``.
        auth: ``target.auth``: ``"auto"``, ``"bearer"``, ``"x-api-key"`` or ``"none"``.

    Returns:
        ``"bearer"`` or ``"x-api-key"`` (``"auto"``: the protocol's own, ``Wire.auth``),
        or None for ``"none"``.

    Raises:
        KeyError: ``protocol`` is not one of ``PROTOCOLS`` (the profile checked it).
    """
    if auth == "none":
        return None
    return WIRES[protocol].auth if auth == "auto" else auth


def encode_body(protocol: str, model: str, messages: Sequence[Message] | Sequence[Mapping[str, Any]],
                max_tokens: int, include_usage: bool, extra: Mapping[str, Any]) -> bytes:
    """One streaming request body for a conversation, per the protocol's API reference.

    The conversation is typed (``Message``s: a pool entry, a dataset record, a
    session, a trace prompt) or verbatim (the message objects of a
    ``prompts_file`` line ``{"messages": [...]}``, sent as written but for what
    the protocol forbids).

    - chat: ``messages``; a typed system text is one ``system`` message first;
      ``stream_options.include_usage`` when ``include_usage``.
    - responses: ``input`` is the text of a single typed user turn, else a
      message list; a typed system text goes to ``instructions``; verbatim
      text parts (``"text"``) become ``input_text`` (``output_text`` in an
      assistant's message): Responses accepts no other.
    - messages: ``system`` at the top level (typed text joined; verbatim
      ``system``/``developer`` messages lifted out of ``messages``: the
      Messages API has no such role), ``max_tokens`` before ``stream``.

    ``extra`` is merged last (it may replace any key).

    Args:
        protocol: one of ``PROTOCOLS``.
        model: the model name sent.
        messages: the conversation, non-empty, in order.
        max_tokens: the output cap, tokens (sent as ``max_tokens`` or ``max_output_tokens``).
        include_usage: chat only: ask for the usage chunk.
        extra: the scenario's ``extra`` keys.

    Returns:
        UTF-8 JSON bytes (compact, non-ASCII kept).
    """
    system: Any
    conversation: Any
    if messages and isinstance(messages[0], Message):
        typed: Sequence[Message] = messages  # type: ignore[assignment]  # all of one kind
        system = "\n".join(m.text for m in typed if m.role == "system")
        turns = [{"role": m.role, "content": m.text} for m in typed if m.role != "system"]
        if protocol == "chat":
            conversation = ([{"role": "system", "content": system}] if system else []) + turns
        elif protocol == "responses":
            conversation = turns[0]["content"] if len(turns) == 1 else turns
        else:
            conversation = turns
    else:
        system, conversation = _verbatim(protocol, messages)  # type: ignore[arg-type]  # all of one kind
    body: dict[str, Any]
    if protocol == "chat":  # OpenAI API reference: Create chat completion
        body = {"model": model, "messages": conversation, "stream": True, "max_tokens": max_tokens}
        if include_usage:
            body["stream_options"] = {"include_usage": True}
    elif protocol == "responses":  # OpenAI API reference: Create a model response
        body = {"model": model, "input": conversation, "stream": True, "max_output_tokens": max_tokens}
        if system:
            body["instructions"] = system
    else:  # Anthropic API reference: Messages (max_tokens is required)
        body = {"model": model, "messages": conversation, "max_tokens": max_tokens, "stream": True}
        if system:
            body["system"] = system
    body.update(extra)
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def _verbatim(protocol: str, messages: Sequence[Mapping[str, Any]]) -> tuple[Any, list[Any]]:
    """(system prompt or "", conversation) of message objects as a prompts file wrote them.

    chat keeps them as they are; responses keeps them, its text parts retyped
    (``_input_parts``); messages lifts ``system`` / ``developer`` messages out to the
    top-level ``system``: their texts joined with a newline, or a list of text
    blocks when any content is a block list.
    """
    if protocol == "chat":
        return "", list(messages)
    if protocol == "responses":
        return "", [_input_parts(m) for m in messages]
    system = [isinstance(m, Mapping) and m.get("role") in ("system", "developer") for m in messages]
    lifted: list[Any] = [m.get("content") for m, lift in zip(messages, system) if lift]
    turns = [m for m, lift in zip(messages, system) if not lift]
    if all(isinstance(c, str) for c in lifted):
        return "\n".join(lifted), turns
    blocks: list[Any] = []
    for c in lifted:
        blocks.extend(c if isinstance(c, list) else [{"type": "text", "text": c}])
    return blocks, turns


def _input_parts(message: Any) -> Any:
    """A message for Responses ``input``: chat-style ``"text"`` parts of its content as
    ``input_text`` (``output_text`` in an assistant's message); anything else as written."""
    if not isinstance(message, Mapping):
        return message
    content = message.get("content")
    if not isinstance(content, list) or not any(isinstance(p, Mapping) and p.get("type") == "text"
                                                for p in content):
        return message
    kind = "output_text" if message.get("role") == "assistant" else "input_text"
    parts = [{**p, "type": kind} if isinstance(p, Mapping) and p.get("type") == "text" else p for p in content]
    return {**message, "content": parts}


def asks_usage(protocol: str, body: bytes) -> bool:
    """Whether a request body asks for usage in the stream (chat
    ``stream_options.include_usage``, OpenAI API reference: Create chat
    completion); the decoder then treats a missing usage chunk as a cut.

    Args:
        protocol: one of ``PROTOCOLS`` (only a protocol whose ``Wire.usage_option``
            is set can ask).
        body: the request body, JSON bytes.

    Returns:
        True when the body's ``stream_options.include_usage`` is ``true``;
        False otherwise, also for a body that is not JSON. Never raises.
    """
    wire = WIRES.get(protocol)
    if wire is None or not wire.usage_option:
        return False
    try:
        data = json.loads(body)
    except ValueError:
        return False
    opts = data.get("stream_options") if isinstance(data, dict) else None
    return isinstance(opts, dict) and opts.get("include_usage") is True
