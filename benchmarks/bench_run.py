"""The run engine's overhead: hopbench against a bare trio + h11 reader, same streams.

Role: a benchmark, never a timed test (tracker issue 5). A pre-rendered SSE
responder (``_sse_responder.py``) runs in its own process, pinned to its own
core, and serves the same Chat Completions stream (200 content events of about
300 bytes, then the usage chunk and ``[DONE]``: 202 events) to three clients,
each run in a fresh child process pinned to the other core:

- ``bare``: trio + h11 and nothing else. ``concurrency`` tasks each send the
  very request hopbench sends on one keep-alive connection, read until
  ``EndOfMessage``, count events with ``bytes.count(b"\\n\\n")`` and take TTFT
  as the time to the first body bytes containing ``data:``. The floor.
- ``hopbench``: ``hopbench.engine._runner.LoadRunner`` driven directly with a profile
  from ``parse_profile`` and fresh ``Recorder``s: the whole engine (scanner,
  chat decoder, meter, recorder, interval ticker, lag probe) on hopbench's own
  ``StreamTransport`` (one h11 connection per stream).
- ``httpx``: the same engine with ``target.transport = "httpx"``: httpx's
  default transport (httpcore's connection pool).

Two stream shapes:

- unpaced: server TTFT 0, the whole body in one write: as many events per
  second as the client can take (the events/s and CPU figures);
- paced: server TTFT 50 ms, then one event per write every 20 ms (as real LLM
  streams arrive); starts ramped over 0.5 s. Events/s is then set by the
  server; the figure that matters is the TTFT each client sees against the
  TTFT the responder actually achieved (its own measurement, ``/_stats``).

Figures per configuration: events/s (wall), CPU us per event (the client
process's ``time.process_time`` over the run), client CPU as a fraction of a
core, TTFT p50/p99 as the client saw it, the responder's TTFT p99 and CPU.
Targets (issue 5): hopbench >= 50 % of the bare loop's events/s (unpaced, at
64 and 512 streams); hopbench's TTFT p99 at 512 paced streams within 5 ms of
the server's.

Run from the repository root (about 2 minutes; 127.0.0.1 only)::

    .venv/bin/python benchmarks/bench_run.py
    .venv/bin/python benchmarks/bench_run.py --clients bare,hopbench --concurrency 64
    .venv/bin/python benchmarks/bench_run.py --profile-hopbench 512   # cProfile one run
    .venv/bin/python benchmarks/bench_run.py --against HEAD~1 --clients hopbench --repeat 5

``--against REV`` is the before/after of a change in one run: REV's package (a
temporary git worktree) and this checkout's run the same configurations, their
children alternating (REV first in even rounds, this tree first in odd ones), so
that what the machine does meanwhile falls on both; the medians then show both
sides and the change of CPU us per event. The children import the engine by its
name in either tree (before and after the move into folders).
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
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

HERE = Path(__file__).resolve().parent
N_EVENTS = 200
EVENTS_PER_STREAM = N_EVENTS + 2  # + usage chunk + [DONE]
PACED_GAP_MS = 20
PACED_TTFT_MS = 50
PACED_RAMP_S = 0.5
CHILD_TIMEOUT_S = 60.0


def _profile_text(url: str, path: str, requests: int, concurrency: int, ramp_s: float,
                  transport: str) -> str:
    return f"""
[run]
name = "bench"
requests = {requests}
grace_s = 30
interval_s = 1
[run.timeouts]
connect_s = 10
first_byte_s = 30
idle_s = 30
total_s = 60
[load]
mode = "concurrency"
concurrency = {concurrency}
ramp_up_s = {ramp_s}
[target]
url = "{url}"
transport = "{transport}"
[target.paths]
chat = "{path}"
[[scenario]]
name = "chat"
protocol = "chat"
model = "bench-model"
max_tokens = 256
include_usage = true
prompts = ["Explain server-sent events in three sentences."]
"""


def _pct(values: list[int], p: float) -> float | None:
    if not values:
        return None
    v = sorted(values)
    return v[min(len(v) - 1, int(p / 100 * len(v)))] / 1e6


# -- the child processes -------------------------------------------------------------

def _engine() -> tuple[Any, Any, Any, Any]:
    """``parse_profile``, ``LoadRunner``, ``Recorder`` and ``ALL`` of the hopbench on sys.path:
    this tree's, or an older revision's from before the folders (``--against``)."""
    try:
        from hopbench.config._profile import parse_profile
        from hopbench.engine._runner import LoadRunner
        from hopbench.measure._recorder import ALL, Recorder
    except ImportError:  # a revision from before the folders (--against)
        from hopbench._profile import parse_profile  # type: ignore[no-redef]
        from hopbench._recorder import ALL, Recorder  # type: ignore[no-redef]
        from hopbench._runner import LoadRunner  # type: ignore[no-redef]
    return parse_profile, LoadRunner, Recorder, ALL


def child_hopbench(url: str, path: str, requests: int, concurrency: int, ramp_s: float,
                   transport: str, profile_out: str | None) -> dict[str, Any]:
    """One run of hopbench's engine; returns the figures (times in ms)."""
    import trio

    parse_profile, LoadRunner, Recorder, ALL = _engine()

    profile = parse_profile(_profile_text(url, path, requests, concurrency, ramp_s, transport))
    rec, warm = Recorder(["chat"]), Recorder(["chat"])
    runner = LoadRunner(profile, url, rec, warm)
    prof = None
    if profile_out:
        import cProfile
        prof = cProfile.Profile()
        prof.enable()
    cpu0, t0 = time.process_time(), time.perf_counter()
    trio.run(runner.run)
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    if prof is not None:
        prof.disable()
        prof.dump_stats(profile_out)
    snap = rec.snapshot()
    ttft = snap.histogram(ALL, "ttft")
    completed = snap.counter(ALL, "completed")
    return {
        "streams": completed,
        "broken": snap.counter(ALL, "started") - completed,
        # every completed stream delivered the whole pre-rendered body
        "events": completed * EVENTS_PER_STREAM,
        "itl_samples": snap.histogram(ALL, "itl").count,
        "wall_s": wall, "cpu_s": cpu,
        "ttft_p50_ms": ttft.percentile(50) / 1e6 if ttft.count else None,
        "ttft_p99_ms": ttft.percentile(99) / 1e6 if ttft.count else None,
    }


def child_bare(url: str, path: str, requests: int, concurrency: int, ramp_s: float) -> dict[str, Any]:
    """The floor: trio + h11 reading the same streams, counting events."""
    from urllib.parse import urlsplit

    import h11
    import trio

    try:
        from hopbench.config._profile import parse_profile
        from hopbench.config._scenario_spec import request_headers
    except ImportError:  # a revision from before the folders (--against)
        from hopbench._profile import parse_profile, request_headers  # type: ignore[no-redef]

    profile = parse_profile(_profile_text(url, path, requests, concurrency, ramp_s, "hopbench"))
    sc = profile.scenarios[0]
    body = sc.bodies[0]
    headers = request_headers(profile.target, "chat")
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    head = [("host", f"{host}:{port}"), ("content-length", str(len(body)))] + list(headers.items())
    counts = {"events": 0, "streams": 0, "broken": 0}
    ttfts: list[int] = []
    left = [requests]

    async def user(start_s: float) -> None:
        await trio.sleep_until(start_s)
        stream = None
        conn = None
        try:
            while left[0] > 0:
                left[0] -= 1
                # like hopbench's TTFT: from before the connection is obtained
                t_send = trio.current_time()
                if conn is None or conn.our_state is not h11.IDLE:
                    if stream is not None:
                        await stream.aclose()
                    stream = await trio.open_tcp_stream(host, port)
                    conn = h11.Connection(h11.CLIENT)
                data = conn.send(h11.Request(method="POST", target=sc.path, headers=head))
                data += conn.send(h11.Data(data=body)) + conn.send(h11.EndOfMessage())
                await stream.send_all(data)
                events = 0
                first = True
                tail = b""
                while True:
                    ev = conn.next_event()
                    if ev is h11.NEED_DATA:
                        conn.receive_data(await stream.receive_some(65536))
                        continue
                    if type(ev) is h11.Data:
                        chunk = ev.data
                        if first and b"data:" in chunk:
                            ttfts.append(int((trio.current_time() - t_send) * 1e9))
                            first = False
                        events += chunk.count(b"\n\n")
                        if tail == b"\n" and chunk[:1] == b"\n":
                            events += 1  # a separator split across two reads
                        tail = chunk[-1:]
                    elif type(ev) is h11.EndOfMessage:
                        break
                    elif isinstance(ev, h11.ConnectionClosed):
                        counts["broken"] += 1
                        break
                counts["events"] += events
                counts["streams"] += 1
                if conn.our_state is h11.DONE and conn.their_state is h11.DONE:
                    conn.start_next_cycle()
        finally:
            if stream is not None:
                await stream.aclose()

    async def main() -> None:
        t0 = trio.current_time()
        async with trio.open_nursery() as n:
            for i in range(concurrency):
                n.start_soon(user, t0 + ramp_s * i / concurrency)

    cpu0, t0 = time.process_time(), time.perf_counter()
    trio.run(main)
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    return dict(counts, wall_s=wall, cpu_s=cpu, itl_samples=None,
                ttft_p50_ms=_pct(ttfts, 50), ttft_p99_ms=_pct(ttfts, 99))


def _child_main(args: argparse.Namespace) -> None:
    if args.src:
        sys.path.insert(0, args.src)  # before any hopbench import: the side being measured
    if args.cpu is not None and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {args.cpu})
    if args.child == "bare":
        out = child_bare(args.url, args.path, args.requests, args.concurrency, args.ramp_s)
    else:
        out = child_hopbench(args.url, args.path, args.requests, args.concurrency, args.ramp_s,
                             "httpx" if args.child == "httpx" else "hopbench", args.cprofile)
    print(json.dumps(out))


# -- the parent ------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Config:
    """One cell of the table."""

    client: str
    concurrency: int
    paced: bool
    requests: int
    #: the revision whose package runs (``--against``), or "" for this checkout
    side: str = ""

    @property
    def path(self) -> str:
        gap, ttft = (PACED_GAP_MS, PACED_TTFT_MS) if self.paced else (0, 0)
        return f"/s/{gap}/{ttft}/v1/chat/completions"


def _stats(base: str) -> dict[str, Any]:
    with urllib.request.urlopen(base + "/_stats", timeout=10) as r:
        return json.loads(r.read())


def _run_child(base: str, cfg: Config, cpu: int | None, cprofile: str | None = None,
               src: str | None = None) -> dict[str, Any]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", cfg.client, "--url", base,
           "--path", cfg.path, "--requests", str(cfg.requests), "--concurrency", str(cfg.concurrency),
           "--ramp-s", str(PACED_RAMP_S if cfg.paced else 0.0)]
    if cpu is not None:
        cmd += ["--cpu", str(cpu)]
    if cprofile:
        cmd += ["--cprofile", cprofile]
    if src:
        cmd += ["--src", src]
    _stats(base)  # reset the responder's figures
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=CHILD_TIMEOUT_S)
    server = _stats(base)
    if proc.returncode != 0:
        raise SystemExit(f"{cfg}: child failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    out["server"] = server
    return out


def _medians(rows: list[dict[str, Any]]) -> None:
    """Per configuration, the median over the repeats (and the range)."""
    groups: dict[tuple[bool, int, str], list[dict[str, Any]]] = {}
    for row in rows:
        c = row["config"]
        client = c["client"] + (f"@{c['side']}" if c.get("side") else "")
        groups.setdefault((c["paced"], c["concurrency"], client), []).append(row)
    print(f"\nmedians over {len(next(iter(groups.values())))} repeats (min..max):")
    for (paced, conc, client), rs in groups.items():
        eps = sorted(r["events_per_s"] for r in rs)
        us = sorted(r["cpu_us_per_event"] for r in rs)
        infl = sorted(r["ttft_p99_minus_srv_ms"] for r in rs if r["ttft_p99_minus_srv_ms"] is not None)
        mid = len(rs) // 2
        infl_s = f"{infl[len(infl) // 2]:+.1f} ms ({infl[0]:+.1f}..{infl[-1]:+.1f})" if infl else "-"
        print(f"  {'paced' if paced else 'unpaced':8} {conc:5d} {client:9} events/s {eps[mid]:10,.0f}  "
              f"CPU us/ev {us[mid]:5.1f} ({us[0]:.1f}..{us[-1]:.1f})  TTFT p99 - srv {infl_s}")
    for (paced, conc, client), rs in groups.items():
        if "@" not in client:
            continue
        mine = groups.get((paced, conc, client.partition("@")[0]))
        if not mine:
            continue
        before = sorted(r["cpu_us_per_event"] for r in rs)[len(rs) // 2]
        after = sorted(r["cpu_us_per_event"] for r in mine)[len(mine) // 2]
        print(f"  {'paced' if paced else 'unpaced':8} {conc:5d} {client.partition('@')[0]:9} CPU us/ev "
              f"{before:.2f} at {client.partition('@')[2]} -> {after:.2f} here ({after / before - 1:+.1%})")


def _fmt(v: float | None, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def main() -> None:
    """Parse arguments, start the responder, run every configuration, print the table."""
    p = argparse.ArgumentParser(description="hopbench vs a bare trio + h11 loop (issue 5)")
    p.add_argument("--child", choices=("bare", "hopbench", "httpx"), help=argparse.SUPPRESS)
    p.add_argument("--url", help=argparse.SUPPRESS)
    p.add_argument("--path", help=argparse.SUPPRESS)
    p.add_argument("--requests", type=int, help=argparse.SUPPRESS)
    p.add_argument("--ramp-s", type=float, default=0.0, help=argparse.SUPPRESS)
    p.add_argument("--cpu", type=int, help=argparse.SUPPRESS)
    p.add_argument("--cprofile", help=argparse.SUPPRESS)
    p.add_argument("--concurrency", default="64,512", help="comma-separated (default 64,512)")
    p.add_argument("--clients", default="bare,hopbench,httpx", help="comma-separated subset")
    p.add_argument("--modes", default="unpaced,paced", help="comma-separated subset")
    p.add_argument("--unpaced-requests", type=int, default=1024,
                   help="streams per unpaced configuration (default 1024)")
    p.add_argument("--no-pin", action="store_true", help="do not pin responder and clients to cores")
    p.add_argument("--profile-hopbench", type=int, metavar="C",
                   help="only cProfile hopbench, unpaced, at concurrency C, and print the top functions")
    p.add_argument("--profile-mode", choices=("unpaced", "paced"), default="unpaced",
                   help="stream shape for --profile-hopbench (default unpaced)")
    p.add_argument("--repeat", type=int, default=1,
                   help="run the whole table N times (rows interleaved) and add the medians: "
                        "a p99 of 512 streams is their 6th worst, and this machine is shared")
    p.add_argument("--json", type=Path, help="also write the raw figures here")
    p.add_argument("--against", metavar="REV", default="",
                   help="before/after in one run: REV's package (a temporary git worktree) against this "
                        "checkout's, children alternating")
    p.add_argument("--src", help=argparse.SUPPRESS)  # a child's side: the checkout whose package runs
    args = p.parse_args()
    if args.child:
        args.concurrency = int(args.concurrency)
        _child_main(args)
        return

    pin = not args.no_pin and hasattr(os, "sched_setaffinity") and len(os.sched_getaffinity(0)) >= 2
    cores = sorted(os.sched_getaffinity(0)) if pin else []
    server_cpu, client_cpu = (cores[-1], cores[0]) if pin else (None, None)
    with responder(server_cpu) as base:
        if args.profile_hopbench:
            paced = args.profile_mode == "paced"
            c = args.profile_hopbench
            _profile(base, Config("hopbench", c, paced, c if paced else args.unpaced_requests), client_cpu)
            return
        with contextlib.ExitStack() as stack:
            against = _worktree(stack, args.against) if args.against else None
            _table(base, args, client_cpu, server_cpu, against)


@contextlib.contextmanager
def responder(cpu: int | None = None) -> Iterator[str]:
    """The pre-rendered SSE responder (``_sse_responder.py``) in its own process, pinned to
    ``cpu`` when given; yields its base URL (127.0.0.1) and stops it on exit."""
    proc = subprocess.Popen([sys.executable, str(HERE / "_sse_responder.py"), "--port", "0",
                             "--events", str(N_EVENTS)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line.startswith("PORT "):
            raise SystemExit(f"responder did not start: {line!r}")
        if cpu is not None:
            os.sched_setaffinity(proc.pid, {cpu})
        yield f"http://127.0.0.1:{int(line.split()[1])}"
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        if proc.stdout is not None:
            proc.stdout.close()


def _profile(base: str, cfg: Config, cpu: int | None) -> None:
    import pstats
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        out = str(Path(d) / "hopbench.prof")
        res = _run_child(base, cfg, cpu, out)
        print(f"hopbench {'paced' if cfg.paced else 'unpaced'} c={cfg.concurrency}: "
              f"{res['events'] / res['wall_s']:,.0f} events/s, {res['cpu_s'] / res['events'] * 1e6:.1f} "
              f"CPU us/event (under cProfile)")
        st = pstats.Stats(out)
        st.sort_stats("tottime").print_stats(25)


def _worktree(stack: contextlib.ExitStack, rev: str) -> str:
    """REV checked out in a temporary git worktree (removed on exit); its path."""
    tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench_run-")))
    wt = tmp / "rev"
    subprocess.run(["git", "worktree", "add", "--detach", str(wt), rev], cwd=HERE.parent, check=True,
                   capture_output=True)
    stack.callback(subprocess.run, ["git", "worktree", "remove", "--force", str(wt)], cwd=HERE.parent,
                   capture_output=True)
    return str(wt)


def _table(base: str, args: argparse.Namespace, client_cpu: int | None, server_cpu: int | None,
           against: str | None = None) -> None:
    clients = args.clients.split(",")
    concs = [int(c) for c in args.concurrency.split(",")]
    modes = args.modes.split(",")
    configs = []
    for mode in modes:
        for c in concs:
            for cl in clients:
                if mode == "paced":
                    n = c if c >= 256 else 2 * c
                else:
                    # httpx's pool at 512 streams is ~10x slower: half the
                    # streams keep that cell under 30 s (events/s compares)
                    n = args.unpaced_requests // (2 if cl == "httpx" and c >= 256 else 1)
                configs.append(Config(cl, c, mode == "paced", n))
    rounds = []
    for r in range(max(args.repeat, 1)):
        for cfg in configs:
            if against is None or cfg.client == "bare":
                rounds.append(cfg)
                continue
            pair = [Config(cfg.client, cfg.concurrency, cfg.paced, cfg.requests, args.against), cfg]
            rounds += pair if r % 2 == 0 else pair[::-1]
    configs = rounds
    print(f"responder {base} on core {server_cpu}, clients on core {client_cpu}; "
          f"{N_EVENTS} content events + usage + [DONE] = {EVENTS_PER_STREAM} events per stream; "
          f"paced: server TTFT {PACED_TTFT_MS} ms, {PACED_GAP_MS} ms between events, ramp {PACED_RAMP_S} s; "
          f"unpaced: server TTFT 0, one write")
    hdr = (f"{'mode':8} {'conc':>5} {'client':9} {'streams':>7} {'wall s':>7} {'events/s':>10} "
           f"{'CPU us/ev':>9} {'CPU %':>6} {'TTFT p50':>9} {'TTFT p99':>9} {'srv p99':>8} "
           f"{'p99-srv':>8} {'srv CPU%':>8} {'vs bare':>7}")
    print(hdr)
    print("-" * len(hdr))
    rows = []
    bare_eps: dict[tuple[bool, int], float] = {}
    t_all = time.perf_counter()
    for cfg in configs:
        r = _run_child(base, cfg, client_cpu, src=against if cfg.side else str(HERE.parent))
        eps = r["events"] / r["wall_s"]
        us = r["cpu_s"] / max(r["events"], 1) * 1e6
        srv = r["server"]
        srv_p99 = srv["ttft_ms"]["p99"]
        if cfg.client == "bare":
            bare_eps[(cfg.paced, cfg.concurrency)] = eps
        ref = bare_eps.get((cfg.paced, cfg.concurrency))
        ratio = f"{eps / ref:.0%}" if ref and cfg.client != "bare" else "-"
        infl = (r["ttft_p99_ms"] - srv_p99) if r["ttft_p99_ms"] is not None and srv_p99 is not None else None
        label = cfg.client + (f"@{cfg.side}" if cfg.side else "")
        print(f"{'paced' if cfg.paced else 'unpaced':8} {cfg.concurrency:5d} {label[:9]:9} "
              f"{r['streams']:7d} {r['wall_s']:7.2f} {eps:10,.0f} {us:9.1f} "
              f"{r['cpu_s'] / r['wall_s']:6.0%} {_fmt(r['ttft_p50_ms'], '9.1f')} "
              f"{_fmt(r['ttft_p99_ms'], '9.1f')} {_fmt(srv_p99, '8.1f')} {_fmt(infl, '+8.1f')} "
              f"{srv['cpu_s'] / r['wall_s']:8.0%} {ratio:>7}", flush=True)
        if r["broken"] or r["streams"] != cfg.requests:
            print(f"  !! {cfg.requests} streams sent, {r['streams']} complete, {r['broken']} broken")
        if cfg.client == "bare" and r["events"] != r["streams"] * EVENTS_PER_STREAM:
            print(f"  !! bare loop counted {r['events']} events, expected {r['streams'] * EVENTS_PER_STREAM}")
        rows.append({"config": {"client": cfg.client, "concurrency": cfg.concurrency,
                                "paced": cfg.paced, "requests": cfg.requests, "side": cfg.side}, "result": r,
                     "events_per_s": eps, "cpu_us_per_event": us, "ttft_p99_minus_srv_ms": infl})
    if args.repeat > 1:
        _medians(rows)
    print(f"total {time.perf_counter() - t_all:.0f} s")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
