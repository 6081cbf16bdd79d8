"""Datasets: ShareGPT JSON, OpenAI chat JSONL, Anthropic Messages JSONL, plain
prompts JSONL, read into records and filtered by length (pure but for reading the file).

Role: the prompt source of a ``dataset`` scenario (docs/workloads.md). The
file is read once, at profile load; every problem is a ``ProfileError`` naming
the dataset file and line.

Sources: ShareGPT's JSON (``[{"conversations": [{"from", "value"}]}]``, as
vLLM's benchmark_serving reads it), OpenAI chat JSONL (``{"messages": [...]}``,
OpenAI fine-tuning format), Anthropic Messages JSONL (``{"system"?, "messages"}``,
Anthropic API reference "Messages"), plain prompts JSONL (a string or
``{"prompt": ...}``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ._errors import ProfileError
from ._lengths import Tokenizer, estimate_tokens
from ._textfile import json_value, read_regular

__all__ = ["DATASET_FORMATS", "DatasetSpec", "Message", "Record", "filter_records", "read_dataset",
           "record_from_messages",
           "record_tokens"]

DATASET_FORMATS: tuple[str, ...] = ("auto", "sharegpt", "openai", "anthropic", "prompts")


@dataclass(frozen=True, slots=True)
class Message:
    """One chat turn: role ``"system"``, ``"user"`` or ``"assistant"``, and its text."""

    role: str
    text: str


@dataclass(frozen=True, slots=True)
class Record:
    """One dataset record: the conversation to send and, when the dataset holds
    it, the reference reply (whose length can filter records).

    Attributes:
        messages: system (first, at most one) then user/assistant turns ending
            with a user turn.
        reply: the reference assistant reply that followed, or None.
        line: the 1-based line (JSONL) or array index + 1 (JSON) it came from.
    """

    messages: tuple[Message, ...]
    reply: str | None
    line: int


#: Anthropic content blocks of tool use (Messages API reference, "Tool use")
_TOOL_BLOCKS = ("tool_use", "tool_result", "server_tool_use")


def _content_text(content: Any) -> str | None:
    """A message content as text: a string, or the text blocks of a block array."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for block in content:
            if isinstance(block, Mapping) and block.get("type") in _TOOL_BLOCKS:
                return None  # a tool turn has no text equivalent: refused (_content_kind says why)
            if isinstance(block, str):
                parts.append(block)
            elif isinstance(block, Mapping) and isinstance(block.get("text"), str):
                parts.append(block["text"])
        return "\n".join(parts) if parts else None
    return None


#: why a record with tool turns is refused (the reason, after what was seen)
_NO_TOOLS = ("; tool calls and tool results are not supported (hopbench sends text conversations): "
             "remove such records from the dataset")


def _non_text_kinds(obj: Mapping[str, Any]) -> str:
    """The types of the content blocks of a record (its ``system`` and messages)
    that are not text, sorted and comma-separated, or "" when all are text."""
    contents = [obj.get("system"), *(m.get("content") for m in obj.get("messages") or () if isinstance(m, Mapping))]
    kinds = {str(b.get("type")) for c in contents if isinstance(c, list) for b in c
             if isinstance(b, Mapping) and not isinstance(b.get("text"), str)}
    return ", ".join(sorted(kinds))


def _content_kind(m: Mapping[str, Any]) -> str:
    """What a message's unusable ``content`` holds, for the error message."""
    content = m.get("content")
    if content is None:
        return "null" if "content" in m else "no content"
    if isinstance(content, list):
        kinds = sorted({str(b.get("type")) for b in content if isinstance(b, Mapping)})
        if any(k in _TOOL_BLOCKS for k in kinds):
            return f"blocks of type {', '.join(kinds)}" + _NO_TOOLS
        return f"blocks of type {', '.join(kinds)} and no text" if kinds else "no text block"
    return f"a {type(content).__name__}"


def record_from_messages(obj: Mapping[str, Any], line: int,
                         fail: Callable[[int, str], ProfileError]) -> Record:
    """A record from ``{"system"?, "messages": [...]}`` (OpenAI chat or Anthropic Messages).

    Args:
        obj: the parsed JSON object.
        line: its line in the dataset (for errors and the record).
        fail: builds the ProfileError for (line, reason).

    Returns:
        The record; a trailing assistant turn becomes its reference reply.

    Raises:
        ProfileError: no messages, a role other than system/user/assistant
        (``developer`` counts as system), a content that is neither a string
        nor text blocks, a system turn mid-conversation, or a conversation
        that does not end with a user turn.
    """
    msgs = obj.get("messages")
    if not isinstance(msgs, list) or not msgs:
        raise fail(line, 'expected a non-empty "messages" array')
    out: list[Message] = []
    system = obj.get("system")  # Anthropic: a top-level system prompt (string or text blocks)
    if system is not None:
        text = _content_text(system)
        if text is None:
            raise fail(line, '"system": expected a string or an array of text blocks')
        out.append(Message("system", text))
    for i, m in enumerate(msgs):
        if not isinstance(m, Mapping) or not isinstance(m.get("role"), str):
            raise fail(line, f'messages[{i}]: expected an object with a "role"')
        role = m["role"]
        if role == "developer":
            role = "system"
        if role not in ("system", "user", "assistant"):
            raise fail(line, f'messages[{i}].role: expected system, user or assistant, got {role!r}'
                             + (_NO_TOOLS if role in ("tool", "function") else ""))
        if m.get("tool_calls") or m.get("function_call"):  # OpenAI: an assistant's tool call
            raise fail(line, f'messages[{i}]: an assistant message with "tool_calls"' + _NO_TOOLS)
        text = _content_text(m.get("content"))
        if text is None:
            raise fail(line, f'messages[{i}].content: expected a string or text blocks, got '
                             f'{_content_kind(m)}')
        if role == "system" and out and out[-1].role != "system":
            raise fail(line, f"messages[{i}]: a system message after the conversation started")
        out.append(Message(role, text))
    reply = None
    if out[-1].role == "assistant":  # fine-tuning style: the last turn is the reference reply
        reply = out.pop().text
    if not out or out[-1].role != "user":
        raise fail(line, "expected the conversation to end with a user message "
                         "(optionally followed by the assistant's reply)")
    if not out[-1].text.strip():  # (the prompts format refuses an empty prompt too)
        raise fail(line, f"messages[{len(out) - 1}]: the last user message is empty: nothing to answer")
    return Record(tuple(out), reply, line)


_SHAREGPT_ROLES = {"human": "user", "user": "user", "gpt": "assistant", "chatgpt": "assistant",
                   "assistant": "assistant", "bing": "assistant", "bard": "assistant",
                   "system": "system"}


def _from_sharegpt(obj: Mapping[str, Any], line: int, fail: Callable[[int, str], ProfileError]) -> Record | None:
    """The first user turn of a ShareGPT record, and the reply that follows it.

    Returns None for a record that does not start (after an optional system
    turn) with a non-empty human turn: ShareGPT dumps hold empty conversations
    and ones opened by the model or a tool; vLLM's benchmark skips them too.
    """
    conv = obj.get("conversations")
    if not isinstance(conv, list):
        raise fail(line, 'expected a "conversations" array')
    turns: list[Message] = []
    for i, turn in enumerate(conv):
        if not isinstance(turn, Mapping) or not isinstance(turn.get("value"), str):
            raise fail(line, f'conversations[{i}]: expected an object with a string "value"')
        # an unknown speaker ("tool", ...) is kept as such: it cannot be the
        # prompt or the reply, so such a record is skipped, not an error
        role = _SHAREGPT_ROLES.get(str(turn.get("from", "")).lower(), "other")
        turns.append(Message(role, turn["value"]))
    system = [t for t in turns[:1] if t.role == "system"]
    rest = turns[len(system):]
    if not rest or rest[0].role != "user" or not rest[0].text.strip():
        return None
    reply = rest[1].text if len(rest) > 1 and rest[1].role == "assistant" else None
    return Record(tuple(system) + (rest[0],), reply, line)


def _from_prompt(obj: Any, line: int, fail: Callable[[int, str], ProfileError]) -> Record:
    if isinstance(obj, Mapping):
        obj = obj.get("prompt", obj.get("text"))
    if not isinstance(obj, str):
        raise fail(line, 'expected a JSON string or an object with a string "prompt"')
    if not obj.strip():
        raise fail(line, "expected a non-empty prompt")
    return Record((Message("user", obj),), None, line)


def _detect(first: Any) -> str:
    if isinstance(first, Mapping):
        if "conversations" in first:
            return "sharegpt"
        if "messages" in first:
            return "anthropic" if "system" in first else "openai"
    return "prompts"


def read_dataset(path: Path, fmt: str, fail: Callable[[int | None, str], ProfileError],
                 skipped: list[int] | None = None,
                 non_text: list[tuple[int, str]] | None = None) -> list[Record]:
    """Read a dataset file into records (at profile load; the only file I/O here).

    Args:
        path: the file: JSON (an array, ShareGPT) or JSONL (one record per line;
            blank lines skipped).
        fmt: one of ``DATASET_FORMATS``; "auto" looks at the extension and the
            first record.
        fail: builds a ProfileError for (line or None, reason) in ``path``.
        skipped: when given, the line of each record skipped (ShareGPT records
            without a user turn first) is appended to it.
        non_text: when given, (line, block types) of each OpenAI or Anthropic
            record whose content blocks beside the text (``image_url``,
            ``image``, ``input_audio``, ...) are left out: hopbench sends the
            text only, so the run must say so.

    Returns:
        list of Record in file order (ShareGPT records without a user turn skipped).

    Raises:
        ProfileError: a missing or unreadable file, not UTF-8, empty, a broken
        line (file:line), a record without the fields its format needs, or no
        usable record at all.
    """
    try:
        raw = read_regular(path)
    except OSError as exc:
        raise fail(None, f"cannot read the dataset {path}: {exc.strerror}") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        column = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
        raise fail(line, f"the dataset is not UTF-8 text (byte {column} of the line, "
                         f"{exc.start + 1} of the file)") from None
    if not text.strip():
        raise fail(None, f"the dataset {path} is empty")
    items: list[tuple[int, Any]] = []
    if text.lstrip().startswith("["):  # one JSON array (ShareGPT's own files)
        try:
            data = json_value(text)
        except json.JSONDecodeError as exc:
            raise fail(exc.lineno, f"broken JSON: {exc.msg}") from None
        starts = _array_lines(text, len(data)) if isinstance(data, list) else []
        items = [(starts[i] if i < len(starts) else 1, v) for i, v in enumerate(data)]
    else:
        # "\n" only: str.splitlines also breaks at U+0085, U+2028 and U+2029, which a
        # JSON string may hold unescaped (RFC 8259 section 7 escapes only U+0000-U+001F,
        # quote and backslash); a "\r" left at a line's end is JSON whitespace
        for i, text_line in enumerate(text.split("\n"), start=1):
            if not text_line.strip():
                continue
            try:
                items.append((i, json_value(text_line)))
            except json.JSONDecodeError as exc:
                raise fail(i, f"broken JSON line: {exc.msg} (column {exc.colno})") from None
    if not items:
        raise fail(None, f"the dataset {path} holds no records")
    if fmt == "auto":
        fmt = _detect(items[0][1])

    def fail_at(line: int, reason: str) -> ProfileError:
        return fail(line, f"{fmt} record: {reason}")

    out: list[Record] = []
    for line, obj in items:
        if fmt == "prompts":
            out.append(_from_prompt(obj, line, fail_at))
            continue
        if not isinstance(obj, Mapping):
            raise fail_at(line, f"expected a JSON object, got {type(obj).__name__}")
        if fmt == "sharegpt":
            rec = _from_sharegpt(obj, line, fail_at)
            if rec is not None:
                out.append(rec)
            elif skipped is not None:
                skipped.append(line)
        else:
            out.append(record_from_messages(obj, line, fail_at))
            kinds = _non_text_kinds(obj)
            if kinds and non_text is not None:
                non_text.append((line, kinds))
    if not out:
        raise fail(None, f"the dataset {path} holds no record with a user prompt")
    for rec in out:  # a JSON "\\ud800" escape decodes to a lone surrogate, which no body can encode
        for text_ in (m.text for m in rec.messages):  # (the reply is only measured, never sent)
            try:
                text_.encode("utf-8")
            except UnicodeEncodeError as exc:
                raise fail_at(rec.line, f"a text holds a lone UTF-16 surrogate (U+{ord(text_[exc.start]):04X}, "
                                        f"a \\u escape without its pair): not sendable as UTF-8") from None
    return out


def _array_lines(text: str, n: int) -> list[int]:
    """The 1-based line where each top-level element of a JSON array starts."""
    decoder = json.JSONDecoder()
    lines: list[int] = []
    i = text.index("[") + 1
    line = 1 + text.count("\n", 0, i)
    pos = i
    for _ in range(n):
        while i < len(text) and text[i] in " \t\r\n,":
            i += 1
        line += text.count("\n", pos, i)
        pos = i
        lines.append(line)
        try:
            _, i = decoder.raw_decode(text, i)
        except json.JSONDecodeError:
            break
    return lines


def record_tokens(rec: Record, tokenizer: Tokenizer | None) -> int:
    """Input tokens of a record's messages: the tokenizer's count summed over the
    messages, else all their characters / 4 rounded up (as the emulator counts)."""
    if tokenizer is not None:
        return sum(tokenizer.count(m.text) for m in rec.messages)
    return estimate_tokens("".join(m.text for m in rec.messages))


@dataclass(frozen=True, slots=True)
class DatasetSpec:
    """A scenario's ``dataset`` table, validated.

    Attributes:
        path: the file (resolved against the profile's folder).
        format: one of ``DATASET_FORMATS``.
        sample: keep this many records (drawn without replacement, seeded), or None for all.
        min_input_tokens / max_input_tokens: keep records whose prompt length
            (``record_tokens``) lies within these bounds (None: no bound).
        min_output_tokens / max_output_tokens: keep records whose reference reply
            length lies within these bounds; a bound drops records without a reply.
    """

    path: Path
    format: str
    sample: int | None
    min_input_tokens: int | None
    max_input_tokens: int | None
    min_output_tokens: int | None
    max_output_tokens: int | None


def filter_records(records: Sequence[Record], spec: DatasetSpec,
                   tokenizer: Tokenizer | None) -> list[tuple[Record, int]]:
    """The records within the spec's length bounds, each with its input tokens.

    Returns:
        list of (record, input tokens) in file order, possibly empty.
    """
    out = []
    for rec in records:
        n = record_tokens(rec, tokenizer)
        if spec.min_input_tokens is not None and n < spec.min_input_tokens:
            continue
        if spec.max_input_tokens is not None and n > spec.max_input_tokens:
            continue
        if spec.min_output_tokens is not None or spec.max_output_tokens is not None:
            if rec.reply is None:
                continue
            r = estimate_tokens(rec.reply, tokenizer)
            if spec.min_output_tokens is not None and r < spec.min_output_tokens:
                continue
            if spec.max_output_tokens is not None and r > spec.max_output_tokens:
                continue
        out.append((rec, n))
    return out
