"""Trace replay schedule lag at a high request rate on one worker (issue 17 item 4).

Writes a synthetic trace (constant gaps of 1000 / --rps ms, --seconds of it;
prompts of 64 tokens of which the first block is shared by every request, 4
output tokens) and a profile replaying it once against the embedded emulator
(unpaced, TTFT 0, no keepalives: the target stays cheap), then runs it with
``hopbench run`` in one process and prints what summary.json says about the
schedule: ``load.schedule_lag_p99_ms`` (how late the client woke for each
scheduled request, p99), the full schedule_lag histogram, requested vs
achieved rate, the client's CPU and loop lag, and whether the run called
itself saturated. Repeat with --repeat to see the spread.

    .venv/bin/python benchmarks/bench_trace.py                  # 1,000 requests/s for 10 s
    .venv/bin/python benchmarks/bench_trace.py --rps 2000 --seconds 5 --repeat 3
    .venv/bin/python benchmarks/bench_trace.py --canned --workers 2    # the same rate split over two processes
    .venv/bin/python benchmarks/bench_trace.py --in-memory      # the client alone (no emulator)
    .venv/bin/python benchmarks/bench_trace.py --in-memory --rate --repeat 3   # and the same open loop

``--in-memory`` runs the replay in a fresh process against an in-memory target
(an httpx transport that answers every request at once with a 4-token chat
stream, reporting the same phases as hopbench's transport): the schedule lag
is then the replay engine's own (scheduling, building each body from the
trace's blocks, the streams' decoding and recording), without an emulator
process competing for the cores.

Before / after and the causes (issue 17, "schedule lag p99 under 1 ms"):

    .venv/bin/python benchmarks/bench_trace.py --in-memory --explain --against main --repeat 3
    .venv/bin/python benchmarks/bench_trace.py --against main --repeat 2       # with the emulator
    .venv/bin/python benchmarks/bench_trace.py --in-memory --without timerfd,burst,switch,request
    .venv/bin/python benchmarks/bench_trace.py --canned --without gcpace,switch,reserve,catchup,slack --repeat 2

``--against REV`` checks REV out in a temporary git worktree and runs it and
this tree in turn (REV, this, REV, this, ...; each run its own process, the
load average printed before it), so both sides of a ratio see the same
machine. ``--explain`` (in memory) logs every wait of the open loop's pacer
(hopbench.engine._pacer) and splits each arrival's lag into: backlog (the scheduler
asked for its wake only after the arrival was due: earlier arrivals ran late),
run queue (the loop thread runnable but off the core, from
/proc/thread-self/schedstat), gc (the collector's pauses), other threads (CPU
the process's other threads took while the loop waited: the GIL), other tasks
(trio ran streams first), timer/epoll (the rest of the wake) and burst ahead
(sending the arrivals due before it in the same wake); it prints the means over
all arrivals and over the p99 tail. A revision without the pacer shows its lag
only. ``--without FIX,...`` also runs this tree with one fix undone (timerfd,
burst, switch, request in memory; over sockets dispatch and ``SOCKET_FIXES``),
interleaved, to weigh each fix alone.

The emulator runs in its own process on the same machine: on a 2-core
machine it takes most of one core at 1,000 streams/s, so the figures also
show how well two busy processes share two cores.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def write_case(folder: Path, rps: float, seconds: float) -> Path:
    """The trace and its profile in ``folder``; returns the profile's path."""
    n = int(rps * seconds)
    with (folder / "trace.jsonl").open("w", encoding="utf-8") as f:
        for i in range(n):
            f.write(json.dumps({"timestamp_ms": round(i * 1000.0 / rps, 3), "input_tokens": 64,
                                "output_tokens": 4, "hash_ids": [0, 1000 + i]}) + "\n")
    prof = folder / "bench-trace.toml"
    prof.write_text("""[run]
name = "bench-trace"
stream_log = false

[load]
mode = "trace"
trace = "trace.jsonl"
block_tokens = 32
max_in_flight = 10000

[target]
embedded = true

[emulator]
ttft_ms = 0
tokens_per_s = 0
output_tokens = 4
keepalive_interval_s = 0

[[scenario]]
protocol = "chat"
model = "m"
extra = { ignore_eos = true }
""", encoding="utf-8")
    return prof


_CHUNK = (b'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":'
          b'[{"index":0,"delta":{"content":"hi"},"finish_reason":null}]}\n\n')
_LAST = (b'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":'
         b'[{"index":0,"delta":{},"finish_reason":"stop"}],'
         b'"usage":{"prompt_tokens":64,"completion_tokens":4,"total_tokens":68}}\n\ndata: [DONE]\n\n')


def write_rate_case(folder: Path, rps: float, seconds: float) -> Path:
    """The same load as an open loop (``mode = "rate"``, constant arrivals), for comparison."""
    prof = folder / "bench-rate.toml"
    prof.write_text(f"""[run]
name = "bench-rate"
stream_log = false
duration_s = {seconds}

[load]
mode = "rate"
rate_rps = {rps}
arrival = "constant"
max_in_flight = 10000

[target]
embedded = true

[[scenario]]
protocol = "chat"
model = "m"
input_tokens = 64
max_tokens = 4
""", encoding="utf-8")
    return prof


def run_in_memory(prof: Path, explain: bool = False, without: str = "") -> dict[str, Any]:
    """Replay ``prof`` in this process against an instant in-memory target.

    Returns the figures as a dict (ms); with ``explain`` and a runner that has a
    pacer (hopbench.engine._pacer), also the lag's causes (see ``explain_lag``).
    ``without`` undoes one of issue 17's fixes, to measure it alone: "timerfd"
    (trio.sleep_until wakes), "burst" (one arrival per wake), "switch" (CPython's
    5 ms GIL switch interval), "request" (httpx's build_request and cookie jar).
    """
    import httpx
    import trio

    from hopbench.engine import _runner, _stream
    from hopbench.engine._open_loop import Tuning
    from hopbench.engine._pacer import Pacer
    from hopbench.config._profile import load_profile
    from hopbench.measure._recorder import ALL, Recorder

    class Body(httpx.AsyncByteStream):
        async def __aiter__(self):  # type: ignore[no-untyped-def]
            for _ in range(4):
                yield _CHUNK
            yield _LAST

        async def aclose(self) -> None:
            pass

    class Instant(httpx.AsyncBaseTransport):
        def __init__(self, **_: object) -> None:
            pass

        async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
            await request.extensions["trace"]("http11.send_request_headers.started", {})
            await trio.lowlevel.checkpoint()
            body = Body()
            return httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=body,
                                  request=request, extensions={"hopbench.body": body})

    # the runner's seams (LoadRunner's keyword parameters)
    seams: dict[str, Any] = {"transport_factory": Instant}
    pacer_cls: Any = Pacer
    if without in ("timerfd", "burst"):
        kw: dict[str, Any] = {"use_timerfd": False} if without == "timerfd" else {"burst_max": 1}

        class Without(pacer_cls):  # type: ignore[misc, valid-type]
            def __init__(self) -> None:
                super().__init__(**kw)
        pacer_cls = seams["pacer_factory"] = Without
    elif without == "switch":
        seams["tuning"] = Tuning(switch_interval_s=sys.getswitchinterval())
    elif without == "request":
        _stream._Client = httpx.AsyncClient

        def build(self: Any, path: str, content: bytes, base: dict[str, str], request_id: str,
                  trace: Any) -> httpx.Request:
            return self._client.build_request("POST", path, content=content,
                                              headers={**base, _stream.REQUEST_ID_HEADER: request_id},
                                              extensions={"trace": trace})
        _runner.LoadRunner._build_request = build
    log: list[Any] = []
    extra: list[tuple[int, int]] = []  # per wait: (loop thread CPU, other threads' CPU) during it, ns
    gcs: list[tuple[int, int]] = []  # the collector's pauses: (start, end) on hopbench's clock
    if explain:
        import gc

        from hopbench._clock import now_ns

        class LoggingPacer(pacer_cls):  # type: ignore[misc, valid-type]
            def __init__(self) -> None:
                super().__init__()
                self.stats.log = log

            async def wait(self, deadline_ns: int) -> None:
                c0, p0 = time.thread_time_ns(), time.process_time_ns()
                await super().wait(deadline_ns)
                c1, p1 = time.thread_time_ns(), time.process_time_ns()
                extra.append((c1 - c0, (p1 - p0) - (c1 - c0)))
        seams["pacer_factory"] = LoggingPacer
        gc_start = [0]

        def on_gc(phase: str, info: dict[str, Any]) -> None:
            try:
                t = now_ns()
            except RuntimeError:  # outside trio.run
                return
            if phase == "start":
                gc_start[0] = t
            else:
                gcs.append((gc_start[0], t))
        gc.callbacks.append(on_gc)
    text = prof.read_text(encoding="utf-8").replace("embedded = true", 'url = "http://127.0.0.1:9"')
    prof.write_text(text, encoding="utf-8")
    profile = load_profile(prof)
    rec, warm = Recorder(["chat-m"]), Recorder(["chat-m"])
    runner = _runner.LoadRunner(profile, "http://127.0.0.1:9", rec, warm, **seams)
    rd0 = _run_delay_ns()
    stats = trio.run(runner.run)
    rd1 = _run_delay_ns()
    snap = rec.snapshot()
    lag = snap.histogram(ALL, "schedule_lag")
    loop = snap.histogram(ALL, "loop_lag")
    ms = 1e6
    out: dict[str, Any] = {
        "mode": profile.load.mode, "arrivals": lag.count, "completed": snap.counter("chat-m", "completed"),
        "p50": lag.percentile(50) / ms, "p90": lag.percentile(90) / ms, "p99": lag.percentile(99) / ms,
        "p999": lag.percentile(99.9) / ms, "max": lag.max / ms, "loop_lag_p99": loop.percentile(99) / ms,
        "cpu": sum(stats.cpu_fractions) / max(len(stats.cpu_fractions), 1),
        # the main thread's run-queue wait over the whole run, as a share of it
        "runq_share": (rd1 - rd0) / max(stats.ended_ns, 1) if rd0 is not None and rd1 is not None else None,
        "pacer": pacer_cls is not None,
    }
    pacer = getattr(runner, "pacer", None)
    if pacer is not None:
        out["timerfd_waits"] = pacer.stats.timerfd_waits
    if log:
        out["explain"] = explain_lag(log, extra, gcs)
    return out


def _run_delay_ns() -> int | None:
    try:
        with open("/proc/thread-self/schedstat", "rb") as f:
            return int(f.read().split()[1])
    except (OSError, IndexError, ValueError):
        return None


def _pct(values: list[int], q: float) -> float:
    if not values:
        return 0.0
    v = sorted(values)
    return v[min(len(v) - 1, int(q / 100 * len(v)))] / 1e6


def explain_lag(log: list[tuple[int, int, int, int, bool, int]], extra: list[tuple[int, int]],
                gcs: list[tuple[int, int]]) -> dict[str, Any]:
    """Split each arrival's schedule lag into its causes (ns in, ms out).

    ``log`` is the pacer's (hopbench.engine._pacer.PacerStats.log): per arrival
    (deadline d, asked a, woke w, returned r, yielded, run-queue wait q);
    ``extra`` per arrival: the loop thread's CPU and the other threads' CPU
    during its wait; ``gcs`` the collector's pauses. An arrival is served by
    a wake (its own when it yielded, else the wake whose burst it joined);
    its lag r - d is split, in this order, each part capped by what is left
    of the wake's lateness max(w - d, 0):

    * backlog: max(a - d, 0) of that wake: the scheduler only asked for the
      wake after d, still busy with earlier arrivals (a late wake carries over);
    * runq: the loop thread runnable but not on a core during the wait
      (/proc/thread-self/schedstat);
    * gc: the collector's pauses inside the wait;
    * threads: CPU other threads of the process used during the wait (the
      ticker's publishing thread): with one GIL, time the loop could not run;
    * tasks: the loop thread's own CPU during the wait, less gc: trio running
      other tasks (streams) before the scheduler's;
    * timer: the rest: timer expiry, epoll, idle;

    and, for an arrival that joined a burst, send = r - max(w, d): sending the
    arrivals ahead of it in the same wake. Returns the means over all arrivals
    and over the arrivals at or above the lag's p99 (the tail), the burst sizes,
    the wakes' lateness percentiles and the collector's pauses.
    """
    keys = ("lag", "backlog", "runq", "gc", "threads", "tasks", "timer", "send")
    rows: list[tuple[int, ...]] = []
    head: tuple[int, ...] = (0, 0, 0, 0, 0, 0)
    bursts: list[int] = []
    gi = 0
    for (d, a, w, r, yielded, q), (cpu, others) in zip(log, extra):
        if yielded:
            while gi < len(gcs) and gcs[gi][1] < a:
                gi += 1
            gc_ns = 0
            for s, e in gcs[gi:]:
                if s >= w:
                    break
                gc_ns += max(min(e, w) - max(s, a), 0)
            head = (a, w, max(q, 0), gc_ns, others, cpu)
            bursts.append(1)
        elif bursts:
            bursts[-1] += 1
        a_h, w_h, q_h, gc_h, oth_h, cpu_h = head
        left = max(w_h - d, 0)
        parts = []
        for v in (max(a_h - d, 0), q_h, gc_h, oth_h, max(cpu_h - gc_h, 0)):
            x = min(left, v)
            parts.append(x)
            left -= x
        parts.append(left)
        rows.append((r - d, *parts, 0 if yielded else max(r - max(w_h, d), 0)))
    lags = sorted(x[0] for x in rows)
    p99 = lags[min(len(lags) - 1, int(0.99 * len(lags)))] if lags else 0
    tail = [x for x in rows if x[0] >= p99]

    def means(sel: list[tuple[int, ...]]) -> dict[str, float]:
        n = max(len(sel), 1)
        return {k: sum(x[i] for x in sel) / n / 1e6 for i, k in enumerate(keys)}

    heads = [x for x, e in zip(rows, log) if e[4]]
    return {"all": means(rows), "tail": means(tail), "tail_n": len(tail),
            "wakes": len(bursts), "burst_max": max(bursts, default=0),
            "burst_mean": sum(bursts) / max(len(bursts), 1),
            "head_late_p50": _pct([x[0] for x in heads], 50), "head_late_p99": _pct([x[0] for x in heads], 99),
            "gc_pauses": len(gcs), "gc_max": max((e - s for s, e in gcs), default=0) / 1e6}


SOCKET_FIXES: dict[str, str] = {
    "gcpace": "the collector paced by the dispatcher's thread (hopbench.engine._dispatch.GcPacer): CPython's own",
    "switch": "the 20 us GIL switch interval: 0.1 ms",
    "reserve": "the idle reserve of 150 ms of arrivals: 50 ms",
    "catchup": "the planner's catching up (CATCH_UP_TURN_NS): a yield every 16 arrivals",
    "slack": "the thread's 1 ns timer slack: the kernel's 50 us",
}
"""What ``--without`` can undo over sockets (besides ``dispatch``), each in the
child ``hopbench run`` process only (``_undo``)."""


def _undo(fix: str) -> None:
    """Undo one of ``SOCKET_FIXES`` in this process (a child about to run hopbench)."""
    from dataclasses import replace

    from hopbench.engine import _dispatch, _runner
    from hopbench.engine._open_loop import Tuning

    def with_tuning(**knobs: Any) -> None:  # every LoadRunner of this process gets these knobs
        runner_init = _runner.LoadRunner.__init__

        def init(self: Any, *a: Any, **k: Any) -> None:
            runner_init(self, *a, **{**k, "tuning": replace(k.get("tuning") or Tuning(), **knobs)})
        _runner.LoadRunner.__init__ = init  # type: ignore[method-assign]
    if fix == "gcpace":
        init = _dispatch.Dispatcher.__init__

        def without_pacing(self: Any, *a: Any, **k: Any) -> None:
            init(self, *a, **{**k, "pace_gc": False})
        _dispatch.Dispatcher.__init__ = without_pacing  # type: ignore[method-assign]
    elif fix == "switch":
        with_tuning(switch_interval_s=0.0001)
    elif fix == "reserve":
        with_tuning(spares_reserve_ns=50_000_000)
    elif fix == "catchup":
        with_tuning(catch_up_turn_ns=0)
    elif fix == "slack":
        _dispatch.TIMER_SLACK_NS = 50_000
    else:
        raise SystemExit(f"--without: unknown fix {fix!r} (over sockets: dispatch, {', '.join(SOCKET_FIXES)})")


def run_emulator(prof: Path, out: Path, root: Path, env: dict[str, str], workers: int = 1,
                 without: str = "") -> dict[str, Any]:
    """``hopbench run`` of ``prof`` (embedded emulator, ``workers`` worker
    processes: each replays every n-th entry of the trace) with ``root``'s
    code; its figures (with several workers: the merged summary's). ``without``:
    one of ``SOCKET_FIXES`` undone in that process."""
    head = [sys.executable, "-m", "hopbench"]
    if without in SOCKET_FIXES:
        head = [sys.executable, str(Path(__file__).resolve()), "--hopbench-without", without]
    proc = subprocess.run(head + ["run", str(prof), "--out", str(out), "--workers", str(workers)],
                          cwd=root, capture_output=True, text=True, env=env)
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    load = summary["load"]
    lag = summary["scopes"]["all"]["metrics"]["schedule_lag"]
    return {"mode": summary["load"]["mode"], "exit": proc.returncode, "arrivals": lag["count"], "p50": lag["p50"],
            "p90": lag["p90"], "p99": lag["p99"], "p999": lag["p999"], "max": lag["max"],
            "requested": load["requested_rate_rps"], "sent": load["achieved_rate_rps"],
            "cpu": load["cpu_mean"], "loop_lag_p99": load["loop_lag_p99_ms"],
            "saturated": summary["saturated"], "dispatched": load.get("dispatched"),
            "spares": load.get("spare_connections"), "gc_max": summary.get("generator", {}).get("gc_pause_max_ms"),
            "queue_delay": {q: summary["scopes"]["all"]["metrics"].get("queue_delay", {}).get(q)
                            for q in ("p50", "p99", "p999")},
            "completed": summary["scopes"]["all"]["counters"].get("completed", 0)}


def describe(label: str, r: dict[str, Any]) -> str:
    """One line of figures (and, with --explain, the lag's causes) for a run's dict."""
    line = (f"{label}{r['mode']}: {r['arrivals']} arrivals, {r['completed']} completed; schedule lag "
            f"p50 {r['p50']:.3f} ms, p90 {r['p90']:.3f} ms, p99 {r['p99']:.3f} ms, "
            f"p99.9 {r['p999']:.3f} ms, max {r['max']:.3f} ms; loop lag p99 {r['loop_lag_p99']:.3f} ms; "
            f"client CPU {r['cpu']:.0%}")
    if "sent" in r:
        line += f"; trace {r['requested']:.1f}/s, sent {r['sent']:.1f}/s; saturated {r['saturated']}"
    if r.get("dispatched") is not None:
        qd = r["queue_delay"]
        line += (f"; written by the dispatcher {r['dispatched']}; queue_delay p50 {qd['p50']} p99 {qd['p99']}"
                 f" p99.9 {qd['p999']} ms")
        if r.get("spares") is not None:
            line += f"; spare connections {r['spares']}"
        if r.get("gc_max") is not None:
            line += f"; gc pause max {r['gc_max']} ms"
    if r.get("runq_share") is not None:
        line += f"; loop thread waited for a core {r['runq_share']:.1%} of the run"
    if "timerfd_waits" in r:
        line += f"; timerfd waits {r['timerfd_waits']}"
    ex = r.get("explain")
    if ex:
        def parts(m: dict[str, float]) -> str:
            return (f"lag {m['lag']:.3f} = backlog {m['backlog']:.3f} + run queue {m['runq']:.3f} + "
                    f"gc {m['gc']:.3f} + other threads {m['threads']:.3f} + other tasks {m['tasks']:.3f} + "
                    f"timer/epoll {m['timer']:.3f} + burst ahead {m['send']:.3f} ms")
        line += (f"\n    wakes {ex['wakes']}, arrivals per wake mean {ex['burst_mean']:.2f} max {ex['burst_max']}; "
                 f"wake lateness p50 {ex['head_late_p50']:.3f} ms p99 {ex['head_late_p99']:.3f} ms; "
                 f"gc pauses {ex['gc_pauses']} (max {ex['gc_max']:.1f} ms)"
                 f"\n    mean over all:          {parts(ex['all'])}"
                 f"\n    mean over p99 tail ({ex['tail_n']}): {parts(ex['tail'])}")
    elif "explain" not in r and not r.get("pacer", True):
        line += " (no pacer at this revision: lag only)"
    return line


def _loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text(encoding="utf-8").split()[:3])
    except OSError:
        return "?"


def run_canned(prof: Path, out: Path, root: Path, env: dict[str, str], workers: int = 1,
               without: str = "") -> dict[str, Any]:
    """``prof`` replayed by ``hopbench run`` (``workers`` workers, ``root``'s code) against
    benchmarks/_canned.py in a process of its own; its figures."""
    server = subprocess.Popen([sys.executable, str(Path(__file__).resolve().parent / "_canned.py")],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        text = prof.read_text(encoding="utf-8").replace("embedded = true", f'url = "http://127.0.0.1:{port}"')
        prof.write_text(text, encoding="utf-8")
        return run_emulator(prof, out, root, env, workers, without)
    finally:
        server.kill()
        server.wait()


def _side(root: Path, args: argparse.Namespace, folder: Path, rate: bool, without: str) -> dict[str, Any]:
    """One run of ``root``'s code in a fresh process (so both sides start alike)."""
    env = dict(os.environ, PYTHONPATH=str(root))
    if without == "dispatch":  # the open loop paced on the event loop (hopbench.engine._dispatch off)
        env["HOPBENCH_DISPATCH"] = "0"
    if args.in_memory:
        cmd = [sys.executable, str(Path(__file__).resolve()), "--child", str(folder),
               "--rps", str(args.rps), "--seconds", str(args.seconds)]
        if rate:
            cmd.append("--rate")
        if args.explain:
            cmd.append("--explain")
        if without:
            cmd += ["--without", without]
        proc = subprocess.run(cmd, cwd=root, capture_output=True, text=True, env=env)
        if proc.returncode != 0:
            raise SystemExit(f"{root}: {proc.stderr[-2000:]}")
        return dict(json.loads(proc.stdout.strip().splitlines()[-1]))
    prof = write_rate_case(folder, args.rps, args.seconds) if rate else write_case(folder, args.rps, args.seconds)
    if args.canned:
        return run_canned(prof, folder / "run", root, env, args.workers, without)
    return run_emulator(prof, folder / "run", root, env, args.workers, without)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rps", type=float, default=1000.0)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--in-memory", action="store_true", help="the client alone, against an instant target")
    ap.add_argument("--canned", action="store_true",
                    help="against benchmarks/_canned.py (real sockets, a target that costs next to nothing)")
    ap.add_argument("--rate", action="store_true", help="the same load as mode = \"rate\" too")
    ap.add_argument("--explain", action="store_true",
                    help="with --in-memory: split the lag into its causes (needs hopbench.engine._pacer)")
    ap.add_argument("--against", metavar="REV",
                    help="also run git revision REV (a temporary worktree), interleaved: REV, this, REV, ...")
    ap.add_argument("--without", metavar="FIX", default="",
                    help="also run this tree without one fix, interleaved (in memory: timerfd, burst, switch, "
                         "request; over sockets: dispatch, " + ", ".join(SOCKET_FIXES) + "; comma-separated)")
    ap.add_argument("--workers", type=int, default=1,
                    help="worker processes of `hopbench run` (not with --in-memory; default 1: the goal's "
                         "'one worker')")
    ap.add_argument("--child", metavar="FOLDER", help=argparse.SUPPRESS)  # one in-memory run, JSON out
    if sys.argv[1:2] == ["--hopbench-without"]:  # a child: `hopbench ...` with one fix undone
        _undo(sys.argv[2])
        from hopbench.cli import main as hopbench_main
        raise SystemExit(hopbench_main(sys.argv[3:]))
    args = ap.parse_args()
    if args.workers < 1 or (args.workers > 1 and args.in_memory):
        ap.error("--workers takes a count >= 1, and not with --in-memory")
    if args.child:
        folder = Path(args.child)
        prof = write_rate_case(folder, args.rps, args.seconds) if args.rate else write_case(
            folder, args.rps, args.seconds)
        print(json.dumps(run_in_memory(prof, args.explain, args.without)))
        return
    known = ("timerfd", "burst", "switch", "request") if args.in_memory else ("dispatch", *SOCKET_FIXES)
    for fix in filter(None, args.without.split(",")):
        if fix not in known:
            ap.error(f"--without: unknown fix {fix!r} here (expected one of: {', '.join(known)})")
    sides: list[tuple[str, Path, str]] = [("this", ROOT, "")]
    if args.without:
        sides += [(f"this without {w}", ROOT, w) for w in args.without.split(",")]
    with contextlib.ExitStack() as stack:
        if args.against:
            wt = Path(stack.enter_context(tempfile.TemporaryDirectory())) / "rev"
            subprocess.run(["git", "worktree", "add", "--detach", str(wt), args.against], cwd=ROOT,
                           check=True, capture_output=True)
            stack.callback(subprocess.run, ["git", "worktree", "remove", "--force", str(wt)], cwd=ROOT,
                           capture_output=True)
            sides.insert(0, (args.against, wt, ""))
        for k in range(args.repeat):
            for name, root, without in sides:
                modes = [False, True] if args.rate else [False]
                for rate in modes:
                    with tempfile.TemporaryDirectory() as tmp:
                        load = _loadavg()
                        r = _side(root, args, Path(tmp), rate, without)
                        where = ("in memory" if args.in_memory else "canned target" if args.canned
                                 else "embedded emulator")
                        if args.workers > 1:
                            where += f", {args.workers} workers"
                        print(describe(f"run {k + 1} [{name}] {where} (load {load}) ", r), flush=True)


if __name__ == "__main__":
    main()
