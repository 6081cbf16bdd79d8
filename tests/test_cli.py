"""The one command line (hopbench.cli): every subcommand's options, usage errors
and exit codes, and the entry points (console script, python -m hopbench,
python -m hopbench.emulator)."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hopbench import _exit
from hopbench.cli import build_parser, main

ROOT = Path(__file__).resolve().parents[1]
SMOKE = str(ROOT / "profiles" / "smoke.toml")

# The contract: each subcommand's options, as documented (README, docs/*.md).
OPTIONS = {
    "run": {"-h", "--help", "--out", "--results-root", "--target-url", "--quiet", "-q", "--no-progress",
            "--workers", "--engine", "--ray-address", "--no-report", "--no-gate", "--metrics-port",
            "--upstream-record"},
    "search": {"-h", "--help", "--out", "--results-root", "--target-url", "--quiet", "-q", "--no-progress",
               "--workers", "--engine", "--ray-address", "--no-report", "--no-gate"},
    "validate": {"-h", "--help"},
    "serve": {"-h", "--help", "--host", "--port", "--config", "--record", "--log-level", "--config-json",
              "--ready-file"},
    "gate": {"-h", "--help", "--budget", "--baseline", "--format", "--junit", "--allow-incomplete",
             "--allow-saturated", "--allow-load-not-held", "--force"},
    "compare": {"-h", "--help", "--format", "--metric", "--alpha", "--min-effect", "--min-abs-ms",
                "--fail-on-worse", "--force"},
    "calibrate": {"-h", "--help", "--figure", "--scope", "--alpha", "--format", "--force"},
    "report": {"-h", "--help", "--compare", "--out"},
    "export": {"-h", "--help", "--format", "--out"},
    "check": {"-h", "--help", "--out", "--long", "--quiet", "-q"},
}
POSITIONALS = {"run": ["profile"], "search": ["profile"], "validate": ["profile"], "serve": [], "gate": ["results_dir"],
               "compare": ["base_dir", "candidate_dir"], "calibrate": ["results_dirs"], "report": ["results_dir"],
              "export": ["results_dir"], "check": ["profile"]}


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(action.choices)


def test_cli_every_subcommand_has_its_documented_options() -> None:
    subs = _subparsers()
    assert set(subs) == set(OPTIONS)
    for name, sub in subs.items():
        opts = {o for a in sub._actions for o in a.option_strings}
        assert opts == OPTIONS[name], name
        assert [a.dest for a in sub._actions if not a.option_strings] == POSITIONALS[name], name


@pytest.mark.parametrize("command", sorted(OPTIONS))
def test_cli_help_of_every_subcommand_exits_0(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([command, "--help"]) == _exit.EXIT_OK
    out = capsys.readouterr().out
    assert out.startswith(f"usage: hopbench {command} ")
    for opt in OPTIONS[command] - {"--config-json", "--ready-file"}:  # those two are internal
        assert opt in out, opt
    assert "--config-json" not in out


def test_cli_top_level_help_version_and_no_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == _exit.EXIT_OK
    out = capsys.readouterr().out
    for command in OPTIONS:
        assert f"    {command} " in out or f"    {command}\n" in out, command  # a long name wraps its help
    for code in (_exit.EXIT_OK, _exit.EXIT_BREACH, _exit.EXIT_INPUT, _exit.EXIT_CRASH, _exit.EXIT_TARGET_FAILED,
                 _exit.EXIT_INCONCLUSIVE, _exit.EXIT_INTERRUPTED, _exit.EXIT_TERMINATED):
        assert str(code) in out.split("Exit codes:")[1], code
    assert main(["--version"]) == _exit.EXIT_OK
    assert capsys.readouterr().out.startswith("hopbench ")
    assert main([]) == _exit.EXIT_INPUT
    assert capsys.readouterr().out.startswith("usage: hopbench ")


@pytest.mark.parametrize(("argv", "prog"), [
    (["bogus"], "hopbench"),
    (["--bogus"], "hopbench"),
    (["run"], "hopbench run"),
    (["run", SMOKE, "--workers", "two"], "hopbench run"),
    (["run", SMOKE, "--engine", "k8s"], "hopbench run"),
    (["validate"], "hopbench validate"),
    (["serve", "--port", "70000"], "hopbench serve"),
    (["serve", "--port", "http"], "hopbench serve"),
    (["serve", "--log-level", "loud"], "hopbench serve"),
    (["serve", "--bogus"], "hopbench serve"),
    (["gate"], "hopbench gate"),
    (["gate", "x", "--format", "yaml"], "hopbench gate"),
    (["gate", "x", "--bogus"], "hopbench gate"),
    (["compare"], "hopbench compare"),
    (["compare", "a", "b", "--alpha", "small"], "hopbench compare"),
    (["report"], "hopbench report"),
    (["report", "x", "--bogus"], "hopbench report"),
])
def test_cli_usage_errors_exit_2_naming_the_subcommand(argv: list[str], prog: str,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == _exit.EXIT_INPUT
    err = capsys.readouterr().err
    assert f"usage: {prog} " in err and f"{prog}: error: " in err, err


def test_cli_validate_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", SMOKE]) == _exit.EXIT_OK
    assert capsys.readouterr().out == f"{SMOKE}: ok\n"
    bad = tmp_path / "bad.toml"
    bad.write_text("[load]\nconcurrency = -4\n", encoding="utf-8")
    assert main(["validate", SMOKE, str(bad)]) == _exit.EXIT_INPUT
    captured = capsys.readouterr()
    assert captured.out == f"{SMOKE}: ok\n"
    assert captured.err.startswith(f"hopbench: error: {bad}:2: ") and "concurrency" in captured.err
    assert main(["validate", str(tmp_path / "missing.toml")]) == _exit.EXIT_INPUT


def test_cli_validate_validates_every_file_and_reports_each(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    # breaker: `hopbench validate a.toml b.toml c.toml` stopped at the first bad file, so c.toml went unjudged
    bad = tmp_path / "bad.toml"
    bad.write_text("[load]\nconcurrency = -4\n", encoding="utf-8")
    dup = tmp_path / "dup.toml"
    dup.write_text(Path(SMOKE).read_text(encoding="utf-8").replace("seed = 1", "seed = 1\nseed = 2", 1),
                   encoding="utf-8")
    missing = tmp_path / "missing.toml"
    assert main(["validate", str(bad), SMOKE, str(missing), str(dup), SMOKE]) == _exit.EXIT_INPUT
    captured = capsys.readouterr()
    assert captured.out == f"{SMOKE}: ok\n" * 2
    errors = captured.err.splitlines()
    assert [ln.split(": error: ", 1)[1].split(":", 1)[0] for ln in errors[:3]] == [str(bad), str(missing), str(dup)]
    assert "concurrency" in errors[0] and "run.seed: given twice" in errors[2]
    assert errors[3:] == ["hopbench: 3 of 5 profiles invalid"]
    assert main(["validate", SMOKE, SMOKE]) == _exit.EXIT_OK


def test_cli_validate_refuses_a_secret_header_written_out(tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    # breaker: a literal X-Goog-Api-Key validated, and the run recorded it in summary.json and report.html
    bad = tmp_path / "key.toml"
    bad.write_text('[run]\nrequests = 1\n[load]\nconcurrency = 1\n[target]\n'
                   'headers = { "X-Goog-Api-Key" = "AIzaSy-do-not-show" }\n[[scenario]]\nprotocol = "chat"\n',
                   encoding="utf-8")
    assert main(["validate", str(bad)]) == _exit.EXIT_INPUT
    err = capsys.readouterr().err
    assert f"{bad}:6: target.headers.X-Goog-Api-Key: secret headers may not be written" in err
    assert "header_env" in err and "AIzaSy" not in err


@pytest.mark.parametrize(("extra", "message"), [
    (["--workers", "0"], "--workers: expected 'auto' or an integer from 1 to "),
    (["--target-url", "ftp://example.com"], "--target-url: "),
    # silently ignored before: the run went ahead on this machine with the address unused
    (["--ray-address", "ray://10.0.0.1:10001"], "--ray-address: only with --engine ray"),
])
def test_cli_run_rejects_bad_overrides_before_any_load(extra: list[str], message: str, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    assert main(["run", SMOKE, "--out", str(out), *extra]) == _exit.EXIT_INPUT
    assert message in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.slow
@pytest.mark.parametrize(("module", "argv", "code", "usage"), [
    ("hopbench", ["--help"], 0, "usage: hopbench [-h]"),
    ("hopbench", ["serve", "--help"], 0, "usage: hopbench serve"),
    ("hopbench.emulator", ["--help"], 0, "usage: hopbench serve"),
    ("hopbench.emulator", ["--port", "70000"], 2, "usage: hopbench serve"),
])
def test_cli_python_m_entry_points(module: str, argv: list[str], code: int, usage: str) -> None:
    proc = subprocess.run([sys.executable, "-m", module, *argv], capture_output=True, text=True,
                          cwd=ROOT, timeout=60)
    assert proc.returncode == code, proc.stderr[-500:]
    assert usage in proc.stdout + proc.stderr


def test_cli_run_prints_paths_as_is(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Text hopbench prints is not rich markup: a folder named like a tag ("[warm-up]") comes
    out whole, on one line (the class of the progress line's eaten "[warm-up]")."""
    from hopbench.cli import main

    prof = tmp_path / "p.toml"
    prof.write_text('[run]\nrequests = 4\n[load]\nconcurrency = 2\n[target]\nembedded = true\n'
                    '[emulator]\nttft_ms = 1\ntokens_per_s = 5000\noutput_tokens = 2\n'
                    '[[scenario]]\nprotocol = "chat"\n[gate]\n"ttft.p50" = "<= 60s"\n', encoding="utf-8")
    out = tmp_path / "[warm-up]" / "[b]run"
    # 5: the gate is inconclusive on a machine too busy to measure (its neighbours' doing)
    assert main(["run", str(prof), "--out", str(out), "--no-progress", "--no-report"]) in (0, 5)
    captured = capsys.readouterr()
    assert f"results: {out}" in captured.out
    assert f"-> {out}" in captured.err


def test_cli_a_bug_exits_3_never_1(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    # exit 1 means "a budget breached" (gate) or "worse" (compare --fail-on-worse): an
    # uncaught exception must not read as a verdict in CI
    from hopbench.views import _compare

    def boom(*args: object, **kwargs: object) -> None:
        raise AttributeError("'NoneType' object has no attribute 'get'")

    monkeypatch.setattr(_compare, "compare_command", boom)
    assert main(["compare", str(tmp_path), str(tmp_path), "--fail-on-worse"]) == _exit.EXIT_CRASH
    err = capsys.readouterr().err
    assert "hopbench compare: internal error" in err and "AttributeError" in err, err


def test_cli_compare_a_summary_with_a_null_scope_is_bad_input(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from hopbench.driver._results import SCHEMA

    d = tmp_path / "r"
    d.mkdir()
    (d / "summary.json").write_text(json.dumps({"schema": SCHEMA, "complete": True, "scopes": {"all": None}}),
                                    encoding="utf-8")
    assert main(["compare", str(d), str(d)]) == _exit.EXIT_INPUT
    assert "scopes.all: expected an object" in capsys.readouterr().err
    (tmp_path / "b.toml").write_text('"ttft.p99" = "<= 1s"\n', encoding="utf-8")
    assert main(["gate", str(d), "--budget", str(tmp_path / "b.toml")]) == _exit.EXIT_INPUT
    assert "scopes.all: expected an object" in capsys.readouterr().err


def test_cli_tables_are_never_cut_off_a_terminal(capsys: pytest.CaptureFixture[str]) -> None:
    """Output to a file or a pipe keeps every digit (issue 38: `[upstream]` run output written to a
    file cut table numbers to `3,…` at rich's default 80 columns); a terminal keeps its own width."""
    from rich.table import Table

    from hopbench._run_command import _console

    table = Table()
    for i in range(12):
        table.add_column(f"column {i}", no_wrap=True)
    table.add_row(*[f"{3_120_000 + i:,}" for i in range(12)])
    _console(stderr=False).print(table)
    out = capsys.readouterr().out
    assert "…" not in out and "3,120,011" in out and "column 11" in out


@pytest.mark.slow
def test_cli_run_to_a_pipe_never_wraps_a_line(tmp_path: Path) -> None:
    # issue 39, item 7: output to a pipe or a CI log was wrapped at 80 columns mid-phrase
    # ("run: ... · \nerror rate 0.0%"); tables keep their width, lines stay whole
    profile = tmp_path / "p.toml"
    profile.write_text('[run]\nname = "a-profile-name-long-enough-to-push-the-run-line-past-eighty"\n'
                       'requests = 4\n[load]\nconcurrency = 2\n[emulator]\nttft_ms = 5\noutput_tokens = 3\n'
                       '[[scenario]]\nprotocol = "chat"\nmodel = "m"\n', encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "FORCE_COLOR", "TERM")}
    proc = subprocess.run([sys.executable, "-m", "hopbench", "run", str(profile), "--out", str(tmp_path / "r")],
                          capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    run_line = [x for x in lines if x.startswith("run: ")]
    assert len(run_line) == 1 and "error rate" in run_line[0] and len(run_line[0]) > 80, lines
    assert not [x for x in lines if x.startswith(("error rate", "rate ", "·"))], lines


def test_cli_export_formats_are_the_exporters_own() -> None:
    # the parser lists them itself so that `hopbench --help` loads no exporter; this keeps
    # the two in step (one rule: hopbench.views._export.FORMATS)
    from hopbench.views._export import FORMATS

    export = _subparsers()["export"]
    fmt = next(a for a in export._actions if "--format" in a.option_strings)
    assert tuple(fmt.choices or ()) == FORMATS


@pytest.mark.parametrize(("reason", "code"), [
    (None, None), ("", None),
    ("target unreachable: the first 20 connection attempts to http://127.0.0.1:9 failed", 2),
    ("target lost: the embedded emulator exited 3.1 s into the run", 4),
    ("target failing: the first 20 responses from http://127.0.0.1:9 all failed and none streamed", 4),
    ("SIGTERM", 143), ("SIGINT", 130), ("cancelled before start", 130),
])
def test_a_stop_reason_maps_to_one_exit_code(reason: str | None, code: int | None) -> None:
    # one rule read by the one-process run, the workers and Ray (hopbench/_exit.py)
    from hopbench._exit import stop_exit_code

    assert stop_exit_code(reason) == code


def test_cli_ctrl_c_while_starting_is_one_line_and_130(capsys: pytest.CaptureFixture[str],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    # a SIGINT while the parser (and the subcommands' imports) load: no traceback (issue 39)
    from hopbench import cli

    def interrupted() -> argparse.ArgumentParser:
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "build_parser", interrupted)
    assert main(["run", SMOKE]) == _exit.EXIT_INTERRUPTED
    err = capsys.readouterr().err
    assert err == "hopbench: interrupted before the load started: nothing was written\n", err


def test_cli_import_hopbench_is_light() -> None:
    # the console script's first step: `import hopbench` loads only the error tree and the
    # version, so start-up is milliseconds and a Ctrl-C meets main()'s handler
    code = "import sys, hopbench; print(sorted(m for m in sys.modules if m.startswith('hopbench')))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.stdout.strip() == "['hopbench', 'hopbench._errors', 'hopbench._lazy', 'hopbench._version']"
    from hopbench import SSEScanner, load_profile, run_profile  # the public names still resolve

    assert SSEScanner.__module__ == "hopbench.sse" and callable(load_profile) and callable(run_profile)


def test_cli_ctrl_c_while_the_tables_print_keeps_a_complete_runs_exit_code(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    # the run is over and written: a Ctrl-C during the tables skips them, and the gate's verdict
    # is still the exit code, not 130 (issue 39)
    import json

    from hopbench.views import _after_run

    real = _after_run.after_run
    calls: list[bool] = []

    def tables_interrupted(*args: object, quiet: bool, **kwargs: object) -> int:
        calls.append(quiet)
        if not quiet:
            raise KeyboardInterrupt
        return real(*args, quiet=quiet, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(_after_run, "after_run", tables_interrupted)
    prof = tmp_path / "p.toml"
    prof.write_text('[run]\nrequests = 4\n[load]\nconcurrency = 2\n[target]\nembedded = true\n'
                    '[emulator]\nttft_ms = 1\ntokens_per_s = 5000\noutput_tokens = 2\n'
                    '[[scenario]]\nprotocol = "chat"\n[gate]\n"ttft.p50" = "<= 0.001ms"\n', encoding="utf-8")
    out = tmp_path / "r"
    code = main(["run", str(prof), "--out", str(out), "--no-progress", "--no-report"])
    captured = capsys.readouterr()
    assert calls == [False, True]
    assert "SIGINT while printing: tables skipped" in captured.err
    assert f"results: {out}" in captured.out
    # the gate's own code: 1 (breached) or, on a machine too busy to tell, 5 (inconclusive)
    assert code == json.loads((out / "gate.json").read_text())["exit_code"]
    assert code in (_exit.EXIT_BREACH, _exit.EXIT_INCONCLUSIVE)


def test_every_argument_of_every_subcommand_has_help() -> None:
    """Issue 39: ``--help`` left validate's PROFILE, compare's BASE_DIR, calibrate's RESULTS_DIR and
    serve's --log-level unexplained; the top-level compare entry did not name the A/B arms folder."""
    parser = build_parser()
    subs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    bare = [f"{name} {a.dest}" for name, p in subs.choices.items() for a in p._actions
            if not isinstance(a, argparse._HelpAction) and a.help is None]
    assert bare == []
    top = {c.dest: c.help for c in subs._choices_actions}
    assert "A/B arms" in (top["compare"] or "")
    assert "keepalive comment" in (subs.choices["check"].description or "")  # what the HopBase contract is


def test_target_url_over_an_emulator_profile_with_a_gate_warns_before_the_load(tmp_path: Path) -> None:
    """A new user's finding: docs/gate.md's CI example ran profiles/ci-gate.toml (budgets measured
    against its [emulator]) with --target-url, failed on TTFT 201 ms against <= 128 ms, and only
    summary.json said the emulator was not used. ``run`` now warns first, also under -q."""
    from hopbench._run_command import check_before_load, profile_overrides
    from hopbench.config import load_profile

    src = Path(__file__).resolve().parent.parent / "profiles" / "ci-gate.toml"
    profile = load_profile(src)
    assert not [n for n in check_before_load(profile) if "[emulator]" in n]  # its own emulator: no word
    moved = profile_overrides(profile, src, target_url="http://127.0.0.1:9137")
    (note,) = [n for n in check_before_load(moved) if "[emulator]" in n]
    assert note.startswith("the profile's [emulator] table is not used (the target is http://127.0.0.1:9137), "
                           "but its [gate] is: ") and "Calibrate first" in note
    no_gate = tmp_path / "p.toml"  # no [gate]: nothing measured against the emulator is applied
    no_gate.write_text(src.read_text(encoding="utf-8").split("[gate]")[0], encoding="utf-8")
    bare = profile_overrides(load_profile(no_gate), no_gate, target_url="http://127.0.0.1:9137")
    assert not [n for n in check_before_load(bare) if "[emulator]" in n]
