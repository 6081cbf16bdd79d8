"""False buffering flags of a client-saturated machine (issue 36, item 3).

256 concurrent fast streams (50 ms TTFT, 32 tokens at 200/s) on the embedded
emulator, no proxy anywhere: the client takes a core and the emulator's process
competes for the rest of the machine. A stream that reached the client as one
burst is ``client_lagged`` (the client's own lag explains it), or flagged
``proxy_buffering_suspected`` and judged again against the emulator's record
(``origin_burst``: the emulator itself wrote it at once after a stall). With no
proxy in between an ``origin_burst`` stream no longer counts as suspected; what
stays flagged is what nothing explains.

Prints one line per run: completed streams, the flag, client_lagged, the
re-judged counters, the emulator's largest stall (ground_truth.jsonl
``lag_max_ns``) and the machine's load. ``--tree`` runs another checkout's
package (e.g. a worktree of the commit before) for a before/after.

Reproduce (2-core machine, ~15 s a run):

    .venv/bin/python benchmarks/bench_burst_flags.py --runs 10
    .venv/bin/python benchmarks/bench_burst_flags.py --runs 10 --tree /path/to/worktree-of-b4b7630
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

_PROFILE = """[run]
name = "burst-flags"
duration_s = {duration}
warmup_s = 1
seed = 1

[load]
mode = "concurrency"
concurrency = {streams}

[target]
embedded = true

[emulator]
ttft_ms = 50
tokens_per_s = 200
output_tokens = 32
seed = 7

[[scenario]]
name = "chat"
protocol = "chat"
model = "gpt-emu"
max_tokens = 64
"""

_KEYS = ("completed", "proxy_buffering_suspected", "client_lagged", "origin_burst", "burst_unexplained",
         "burst_unmatched")


def _one(tree: Path, profile: Path, out: Path) -> dict[str, object]:
    env = dict(os.environ, PYTHONPATH=str(tree))
    subprocess.run([sys.executable, "-m", "hopbench", "run", str(profile), "--out", str(out), "-q", "--no-report"],
                   cwd=tree, env=env, check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    summary = json.loads((out / "summary.json").read_text())
    c = summary["scopes"]["all"]["counters"]
    stall = 0
    gt = out / "ground_truth.jsonl"
    if gt.exists():
        for line in gt.read_text().splitlines():
            try:
                stall = max(stall, int(json.loads(line).get("lag_max_ns") or 0))
            except ValueError:
                continue
    row: dict[str, object] = {k: c.get(k, 0) for k in _KEYS}
    row["emulator_stall_ms"] = round(stall / 1e6, 1)
    row["load"] = open("/proc/loadavg").read().split()[0] if Path("/proc/loadavg").exists() else "?"
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--streams", type=int, default=256)
    ap.add_argument("--duration-s", type=float, default=8.0)
    ap.add_argument("--tree", type=Path, default=Path(__file__).resolve().parents[1],
                    help="the checkout whose package runs (default: this one)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="hb-burst-") as tmp:
        profile = Path(tmp) / "burst.toml"
        profile.write_text(_PROFILE.format(duration=args.duration_s, streams=args.streams))
        flagged_runs = 0
        for i in range(args.runs):
            row = _one(args.tree.resolve(), profile, Path(tmp) / f"run{i}")
            flagged_runs += bool(row["proxy_buffering_suspected"])
            print(f"run {i + 1}: " + ", ".join(f"{k} {v}" for k, v in row.items()), flush=True)
        print(f"runs with a proxy_buffering_suspected stream: {flagged_runs} of {args.runs}")


if __name__ == "__main__":
    main()
