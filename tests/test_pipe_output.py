"""Every subcommand's output to a pipe is never wrapped mid-phrase (issue 39 item 7).

A CI log read ``error \\nrate 0.0%``: rich wrapped at 80 columns when stdout was a
pipe. Each subcommand here runs with stdout and stderr pipes, once with ``COLUMNS``
unset and once with ``COLUMNS=80``, and its output is held against the unwrapped
text: the same command at ``COLUMNS=100000`` for the commands that read a results
folder (their output is deterministic), and, for ``run`` and ``search`` (whose
figures differ run to run), the sentences the run wrote to summary.json (each
warning, the capacity message) and its fixed lines, each whole on one line.
(``--help`` is argparse's, wrapped at the terminal's width by design: not covered.)
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

_PROFILE = """
[run]
name = "pipe"
requests = 12
seed = 3
[load]
concurrency = 2
[target]
embedded = true
[emulator]
ttft_ms = 5
tokens_per_s = 2000
output_tokens = 4
[emulator.faults]
http_500 = 0.3
[[scenario]]
name = "a-scenario-with-a-rather-long-name-so-that-lines-pass-eighty-columns"
protocol = "chat"
model = "gpt-emu"
max_tokens = 40
[gate]
"error_rate" = "<= 0.9"
"ttft.p99" = "<= 60s"
"""

_SEARCH = """
[slo]
ttft_ms = 2000
target = 0.5
[search]
mode = "concurrency"
min = 1
max = 2
start = 1
duration_s = 1
warmup_s = 0
max_probes = 2
"""

WIDTHS: tuple[str | None, ...] = (None, "80")


def _cli(args: list[str], columns: str | None, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    if columns is not None:
        env["COLUMNS"] = columns
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, "-m", "hopbench", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=180)


def _whole(sentence: str, output: str) -> None:
    """``sentence`` stands whole on one line of ``output`` (never cut across two)."""
    assert any(sentence in line for line in output.splitlines()), f"cut or missing: {sentence!r}\n{output}"


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, object]]:
    """A run's folder (and its output) for each width, with a profile whose lines pass 80 columns."""
    tmp = tmp_path_factory.mktemp("pipe")
    profile = tmp / "pipe.toml"
    profile.write_text(_PROFILE, encoding="utf-8")
    runs: dict[str, object] = {"profile": profile, "tmp": tmp}
    for width in WIDTHS:
        out = tmp / f"run-{width}"
        runs[f"run-{width}"] = (out, _cli(["run", str(profile), "--out", str(out)], width, tmp))
    yield runs


def _summary(out: Path) -> Mapping[str, object]:
    return json.loads((out / "summary.json").read_text(encoding="utf-8"))


@pytest.mark.slow
@pytest.mark.parametrize("width", WIDTHS)
def test_pipe_output_run_lines_are_whole(folders: dict[str, object], width: str | None) -> None:
    out, done = folders[f"run-{width}"]  # type: ignore[misc]
    assert isinstance(out, Path) and isinstance(done, subprocess.CompletedProcess)
    assert done.returncode in (0, 1, 5), done.stderr
    text = done.stdout + done.stderr
    summary = _summary(out)
    warnings = summary.get("warnings")
    assert isinstance(warnings, list) and warnings, "the profile's faults make warnings: the check needs some"
    for w in warnings:
        _whole(str(w), text)
    _whole(f"results: {out}", done.stdout)
    _whole("a-scenario-with-a-rather-long-name-so-that-lines-pass-eighty-columns", done.stdout)
    run_line = next(line for line in done.stdout.splitlines() if line.startswith("run: "))
    assert "error rate" in run_line and run_line.rstrip().endswith("%"), run_line


@pytest.mark.slow
@pytest.mark.parametrize("width", WIDTHS)
def test_pipe_output_search_lines_are_whole(folders: dict[str, object], width: str | None) -> None:
    tmp = folders["tmp"]
    assert isinstance(tmp, Path)
    profile = tmp / f"search-{width}.toml"
    profile.write_text(_PROFILE.replace("requests = 12\n", "") + _SEARCH, encoding="utf-8")
    out = tmp / f"search-{width}"
    done = _cli(["search", str(profile), "--out", str(out), "--no-report"], width, tmp)
    assert done.returncode in (0, 1, 4, 5), done.stderr
    text = done.stdout + done.stderr
    summary = _summary(out)
    capacity = summary.get("capacity")
    assert isinstance(capacity, dict)
    _whole(f"capacity: {capacity['message'].removeprefix('capacity ')}", done.stdout)  # said once
    for w in summary.get("warnings") or []:  # type: ignore[union-attr]
        if not str(w).startswith("load generator saturated: "):  # the capacity line gives that one
            _whole(str(w), text)


def _folder_commands(run: Path, tmp: Path) -> dict[str, list[str]]:
    copies = []
    for i in range(3):  # calibrate wants three repeats: the same folder thrice
        copy = tmp / f"copy-{i}"
        if not copy.exists():
            shutil.copytree(run, copy)
        copies.append(str(copy))
    return {
        "validate": ["validate", *sorted(str(p) for p in (REPO / "profiles").glob("*.toml"))],
        "gate": ["gate", str(run)],
        "gate-json": ["gate", str(run), "--format", "json"],
        "compare": ["compare", str(run), copies[0]],
        "calibrate": ["calibrate", *copies],
        "report": ["report", copies[1]],
        "export": ["export", copies[2], "--out", str(tmp / "export")],
    }


@pytest.mark.slow
@pytest.mark.parametrize("name", ["validate", "gate", "gate-json", "compare", "calibrate", "report", "export"])
def test_pipe_output_folder_commands_are_never_wrapped(folders: dict[str, object], name: str) -> None:
    """The commands that read a results folder print the same text at 80 columns, with
    COLUMNS unset and unwrapped (COLUMNS=100000)."""
    run, _ = folders["run-None"]  # type: ignore[misc]
    tmp = folders["tmp"]
    assert isinstance(run, Path) and isinstance(tmp, Path)
    args = _folder_commands(run, tmp)[name]
    wide = _cli(args, "100000", REPO)
    assert wide.stdout or wide.stderr, name
    assert any(len(line) > 80 for line in (wide.stdout + wide.stderr).splitlines()) or name in (
        "validate", "export", "report"), f"{name}: no line passes 80 columns: the check checks nothing"
    for width in WIDTHS:
        if name == "export":  # it writes files: one folder per width
            shutil.rmtree(tmp / "export", ignore_errors=True)
        narrow = _cli(args, width, REPO)
        assert (narrow.returncode, narrow.stdout, narrow.stderr) == (wide.returncode, wide.stdout, wide.stderr)
        if name == "export":
            shutil.rmtree(tmp / "export", ignore_errors=True)


#: a table whose ttft p99 is known only to +-21.8 ms (marked ~) and whose itl p50 is under 1 us
#: (printed <0.001): both notes under it
_NOTED = {"complete": True, "warnings": [], "scopes": {"all": {
    "counters": {"started": 1, "completed": 1},
    "metrics": {"ttft": {"count": 100, "p50": 3.6, "p90": 5.0, "p99": 25.5, "p999": 30.0, "max": 31.0, "unit": "ms",
                         "error_bound_ms": {"p50": 0.1, "p90": 0.2, "p99": 21.8, "p999": 26.0}},
                "itl": {"count": 9, "p50": 0.000001, "p90": 0.5, "p99": 0.9, "p999": 0.9, "max": 0.9, "unit": "ms"}}}}}


@pytest.mark.parametrize("where", ["pipe", "terminal"])
def test_summary_table_notes_fit_80_columns(where: str, monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    # breaker: the "~ error bound" footnote was one line of 150 columns: an 80-column terminal
    # wrapped it mid-phrase (rich cut it at the table's width), a pipe kept it 150 wide
    from rich.console import Console

    from hopbench._run_command import _console
    from hopbench.measure._error_bound import NOTE_COLUMNS, uncertain_note_lines
    from hopbench.views._summary_table import SHARED_READ_LINES, render_summary

    monkeypatch.setenv("COLUMNS", "80")
    if where == "pipe":  # stdout to a pipe, as a CI log reads it: hopbench's own console
        render_summary(_NOTED, _console(stderr=False))
        text = capsys.readouterr().out
    else:
        console = Console(record=True, width=80, force_terminal=True)
        render_summary(_NOTED, console)
        text = console.export_text()
    lines = [line.rstrip() for line in text.splitlines()]
    for note in (*uncertain_note_lines(), *SHARED_READ_LINES):
        assert len(note) <= NOTE_COLUMNS, note
        assert note in lines, f"cut or missing: {note!r}\n{text}"


def test_summary_table_gives_each_note_once_across_scopes() -> None:
    # a new user's finding: smoke's four scopes each repeated the "~" and "<0.001" keys (8 lines
    # of the same text); the key now comes under the first table that shows the mark
    import copy

    from rich.console import Console

    from hopbench.measure._error_bound import uncertain_note_lines
    from hopbench.views._summary_table import SHARED_READ_LINES, render_summary

    summary = copy.deepcopy(_NOTED)
    scope = summary["scopes"]["all"]
    summary["scopes"] = {"chat": copy.deepcopy(scope), "messages": copy.deepcopy(scope), "all": scope}
    scope["metrics"]["ttfb"] = {"count": 1, "p50": 1.0, "p90": 1.0, "p99": 1.0, "p999": 1.0, "max": 1.0,
                                "unit": "ms"}  # "all" differs from each scenario: it is printed too
    console = Console(record=True, width=100, force_terminal=True)
    render_summary(summary, console)
    text = console.export_text()
    lines = [line.rstrip() for line in text.splitlines()]
    assert text.count("~") >= 3 * 2  # every scope's table still marks its ttft p99 and p99.9
    for note in (*uncertain_note_lines(), *SHARED_READ_LINES):
        assert lines.count(note) == 1, f"{note!r} {lines.count(note)} times:\n{text}"
    first = lines.index(uncertain_note_lines()[0])
    assert first < next(i for i, line in enumerate(lines) if line.startswith("messages")), text


def test_summary_of_a_run_that_ended_in_its_warm_up_says_so_once() -> None:
    # a new user's finding: Ctrl-C during the warm-up printed four empty scope blocks
    # ("no values recorded", "completed 0") and nothing of the 86 warm-up streams that ran
    from rich.console import Console

    from hopbench.views._summary_table import render_summary

    empty = {"counters": {}, "metrics": {}}
    warm = {"counters": {"started": 86, "completed": 86}, "metrics": {}}
    summary = {"complete": False, "warnings": ["run interrupted (SIGINT): results are partial (complete: false)"],
               "headline": {"started": 0, "completed": 0},
               "scopes": {"chat": dict(empty), "messages": dict(empty), "all": dict(empty)},
               "warmup": {"chat": warm, "all": warm}}
    console = Console(record=True, width=100, force_terminal=True)
    render_summary(summary, console)
    text = console.export_text()
    assert "no stream was measured: the run ended during its warm-up (the warnings say why)" in text, text
    assert "no values recorded" not in text and "completed 0" not in text, text
    assert "warm-up (in no figure): started 86 · completed 86" in text, text
    summary["headline"] = {"started": 5, "completed": 5}  # a measured run: its warm-up line only if broken
    console = Console(record=True, width=100, force_terminal=True)
    render_summary(summary, console)
    text = console.export_text()
    assert "ended in its warm-up" not in text and "warm-up (not in" not in text, text
