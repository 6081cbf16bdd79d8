"""Does the gate tell noise from a regression? A small version of issue 37's study.

Role: a benchmark, never a timed test. It runs a gate profile (default
``profiles/ci-gate.toml``) on the embedded emulator, each run a child
``hopbench run`` process of a few seconds, in three kinds:

- ``aa``: the profile as it is (the unchanged target);
- ``ttft``: its ``[emulator] ttft_ms`` raised by ``--ttft-up`` (default 10 %);
- ``tps``: its ``[emulator] tokens_per_s`` lowered by ``--tps-down`` (default 5 %);

in two conditions: ``quiet`` (nothing of ours beside it) and ``busy`` (one
CPU-bound neighbour, ``python3 -c "while 1: pass"``, started before the run and
stopped after it; on a shared machine "quiet" is only as quiet as the others
let it be: each run's runner line is printed). Kinds and conditions alternate,
so that what the machine does meanwhile falls on all of them.

Then, with no run of its own (milliseconds each):

- **gate**: every run judged by the profile's own ``[gate]`` (the shipped budgets)
  with the noise-aware verdicts (``hopbench.views._verdicts``): a false
  alarm is an ``aa`` run that fails; a catch is a regressed run that fails
  (inconclusive counted apart);
- **compare**: pairs (quiet A/A, busy A/A, quiet base vs busy candidate A/A,
  and quiet base vs each regressed run) judged by the noise-aware compare
  (``hopbench.views._verdicts``): a false alarm is an A/A pair read ``worse``;
  a catch a regressed pair read ``worse``;
- **calibration** (``--calibrate N``): N quiet ``aa`` runs first, their proposed
  budgets (``hopbench.views._calibrate``) printed, and every later run also judged
  by them;
- **arms** (``--arms N``): N runs of the profile turned into two A/B arms (its
  ``[emulator]`` behind each, the baseline and the candidate interleaved request by
  request) in each condition, A/A and with the candidate arm's ``ttft_ms`` raised by
  ``--ttft-up`` (and, with ``--arms-kinds aa,ttft,tps``, its ``tokens_per_s`` lowered by
  ``--tps-down``): the paired verdicts (docs/ab-arms.md, "Paired verdicts") beside the
  unpaired table's ttft verdict of the same run.

Compare's ``inconclusive`` count is split: ``near edge`` are the changes the worse way
within the noise floor but near its edge (issue 37, design point A: ``same`` before it).

Run from the repository root (about 15 minutes on a busy 2-core machine)::

    .venv/bin/python benchmarks/bench_gate_study.py --repeats 5 --keep /tmp/study
    .venv/bin/python benchmarks/bench_gate_study.py --calibrate 6 --repeats 0   # budgets only
    .venv/bin/python benchmarks/bench_gate_study.py --analyze /tmp/study        # judge again, no run
    .venv/bin/python benchmarks/bench_gate_study.py --repeats 0 --arms 10       # the paired release comparison
    .venv/bin/python benchmarks/bench_gate_study.py --repeats 0 --arms 10 --arms-kinds aa,tps
    git show b4b7630:profiles/ci-gate.toml > /tmp/old.toml
    .venv/bin/python benchmarks/bench_gate_study.py --analyze /tmp/study --budget old=/tmp/old.toml

Each table line shows the verdicts after issue 37 beside the ones before it (the
gate's exit code 1; compare's ``worse`` with the fixed 1 ms / 5 % floors).

127.0.0.1 only (the embedded emulator); results under a temporary folder, removed
at the end unless ``--keep DIR``.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import itertools
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hopbench.driver._results import read_summary  # noqa: E402
from hopbench.views._calibrate import calibrate  # noqa: E402
from hopbench.views._compare import compare_summaries  # noqa: E402
from hopbench.views._gate import evaluate_gate  # noqa: E402
from hopbench.views._verdicts import judge_gate  # noqa: E402
from hopbench.views._noise_record import runner_line  # noqa: E402
from hopbench.views._verdicts import judge_comparison  # noqa: E402


def _variant(text: str, kind: str, ttft_up: float, tps_down: float) -> str:
    """The profile's text with its emulator regressed as ``kind`` says."""
    def scale(key: str, factor: float, s: str) -> str:
        m = re.search(rf"^{key}\s*=\s*([0-9.]+)", s, re.M)
        if m is None:
            raise SystemExit(f"the profile's [emulator] has no {key}: the study regresses it")
        return s[:m.start(1)] + f"{float(m.group(1)) * factor:g}" + s[m.end(1):]

    if kind == "ttft":
        return scale("ttft_ms", 1 + ttft_up, text)
    if kind == "tps":
        return scale("tokens_per_s", 1 - tps_down, text)
    return text


@contextlib.contextmanager
def _neighbour(busy: bool) -> Iterator[None]:
    """One CPU-bound neighbour process for the block (ours: stopped by its pid)."""
    if not busy:
        yield
        return
    p = subprocess.Popen([sys.executable, "-c", "while 1: pass"])
    try:
        time.sleep(0.3)
        yield
    finally:
        p.kill()
        p.wait()


def _run(profile: Path, out: Path, busy: bool) -> Path:
    with _neighbour(busy):
        r = subprocess.run([sys.executable, "-m", "hopbench", "run", str(profile), "--out", str(out), "-q"],
                           cwd=ROOT, capture_output=True, text=True, env=None)
    if r.returncode not in (0, 1, 5) or not (out / "summary.json").is_file():
        raise SystemExit(f"hopbench run {profile} exited {r.returncode}: {r.stderr[-2000:]}")
    return out


def _analyze(runs: dict[tuple[str, str], list[Path]], cal_budget: Path | None,
             extra: list[tuple[str, Path]]) -> None:
    """Judge the runs by the gate and the pairs by compare: before (issue 37) and after."""
    from hopbench.config._gate_spec import load_budget_file

    budgets = [("shipped", None)] + ([("calibrated", load_budget_file(cal_budget))] if cal_budget else []) + [
        (name, load_budget_file(path)) for name, path in extra]
    print("gate: each run by the budgets; after: noise-aware verdicts (exit 1 fail / 5 inconclusive / 0 pass); "
          "before: the gate's exit code 1 (breached, or saturated)")
    for name, table in budgets:
        for cond, kind in sorted(runs):
            tally: Counter[str] = Counter()
            before = 0
            for d in runs[(cond, kind)]:
                s = read_summary(d)
                rep = evaluate_gate(s, table, results_dir=d)
                tally[judge_gate(rep, s, results_dir=d).verdict] += 1
                before += dataclasses.replace(rep, verdicts=None).exit_code == 1  # the statuses alone
            what = "false alarms" if kind == "aa" else "caught"
            n = sum(tally.values())
            print(f"  {name:<10} {cond:<5} {kind:<4}: after: {what} {tally['fail']}/{n}, inconclusive "
                  f"{tally['inconclusive']}, pass {tally['pass']}; before: exit 1 in {before}/{n}")
    print("\ncompare: after: noise-aware, Holm across each compare's figures; before: the fixed 1 ms / 5 % "
          "floors, no family control ('worse' counts)")
    q_aa, b_aa = runs.get(("quiet", "aa"), []), runs.get(("busy", "aa"), [])
    pairs: dict[str, list[tuple[Path, Path]]] = {
        "quiet A/A": list(itertools.combinations(q_aa, 2)),
        "busy A/A": list(itertools.combinations(b_aa, 2)),
        "quiet vs busy A/A": list(itertools.product(q_aa, b_aa)),
    }
    for cond in ("quiet", "busy"):
        for kind in ("ttft", "tps"):
            pairs[f"quiet base vs {cond} {kind}"] = list(itertools.product(q_aa, runs.get((cond, kind), [])))
    for name, ps in pairs.items():
        tally = Counter()
        before = 0
        for a, b in ps:
            sa, sb = read_summary(a), read_summary(b)
            c = compare_summaries(sa, sb, base_dir=a, candidate_dir=b, force=True)
            before += any(m.verdict == "worse" for m in c.metrics) or any(r.verdict == "worse" for r in c.rates)
            v = judge_comparison(c, sa, sb, base_dir=a, cand_dir=b)
            tally[v.verdict] += 1
            edge = v.verdict == "inconclusive" and not any(
                f.verdict in ("worse", "inconclusive") and "near its edge" not in f.judged.reason for f in v.figures)
            tally["near edge"] += edge
        what = "false alarms" if "A/A" in name else "caught"
        print(f"  {name:<24}: after: {what} {tally['worse']}/{len(ps)}, inconclusive {tally['inconclusive']} "
              f"(near edge {tally['near edge']}), same {tally['same']}, better {tally['better']}; "
              f"before: worse {before}/{len(ps)}")


def _arms_variant(text: str, ttft_up: float, tps_down: float = 0.0) -> str:
    """The profile as two A/B arms, each its own embedded emulator (the profile's [emulator]);
    the candidate arm's ttft_ms raised by ``ttft_up`` and its tokens_per_s lowered by
    ``tps_down`` (both 0: A/A). Its [gate] is dropped."""
    m = re.search(r"^ttft_ms\s*=\s*([0-9.]+)", text, re.M)
    r = re.search(r"^tokens_per_s\s*=\s*([0-9.]+)", text, re.M)
    if m is None or r is None or "[target]\nembedded = true\n" not in text:
        raise SystemExit("--arms needs a profile with [target] embedded = true and [emulator] ttft_ms, tokens_per_s")
    text = text.replace("[target]\nembedded = true\n", "")
    text = text[:text.index("[gate]")] if "[gate]" in text else text
    keys = ([f"ttft_ms = {float(m.group(1)) * (1 + ttft_up):g}"] if ttft_up else []) + (
        [f"tokens_per_s = {float(r.group(1)) * (1 - tps_down):g}"] if tps_down else [])
    cand = f"emulator = {{ {', '.join(keys)} }}\n" if keys else ""
    return text + '\n[[arm]]\nname = "base"\nurl = "embedded"\n\n[[arm]]\nname = "cand"\nurl = "embedded"\n' + cand


def _arms_study(text: str, repeats: int, ttft_up: float, tmp: Path, tps_down: float = 0.0,
                kinds: tuple[str, ...] = ("aa", "ttft")) -> None:
    """A/A and regressed arms runs (``kinds`` of aa, ttft, tps), quiet and busy: their paired
    verdicts and the unpaired ttft's."""
    variants = {"aa": (0.0, 0.0), "ttft": (ttft_up, 0.0), "tps": (0.0, tps_down)}
    profiles = {k: tmp / f"arms-{k}.toml" for k in kinds}
    for k in kinds:
        profiles[k].write_text(_arms_variant(text, *variants[k]), encoding="utf-8")
    tally: dict[tuple[str, str], Counter[str]] = {}
    for i in range(repeats):
        for cond, kind in itertools.product(("quiet", "busy"), kinds):
            d = _run(profiles[kind], tmp / f"arms-{cond}-{kind}-{i}", cond == "busy")
            s = read_summary(d)
            pair = s["arm_differences"]["pairs"][0]
            paired = pair.get("paired", {})
            ttft = next((f for f in paired.get("figures", []) if f["figure"] == "ttft"), {})
            t = tally.setdefault((cond, kind), Counter())
            t[paired.get("verdict", "none")] += 1
            t["ttft " + str(ttft.get("verdict"))] += 1
            t["unpaired ttft " + pair["metrics"].get("ttft", {}).get("verdict", "none")] += 1
            print(f"arms {cond:<5} {kind:<4} {i}: paired {paired.get('verdict')}; ttft {ttft.get('reason')}; "
                  f"{runner_line(s)}", flush=True)
    print("\narms: paired verdicts (any figure; ttft alone) and the unpaired table's ttft verdict")
    for (cond, kind), t in sorted(tally.items()):
        print(f"  {cond:<5} {kind:<4}: paired worse {t['worse']}, inconclusive {t['inconclusive']}, same {t['same']}, "
              f"better {t['better']}; ttft worse {t['ttft worse']}; unpaired ttft worse {t['unpaired ttft worse']} "
              f"(of {sum(t[v] for v in ('worse', 'inconclusive', 'same', 'better', 'not judged', 'none'))})")


def _kept(folder: Path) -> dict[tuple[str, str], list[Path]]:
    """The runs of a kept study folder (``--keep``), by (condition, kind)."""
    runs: dict[tuple[str, str], list[Path]] = {}
    for d in sorted(folder.iterdir()):
        m = re.fullmatch(r"(quiet|busy)-(aa|ttft|tps)-(\d+)", d.name)
        if m and (d / "summary.json").is_file():
            runs.setdefault((m.group(1), m.group(2)), []).append(d)
    return runs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--profile", type=Path, default=ROOT / "profiles" / "ci-gate.toml")
    ap.add_argument("--repeats", type=int, default=4, help="runs of each kind in each condition")
    ap.add_argument("--calibrate", type=int, default=0, help="quiet A/A runs to calibrate budgets from first")
    ap.add_argument("--ttft-up", type=float, default=0.10)
    ap.add_argument("--tps-down", type=float, default=0.05)
    ap.add_argument("--keep", type=Path, default=None, help="keep the results here")
    ap.add_argument("--analyze", type=Path, default=None, help="judge a kept study folder again, running nothing")
    ap.add_argument("--arms", type=int, default=0, help="A/B arms runs (paired) of each kind in each condition")
    ap.add_argument("--arms-kinds", default="aa,ttft",
                    help="the arms runs' kinds, of aa (A/A), ttft (--ttft-up), tps (--tps-down)")
    ap.add_argument("--budget", action="append", default=[], metavar="NAME=FILE",
                    help="also judge every run by this budget file (e.g. an older ci-gate.toml)")
    args = ap.parse_args(argv)
    extra = [(b.split("=", 1)[0], Path(b.split("=", 1)[1])) for b in args.budget]
    if args.analyze is not None:
        cal = args.analyze / "calibrated.toml"
        _analyze(_kept(args.analyze), cal if cal.is_file() else None, extra)
        return 0
    text = args.profile.read_text(encoding="utf-8")
    tmp = Path(tempfile.mkdtemp(prefix="gate-study-"))
    t0 = time.monotonic()
    try:
        profiles = {}
        for kind in ("aa", "ttft", "tps"):
            profiles[kind] = tmp / f"{kind}.toml"
            profiles[kind].write_text(_variant(text, kind, args.ttft_up, args.tps_down), encoding="utf-8")
        cal_dirs = [_run(profiles["aa"], tmp / f"cal-{i}", False) for i in range(args.calibrate)]
        cal_budget = None
        if cal_dirs:
            cal = calibrate(cal_dirs, [read_summary(d) for d in cal_dirs], alpha=0.01)
            print(cal.render())
            cal_budget = tmp / "calibrated.toml"
            cal_budget.write_text("\n".join(line for line in cal.render().splitlines()
                                            if line.startswith(("[gate", '"'))) + "\n", encoding="utf-8")
        if args.arms:
            _arms_study(text, args.arms, args.ttft_up, tmp, args.tps_down, tuple(args.arms_kinds.split(",")))
        if args.repeats < 1:
            return 0
        runs: dict[tuple[str, str], list[Path]] = {}
        for i in range(args.repeats):
            order = list(itertools.product(("quiet", "busy"), ("aa", "ttft", "tps")))
            if i % 2:
                order.reverse()
            for cond, kind in order:
                d = _run(profiles[kind], tmp / f"{cond}-{kind}-{i}", cond == "busy")
                runs.setdefault((cond, kind), []).append(d)
                print(f"{cond:<5} {kind:<4} {i}: {runner_line(read_summary(d))}", flush=True)
        print(f"\nruns took {time.monotonic() - t0:.0f} s\n")
        _analyze(runs, cal_budget, extra)
        print(f"\nwhole study took {time.monotonic() - t0:.0f} s")
    finally:
        if args.keep is not None:
            shutil.copytree(tmp, args.keep, dirs_exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
