"""report.html's peak memory against the length of the run (issue 16 item 2).

Role: a benchmark, never a timed test. ``gen`` writes a synthetic results folder
of N one-second intervals (3,600: one hour) through hopbench's own
``ResultsWriter``: per interval, the histograms a run of two scenarios writes
(ttfb, ttft, ttft_content, itl, tpot, e2e, output_tokens_per_s, max_silence,
tail per scenario and in "all", plus loop_lag and schedule_lag: 29 hlog lines a
second, as a 200-stream run at 50 tokens/s writes them: ~10,000 ITL values a
second), a timeline.jsonl line per interval and a final summary.json. ``build``
builds report.html from such a folder in this process and prints its peak RSS
(``VmHWM``): run it in a fresh process per measurement.

Run from the repository root::

    .venv/bin/python benchmarks/bench_report.py gen /tmp/hb-1h --intervals 3600
    .venv/bin/python benchmarks/bench_report.py build /tmp/hb-1h
    # before/after: the same build with another checkout's package first on the path
    git archive <commit> hopbench | tar -x -C /tmp/hb-before
    PYTHONPATH=/tmp/hb-before .venv/bin/python benchmarks/bench_report.py build /tmp/hb-1h

The folder generator always uses this checkout's writer (the formats did not change).
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import sys
import time
from pathlib import Path
from typing import Any

if "--no-repo-path" not in sys.argv:  # ``build`` under PYTHONPATH measures that checkout
    sys.path.append(str(Path(__file__).resolve().parents[1]))

MS = 1_000_000
SCOPES = ("chat", "messages")
#: metric -> (values per scenario per second, a value generator)
SHAPE: dict[str, tuple[int, Any]] = {
    "ttfb": (100, lambda r: int(r.lognormvariate(4.0, 0.3) * MS)),
    "ttft": (100, lambda r: int(r.lognormvariate(5.0, 0.3) * MS)),
    "ttft_content": (100, lambda r: int(r.lognormvariate(5.0, 0.3) * MS)),
    "itl": (5_000, lambda r: int(r.lognormvariate(3.0, 0.5) * MS)),
    "tpot": (100, lambda r: int(r.lognormvariate(3.0, 0.1) * MS)),
    "e2e": (100, lambda r: int(r.lognormvariate(8.5, 0.2) * MS)),
    "output_tokens_per_s": (100, lambda r: int(r.lognormvariate(3.9, 0.1) * 1000)),
    "max_silence": (100, lambda r: int(r.lognormvariate(4.0, 0.5) * MS)),
    "tail": (100, lambda r: int(r.expovariate(1.0) * MS)),
}
GLOBAL = {"loop_lag": (100, lambda r: int(r.expovariate(1.0) * MS)),
          "schedule_lag": (100, lambda r: int(r.expovariate(2.0) * MS))}
VARIANTS = 16  # encoded histograms per metric, reused round robin (encoding is the slow part)


def gen(out: Path, intervals: int, seed: int = 1) -> None:
    """Write a synthetic results folder of ``intervals`` one-second intervals."""
    from hopbench.measure._hdr import Histogram
    from hopbench.config._profile import parse_profile
    from hopbench.measure._recorder import ALL, IntervalSnapshot, ScopeSnapshot, Snapshot
    from hopbench.driver._results import ResultsWriter
    from hopbench.driver._common import base_meta, mark_started

    rng = random.Random(seed)
    profile = parse_profile(
        "[run]\nname = \"synthetic-1h\"\nduration_s = %d\n[load]\nconcurrency = 200\n[target]\n"
        "url = \"http://127.0.0.1:9\"\n[[scenario]]\nname = \"chat\"\nprotocol = \"chat\"\nmodel = \"m\"\n"
        "[[scenario]]\nname = \"messages\"\nprotocol = \"messages\"\nmodel = \"c\"\n" % intervals,
        "synthetic.toml", env={})

    def variants(shape: dict[str, tuple[int, Any]], k: int) -> dict[str, list[tuple[str, Histogram]]]:
        out_v: dict[str, list[tuple[str, Histogram]]] = {}
        for metric, (n, draw) in shape.items():
            out_v[metric] = []
            for _ in range(VARIANTS):
                h = Histogram(metric)
                h.record_many([max(draw(rng), 1) for _ in range(n * k)])
                out_v[metric].append((h.encode(), h))
        return out_v

    per_scope = variants(SHAPE, 1)
    per_all = variants(SHAPE, len(SCOPES))
    glob = variants(GLOBAL, 1)
    writer = ResultsWriter(out)
    meta = base_meta(profile)
    mark_started(meta)
    writer.start(meta)
    totals = {s: {m: Histogram(m) for m in SHAPE} for s in SCOPES}
    tot_all = {m: Histogram(m) for m in (*SHAPE, *GLOBAL)}
    empty = {s: ScopeSnapshot({}, {}) for s in (*SCOPES, ALL)}
    t0 = time.monotonic()
    with open(out / "timeline.jsonl", "w", encoding="utf-8") as tl:
        for i in range(intervals):
            v = i % VARIANTS
            scopes: dict[str, ScopeSnapshot] = {}
            counters = {"started": 100, "completed": 100, "tokens.output.completed": 5_000}
            for s in SCOPES:
                scopes[s] = ScopeSnapshot(dict(counters), {m: per_scope[m][v][0] for m in SHAPE})
            hall = {m: per_all[m][v][0] for m in SHAPE}
            hall.update({m: glob[m][v][0] for m in GLOBAL})
            scopes[ALL] = ScopeSnapshot({k: n * len(SCOPES) for k, n in counters.items()}, hall)
            start, end = i * 1_000_000_000, (i + 1) * 1_000_000_000
            writer.write_interval(IntervalSnapshot(start, end, empty))
            writer.write_interval(IntervalSnapshot(start, end, scopes))
            tl.write(json.dumps({"start_ns": start, "end_ns": end, "in_flight_mean": 199.5,
                                 "in_flight_now": 200, "cpu": 0.35, "started_total": 200 * (i + 1),
                                 "waiting_mean": 0.0, "waiting_now": 0, "connecting_mean": 0.1,
                                 "connecting_now": 0, "awaiting_headers_mean": 20.0,
                                 "awaiting_headers_now": 20, "streaming_mean": 179.5,
                                 "streaming_now": 180, "closing_mean": 0.0, "closing_now": 0,
                                 "completed": 200, "started": 200, "output_tokens": 10_000}) + "\n")
    # summary.json's totals: the variants once each (its size does not grow with the run)
    for v in range(VARIANTS):
        for s in SCOPES:
            for m in SHAPE:
                totals[s][m].add(per_scope[m][v][1])
        for m in SHAPE:
            tot_all[m].add(per_all[m][v][1])
        for m in GLOBAL:
            tot_all[m].add(glob[m][v][1])
    c = {"started": 100 * intervals, "completed": 100 * intervals, "tokens.output.completed": 5_000 * intervals}
    snap = Snapshot({**{s: ScopeSnapshot(dict(c), {m: h.encode() for m, h in totals[s].items()})
                        for s in SCOPES},
                     ALL: ScopeSnapshot({k: n * 2 for k, n in c.items()},
                                        {m: h.encode() for m, h in tot_all.items()})})
    meta.update(ended_at=meta["started_at"], duration_s=float(intervals), warnings=[],
                load={"mode": "concurrency", "held": True}, generator={"intervals": intervals})
    writer.finish(meta, snap, None, complete=True)
    size = (out / "intervals.hlog").stat().st_size
    print(f"wrote {out}: {intervals} intervals, intervals.hlog {size / 1e6:.1f} MB, "
          f"{time.monotonic() - t0:.1f} s")


def _peak_rss_mb() -> float:
    """This process's peak RSS: VmHWM (reset at exec, unlike ``ru_maxrss``, which a
    child started by a big parent inherits); ``ru_maxrss`` where /proc is missing."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def build(folder: Path) -> None:
    """Build report.html for ``folder`` and print the peak RSS of this process."""
    import hopbench
    from hopbench.report._page import write_report

    base = _peak_rss_mb()
    t0 = time.monotonic()
    path = write_report(folder)
    dt = time.monotonic() - t0
    peak = _peak_rss_mb()
    print(json.dumps({"hopbench": str(Path(hopbench.__file__).parent), "report": str(path),
                      "report_mb": round(path.stat().st_size / 1e6, 2),
                      "rss_before_build_mb": round(base, 1), "peak_rss_mb": round(peak, 1),
                      "build_s": round(dt, 2)}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("what", choices=("gen", "build"))
    ap.add_argument("folder", type=Path)
    ap.add_argument("--intervals", type=int, default=3600)
    ap.add_argument("--no-repo-path", action="store_true",
                    help="do not add this checkout to sys.path (use PYTHONPATH's hopbench)")
    a = ap.parse_args()
    if a.what == "gen":
        gen(a.folder, a.intervals)
    else:
        build(a.folder)


if __name__ == "__main__":
    main()
