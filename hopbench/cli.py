"""The ``hopbench`` command line: every subcommand's arguments and the exit codes.

Subcommands: run, validate, serve, gate, compare, report, export, check. Each is parsed here
(one argparse tree, one parser class) and handed to its implementation as
typed arguments: ``run`` and ``validate`` below, ``gate`` in
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
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

from ._errors import HopbenchError, ProfileError, ResultsError, UsageError
from ._exit import (
    EXIT_BREACH,
    EXIT_CRASH,
    EXIT_INPUT,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_TARGET_FAILED,
    EXIT_TERMINATED,
)
from ._version import __version__

if TYPE_CHECKING:
    from rich.console import Console

    from .config._records import Profile
    from .driver._common import RunOutcome

__all__ = ["EXIT_BREACH", "EXIT_CRASH", "EXIT_INPUT", "EXIT_INTERRUPTED", "EXIT_OK", "EXIT_TARGET_FAILED",
           "EXIT_TERMINATED", "build_parser", "main"]

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
                       "4 nothing completed (in the run, one scenario or one arm) or nothing measured, or the target died mid-run, 130 SIGINT / 143 SIGTERM "
                       "(partial results).")
    p.add_argument("--version", action="version", version=f"hopbench {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    for add in (_add_run, _add_search, _add_validate, _add_serve, _add_gate, _add_compare, _add_report,
                _add_export, _add_check):
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
    r.add_argument("--workers", type=int, metavar="N", help="worker processes on this host (overrides run.workers)")
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
    se.add_argument("--workers", type=int, metavar="N", help="worker processes on this host (overrides run.workers)")
    se.add_argument("--engine", choices=("local", "ray"), help="where workers run (overrides run.engine)")
    se.add_argument("--ray-address", metavar="ADDRESS", help="Ray cluster for --engine ray")
    se.add_argument("--no-report", action="store_true", help="do not write report.html")
    se.add_argument("--no-gate", action="store_true", help="do not apply the profile's [gate] budgets at the end")
    se.set_defaults(handler=_search, parser=se)


def _add_validate(sub: _Subparsers) -> None:
    """``hopbench validate PROFILE...``: check profiles without load."""
    v = sub.add_parser("validate", help="check a profile without sending load",
                       description="Validate profiles (every key, the [emulator] and [gate] tables, "
                       "prompt files, environment variables); print 'PATH: ok' for each valid one; "
                       "exit 0 when all are valid, 2 at the first error.")
    v.add_argument("profile", type=Path, nargs="+")
    v.set_defaults(handler=_validate, parser=v)


def _add_serve(sub: _Subparsers) -> None:
    """``hopbench serve``: the built-in gateway emulator."""
    s = sub.add_parser("serve", help="run the built-in gateway emulator (hopbench serve --help)",
                       description="Run the built-in HopBase-style gateway emulator (docs/emulator.md).")
    s.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    s.add_argument("--port", type=_port, default=8000, help="TCP port, 0 for any free (default 8000)")
    s.add_argument("--config", type=Path, help="emulator TOML config file")
    s.add_argument("--record", type=Path, help="append ground truth (JSON lines) to this file")
    s.add_argument("--log-level", default="warning", choices=_LOG_LEVELS)
    # Used by EmbeddedEmulator: the config as JSON (to_mapping) and where to report the URL.
    s.add_argument("--config-json", type=Path, help=argparse.SUPPRESS)
    s.add_argument("--ready-file", type=Path, help=argparse.SUPPRESS)
    s.set_defaults(handler=_serve, parser=s)


def _add_gate(sub: _Subparsers) -> None:
    """``hopbench gate RESULTS_DIR``: hold a results folder to budgets."""
    g = sub.add_parser("gate", help="hold a results folder to budgets: exit 1 on a breach (hopbench gate --help)",
                       description="Hold a results folder to budgets: the profile's [gate] table "
                                   "(recorded in summary.json) or --budget FILE. See docs/gate.md.",
                       epilog="Exit codes: 0 every budget held, 1 a budget breached (or inconclusive, or "
                              "the run was interrupted, saturated or did not hold its load), 2 bad input "
                              "(also a --baseline of another load shape, without --force).")
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

    c = sub.add_parser("compare", help="compare two results folders with statistics (hopbench compare --help)",
                       description="Compare two results folders per scope and metric, with a verdict "
                                   "from statistical tests on the HDR histograms. See docs/compare.md.",
                       epilog="Exit codes: 0 (1 with --fail-on-worse when any verdict is worse), 2 bad input.")
    c.add_argument("base_dir", type=Path, metavar="BASE_DIR")
    c.add_argument("candidate_dir", type=Path, metavar="CAND_DIR")
    c.add_argument("--format", choices=_FORMATS, default="text")
    c.add_argument("--metric", action="append", metavar="NAME",
                   help="metric to compare (repeat, or comma-separate); default: the gateway-facing ones")
    c.add_argument("--alpha", type=float, default=ALPHA, help=f"significance level (default {ALPHA})")
    c.add_argument("--min-effect", type=float, default=MIN_EFFECT,
                   help=f"smallest relative change that can be a verdict (default {MIN_EFFECT})")
    c.add_argument("--min-abs-ms", type=float, default=MIN_ABS_MS,
                   help=f"times: smallest absolute change that can be a verdict (default {MIN_ABS_MS} ms)")
    c.add_argument("--fail-on-worse", action="store_true", help="exit 1 when any verdict is worse")
    c.add_argument("--force", action="store_true",
                   help="compare runs whose load shapes differ, or a run that did not complete (partial)")
    c.set_defaults(handler=_compare, parser=c)


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
                       "through a script of behaviours and grade each check of the profile's [contract] (the "
                       "HopBase contract without one): pass, fail, skip or inconclusive (docs/check.md). Exit 0 no "
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
    argv = list(sys.argv[1:] if argv is None else argv)
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
    return _guard("hopbench", lambda: run_command(
        args.profile, out=args.out, results_root=args.results_root, target_url=args.target_url,
        quiet=args.quiet, no_progress=args.no_progress, workers=args.workers, engine=args.engine,
        ray_address=args.ray_address, no_report=args.no_report, no_gate=args.no_gate,
        metrics_port=args.metrics_port, upstream_record=args.upstream_record))


def _search(args: argparse.Namespace) -> int:
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
        print(f"{prog}: interrupted", file=sys.stderr)
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
    return EXIT_BREACH if args.fail_on_worse and comparison.any_worse else EXIT_OK


def _report(args: argparse.Namespace) -> int:
    from .report._page import write_report

    try:
        path = write_report(args.results_dir, compare_dir=args.compare, out=args.out)
    except ResultsError as exc:
        print(f"hopbench report: error: {exc}", file=sys.stderr)
        return EXIT_INPUT
    print(f"report: {path} ({path.stat().st_size / 1e6:.1f} MB)")
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


# -- run and validate: their implementations ------------------------------------


@contextmanager
def _signals_interrupt() -> Iterator[None]:
    """SIGINT and SIGTERM raise ``Interrupted`` (naming the signal) while a run
    starts and ends; during the load the runner's own trio signal receiver
    takes over (grace period, then cancel). Without this a SIGTERM while the
    emulator starts would kill the process before any summary is written."""
    import signal

    from .driver._single import Interrupted

    def handler(signum: int, frame: object) -> None:
        name = signal.Signals(signum).name
        print(f"hopbench: {name}: stopping; writing what there is", file=sys.stderr, flush=True)
        raise Interrupted(name)

    old = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, h in old.items():
            signal.signal(sig, h)


def validate_command(profiles: Sequence[Path]) -> int:
    """``hopbench validate``: load each profile; print ``PATH: ok`` for each valid one, and
    on stderr what each dataset gave, as ``run`` does before its load (records skipped,
    filtered, sampled: docs/workloads.md, "Datasets"), and a trace's rows with 0 tokens
    (read as 1: ``hopbench.workload._trace.TraceSpec.zero_note``).

    Returns:
        EXIT_OK when all are valid.

    Raises:
        ProfileError: at the first invalid profile (file:line: key: what was expected).
    """
    from .config._profile import load_profile

    from .driver._common import fd_limit_for

    for path in profiles:
        profile = load_profile(path)
        fd_note = fd_limit_for(profile)  # a closed loop this machine cannot hold: ProfileError
        if fd_note:
            print(f"hopbench: warning: {fd_note}", file=sys.stderr)
        for sc in profile.scenarios:
            if sc.dataset_note:
                print(f"hopbench: scenario {sc.name}: dataset {sc.dataset_note}", file=sys.stderr)
        if profile.load.mode == "trace" and profile.load.trace.zero_note:  # rows with 0 tokens, read as 1
            print(f"hopbench: trace: {profile.load.trace.zero_note}", file=sys.stderr)
        print(f"{path}: ok")
    return EXIT_OK


def profile_overrides(profile: Profile, source: Path, *, target_url: str | None = None, workers: int | None = None,
                      engine: Literal["local", "ray"] | None = None, ray_address: str | None = None,
                      upstream_record: Path | None = None, require_search: bool = False) -> Profile:
    """The profile with the command line's flags applied (pure: no run, no I/O).

    Args:
        profile: the profile as loaded; source: its path (for messages).
        target_url, workers, engine, ray_address, upstream_record, require_search: as
            for :func:`run_command` (None / False: the profile's own).

    Returns:
        the profile to run.

    Raises:
        UsageError: a flag that is invalid or that the profile cannot take (checked in
            this order: no ``[search]`` for ``hopbench search``, ``--target-url``,
            ``--workers``, ``--ray-address`` without Ray, ``--upstream-record``, then
            the combinations ``[[arm]]`` and ``[upstream]`` refuse).
    """
    import dataclasses

    if require_search and profile.search is None:
        raise UsageError(f"{source}: no [search] table: hopbench search needs one (docs/slo.md)")
    if target_url:
        from .config._profile import check_base_url

        url = target_url
        problem = check_base_url(url)
        if problem:
            raise UsageError(f"--target-url: {problem}")
        profile = dataclasses.replace(profile, target=dataclasses.replace(profile.target, url=url.rstrip("/")))
    if workers is not None:
        from .config._profile import check_workers

        problem = check_workers(workers)  # the same rule as run.workers
        if problem:
            raise UsageError(f"--workers: {problem}")
        profile = dataclasses.replace(profile, run=dataclasses.replace(profile.run, workers=workers))
    if engine is not None:
        profile = dataclasses.replace(profile, run=dataclasses.replace(profile.run, engine=engine))
    if ray_address is not None and profile.run.engine != "ray":
        raise UsageError(f"--ray-address: only with --engine ray (or run.engine = \"ray\"); this run's "
                         f"engine is {profile.run.engine!r}, which would ignore {ray_address!r}")
    if upstream_record is not None:
        from .config._upstream_spec import record_override

        try:
            spec = record_override(profile.upstream, upstream_record, profile.target.url)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        profile = dataclasses.replace(profile, upstream=spec)
    if profile.arms and target_url:
        raise UsageError("--target-url: the profile's [[arm]] tables name the targets (edit their urls)")
    if profile.arms and (profile.run.workers > 1 or profile.run.engine == "ray"):
        raise UsageError("[[arm]]: A/B arms run in one process: drop --workers / --engine ray "
                         f"(got workers = {profile.run.workers}, engine = {profile.run.engine})")
    if profile.upstream is not None and (profile.run.workers > 1 or profile.run.engine == "ray"):
        # gateway overhead matches streams on one clock in one process (docs/gateway-overhead.md)
        raise UsageError("[upstream] (gateway overhead) runs in one process: drop --workers / run.workers "
                         "and run.engine = \"ray\" (or run without [upstream])")
    if profile.upstream is not None and profile.arms:
        raise UsageError("[upstream] (gateway overhead) and [[arm]] tables cannot be combined yet: "
                         "measure one gateway per run")
    return profile


def run_command(profile_path: Path, *, out: Path | None = None, results_root: Path = Path("results"),
                target_url: str | None = None, quiet: bool = False, no_progress: bool = False,
                workers: int | None = None, engine: Literal["local", "ray"] | None = None, ray_address: str | None = None,
                no_report: bool = False, no_gate: bool = False, metrics_port: int | None = None,
                require_search: bool = False, upstream_record: Path | None = None) -> int:
    """``hopbench run``: run a profile, write its results folder, report.html, the
    terminal summary and the gate's verdict.

    Args:
        profile_path: the profile (TOML).
        out: the results folder (None: ``results_root/<name>-<UTC timestamp>``).
        results_root: where result folders are created.
        target_url: overrides ``target.url``.
        quiet: no progress lines and no summary table.
        no_progress: no progress lines.
        workers: overrides ``run.workers`` (>= 1).
        engine: ``"local"`` or ``"ray"``: overrides ``run.engine``.
        ray_address: the Ray cluster for ``engine="ray"``.
        no_report: do not write report.html.
        no_gate: do not apply the profile's ``[gate]``.
        metrics_port: serve live figures on 127.0.0.1 (overrides ``run.metrics_port``;
            hopbench.observe._live_metrics); a port that cannot be bound is bad input (exit 2, no load).
        require_search: ``hopbench search``: the profile must have a ``[search]`` table.
            A profile with ``[[stage]]`` or ``[search]`` runs its stages (hopbench.driver._stages)
            into one folder, with the latency-vs-load table after the summary.
        upstream_record: ``--upstream-record``: sets or overrides ``[upstream] record``
            (refused beside ``[upstream] listen``; hopbench.config._upstream_spec.record_override).

    Returns:
        The exit code: the gate's (0 or 1) after a complete run; 2 when the
        target was unreachable; 3 after a crash; 4 when no stream completed or
        the target was lost mid-run; 130 / 143 when interrupted.

    Raises:
        ProfileError / UsageError: bad input, before any load.
        HopbenchError: hopbench failed before the run started.
    """
    from .config._profile import load_profile
    from .views._after_run import after_run

    profile = profile_overrides(load_profile(profile_path), profile_path, target_url=target_url, workers=workers,
                                engine=engine, ray_address=ray_address, upstream_record=upstream_record,
                                require_search=require_search)
    console, err = _console(stderr=False), _console(stderr=True)
    from .driver._common import fd_limit_for

    fd_note = fd_limit_for(profile)  # before any load: a closed loop this machine cannot hold raises
    if fd_note:
        err.print(f"hopbench: warning: {fd_note}", markup=False, highlight=False)
    outcome, summary = _run_and_write(profile, profile_path, err, out=out, results_root=results_root, quiet=quiet,
                                      no_progress=no_progress, ray_address=ray_address, no_report=no_report,
                                      metrics_port=metrics_port)
    gate_exit = after_run(summary, outcome.out_dir, console, err, quiet=quiet, apply_gate=not no_gate,
                          staged=_staged(profile))
    return _run_exit_code(profile, outcome, summary, gate_exit, err)


def _staged(profile: Profile) -> bool:
    """A ``[[stage]]`` or ``[search]`` run: one run per stage into one folder (docs/slo.md)."""
    return bool(profile.stages) or profile.search is not None


def _one_run(profile: Profile, ray_address: str | None) -> Callable[..., RunOutcome]:
    """The driver that runs ``profile``: Ray, local worker processes, or this process.

    Raises:
        UsageError: Ray is asked for and not installed (before anything starts).
    """
    if profile.run.engine == "ray":
        from functools import partial

        from .driver._ray import import_ray, run_profile_ray

        import_ray()  # a missing Ray is a usage error before anything starts
        return partial(run_profile_ray, address=ray_address)
    if profile.run.workers > 1:
        from .driver._workers import run_profile_workers

        return run_profile_workers
    from .driver._single import run_profile

    return run_profile


#: the console's width when the output is a file or a pipe: as wide as the tables need
_FILE_WIDTH = 10_000


def _console(*, stderr: bool) -> Console:
    """A rich Console for stdout or stderr. On a terminal it wraps at the terminal's width; to a
    pipe, a file or a CI log it never wraps a line (rich would cut at 80 columns mid-phrase,
    ``error \nrate 0.0%``) and never cuts a table cell (at 80 columns rich turned ``3,120`` into
    ``3,…``: issue 38): tables keep their own width, lines stay whole for grep and for CI. The
    tables have no rule or panel that would fill the width."""
    from rich.console import Console

    console = Console(stderr=stderr)
    if not console.is_terminal:
        console = Console(stderr=stderr, width=_FILE_WIDTH)
        console.soft_wrap = True
    return console


def _run_and_write(profile: Profile, profile_path: Path, err: Console, *, out: Path | None, results_root: Path,
                   quiet: bool, no_progress: bool, ray_address: str | None, no_report: bool,
                   metrics_port: int | None) -> tuple[RunOutcome, dict[str, Any]]:
    """The driver's run with its progress and live metrics, then what the results folder
    gains after it: the A/B arms' differences and report.html.

    Returns:
        (the run's outcome, its summary with ``arm_differences`` when added).

    Raises:
        UsageError: a live-metrics port that cannot be bound, a missing Ray (before any load).
        ResultsError / HopbenchError: as the driver raises them.
    """
    from .driver._common import default_out_dir

    out = out or default_out_dir(profile, results_root)
    if not quiet:
        err.print(f"hopbench: running {profile_path} -> {out}", markup=False, highlight=False, soft_wrap=True)
    for sc in profile.scenarios:  # what a dataset gave, skipped records included (docs/workloads.md)
        if sc.dataset_note and not quiet:
            err.print(f"hopbench: scenario {sc.name}: dataset {sc.dataset_note}", markup=False, highlight=False,
                      soft_wrap=True)
    if profile.load.mode == "trace":  # the replay's length and rate, before the load (docs/workloads.md)
        from .workload._trace import replay_plan

        plan_line, plan_warning = replay_plan(profile.load.trace, profile.run.duration_ns, profile.run.requests)
        if not quiet:
            err.print(f"hopbench: {plan_line}", markup=False, highlight=False, soft_wrap=True)
        if plan_warning:
            err.print(f"hopbench: warning: {plan_warning}", markup=False, highlight=False, soft_wrap=True)
    runner = _one_run(profile, ray_address)
    if _staged(profile):  # one run per stage into one folder (docs/slo.md); progress: a line per stage
        from .driver._stages import run_search, run_stages

        stage_lines = not (quiet or no_progress)  # a staged run's progress: its line per stage

        def say(text: str) -> None:
            if stage_lines:
                err.print(text, highlight=False, soft_wrap=True)

        one_run, drive = runner, (run_search if profile.search is not None else run_stages)

        def runner(p: Any, out_dir: Path, progress: Any = None) -> RunOutcome:
            return drive(p, out_dir, one_run, on_line=say)

        no_progress = True
    outcome = _run_live(profile, runner, out, err, quiet=quiet, no_progress=no_progress, metrics_port=metrics_port)
    return outcome, _write_after(profile, outcome, err, no_report=no_report)


def _run_live(profile: Profile, runner: Callable[..., RunOutcome], out: Path, err: Console, *, quiet: bool,
              no_progress: bool, metrics_port: int | None) -> RunOutcome:
    """``runner(profile, out_dir=out, progress=...)`` with signals raising ``Interrupted``,
    the live progress and the live metrics (bound before any load)."""
    from contextlib import ExitStack

    with ExitStack() as stack:
        stack.enter_context(_signals_interrupt())
        progress: Callable[..., None] | None = None
        if not (quiet or no_progress):
            from .observe._progress import LiveProgress

            progress = stack.enter_context(LiveProgress(profile, err, plain=not err.is_terminal)).on_interval
        port = metrics_port if metrics_port is not None else profile.run.metrics_port
        if port is not None:  # bound before any load: a port in use is exit 2 (UsageError)
            from .observe._live_metrics import LiveMetrics

            live = stack.enter_context(LiveMetrics(port))
            if not quiet:
                err.print(f"hopbench: live metrics on {live.url}", markup=False, highlight=False, soft_wrap=True)
            callbacks = [cb for cb in (progress, live.on_interval) if cb is not None]

            def fan_out(*args: Any) -> None:
                for cb in callbacks:
                    cb(*args)

            progress = fan_out
        return runner(profile, out_dir=out, progress=progress)


def _write_after(profile: Profile, outcome: RunOutcome, err: Console, *, no_report: bool) -> dict[str, Any]:
    """The A/B arms' differences into the folder, then report.html (skipped after a late
    signal). Never raises a HopbenchError: each failure is a warning.

    Returns:
        the summary, with ``arm_differences`` when they were added.
    """
    summary = outcome.summary
    if profile.arms:  # A/B arms: compare's statistics between the arms (docs/results.md)
        from .views._arm_differences import add_arm_differences

        try:
            summary = add_arm_differences(outcome.out_dir, summary)
        except HopbenchError as exc:
            err.print(f"hopbench: warning: the arms' differences were not written: {exc}",
                      highlight=False, soft_wrap=True)
    if outcome.late_signals:
        err.print(f"hopbench: {outcome.late_signals[0]} during the final writes: results written, "
                  "report.html skipped (hopbench report DIR writes it)", markup=False, highlight=False, soft_wrap=True)
    if not no_report and not outcome.late_signals:
        from .report._page import write_report

        try:
            write_report(outcome.out_dir)
        except HopbenchError as exc:  # a report must never fail a run
            err.print(f"hopbench: warning: report.html not written: {exc}", markup=False, highlight=False, soft_wrap=True)
        except KeyboardInterrupt as exc:  # the results are written: a late signal only skips the report
            err.print(f"hopbench: {getattr(exc, 'signal_name', 'SIGINT')}: report.html skipped "
                      "(hopbench report DIR writes it)", markup=False, highlight=False, soft_wrap=True)
    return summary


def _run_exit_code(profile: Profile, outcome: RunOutcome, summary: dict[str, Any], gate_exit: int,
                   err: Console) -> int:
    """The exit code of a finished run, each non-zero one said on stderr (docs/results.md):
    2 the target was unreachable, 3 hopbench crashed, 4 the target was lost or failed the
    run (nothing measured or completed, an arm or a scenario that completed nothing, no
    output, a stage that measured nothing), 130 / 143 interrupted, 1 a search that measured
    no capacity; else the gate's (``gate_exit``)."""
    reason = summary.get("interrupted_by") or ""
    if reason.startswith("target unreachable"):
        err.print(f"hopbench: error: {reason}; partial results in {outcome.out_dir}", markup=False, highlight=False,
                  soft_wrap=True)
        return EXIT_INPUT
    if outcome.crashed:
        print(outcome.crashed, file=sys.stderr)
        return EXIT_CRASH
    if reason.startswith("target lost"):
        err.print(f"hopbench: error: {reason}; partial results in {outcome.out_dir}", markup=False, highlight=False,
                  soft_wrap=True)
        return EXIT_TARGET_FAILED
    if not outcome.complete:
        return EXIT_TERMINATED if reason == "SIGTERM" else EXIT_INTERRUPTED
    head = summary.get("headline") or {}
    if head.get("started", 1) == 0:  # a summary without a headline says nothing here
        err.print(f"hopbench: error: no stream was measured (none started after the warm-up); see the "
                  f"warnings in {outcome.out_dir / 'summary.json'}", markup=False, highlight=False,
                  soft_wrap=True)
        return EXIT_TARGET_FAILED
    if not head.get("completed") and head.get("started", 0) > head.get("client_cancelled", 0):
        err.print(f"hopbench: error: no stream completed ({head.get('started', 0)} started); see the "
                  f"warnings and error_samples in {outcome.out_dir / 'summary.json'}", markup=False, highlight=False,
                  soft_wrap=True)
        return EXIT_TARGET_FAILED
    from .driver._warnings import NO_OUTPUT_WARNING, failed_arms, failed_scenarios

    failed = failed_arms(summary)
    if failed:  # one arm failed outright: the A/B result means nothing (docs/ab-arms.md)
        err.print(f"hopbench: error: no stream of arm {', '.join(failed)} completed; see the warnings in "
                  f"{outcome.out_dir / 'summary.json'}", markup=False, highlight=False, soft_wrap=True)
        return EXIT_TARGET_FAILED
    failed = failed_scenarios(summary, [sc.name for sc in profile.scenarios])
    if failed:  # one scenario failed outright, hidden in the run's error rate (docs/results.md)
        err.print(f"hopbench: error: no stream of scenario {', '.join(failed)} completed; see the warnings "
                  f"and error_samples in {outcome.out_dir / 'summary.json'}", markup=False, highlight=False,
                  soft_wrap=True)
        return EXIT_TARGET_FAILED
    silent = [w for w in summary.get("warnings") or () if isinstance(w, str) and (
        w.startswith(NO_OUTPUT_WARNING) or (w.startswith("scenario ") and f": {NO_OUTPUT_WARNING}" in w))]
    if silent:
        # streams completed, none (of the run, or of one scenario) carried output: no latency
        # of an answer was measured
        which = "" if silent[0].startswith(NO_OUTPUT_WARNING) else f" of {silent[0].split(':')[0]}"
        err.print(f"hopbench: error: no completed stream{which} carried output (TTFT, ITL and TPOT have no "
                  f"samples); see the warnings in {outcome.out_dir / 'summary.json'}", markup=False,
                  highlight=False, soft_wrap=True)
        return EXIT_TARGET_FAILED
    unmeasured = [st.get("folder") for st in summary.get("stages") or ()
                  if isinstance(st, dict) and st.get("measured") is False]
    if unmeasured:  # a stage (or probe) measured nothing: a plain run's exit 4, stage by stage
        err.print(f"hopbench: error: no stream was measured in stage {', '.join(map(str, unmeasured))} (none "
                  f"started after the warm-up); see the warnings in {outcome.out_dir / 'summary.json'}",
                  markup=False, highlight=False, soft_wrap=True)
        return EXIT_TARGET_FAILED
    capacity = summary.get("capacity") or {}
    if capacity.get("client_saturated") or capacity.get("status") == "too_few_requests":
        if summary.get("stages_kind") != "search":
            # [[stage]] entries: as a plain run, the [gate] decides the exit code (k6's
            # thresholds); a saturated client is a warning (docs/slo.md, "Exit codes")
            err.print(f"hopbench: warning: {capacity.get('message')}", markup=False, highlight=False,
                      soft_wrap=True)
            return gate_exit
        # a search's result is its capacity: none could be measured, never a silent 0 (docs/slo.md)
        err.print(f"hopbench: error: {capacity.get('message')}", markup=False, highlight=False, soft_wrap=True)
        return max(gate_exit, EXIT_BREACH)
    return gate_exit
