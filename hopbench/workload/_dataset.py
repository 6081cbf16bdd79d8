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

import itertools
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._errors import ProfileError
from ..protocols._requests import Message
from ._lengths import Tokenizer, estimate_tokens
from .._textfile import GZIP_MAGIC, binary_kind, gunzip, json_array_items, json_value, read_regular

__all__ = ["DATASET_FORMATS", "DatasetSpec", "Record", "filter_records", "read_dataset",
           "record_from_messages",
           "record_tokens"]

DATASET_FORMATS: tuple[str, ...] = ("auto", "sharegpt", "openai", "anthropic", "prompts")


@dataclass(frozen=True, slots=True)
class Record:
    """One dataset record: the conversation to send and, when the dataset holds
    it, the reference reply (whose length can filter records).

    Attributes:
        messages: system (first, at most one) then user/assistant turns ending
            with a user turn.
        reply: the reference assistant reply that followed, or None.
        line: the 1-based line (JSONL) or line where its array element starts (JSON) it came from.
        label: its place for messages, ``record K`` (1-based position in the
            file) with its ``id`` when it has one (``record 3 (id "QWJhYvA_0")``):
            the records of a one-line JSON array all start on line 1.
    """

    messages: tuple[Message, ...]
    reply: str | None
    line: int
    label: str = ""


#: Anthropic content blocks of tool use (Messages API reference, "Tool use")
_TOOL_BLOCKS = ("tool_use", "tool_result", "server_tool_use")


def _block_text(block: Any) -> str | None:
    """A content block's text: a ``text`` block's ``text``, or an assistant's ``refusal``
    part's ``refusal`` (OpenAI "Create chat completion": an assistant message's content
    is text parts or one refusal part, and the refusal is what the assistant said)."""
    if isinstance(block, Mapping):
        if isinstance(block.get("text"), str):
            return str(block["text"])
        if block.get("type") == "refusal" and isinstance(block.get("refusal"), str):
            return str(block["refusal"])
    return None


def _content_text(content: Any) -> str | None:
    """A message content as text: a string, or the text blocks of a block array."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for block in content:
            if isinstance(block, Mapping) and block.get("type") in _TOOL_BLOCKS:
                return None  # a tool turn has no text equivalent: refused (_content_kind says why)
            text = block if isinstance(block, str) else _block_text(block)
            if text is not None:
                parts.append(text)
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
             if isinstance(b, Mapping) and _block_text(b) is None}
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


def _from_sharegpt(obj: Mapping[str, Any], line: int, fail: Callable[[int, str], ProfileError],
                   whole: bool = False) -> Record | None:
    """The first user turn of a ShareGPT record, and the reply that follows it; with
    ``whole``, every turn up to the last user turn, and the reply that follows that.

    Consecutive turns of one speaker (a user who sent two messages before the
    model answered) are one turn, their texts joined with a newline. With
    ``whole`` the conversation ends before its first turn of an unknown
    speaker (``tool``, ...) or a system turn past the first: hopbench sends
    user and assistant turns only.

    Returns None for a record that does not start (after an optional system
    turn) with a non-empty human turn: ShareGPT dumps hold empty conversations
    and ones opened by the model or a tool; vLLM's benchmark skips them too.
    """
    conv = obj.get("conversations")
    if not isinstance(conv, list):
        raise fail(line, 'expected a "conversations" array')
    turns: list[Message] = []
    roles = _SHAREGPT_ROLES
    for i, turn in enumerate(conv):
        # (json gives dicts: isinstance against the Mapping ABC cost a third of a 100,000-record load)
        value = turn.get("value") if isinstance(turn, dict) else None
        if not isinstance(value, str):
            raise fail(line, f'conversations[{i}]: expected an object with a string "value"' + _seen(turn))
        # an unknown speaker ("tool", ...) is kept as such: it cannot be the
        # prompt or the reply, so such a record is skipped, not an error
        frm = turn.get("from")
        role = roles.get(frm) or roles.get(frm.lower() if isinstance(frm, str) else "", "other")
        if i and role == "system":
            role = "other"  # a system turn mid-conversation: neither a prompt nor a reply
        if turns and role == turns[-1].role and role != "other":
            turns[-1] = Message(role, turns[-1].text + "\n" + value)
        else:
            turns.append(Message(role, value))
    system = [t for t in turns[:1] if t.role == "system"]
    rest = turns[len(system):]
    if not rest or rest[0].role != "user" or not rest[0].text.strip():
        return None
    if whole:
        known = next((k for k, t in enumerate(rest) if t.role == "other"), len(rest))
        rest = rest[:known]
        last = max(k for k, t in enumerate(rest) if t.role == "user")
        reply = rest[last + 1].text if last + 1 < len(rest) else None
        return Record(tuple(system) + tuple(rest[:last + 1]), reply, line)
    reply = rest[1].text if len(rest) > 1 and rest[1].role == "assistant" else None
    return Record(tuple(system) + (rest[0],), reply, line)


def _seen(turn: Any) -> str:
    """What a ShareGPT turn without a string ``value`` holds, for the message."""
    if not isinstance(turn, dict):
        return f", got {json.dumps(turn, ensure_ascii=False)[:40]}"
    if "value" in turn:
        return f', got {json.dumps(turn["value"], ensure_ascii=False)[:40]}'
    return f", got an object with {', '.join(json.dumps(k, ensure_ascii=False) for k in sorted(turn)[:6])}" + (
        " (ShareGPT turns are {\"from\", \"value\"}; {\"role\", \"content\"} turns are OpenAI's: "
        "make the record {\"messages\": [...]})" if "content" in turn else "")


def _from_prompt(obj: Any, line: int, fail: Callable[[int, str], ProfileError]) -> Record:
    keys = sorted(obj) if isinstance(obj, Mapping) else None
    if isinstance(obj, Mapping):
        key = "prompt" if "prompt" in obj else "text"
        obj = obj.get(key)
        if obj is not None and not isinstance(obj, str):
            raise fail(line, f'"{key}": expected a string, got {json.dumps(obj, ensure_ascii=False)[:40]}')
    if not isinstance(obj, str):
        seen = (f"; the record's keys are {', '.join(json.dumps(k, ensure_ascii=False) for k in keys[:8])}"
                + (", ..." if len(keys) > 8 else "") + " (a ShareGPT record has \"conversations\", an OpenAI or "
                "Anthropic one \"messages\": other dataset shapes need converting)") if keys else ""
        raise fail(line, 'expected a JSON string or an object with a string "prompt" (or "text")' + seen)
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


def _jsonl_items(text: str, fail: Callable[[int | None, str], ProfileError]) -> Iterator[tuple[int, Any]]:
    """(1-based line, parsed value) of each non-blank line of a JSONL text.

    A line ends at "\n" only: str.splitlines also breaks at U+0085, U+2028 and
    U+2029, which a JSON string may hold unescaped (RFC 8259 section 7 escapes
    only U+0000-U+001F, quote and backslash); a "\r" left at a line's end is
    JSON whitespace. Lines are cut one at a time (no list of every line).
    """
    pos, i, n = 0, 0, len(text)
    while pos < n:
        i += 1
        end = text.find("\n", pos)
        end = n if end < 0 else end
        text_line = text[pos:end]
        pos = end + 1
        if not text_line.strip():
            continue
        try:
            yield i, json_value(text_line)
        except json.JSONDecodeError as exc:
            whole = _one_object(text) if not text[:pos - len(text_line) - 1].strip() else None
            raise fail(i, whole or f"broken JSON line: {exc.msg} (column {exc.colno})") from None


def _one_object(text: str) -> str | None:
    """What to say of a dataset whose first line is broken JSON but whose whole text is one
    JSON object (pretty-printed: a record, or records under a key, as some exports have
    them), or None when it is not."""
    try:
        obj = json_value(text)
    except json.JSONDecodeError:
        return None
    if not isinstance(obj, dict):
        return None
    lists = [k for k, v in obj.items() if isinstance(v, list) and v and all(isinstance(x, dict) for x in v)]
    hint = (f': its key {json.dumps(lists[0], ensure_ascii=False)} holds an array of {len(obj[lists[0]]):,} '
            "objects: make that array the file" if lists and not ({"conversations", "messages"} & obj.keys())
            else ": write it on one line (JSONL), or as a JSON array of records")
    return (f"expected a JSON array of records, or one record per line (JSONL); the file is one JSON object over "
            f"{text.count(chr(10)) + 1:,} lines{hint}")


def _array_items(text: str, fail: Callable[[int | None, str], ProfileError]) -> Iterator[tuple[int, Any]]:
    """(1-based line where it starts, parsed value) of each element of a JSON array text,
    each parsed once (``_textfile.json_array_items``)."""
    line, pos = 1, 0
    try:
        for start, value in json_array_items(text):
            line += text.count("\n", pos, start)
            pos = start
            yield line, value
    except json.JSONDecodeError as exc:
        raise fail(exc.lineno, f"broken JSON: {exc.msg}") from None


def _label(k: int, obj: Any) -> str:
    """A record's place for messages: its position in the file (1-based) and its ``id``,
    when it has one (ShareGPT dumps do): a one-line JSON array has no other way to find it."""
    rid = obj.get("id") if isinstance(obj, dict) else None
    if isinstance(rid, str):  # (json.dumps per record took a tenth of a 100,000-record load)
        shown = f'"{rid}"' if len(rid) <= 80 and rid.isprintable() and '"' not in rid and "\\" not in rid \
            else json.dumps(rid[:80], ensure_ascii=False)
        return f"record {k:,} (id {shown})"
    if isinstance(rid, int) and not isinstance(rid, bool):
        return f"record {k:,} (id {rid})"
    return f"record {k:,}"


def read_dataset(path: Path, fmt: str, fail: Callable[[int | None, str], ProfileError],
                 skipped: list[tuple[int, str]] | None = None,
                 non_text: list[tuple[int, str, str]] | None = None, *,
                 whole: bool = False) -> list[Record]:
    """Read a dataset file into records (at profile load; the only file I/O here).

    Args:
        path: the file: JSON (an array, ShareGPT) or JSONL (one record per line;
            blank lines skipped), either of them possibly gzip-compressed
            (recognised by its first bytes, whatever its name).
        fmt: one of ``DATASET_FORMATS``; "auto" looks at the first record.
        fail: builds a ProfileError for (line or None, reason) in ``path``.
        skipped: when given, (line, label) of each record skipped (ShareGPT
            records without a user turn first) is appended to it.
        non_text: when given, (line, label, block types) of each OpenAI or Anthropic
            record whose content blocks beside the text (``image_url``,
            ``image``, ``input_audio``, ...) are left out: hopbench sends the
            text only, so the run must say so.
        whole: ShareGPT records keep every turn up to their last user turn
            (a record replayed as a session, ``turns = "dataset"``), not only
            their first user turn.

    Returns:
        list of Record in file order (ShareGPT records without a user turn skipped).

    Raises:
        ProfileError: a missing or unreadable file (a damaged gzip file too),
        not UTF-8, empty, a broken line (file:line; a JSON object that names a
        key twice too), a record without the fields its format needs, or no
        usable record at all. A record's error names its position and ``id``.
    """
    try:
        raw = read_regular(path)
        packed = " (decompressed)" if raw.startswith(GZIP_MAGIC) else ""
        raw = gunzip(raw)
    except OSError as exc:
        raise fail(None, f"cannot read the dataset {path}: {exc.strerror}") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        column = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
        kind = binary_kind(raw)
        raise fail(line, f"the dataset is not UTF-8 text (byte {column} of the line, "
                         f"{exc.start + 1} of the file{packed})"
                         + (f": it is {kind}; hopbench reads JSON or JSONL" if kind else "")) from None
    del raw  # the text alone from here on (the bytes were as large)
    if not text.strip():
        raise fail(None, f"the dataset {path.name} is empty{packed}")
    items = (_array_items(text, fail) if text.lstrip().startswith("[")  # one JSON array (ShareGPT's own files)
             else _jsonl_items(text, fail))
    first = next(items, None)
    if first is None:
        raise fail(None, f"the dataset {path.name} holds no records")
    if fmt == "auto":
        fmt = _detect(first[1])
    where = ""

    def fail_at(line: int, reason: str) -> ProfileError:
        return fail(line, f"{fmt} {where}: {reason}")

    out: list[Record] = []
    for k, (line, obj) in enumerate(itertools.chain((first,), items), start=1):
        where = _label(k, obj)
        rec: Record | None
        if fmt == "prompts":
            rec = _from_prompt(obj, line, fail_at)
        elif not isinstance(obj, Mapping):
            raise fail_at(line, f"expected a JSON object, got {type(obj).__name__}")
        elif fmt == "sharegpt":
            rec = _from_sharegpt(obj, line, fail_at, whole)
            if rec is None:
                if skipped is not None:
                    skipped.append((line, where))
                continue
        else:
            rec = record_from_messages(obj, line, fail_at)
            kinds = _non_text_kinds(obj)
            if kinds and non_text is not None:
                non_text.append((line, where, kinds))
        for text_ in (m.text for m in rec.messages):  # (the reply is only measured, never sent)
            try:  # a JSON "\\ud800" escape decodes to a lone surrogate, which no body can encode
                text_.encode("utf-8")
            except UnicodeEncodeError as exc:
                raise fail_at(line, f"a text holds a lone UTF-16 surrogate (U+{ord(text_[exc.start]):04X}, "
                                    f"a \\u escape without its pair): not sendable as UTF-8") from None
        out.append(Record(rec.messages, rec.reply, line, where))
    if not out:
        raise fail(None, f"the dataset {path.name} holds no record with a user prompt")
    return out


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
