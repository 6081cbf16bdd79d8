"""``hopbench run`` and ``hopbench validate``: what they do once their arguments are parsed.

Role: the face's shell around one run (the command line in :mod:`hopbench.cli`
parses the arguments and maps errors to exit codes). ``run_command`` is four
steps: the command line's flags applied to the profile (:func:`profile_overrides`,
pure), the driver's run with its live progress, the views' ``after_run`` (the
tables, the gate's verdict, the results line) and the exit code
(:func:`_run_exit_code`, docs/results/exit-codes.md). Before any load it raises
the file-descriptor limit (``fd_limit_for``) and refuses what the machine cannot
hold. Output to a terminal wraps at its width; to a pipe, a file or CI it never
wraps a line (:func:`_console`).

Invariants: a run that went wrong says so on stderr and in its exit code; the
results folder is written whatever happens (the driver's contract).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Literal, cast

from ._errors import HopbenchError, UsageError
from ._exit import (
    EXIT_BREACH,
    EXIT_CRASH,
    EXIT_INCONCLUSIVE,
    EXIT_INPUT,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_TARGET_FAILED,
    stop_exit_code,
)

if TYPE_CHECKING:
    from rich.console import Console

    from .config._records import Profile
    from .driver._common import RunOutcome

__all__ = ["CONTRACT_NOTE", "check_before_load", "profile_overrides", "resolve_workers", "run_command",
           "validate_command"]

#: what ``hopbench run`` says of a profile's ``[contract]`` table (docs/check.md, "The profile")
CONTRACT_NOTE = ("hopbench: note: [contract] is for `hopbench check PROFILE` (the gateway's streaming "
                 "contract); this run ignores it")


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
    (read as 1: ``hopbench.workload._trace.TraceSpec.zero_note``). A profile with a
    ``[contract]`` table, or with ``[upstream]`` and no ``[run]`` (nothing but a check can use
    it), is a check profile: it is held to ``hopbench check``'s rules
    (``hopbench.config._check_profile.load_check_profile``: ``[upstream] listen``, no
    ``[run]`` needed) and its line says so (docs/check.md).

    Every profile is validated, a bad one too: each invalid profile gets its
    ``hopbench: error: FILE:LINE: KEY: ...`` line on stderr (the first error in it) and
    the next profile is validated all the same, so one call lists every bad file.

    Returns:
        EXIT_OK when all are valid; EXIT_INPUT (2) when any is invalid (a profile error,
        or the first thing ``run`` would refuse before its load: :func:`check_before_load`).

    Raises:
        HopbenchError: hopbench itself failed (not the input: exit 3 from the CLI).
    """
    from ._errors import ProfileError, ResultsError

    bad = 0
    for path in profiles:
        try:
            _validate_one(path)
        except (ProfileError, ResultsError, UsageError) as exc:
            print(f"hopbench: error: {exc}", file=sys.stderr)
            bad += 1
    if bad and len(profiles) > 1:
        print(f"hopbench: {bad} of {len(profiles)} profiles invalid", file=sys.stderr)
    return EXIT_INPUT if bad else EXIT_OK


def _validate_one(path: Path) -> None:
    """One profile of :func:`validate_command`: its notes on stderr, ``PATH: ok`` on stdout.

    Raises:
        ProfileError / UsageError: the profile is invalid, or ``run`` would refuse it before its load.
    """
    from .config._check_profile import load_check_profile
    from .config._profile import load_profile
    from ._toml import load_toml

    data = load_toml(path).data  # a check profile only: a [contract] or an [upstream], and no [run] to run
    check = ("contract" in data or "upstream" in data) and "run" not in data
    profile = load_check_profile(path)[0] if check else profile_overrides(load_profile(path), path)
    also = ""
    if not check and "contract" in data:  # run takes it (ignoring the contract); check may not
        try:
            load_check_profile(path)
            also = " (and for hopbench check)"
        except HopbenchError as exc:
            also = " (for run; hopbench check would refuse it: see below)"
            print(f"hopbench: note: {exc}", file=sys.stderr)
    for note in check_before_load(profile):  # what run refuses before its load, refused here too
        print(f"hopbench: warning: {note}", file=sys.stderr)
    for sc in profile.scenarios:
        if sc.dataset_note:
            print(f"hopbench: scenario {sc.name}: dataset {sc.dataset_note}", file=sys.stderr)
    if profile.load.mode == "trace" and profile.load.trace.zero_note:  # rows with 0 tokens, read as 1
        print(f"hopbench: trace: {profile.load.trace.zero_note}", file=sys.stderr)
    print(f"{path}: ok" + (" (a check profile: hopbench check)" if check else also))


def profile_overrides(profile: Profile, source: Path, *, target_url: str | None = None,
                      workers: int | str | None = None,
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
        auto = not isinstance(workers, int)  # "auto": resolved by resolve_workers, before the run
        profile = dataclasses.replace(profile, run=dataclasses.replace(
            profile.run, workers=1 if auto else int(workers), workers_auto=auto))
    if engine is not None:
        profile = dataclasses.replace(profile, run=dataclasses.replace(profile.run, engine=engine))
    if profile.run.workers_auto and profile.run.engine == "ray":
        raise UsageError("--workers auto counts this machine's free cores; with --engine ray (run.engine = "
                         "\"ray\") the workers run on the cluster: give their number")
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
    if profile.arms and profile.run.workers_auto:
        raise UsageError("[[arm]]: A/B arms run in one process: drop --workers auto / run.workers = \"auto\"")
    if profile.upstream is not None and profile.run.workers_auto:
        raise UsageError("[upstream] (gateway overhead) runs in one process: drop --workers auto / "
                         "run.workers = \"auto\"")
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


def resolve_workers(profile: Profile) -> Profile:
    """The profile with ``workers = "auto"`` resolved to the machine's free cores
    (``hopbench.engine._cores.auto_workers``: blocks a quarter of a second, before
    any load); any other profile as it is.

    Returns:
        the profile, ``run.workers`` >= 1 and ``run.workers_note`` saying how
        ``"auto"`` was resolved (summary.json ``workers_auto``).
    """
    if not profile.run.workers_auto:
        return profile
    import dataclasses

    from .config._profile import MAX_WORKERS
    from .engine._cores import auto_workers

    got = auto_workers(MAX_WORKERS)
    return dataclasses.replace(profile, run=dataclasses.replace(profile.run, workers=got.workers,
                                                                workers_note=got.note()))


def run_command(profile_path: Path, *, out: Path | None = None, results_root: Path = Path("results"),
                target_url: str | None = None, quiet: bool = False, no_progress: bool = False,
                workers: int | str | None = None, engine: Literal["local", "ray"] | None = None,
                ray_address: str | None = None,
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
        workers: overrides ``run.workers``: >= 1, or ``"auto"`` (the machine's free cores:
            :func:`resolve_workers`).
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
    profile = resolve_workers(profile)
    if profile.run.workers_note and not quiet:
        err.print(f"hopbench: {profile.run.workers_note}", markup=False, highlight=False)
    for note in check_before_load(profile, metrics_port=metrics_port):  # refusals before any load
        err.print(f"hopbench: warning: {note}", markup=False, highlight=False)
    if profile.contract is not None and not quiet:  # validated like check's; acted on by check only
        err.print(CONTRACT_NOTE, markup=False, highlight=False, soft_wrap=True)
    outcome, summary = _run_and_write(profile, profile_path, err, out=out, results_root=results_root, quiet=quiet,
                                      no_progress=no_progress, ray_address=ray_address, no_report=no_report,
                                      metrics_port=metrics_port)
    shown = not quiet
    try:
        gate_exit = after_run(summary, outcome.out_dir, console, err, quiet=quiet, apply_gate=not no_gate,
                              staged=_staged(profile))
    except KeyboardInterrupt as exc:
        shown = False
        # the run is over and written: a Ctrl-C now skips the tables, not the verdict (a second
        # one, during the one-line verdict, is an interrupt like any other)
        err.print(f"hopbench: {getattr(exc, 'signal_name', 'SIGINT')} while printing: tables skipped; the results are "
                  f"written (hopbench report / gate {outcome.out_dir} read them again)", markup=False,
                  highlight=False, soft_wrap=True)
        gate_exit = after_run(summary, outcome.out_dir, console, err, quiet=True, apply_gate=not no_gate,
                              staged=_staged(profile))
    return _run_exit_code(profile, outcome, summary, gate_exit, err, shown=shown)


def check_before_load(profile: Profile, *, metrics_port: int | None = None) -> list[str]:
    """Everything ``run`` refuses after parsing and before its load, in one place: ``run``
    and ``validate`` both call it, so that ``validate`` passes only what ``run`` will start.

    Checked in order: the file-descriptor limit (raised for the load here:
    ``driver._common.fd_limit_for``), Ray installed for ``run.engine = "ray"``, the
    ``[upstream].listen`` address free, the live-metrics port free. (Parse-time checks,
    ``[upstream].record`` an existing file and ``[upstream]`` in one process, are
    ``load_profile``'s.) The ports are bound and released at once: a port taken between
    this check and the run is still refused by the run, with the same message.

    Args:
        profile: the profile with the command line's flags applied (:func:`profile_overrides`).
        metrics_port: ``--metrics-port`` (None: ``run.metrics_port``, if any).

    Returns:
        warnings to print (e.g. an open loop's ``max_in_flight`` past the descriptor limit, or a
        ``[gate]`` written for an ``[emulator]`` that a target URL replaced), possibly none.

    Raises:
        ProfileError: a profile key this machine refuses, with file:line and the key
            (``[load].concurrency``, ``upstream.listen``, ``run.metrics_port``).
        UsageError: a flag it refuses (``--metrics-port``), or Ray not installed.
    """
    from .driver._common import fd_limit_for

    notes = [note for note in (fd_limit_for(profile),) if note]
    if profile.target.url is not None and profile.emulator and profile.gate:  # e.g. --target-url on ci-gate.toml
        notes.append(f"the profile's [emulator] table is not used (the target is {profile.target.url}), but its "
                     "[gate] is: budgets measured against that emulator say nothing about this target; calibrate "
                     "them against it first (docs/gate.md, \"Calibrate first\")")
    if profile.run.engine == "ray":
        from .driver._ray import import_ray

        import_ray()
    if profile.upstream is not None and profile.upstream.host is not None:
        from .driver._gateway import check_listen_free

        check_listen_free(profile.upstream, profile.path)
    port = metrics_port if metrics_port is not None else profile.run.metrics_port
    if port is not None:
        problem = _port_problem(port)
        if problem:
            raise _metrics_port_error(profile, port, problem, from_flag=metrics_port is not None)
    return notes


def _port_problem(port: int, host: str = "127.0.0.1") -> str | None:
    """Why the live metrics cannot listen on ``host:port`` (bound and released at once, with
    ``SO_REUSEADDR`` as the standard library's HTTP server binds), or None."""
    import socket

    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            return (f"cannot listen on {host}:{port}: {exc.strerror or exc} (is another process using it? "
                    "pick another port)")
    return None


def _metrics_port_error(profile: Profile, port: int, problem: str, *, from_flag: bool) -> HopbenchError:
    """The error for a live-metrics port that cannot be bound, naming where the port came
    from: ``--metrics-port`` (UsageError) or the profile's ``run.metrics_port`` (ProfileError
    with the file and line)."""
    if from_flag:
        return UsageError(f"--metrics-port {port}: {problem}")
    from ._errors import ProfileError
    from ._toml import line_in_file

    return ProfileError(problem, path=profile.path, line=line_in_file(profile.path, ("run", "metrics_port")),
                        key="run.metrics_port")


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
        trimmed = cast("IO[str]", _TrimmedLines(sys.stderr if stderr else sys.stdout))
        console = Console(file=trimmed, width=_FILE_WIDTH)
        console.soft_wrap = True
    return console


class _TrimmedLines:
    """A text stream that drops the blanks at the end of each line it passes on: rich pads
    table cells and edges, and off a terminal those blanks only clutter a CI log or a diff.
    Blanks are held back until the next text shows whether they end a line."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self._blanks = ""

    def write(self, text: str) -> int:
        lines = (self._blanks + text).split("\n")
        last = lines.pop()
        kept = last.rstrip(" ")
        self._blanks = last[len(kept):]
        self._stream.write("".join(line.rstrip(" ") + "\n" for line in lines) + kept)
        return len(text)

    def flush(self) -> None:
        self._stream.flush()

    def isatty(self) -> bool:
        return False

    @property
    def encoding(self) -> str:
        return str(getattr(self._stream, "encoding", None) or "utf-8")

    def fileno(self) -> int:
        return int(self._stream.fileno())


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
    from .driver._results import refuse_used_folder

    out = out or default_out_dir(profile, results_root)
    refuse_used_folder(out)  # before "running ... -> DIR": a refusal is the only line (issue 39 item 7)
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
        if port is not None:  # bound before any load: a port in use is exit 2 (UsageError / ProfileError)
            from .observe._live_metrics import LiveMetrics, run_labels

            try:
                live = stack.enter_context(LiveMetrics(port, run_labels(profile, run_id=out.name)))
            except UsageError as exc:  # taken since check_before_load: name where the port came from
                if metrics_port is not None:
                    raise
                raise _metrics_port_error(profile, port, str(exc).removeprefix(f"--metrics-port {port}: "),
                                          from_flag=False) from None
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
                   err: Console, *, shown: bool = False) -> int:
    """The exit code of a finished run, each non-zero one said on stderr (docs/results.md):
    2 the target was unreachable, 3 hopbench crashed, 4 the target was lost or failed the
    run (it never streamed and kept failing, nothing measured or completed, an arm or a
    scenario that completed nothing, no output, a stage that measured nothing), 130 / 143
    interrupted, 1 a search that measured no capacity, 5 a search that measured a lower bound
    only (hopbench saturated, or too few requests, above it); else the gate's (``gate_exit``).
    ``shown``: the tables were printed (a search's capacity line gave its saturation cause: the
    exit line leaves it out)."""
    reason = summary.get("interrupted_by") or ""
    stopped = stop_exit_code(reason)
    if stopped == EXIT_INPUT:
        err.print(_stop_line(reason, summary, outcome.out_dir, shown), markup=False, highlight=False, soft_wrap=True)
        return stopped
    if outcome.crashed:
        print(outcome.crashed, file=sys.stderr)
        return EXIT_CRASH
    if stopped == EXIT_TARGET_FAILED:  # lost mid-run, or never streamed (engine._watch)
        err.print(_stop_line(reason, summary, outcome.out_dir, shown), markup=False, highlight=False, soft_wrap=True)
        return stopped
    if not outcome.complete:
        return stopped or EXIT_INTERRUPTED
    head = summary.get("headline") or {}
    if head.get("started", 1) == 0:  # a summary without a headline says nothing here
        err.print(f"hopbench: error: no stream was measured (none started after the warm-up); see the "
                  f"warnings in {outcome.out_dir / 'summary.json'}", markup=False, highlight=False,
                  soft_wrap=True)
        return EXIT_TARGET_FAILED
    from .driver._warnings import NO_OUTPUT_WARNING, cancelled_by_design, failed_arms, failed_scenarios

    # every stream cancelled by the cancel key (the rest at the stop) is a success judged on its cancels
    if (not head.get("completed") and head.get("started", 0) > head.get("client_cancelled", 0)
            and not cancelled_by_design(head)):
        err.print(f"hopbench: error: no stream completed ({head.get('started', 0)} started); see the "
                  f"warnings{_and_samples(summary)} in {outcome.out_dir / 'summary.json'}", markup=False,
                  highlight=False, soft_wrap=True)
        return EXIT_TARGET_FAILED
    failed = failed_arms(summary)
    if failed:  # one arm failed outright: the A/B result means nothing (docs/ab-arms.md)
        err.print(f"hopbench: error: no stream of arm {', '.join(failed)} completed; see the warnings in "
                  f"{outcome.out_dir / 'summary.json'}", markup=False, highlight=False, soft_wrap=True)
        return EXIT_TARGET_FAILED
    failed = failed_scenarios(summary, [sc.name for sc in profile.scenarios])
    if failed:  # one scenario failed outright, hidden in the run's error rate (docs/results.md)
        err.print(f"hopbench: error: no stream of scenario {', '.join(failed)} completed; see the warnings"
                  f"{_and_samples(summary)} in {outcome.out_dir / 'summary.json'}", markup=False, highlight=False,
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
        bound = capacity.get("rate_rps" if capacity.get("mode") == "rate" else "concurrency")
        # (a breached [gate] decides: its 1)
        lower_only = gate_exit in (EXIT_OK, EXIT_INCONCLUSIVE) and isinstance(bound, (int, float))
        # a search's result is its capacity: a lower bound only (a load passed, the search could
        # not go on: hopbench saturated, too few requests) is inconclusive (5: retry on a quieter
        # runner or with longer probes); none measured is 1, never a silent 0 (docs/slo.md)
        word = "warning" if lower_only else "error"
        from .driver._search import message_head

        message = str(capacity.get("message"))
        err.print(f"hopbench: {word}: {message_head(message) if shown else message}", markup=False,
                  highlight=False, soft_wrap=True)
        if lower_only:
            return EXIT_INCONCLUSIVE
        return gate_exit if gate_exit not in (EXIT_OK, EXIT_INCONCLUSIVE) else EXIT_BREACH
    return gate_exit


def _stop_line(reason: str, summary: dict[str, Any], out_dir: Path, shown: bool) -> str:
    """The exit line of a run the target stopped early (unreachable, lost, failing). The reason
    is said once (issue 39 follow-up: "target failing" was printed three times): when the
    tables were shown, their warnings gave it (summary.json's first warning), so this line points
    there; else (``--quiet``, a Ctrl-C during the tables) it is said here."""
    if shown and reason in (summary.get("warnings") or ()):
        return (f"hopbench: error: the run stopped early because of the target (its warning above); partial results "
                f"in {out_dir}")
    return f"hopbench: error: {reason}; partial results in {out_dir}"


def _and_samples(summary: dict[str, Any]) -> str:
    """`` and error_samples`` when summary.json holds some: never point at an empty section."""
    return " and error_samples" if summary.get("error_samples") else ""
