"""Decoder cost per event, per protocol and per JSON parser (not a timed test).

Role: measure what ``Decoder.feed`` costs for one event of each protocol's
common shape (a text delta as the official APIs send it, 2025: chat with
``system_fingerprint`` and ``obfuscation``, Responses with ``sequence_number``,
``logprobs`` and ``obfuscation``, Messages ``content_block_delta``), the SSE
scanner excluded (events are scanned once, up front). Each stream is an
opening, ``--events`` text deltas and the protocol's closing events, decoded
by a fresh decoder (``keep_text=False``, as the runner does).

Parsers: ``stdlib`` (``json.loads`` of the decoded text), ``orjson`` and
``msgspec`` (``msgspec.json.decode``), each swapped into
``hopbench.protocols._base`` for its rows; a parser that is not installed is
skipped. Rows are interleaved (every protocol x parser once per round, best of
``--repeat`` rounds) so a neighbour's load hits all of them alike; the
machine's load average is printed with the figures.

Run:  .venv/bin/python benchmarks/bench_decode.py [--events 200] [--repeat 7] [--src DIR]
      .venv/bin/python benchmarks/bench_decode.py --against edd96e9 [--repeat 7]

``--src DIR`` measures another checkout's package (e.g. ``git archive <commit>
hopbench | tar -x -C DIR``).

``--against REV`` is the before/after in one run: REV (any git revision of
this repository) is checked out into a temporary ``git worktree``, and each
round runs one child process per side (REV's package, then this checkout's,
the order alternating from round to round), each measuring every protocol x
parser once after a warm-up stream; the best of ``--repeat`` rounds counts
per side. It prints before, after and the change per protocol x parser, with
the load average before and after; the worktree is removed at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# --src DIR: measure the hopbench package of another checkout (e.g. the code before a change)
_SRC = sys.argv[sys.argv.index("--src") + 1] if "--src" in sys.argv else str(Path(__file__).resolve().parents[1])
sys.path.insert(0, _SRC)

from hopbench.protocols import _base, new_decoder  # noqa: E402
from hopbench.sse import SSEScanner  # noqa: E402

TOKEN = "hello \u4f60"


def _data(obj: Any, event: str | None = None) -> bytes:
    head = f"event: {event}\n".encode() if event else b""
    return head + b"data: " + json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode() + b"\n\n"


def chat_body(n: int) -> bytes:
    """A chat stream as api.openai.com sends it: role chunk, n text chunks, finish, usage, [DONE]."""
    base = {"id": "chatcmpl-C1x2y3z4", "object": "chat.completion.chunk", "created": 1760000000,
            "model": "gpt-4.1-mini-2025-04-14", "service_tier": "default",
            "system_fingerprint": "fp_6f2eabb9a5"}
    out = [_data({**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": "",
                                                              "refusal": None},
                                         "logprobs": None, "finish_reason": None}],
                  "usage": None, "obfuscation": "Pq"})]
    for _ in range(n):
        out.append(_data({**base, "choices": [{"index": 0, "delta": {"content": TOKEN}, "logprobs": None,
                                               "finish_reason": None}],
                          "usage": None, "obfuscation": "x8Gd"}))
    out.append(_data({**base, "choices": [{"index": 0, "delta": {}, "logprobs": None, "finish_reason": "stop"}],
                      "usage": None, "obfuscation": "k"}))
    out.append(_data({**base, "choices": [], "usage": {
        "prompt_tokens": 12, "completion_tokens": n, "total_tokens": n + 12,
        "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0,
                                      "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}},
        "obfuscation": "aQ"}))
    out.append(b"data: [DONE]\n\n")
    return b"".join(out)


def responses_body(n: int) -> bytes:
    """A Responses stream: created, item added, part added, n text deltas, done events, completed."""
    seq = iter(range(10**9))
    resp = {"id": "resp_68a1b2c3", "object": "response", "created_at": 1760000000, "status": "in_progress",
            "model": "gpt-4.1-mini-2025-04-14", "output": [], "usage": None}
    ev = [_data({"type": "response.created", "sequence_number": next(seq), "response": resp}, "response.created"),
          _data({"type": "response.output_item.added", "sequence_number": next(seq), "output_index": 0,
                 "item": {"id": "msg_68a1", "type": "message", "status": "in_progress", "content": [],
                          "role": "assistant"}}, "response.output_item.added"),
          _data({"type": "response.content_part.added", "sequence_number": next(seq), "item_id": "msg_68a1",
                 "output_index": 0, "content_index": 0,
                 "part": {"type": "output_text", "annotations": [], "logprobs": [], "text": ""}},
                "response.content_part.added")]
    for _ in range(n):
        ev.append(_data({"type": "response.output_text.delta", "sequence_number": next(seq),
                         "item_id": "msg_68a1", "output_index": 0, "content_index": 0, "delta": TOKEN,
                         "logprobs": [], "obfuscation": "bXk2Q1"}, "response.output_text.delta"))
    ev.append(_data({"type": "response.output_text.done", "sequence_number": next(seq), "item_id": "msg_68a1",
                     "output_index": 0, "content_index": 0, "text": TOKEN * n, "logprobs": []},
                    "response.output_text.done"))
    done = {**resp, "status": "completed", "usage": {
        "input_tokens": 12, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": n,
        "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": n + 12}}
    ev.append(_data({"type": "response.completed", "sequence_number": next(seq), "response": done},
                    "response.completed"))
    return b"".join(ev)


def messages_body(n: int) -> bytes:
    """An Anthropic Messages stream: message_start, block start, ping, n text deltas, stop events."""
    ev = [_data({"type": "message_start", "message": {
        "id": "msg_01XFDUDYJgAACzvnptvVoYEL", "type": "message", "role": "assistant", "content": [],
        "model": "claude-sonnet-4-5-20250929", "stop_reason": None, "stop_sequence": None,
        "usage": {"input_tokens": 12, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0,
                  "output_tokens": 1, "service_tier": "standard"}}}, "message_start"),
          _data({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
                "content_block_start"),
          _data({"type": "ping"}, "ping")]
    for _ in range(n):
        ev.append(_data({"type": "content_block_delta", "index": 0,
                         "delta": {"type": "text_delta", "text": TOKEN}}, "content_block_delta"))
    ev.append(_data({"type": "content_block_stop", "index": 0}, "content_block_stop"))
    ev.append(_data({"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                     "usage": {"output_tokens": n}}, "message_delta"))
    ev.append(_data({"type": "message_stop"}, "message_stop"))
    return b"".join(ev)


BODIES = {"chat": chat_body, "responses": responses_body, "messages": messages_body}


def parsers() -> dict[str, tuple[Any, Any]]:
    """name -> (fast loads or None, its error class); the installed ones only."""
    out: dict[str, tuple[Any, Any]] = {"stdlib": (None, ValueError)}
    try:
        import orjson

        out["orjson"] = (orjson.loads, orjson.JSONDecodeError)
    except ImportError:
        pass
    try:
        import msgspec

        out["msgspec"] = (msgspec.json.decode, msgspec.DecodeError)
    except ImportError:
        pass
    return out


def one(protocol: str, items: list[Any], streams: int) -> float:
    """ns of CPU per event over ``streams`` fresh decoders fed ``items``."""
    cpu0 = time.process_time_ns()
    for _ in range(streams):
        dec = new_decoder(protocol, keep_text=False)
        feed = dec.feed
        for item in items:
            feed(item)
        result = dec.finish()
    cpu = time.process_time_ns() - cpu0
    assert result.outcome == "completed", (protocol, result)
    return cpu / (streams * len(items))


def measure(names: list[str], events: int, streams: int, repeat: int) -> dict[tuple[str, str], float]:
    """(protocol, parser) -> the best ns of CPU per event over ``repeat`` interleaved rounds."""
    avail = parsers()
    items = {proto: SSEScanner().feed(body(events)) for proto, body in BODIES.items()}
    saved = (_base._fast_loads, _base._FastError)
    best: dict[tuple[str, str], float] = {}
    try:
        for proto, its in items.items():  # warm-up: one stream each, not counted
            for name in names:
                _base._fast_loads, _base._FastError = avail[name]
                one(proto, its, 1)
        for _ in range(repeat):
            for proto, its in items.items():
                for name in names:
                    _base._fast_loads, _base._FastError = avail[name]
                    ns = one(proto, its, streams)
                    best[proto, name] = min(best.get((proto, name), ns), ns)
    finally:
        _base._fast_loads, _base._FastError = saved
    return best


def against(rev: str, names: list[str], args: argparse.Namespace) -> None:
    """The before/after of ``--against REV``, interleaved by child process (see the module doc)."""
    repo = Path(__file__).resolve().parents[1]
    here = str(repo)
    tmp = tempfile.mkdtemp(prefix="hopbench-before-")
    before_dir = os.path.join(tmp, "src")
    subprocess.run(["git", "-C", here, "worktree", "add", "--detach", "--quiet", before_dir, rev], check=True)
    sides = {"before": before_dir, "after": here}
    best: dict[str, dict[tuple[str, str], float]] = {"before": {}, "after": {}}
    load_before = os.getloadavg()
    try:
        for r in range(args.repeat):
            order = ["before", "after"] if r % 2 == 0 else ["after", "before"]
            for side in order:
                cmd = [sys.executable, __file__, "--src", sides[side], "--child", "--repeat", "1",
                       "--events", str(args.events), "--streams", str(args.streams),
                       "--parsers", ",".join(names)]
                out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
                for key, ns in json.loads(out).items():
                    proto, name = key.split("/")
                    cur = best[side].get((proto, name), ns)
                    best[side][proto, name] = min(cur, ns)
    finally:
        subprocess.run(["git", "-C", here, "worktree", "remove", "--force", before_dir], check=False)
        subprocess.run(["rm", "-rf", tmp], check=False)
    load_after = os.getloadavg()
    print(f"before = {rev} (git worktree), after = {here}; best of {args.repeat} interleaved rounds, "
          f"{args.streams} streams x ({args.events} text deltas + opening and closing events)")
    print(f"load average before: {load_before}; after: {load_after}")
    print(f"{'protocol':10} {'parser':8} {'before ns':>10} {'after ns':>10} {'change':>8}   (ns of CPU per event)")
    for proto in BODIES:
        for name in names:
            b, a = best["before"][proto, name], best["after"][proto, name]
            print(f"{proto:10} {name:8} {b:10.0f} {a:10.0f} {(a / b - 1) * 100:+7.1f}%")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--events", type=int, default=200, help="text deltas per stream (default 200)")
    p.add_argument("--streams", type=int, default=50, help="streams per measurement (default 50)")
    p.add_argument("--repeat", type=int, default=7, help="interleaved rounds; the best counts (default 7)")
    p.add_argument("--parsers", default="", help="comma-separated subset of stdlib,orjson,msgspec")
    p.add_argument("--src", default="", help="the checkout whose hopbench package to measure (default: this one)")
    p.add_argument("--against", default="", metavar="REV",
                   help="before/after in one run: REV's decoders (a temporary git worktree) against this checkout's")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)  # one side of --against: JSON out
    args = p.parse_args()
    avail = parsers()
    names = [x for x in args.parsers.split(",") if x] or list(avail)
    if args.against:
        against(args.against, names, args)
        return
    if args.child:
        best = measure(names, args.events, args.streams, args.repeat)
        print(json.dumps({f"{proto}/{name}": ns for (proto, name), ns in best.items()}))
        return
    print(f"load average before: {os.getloadavg()}")
    best = measure(names, args.events, args.streams, args.repeat)
    print(f"load average after:  {os.getloadavg()}; hopbench from {_base.__file__}")
    print(f"{'protocol':10} " + " ".join(f"{n:>14}" for n in names) + "   (ns of CPU per event, best of "
          f"{args.repeat})")
    for proto in BODIES:
        base = best[proto, names[0]]
        cells = [f"{best[proto, n]:8.0f} ({best[proto, n] / base:4.2f})" for n in names]
        print(f"{proto:10} " + " ".join(f"{c:>14}" for c in cells))


if __name__ == "__main__":
    main()
