"""``hopbench check PROFILE [--out DIR] [--long]``: the command's shell over ``run_check``.

Role: what the command line needs beyond ``run_check``: the default results
folder, the progress lines (stderr), the table (stdout) and the error tree mapped
to exit codes (docs/check.md, "Statuses and exit codes"). Parsed by :mod:`hopbench.cli`.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path

from .._errors import HopbenchError, ProfileError, UsageError
from .._exit import EXIT_INPUT, EXIT_INTERRUPTED, EXIT_TARGET_FAILED
from ..config._check_profile import load_check_profile
from ..driver._common import default_out_dir
from ._outputs import format_table
from ._script import run_check
from ._upstream import UpstreamStartError

__all__ = ["check_command"]


def _main_thread() -> bool:
    """Whether this is the main thread (the only one that may set a signal handler)."""
    return threading.current_thread() is threading.main_thread()


def check_command(profile: Path, *, out: Path | None = None, long: bool = False, quiet: bool = False,
                  results_root: Path = Path("results"), report: Callable[[Path], Path] | None = None) -> int:
    """Run the check and print its table; returns the exit status.

    Args:
        profile: the check profile.
        out: the output folder (default ``results/<profile name>-<UTC timestamp>``).
        long: also run ``stall_handling`` with the contract's window.
        quiet: no progress lines (the table is still printed).
        results_root: where the default folder is created.
        report: writes the folder's report.html (``hopbench.report.write_report``, handed in
            by the command line: the report stage comes after this one); None: no report.

    Returns:
        0 no check failed, 1 one did, 2 bad input (nothing sent; the message on
        stderr), 4 nothing could be checked, 130 interrupted.
    """
    prog = "hopbench check"
    # Ctrl-C is the script's KeyboardInterrupt (partial outputs, exit 130) even when this process
    # was started with SIGINT ignored (a disposition inherited across exec), as `hopbench run`'s
    # own handlers are; restored after
    old_sigint = signal.signal(signal.SIGINT, signal.default_int_handler) if _main_thread() else None
    try:
        folder = out if out is not None else default_out_dir(load_check_profile(profile)[0], results_root)
        run = run_check(profile, folder, long=long,
                        progress=None if quiet else lambda line: print(f"{prog}: {line}", file=sys.stderr, flush=True))
    except (ProfileError, UsageError) as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return EXIT_INPUT
    except UpstreamStartError as exc:
        print(f"{prog}: error: [upstream] listen: {exc}", file=sys.stderr)
        return EXIT_INPUT
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    finally:
        if old_sigint is not None:
            signal.signal(signal.SIGINT, old_sigint)
    print(format_table(run))
    names = "contract.json, contract.xml, contract.md"
    if report is not None:
        try:
            names += ", " + report(folder).name
        except HopbenchError as exc:  # the verdicts stand without the page
            print(f"{prog}: warning: report.html not written: {exc}", file=sys.stderr)
    print(f"results: {folder} ({names})")
    if run.interrupted_by is not None:  # the table's last line said it (once): exit 130
        return run.exit_code
    if run.exit_code == EXIT_TARGET_FAILED:  # one line for the one cause, not only the table's rows
        reasons = [r.why for r in run.results if r.status == "inconclusive" and r.why]
        first = reasons[0] if reasons else "every check was skipped"  # the script's first step: the cause
        print(f"{prog}: error: nothing could be checked ({len(reasons)} inconclusive): {first}", file=sys.stderr)
    return run.exit_code
