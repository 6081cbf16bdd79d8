"""The emulator's prefill time and prefix cache, and the cached tokens hopbench reads back.

The prefix cache and the plan are pure (exact checks); the app is called in
process through its ASGI interface (no socket, no clock assertions except a
lower bound the emulator guarantees: nothing is sent before it is due).
"""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
import trio

from hopbench.emulator import EmulatorConfig
from hopbench.emulator._app import EmulatorApp
from hopbench.emulator._behaviour import plan_request, prefill_ns
from hopbench.emulator._config import Behaviour
from hopbench.emulator._prefix import PrefixCache
from hopbench.emulator._record import GroundTruth
from hopbench.protocols import new_decoder
from hopbench.sse import SSEScanner

WORD = " abc"  # 4 characters: one token for the emulator


def _text(tokens: int, salt: str = " xyz") -> str:
    return (salt + WORD * (tokens - 1))[: tokens * 4]


def test_prefix_cache_counts_leading_full_blocks_only() -> None:
    cache = PrefixCache(capacity_blocks=100, block_tokens=4)
    shared = _text(8, " aaa")  # two full blocks
    first = cache.lookup("m", [shared + _text(6, " bbb")])
    assert (first.hit_tokens, first.new_tokens) == (0, 12)  # 14 tokens: 3 full blocks, 2 left over
    second = cache.lookup("m", [shared, _text(6, " ccc")])  # parts are joined: same leading blocks
    assert second.hit_tokens == 8 and second.new_tokens == 4
    # the same block after another prefix is another entry (a hash chain, not a block set)
    third = cache.lookup("m", [_text(4, " ddd") + shared])
    assert third.hit_tokens == 0
    # another model has its own entries
    assert cache.lookup("other", [shared]).hit_tokens == 0
    # a partial block never hits
    assert cache.lookup("m", [shared[:30]]).hit_tokens == 4


def test_prefix_cache_evicts_least_recently_used() -> None:
    cache = PrefixCache(capacity_blocks=2, block_tokens=1)
    cache.lookup("m", [" aaa"])
    cache.lookup("m", [" bbb"])
    cache.lookup("m", [" aaa"])  # a is now the most recent
    cache.lookup("m", [" ccc"])  # evicts b
    assert len(cache) == 2
    assert cache.lookup("m", [" aaa"]).hit_tokens == 1
    assert cache.lookup("m", [" bbb"]).hit_tokens == 0


def test_plan_prefill_adds_uncached_tokens_over_the_rate_exactly() -> None:
    b = Behaviour(ttft_ms=10, prefill_tokens_per_s=2000)
    base = plan_request(b, random.Random(1), protocol="chat", stream=True, max_tokens=None,
                        tool_name=None)
    longer = plan_request(b, random.Random(1), protocol="chat", stream=True, max_tokens=None,
                          tool_name=None, prefill_tokens=1000)
    assert longer.first_ns - base.first_ns == 500_000_000
    assert longer.text == base.text  # no random draw moved
    assert prefill_ns(Behaviour(), 1000) == 0  # rate 0: off


def test_emulator_config_prefix_cache_round_trips_and_rejects_bad_values() -> None:
    cfg = EmulatorConfig.from_mapping({"prefill_tokens_per_s": 5000,
                                       "prefix_cache": {"capacity_blocks": 64, "block_tokens": 32}})
    assert cfg.prefix_cache_blocks == 64 and cfg.prefix_block_tokens == 32
    assert cfg.default.prefill_tokens_per_s == 5000
    assert EmulatorConfig.from_mapping(cfg.to_mapping()) == cfg
    from hopbench import ProfileError
    with pytest.raises(ProfileError, match="block_tokens"):
        EmulatorConfig.from_mapping({"prefix_cache": {"block_tokens": 0}})
    with pytest.raises(ProfileError, match="capacity"):
        EmulatorConfig.from_mapping({"prefix_cache": {"capacity": 3}})


class _Records:
    def __init__(self) -> None:
        self.lines: list[GroundTruth] = []

    def write(self, record: GroundTruth) -> None:
        self.lines.append(record)


async def _call(app: EmulatorApp, path: str, body: dict[str, Any]) -> bytes:
    """One request through the ASGI interface; returns the response body."""
    done = trio.Event()
    sent: list[bytes] = []
    request = [{"type": "http.request", "body": json.dumps(body).encode(), "more_body": False}]

    async def receive() -> dict[str, Any]:
        if request:
            return request.pop()
        await done.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body":
            sent.append(message.get("body", b""))
            if not message.get("more_body", False):
                done.set()

    scope = {"type": "http", "path": path, "method": "POST", "headers": [(b"x-hopbench-request-id", b"t")]}
    await app(scope, receive, send)
    return b"".join(sent)


def _usage(protocol: str, raw: bytes) -> Any:
    dec = new_decoder(protocol, keep_text=False, expect_usage=protocol == "chat")
    scanner = SSEScanner()
    for item in scanner.feed(raw):
        dec.feed(item)
    return dec.finish(discarded_partial=scanner.close())


BODIES = {
    "chat": ("/v1/chat/completions", lambda p: {"model": "m", "stream": True, "max_tokens": 4,
                                                "stream_options": {"include_usage": True},
                                                "messages": [{"role": "user", "content": p}]}),
    "responses": ("/v1/responses", lambda p: {"model": "m", "stream": True, "max_output_tokens": 4,
                                              "input": p}),
    "messages": ("/v1/messages", lambda p: {"model": "m", "stream": True, "max_tokens": 4,
                                            "messages": [{"role": "user", "content": p}]}),
}


@pytest.mark.parametrize("protocol", sorted(BODIES))
async def test_emulator_reports_cached_tokens_as_each_protocol_does(protocol: str) -> None:
    cfg = EmulatorConfig.from_mapping({"ttft_ms": 0, "tokens_per_s": 0, "keepalive_interval_s": 0,
                                       "prefix_cache": {"capacity_blocks": 100, "block_tokens": 16}})
    records = _Records()
    app = EmulatorApp(cfg, records)  # type: ignore[arg-type]
    path, make = BODIES[protocol]
    prompt = _text(40, " one")  # 40 tokens: 2 full blocks of 16, 8 left over
    first = await _call(app, path, make(prompt))
    second = await _call(app, path, make(prompt[:128] + _text(20, " two")))  # shares 2 blocks
    r1, r2 = _usage(protocol, first), _usage(protocol, second)
    assert r1.outcome == r2.outcome == "completed"
    assert (r1.input_tokens, r1.cached_tokens) == (40, 0)
    assert (r2.input_tokens, r2.cached_tokens) == (52, 32)  # the whole prompt, cached part included
    assert [g.cached_tokens for g in records.lines] == [0, 32]
    # the raw usage keys, per the API references
    text = second.decode()
    key = {"chat": '"prompt_tokens_details":{"cached_tokens":32}',
           "responses": '"input_tokens_details":{"cached_tokens":32}',
           "messages": '"input_tokens":4,"cache_creation_input_tokens":16,"cache_read_input_tokens":32'}
    assert key[protocol] in text


async def test_emulator_without_prefix_cache_reports_no_cached_tokens_in_chat_and_messages() -> None:
    app = EmulatorApp(EmulatorConfig.from_mapping({"ttft_ms": 0, "tokens_per_s": 0}))
    for protocol in ("chat", "messages"):
        path, make = BODIES[protocol]
        raw = await _call(app, path, make(_text(40)))
        assert b"cached" not in raw and b"cache_" not in raw
        assert _usage(protocol, raw).cached_tokens is None


async def test_emulator_prefill_delays_the_first_token_by_the_uncached_tokens() -> None:
    # 2,000 tokens at 40,000 tokens/s: 50 ms of prefill; the emulator never sends
    # early, so the ground truth's TTFT is at least that (a lower bound only).
    cfg = EmulatorConfig.from_mapping({"ttft_ms": 0, "tokens_per_s": 0, "keepalive_interval_s": 0,
                                       "prefill_tokens_per_s": 40_000})
    records = _Records()
    app = EmulatorApp(cfg, records)  # type: ignore[arg-type]
    path, make = BODIES["chat"]
    await _call(app, path, make(_text(2000)))
    ttft = records.lines[0].ttft_ns
    assert ttft is not None and ttft >= 50_000_000


def test_record_stream_counts_cached_tokens_and_the_summary_gives_the_hit_ratio() -> None:
    from hopbench.measure._meter import StreamMeter
    from hopbench.measure._rules import measure
    from hopbench.measure._sinks import record_stream
    from hopbench.measure._lines import stream_line
    from hopbench.measure._recorder import Recorder
    from hopbench.driver._results import cache_of, summary_scopes
    from hopbench.protocols import StreamResult

    rec = Recorder(["s"])
    for inp, cached in ((100, 0), (100, 75), (50, None)):  # the last one reported no cache figure
        m = StreamMeter(0, 0)
        m.on_headers(5)
        m.close(10)
        r = measure(m, 10, "completed", "", StreamResult("completed", input_tokens=inp, output_tokens=3,
                                                         cached_tokens=cached),
                    keepalive_budget_ns=12_000_000_000)
        record_stream(rec, "s", r)
        line = stream_line(r, "0-1", "s", 0)
        assert line.get("cached_tokens") == cached
    c = rec.snapshot().scopes["s"].counters
    assert (c["cache.streams"], c["cache.prompt_tokens"], c["cache.cached_tokens"]) == (2, 200, 75)
    assert cache_of(c) == {"streams": 2, "prompt_tokens": 200, "cached_tokens": 75, "hit_ratio": 0.375}
    assert summary_scopes(rec.snapshot())["s"]["cache"]["hit_ratio"] == 0.375
    assert cache_of({}) is None


def test_messages_decoder_reads_cache_counts_in_message_delta_too() -> None:
    raw = (b'event: message_start\ndata: {"type":"message_start","message":{"id":"m","type":"message",'
           b'"role":"assistant","content":[],"model":"m","usage":{"input_tokens":3,"output_tokens":1}}}\n\n'
           b'event: content_block_start\ndata: {"type":"content_block_start","index":0,'
           b'"content_block":{"type":"text","text":""}}\n\n'
           b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
           b'"delta":{"type":"text_delta","text":"hi"}}\n\n'
           b'event: content_block_stop\ndata: {"type":"content_block_stop","index":0}\n\n'
           b'event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":"end_turn"},'
           b'"usage":{"input_tokens":3,"cache_creation_input_tokens":100,"cache_read_input_tokens":900,'
           b'"output_tokens":1}}\n\n'
           b'event: message_stop\ndata: {"type":"message_stop"}\n\n')
    r = _usage("messages", raw)
    assert r.outcome == "completed"
    assert (r.input_tokens, r.cached_tokens, r.output_tokens) == (1003, 900, 1)


@pytest.mark.parametrize("delta_usage", [
    b'{"output_tokens":5}',
    b'{"input_tokens":10,"output_tokens":5}',  # cumulative input, the cache fields left out
    b'{"input_tokens":10,"cache_read_input_tokens":null,"output_tokens":5}',
    b'{"input_tokens":10,"cache_creation_input_tokens":0,"cache_read_input_tokens":90,"output_tokens":5}',
])
def test_messages_decoder_keeps_message_start_cache_counts_when_the_delta_omits_them(delta_usage: bytes) -> None:
    # MessageDeltaUsage's fields are cumulative and each optional (Anthropic API reference): a
    # delta repeating input_tokens (uncached) alone made the prompt 10 with 90 of it cached
    raw = (b'event: message_start\ndata: {"type":"message_start","message":{"id":"m","type":"message",'
           b'"role":"assistant","content":[],"model":"m","usage":{"input_tokens":10,'
           b'"cache_creation_input_tokens":0,"cache_read_input_tokens":90,"output_tokens":1}}}\n\n'
           b'event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":"end_turn"},'
           b'"usage":' + delta_usage + b'}\n\n'
           b'event: message_stop\ndata: {"type":"message_stop"}\n\n')
    r = _usage("messages", raw)
    assert (r.input_tokens, r.cached_tokens, r.output_tokens) == (100, 90, 5)
