"""Long streams and long runs: memory per stream, ITL per interval, RSS over a soak (issue 16).

Role: a benchmark, never a timed test. Every mode runs hopbench in this process
against its embedded emulator (a child process: its memory is not counted) on
127.0.0.1 and samples this process's RSS (/proc/self/status) every 0.25 s.

Modes:

- ``meter``: one ``StreamMeter`` fed N tokens (no sockets): bytes it holds
  after the stream (tracemalloc), per token. Pure, a few seconds.
- ``longstreams``: ``--streams`` streams of ``--tokens`` tokens at
  ``--tokens-per-s`` each (default 8 x 20,000 at 1,000 tokens/s: 20 s):
  peak RSS over the baseline (per stream), and how the ITL samples spread over
  intervals.hlog's intervals while the streams ran (before issue 16 every
  sample landed in the last interval).
- ``soak``: a closed loop of ``--concurrency`` streams at ``--tokens-per-s``
  (default 200 x 50 tokens/s, 500 tokens a stream) for ``--duration-s``: RSS
  at 1 minute, at the end and its slope over the second half, the collector's
  pauses, then the peak RSS of building report.html from the folder (a fresh
  process: ``bench_report.py build``). Run ~3-5 minutes and extrapolate; an
  hour-long soak is the same command with ``--duration-s 3600``.
- ``concurrent``: many paced streams at once, a closed loop of ``--streams``
  (default 5,000 x 20 tokens/s, 200 tokens a stream: ~10 s each) for
  ``--duration-s`` (default 60): this process's RSS over its baseline divided
  by the run's peak in flight (summary.json ``load.peak_in_flight``): the
  memory one in-flight stream costs, its socket, decoder, meter and task
  included; and the run's own saturation verdict (``saturated`` and
  ``generator.saturation``: symptoms and causes), so a figure taken while the
  client could not keep up says so.

Run from the repository root::

    .venv/bin/python benchmarks/bench_longrun.py meter --tokens 20000
    .venv/bin/python benchmarks/bench_longrun.py longstreams
    .venv/bin/python benchmarks/bench_longrun.py soak --duration-s 240
    .venv/bin/python benchmarks/bench_longrun.py concurrent --streams 5000 --duration-s 60
    # before/after: another checkout's package first on the path
    PYTHONPATH=/tmp/hb-before .venv/bin/python benchmarks/bench_longrun.py longstreams --no-repo-path

State the machine's load average with the figures (``uptime``): the machines are shared.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
import tracemalloc
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
if "--no-repo-path" not in sys.argv:
    sys.path.insert(0, str(HERE.parent))


def _rss_mb() -> float:
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


class RssSampler:
    """Samples this process's RSS every ``period_s`` in a thread: (seconds, MB) pairs."""

    def __init__(self, period_s: float = 0.25) -> None:
        self.period_s = period_s
        self.samples: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._loop, daemon=True)
        self._t0 = time.monotonic()

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.samples.append((time.monotonic() - self._t0, _rss_mb()))
            self._stop.wait(self.period_s)

    def __enter__(self) -> RssSampler:
        self._t0 = time.monotonic()
        self._t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._t.join()

    @property
    def peak_mb(self) -> float:
        return max((mb for _, mb in self.samples), default=0.0)


def _profile_text(name: str, concurrency: int, tokens: int, tokens_per_s: float, duration_s: float | None,
                  requests: int | None) -> str:
    run = f'[run]\nname = "{name}"\nwarmup_s = 0\nstream_log = true\n'
    run += f"duration_s = {duration_s}\n" if duration_s else f"requests = {requests}\n"
    run += "[run.timeouts]\nfirst_byte_s = 30\nidle_s = 30\ntotal_s = 7200\n"
    return (run + f"[load]\nconcurrency = {concurrency}\n[target]\nembedded = true\n"
            f"[emulator]\nttft_ms = 50\ntokens_per_s = {tokens_per_s}\noutput_tokens = {tokens}\n"
            f'[[scenario]]\nprotocol = "chat"\nmodel = "m"\nmax_tokens = {tokens}\n')


def _itl_per_interval(folder: Path) -> list[tuple[float, int]]:
    from hopbench.measure._hdr import Histogram

    out = []
    for line in (folder / "intervals.hlog").read_text().splitlines():
        if line.startswith("Tag=all.itl,"):
            _tag, start, _len, _max, b64 = line[4:].split(",", 4)
            out.append((float(start), Histogram.decode("itl", b64).count))
    return out


def meter(tokens: int) -> dict[str, Any]:
    """Bytes a StreamMeter holds after ``tokens`` content events (tracemalloc)."""
    from hopbench.measure._meter import StreamMeter
    from hopbench.protocols import ContentDelta

    obs = [ContentDelta("text", 1)]
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    m = StreamMeter(0, 0)
    m.on_headers(1)
    for i in range(tokens):
        t = 1_000_000 + i * 20_000_017  # distinct gaps: no small-int caching hides the cost
        m.on_read(t)
        m.on_observations(t, obs)
    held = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    return {"tokens": tokens, "meter_bytes": held, "bytes_per_token": round(held / tokens, 1)}


def longstreams(streams: int, tokens: int, tokens_per_s: float, out: Path) -> dict[str, Any]:
    from hopbench.config._profile import parse_profile
    from hopbench.driver._single import run_profile

    profile = parse_profile(_profile_text("longstreams", streams, tokens, tokens_per_s, None, streams),
                            "longstreams.toml", env={})
    base = _rss_mb()
    with RssSampler() as rss:
        summary = run_profile(profile, out_dir=out).summary
    ivs = _itl_per_interval(out)
    total = sum(n for _, n in ivs)
    return {"streams": streams, "tokens": tokens, "completed": summary["headline"]["completed"],
            "rss_base_mb": round(base, 1), "rss_peak_mb": round(rss.peak_mb, 1),
            "per_stream_mb": round((rss.peak_mb - base) / streams, 2),
            "itl_samples": total, "intervals": len(ivs),
            "intervals_with_itl": sum(1 for _, n in ivs if n),
            "largest_interval_share": round(max((n for _, n in ivs), default=0) / max(total, 1), 3),
            "itl_per_interval": [n for _, n in ivs]}


def soak(concurrency: int, tokens: int, tokens_per_s: float, duration_s: float, out: Path) -> dict[str, Any]:
    from hopbench.config._profile import parse_profile
    from hopbench.driver._single import run_profile

    profile = parse_profile(_profile_text("soak", concurrency, tokens, tokens_per_s, duration_s, None),
                            "soak.toml", env={})
    with RssSampler(1.0) as rss:
        summary = run_profile(profile, out_dir=out).summary
    s = rss.samples

    def at(t: float) -> float:
        return min(s, key=lambda x: abs(x[0] - t))[1]

    half = [x for x in s if x[0] >= duration_s / 2]
    n = len(half)
    slope = 0.0
    if n > 2:  # least squares, MB per minute
        mx = sum(x for x, _ in half) / n
        my = sum(y for _, y in half) / n
        slope = 60 * sum((x - mx) * (y - my) for x, y in half) / max(sum((x - mx) ** 2 for x, _ in half), 1e-9)
    build = subprocess.run([sys.executable, str(HERE / "bench_report.py"), "build", str(out)]
                           + (["--no-repo-path"] if "--no-repo-path" in sys.argv else []),
                           capture_output=True, text=True, env=os.environ.copy())
    report = json.loads(build.stdout.strip().splitlines()[-1]) if build.returncode == 0 else build.stderr[-500:]
    gen = summary["generator"]
    return {"concurrency": concurrency, "duration_s": duration_s, "completed": summary["headline"]["completed"],
            "output_tokens_per_s": summary["headline"]["output_tokens_per_s"],
            "rss_1min_mb": round(at(60.0), 1),
            "rss_10min_mb": round(at(600.0), 1) if duration_s >= 600 else None,
            "rss_end_mb": round(s[-1][1], 1) if s else None,
            "rss_slope_mb_per_min_second_half": round(slope, 3),
            "gc_collections": gen["gc_collections"], "gc_pause_total_ms": gen["gc_pause_total_ms"],
            "gc_pause_max_ms": gen["gc_pause_max_ms"], "gc_pause_p99_ms": gen.get("gc_pause_p99_ms"), "cpu_mean": gen["cpu_mean"],
            "saturated": summary["saturated"], "warnings": summary["warnings"],
            "intervals_hlog_mb": round((out / "intervals.hlog").stat().st_size / 1e6, 2),
            "report_build": report}


def concurrent(streams: int, tokens: int, tokens_per_s: float, duration_s: float, out: Path) -> dict[str, Any]:
    """``streams`` paced streams in a closed loop: RSS per in-flight stream and the saturation verdict."""
    from hopbench.config._profile import parse_profile
    from hopbench.driver._single import run_profile

    profile = parse_profile(_profile_text("concurrent", streams, tokens, tokens_per_s, duration_s, None),
                            "concurrent.toml", env={})
    base = _rss_mb()
    with RssSampler(0.5) as rss:
        summary = run_profile(profile, out_dir=out).summary
    load = summary["load"]
    peak_in_flight = load.get("peak_in_flight") or 0
    grown_mb = rss.peak_mb - base
    gen = summary["generator"]
    return {"streams": streams, "tokens": tokens, "tokens_per_s": tokens_per_s, "duration_s": duration_s,
            "completed": summary["headline"]["completed"],
            "output_tokens_per_s": summary["headline"]["output_tokens_per_s"],
            "peak_in_flight": peak_in_flight, "mean_in_flight": load.get("mean_in_flight"),
            "rss_base_mb": round(base, 1), "rss_peak_mb": round(rss.peak_mb, 1),
            "rss_per_in_flight_stream_kb": round(grown_mb * 1024 / peak_in_flight, 1) if peak_in_flight else None,
            "cpu_mean": gen["cpu_mean"], "loop_lag_p99_ms": gen["loop_lag_p99_ms"],
            "gc_pause_max_ms": gen.get("gc_pause_max_ms"),
            "saturated": summary["saturated"], "saturation": gen.get("saturation"),
            "warnings": summary["warnings"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("mode", choices=("meter", "longstreams", "soak", "concurrent"))
    ap.add_argument("--out", type=Path, default=None, help="results folder (default: a new temp folder)")
    ap.add_argument("--streams", type=int, default=None, help="longstreams: 8; concurrent: 5000")
    ap.add_argument("--tokens", type=int, default=None)
    ap.add_argument("--tokens-per-s", type=float, default=None)
    ap.add_argument("--concurrency", type=int, default=200)
    ap.add_argument("--duration-s", type=float, default=None, help="soak: 240; concurrent: 60")
    ap.add_argument("--no-repo-path", action="store_true",
                    help="do not add this checkout to sys.path (use PYTHONPATH's hopbench)")
    a = ap.parse_args()
    import tempfile

    load = os.getloadavg()
    if a.mode == "meter":
        res = meter(a.tokens or 20_000)
        out = None
    else:
        out = a.out or Path(tempfile.mkdtemp(prefix=f"hb-{a.mode}-")) / "run"
    if out is None:
        pass
    elif a.mode == "longstreams":
        res = longstreams(a.streams or 8, a.tokens or 20_000, a.tokens_per_s or 1000.0, out)
    elif a.mode == "concurrent":
        res = concurrent(a.streams or 5000, a.tokens or 200, a.tokens_per_s or 20.0, a.duration_s or 60.0, out)
    else:
        res = soak(a.concurrency, a.tokens or 500, a.tokens_per_s or 50.0, a.duration_s or 240.0, out)
    import hopbench

    res.update(hopbench=str(Path(hopbench.__file__).parent), load_avg_before=[round(x, 2) for x in load],
               load_avg_after=[round(x, 2) for x in os.getloadavg()], out=None if out is None else str(out))
    print(json.dumps(res))


if __name__ == "__main__":
    main()
