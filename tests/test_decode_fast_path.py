"""The decoders' fast paths (byte templates, text-delta shortcuts) give exactly
what the full parse gives: the same observations from every ``feed`` and the
same ``StreamResult``, with orjson and with the stdlib parser, keeping text or
not. The reference is a decoder created with ``_base.FAST_PATHS`` False.

Streams: every captured stream under tests/data, and generated ones where an
odd frame (escapes, unicode, empty text, key order, extra keys, other choices,
tool calls, reasoning, refusal, usage, an id change, broken JSON, ...) arrives
after the stream's template was learned. A deliberately sloppy matcher must
make the comparison fail (``test_decode_fast_path_comparison_can_fail``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import hopbench.protocols._base as base
import hopbench.protocols._chat as chat_module
import hopbench.protocols._template as template
from hopbench.protocols import new_decoder
from hopbench.sse import SSEScanner

DATA = Path(__file__).parent / "data"
PROTOCOL_OF = {"chat_completions": "chat", "responses": "responses", "anthropic_messages_crlf": "messages"}

try:
    import orjson

    PARSERS: list[tuple[str, Any, Any]] = [("orjson", orjson.loads, orjson.JSONDecodeError)]
except ImportError:  # pragma: no cover - the fast extra is part of the test setup
    PARSERS = []
PARSERS.append(("stdlib", None, ValueError))


def _streams() -> Iterator[tuple[str, str, bytes]]:
    for path in sorted(DATA.rglob("*.sse")):
        stem = path.stem
        protocol = stem.split("__")[0] if "__" in stem else PROTOCOL_OF[stem]
        yield path.relative_to(DATA).as_posix(), protocol, path.read_bytes()


def _run(protocol: str, body: bytes, fast_paths: bool, keep_text: bool) -> tuple[list[Any], Any, Any]:
    """(observations per feed, the StreamResult, the decoder) of one body."""
    saved = base.FAST_PATHS
    base.FAST_PATHS = fast_paths
    try:
        decoder = new_decoder(protocol, keep_text=keep_text)
    finally:
        base.FAST_PATHS = saved
    scanner = SSEScanner()
    seen = [decoder.feed(item) for item in scanner.feed(body)]
    return seen, decoder.finish(discarded_partial=scanner.close()), decoder


def _compare(protocol: str, body: bytes, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Assert fast == full for every parser and keep_text; return the fast decoders."""
    decoders = []
    for _name, loads, error in PARSERS:
        monkeypatch.setattr(base, "_fast_loads", loads)
        monkeypatch.setattr(base, "_FastError", error)
        for keep_text in (True, False):
            full = _run(protocol, body, False, keep_text)
            fast = _run(protocol, body, True, keep_text)
            assert fast[0] == full[0]
            assert fast[1] == full[1]
            assert full[2]._tpl is None
            decoders.append(fast[2])
    return decoders


@pytest.mark.parametrize("name,protocol,body", list(_streams()), ids=lambda v: v if isinstance(v, str) else "")
def test_decode_fast_path_captured_streams_agree(
    name: str, protocol: str, body: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    _compare(protocol, body, monkeypatch)


# -- generated streams -----------------------------------------------------------------

def _sse(data: bytes, event: str | None = None) -> bytes:
    return (f"event: {event}\n".encode() if event else b"") + b"data: " + data + b"\n\n"


def _j(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


def _chat_frame(text: Any = "tok", **over: Any) -> bytes:
    frame: dict[str, Any] = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1,
                             "model": "m", "choices": [{"index": 0, "delta": {"content": text},
                                                        "logprobs": None, "finish_reason": None}],
                             "usage": None, "obfuscation": "ab"}
    frame.update(over)
    return _j(frame)


CHAT_ODD: dict[str, bytes] = {
    "escapes": _chat_frame("tok").replace(b'"tok"', b'"a\\"b\\\\c\\n\\u00e9\\ud83d\\ude00"'),
    "escaped_quote_end": _chat_frame("tok").replace(b'"tok"', b'"x\\\\"'),
    "unicode": _chat_frame("h\u00e9llo \u4f60\U0001f600"),
    "empty": _chat_frame(""),
    "null_text": _chat_frame(None),
    "number_text": _chat_frame("tok").replace(b'"tok"', b"12"),
    "object_text": _chat_frame("tok").replace(b'"tok"', b'{"a":"b"}'),
    "ws_around_text": _chat_frame("tok").replace(b'"tok"', b' "tok" '),
    "key_order": _j({"choices": [{"delta": {"content": "x"}, "index": 0, "logprobs": None,
                                  "finish_reason": None}], "id": "chatcmpl-1", "object": "chat.completion.chunk",
                     "created": 1, "model": "m", "usage": None, "obfuscation": "ab"}),
    "extra_delta_key": _chat_frame("tok").replace(b'"tok"', b'"tok","refusal":"no"'),
    "extra_top_key": _chat_frame("tok", extra=1),
    "two_choices": _chat_frame("tok").replace(b'"tok"}', b'"tok"}},{"index":1,"delta":{"content":"y"'),
    "other_index": _chat_frame("tok").replace(b'"index":0', b'"index":1'),
    "finish": _chat_frame("tok").replace(b'"finish_reason":null', b'"finish_reason":"stop"'),
    # same length as the learned frame: only the bytes around the text tell
    "finish_same_length": _chat_frame("tok").replace(b'"finish_reason":null', b'"finish_reason":"ab"'),
    "index_same_length": _chat_frame("tok").replace(b'"index":0', b'"index":7'),
    "usage": _chat_frame("tok").replace(b'"usage":null', b'"usage":{"prompt_tokens":1,"completion_tokens":2}'),
    "tool_call": _chat_frame("tok").replace(
        b'"content":"tok"', b'"tool_calls":[{"index":0,"id":"c1","function":{"name":"f","arguments":"{}"}}]'),
    "reasoning": _chat_frame("tok").replace(b'"content"', b'"reasoning_content"'),
    "refusal": _chat_frame("tok").replace(b'"content"', b'"refusal"'),
    "id_change": _chat_frame("tok", id="chatcmpl-2"),
    "model_change": _chat_frame("tok", model="m2"),
    "obfuscation_changes": _chat_frame("tok", obfuscation="xyz"),
    "obfuscation_escape": _chat_frame("tok").replace(b'"ab"', b'"a\\u0062"'),
    "obfuscation_quote": _chat_frame("tok").replace(b'"ab"', b'"a\\"b"'),
    "obfuscation_bad_utf8": _chat_frame("tok").replace(b'"ab"', b'"a\xffb"'),
    "text_holds_suffix": _chat_frame('tok"},"logprobs":null,"finish_reason":"stop"}],"usage":null,"obfuscation":"'),
    "text_holds_key": _chat_frame('"content":"x'),
    "bad_json": _chat_frame("tok")[:-1],
    "bad_utf8": _chat_frame("tok").replace(b"tok", b"t\xffk"),
    "control_char": _chat_frame("tok").replace(b"tok", b"t\x01k"),
    "lone_surrogate": _chat_frame("tok").replace(b"tok", b"\\ud800"),
    "bad_escape": _chat_frame("tok").replace(b"tok", b"\\x"),
    "duplicate_key": _chat_frame("tok").replace(b'"content":"tok"', b'"content":"tok","content":"two"'),
    "done_in_text": _chat_frame("[DONE]"),
    "long_text": _chat_frame("x" * 300),
    "role_and_text": _chat_frame("tok").replace(b'{"content"', b'{"role":"assistant","content"'),
}


def _resp_frame(seq: Any, text: Any = "tok", **over: Any) -> bytes:
    frame: dict[str, Any] = {"type": "response.output_text.delta", "sequence_number": seq, "item_id": "msg_1",
                             "output_index": 0, "content_index": 0, "delta": text, "logprobs": [],
                             "obfuscation": "ab"}
    frame.update(over)
    return _j(frame)


RESP_ODD: dict[str, bytes] = {
    "escapes": _resp_frame(90, "tok").replace(b'"tok"', b'"a\\"b\\\\c\\n\\u00e9\\ud83d\\ude00"'),
    "unicode": _resp_frame(90, "h\u00e9llo \u4f60\U0001f600"),
    "empty": _resp_frame(90, ""),
    "null_text": _resp_frame(90, None),
    "seq_leading_zero": _resp_frame(90).replace(b'"sequence_number":90', b'"sequence_number":090'),
    "seq_negative": _resp_frame(-3),
    "seq_huge": _resp_frame(10**30),
    "seq_float": _resp_frame(9.5),
    "seq_string": _resp_frame("9"),
    "seq_missing": _j({"type": "response.output_text.delta", "item_id": "msg_1", "output_index": 0,
                       "content_index": 0, "delta": "x", "logprobs": [], "obfuscation": "ab"}),
    "other_type": _resp_frame(90, type="response.refusal.delta"),
    "reasoning": _resp_frame(90, type="response.reasoning_text.delta"),
    "tool_args": _resp_frame(90, type="response.function_call_arguments.delta"),
    "item_change": _resp_frame(90, item_id="msg_2"),
    "extra_key": _resp_frame(90, extra=True),
    "key_order": _j({"sequence_number": 90, "type": "response.output_text.delta", "item_id": "msg_1",
                     "output_index": 0, "content_index": 0, "delta": "x", "logprobs": [], "obfuscation": "ab"}),
    "obfuscation_changes": _resp_frame(90, obfuscation="xyz"),
    "obfuscation_escape": _resp_frame(90).replace(b'"ab"', b'"a\\u0062"'),
    "text_holds_suffix": _resp_frame(90, 'x","logprobs":[],"obfuscation":"'),
    "bad_json": _resp_frame(90)[:-1],
    "bad_utf8": _resp_frame(90).replace(b"tok", b"t\xffk"),
    "lone_surrogate": _resp_frame(90).replace(b"tok", b"\\ud800"),
    "long_text": _resp_frame(90, "x" * 300),
}


def _msg_frame(text: Any = "tok", index: int = 0, dtype: str = "text_delta", key: str = "text") -> bytes:
    return _j({"type": "content_block_delta", "index": index, "delta": {"type": dtype, key: text}})


MSG_ODD: dict[str, bytes] = {
    "escapes": _msg_frame("tok").replace(b'"tok"', b'"a\\"b\\\\c\\n\\u00e9\\ud83d\\ude00"'),
    "unicode": _msg_frame("h\u00e9llo \u4f60\U0001f600"),
    "empty": _msg_frame(""),
    "null_text": _msg_frame(None),
    "other_index": _msg_frame("tok", index=1),
    "thinking": _msg_frame("tok", dtype="thinking_delta", key="thinking"),
    "tool_json": _msg_frame("{}", dtype="input_json_delta", key="partial_json"),
    "extra_key": _msg_frame("tok").replace(b'"tok"}', b'"tok","x":1}'),
    "key_order": _j({"index": 0, "type": "content_block_delta", "delta": {"type": "text_delta", "text": "x"}}),
    "text_holds_suffix": _msg_frame('x"}},{"a":"'),
    "bad_json": _msg_frame("tok")[:-1],
    "bad_utf8": _msg_frame("tok").replace(b"tok", b"t\xffk"),
    "control_char": _msg_frame("tok").replace(b"tok", b"t\x01k"),
    "lone_surrogate": _msg_frame("tok").replace(b"tok", b"\\ud800"),
    "long_text": _msg_frame("x" * 300),
}


def _chat_body(odd: bytes, event: str | None = None, padding: bool = False) -> bytes:
    """3 text chunks, ``odd``, 3 more, [DONE]; ``padding``: the obfuscation
    string changes per chunk (as OpenAI sends it), so the template cuts it out."""
    normal = [_sse(_chat_frame(f"t{i}", **({"obfuscation": "pad" * i} if padding else {}))) for i in range(3)]
    return b"".join(normal + [_sse(odd, event)] + normal + [_sse(b"[DONE]")])


def _resp_body(odd: bytes) -> bytes:
    seq = iter(range(100, 200))
    normal = [_sse(_resp_frame(next(seq), "t"), "response.output_text.delta") for _ in range(3)]
    end = _sse(_j({"type": "response.completed", "sequence_number": 300,
                   "response": {"status": "completed", "usage": {"input_tokens": 1, "output_tokens": 2}}}),
               "response.completed")
    later = [_sse(_resp_frame(next(seq), "u"), "response.output_text.delta") for _ in range(3)]
    return b"".join(normal + [_sse(odd, "response.output_text.delta")] + later + [end])


def _msg_body(odd: bytes, event: str = "content_block_delta") -> bytes:
    normal = [_sse(_msg_frame(f"t{i}"), "content_block_delta") for i in range(3)]
    end = _sse(_j({"type": "message_stop"}), "message_stop")
    return b"".join(normal + [_sse(odd, event)] + normal + [end])


GENERATED: list[tuple[str, str, bytes]] = (
    [(f"chat-{k}", "chat", _chat_body(v)) for k, v in CHAT_ODD.items()]
    + [(f"chat-padded-{k}", "chat", _chat_body(v, padding=True)) for k, v in CHAT_ODD.items()]
    + [("chat-error-event", "chat", _chat_body(_chat_frame("t1"), "error"))]
    + [(f"responses-{k}", "responses", _resp_body(v)) for k, v in RESP_ODD.items()]
    + [(f"messages-{k}", "messages", _msg_body(v)) for k, v in MSG_ODD.items()]
    + [("messages-other-event-name", "messages", _msg_body(_msg_frame("t1"), "message_delta"))]
)


@pytest.mark.parametrize("name,protocol,body", GENERATED, ids=[g[0] for g in GENERATED])
def test_decode_fast_path_odd_shapes_agree(
    name: str, protocol: str, body: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    decoders = _compare(protocol, body, monkeypatch)
    # the fast path was really taken: a template was learned on the normal frames
    # (Responses learns only with the stdlib parser: orjson parses its deltas inline)
    assert all(d._tpl is not None for d in decoders[-2:])


def test_decode_fast_path_template_matches_the_common_frames(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each protocol's plain text deltas after the first are matched, not parsed."""
    for _name, loads, error in PARSERS:
        monkeypatch.setattr(base, "_fast_loads", loads)
        monkeypatch.setattr(base, "_FastError", error)
        for protocol, body in (("chat", _chat_body(_chat_frame("x"))), ("messages", _msg_body(_msg_frame("x"))),
                               ("responses", _resp_body(_resp_frame(99, "x")))):
            if protocol == "responses" and loads is not None:
                continue
            calls: list[bytes] = []
            real_match = template.match

            def counting(tpl: Any, data: bytes, fast: Any, real: Callable[..., Any] = real_match) -> Any:
                text = real(tpl, data, fast)
                if text is not None:
                    calls.append(data)
                return text

            module = {"chat": chat_module}.get(protocol)
            target = module or __import__(f"hopbench.protocols._{protocol}", fromlist=["match"])
            monkeypatch.setattr(target, "match", counting)
            _run(protocol, body, True, True)
            assert len(calls) >= 5, (protocol, calls)


def _sloppy(tpl: Any, data: bytes, fast: Any) -> Any:
    """A broken matcher: trusts the head and reads the text up to the next quote."""
    if not data.startswith(tpl.head):
        return None
    start = len(tpl.head)
    end = data.find(b'"', start + 1)
    return data[start + 1:end].decode("utf-8", "replace")


def test_decode_fast_path_comparison_can_fail(monkeypatch: pytest.MonkeyPatch) -> None:
    """With a matcher that skips the segment checks, the comparison catches it."""
    monkeypatch.setattr(chat_module, "match", _sloppy)
    failures = 0
    for key in ("finish", "usage", "two_choices", "escapes"):
        try:
            _compare("chat", _chat_body(CHAT_ODD[key]), monkeypatch)
        except AssertionError:
            failures += 1
    assert failures == 4


def test_decode_fast_path_padded_chat_is_matched(monkeypatch: pytest.MonkeyPatch) -> None:
    """A chat stream whose obfuscation padding changes per chunk gets a template
    with a string hole after its first miss."""
    for _name, loads, error in PARSERS:
        monkeypatch.setattr(base, "_fast_loads", loads)
        monkeypatch.setattr(base, "_FastError", error)
        decoder = _run("chat", _chat_body(_chat_frame("x", obfuscation="zz"), padding=True), True, True)[2]
        assert decoder._tpl is not None and decoder._tpl.kinds == (template.TEXT, template.STR)


def test_decode_fast_path_learn_refuses_a_cut_it_cannot_prove() -> None:
    """The key of an ignored hole also nested later: the last one found is the
    wrong field, so the probe re-parse disproves the cut and no template is made."""
    data = b'{"choices":[{"index":0,"delta":{"content":"a"}}],"obfuscation":"p","meta":{"obfuscation":"q"}}'
    body = json.loads(data)
    path = ("choices", 0, "delta", "content")
    assert template.learn("message", data, body, path, (("obfuscation", template.STR),), json.loads) is None
    tpl = template.learn("message", data, body, path, (), json.loads)
    assert tpl is not None and tpl.kinds == (template.TEXT,)
    assert template.match(tpl, data.replace(b'"a"', b'"b\\u00e9"'), None) == "b\u00e9"
    assert template.match(tpl, data.replace(b'"q"', b'"r"'), None) is None
