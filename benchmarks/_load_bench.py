"""What the profile-loading benchmarks share (bench_trace_load.py, bench_dataset_load.py):
a fresh process per measurement, the peak RSS, and the sides of a before/after.

Each benchmark module defines ``child(profile) -> dict`` (one measurement, in the
fresh process whose ``sys.path`` starts with the side's source tree) and calls
:func:`measure_sides` with a row formatter; ``--against REV`` checks REV out in a
temporary git worktree and the sides run in turn (REV, this, this, REV, ...).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def peak_mb() -> float:
    """This process's peak RSS so far, MB (``ru_maxrss``: a high-water mark)."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def loadavg() -> str:
    """The 1, 5 and 15 minute load averages, as printed beside each measurement."""
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def measure(module: str, src: Path, profile: Path) -> dict[str, float]:
    """``module.child(profile)`` in a fresh Python process running ``src``'s hopbench."""
    code = (f"import sys, json; sys.path.insert(0, {str(src)!r}); sys.path.insert(0, {str(ROOT / 'benchmarks')!r}); "
            f"import {module} as b; from pathlib import Path; "
            f"print(json.dumps(b.child(Path({str(profile)!r}))))")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True,
                         cwd=str(src)).stdout
    return dict(json.loads(out.strip().splitlines()[-1]))


def measure_sides(stack: contextlib.ExitStack, tmp: Path, module: str, profile: Path, against: str | None,
                  repeat: int, header: str, row: Callable[[str, str, dict[str, float]], str]) -> None:
    """Print ``header``, then ``row(side, load average, figures)`` for each measurement:
    this tree, and with ``against`` that git revision too (a worktree under ``tmp``,
    removed by ``stack``), ``repeat`` times each, interleaved."""
    sides: list[tuple[str, Path]] = [("this", ROOT)]
    if against:
        wt = tmp / "rev"
        subprocess.run(["git", "worktree", "add", "--detach", str(wt), against], cwd=ROOT,
                       check=True, capture_output=True)
        stack.callback(subprocess.run, ["git", "worktree", "remove", "--force", str(wt)], cwd=ROOT,
                       capture_output=True)
        sides.insert(0, (against, wt))
    print(header, flush=True)
    for k in range(repeat):
        for name, src in (sides if k % 2 == 0 else sides[::-1]):
            load = loadavg()
            print(row(name, load, measure(module, src, profile)), flush=True)


def load_timed(profile: Path) -> tuple[Any, dict[str, float]]:
    """``load_profile(profile)`` with the ``hopbench`` on ``sys.path``, timed: the profile
    and ``{"base_mb", "load_s" (wall), "load_cpu_s" (this process's CPU), "load_mb"}``."""
    from hopbench.config._profile import load_profile

    base = peak_mb()
    c0 = time.process_time()
    t0 = time.perf_counter()
    prof = load_profile(profile)
    t1 = time.perf_counter()
    return prof, {"base_mb": base, "load_s": t1 - t0, "load_cpu_s": time.process_time() - c0, "load_mb": peak_mb()}
