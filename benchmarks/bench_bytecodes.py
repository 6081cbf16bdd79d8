"""Python bytecodes per event, by function, before and after a change (not a timed test).

Why: ``bench_instructions.py`` says how many more instructions an event costs, not where. A
count of the bytecodes each hopbench function executes (``sys.settrace`` with
``frame.f_trace_opcodes``) does not depend on the machine at all for an unpaced run, and names
the functions that grew. Slow (the tracer runs on every bytecode) but a few seconds a side.

Method: ``bench_run.py``'s responder serves ``--streams`` unpaced streams (the whole body in one
write; 202 events a stream); one process per side runs a ``LoadRunner`` of 4 streams at a time
with the side's package first on ``sys.path`` and counts the bytecodes of every frame whose
file is under ``hopbench/``. A function's module moved between the sides is matched by its
name in ``engine/_runner.py`` and ``engine/_stream.py`` alike.

Run from the repository root (127.0.0.1 only)::

    .venv/bin/python benchmarks/bench_bytecodes.py --against f0b10a5
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_run import EVENTS_PER_STREAM, _engine, _profile_text, _worktree, responder  # noqa: E402


def child(src: str, url: str, streams: int, out: str) -> None:
    """One traced run with ``src``'s package; writes ``{"file:function": bytecodes}`` to ``out``."""
    sys.path.insert(0, src)  # after bench_run's own insert: the side being measured comes first
    import trio

    parse_profile, LoadRunner, Recorder, ALL = _engine()
    profile = parse_profile(_profile_text(url, "/s/0/0/v1/chat/completions", streams, 4, 0.0, "hopbench"))
    rec, warm = Recorder(["chat"]), Recorder(["chat"])
    runner = LoadRunner(profile, url, rec, warm)
    counts: collections.Counter[str] = collections.Counter()

    def tracer(frame: Any, event: str, arg: Any) -> Any:
        name = frame.f_code.co_filename
        if "/hopbench/" not in name:
            return None
        frame.f_trace_opcodes = True
        key = name.split("/hopbench/")[-1].replace("engine/_runner.py", "engine/_stream.py") + ":" + \
            frame.f_code.co_name

        def local(frame: Any, event: str, arg: Any) -> Any:
            if event == "opcode":
                counts[key] += 1
            return local
        return local

    sys.settrace(tracer)
    trio.run(runner.run)
    sys.settrace(None)
    done = rec.snapshot().counter(ALL, "completed")
    if done != streams:
        raise SystemExit(f"{src}: {streams} streams sent, {done} completed")
    Path(out).write_text(json.dumps(counts), encoding="utf-8")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--against", metavar="REV", default="", help="the revision to compare with (a worktree)")
    p.add_argument("--after", metavar="REV", default="", help="measure REV instead of this checkout")
    p.add_argument("--streams", type=int, default=16, help="unpaced streams a side (default 16)")
    p.add_argument("--top", type=int, default=12, help="functions shown (default 12)")
    p.add_argument("--child", nargs=3, metavar=("SRC", "URL", "OUT"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        child(args.child[0], args.child[1], args.streams, args.child[2])
        return
    if not args.against:
        p.error("--against REV is required")
    with responder() as base, contextlib.ExitStack() as stack:
        work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench_bytecodes-")))
        sides = {args.against: _worktree(stack, args.against),
                 (args.after or "this tree"): _worktree(stack, args.after) if args.after else str(HERE.parent)}
        counts = {}
        for i, (name, src) in enumerate(sides.items()):
            out = work / f"{i}.json"
            subprocess.run([sys.executable, str(Path(__file__).resolve()), "--streams", str(args.streams),
                            "--child", src, base, str(out)], check=True)
            counts[name] = json.loads(out.read_text(encoding="utf-8"))
    events = args.streams * EVENTS_PER_STREAM
    (na, a), (nb, b) = counts.items()
    ta, tb = sum(a.values()), sum(b.values())
    print(f"bytecodes per event: {na} {ta / events:,.0f}, {nb} {tb / events:,.0f} ({tb / ta - 1:+.1%}); "
          f"{args.streams} unpaced streams of {EVENTS_PER_STREAM} events")
    rows = sorted(((b.get(k, 0) - a.get(k, 0)) / events, k) for k in set(a) | set(b))
    for d, k in [r for r in rows[::-1] if r[0] > 0][:args.top] + [r for r in rows if r[0] < 0][:args.top // 2]:
        print(f"  {d:+8.1f}  {k:<60} {a.get(k, 0) / events:8.1f} -> {b.get(k, 0) / events:8.1f}")


if __name__ == "__main__":
    main()
