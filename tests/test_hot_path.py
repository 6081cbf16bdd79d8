"""Hot-path shortcuts give exactly what the plain path gives."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import hopbench.protocols._base as base
from hopbench.measure._hdr import Histogram
from hopbench.measure._recorder import Recorder
from hopbench.protocols import decode_stream

DATA = Path(__file__).parent / "data" / "protocols"
ODD = [b'{"choices":[{"delta":{"content":"x"}}],"n":NaN}', b'{"a":' + b"9" * 30 + b"}",
       b'{"s":"\\ud800"}', b'{"bad utf8":"\xff"}', b"[" * 5000 + b"]" * 5000, b"{nope"]


def _result(protocol: str, chunks: list[bytes]) -> dict:
    r = decode_stream(protocol, chunks)
    return {k: getattr(r, k) for k in r.__slots__} if hasattr(r, "__slots__") else vars(r)


@pytest.mark.parametrize("path", sorted(DATA.glob("*.sse")), ids=lambda p: p.name)
def test_hot_path_orjson_and_stdlib_json_agree(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    protocol = path.name.split("__")[0]
    body = path.read_bytes()
    fast = _result(protocol, [body])
    monkeypatch.setattr(base, "_fast_loads", None)
    assert _result(protocol, [body]) == fast


@pytest.mark.parametrize("payload", ODD)
def test_hot_path_odd_json_same_verdict_either_way(payload: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    body = b"data: " + payload + b"\n\ndata: [DONE]\n\n"
    fast = _result("chat", [body])
    monkeypatch.setattr(base, "_fast_loads", None)
    assert _result("chat", [body]) == fast


def test_hot_path_record_many_equals_record() -> None:
    values = [0, 1, 5, 999, 10**6, 3 * 10**9, -1, 4 * 10**12, 123456789] * 3
    one, many = Histogram("itl"), Histogram("itl")
    bad = sum(not one.record(v) for v in values)
    assert many.record_many(values) == bad == 6
    assert one.encode() == many.encode() and (one.min, one.max) == (many.min, many.max)
    rec_a, rec_b = Recorder(["s"]), Recorder(["s"])
    for v in values:
        rec_a.record("s", "itl", v)
    rec_b.record_many("s", "itl", values)
    a, b = rec_a.snapshot(), rec_b.snapshot()
    assert a.to_json() == b.to_json()
    assert json.dumps(b.to_json()).count("out_of_range.itl") == 2  # in "s" and in "all"


CHAT_CHUNKS = [
    b'{"choices":[{"index":0,"delta":{"role":"assistant","content":"Hi"},"finish_reason":null}]}',
    b'{"choices":[{"index":0,"delta":{"content":"\xe4\xbd\xa0\xe5\xa5\xbd"},"finish_reason":null}]}',
    b'{"choices":[{"index":1,"delta":{"content":"other choice"},"finish_reason":null}]}',
    b'{"choices":[{"delta":{"content":"no index"}}]}',
    b'{"choices":[{"index":0,"delta":{"content":""},"finish_reason":null}]}',
    b'{"choices":[{"index":0,"delta":{"content":"x","refusal":"no"},"finish_reason":null}]}',
    b'{"choices":[{"index":0,"delta":{"content":"x"},"finish_reason":"length"}]}',
    b'{"choices":[{"index":0,"delta":{"content":"x"}}],"usage":{"prompt_tokens":3,"completion_tokens":4}}',
    b'{"choices":[{"index":0,"delta":{"reasoning_content":"think"}}]}',
    b'{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":4}}',
]


@pytest.mark.parametrize("n", range(len(CHAT_CHUNKS)))
def test_hot_path_chat_text_fast_path_equals_general_path(n: int, monkeypatch: pytest.MonkeyPatch) -> None:
    from hopbench.protocols import new_decoder
    from hopbench.protocols._chat import ChatDecoder
    from hopbench.sse import SSEEvent

    events = [SSEEvent("message", c) for c in CHAT_CHUNKS[n:] + CHAT_CHUNKS[:n]] + [SSEEvent("message", b"[DONE]")]

    def run() -> tuple[list, dict]:
        dec = new_decoder("chat")
        obs = [o for e in events for o in dec.feed(e)]
        r = dec.finish()
        return obs, {k: getattr(r, k) for k in r.__slots__}

    fast = run()
    monkeypatch.setattr(ChatDecoder, "_text_only", lambda self, choice: None)
    assert run() == fast


@pytest.mark.parametrize("text", [
    '{"a":1}', ' {"a":1}', '{"a":1} ', '\n{"a":[1,2]}\r\n', '{"a":1} x', '{"a":1}{"b":2}', "", "   ", "[]",
    '"s"', "nope", '{"a":' + "9" * 5000 + "}", "[" * 5000 + "]" * 5000, '{"n":NaN}', '{"s":"\\ud800"}',
])
def test_hot_path_stdlib_scanner_equals_json_loads(text: str) -> None:
    def outcome(f: object) -> object:
        try:
            return ("ok", f(text))  # type: ignore[operator]
        except (ValueError, RecursionError) as exc:
            return ("error", type(exc))

    assert outcome(base._loads) == outcome(json.loads)


@pytest.mark.parametrize("protocol,event", [
    ("chat", b'data: {"choices":[{"index":0,"delta":{"content":"abc"},"finish_reason":null}]}\n\n'),
    ("responses", b'event: response.output_text.delta\ndata: {"type":"response.output_text.delta",'
                  b'"delta":"abc"}\n\n'),
    ("messages", b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
                 b'"delta":{"type":"text_delta","text":"abc"}}\n\n'),
])
def test_hot_path_text_event_allocates_no_observation(protocol: str, event: bytes) -> None:
    """After the first token, a text event returns a shared pre-built tuple (no
    list, ContentDelta or tuple per event), equal to what a fresh one would be."""
    from hopbench.protocols import ContentDelta, FirstContentToken, FirstToken, new_decoder
    from hopbench.sse import SSEScanner

    dec = new_decoder(protocol, keep_text=False)
    first, second, third = (dec.feed(item) for item in SSEScanner().feed(event * 3))
    assert first == (FirstToken("text"), FirstContentToken("text"), ContentDelta("text", 3))
    assert second == third == (ContentDelta("text", 3),)
    assert second is third
    long = event.replace(b"abc", b"x" * 300)
    assert [dec.feed(i) for i in SSEScanner().feed(long)] == [(ContentDelta("text", 300),)]
    assert dec.finish().events["text"] == 4
