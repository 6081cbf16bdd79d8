"""Does a gate on what a gateway adds catch +1.5 ms per event, with no false alarm? (issue 37)

Role: a benchmark, never a timed test. ``profiles/gateway-overhead.toml`` (its emulator behind
the gateway, its faults and scenarios; ``--streams`` streams, ``--duration-s`` after a 1 s
warm-up; its ``[gate]`` as shipped) runs as a child ``hopbench run`` through:

- ``nginx`` with ``profiles/gateway-overhead.nginx.conf`` (A/A: nothing changed);
- ``delay``: the tests' delaying proxy (``tests/_delay_proxy.py``) holding every event 0 ms (A/A);
- ``slow``: the same proxy holding every event ``--slow-ms`` (default 1.5 ms: the regression);

the proxy times its holds with a timer thread (``--precise``), and each run's ``held.json`` keeps
what it really held: the hold plus each event's measured lateness (its ``late_ns``), whose median
the analysis prints as the regression's true size;

in two conditions, ``quiet`` (nothing of ours beside it) and ``busy`` (one CPU-bound neighbour
process for the run's length). Kinds and conditions alternate, so that what the machine does
meanwhile falls on all of them. Each run is judged by the profile's ``[gate]`` with the
noise-aware verdicts (``hopbench.views._verdicts.judge_gate``): a false alarm is an A/A run that
fails, a catch a ``slow`` run that fails; ``inconclusive`` (exit 5: retry on a quieter runner)
is counted apart. ``--budget NAME=FILE`` judges the same runs by other budget tables too
(a ``[gate]`` TOML file, as ``hopbench gate --budget``), ``--analyze DIR`` judges a kept study
again without running anything. ``--calibrate N`` first runs N quiet A/A runs through each
gateway kind (nginx, delay) and judges that gateway's runs by the budgets ``hopbench calibrate``
proposes from them (docs/gate.md, "Calibrate first": the workflow a gateway team follows),
``slow`` by the delay proxy's; ``--calibrate-busy N`` adds N busy A/A runs to each calibration
(calibrate beside the runner's usual neighbours, as docs/gate.md says).

Run from the repository root (nginx installed; 127.0.0.1 only; ~25 s a run)::

    .venv/bin/python benchmarks/bench_gate_gateway.py --calibrate 5 --repeats 10 --keep /tmp/gwgate
    .venv/bin/python benchmarks/bench_gate_gateway.py --analyze /tmp/gwgate --budget p99=/tmp/p99.toml
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import random
import re
import statistics
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

from bench_gate_study import _neighbour  # noqa: E402
from bench_wire_capture import _free_port, _stop, gateway, profile_text  # noqa: E402

from hopbench._errors import UsageError  # noqa: E402
from hopbench.driver._results import read_summary  # noqa: E402
from hopbench.views._compare import compare_summaries  # noqa: E402
from hopbench.views._gate import evaluate_gate  # noqa: E402
from hopbench.views._noise_record import runner_line  # noqa: E402
from hopbench.views._verdicts import judge_comparison, judge_gate  # noqa: E402

#: kind -> (gateway, the proxy's hold per event in ms; None: --slow-ms)
KINDS: dict[str, tuple[str, float | None]] = {"nginx": ("nginx", 0.0), "delay": ("delay", 0.0),
                                               "slow": ("delay", None)}


def _run(kind: str, slow_ms: float, out: Path, busy: bool, streams: int, duration_s: float) -> Path:
    """One run of the profile through ``kind``'s gateway; its results folder."""
    name, hold = KINDS[kind]
    gw, up = _free_port(), _free_port()
    out.mkdir(parents=True)
    profile = out / "profile.toml"
    profile.write_text(profile_text(gw, up, streams, duration_s, 1.0), encoding="utf-8")
    hold_ms = slow_ms if hold is None else hold
    proc = gateway(name, out, gw, up, hold_ms, precise=True)
    try:
        with _neighbour(busy):
            r = subprocess.run([sys.executable, "-m", "hopbench", "run", str(profile), "--out", str(out / "run"),
                                "-q"], cwd=ROOT, capture_output=True, text=True)
    finally:
        _stop(proc)
    if (out / "stats.json").is_file():  # the delay proxy's own record: what it really held
        late = json.loads((out / "stats.json").read_text(encoding="utf-8"))["late_ns"]
        if late:
            (out / "held.json").write_text(json.dumps({
                "hold_ms": hold_ms, "late_p50_ms": statistics.median(late) / 1e6,
                "held_p50_ms": hold_ms + statistics.median(late) / 1e6, "events": len(late)}), encoding="utf-8")
    if not (out / "run" / "summary.json").is_file():
        raise SystemExit(f"hopbench run through {kind} exited {r.returncode}: {r.stderr[-2000:]}")
    return out / "run"


def _judge(d: Path, table: Any) -> tuple[str, str]:
    """The gate's verdict of one run by ``table`` (None: its own [gate]) and its first unpassed budget."""
    s = read_summary(d)
    v = judge_gate(evaluate_gate(s, table, results_dir=d), s, results_dir=d)
    return v.verdict, "" if v.verdict == "pass" else v.reason()


def _figure(s: dict[str, Any], metric: str) -> float | None:
    v = s.get("scopes", {}).get("all", {}).get("metrics", {}).get(metric, {}).get("p50")
    return float(v) if isinstance(v, (int, float)) else None


OVERHEAD = ("added_ttft.", "event_delay.", "first_event_delay.", "request_delay.", "added_e2e.")
"""The gateway-overhead figures (``hopbench.views._calibrate.OVERHEAD_FIGURES``): what the gateway adds."""


def _calibrated(folder: Path, overhead_only: bool = False) -> dict[str, Any]:
    """The budgets calibrated per gateway in a study folder (``calibrated-<gateway>.toml``), by
    kind; with ``overhead_only`` only those on the gateway-overhead figures (the ones docs/gate.md
    tells a gateway team to gate on first)."""
    from hopbench.config._gate_spec import load_budget_file

    out = {}
    for kind, (gw, _) in KINDS.items():
        f = folder / f"calibrated-{gw}.toml"
        if not f.is_file():
            continue
        if overhead_only:
            lines = f.read_text(encoding="utf-8").splitlines()
            g = folder / f"calibrated-overhead-{gw}.toml"
            g.write_text("\n".join(line for line in lines if line.startswith("[gate")
                                   or line.startswith(tuple(f'"{o}' for o in OVERHEAD))) + "\n", encoding="utf-8")
            f = g
        out[kind] = load_budget_file(f)
    return out


def _calibrate(folder: Path, kind: str, n: int, slow_ms: float, streams: int, duration_s: float,
               n_busy: int = 0) -> None:
    """N quiet (and ``n_busy`` busy) A/A runs through ``kind``'s gateway; their proposed budgets to
    calibrated-<gateway>.toml."""
    from hopbench.views._calibrate import calibrate

    dirs = [_run(kind, slow_ms, folder / f"cal-{kind}-{i}", False, streams, duration_s) for i in range(n)]
    dirs += [_run(kind, slow_ms, folder / f"cal-busy-{kind}-{i}", True, streams, duration_s) for i in range(n_busy)]
    cal = calibrate(dirs, [read_summary(d) for d in dirs], alpha=0.01)
    print(cal.render(), flush=True)
    (folder / f"calibrated-{KINDS[kind][0]}.toml").write_text(
        "\n".join(line for line in cal.render().splitlines() if line.startswith(("[gate", '"'))) + "\n",
        encoding="utf-8")


def _analyze(runs: dict[tuple[str, str], list[Path]], budgets: list[tuple[str, Any]],
             folder: Path | None = None, max_pairs: int = 0) -> None:
    cal = {"calibrated": _calibrated(folder), "calibrated overhead": _calibrated(folder, True)} if folder else {}
    tables: list[tuple[str, Any]] = list(budgets) + [(name, None) for name, c in cal.items() if c]
    for bname, table in tables:
        print(f"\ngate {bname}: after issue 37: fail / inconclusive / pass (false alarm: an A/A run that fails)")
        for (cond, kind), ds in sorted(runs.items()):
            if bname in cal:
                if kind not in cal[bname]:
                    continue
                table = cal[bname][kind]
            tally: Counter[str] = Counter(_judge(d, table)[0] for d in ds)
            what = "caught" if kind == "slow" else "false alarms"
            print(f"  {cond:<5} {kind:<5}: {what} {tally['fail']}/{len(ds)}, inconclusive {tally['inconclusive']}, "
                  f"pass {tally['pass']}")
    _compare_pairs(runs, max_pairs)
    print("\np50s (ms), median [min, max] over the runs:")
    for (cond, kind), ds in sorted(runs.items()):
        cells = []
        for metric in ("event_delay", "added_ttft"):
            vals = sorted(v for v in (_figure(read_summary(d), metric) for d in ds) if v is not None)
            cells.append(f"{metric} {vals[len(vals) // 2]:.3f} [{vals[0]:.3f}, {vals[-1]:.3f}]" if vals else
                         f"{metric} -")
        held = sorted(json.loads((d.parent / "held.json").read_text(encoding="utf-8"))["held_p50_ms"]
                      for d in ds if (d.parent / "held.json").is_file())
        if held:
            cells.append(f"the proxy's real hold per event {held[len(held) // 2]:.3f} [{held[0]:.3f}, {held[-1]:.3f}]")
        print(f"  {cond:<5} {kind:<5}: " + "; ".join(cells))


COMPARE_METRICS = ("added_ttft", "event_delay")
"""The gateway-overhead figures a gateway team compares on (``--metric added_ttft,event_delay``)."""


def _compare_pairs(runs: dict[tuple[str, str], list[Path]], max_pairs: int = 0) -> None:
    """``hopbench compare``'s verdict of every pair of runs through one gateway: A/A quiet, busy and
    quiet base vs busy candidate (a false alarm is ``worse``), and the quiet delay runs as the base
    of each ``slow`` run (a catch is ``worse``); with every figure and with the overhead figures alone."""
    pairs: dict[str, list[tuple[Path, Path]]] = {}
    for gw in ("nginx", "delay"):
        q, b = runs.get(("quiet", gw), []), runs.get(("busy", gw), [])
        pairs[f"{gw} quiet A/A"] = list(itertools.combinations(q, 2))
        pairs[f"{gw} busy A/A"] = list(itertools.combinations(b, 2))
        pairs[f"{gw} quiet vs busy A/A"] = list(itertools.product(q, b))
    for cond in ("quiet", "busy"):
        pairs[f"quiet delay vs {cond} slow"] = list(itertools.product(runs.get(("quiet", "delay"), []),
                                                                      runs.get((cond, "slow"), [])))
    if max_pairs:  # a fixed random sample of each kind's pairs (seed 0): a compare takes ~0.3 s
        rng = random.Random(0)
        pairs = {k: (rng.sample(v, max_pairs) if len(v) > max_pairs else v) for k, v in pairs.items()}
    summaries: dict[Path, dict[str, Any]] = {}
    for metrics, label in ((None, "every figure"), (COMPARE_METRICS, "--metric " + ",".join(COMPARE_METRICS))):
        print(f"\ncompare ({label}): worse / inconclusive / same / better")
        for name, ps in pairs.items():
            if not ps:
                continue
            tally: Counter[str] = Counter()
            for a, c in ps:
                sa = summaries.setdefault(a, read_summary(a))
                sc = summaries.setdefault(c, read_summary(c))
                try:
                    cmp = compare_summaries(sa, sc, metrics=metrics, base_dir=a, candidate_dir=c, force=True,
                                            asked=metrics is not None)
                except UsageError:  # runs without the overhead figures (no [upstream]): nothing to compare
                    tally["not measured"] += 1
                    continue
                tally[judge_comparison(cmp, sa, sc, base_dir=a, cand_dir=c).verdict] += 1
            what = "false alarms" if "A/A" in name else "caught"
            print(f"  {name:<26}: {what} {tally['worse']}/{len(ps)}, inconclusive {tally['inconclusive']}, "
                  f"same {tally['same']}, better {tally['better']}"
                  + (f", not measured {tally['not measured']}" if tally["not measured"] else ""), flush=True)


def _kept(folder: Path) -> dict[tuple[str, str], list[Path]]:
    runs: dict[tuple[str, str], list[Path]] = {}
    for d in sorted(folder.iterdir()):
        m = re.fullmatch(r"(quiet|busy)-(nginx|delay|slow)-(\d+)", d.name)
        if m and (d / "run" / "summary.json").is_file():
            runs.setdefault((m.group(1), m.group(2)), []).append(d / "run")
    return runs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=5, help="runs of each kind in each condition")
    ap.add_argument("--calibrate", type=int, default=0, metavar="N",
                    help="N quiet A/A runs through each gateway first, its budgets proposed from them")
    ap.add_argument("--calibrate-busy", type=int, default=0, metavar="N",
                    help="with --calibrate: N busy A/A runs too (calibrate beside the runner's usual neighbours)")
    ap.add_argument("--kinds", default="nginx,delay,slow", help="comma-separated subset of nginx,delay,slow")
    ap.add_argument("--slow-ms", type=float, default=1.5, help="the regression: the proxy's hold per event")
    ap.add_argument("--streams", type=int, default=16)
    ap.add_argument("--duration-s", type=float, default=8.0)
    ap.add_argument("--keep", type=Path, default=None, help="keep the results here")
    ap.add_argument("--analyze", type=Path, default=None, help="judge a kept study folder again, running nothing")
    ap.add_argument("--max-pairs", type=int, default=0, metavar="N",
                    help="compare at most N pairs of each kind (a fixed random sample; 0: all)")
    ap.add_argument("--budget", action="append", default=[], metavar="NAME=FILE",
                    help="also judge by this budget table (a [gate] TOML file)")
    args = ap.parse_args(argv)
    from hopbench.config._gate_spec import load_budget_file

    budgets: list[tuple[str, Any]] = [("shipped", None)] + [
        (name, load_budget_file(Path(path))) for name, _, path in (b.partition("=") for b in args.budget)]
    if args.analyze:
        _analyze(_kept(args.analyze), budgets, args.analyze, args.max_pairs)
        return 0
    if shutil.which("nginx") is None and not Path("/usr/sbin/nginx").exists() and "nginx" in args.kinds:
        raise SystemExit("nginx is not installed (apt-get install -y nginx-light), or pass --kinds delay,slow")
    kinds = tuple(k for k in args.kinds.split(",") if k)
    with contextlib.ExitStack() as stack:
        tmp = args.keep or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="gate-gw-")))
        tmp.mkdir(parents=True, exist_ok=True)
        for kind in ("nginx", "delay"):
            if args.calibrate and (kind in kinds or (kind == "delay" and "slow" in kinds)):
                _calibrate(tmp, kind, args.calibrate, args.slow_ms, args.streams, args.duration_s,
                           args.calibrate_busy)
        runs: dict[tuple[str, str], list[Path]] = {}
        for i in range(args.repeats):
            for cond in ("quiet", "busy"):
                for kind in kinds:
                    d = _run(kind, args.slow_ms, tmp / f"{cond}-{kind}-{i}", cond == "busy", args.streams,
                             args.duration_s)
                    runs.setdefault((cond, kind), []).append(d)
                    s = read_summary(d)
                    verdict, why = _judge(d, None)
                    ed, at = _figure(s, "event_delay"), _figure(s, "added_ttft")
                    print(f"{cond:<5} {kind:<5} {i}: gate {verdict}{': ' + why if why else ''}; event_delay p50 "
                          f"{ed if ed is None else round(ed, 3)} ms, added_ttft p50 {at if at is None else round(at, 3)} "
                          f"ms; {runner_line(s)}", flush=True)
        _analyze(runs, budgets, tmp, args.max_pairs)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
