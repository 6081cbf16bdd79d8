"""How long a trace replay's profile takes to load, and its peak memory, against the trace's length.

Writes a synthetic Mooncake-style JSONL trace of ``--lines`` lines in a
temporary folder (``timestamp`` in ms, ``input_length``, ``output_length``,
``hash_ids``: prompts of 1 to 16,384 tokens, mean ~4,100, so ~8.5 hash ids a
line, whose leading 1-4 blocks come from one of 2,000 shared prefixes and the
rest are ids unique to the line; every 10th line names a ``scenario``;
fixed seed) and a profile replaying it (``load.mode = "trace"``), then, in a
fresh process per measurement:

- ``load s``: ``load_profile`` (reading and checking the trace, the window,
  each line's scenario: ``hopbench.config._trace_spec.parse_trace``), wall time; ``cpu s``:
  the same in CPU time of the process (less sensitive to other processes on a
  shared machine, though not immune: hyper-threads and caches are shared);
- ``ready s``: then what the runner does before its first request and for its
  first 1,000 (``TraceBodies``, ``scheduled_between`` for the spare
  connections, the first 1,000 arrivals, their prompts and implied cache hits);
- ``base MB``: peak RSS after importing hopbench (before the load);
- ``load MB`` / ``ready MB``: peak RSS after each step (``resource.getrusage``
  ``ru_maxrss``: the process's high-water mark, so it counts the load's
  temporaries too).

    .venv/bin/python benchmarks/bench_trace_load.py                        # 500,000 lines
    .venv/bin/python benchmarks/bench_trace_load.py --lines 100000 --repeat 3
    .venv/bin/python benchmarks/bench_trace_load.py --against main --repeat 2

``--azure`` writes the same lengths as an Azure LLM inference trace (CSV, no
hash ids, ~20 rows a second; a revision that cannot read it fails).

``--against REV`` checks REV out in a temporary git worktree and measures it
and this tree in turn on the same trace file (REV, this, this, REV, ...: each
measurement its own process, the load average printed before it), so both
sides of a ratio see the same machine.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import tempfile
import time
from pathlib import Path
from typing import Any

from _load_bench import load_timed, measure_sides, peak_mb


def write_trace(path: Path, lines: int, seed: int = 1) -> None:
    """A synthetic Mooncake-style trace (see the module doc) of ``lines`` lines."""
    rng = random.Random(seed)
    prefixes = [[rng.randrange(10**6) for _ in range(4)] for _ in range(2000)]
    next_id = 10**6
    t_ms = 0
    with open(path, "w", encoding="utf-8") as f:
        for i in range(lines):
            t_ms += rng.choice((0, 1, 1, 2, 3))
            inp = rng.randint(1, 16384) if rng.random() < 0.5 else rng.randint(1, 2048)
            blocks = -(-inp // 512)
            shared = prefixes[rng.randrange(len(prefixes))][: min(blocks, rng.randint(1, 4))]
            own = list(range(next_id, next_id + blocks - len(shared)))
            next_id += len(own)
            line: dict[str, Any] = {"timestamp": t_ms, "input_length": inp,
                                    "output_length": rng.randint(1, 1000), "hash_ids": shared + own}
            if i % 10 == 0:
                line["scenario"] = "b"
            f.write(json.dumps(line) + "\n")


def write_azure_trace(path: Path, lines: int, seed: int = 1) -> None:
    """A synthetic trace of ``lines`` rows in the shape of Azure's public LLM inference traces
    (CSV: ``TIMESTAMP,ContextTokens,GeneratedTokens``, UTC times with 7 fractional digits, ~20
    rows a second), the same lengths as ``write_trace``'s."""
    rng = random.Random(seed)
    t_s = 0.0
    with open(path, "w", encoding="utf-8") as f:
        f.write("TIMESTAMP,ContextTokens,GeneratedTokens\n")
        for _ in range(lines):
            t_s += rng.expovariate(20)
            whole = int(t_s)
            inp = rng.randint(1, 16384) if rng.random() < 0.5 else rng.randint(1, 2048)
            f.write(f"2023-11-{16 + whole // 86400:02d} {whole // 3600 % 24:02d}:{whole // 60 % 60:02d}:"
                    f"{whole % 60:02d}.{int((t_s - whole) * 1e7):07d},{inp},{rng.randint(1, 1000)}\n")


def write_profile(folder: Path, trace: Path) -> Path:
    prof = folder / "p.toml"
    prof.write_text(f'[run]\nrequests = 10\n[load]\nmode = "trace"\ntrace = "{trace}"\nloop = true\n'
                    '[target]\nurl = "http://127.0.0.1:9"\n'
                    '[[scenario]]\nname = "a"\nprotocol = "chat"\nmodel = "m"\n'
                    '[[scenario]]\nname = "b"\nprotocol = "chat"\nmodel = "n"\n', encoding="utf-8")
    return prof


def child(profile: Path) -> dict[str, float]:
    """One measurement in this (fresh) process: the ``hopbench`` on ``sys.path`` loads ``profile``."""
    from hopbench.workload._trace_bodies import TraceBodies

    prof, figures = load_timed(profile)
    t1 = time.perf_counter()
    spec = prof.load.trace
    bodies = TraceBodies(spec, prof.run.seed)
    spec.scheduled_between(0, 10**9)
    arrivals = spec.arrivals()
    sent = 0
    for _ in range(1000):
        _, i, rep = next(arrivals)
        sent += len(bodies.prompt(i, rep)) + spec.implied[i][0]
    return {"entries": len(spec.entries), **figures, "ready_s": time.perf_counter() - t1, "ready_mb": peak_mb()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lines", type=int, default=500_000, help="trace lines (default 500,000)")
    ap.add_argument("--repeat", type=int, default=1, help="measurements per side (default 1)")
    ap.add_argument("--azure", action="store_true",
                    help="write the trace as Azure's CSV (TIMESTAMP,ContextTokens,GeneratedTokens) instead")
    ap.add_argument("--against", metavar="REV",
                    help="also measure git revision REV (a temporary worktree), interleaved")
    args = ap.parse_args()
    with contextlib.ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="hopbench-trace-load-")))
        trace = tmp / ("trace.csv" if args.azure else "trace.jsonl")
        t0 = time.perf_counter()
        (write_azure_trace if args.azure else write_trace)(trace, args.lines)
        print(f"trace: {args.lines:,} lines, {trace.stat().st_size / 1e6:.1f} MB "
              f"(written in {time.perf_counter() - t0:.1f} s)", flush=True)
        prof = write_profile(tmp, trace)
        measure_sides(stack, tmp, "bench_trace_load", prof, args.against, args.repeat,
                      f"{'side':>12} {'load avg':>16} {'load s':>7} {'cpu s':>6} {'ready s':>7} {'base MB':>7} "
                      f"{'load MB':>7} {'ready MB':>8}",
                      lambda name, load, r: f"{name:>12} {load:>16} {r['load_s']:7.2f} {r['load_cpu_s']:6.2f} "
                                            f"{r['ready_s']:7.2f} {r['base_mb']:7.0f} {r['load_mb']:7.0f} "
                                            f"{r['ready_mb']:8.0f}")

if __name__ == "__main__":
    main()
