"""The file-descriptor limit raised before the load (hopbench/_limits.py).

Each case runs in a child process: it lowers its own limits with setrlimit, so
the test process keeps its own.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

resource = pytest.importorskip("resource")


def _child(soft: int, hard: int, needed: int) -> dict[str, object]:
    code = (
        "import json, resource\n"
        f"resource.setrlimit(resource.RLIMIT_NOFILE, ({soft}, {hard}))\n"
        "from hopbench._limits import raise_fd_limit\n"
        f"r = raise_fd_limit({needed})\n"
        "now = resource.getrlimit(resource.RLIMIT_NOFILE)\n"
        "print(json.dumps({'before': r.before, 'soft': r.soft, 'hard': r.hard, 'enough': r.enough,\n"
        "                  'now': list(now), 'advice': '' if r.enough else r.advice('[load].concurrency')}))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)  # type: ignore[no-any-return]


def test_limits_a_low_soft_limit_is_raised_to_what_the_load_needs() -> None:
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard != resource.RLIM_INFINITY and hard < 2000:
        pytest.skip(f"hard limit {hard} here")
    r = _child(256, 2000, 1064)
    assert r["before"] == 256 and r["soft"] == 1064 and r["now"] == [1064, 2000] and r["enough"] is True


def test_limits_a_hard_limit_too_low_is_named_with_its_cure() -> None:
    r = _child(200, 300, 1064)
    assert r["before"] == 200 and r["soft"] == 300 and r["hard"] == 300 and r["enough"] is False
    assert r["now"] == [300, 300]
    assert r["advice"] == ("[load].concurrency needs about 1,064 open files (one per stream, plus 64); this "
                           "process may open at most 300 (`ulimit -n`, hard limit 300): raise the limit "
                           "(e.g. `ulimit -n 4096` as root or in /etc/security/limits.conf) or lower "
                           "[load].concurrency")


def test_limits_a_soft_limit_already_high_enough_is_left_alone() -> None:
    r = _child(1500, 2000, 100)
    assert r["before"] == 1500 and r["soft"] == 1500 and r["now"] == [1500, 2000] and r["enough"] is True


def _cli_with_limit(soft: int, hard: int, *args: str) -> subprocess.CompletedProcess[str]:
    """``python -m hopbench ARGS`` in a child whose fd limit is (soft, hard) before it starts."""
    code = (f"import resource, runpy, sys; resource.setrlimit(resource.RLIMIT_NOFILE, ({soft}, {hard})); "
            f"sys.argv = ['hopbench', *{list(args)!r}]; runpy.run_module('hopbench', run_name='__main__')")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


def test_limits_a_closed_loop_the_hard_limit_cannot_hold_is_refused_before_any_load(tmp_path: Path) -> None:
    # issue 39, item 1: concurrency 1000 under `ulimit -n 256` piled up 7,246 fd_limit errors and
    # then lost its results to "Too many open files"; now both validate and run say so first
    profile = tmp_path / "p.toml"
    profile.write_text('[run]\nduration_s = 5\n[load]\nconcurrency = 1000\n[target]\nurl = "http://127.0.0.1:9"\n'
                       '[[scenario]]\nprotocol = "chat"\nmodel = "m"\n', encoding="utf-8")
    for args in (("validate", str(profile)), ("run", str(profile), "--out", str(tmp_path / "r"))):
        proc = _cli_with_limit(256, 256, *args)
        assert proc.returncode == 2, proc.stderr[-2000:]
        assert f"{profile}: [load].concurrency needs about 1,064 open files" in proc.stderr
        assert "ulimit -n" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "r").exists()  # no folder, no load


@pytest.mark.slow
def test_limits_run_raises_a_low_soft_limit_and_the_load_runs(tmp_path: Path) -> None:
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard != resource.RLIM_INFINITY and hard < 1024:
        pytest.skip(f"hard limit {hard} here")
    profile = tmp_path / "p.toml"
    profile.write_text('[run]\nrequests = 300\n[load]\nconcurrency = 300\n[emulator]\nttft_ms = 50\n'
                       'output_tokens = 2\n[[scenario]]\nprotocol = "chat"\nmodel = "m"\n', encoding="utf-8")
    proc = _cli_with_limit(128, min(hard, 4096) if hard != resource.RLIM_INFINITY else 4096,
                           "run", str(profile), "--out", str(tmp_path / "r"), "--quiet")
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert summary["headline"]["completed"] == 300
    assert not any(k.startswith("connect_error") for k in summary["scopes"]["all"]["counters"])
