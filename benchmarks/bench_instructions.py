"""The hot path's cost in instructions per event, before and after a change (not a timed test).

Why: CPU time per event (``bench_run.py``) moves by 5-20 % from run to run on a shared
2-core machine, more than the 3 % a hot-path change may cost (issue 36). The number of
instructions the client executes for the same streams hardly depends on what the
neighbours do, so this counts them: callgrind (valgrind) runs ``bench_run.py``'s
hopbench child (one ``LoadRunner``, the whole engine on hopbench's own transport:
scanner, chat decoder, meter, recorder, the interval ticker and lag probe) against
``bench_run.py``'s pre-rendered responder (202 events a stream).

Method: a child imports the side's engine, parses the profile and builds its
``LoadRunner``, says so and spins (1 ms sleeps) until told to go; the parent zeroes
callgrind's counters then (``callgrind_control -z``), so the total at the child's exit
is the run's alone: ``trio.run(runner.run)`` and the interpreter's exit, without its
start, the imports and the set-up. Instructions per event = that total / (N x 202).
``PYTHONHASHSEED=0`` in every child, and one unmeasured child per side first (its
bytecode caches). Sides alternate (REV first in even rounds); the spread of a side over
``--repeat`` rounds is this method's own noise, printed beside the change.

Modes: ``paced`` (server TTFT 50 ms, 20 ms between events: one event per read, as LLM
streams arrive; a side keeps up under valgrind at the default 4 streams) and
``unpaced`` (the whole body in one write: many events per read). Under valgrind a
child runs 30-100x slower than natively; timers (the interval ticker, the lag probe)
count per second of the run's wall time, which the responder sets in paced mode.

Run from the repository root (valgrind on PATH; 127.0.0.1 only; a few minutes a round)::

    .venv/bin/python benchmarks/bench_instructions.py --against f0b10a5
    .venv/bin/python benchmarks/bench_instructions.py --against f0b10a5 --after HEAD --modes unpaced
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_run import (EVENTS_PER_STREAM, PACED_GAP_MS, PACED_RAMP_S,  # noqa: E402
                       PACED_TTFT_MS, _engine, _profile_text, _stats, _worktree, responder)

CHILD_TIMEOUT_S = 900.0
_TOTALS = re.compile(rb"^(?:summary|totals):\s*(\d+)", re.M)


def _path(paced: bool) -> str:
    gap, ttft = (PACED_GAP_MS, PACED_TTFT_MS) if paced else (0, 0)
    return f"/s/{gap}/{ttft}/v1/chat/completions"


def child(url: str, path: str, requests: int, concurrency: int, ramp_s: float) -> None:
    """One measured run of the engine on sys.path (see the module docstring): set up,
    print ``READY``, spin until a line on stdin, run, print the figures as JSON."""
    import selectors

    import trio

    parse_profile, LoadRunner, Recorder, ALL = _engine()
    profile = parse_profile(_profile_text(url, path, requests, concurrency, ramp_s, "hopbench"))
    rec, warm = Recorder(["chat"]), Recorder(["chat"])
    runner = LoadRunner(profile, url, rec, warm)
    print("READY", flush=True)
    sel = selectors.DefaultSelector()
    sel.register(sys.stdin, selectors.EVENT_READ)
    while not sel.select(timeout=0):  # running code, so callgrind sees its command
        time.sleep(0.001)
    sys.stdin.readline()
    trio.run(runner.run)
    snap = rec.snapshot()
    completed = snap.counter(ALL, "completed")
    print(json.dumps({"streams": completed, "broken": snap.counter(ALL, "started") - completed}), flush=True)


def count(base: str, src: str, paced: bool, concurrency: int, requests: int, work: Path,
          keep: Path | None = None) -> int:
    """Instructions (callgrind's Ir, every thread) of one hopbench run of ``requests``
    streams at ``concurrency`` against the responder at ``base``, with ``src``'s package:
    from the run's start to the child's exit (module docstring).

    Raises:
        SystemExit: the child failed, or completed fewer streams than it sent.
    """
    out = work / f"cg.{requests}.{abs(hash(src))}.out"
    cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
           sys.executable, str(Path(__file__).resolve()), "--child", "--url", base,
           "--path", _path(paced), "--requests", str(requests), "--concurrency", str(concurrency),
           "--ramp-s", str(PACED_RAMP_S if paced else 0.0), "--src", src]
    _stats(base)  # reset the responder's figures
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, "PYTHONHASHSEED": "0"})
    try:
        assert proc.stdout is not None and proc.stdin is not None
        if proc.stdout.readline().strip() != "READY":
            raise SystemExit(f"child failed before its run:\n{proc.communicate(timeout=60)[1][-3000:]}")
        subprocess.run(["callgrind_control", "-z", str(proc.pid)], check=True, capture_output=True, timeout=120)
        stdout, stderr = proc.communicate("go\n", timeout=CHILD_TIMEOUT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    if proc.returncode != 0:
        raise SystemExit(f"child failed ({proc.returncode}):\n{stderr[-3000:]}")
    res: dict[str, Any] = json.loads(stdout.strip().splitlines()[-1])
    if res["streams"] != requests or res["broken"]:
        raise SystemExit(f"{src}: {requests} streams sent, {res['streams']} complete, {res['broken']} broken")
    m = _TOTALS.search(out.read_bytes())
    if m is None:
        raise SystemExit(f"no instruction total in callgrind's output {out}")
    if keep is not None:  # for callgrind_annotate (which functions grew)
        keep.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(out), str(keep))
    else:
        out.unlink()
    return int(m.group(1))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--against", metavar="REV", default="",
                   help="the revision to compare this checkout with (a temporary git worktree)")
    p.add_argument("--after", metavar="REV", default="",
                   help="measure REV (a temporary git worktree too) instead of this checkout: both sides "
                        "then live alike (a self-test, --against HEAD, read 1.6 %% apart across the two places)")
    p.add_argument("--modes", default="paced,unpaced", help="comma-separated subset of paced,unpaced")
    p.add_argument("--concurrency", type=int, default=4, help="streams at once (default 4)")
    p.add_argument("--streams", type=int, default=0,
                   help="N, streams a run (default: twice the concurrency paced, 16 unpaced)")
    p.add_argument("--repeat", type=int, default=3, help="rounds, sides alternating (default 3)")
    p.add_argument("--keep", type=Path, default=None, metavar="DIR",
                   help="keep each measured run's callgrind output here (<mode>-<side>-<round>.out), to "
                        "read with callgrind_annotate")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--url", help=argparse.SUPPRESS)
    p.add_argument("--path", help=argparse.SUPPRESS)
    p.add_argument("--requests", type=int, help=argparse.SUPPRESS)
    p.add_argument("--ramp-s", type=float, default=0.0, help=argparse.SUPPRESS)
    p.add_argument("--src", help=argparse.SUPPRESS)
    if "--child" in sys.argv:
        args = p.parse_known_args()[0]
        sys.path.insert(0, args.src)  # before any hopbench import: the side being measured
        child(args.url, args.path, args.requests, args.concurrency, args.ramp_s)
        return
    args = p.parse_args()
    if not args.against:
        p.error("--against REV is required")
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        raise SystemExit("valgrind is not on PATH (apt-get install valgrind)")
    with responder() as base:
        with contextlib.ExitStack() as stack:
            before = _worktree(stack, args.against)
            work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench_instr-")))
            after = _worktree(stack, args.after) if args.after else str(HERE.parent)
            sides = {args.against: before, (args.after or "this tree"): after}
            print(f"instructions per event (callgrind Ir, client process); {EVENTS_PER_STREAM} events a stream; "
                  f"load {os.getloadavg()[0]:.1f}", flush=True)
            for mode in args.modes.split(","):
                paced = mode == "paced"
                n = args.streams or (2 * args.concurrency if paced else 16)
                per: dict[str, list[float]] = {k: [] for k in sides}
                for name in sides:  # bytecode caches, unmeasured
                    count(base, sides[name], paced, args.concurrency, args.concurrency, work)
                for r in range(args.repeat):
                    order = list(sides) if r % 2 == 0 else list(sides)[::-1]
                    for name in order:
                        kept = None if args.keep is None else \
                            args.keep / f"{mode}-{name.replace('/', '_').replace(' ', '_')}-{r + 1}.out"
                        ir = count(base, sides[name], paced, args.concurrency, n, work, kept)
                        ipe = ir / (n * EVENTS_PER_STREAM)
                        per[name].append(ipe)
                        print(f"  {mode} c={args.concurrency} round {r + 1} {name}: Ir {ir:,} over {n} streams "
                              f"-> {ipe:,.0f} per event", flush=True)
                b, a = (statistics.median(per[k]) for k in sides)
                spread = max(max(v) / min(v) - 1 for v in per.values() if min(v) > 0)
                print(f"{mode:8} c={args.concurrency}: {args.against} {b:,.0f}, {args.after or 'this tree'} {a:,.0f} "
                      f"instructions per event (medians of {args.repeat}): change {a / b - 1:+.1%}; "
                      f"largest spread within a side {spread:.1%}; load {os.getloadavg()[0]:.1f}", flush=True)


if __name__ == "__main__":
    main()
