"""The ``hopbench`` command line.

Subcommands: run, validate, serve, gate, compare, report. Exit codes are the
same everywhere: 0 success, 1 a budget breached / a worse verdict (gate,
compare), 2 bad input (profile, arguments, unreadable results), 3 hopbench
itself failed mid-run (partial results written; also: results that could not
be written, e.g. a full disk), 4 the target failed the run: no stream
completed, or the target died / stopped answering mid-run (results written),
130 interrupted by SIGINT and 143 by SIGTERM (partial results written). A
target that cannot be reached at all ends the run early with exit 2.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from . import __version__
from ._errors import HopbenchError, ProfileError, ResultsError, UsageError

__all__ = ["main"]

EXIT_OK, EXIT_BREACH, EXIT_INPUT, EXIT_CRASH, EXIT_INTERRUPTED, EXIT_TERMINATED = 0, 1, 2, 3, 130, 143
EXIT_TARGET_FAILED = 4


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        self.exit(EXIT_INPUT, f"{self.prog}: error: {message}\n")


def _build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="hopbench", description="Streaming load tester for LLM gateways "
                "(OpenAI Chat Completions, OpenAI Responses, Anthropic Messages over SSE).",
                epilog="Exit codes: 0 ok, 1 budget breached / worse, 2 bad input (also: target "
                       "unreachable), 3 crashed mid-run or results not written (partial results), "
                       "4 nothing completed or the target died mid-run, 130 SIGINT / 143 SIGTERM "
                       "(partial results).")
    p.add_argument("--version", action="version", version=f"hopbench {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

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

    v = sub.add_parser("validate", help="check a profile without sending load",
                       description="Validate profiles (every key, the [emulator] and [gate] tables, "
                       "prompt files, environment variables); print 'PATH: ok' for each valid one; "
                       "exit 0 when all are valid, 2 at the first error.")
    v.add_argument("profile", type=Path, nargs="+")

    sub.add_parser("serve", help="run the built-in gateway emulator (hopbench serve --help)", add_help=False)
    sub.add_parser("gate", help="hold a results folder to budgets: exit 1 on a breach (hopbench gate --help)",
                   add_help=False)
    sub.add_parser("compare", help="compare two results folders with statistics (hopbench compare --help)",
                   add_help=False)
    sub.add_parser("report", help="(re)build report.html for a results folder (hopbench report --help)",
                   add_help=False)
    return p


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``hopbench`` console script; returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in _DELEGATED:
        return _DELEGATED[argv[0]](argv[1:])
    parser = _build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return EXIT_INPUT
    try:
        if args.command == "run":
            return _cmd_run(args)
        if args.command == "validate":
            return _cmd_validate(args)
    except (ProfileError, ResultsError, UsageError) as exc:
        print(f"hopbench: error: {exc}", file=sys.stderr)
        return EXIT_INPUT
    except HopbenchError as exc:
        print(f"hopbench: error: {exc}", file=sys.stderr)
        return EXIT_CRASH
    except KeyboardInterrupt as exc:  # before the run started (e.g. while parsing)
        print("hopbench: interrupted", file=sys.stderr)
        return EXIT_TERMINATED if getattr(exc, "signal_name", "") == "SIGTERM" else EXIT_INTERRUPTED
    parser.print_help()
    return EXIT_INPUT


def _serve(argv: list[str]) -> int:
    from .emulator import serve_main
    return serve_main(argv)


def _gate(argv: list[str]) -> int:
    from ._gate import gate_main
    return gate_main(argv)


def _compare(argv: list[str]) -> int:
    from ._compare import compare_main
    return compare_main(argv)


def _report(argv: list[str]) -> int:
    from ._report_html import report_main
    return report_main(argv)


# subcommands that parse their own arguments
_DELEGATED = {"serve": _serve, "gate": _gate, "compare": _compare, "report": _report}


@contextmanager
def _signals_interrupt() -> Iterator[None]:
    """SIGINT and SIGTERM raise ``Interrupted`` (naming the signal) while a run
    starts and ends; during the load the runner's own trio signal receiver
    takes over (grace period, then cancel). Without this a SIGTERM while the
    emulator starts would kill the process before any summary is written."""
    import signal

    from ._run import Interrupted

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


def _cmd_validate(args: argparse.Namespace) -> int:
    from ._profile import load_profile

    for path in args.profile:
        load_profile(path)
        print(f"{path}: ok")
    return EXIT_OK


def _cmd_run(args: argparse.Namespace) -> int:
    import dataclasses
    from contextlib import ExitStack
    from functools import partial

    from rich.console import Console

    from ._profile import load_profile
    from ._run import default_out_dir, run_profile
    from ._summary_table import render_summary

    profile = load_profile(args.profile)
    if args.target_url:
        from ._profile import check_base_url

        url = args.target_url
        problem = check_base_url(url)
        if problem:
            raise UsageError(f"--target-url: {problem}")
        profile = dataclasses.replace(profile, target=dataclasses.replace(profile.target, url=url.rstrip("/")))
    if args.workers is not None:
        from ._profile import check_workers

        problem = check_workers(args.workers)  # the same rule as run.workers
        if problem:
            raise UsageError(f"--workers: {problem}")
        profile = dataclasses.replace(profile, run=dataclasses.replace(profile.run, workers=args.workers))
    if args.engine is not None:
        profile = dataclasses.replace(profile, run=dataclasses.replace(profile.run, engine=args.engine))
    console = Console(stderr=False)
    err = Console(stderr=True)
    out = args.out or default_out_dir(profile, args.results_root)
    if not args.quiet:
        err.print(f"hopbench: running {args.profile} -> {out}", highlight=False, soft_wrap=True)
    if profile.run.engine == "ray":
        from ._ray import import_ray, run_profile_ray

        import_ray()  # a missing Ray is a usage error before anything starts
        runner = partial(run_profile_ray, address=args.ray_address)
    elif profile.run.workers > 1:
        from ._workers import run_profile_workers as runner
    else:
        runner = run_profile
    with ExitStack() as stack:
        stack.enter_context(_signals_interrupt())
        progress = None
        if not (args.quiet or args.no_progress):
            from ._progress import LiveProgress

            progress = stack.enter_context(LiveProgress(profile, err, plain=not err.is_terminal)).on_interval
        outcome = runner(profile, out_dir=out, progress=progress)
    summary = outcome.summary
    if outcome.late_signals:
        err.print(f"hopbench: {outcome.late_signals[0]} during the final writes: results written, "
                  "report.html skipped (hopbench report DIR writes it)", highlight=False, soft_wrap=True)
    if not args.no_report and not outcome.late_signals:
        from ._report_html import write_report

        try:
            write_report(outcome.out_dir)
        except HopbenchError as exc:  # a report must never fail a run
            err.print(f"hopbench: warning: report.html not written: {exc}", highlight=False, soft_wrap=True)
        except KeyboardInterrupt as exc:  # the results are written: a late signal only skips the report
            err.print(f"hopbench: {getattr(exc, 'signal_name', 'SIGINT')}: report.html skipped "
                      "(hopbench report DIR writes it)", highlight=False, soft_wrap=True)
    if not args.quiet:
        render_summary(summary, console)
    gate_exit = EXIT_OK
    if summary.get("gate") and not args.no_gate:
        from ._gate import evaluate_gate

        report = evaluate_gate(summary, results_dir=outcome.out_dir, missing_baseline="inconclusive")
        if not args.quiet:
            console.print(report.render("text"), highlight=False, soft_wrap=True)
        gate_exit = report.exit_code
    console.print(f"results: {outcome.out_dir}", highlight=False)  # also with --quiet: where to look
    reason = summary.get("interrupted_by") or ""
    if reason.startswith("target unreachable"):
        err.print(f"hopbench: error: {reason}; partial results in {outcome.out_dir}", highlight=False,
                  soft_wrap=True)
        return EXIT_INPUT
    if outcome.crashed:
        print(outcome.crashed, file=sys.stderr)
        return EXIT_CRASH
    if reason.startswith("target lost"):
        err.print(f"hopbench: error: {reason}; partial results in {outcome.out_dir}", highlight=False,
                  soft_wrap=True)
        return EXIT_TARGET_FAILED
    if not outcome.complete:
        return EXIT_TERMINATED if reason == "SIGTERM" else EXIT_INTERRUPTED
    head = summary.get("headline") or {}
    if not head.get("completed"):
        err.print(f"hopbench: error: no stream completed ({head.get('started', 0)} started); see the "
                  f"warnings and error_samples in {outcome.out_dir / 'summary.json'}", highlight=False,
                  soft_wrap=True)
        return EXIT_TARGET_FAILED
    return gate_exit
