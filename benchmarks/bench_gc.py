"""The cyclic collector's pauses with thousands of paced streams (not a timed test).

Role: measure what issue 16 item 5 asks for (collector pause p99 under 50 ms at
2,000+ streams): hopbench's engine (``LoadRunner``, as in ``bench_run.py``)
runs ``--streams`` paced streams against the pre-rendered responder
(``_sse_responder.py``, its own process and core): ``--events`` content
events ``--gap-ms`` apart after a 50 ms TTFT, all users started over
``--ramp-s``, each user running ``--rounds`` streams in a row.

Every collection is timed by the child itself (``gc.callbacks``: its own
list, independent of hopbench's ``CollectorWatch``): count, total, p50, p99
and the longest pause (wall time, what the streams wait; and thread CPU time,
which leaves out the time the machine's neighbours took the core), the run's CPU per event and its
TTFT p99 against the responder's. ``--modes`` picks collector settings to
compare in one invocation, interleaved (``--repeat`` rounds of every mode), so
neighbours' load hits them alike; the load average is printed with each row:

- ``before``: the code before issue 16, from a checkout given with
  ``--before-src`` (start-up objects frozen, CPython's default thresholds
  700/10/10, ~30 objects of cyclic garbage per stream);
- ``baseline``: the current code with the old collector settings only
  (thresholds 700/10/10, no late freeze);
- ``tuned``: the current ``hopbench.engine._collector`` (thresholds, late freeze) and the
  runner without per-stream cycles (whatever the checkout does now).

Run from the repository root (about 1-2 minutes; 127.0.0.1 only)::

    git worktree add /tmp/hb-before <commit before issue 16>
    .venv/bin/python benchmarks/bench_gc.py --before-src /tmp/hb-before
    .venv/bin/python benchmarks/bench_gc.py --streams 2000 --repeat 3
"""

from __future__ import annotations

import argparse
import gc
import inspect
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_run import _profile_text, _stats  # noqa: E402

HERE = Path(__file__).resolve().parent


def child(args: argparse.Namespace) -> dict[str, Any]:
    if args.mode == "before":  # the code before issue 16 (a checkout given by --before-src)
        sys.path.insert(0, args.before_src)
    import trio

    from hopbench.engine import _collector
    from hopbench.config._profile import parse_profile
    from hopbench.measure._recorder import ALL, Recorder
    from hopbench.engine._runner import LoadRunner

    if args.mode.startswith("thr:"):  # an experiment: tuned, with these thresholds
        thr = tuple(int(x) for x in args.mode[4:].split("/"))
        orig = _collector.CollectorWatch.__init__

        def init(self: Any, *a: Any, **k: Any) -> None:
            orig(self, *a, **k)
            self.thresholds = thr

        _collector.CollectorWatch.__init__ = init  # type: ignore[method-assign]
    import hopbench.engine._runner as runner_mod

    pauses: list[tuple[int, int]] = []
    cpu_pauses: list[int] = []
    t_start = [0, 0]
    left = [0]

    def cb(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            t_start[0], t_start[1] = time.perf_counter_ns(), time.thread_time_ns()
        else:
            pauses.append((info["generation"], time.perf_counter_ns() - t_start[0]))
            cpu_pauses.append(time.thread_time_ns() - t_start[1])

    assert args.mode != "before" or runner_mod.__file__.startswith(args.before_src), runner_mod.__file__
    base_cls: Any = _BaselineWatch if args.mode == "baseline" else runner_mod.CollectorWatch

    class Watched(base_cls):  # type: ignore[misc,valid-type]
        """The run's collector handling, plus this child's own timing of every
        collection inside it (the watch's own set-up collection excluded)."""

        def __enter__(self) -> Any:
            out = super().__enter__()
            gc.callbacks.append(cb)
            return out

        def __exit__(self, *exc: Any) -> Any:
            gc.callbacks.remove(cb)
            left[0] = 0 if os.environ.get("BENCH_GC_NOLEFT") else gc.collect()  # cyclic garbage still uncollected at the run's end
            return super().__exit__(*exc)

    # (the seam where the runner has it; an older tree's runner reads its module's name)
    seams: dict[str, Any] = {}
    if "collector_factory" in inspect.signature(LoadRunner).parameters:
        seams["collector_factory"] = Watched
    else:
        runner_mod.CollectorWatch = Watched  # type: ignore[misc]
    path = f"/s/{args.gap_ms}/50/v1/chat/completions"
    profile = parse_profile(_profile_text(args.url, path, args.streams * args.rounds, args.streams,
                                          args.ramp_s, "hopbench"))
    rec, warm = Recorder(["chat"]), Recorder(["chat"])
    runner = LoadRunner(profile, args.url, rec, warm, **seams)
    cpu0, t0 = time.process_time(), time.perf_counter()
    trio.run(runner.run)
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    snap = rec.snapshot()
    ttft = snap.histogram(ALL, "ttft")
    lag = snap.histogram(ALL, "loop_lag")
    d = sorted(p for _, p in pauses)

    c = sorted(cpu_pauses)

    def pct(p: float, v: list[int] = d) -> float:
        return v[min(len(v) - 1, int(p / 100 * len(v)))] / 1e6 if v else 0.0

    completed = snap.counter(ALL, "completed")
    return {
        "completed": completed, "started": snap.counter(ALL, "started"),
        "wall_s": wall, "cpu_s": cpu, "events": completed * (args.events + 2),
        "collections": len(d), "by_gen": [sum(1 for g, _ in pauses if g == k) for k in range(3)],
        "pause_total_ms": sum(d) / 1e6, "pause_p50_ms": pct(50), "pause_p99_ms": pct(99),
        "pause_max_ms": d[-1] / 1e6 if d else 0.0,
        "cpu_pause_p99_ms": pct(99, c), "cpu_pause_max_ms": c[-1] / 1e6 if c else 0.0,
        "garbage_left": left[0],
        "runner_pause_max_ms": runner.stats.gc_pause_max_ns / 1e6,
        "ttft_p99_ms": ttft.percentile(99) / 1e6 if ttft.count else None,
        "loop_lag_p99_ms": lag.percentile(99) / 1e6 if lag.count else None,
    }


class _BaselineWatch:
    """hopbench's collector handling before issue 16 (freeze at start, default thresholds)."""

    def __init__(self) -> None:
        self.collections = 0
        self.pause_ns = 0
        self.pause_max_ns = 0
        self._t0 = 0

    def _callback(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._t0 = time.perf_counter_ns()
            return
        d = time.perf_counter_ns() - self._t0
        self.collections += 1
        self.pause_ns += d
        self.pause_max_ns = max(self.pause_max_ns, d)

    def __enter__(self) -> _BaselineWatch:
        gc.collect()
        gc.freeze()
        gc.callbacks.append(self._callback)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self._callback)
        gc.unfreeze()

    def freeze_now(self) -> None:  # the tuned watch's hook: the baseline never freezes later
        pass

    def pause_percentile_ns(self, p: float) -> int:  # (this child times pauses itself)
        return 0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--url", help=argparse.SUPPRESS)
    p.add_argument("--mode", default="tuned", help=argparse.SUPPRESS)
    p.add_argument("--streams", type=int, default=2000, help="concurrent paced streams (default 2000)")
    p.add_argument("--rounds", type=int, default=2, help="streams per user (default 2)")
    p.add_argument("--events", type=int, default=40, help="content events per stream (default 40)")
    p.add_argument("--gap-ms", type=int, default=100, help="ms between a stream's events (default 100)")
    p.add_argument("--ramp-s", type=float, default=2.0, help="users started over this long (default 2)")
    p.add_argument("--modes", default="before,tuned", help="comma-separated (default before,tuned)")
    p.add_argument("--before-src", default="", help="a checkout of the code before (for mode 'before'), e.g. "
                   "`git worktree add /tmp/hb-before <commit>`")
    p.add_argument("--repeat", type=int, default=2, help="interleaved rounds of every mode (default 2)")
    args = p.parse_args()
    if args.child:
        print(json.dumps(child(args)))
        return
    responder = subprocess.Popen([sys.executable, str(HERE / "_sse_responder.py"), "--port", "0",
                                  "--events", str(args.events)], stdout=subprocess.PIPE, text=True)
    try:
        assert responder.stdout is not None
        line = responder.stdout.readline()
        base = f"http://127.0.0.1:{int(line.split()[1])}"
        print(f"{args.streams} paced streams x {args.rounds} rounds, {args.events} events {args.gap_ms} ms apart, "
              f"ramp {args.ramp_s} s; {os.cpu_count()} CPUs")
        hdr = (f"{'mode':9} {'load avg':>8} {'done':>6} {'wall s':>6} {'CPU us/ev':>9} {'colls':>6} "
               f"{'gen0/1/2':>12} {'total ms':>8} {'p50 ms':>7} {'p99 ms':>7} {'max ms':>7} "
               f"{'TTFT p99':>8} {'srv p99':>7} {'lag p99':>7}")
        print(hdr)
        print("-" * len(hdr))
        for _ in range(args.repeat):
            for mode in args.modes.split(","):
                load = os.getloadavg()[0]
                _stats(base)
                cmd = [sys.executable, __file__, "--child", "--url", base, "--mode", mode,
                       "--before-src", os.path.abspath(args.before_src) if args.before_src else "",
                       "--streams", str(args.streams), "--rounds", str(args.rounds),
                       "--events", str(args.events), "--gap-ms", str(args.gap_ms), "--ramp-s", str(args.ramp_s)]
                proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
                srv = _stats(base)
                if proc.returncode != 0:
                    raise SystemExit(f"{mode}: child failed:\n{proc.stderr[-3000:]}")
                r = json.loads(proc.stdout.strip().splitlines()[-1])
                us = r["cpu_s"] / max(r["events"], 1) * 1e6
                gens = "/".join(str(x) for x in r["by_gen"])
                print(f"{mode:9} {load:8.2f} {r['completed']:6d} {r['wall_s']:6.1f} {us:9.1f} "
                      f"{r['collections']:6d} {gens:>12} {r['pause_total_ms']:8.1f} {r['pause_p50_ms']:7.2f} "
                      f"{r['pause_p99_ms']:7.1f} {r['pause_max_ms']:7.1f} {r['ttft_p99_ms']:8.1f} "
                      f"{srv['ttft_ms']['p99']:7.1f} {r['loop_lag_p99_ms']:7.1f}", flush=True)
                print(f"{'':9} cyclic garbage left at the end: {r['garbage_left']:,} objects; pauses in thread "
                      f"CPU time (without preemption): p99 {r['cpu_pause_p99_ms']:.1f} ms, "
                      f"max {r['cpu_pause_max_ms']:.1f} ms")
                if r["completed"] != r["started"]:
                    print(f"  !! {r['started'] - r['completed']} streams did not complete")
    finally:
        responder.terminate()
        responder.wait(timeout=10)


if __name__ == "__main__":
    main()
