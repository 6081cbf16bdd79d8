"""The request-id marker that rides inside a request body, for gateway overhead.

Role: many gateways drop unknown request headers (``x-hopbench-request-id``),
but every gateway passes the conversation through verbatim. So, when a run
measures gateway overhead (docs/gateway-overhead.md), hopbench also appends a
short marker, `` [hb:<id>]``, to the text of the *last user message* of every
request, and the emulator behind the gateway extracts it into its ground
truth. Pure: no clock, no I/O.

Why the last user message: it is the one part of a request that an LLM
gateway must forward unchanged (system prompts may be rewritten or replaced,
metadata fields stripped, earlier turns trimmed by context managers), and it
is the same concept in all three protocols.

Invariants:
- The marker is ASCII, `` [hb:`` + id + ``]``, the id made of ``[0-9A-Za-z._-]``
  (1 to 64 characters). ``find_marker`` returns the id of the *last* marker in
  a body (a gateway that appends its own text after ours still matches).
- ``marked_template`` never changes anything but the last user message's text:
  it returns the body split around a placeholder, so that each request only
  joins three byte strings (no JSON work per request).
"""

from __future__ import annotations

import json
import re
from typing import Any

from ._requests import WIRES

__all__ = ["MARKER_RE", "marked_template", "find_marker", "marker_text"]

#: matches one marker in raw body bytes; group 1 is the id
MARKER_RE = re.compile(rb" ?\[hb:([0-9A-Za-z._-]{1,64})\]")
_PLACEHOLDER = "@@hopbench-request-id@@"


def marker_text(request_id: str) -> str:
    """The marker appended for ``request_id`` (e.g. ``" [hb:0-17]"``)."""
    return f" [hb:{request_id}]"


def _append_to_content(msg: dict[str, Any], text_types: tuple[str, ...]) -> bool:
    content = msg.get("content")
    if isinstance(content, str):
        msg["content"] = content + marker_text(_PLACEHOLDER)
        return True
    if isinstance(content, list):
        for part in reversed(content):
            if isinstance(part, dict) and part.get("type") in text_types and isinstance(part.get("text"), str):
                part["text"] = part["text"] + marker_text(_PLACEHOLDER)
                return True
    return False


def _mark(protocol: str, body: dict[str, Any]) -> bool:
    wire = WIRES.get(protocol)  # where the conversation is, and what its text parts are called
    if wire is None:
        return False
    conversation = body.get(wire.conversation)
    if wire.text_input and isinstance(conversation, str):  # responses: input as a bare string
        body[wire.conversation] = conversation + marker_text(_PLACEHOLDER)
        return True
    items = conversation if isinstance(conversation, list) else []
    for msg in reversed(items):
        if isinstance(msg, dict) and msg.get("role") == "user":
            return _append_to_content(msg, (wire.text_part,))
    return False


def marked_template(protocol: str, body: bytes) -> tuple[bytes, bytes] | None:
    """Split ``body`` around a marker placeholder in its last user message.

    Args:
        protocol: "chat", "responses" or "messages" (docs/protocols.md).
        body: the request body, JSON.

    Returns:
        (prefix, suffix): the request for id ``x`` is
        ``prefix + x.encode() + suffix``; or None when the body has no user
        message text to mark (not JSON, no user turn, only images): such
        requests are matched by the header alone. Never raises.
    """
    try:
        doc = json.loads(body)
    except ValueError:
        return None
    if not isinstance(doc, dict) or not _mark(protocol, doc):
        return None
    parts = json.dumps(doc, ensure_ascii=False, separators=(",", ":")).encode().split(_PLACEHOLDER.encode())
    if len(parts) != 2:  # the placeholder text was in the prompt already
        return None
    return parts[0], parts[1]


def find_marker(body: bytes) -> str | None:
    """The id of the last marker in ``body`` (raw request bytes), or None.

    Never raises.
    """
    last = None
    for m in MARKER_RE.finditer(body):
        last = m
    return None if last is None else last.group(1).decode("ascii")
