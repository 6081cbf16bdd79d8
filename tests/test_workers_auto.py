"""``--workers auto`` and ``run.workers = "auto"`` (issue 36, item 5): the free-core rule on
given /proc readings, the profile key, the flag, the warnings that name it, and a tiny run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hopbench import _exit
from hopbench._errors import ProfileError, UsageError
from hopbench._run_command import profile_overrides, resolve_workers
from hopbench.cli import build_parser, main
from hopbench.config._profile import parse_profile
from hopbench.engine._cores import auto_workers, free_cores, parse_loadavg
from hopbench._advice import ADVICE
from hopbench.measure._error_bound import error_bound_warnings

_STAT = "cpu  {busy} 0 0 {idle} 0 0 0 0 0 0\ncpu0 1 2 3 4\n"


def _stat(busy: int, idle: int) -> str:
    """A /proc/stat whose aggregate line has ``busy`` user ticks and ``idle`` idle ticks."""
    return _STAT.format(busy=busy, idle=idle)


def test_free_cores_is_cpus_minus_the_others_load_rounded_and_clamped() -> None:
    # 4 CPUs, load 1.2, the sample 25 % busy (1.0 core): 4 - 1.2 = 2.8 -> 3 workers
    got = free_cores(4, "1.20 0.90 0.50 2/300 12345\n", _stat(100, 900), _stat(200, 1200))
    assert (got.workers, got.cpus, got.load_1m, got.busy_cores) == (3, 4, 1.2, 1.0)
    # a neighbour that just started: the sample sees it before the 1-min average does
    assert free_cores(4, "0.10 0 0 1/1 1", _stat(0, 0), _stat(300, 100)).workers == 1  # 3 cores busy
    # a machine busier than its cores: at least 1; an idle one: at most cpus
    assert free_cores(2, "7.5 7 7 9/400 1", None, None).workers == 1
    assert free_cores(8, "0.00 0 0 1/1 1", _stat(5, 0), _stat(5, 800)).workers == 8
    assert free_cores(8, "0.00 0 0 1/1 1", None, None, max_workers=3).workers == 3
    # 2 CPUs, one CPU-bound neighbour: 1 free core
    assert free_cores(2, "1.02 1 1 2/100 1", _stat(0, 0), _stat(100, 100)).workers == 1
    assert free_cores(2, "0.40 1 1 2/100 1", _stat(0, 0), _stat(20, 180)).workers == 2  # 1.6 -> 2


def test_free_cores_without_proc_counts_every_core_and_says_so() -> None:
    got = free_cores(4, None, None, None)
    assert got.workers == 4 and "no /proc" in got.note()
    assert free_cores(0, "garbage", "no cpu line", "cpu x y").workers == 1
    assert parse_loadavg("nan 1 1") is None and parse_loadavg("-1 0 0") is None and parse_loadavg("") is None
    note = free_cores(4, "1.20 1 1 1/1 1", _stat(0, 0), _stat(100, 300)).note()
    assert note.startswith("workers auto: 3 workers for the free cores of 4 CPUs")
    assert "1-min load average 1.20" in note and "1.00 cores busy" in note


def test_auto_workers_reads_the_proc_files_it_is_given(tmp_path: Path) -> None:
    (tmp_path / "loadavg").write_text("0.00 0.00 0.00 1/1 1\n", encoding="ascii")
    (tmp_path / "stat").write_text(_stat(0, 0), encoding="ascii")
    got = auto_workers(proc=tmp_path, sample_s=0)
    assert got.load_1m == 0.0 and got.busy_cores is None  # the same stat twice: no tick passed
    assert got.workers >= 1


_PROFILE = """
[run]
name = "auto"
duration_s = 1
seed = 1
workers = {workers}
[load]
mode = "concurrency"
concurrency = 2
[target]
embedded = true
[emulator]
ttft_ms = 10
tokens_per_s = 400
output_tokens = 8
[[scenario]]
name = "chat"
protocol = "chat"
model = "gpt-emu"
max_tokens = 16
"""


def test_profile_run_workers_auto_parses_and_a_bad_value_names_the_line() -> None:
    p = parse_profile(_PROFILE.format(workers='"auto"'), env={})
    assert p.run.workers_auto and p.run.workers == 1  # resolved by the run command
    assert not parse_profile(_PROFILE.format(workers=3), env={}).run.workers_auto
    for bad, seen in (('"many"', "'many'"), ("0", "0"), ("true", "true")):
        with pytest.raises(ProfileError, match=r":6: run.workers: expected 'auto' or an integer from 1 to 256, got "
                                               + seen):
            parse_profile(_PROFILE.format(workers=bad), env={})
    with pytest.raises(ProfileError, match="the workers run on the cluster"):
        parse_profile(_PROFILE.format(workers='"auto"\nengine = "ray"'), env={})


def test_cli_workers_auto_parses_and_overrides_the_profile(tmp_path: Path) -> None:
    args = build_parser().parse_args(["run", "p.toml", "--workers", "auto"])
    assert args.workers == "auto"
    assert build_parser().parse_args(["search", "p.toml", "--workers", "3"]).workers == 3
    with pytest.raises(SystemExit):
        build_parser().parse_args(["run", "p.toml", "--workers", "all"])
    p = parse_profile(_PROFILE.format(workers=4), env={})
    got = profile_overrides(p, tmp_path / "p.toml", workers="auto")
    assert got.run.workers_auto and got.run.workers == 1
    assert not profile_overrides(got, tmp_path / "p.toml", workers=2).run.workers_auto
    with pytest.raises(UsageError, match="--workers auto counts this machine's free cores"):
        profile_overrides(p, tmp_path / "p.toml", workers="auto", engine="ray")
    resolved = resolve_workers(got)
    assert 1 <= resolved.run.workers and resolved.run.workers_note is not None
    assert resolved.run.workers_note.startswith("workers auto: ")
    assert resolve_workers(p) is p


def test_warnings_name_workers_auto_as_the_cure() -> None:
    metrics = {"itl": {"p50": 5.0, "p99": 30.0, "error_bound_ms": {"p50": 0.1, "p99": 20.0}}}
    (w,) = error_bound_warnings(metrics)
    # the one cure, from the registry (hopbench/_advice.py), names the one flag
    assert w.endswith(f"cure: {ADVICE['client_read_late'].cure}") and "--workers auto" in w
    for kind in ("client_cpu", "no_cause_named", "collector", "client_read_late"):
        assert "--workers auto" in ADVICE[kind].cure, kind


@pytest.mark.slow
def test_a_tiny_run_with_workers_auto(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    prof = tmp_path / "auto.toml"
    prof.write_text(_PROFILE.format(workers='"auto"'), encoding="utf-8")
    out = tmp_path / "out"
    assert main(["run", str(prof), "--out", str(out), "--no-progress", "--no-report", "--no-gate"]) == _exit.EXIT_OK
    assert "hopbench: workers auto: " in capsys.readouterr().err
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert summary["complete"] and summary["workers"] >= 1 and summary["headline"]["completed"] > 0
    assert summary["workers_auto"].startswith("workers auto: "), summary.get("workers_auto")
    assert not any(w.startswith("--workers auto:") for w in summary["warnings"])  # a note, not a warning
    assert summary["profile"]["run"]["workers"] == "auto"
