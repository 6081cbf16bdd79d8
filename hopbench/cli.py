"""The ``hopbench`` command line: every subcommand's arguments and the exit codes.

Subcommands: run, search, validate, serve, gate, compare, calibrate, report, export, check. Each
is parsed here (one argparse tree, one parser class) and handed to its implementation as
typed arguments: ``run``, ``search`` and ``validate`` in :mod:`hopbench._run_command`, ``gate`` in
:func:`hopbench.views._gate.gate_command`, ``compare`` in
:func:`hopbench.views._compare.compare_command`, ``report`` in
:func:`hopbench.report._page.write_report`, ``export`` in
:func:`hopbench.views._export.export_results`, ``check`` in
:func:`hopbench.check._command.check_command`, ``serve`` in
:func:`hopbench.emulator._serve.serve_command` (also ``python -m
hopbench.emulator``). Implementations are imported when their subcommand runs,
so ``hopbench --help`` and ``hopbench validate`` stay light.

Exit codes are the same everywhere (defined in :mod:`hopbench._exit`): 0
success, 1 a budget breached / a worse verdict (gate, compare), 2 bad input
(profile, arguments, unreadable results), 3 hopbench itself failed mid-run
(partial results written; also: results that could not be written, e.g. a full
disk; also a bug: an uncaught exception in any subcommand, with its traceback, never Python's
exit 1, which reads as a verdict), 4 the target failed the run: no stream completed (or none was measured), or the target died /
stopped answering mid-run (results written), 130 interrupted by SIGINT and 143
by SIGTERM (partial results written). A target that cannot be reached at all
ends the run early with exit 2. ``main`` returns the code (``--help`` and ``--version``: 0,
a usage error: 2) rather than raising ``SystemExit``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeAlias

from ._errors import HopbenchError, ProfileError, ResultsError, UsageError
from ._exit import (
    EXIT_BREACH,
    EXIT_CRASH,
    EXIT_INCONCLUSIVE,
    EXIT_INPUT,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_TARGET_FAILED,
    EXIT_TERMINATED,
)
from ._version import __version__

__all__ = ["EXIT_BREACH", "EXIT_CRASH", "EXIT_INCONCLUSIVE", "EXIT_INPUT", "EXIT_INTERRUPTED", "EXIT_OK",
           "EXIT_TARGET_FAILED", "EXIT_TERMINATED", "build_parser", "main"]

_FORMATS = ("text", "markdown", "json")
_LOG_LEVELS = ("debug", "info", "warning", "error", "critical")


class _Parser(argparse.ArgumentParser):
    """Usage errors exit with :data:`EXIT_INPUT` (argparse's own 2, stated once here)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        self.exit(EXIT_INPUT, f"{self.prog}: error: {message}\n")


#: the subcommands' parsers (``build_parser``'s ``add_subparsers``)
_Subparsers: TypeAlias = "argparse._SubParsersAction[_Parser]"


def _port(text: str) -> int:
    """A TCP port, 0 to 65535 (0: any free port)."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected 0 to 65535, got {text!r}") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"expected 0 to 65535, got {port}")
    return port


def _workers(text: str) -> int | str:
    """``--workers``: ``auto`` (the machine's free cores: docs/scaleout.md) or an integer
    (its range is checked with the profile's rule, ``config._profile.check_workers``)."""
    if text == "auto":
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected 'auto' or an integer, got {text!r}") from None


def build_parser() -> argparse.ArgumentParser:
    """The whole argument tree: ``hopbench [--version] COMMAND ...``.

    Returns:
        The top-level parser; ``args.command`` names the subcommand (None when
        absent), ``args.handler`` its function ``(args) -> exit code`` and
        ``args.parser`` its parser (for usage errors found after parsing).
    """
    p = _Parser(prog="hopbench", description="Streaming load tester for LLM gateways "
                "(OpenAI Chat Completions, OpenAI Responses, Anthropic Messages over SSE).",
                epilog="Exit codes: 0 ok, 1 budget breached / worse, 2 bad input (also: target "
                       "unreachable), 3 crashed mid-run or results not written (partial results), "
                       "4 nothing completed (in the run, one scenario or one arm) or nothing measured, or the target died mid-run, "
                       "5 inconclusive (the gate or compare could not tell a change from the runner's noise: retry "
                       "on a quieter runner), 130 SIGINT / 143 SIGTERM (partial results once the load "
                       "has started; before it, nothing is written).")
    p.add_argument("--version", action="version", version=f"hopbench {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    for add in (_add_run, _add_search, _add_validate, _add_serve, _add_gate, _add_compare, _add_calibrate,
                _add_report, _add_export, _add_check):
        add(sub)
    return p


def _add_run(sub: _Subparsers) -> None:
    """``hopbench run PROFILE``: run a profile into a results folder."""
    r = sub.add_parser("run", help="run a load profile and write a results folder",
                       description="Run a TOML load profile against a gateway (or the built-in "
                       "emulator when the profile's target is embedded) and write results/<name>-<UTC time>/.")
    r.add_argument("profile", type=Path, help="the profile (TOML), e.g. profiles/smoke.toml")
    r.add_argument("--out", type=Path, metavar="DIR", help="results folder (default results/<name>-<UTC timestamp>)")
    r.add_argument("--results-root", type=Path, default=Path("results"), metavar="DIR",
                   help="where result folders are created (default: results)")
    r.add_argument("--target-url", metavar="URL", help="override target.url (e.g. http://127.0.0.1:8000)")
    r.add_argument("--quiet", "-q", action="store_true", help="no progress lines and no summary table")
    r.add_argument("--no-progress", action="store_true", help="no progress lines (summary still shown)")
    r.add_argument("--workers", type=_workers, metavar="N|auto",
                   help="worker processes on this host, or auto: as many as its free cores (overrides run.workers)")
    r.add_argument("--engine", choices=("local", "ray"), help="where workers run (overrides run.engine)")
    r.add_argument("--ray-address", metavar="ADDRESS", help="Ray cluster for --engine ray (default: a local Ray instance)")
    r.add_argument("--no-report", action="store_true", help="do not write report.html")
    r.add_argument("--no-gate", action="store_true", help="do not apply the profile's [gate] budgets at the end")
    r.add_argument("--metrics-port", type=_port, metavar="PORT",
                   help="serve live figures in the Prometheus/OpenMetrics text format on "
                        "http://127.0.0.1:PORT/metrics while the run goes (overrides run.metrics_port; "
                        "0: any free port; docs/observability.md)")
    r.add_argument("--upstream-record", type=Path, metavar="FILE",
                   help="the ground truth of a `hopbench serve --record FILE` started by hand behind the "
                        "gateway: gateway overhead against it (sets or overrides [upstream] record; "
                        "docs/gateway-overhead.md)")
    r.set_defaults(handler=_run, parser=r)


def _add_search(sub: _Subparsers) -> None:
    """``hopbench search PROFILE``: the profile's ``[search]`` for the highest load held."""
    se = sub.add_parser("search", help="find the highest load the gateway holds within its [slo] (the profile's [search])",
                        description="Run the profile's [search]: probes of growing load, then bisection, "
                        "each judged by its [slo] good fraction (Wilson lower bound >= target), the load held "
                        "and hopbench not saturated; writes one results folder with a capacity block (docs/slo.md).")
    se.add_argument("profile", type=Path, help="a profile with [slo] and [search] tables, e.g. profiles/capacity.toml")
    se.add_argument("--out", type=Path, metavar="DIR", help="results folder (default results/<name>-<UTC timestamp>)")
    se.add_argument("--results-root", type=Path, default=Path("results"), metavar="DIR",
                    help="where result folders are created (default: results)")
    se.add_argument("--target-url", metavar="URL", help="override target.url")
    se.add_argument("--quiet", "-q", action="store_true", help="no progress lines and no tables")
    se.add_argument("--no-progress", action="store_true", help="no line per stage (the tables still shown)")
    se.add_argument("--workers", type=_workers, metavar="N|auto",
                    help="worker processes on this host, or auto: as many as its free cores (overrides run.workers)")
    se.add_argument("--engine", choices=("local", "ray"), help="where workers run (overrides run.engine)")
    se.add_argument("--ray-address", metavar="ADDRESS", help="Ray cluster for --engine ray")
    se.add_argument("--no-report", action="store_true", help="do not write report.html")
    se.add_argument("--no-gate", action="store_true", help="do not apply the profile's [gate] budgets at the end")
    se.set_defaults(handler=_search, parser=se)


def _add_validate(sub: _Subparsers) -> None:
    """``hopbench validate PROFILE...``: check profiles without load."""
    v = sub.add_parser("validate", help="check a profile without sending load",
                       description="Validate profiles (every key, the [emulator] and [gate] tables, "
                       "prompt files, environment variables), every one given: 'PATH: ok' for each valid "
                       "one, each invalid one's first error on stderr; exit 0 when all are valid, 2 when any "
                       "is not.")
    v.add_argument("profile", type=Path, nargs="+", metavar="PROFILE",
                   help="one or more profiles (TOML), e.g. profiles/*.toml")
    v.set_defaults(handler=_validate, parser=v)


def _add_serve(sub: _Subparsers) -> None:
    """``hopbench serve``: the built-in gateway emulator."""
    s = sub.add_parser("serve", help="run the built-in gateway emulator (hopbench serve --help)",
                       description="Run the built-in HopBase-style gateway emulator (docs/emulator.md).")
    s.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    s.add_argument("--port", type=_port, default=8000, help="TCP port, 0 for any free (default 8000)")
    s.add_argument("--config", type=Path, help="emulator TOML config file")
    s.add_argument("--record", type=Path, help="append ground truth (JSON lines) to this file")
    s.add_argument("--log-level", default="warning", choices=_LOG_LEVELS,
                   help="the server's (uvicorn's) log level on stderr (default warning)")
    # Used by EmbeddedEmulator: the config as JSON (to_mapping) and where to report the URL.
    s.add_argument("--config-json", type=Path, help=argparse.SUPPRESS)
    s.add_argument("--ready-file", type=Path, help=argparse.SUPPRESS)
    s.set_defaults(handler=_serve, parser=s)


def _add_gate(sub: _Subparsers) -> None:
    """``hopbench gate RESULTS_DIR``: hold a results folder to budgets."""
    g = sub.add_parser("gate", help="hold a results folder to budgets: exit 1 on a breach (hopbench gate --help)",
                       description="Hold a results folder to budgets: the profile's [gate] table "
                                   "(recorded in summary.json) or --budget FILE. See docs/gate.md.",
                       epilog="Exit codes: 0 every budget held, 1 a budget breached beyond the run's noise (or "
                              "the run was interrupted or completed nothing), 5 inconclusive (a breach within the "
                              "run's noise, too few samples, a saturated run or a load not held: retry on a "
                              "quieter runner), 2 bad input (also a --baseline of another load shape, without "
                              "--force).")
    g.add_argument("results_dir", type=Path, metavar="RESULTS_DIR", help="a folder written by hopbench run")
    g.add_argument("--budget", type=Path, metavar="FILE",
                   help="budget TOML (its [gate] table, or the whole file); replaces the profile's [gate]")
    g.add_argument("--baseline", type=Path, metavar="BASE_RESULTS_DIR",
                   help="results folder that 'baseline' in a limit refers to")
    g.add_argument("--format", choices=_FORMATS, default="text",
                   help="report on stdout (default: text)")
    g.add_argument("--junit", type=Path, metavar="PATH", help="also write JUnit XML (one test case per budget)")
    g.add_argument("--allow-incomplete", action="store_true",
                   help="an interrupted run does not fail the gate by itself")
    g.add_argument("--allow-saturated", action="store_true",
                   help="a saturated load generator does not fail the gate by itself")
    g.add_argument("--allow-load-not-held", action="store_true",
                   help="a run that did not hold the load it asked for (summary.json load.held false) "
                        "does not fail the gate by itself")
    g.add_argument("--force", action="store_true",
                   help="use a --baseline whose load shape differs from the run's (as hopbench compare --force)")
    g.set_defaults(handler=_gate, parser=g)


def _add_compare(sub: _Subparsers) -> None:
    """``hopbench compare BASE_DIR CAND_DIR``: two results folders, with statistics."""
    from .views._compare import ALPHA, MIN_ABS_MS, MIN_EFFECT  # the defaults live with the statistics

    c = sub.add_parser("compare", help="compare two results folders, or the arms of one A/B arms folder, with statistics "
                       "(hopbench compare --help)",
                       description="Compare two results folders (or the arms of one A/B arms folder) per scope and "
                                   "metric, with a verdict "
                                   "from statistical tests on the HDR histograms. See docs/compare.md.",
                       epilog="Exit codes: 0; with --fail-on-worse 1 when a figure is worse beyond the runs' "
                              "noise, 5 when one is inconclusive (retry on a quieter runner); 2 bad input.")
    c.add_argument("base_dir", type=Path, metavar="BASE_DIR",
                   help="the baseline results folder (or hopbench check folder), or an A/B arms folder alone")
    c.add_argument("candidate_dir", type=Path, metavar="CAND_DIR", nargs="?",
                   help="omitted: BASE_DIR is an A/B arms run, each arm judged against the first on the "
                        "rounds' paired differences (docs/ab-arms.md, 'Paired verdicts')")
    c.add_argument("--format", choices=_FORMATS, default="text", help="output format (default text)")
    c.add_argument("--metric", action="append", metavar="NAME",
                   help="metric to compare (repeat, or comma-separate); default: the gateway-facing ones")
    c.add_argument("--alpha", type=float, default=ALPHA, help=f"significance level (default {ALPHA})")
    c.add_argument("--min-effect", type=float, default=None,
                   help="smallest relative change worth a verdict (0.05 = 5 %%): a smaller one reads same "
                        "(default: none beyond the runs' measured noise)")
    c.add_argument("--min-abs-ms", type=float, default=None,
                   help="times: smallest absolute change worth a verdict, ms: a smaller one reads same "
                        "(default: none beyond the runs' measured noise)")
    c.add_argument("--fail-on-worse", action="store_true",
                   help="exit 1 when a figure is worse beyond noise, 5 when one is inconclusive")
    c.add_argument("--force", action="store_true",
                   help="compare runs whose load shapes differ, or a run that did not complete (partial)")
    c.set_defaults(handler=_compare, parser=c)


def _add_calibrate(sub: _Subparsers) -> None:
    """``hopbench calibrate DIR DIR DIR ...``: this runner's noise floor and budgets, from A/A repeats."""
    from .views._calibrate import DEFAULT_FIGURES, OVERHEAD_FIGURES

    k = sub.add_parser("calibrate", help="noise floor per figure and proposed budgets from A/A repeats "
                                         "(hopbench calibrate --help)",
                       description="From 3 or more results folders of one profile against one unchanged target "
                                   "(A/A repeats on the runner that will gate), report each figure's noise "
                                   "floor and propose [gate] budgets with their measured false-alarm rate. "
                                   "See docs/gate.md, 'Calibrate first'.",
                       epilog="Exit codes: 0, 2 bad input (fewer than 3 folders, an unknown figure, an "
                              "unreadable folder, a repeat that did not complete without --force, no figure "
                              "measured by every repeat).")
    k.add_argument("results_dirs", type=Path, nargs="+", metavar="RESULTS_DIR",
                   help="3 or more results folders of one profile run unchanged (A/A repeats)")
    k.add_argument("--figure", action="append", metavar="METRIC.STAT",
                   help="figure to calibrate (repeat, or comma-separate); default: the gateway overhead's "
                        f"{', '.join(OVERHEAD_FIGURES)} when the repeats measured them (an [upstream]), then "
                        f"{', '.join(DEFAULT_FIGURES)}")
    k.add_argument("--scope", action="append", metavar="SCOPE",
                   help="scope (scenario) to calibrate in (repeat); default: all")
    k.add_argument("--alpha", type=float, default=0.01,
                   help="the budgets' designed false-alarm rate (default 0.01)")
    k.add_argument("--format", choices=("text", "json"), default="text", help="output format (default text)")
    k.add_argument("--force", action="store_true",
                   help="take repeats that did not complete (interrupted: refused otherwise), with a warning")
    k.set_defaults(handler=_calibrate, parser=k)


def _add_report(sub: _Subparsers) -> None:
    """``hopbench report RESULTS_DIR``: (re)build report.html."""
    rep = sub.add_parser("report", help="(re)build report.html for a results folder (hopbench report --help)",
                         description="(Re)generate report.html for a results folder: one self-contained page "
                                     "(opens offline) with percentile spectra, latency and throughput over time, "
                                     "outcomes, keepalives, warnings, profile and environment.")
    rep.add_argument("results_dir", type=Path, metavar="RESULTS_DIR", help="a results folder")
    rep.add_argument("--compare", type=Path, metavar="OTHER_DIR",
                     help="a second results folder, overlaid (dashed) on the plots")
    rep.add_argument("--out", type=Path, metavar="FILE",
                     help="where to write (default RESULTS_DIR/report.html)")
    rep.set_defaults(handler=_report, parser=rep)


def _add_export(sub: _Subparsers) -> None:
    """``hopbench export RESULTS_DIR``: figures and streams as csv / jsonl / parquet."""
    ex = sub.add_parser("export", help="write a results folder's figures and streams as csv / jsonl / parquet",
                        description="Export a results folder's summary figures (summary.<ext>, one row per "
                                    "figure) and per-stream records (streams.<ext>) for notebooks and BI tools. "
                                    "See docs/observability.md.")
    ex.add_argument("results_dir", type=Path, metavar="RESULTS_DIR", help="a folder written by hopbench run")
    ex.add_argument("--format", choices=("csv", "jsonl", "parquet"), default="csv",
                    help="csv (default), jsonl, or parquet (needs: pip install 'hopbench[parquet]')")
    ex.add_argument("--out", type=Path, metavar="DIR", help="where to write (default RESULTS_DIR/export)")
    ex.set_defaults(handler=_export, parser=ex)


def _add_check(sub: _Subparsers) -> None:
    """``hopbench check PROFILE``: hold a gateway to its streaming contract (docs/check.md)."""
    c = sub.add_parser("check", help="hold a gateway to its streaming contract: exit 1 when a check fails",
                       description="Drive the emulator behind the gateway (the profile's [upstream] listen) "
                       "through a script of behaviours and grade each check of the profile's [contract] "
                       "(without one, the HopBase contract: events passed unchanged, a keepalive comment about "
                       "every 10 s of silence, a retry or error after 90-150 s of upstream silence, errors as "
                       "in-stream events; docs/check.md, 'The contract'): pass, fail, skip or inconclusive. Exit 0 no "
                       "check failed, 1 one did, 2 bad input, 4 nothing could be checked.")
    c.add_argument("profile", type=Path, help="the check profile (TOML), e.g. profiles/check.toml")
    c.add_argument("--out", type=Path, metavar="DIR",
                   help="where contract.json, contract.xml and contract.md go (default results/<name>-<UTC timestamp>)")
    c.add_argument("--long", action="store_true",
                   help="also run stall_handling with the contract's window (HopBase: up to 3 minutes)")
    c.add_argument("--quiet", "-q", action="store_true", help="no progress lines (the table is still printed)")
    c.set_defaults(handler=_check, parser=c)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``hopbench`` console script, ``python -m hopbench`` and
    ``python -m hopbench.emulator`` (as ``serve``).

    Args:
        argv: the arguments after the program name (None: ``sys.argv[1:]``).

    Returns:
        The exit code (see the module docstring); never raises ``SystemExit``.
    """
    try:
        return _main(list(sys.argv[1:] if argv is None else argv))
    except KeyboardInterrupt as exc:  # Ctrl-C while starting (imports, parsing) or in a subcommand
        # without a run: one line, never a traceback (a run's own signals write partial results)
        print("hopbench: interrupted before the load started: nothing was written", file=sys.stderr)
        return EXIT_TERMINATED if getattr(exc, "signal_name", "") == "SIGTERM" else EXIT_INTERRUPTED


def _main(argv: list[str]) -> int:
    parser = build_parser()
    try:
        args, extra = parser.parse_known_args(argv)
        if extra:  # named by the subcommand, with its usage line
            (parser if args.command is None else args.parser).error(
                f"unrecognized arguments: {' '.join(extra)}")
    except SystemExit as exc:  # --help / --version (0) or a usage error (2): return it
        return exc.code if isinstance(exc.code, int) else EXIT_INPUT
    if args.command is None:
        parser.print_help()
        return EXIT_INPUT
    handler: Callable[[argparse.Namespace], int] = args.handler
    try:
        return handler(args)
    except Exception:  # a bug: exit 3, never Python's 1 (a breach to gate, "worse" to compare)
        import traceback

        traceback.print_exc()
        prog = "hopbench" if args.command in ("run", "search", "validate") else f"hopbench {args.command}"
        print(f"{prog}: internal error (a bug in hopbench, not in the input; the traceback is above): "
              f"exit {EXIT_CRASH}", file=sys.stderr)
        return EXIT_CRASH


# -- handlers: parsed arguments -> typed calls, errors -> exit codes ------------


def _run(args: argparse.Namespace) -> int:
    from ._run_command import run_command

    return _guard("hopbench", lambda: run_command(
        args.profile, out=args.out, results_root=args.results_root, target_url=args.target_url,
        quiet=args.quiet, no_progress=args.no_progress, workers=args.workers, engine=args.engine,
        ray_address=args.ray_address, no_report=args.no_report, no_gate=args.no_gate,
        metrics_port=args.metrics_port, upstream_record=args.upstream_record))


def _search(args: argparse.Namespace) -> int:
    from ._run_command import run_command

    return _guard("hopbench", lambda: run_command(
        args.profile, out=args.out, results_root=args.results_root, target_url=args.target_url,
        quiet=args.quiet, no_progress=args.no_progress, workers=args.workers, engine=args.engine,
        ray_address=args.ray_address, no_report=args.no_report, no_gate=args.no_gate,
        require_search=True))


def _check(args: argparse.Namespace) -> int:
    from .check._command import check_command
    from .report._page import write_report

    return check_command(args.profile, out=args.out, long=args.long, quiet=args.quiet, report=write_report)


def _validate(args: argparse.Namespace) -> int:
    from ._run_command import validate_command

    return _guard("hopbench", lambda: validate_command(args.profile))


def _guard(prog: str, command: Callable[[], int]) -> int:
    """Map the error tree to exit codes for ``run`` and ``validate``: bad input 2,
    hopbench's own failure 3, a signal before the run started 130 / 143."""
    try:
        return command()
    except (ProfileError, ResultsError, UsageError) as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return EXIT_INPUT
    except HopbenchError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return EXIT_CRASH
    except KeyboardInterrupt as exc:  # before the run started (e.g. while parsing)
        print(f"{prog}: interrupted before the load started: nothing was written", file=sys.stderr)
        return EXIT_TERMINATED if getattr(exc, "signal_name", "") == "SIGTERM" else EXIT_INTERRUPTED


def _serve(args: argparse.Namespace) -> int:
    from .emulator._serve import serve_command

    return serve_command(host=args.host, port=args.port, config=args.config, config_json=args.config_json,
                         record=args.record, log_level=args.log_level, ready_file=args.ready_file)


def _gate(args: argparse.Namespace) -> int:
    from .views._gate import gate_command

    try:
        report = gate_command(args.results_dir, budget_path=args.budget, baseline_dir=args.baseline,
                              junit=args.junit, allow_incomplete=args.allow_incomplete,
                              allow_saturated=args.allow_saturated,
                              allow_load_not_held=args.allow_load_not_held, force=args.force)
    except HopbenchError as exc:
        print(f"hopbench gate: error: {exc}", file=sys.stderr)
        return EXIT_INPUT
    sys.stdout.write(report.render(args.format))
    return report.exit_code


def _compare(args: argparse.Namespace) -> int:
    from .check._compare import compare_checks, is_check_folder
    from .views._compare import compare_command

    if args.candidate_dir is None:  # one A/B arms folder: its arms, paired (docs/ab-arms.md)
        from .views._arm_differences import (arms_command, paired_exit_code, render_arm_differences,
                                             render_arm_differences_markdown)
        from .views._compare import ALPHA

        given = [flag for flag, on in (("--metric", args.metric), ("--alpha", args.alpha != ALPHA),
                                       ("--min-effect", args.min_effect is not None),
                                       ("--min-abs-ms", args.min_abs_ms is not None)) if on]
        if given:  # silently ignored, they would read as applied
            print(f"hopbench compare: error: {', '.join(given)} {'applies' if len(given) == 1 else 'apply'} to two "
                  "folders; one A/B arms folder is "
                  f"judged by its own rules (every paired figure and the rates, family-wise alpha {ALPHA}; "
                  "docs/ab-arms.md, \"Paired verdicts\"). Hold an arm's paired difference to a limit with a "
                  "[gate] budget (\"arms.ttft.p50_diff\" = \"<= 5ms\"; docs/gate.md)", file=sys.stderr)
            return EXIT_INPUT
        try:
            block = arms_command(args.base_dir)
        except HopbenchError as exc:
            print(f"hopbench compare: error: {exc}", file=sys.stderr)
            return EXIT_INPUT
        sys.stdout.write(json.dumps(block, indent=2, allow_nan=False) + "\n" if args.format == "json"
                         else render_arm_differences_markdown(block) if args.format == "markdown"
                         else render_arm_differences(block) + "\n")
        return paired_exit_code(block, args.fail_on_worse)
    if is_check_folder(args.base_dir) or is_check_folder(args.candidate_dir):  # two `hopbench check` folders
        try:
            checks = compare_checks(args.base_dir, args.candidate_dir)
        except HopbenchError as exc:
            print(f"hopbench compare: error: {exc}", file=sys.stderr)
            return EXIT_INPUT
        sys.stdout.write(checks.render(args.format))
        return EXIT_BREACH if args.fail_on_worse and checks.any_worse else EXIT_OK
    metrics = [m.strip() for arg in args.metric or [] for m in arg.split(",") if m.strip()]
    try:
        comparison = compare_command(args.base_dir, args.candidate_dir, metrics=metrics, alpha=args.alpha,
                                     min_effect=args.min_effect, min_abs_ms=args.min_abs_ms, force=args.force)
    except HopbenchError as exc:
        print(f"hopbench compare: error: {exc}", file=sys.stderr)
        return EXIT_INPUT
    sys.stdout.write(comparison.render(args.format))
    return comparison.exit_code(args.fail_on_worse)  # 1 worse, 5 inconclusive (docs/compare.md)


def _calibrate(args: argparse.Namespace) -> int:
    from .views._calibrate import calibrate_command

    figures = [f.strip() for arg in args.figure or [] for f in arg.split(",") if f.strip()]
    try:
        cal = calibrate_command(args.results_dirs, figures=figures or None,
                                scopes=args.scope or ("all",), alpha=args.alpha, force=args.force)
    except HopbenchError as exc:
        print(f"hopbench calibrate: error: {exc}", file=sys.stderr)
        return EXIT_INPUT
    sys.stdout.write(cal.render() if args.format == "text" else json.dumps(cal.to_json(), indent=2) + "\n")
    return EXIT_OK


def _report(args: argparse.Namespace) -> int:
    from ._format import fmt_size
    from .report._page import write_report

    try:
        path = write_report(args.results_dir, compare_dir=args.compare, out=args.out)
    except ResultsError as exc:
        print(f"hopbench report: error: {exc}", file=sys.stderr)
        return EXIT_INPUT
    print(f"report: {path} ({fmt_size(path.stat().st_size)})")
    return EXIT_OK


def _export(args: argparse.Namespace) -> int:
    from .views._export import export_results

    try:
        paths = export_results(args.results_dir, args.format, args.out,
                               warn=lambda text: print(f"hopbench export: warning: {text}", file=sys.stderr))
    except HopbenchError as exc:
        print(f"hopbench export: error: {exc}", file=sys.stderr)
        return EXIT_INPUT
    for path in paths:
        print(f"export: {path}")
    return EXIT_OK
