"""Throughput of hopbench's SSE scanner against the SSE decoders of the peers.

Role: a benchmark, never a timed test. It builds two realistic bodies in memory
(a Chat Completions stream of ``chat.completion.chunk`` events of about 300
bytes with ASCII and Chinese text and ``: hopbase-keepalive`` comments, and an
Anthropic Messages stream), cuts each into reads, and runs every decoder over
the very same reads in one process, interleaved, best of ``--repeat`` runs:

- ``hopbench``: ``SSEScanner.feed(read)`` per read, then ``close()``.
- ``openai``: ``openai._streaming.SSEDecoder().iter_bytes(iter(reads))``, the
  decoder ``openai.Stream`` uses (its CR/LF line splitter included).
- ``anthropic``: ``anthropic._streaming.SSEDecoder().iter_bytes(iter(reads))``.
- ``httpx-sse``: what ``EventSource.iter_sse()`` runs on ``Response.iter_text()``:
  httpx's ``TextDecoder`` (incremental UTF-8, errors="replace") per read, then
  ``httpx_sse._decoders.SSELineDecoder.decode`` (the library's own LF/CR/CRLF
  line splitter, a copy of httpx's ``LineDecoder``), ``line.rstrip("\\n")``,
  ``SSEDecoder.decode(line)``. No HTTP, no httpx transport.
- ``sseclient-py``: ``sseclient.SSEClient(reads).events()`` (it iterates the
  event source as chunks); its logger is left at its default (disabled) level.
- ``floor``: a bare loop that only joins the leftover to each read and counts
  ``bytes.find(b"\\n\\n")`` hits: what splitting events costs with no parsing.

Read sizes: "realistic" draws each read uniformly from 1-16 KiB; "worst" draws
1-64 bytes (run on a prefix of each body, ``--worst-mb``, to bound the time).
Seeds are fixed, so every run sees the same bytes and the same cuts.

Run from the repository root::

    .venv/bin/python benchmarks/bench_sse.py            # ~20 MB bodies, 3 repeats
    .venv/bin/python benchmarks/bench_sse.py --mb 4 --repeat 1   # quick look

Prints MB/s (10**6 bytes of body per second) and events/s per decoder, the
items each one produced (a mismatch is printed, not hidden), and the ratios:
hopbench / fastest peer and hopbench / floor.
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import sseclient
from anthropic._streaming import SSEDecoder as AnthropicSSEDecoder
from httpx._decoders import TextDecoder
from httpx_sse._decoders import SSEDecoder as HttpxSSEDecoder
from httpx_sse._decoders import SSELineDecoder
from openai._streaming import SSEDecoder as OpenAISSEDecoder

from hopbench.sse import SSEEvent, SSEScanner

KEEPALIVE = b": hopbase-keepalive\n\n"
_ASCII_WORDS = [" the", " stream", " token", " of", " model", " latency", " and", " a", ",", ".", " gateway", "\n"]
_CHINESE_WORDS = ["你好", "串流", "輸出", "模型", "延遲", "網關", "。", "，", "我們", "測試", "的", "是"]


def _text(rng: random.Random) -> str:
    words = _CHINESE_WORDS if rng.random() < 0.4 else _ASCII_WORDS
    return "".join(rng.choice(words) for _ in range(rng.randint(1, 8)))


def chat_corpus(target_bytes: int, seed: int = 1) -> tuple[bytes, int]:
    """A Chat Completions body of at least ``target_bytes``.

    Streams of 50-400 chunks, each ``data: {chat.completion.chunk}`` of about
    300 bytes, a role chunk first, a finish chunk, a usage chunk and
    ``data: [DONE]`` last; a keepalive comment about every 200 events.

    Returns:
        (body, number of events in it).
    """
    rng = random.Random(seed)
    parts: list[bytes] = []
    size = 0
    events = 0
    stream_no = 0
    while size < target_bytes:
        stream_no += 1
        head = {
            "id": f"chatcmpl-{stream_no:08d}A7x9Qm2LkP4vT8wZ",
            "object": "chat.completion.chunk",
            "created": 1735689600 + stream_no,
            "model": "gpt-4o-mini-2024-07-18",
            "system_fingerprint": "fp_0ba0d124f1",
        }
        deltas: list[dict[str, object]] = [{"role": "assistant", "content": ""}]
        deltas += [{"content": _text(rng)} for _ in range(rng.randint(50, 400))]
        for i, delta in enumerate(deltas):
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": None}
            parts.append(_data_line({**head, "choices": [choice]}))
            if rng.random() < 1 / 200:
                parts.append(KEEPALIVE)
            events += 1
            del i
        parts.append(_data_line({**head, "choices": [{"index": 0, "delta": {}, "logprobs": None, "finish_reason": "stop"}]}))
        usage = {"prompt_tokens": 14, "completion_tokens": len(deltas), "total_tokens": 14 + len(deltas)}
        parts.append(_data_line({**head, "choices": [], "usage": usage}))
        parts.append(b"data: [DONE]\n\n")
        events += 3
        size = sum(map(len, parts))
    return b"".join(parts), events


def _data_line(obj: object) -> bytes:
    return b"data: " + json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode() + b"\n\n"


def _event(name: str, obj: object) -> bytes:
    return f"event: {name}\n".encode() + _data_line(obj)


def anthropic_corpus(target_bytes: int, seed: int = 2) -> tuple[bytes, int]:
    """An Anthropic Messages body of at least ``target_bytes``.

    Messages of message_start, content_block_start, 50-400 text_delta
    content_block_delta events (a ``ping`` event and a keepalive now and
    then), content_block_stop, message_delta, message_stop.

    Returns:
        (body, number of events in it).
    """
    rng = random.Random(seed)
    parts: list[bytes] = []
    size = 0
    events = 0
    msg_no = 0
    while size < target_bytes:
        msg_no += 1
        parts.append(
            _event(
                "message_start",
                {
                    "type": "message_start",
                    "message": {
                        "id": f"msg_01{msg_no:08d}XFDUDzTswbSQz6x",
                        "type": "message",
                        "role": "assistant",
                        "model": "claude-sonnet-4-20250514",
                        "content": [],
                        "stop_reason": None,
                        "stop_sequence": None,
                        "usage": {"input_tokens": 25, "output_tokens": 1},
                    },
                },
            )
        )
        parts.append(
            _event("content_block_start", {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}})
        )
        parts.append(_event("ping", {"type": "ping"}))
        n = rng.randint(50, 400)
        for _ in range(n):
            delta = {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": _text(rng)}}
            parts.append(_event("content_block_delta", delta))
            if rng.random() < 1 / 200:
                parts.append(KEEPALIVE)
        parts.append(_event("content_block_stop", {"type": "content_block_stop", "index": 0}))
        parts.append(
            _event(
                "message_delta",
                {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None}, "usage": {"output_tokens": n}},
            )
        )
        parts.append(_event("message_stop", {"type": "message_stop"}))
        events += n + 6
        size = sum(map(len, parts))
    return b"".join(parts), events


def cut(body: bytes, lo: int, hi: int, seed: int) -> list[bytes]:
    """Split ``body`` into reads of uniformly random sizes in [lo, hi] bytes."""
    rng = random.Random(seed)
    reads: list[bytes] = []
    pos = 0
    while pos < len(body):
        step = rng.randint(lo, hi)
        reads.append(body[pos : pos + step])
        pos += step
    return reads


# --------------------------------------------------------------------------- the contenders
# Each takes the list of reads and returns the number of events it produced.


def run_hopbench(reads: Sequence[bytes]) -> int:
    scanner = SSEScanner()
    feed = scanner.feed
    n = 0
    for read in reads:
        for item in feed(read):
            if type(item) is SSEEvent:
                n += 1
    scanner.close()
    return n


def run_openai(reads: Sequence[bytes]) -> int:
    n = 0
    for _ in OpenAISSEDecoder().iter_bytes(iter(reads)):
        n += 1
    return n


def run_anthropic(reads: Sequence[bytes]) -> int:
    n = 0
    for _ in AnthropicSSEDecoder().iter_bytes(iter(reads)):
        n += 1
    return n


def run_httpx_sse(reads: Sequence[bytes]) -> int:
    text_decoder = TextDecoder("utf-8")
    line_decoder = SSELineDecoder()
    decoder = HttpxSSEDecoder()
    n = 0

    def lines() -> Iterable[str]:
        for read in reads:
            text = text_decoder.decode(read)
            if text:  # httpx's iter_text never yields "" (TextChunker drops it)
                yield from line_decoder.decode(text)
        tail = text_decoder.flush()
        if tail:
            yield from line_decoder.decode(tail)
        yield from line_decoder.flush()

    for line in lines():
        if decoder.decode(line.rstrip("\n")) is not None:
            n += 1
    return n


def run_sseclient(reads: Sequence[bytes]) -> int:
    n = 0
    for _ in sseclient.SSEClient(reads).events():
        n += 1
    return n


def run_floor(reads: Sequence[bytes]) -> int:
    carry = b""
    n = 0
    for read in reads:
        buf = carry + read if carry else read
        pos = 0
        find = buf.find
        while True:
            end = find(b"\n\n", pos)
            if end < 0:
                break
            n += 1
            pos = end + 2
        carry = buf[pos:]
    return n


CONTENDERS: dict[str, Callable[[Sequence[bytes]], int]] = {
    "hopbench": run_hopbench,
    "openai": run_openai,
    "anthropic": run_anthropic,
    "httpx-sse": run_httpx_sse,
    "sseclient-py": run_sseclient,
    "floor": run_floor,
}
PEERS = ("openai", "anthropic", "httpx-sse", "sseclient-py")


@dataclass(frozen=True, slots=True)
class Result:
    """Best run of one contender on one scenario."""

    name: str
    best_s: float
    events: int
    mb_per_s: float
    events_per_s: float


def measure(reads: Sequence[bytes], body_bytes: int, repeat: int) -> dict[str, Result]:
    """Run every contender ``repeat`` times, interleaved; keep each one's best."""
    best: dict[str, float] = {name: float("inf") for name in CONTENDERS}
    counts: dict[str, int] = {}
    for _ in range(repeat):
        for name, fn in CONTENDERS.items():
            gc.collect()
            t0 = time.perf_counter()
            counts[name] = fn(reads)
            dt = time.perf_counter() - t0
            best[name] = min(best[name], dt)
    return {
        name: Result(name, best[name], counts[name], body_bytes / best[name] / 1e6, counts[name] / best[name])
        for name in CONTENDERS
    }


def report(title: str, results: dict[str, Result], expected_events: int) -> None:
    print(f"\n## {title}")
    print(f"{'decoder':<14}{'MB/s':>10}{'events/s':>14}{'events':>10}  note")
    for r in results.values():
        note = ""
        if r.name == "floor":
            note = "counts blank-line blocks (keepalives too)"
        elif r.events != expected_events:
            note = f"expected {expected_events} events"
        print(f"{r.name:<14}{r.mb_per_s:>10.1f}{r.events_per_s:>14,.0f}{r.events:>10}  {note}")
    ours = results["hopbench"]
    fastest = max((results[p] for p in PEERS), key=lambda r: r.mb_per_s)
    print(f"hopbench / fastest peer ({fastest.name}): {ours.mb_per_s / fastest.mb_per_s:.2f}x")
    print(f"hopbench / floor: {ours.mb_per_s / results['floor'].mb_per_s:.0%}")
    slower = [p for p in PEERS if results[p].mb_per_s >= ours.mb_per_s]
    print("faster than every peer: " + ("yes" if not slower else f"NO (not faster than {', '.join(slower)})"))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--mb", type=float, default=20.0, help="size of each body in 10**6 bytes (default 20)")
    parser.add_argument("--worst-mb", type=float, default=2.0, help="prefix run with 1-64-byte reads (default 2)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per decoder; the best counts (default 3)")
    args = parser.parse_args(argv)

    print(f"python {sys.version.split()[0]}; best of {args.repeat} runs; MB = 10**6 bytes")
    for label, make in (("chat.completion.chunk", chat_corpus), ("Anthropic Messages", anthropic_corpus)):
        body, events = make(int(args.mb * 1e6))
        print(f"\n# {label}: {len(body) / 1e6:.1f} MB, {events} events, {len(body) / events:.0f} bytes/event")
        reads = cut(body, 1024, 16 * 1024, seed=3)
        report(f"{label}, reads of 1-16 KiB ({len(reads)} reads)", measure(reads, len(body), args.repeat), events)
        # Worst case: a prefix cut at an event boundary, in reads of 1-64 bytes.
        limit = body.rfind(b"\n\n", 0, int(args.worst_mb * 1e6)) + 2
        prefix = body[:limit]
        prefix_events = run_hopbench([prefix])
        tiny = cut(prefix, 1, 64, seed=4)
        report(
            f"{label}, reads of 1-64 bytes ({len(prefix) / 1e6:.1f} MB, {len(tiny)} reads)",
            measure(tiny, len(prefix), args.repeat),
            prefix_events,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
