"""Gateway overhead's noise floor: what hopbench reports through a zero-delay pass-through (issue 15).

A gateway-overhead run (docs/gateway-overhead.md) subtracts the emulator's
stamps from the client's on one clock. Through a gateway that adds nothing,
what it reports is the measurement's own floor: the client's and the
emulator's scheduling on a shared machine, the kernel's loopback, and the
HTTP parsing on both ends. Two pass-throughs:

- ``direct``: no gateway at all (``[target].url`` is the emulator that
  ``[upstream].listen`` starts): the floor of the method itself;
- ``nginx``: nginx with ``proxy_buffering off`` (profiles/gateway-overhead.nginx.conf's
  settings), the real zero-delay reverse proxy, when nginx is installed;
- ``delay``: the tests' delaying proxy (tests/_delay_proxy.py) holding every SSE event
  ``--delay-ms`` (default 5 ms): the accuracy check, event_delay and
  ``added_ttft - request_delay`` should read the injected delay.

Each at ``--streams`` concurrent paced streams (default 64 and 512; the
emulator paces ``--rate`` tokens/s, ``--tokens`` per stream) for
``--duration-s``. Prints p50/p90/p99 of each overhead metric (ms), the match
rate, how many upstream requests were timed from the kernel's receive stamp
and how many from the emulator's app (``upstream_received``), how late the
emulator's app ran after its request's bytes arrived (p99 of the ground truth's
``t0_mono_ns - t0_wire_mono_ns``: what ``request_delay`` and ``added_ttft``
counted as the path's before issue 36), the client's loop lag p99 and CPU
share (how busy the client was) and whether hopbench judged the run saturated:
a saturated client's own lateness is part of every figure (as it is of any
client-side measurement).

Reproduce (2-core machine):

    .venv/bin/python benchmarks/bench_overhead.py
    .venv/bin/python benchmarks/bench_overhead.py --streams 64 --gateways direct --duration-s 10
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from hopbench.config._profile import parse_profile
from hopbench.driver._single import run_profile

METRICS = ("request_delay", "first_event_delay", "added_ttft", "event_delay", "added_e2e")
NGINX_CONF = """worker_processes 1; pid nginx.pid; error_log error.log warn; daemon off;
events {{ worker_connections 4096; }}
http {{ access_log off;
  client_body_temp_path body; proxy_temp_path proxy;
  fastcgi_temp_path fastcgi; uwsgi_temp_path uwsgi; scgi_temp_path scgi;
  upstream emu {{ server 127.0.0.1:{upstream}; keepalive 1024; }}
  server {{ listen 127.0.0.1:{listen};
    location = /healthz {{ return 200 "ok"; }}
    location / {{ proxy_pass http://emu; proxy_http_version 1.1; proxy_set_header Connection "";
                 proxy_buffering off; }} }} }}
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _profile(url: str, upstream: int, streams: int, args: argparse.Namespace) -> str:
    return (f'[run]\nname = "overhead-floor"\nduration_s = {args.duration_s}\nwarmup_s = 2\n'
            f'[load]\nconcurrency = {streams}\nramp_up_s = 2\n[target]\nurl = "{url}"\n'
            f'[upstream]\nlisten = "127.0.0.1:{upstream}"\nttft_ms = 100\ntokens_per_s = {args.rate}\n'
            f'output_tokens = {args.tokens}\n'
            '[[scenario]]\nname = "chat"\nprotocol = "chat"\nmodel = "m"\nprompts = ["hello"]\n')


def _run(url: str, upstream: int, streams: int, args: argparse.Namespace, out: Path) -> dict:
    profile = parse_profile(_profile(url, upstream, streams, args), out / "p.toml", env={})
    run_profile(profile, out_dir=out / "run")
    s = json.loads((out / "run" / "summary.json").read_text())
    s["_app_lag_p99_ms"] = _app_lag_p99_ms(out / "run" / "ground_truth.jsonl")
    return s


def _app_lag_p99_ms(path: Path) -> float | None:
    """p99 over the upstream requests of the emulator's app stamp minus its wire stamp (ground truth
    ``t0_mono_ns - t0_wire_mono_ns``), ms: what request_delay counted as the path's before issue 36.
    None without wire stamps (an emulator before them)."""
    lags = sorted(x["t0_mono_ns"] - x["t0_wire_mono_ns"] for x in map(json.loads, path.read_text().splitlines())
                  if x.get("t0_wire_mono_ns"))
    return lags[min(len(lags) - 1, -(-99 * len(lags) // 100) - 1)] / 1e6 if lags else None


def _row(name: str, streams: int, s: dict) -> str:
    m = s["scopes"]["all"]["metrics"]
    g = s.get("gateway_overhead") or {}
    cells = []
    for k in METRICS:
        v = m.get(k)
        cells.append(f"{v['p50']:.3f}/{v['p90']:.3f}/{v['p99']:.3f}" if v else "-")
    lag = m.get("loop_lag", {}).get("p99")
    cpu = (s.get("generator") or {}).get("cpu_mean")
    rx = g.get("upstream_received") or {}  # the upstream's receive: kernel stamps / the app's (a fallback)
    app_lag = s.get("_app_lag_p99_ms")
    return (f"| {name} | {streams} | " + " | ".join(cells)
            + f" | {g.get('match_rate')} | {rx.get('wire', '-')}/{rx.get('app', '-')}"
            + f" | {'-' if app_lag is None else f'{app_lag:.2f}'}"
            f" | {g.get('buffering', {}).get('flag')} | {lag:.2f} | {cpu} | {s.get('saturated')} |")


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--streams", default="64,512")
    ap.add_argument("--gateways", default="direct,nginx,delay")
    ap.add_argument("--duration-s", type=float, default=15.0)
    ap.add_argument("--rate", type=float, default=20.0, help="tokens/s per stream")
    ap.add_argument("--tokens", type=int, default=40)
    ap.add_argument("--delay-ms", type=float, default=5.0, help="the delay gateway's per-event delay")
    args = ap.parse_args(argv)
    nginx = shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else None)
    print("| gateway | streams | " + " | ".join(f"{m} p50/p90/p99 (ms)" for m in METRICS)
          + " | match | upstream rx wire/app | emulator app lag p99 (ms) | buffering | client loop lag p99 (ms) | client cpu | saturated |")
    print("|" + "---|" * (len(METRICS) + 9))
    for gw in args.gateways.split(","):
        for n in (int(x) for x in args.streams.split(",") if x):
            with tempfile.TemporaryDirectory(prefix="hb-overhead-") as tmp:
                out = Path(tmp)
                upstream = _free_port()
                if gw == "direct":
                    s = _run(f"http://127.0.0.1:{upstream}", upstream, n, args, out)
                elif gw == "nginx":
                    if nginx is None:
                        print(f"| nginx | {n} | (nginx not installed) |")
                        continue
                    listen = _free_port()
                    (out / "nginx.conf").write_text(NGINX_CONF.format(upstream=upstream, listen=listen))
                    proc = subprocess.Popen([nginx, "-p", str(out), "-c", "nginx.conf"],
                                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                    try:
                        for _ in range(200):
                            try:
                                urllib.request.urlopen(f"http://127.0.0.1:{listen}/healthz", timeout=1)
                                break
                            except OSError:
                                time.sleep(0.05)
                        s = _run(f"http://127.0.0.1:{listen}", upstream, n, args, out)
                    finally:
                        proc.send_signal(signal.SIGTERM)
                        proc.wait(timeout=10)
                elif gw == "delay":
                    listen = _free_port()
                    ready = out / "ready"
                    proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve().parents[1] / "tests"
                                                                 / "_delay_proxy.py"),
                                             "--port", str(listen), "--upstream", f"127.0.0.1:{upstream}",
                                             "--delay-ms", str(args.delay_ms), "--ready", str(ready),
                                             "--stats", str(out / "stats.json")])
                    try:
                        while not ready.exists():
                            time.sleep(0.02)
                        s = _run(f"http://127.0.0.1:{listen}", upstream, n, args, out)
                    finally:
                        proc.send_signal(signal.SIGTERM)
                        proc.wait(timeout=10)
                    late = sorted(json.loads((out / "stats.json").read_text())["late_ns"]) or [0]
                    held_ms = args.delay_ms + late[len(late) // 2] / 1e6
                    ev = s["scopes"]["all"]["metrics"]["event_delay"]["p50"]
                    gw = (f"delay {args.delay_ms:g} ms (held p50 {held_ms:.3f} ms incl. the proxy's own "
                          f"lateness; event_delay p50 - held = {ev - held_ms:+.3f} ms)")
                else:
                    raise SystemExit(f"--gateways: unknown {gw!r} (direct, nginx, delay)")
                print(_row(gw, n, s), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
