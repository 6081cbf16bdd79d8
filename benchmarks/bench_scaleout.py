"""Scale-out: SSE events per second handled with 1 and 2 local worker processes.

Role: a benchmark, never a timed test (tracker issue 8). The server is the
pre-rendered SSE responder (``_sse_responder.py``: asyncio, every stream one
pre-built body of ``--events`` ``chat.completion.chunk`` events + usage +
``[DONE]``, written unpaced), so the server is as cheap as a server gets; it
is the same process for every configuration. Each configuration is a full
``run_profile_workers`` run (driver + W spawned workers, closed loop of
``--concurrency`` streams split over the workers, a fixed request budget), so
the figure includes everything a real ``--workers`` run pays: snapshot
shipping, exact merging, the results folder.

Figures per W: events/s = content events of completed streams (the
``tokens.output.completed`` counter: one token per event here) / the run's
measured time (the slowest worker's ``ended_ns``); streams/s; each worker's
mean CPU (fraction of a core); the responder's CPU over the run (its
``/_stats``). The scaling ratio is events/s(W=2) / events/s(W=1).

Run from the repository root (about a minute; 127.0.0.1 only)::

    .venv/bin/python benchmarks/bench_scaleout.py
    .venv/bin/python benchmarks/bench_scaleout.py --workers 1,2,4 --requests 2000 --events 200
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from hopbench.config._profile import parse_profile  # noqa: E402
from hopbench.driver._workers import run_profile_workers  # noqa: E402

_PROFILE = """
[run]
name = "scaleout"
requests = {requests}
workers = {workers}

[load]
mode = "concurrency"
concurrency = {concurrency}

[target]
url = "{url}"
paths = {{ chat = "/s/0/0/v1/chat/completions" }}

[[scenario]]
name = "chat"
protocol = "chat"
model = "gpt-emu"
max_tokens = 1000
"""


def _stats(url: str) -> dict[str, float]:
    with urllib.request.urlopen(url + "/_stats", timeout=5) as r:
        return json.loads(r.read())


def _one(url: str, workers: int, args: argparse.Namespace) -> dict[str, float]:
    profile = parse_profile(_PROFILE.format(requests=args.requests * workers if args.scale_requests
                                            else args.requests, workers=workers,
                                            concurrency=args.concurrency, url=url))
    _stats(url)  # reset the responder's figures
    with tempfile.TemporaryDirectory(prefix="hopbench-scaleout-") as tmp:
        t0 = time.perf_counter()
        outcome = run_profile_workers(profile, out_dir=Path(tmp) / "run")
        wall_s = time.perf_counter() - t0
    server = _stats(url)
    s = outcome.summary
    c = s["scopes"]["all"]["counters"]
    detail = s["worker_detail"]
    # from the common start to the end of the slowest worker's last stream
    measured_s = max(d["ended_ms"] + d["share"].get("start_delay_ms", 0) for d in detail) / 1000
    events = c.get("tokens.output.completed", 0)
    return {
        "workers": workers, "completed": c.get("completed", 0), "events": events,
        "measured_s": measured_s, "events_per_s": events / measured_s,
        "streams_per_s": c.get("completed", 0) / measured_s,
        "worker_cpu": [d["cpu_mean"] for d in detail],
        "saturated": s["saturated"], "server_cpu_s": server.get("cpu_s", 0.0),
        "wall_s": wall_s, "complete": outcome.complete,
    }


def main() -> None:
    p = argparse.ArgumentParser(description="events/s with 1 and 2 worker processes (issue 8)")
    p.add_argument("--workers", default="1,2", help="comma-separated worker counts (default 1,2)")
    p.add_argument("--concurrency", type=int, default=64)
    p.add_argument("--requests", type=int, default=1500, help="requests per run (default 1500)")
    p.add_argument("--scale-requests", action="store_true", help="requests per worker, not per run")
    p.add_argument("--events", type=int, default=200, help="content events per stream")
    p.add_argument("--repeat", type=int, default=1, help="best of N per worker count")
    p.add_argument("--json", type=Path, help="also write the raw figures here")
    args = p.parse_args()
    responder = subprocess.Popen([sys.executable, str(HERE / "_sse_responder.py"), "--port", "0",
                                  "--events", str(args.events)], stdout=subprocess.PIPE, text=True)
    try:
        assert responder.stdout is not None
        port = int(responder.stdout.readline().split()[1])
        url = f"http://127.0.0.1:{port}"
        rows = []
        for w in (int(x) for x in args.workers.split(",")):
            best = max((_one(url, w, args) for _ in range(args.repeat)), key=lambda r: r["events_per_s"])
            rows.append(best)
            print(f"workers {w}: {best['events_per_s']:,.0f} events/s, {best['streams_per_s']:,.0f} streams/s, "
                  f"worker CPU {', '.join(f'{x:.0%}' for x in best['worker_cpu'])}, "
                  f"server CPU {best['server_cpu_s'] / best['measured_s']:.0%}, "
                  f"saturated {best['saturated']}, {best['completed']} streams in {best['measured_s']:.2f} s",
                  flush=True)
        base = rows[0]["events_per_s"]
        for r in rows[1:]:
            print(f"scaling {r['workers']}/{rows[0]['workers']} workers: {r['events_per_s'] / base:.2f}x")
        if args.json:
            args.json.write_text(json.dumps(rows, indent=2))
    finally:
        responder.terminate()
        responder.wait(timeout=5)


if __name__ == "__main__":
    main()
