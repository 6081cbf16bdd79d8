"""Why the load generator could not keep up: a pure verdict, each cause with its figure.

Role: decide whether a run's latencies can be trusted (the ``saturated`` flag of
summary.json) and, when they cannot, tell apart what held the client back
(issue 16 item 4), because each asks for a different remedy:

* ``client_cpu``: hopbench's own CPU was the limit (its event-loop thread, or
  the whole process, at 80 % of a core or more: one Python process runs on
  one core at a time). Remedy: ``--workers`` (or a lower load); on a busy
  machine (below) a lower load or a machine with more CPUs. With
  ``--workers`` also when the machine's CPUs were busy (as below) and the
  run's other load-generator processes on it (sibling workers, the driver:
  ``HostUsage.siblings_cpu_ns``) used 10 % of them or more: the run fills the
  machine by itself; they are never counted among the neighbours.
* ``collector``: Python's cyclic garbage collector stopped the process long
  enough and often enough to make the loop late (a pause of 25 ms or more,
  pauses adding up to 0.5 % of the run or more). ``--workers`` helps only
  by giving each process fewer live objects to scan.
* ``emulator``: the machine's CPUs were busy (at most 10 % of them idle on
  average over the run) and hopbench's own emulator (the
  embedded target, an embedded A/B arm, the ``[upstream]`` emulator: a child
  process on this machine) used 10 % of the machine's CPUs or more. Remedy:
  put the emulator on another machine (an external ``target.url``) or lower
  the load; a quieter machine would not help.
* ``machine_busy``: the process wanted to run but was not given a CPU: the
  hypervisor took CPU time (``steal`` in /proc/stat, 2 % or more), or the
  machine's CPUs were busy (as above) and other processes, neighbours, used
  10 % of them or more (steal included: 2 % of steal is enough), or no other
  cause of a busy machine passed its threshold, or, without /proc/stat, the
  loop was late while hopbench used little CPU and the collector does not
  explain it. More workers would not help; another machine or a quieter one
  would. The emulator's CPU is measured apart (its /proc/PID/stat over the
  same span as /proc/stat) and never counted among the neighbours.
* ``unexplained``: none of the above passed its threshold over the whole run
  (the machine had idle CPUs on average, hopbench and the collector were
  moderate): the figures are given as measured.

One primary cause (docs/results/saturation.md, "Saturation verdict"): the causes' remedies
differ (``--workers``; another machine for the emulator; a quieter machine), so
a verdict gives one, the primary cause's. The CPU causes (client, emulator,
neighbours or steal) are measured in cores over the same span: the one with
the largest share is primary (on a tie: the client, then the emulator, then the
machine); every other one that passed its own threshold (the threshold is what
makes a share material: 10 % of the CPUs, 80 % of a core for the client, 2 %
steal) is named as secondary, with its figure and no advice. On a busy machine
the client at 80 % of a core is weighed like the others (with neighbours
taking more, more workers would find no CPU). The collector is primary only
when no CPU cause passed: its pauses are wall time, stretched when the process
waits for a CPU, so the CPU's remedy comes first.

Symptoms (any one makes the run ``saturated``, whatever the cause, because
the latencies then include client-side delay): event-loop lag p99 over 25 ms,
open-loop schedule lag p99 over 25 ms (both judged on p90 with fewer than 100
samples), or the loop thread's CPU at 95 % of a core or more. A saturated run
always names at least one cause.

Pure and synchronous except :func:`sample_host`, which reads the process's CPU
time, /proc/stat and the emulator's /proc/PID/stat (Linux; elsewhere the
machine and emulator figures are None).
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from .._advice import ADVICE
from .._units import NS_PER_MS

__all__ = ["SATURATION_LAG_NS", "SATURATION_CPU", "BUSY_CPU", "GC_PAUSE_SHARE", "STEAL_SHARE",
           "MACHINE_IDLE_SHARE", "CULPRIT_SHARE", "Cause", "Verdict", "GeneratorFigures", "HostUsage",
           "HostSample", "judge", "sample_host", "host_usage", "parse_proc_stat", "parse_pid_stat",
           "with_siblings", "run_host", "emulator_here", "read_boot_id", "no_free_core"]

SATURATION_LAG_NS = 25 * NS_PER_MS
"""Loop or schedule lag p99 above this: the client's own delay is in the latencies."""
SATURATION_CPU = 0.95
"""The loop thread at this share of a core or more is saturated by itself."""
BUSY_CPU = 0.8
"""hopbench's loop thread or process at this share of a core or more: its own CPU is the limit."""
GC_PAUSE_SHARE = 0.005
"""Collector pauses adding up to this share of the run (with one of 25 ms or more) explain lag."""
STEAL_SHARE = 0.02
"""CPU time taken by the hypervisor (steal) at this share of the machine or more."""
MACHINE_IDLE_SHARE = 0.10
"""The machine's CPUs at most this idle (share of all CPUs) while hopbench was not busy: a busy machine."""
CULPRIT_SHARE = 0.10
"""On a busy machine, hopbench's emulator or the neighbours at this share of all CPUs or more are named."""


@dataclass(frozen=True, slots=True)
class HostUsage:
    """CPU use over a run, from the process's and the machine's counters.

    Attributes:
        wall_ns: the span measured (ns of the run's clock).
        process_cpu_ns: CPU time of every thread of this process over it.
        cpus: CPUs the machine has (``os.cpu_count()``).
        machine_busy_share: share of all CPUs' time that was not idle (user,
            nice, system, irq, softirq, steal), 0..1; None without /proc/stat.
        steal_share: share of all CPUs' time taken by the hypervisor, 0..1;
            None without /proc/stat.
        emulator_cpu_ns: CPU time (user + system, every thread) of the emulator
            processes hopbench started on this machine for the run, over the same
            span, ns (resolution one clock tick, 10 ms on most kernels); None when
            hopbench ran no emulator here or its counters could not be read at
            both ends (it exited mid-run, or no /proc).
        siblings_cpu_ns: CPU time of the same run's other load-generator
            processes on this machine (the sibling workers of ``--workers``
            and the driver) over the same span, ns: the run's own CPU, never
            the neighbours'; None for one process (it has none) or when not
            known (:func:`with_siblings`, :func:`run_host`).
        emulator_note: why ``emulator_cpu_ns`` is None although the run had an
            emulator (a Ray task on another host than the driver's emulator),
            else None.
    """

    wall_ns: int
    process_cpu_ns: int
    cpus: int
    machine_busy_share: float | None = None
    steal_share: float | None = None
    emulator_cpu_ns: int | None = None
    siblings_cpu_ns: int | None = None
    emulator_note: str | None = None

    @property
    def process_cores(self) -> float:
        """The process's CPU time over the wall time: cores it used on average."""
        return self.process_cpu_ns / self.wall_ns if self.wall_ns > 0 else 0.0

    @property
    def emulator_cores(self) -> float | None:
        """The emulator's CPU time over the wall time: cores (share of one core) it
        used on average; None when not measured."""
        if self.emulator_cpu_ns is None:
            return None
        return self.emulator_cpu_ns / self.wall_ns if self.wall_ns > 0 else 0.0

    @property
    def siblings_cores(self) -> float | None:
        """The run's other load-generator processes on this machine: cores on
        average; None when not known (one process)."""
        if self.siblings_cpu_ns is None:
            return None
        return self.siblings_cpu_ns / self.wall_ns if self.wall_ns > 0 else 0.0

    @property
    def client_cores(self) -> float:
        """The whole run's client CPU on this machine: this process and its
        siblings (workers, driver), cores on average."""
        return self.process_cores + (self.siblings_cores or 0.0)

    @property
    def others_cores(self) -> float | None:
        """Cores the rest of the machine (neighbours: neither this run's
        load-generator processes nor its emulator) kept busy on average; None
        without /proc/stat."""
        if self.machine_busy_share is None:
            return None
        return max(self.machine_busy_share * self.cpus - self.client_cores - (self.emulator_cores or 0.0), 0.0)

    def to_json(self) -> dict[str, Any]:
        """JSON-ready dict of the fields (summary.json, worker messages)."""
        return {"wall_ns": self.wall_ns, "process_cpu_ns": self.process_cpu_ns, "cpus": self.cpus,
                "machine_busy_share": self.machine_busy_share, "steal_share": self.steal_share,
                "emulator_cpu_ns": self.emulator_cpu_ns, "siblings_cpu_ns": self.siblings_cpu_ns,
                "emulator_note": self.emulator_note}

    @classmethod
    def from_json(cls, data: Any) -> HostUsage | None:
        """Inverse of :meth:`to_json`; None for anything that is not such a dict
        (a dict without ``emulator_cpu_ns``, ``siblings_cpu_ns`` or
        ``emulator_note``, from an older hopbench, reads as None there)."""
        if not isinstance(data, dict):
            return None
        try:
            emu, sib, note = data.get("emulator_cpu_ns"), data.get("siblings_cpu_ns"), data.get("emulator_note")
            return cls(int(data["wall_ns"]), int(data["process_cpu_ns"]), int(data["cpus"]),
                       data.get("machine_busy_share"), data.get("steal_share"),
                       None if emu is None else int(emu), None if sib is None else int(sib),
                       None if note is None else str(note))
        except (KeyError, TypeError, ValueError):
            return None


def with_siblings(own: HostUsage, siblings_cores: float) -> HostUsage:
    """``own`` with the run's other load-generator processes on its machine counted
    as the run's own (``siblings_cpu_ns``), not as neighbours.

    Args:
        own: one worker's figures over its own span.
        siblings_cores: the sibling workers' and the driver's CPU on the same
            machine, cores on average (each measured over its own span, which is
            nearly the worker's: they start together at the common start).

    Returns:
        The HostUsage with ``siblings_cpu_ns = siblings_cores x own.wall_ns``. Never raises.
    """
    return replace(own, siblings_cpu_ns=round(max(siblings_cores, 0.0) * own.wall_ns))


def run_host(driver: HostUsage, workers: Sequence[HostUsage]) -> HostUsage:
    """The whole run on the driver's machine: one sample of the machine and the
    emulator (the driver's, over the load window), the client CPU of every process.

    Combining per-worker samples would count the machine once per worker: the
    machine's shares and the emulator's CPU come from ``driver`` alone, and each
    worker adds only its own process CPU (its cores over its span, times the
    driver's span: the spans differ by the start-up and the shipping of results).

    Args:
        driver: the driver's sample over the load window (its own process CPU,
            the machine, the emulator).
        workers: the workers that ran on the driver's machine (their own spans).

    Returns:
        ``driver`` with ``siblings_cpu_ns`` = the workers' CPU, so that
        ``client_cores`` is the run's client CPU and ``others_cores`` the
        neighbours'. Never raises.
    """
    return with_siblings(driver, sum(w.process_cores for w in workers))


@dataclass(frozen=True, slots=True)
class GeneratorFigures:
    """What the run measured about the load generator itself (the judge's input).

    Attributes:
        loop_lag_ns: event-loop lag p99 (p90 with fewer than 100 samples), ns.
        schedule_lag_ns: open-loop schedule lag p99 (same rule), ns; 0 in a closed loop.
        cpu_mean, cpu_max: the loop thread's CPU, share of one core, time-weighted
            over the intervals' real lengths (mean) and the largest interval's.
        gc_collections, gc_pause_ns, gc_pause_max_ns: the collector's collections,
            total and longest pause (ns) over the run.
        run_ns: the run's length (ns) the collector's figures cover.
        host: CPU use of the process and the machine, None when not measured.
    """

    loop_lag_ns: int
    schedule_lag_ns: int
    cpu_mean: float
    cpu_max: float = 0.0
    gc_collections: int = 0
    gc_pause_ns: int = 0
    gc_pause_max_ns: int = 0
    run_ns: int = 0
    host: HostUsage | None = None


@dataclass(frozen=True, slots=True)
class Cause:
    """One reason the client fell behind.

    Attributes:
        kind: ``client_cpu`` | ``collector`` | ``emulator`` | ``machine_busy`` |
            ``unexplained`` (the symptom is real but no cause passed its threshold).
        figure: the measured figure that shows it, as a sentence fragment.
        advice: what to do about it: the primary cause's only; None for a
            secondary one (its share is reported, its remedy is not the run's).
        role: ``primary`` (the first cause of a verdict, the one to act on) or
            ``secondary`` (also passed its threshold, but took less).
    """

    kind: str
    figure: str
    advice: str | None = None
    role: str = "primary"


@dataclass(frozen=True, slots=True)
class Verdict:
    """The judgement of one run's load generator.

    Attributes:
        saturated: latencies include client-side delay (any symptom).
        symptoms: what was seen, as sentence fragments ("event-loop lag p99 40.0 ms
            (> 25 ms)", ...), in a fixed order; empty when not saturated.
        causes: why: the primary cause first (the only one with advice), then
            the secondary ones (module docstring, "One primary cause"); at
            least one when saturated, none otherwise.
    """

    saturated: bool
    symptoms: tuple[str, ...]
    causes: tuple[Cause, ...]

    def warning(self) -> str | None:
        """The summary's warning, None when not saturated: ``load generator saturated:
        SYMPTOMS; latencies include client-side delay; cause: FIGURE: ADVICE`` (the
        primary cause), then ``; secondary: FIGURE; FIGURE`` when others passed
        their thresholds (their figures only: one piece of advice per verdict)."""
        if not self.saturated or not self.causes:
            return None
        p = self.causes[0]
        also = "; ".join(c.figure for c in self.causes[1:])
        return (f"load generator saturated: {', '.join(self.symptoms)}; latencies include "
                f"client-side delay; cause: {p.figure}: {p.advice}" + (f"; secondary: {also}" if also else ""))

    def to_json(self) -> dict[str, Any]:
        """summary.json ``generator.saturation``: saturated, symptoms, causes [{kind,
        figure, advice (null for a secondary cause), role}], the primary first."""
        return {"saturated": self.saturated, "symptoms": list(self.symptoms),
                "causes": [{"kind": c.kind, "figure": c.figure, "advice": c.advice, "role": c.role}
                           for c in self.causes]}


def _ms(ns: int) -> str:
    return f"{ns / NS_PER_MS:.1f} ms"


@dataclass(frozen=True, slots=True)
class _Share:
    """A CPU cause and its measured share: what decides which one is primary."""

    cores: float  # its measured CPU, cores on average over the run
    kind: str
    figure: str  # as the primary cause
    short: str  # as a secondary cause
    advice: str


def _cpu_shares(f: GeneratorFigures, own: float) -> list[_Share]:
    """The CPU causes that passed their thresholds, in the tie order client, emulator,
    machine (unsorted): the module docstring's rules, one entry per kind."""
    host = f.host
    loop = f"hopbench's event loop used {f.cpu_mean:.0%} of one core"
    if host is None:
        return [_Share(own, "client_cpu", loop, loop, ADVICE["client_cpu"].text)] if own >= BUSY_CPU else []
    steal = host.steal_share
    busy = host.machine_busy_share or 0.0  # (0.0: no /proc/stat, never "full")
    full = host.machine_busy_share is not None and 1.0 - busy <= MACHINE_IDLE_SHARE  # no idle CPU on average
    sib = host.siblings_cores
    culprit = CULPRIT_SHARE * host.cpus
    out: list[_Share] = []
    proc = host.process_cores
    if proc > f.cpu_mean + 0.05:
        loop += f" (the whole process {proc:.0%})"
    if full and sib is not None and sib >= culprit:
        # --workers on one machine: the sibling workers (and the driver) are the run's
        # own CPU, not neighbours (a 2-worker run on 2 CPUs fills them by itself)
        fig = (f"this run's own load generator used {host.client_cores:.1f} cores (this worker {own:.0%} of "
               f"one core, its sibling workers and the driver {sib:.1f} cores)")
        out.append(_Share(
            own + sib, "client_cpu", f"the machine's {host.cpus} CPUs were {busy:.0%} busy and {fig}", fig,
            f"the run's own load-generator processes took {host.client_cores:.1f} of this machine's "
            f"{host.cpus} CPUs: {ADVICE['run_fills_machine'].cure}"))
    elif own >= BUSY_CPU:
        advice = ADVICE["client_cpu_full" if full else "client_cpu"].text
        out.append(_Share(own + (sib or 0.0), "client_cpu", loop, loop, advice))
    if not full:
        if steal is not None and steal >= STEAL_SHARE:
            fig = f"the hypervisor took {steal:.1%} of the machine's CPU time (steal)"
            out.append(_Share(steal * host.cpus, "machine_busy", fig, fig, ADVICE["steal"].text))
        return out
    emu = host.emulator_cores
    others = host.others_cores or 0.0
    # with workers, "hopbench" is this worker: say so, and what the whole run used
    me = "hopbench" if sib is None else "this worker"
    run = "" if sib is None else f" (the run's load generator {host.client_cores:.1f} cores)"
    if emu is not None and emu >= culprit:
        short = f"hopbench's own emulator (a child process on this machine) used {emu:.0%} of one core"
        out.append(_Share(
            emu, "emulator",
            f"the machine's {host.cpus} CPUs were {busy:.0%} busy and {short}, other processes "
            f"{others:.1f} cores, while {me} used {own:.0%} of one core{run}", short,
            f"the client and the emulator share this machine's {host.cpus} CPUs: {ADVICE['emulator'].cure}"))
    stolen = steal is not None and steal >= STEAL_SHARE
    if others >= culprit or stolen or not out:
        besides = f" and its emulator {emu:.0%} of one core" if emu else ""
        of_which = f" (of which the hypervisor took {steal:.1%} of the CPU time: steal)" if stolen else ""
        short = f"other processes on this machine (neighbours) used {others:.1f} cores{of_which}"
        out.append(_Share(
            others, "machine_busy",
            f"the machine's {host.cpus} CPUs were {busy:.0%} busy and other processes on this machine "
            f"used {others:.1f} cores{of_which} while {me} used {own:.0%} of one core{run}{besides}", short,
            ADVICE["neighbours"].text))
    return out


def judge(f: GeneratorFigures) -> Verdict:
    """Judge the load generator: saturated or not, and why (the module docstring's rules).

    Args:
        f: the run's own figures.

    Returns:
        The Verdict: one primary cause with advice, then the secondary ones
        (figures only). Never raises.
    """
    symptoms: list[str] = []
    if f.loop_lag_ns > SATURATION_LAG_NS:
        symptoms.append(f"event-loop lag p99 {_ms(f.loop_lag_ns)} (> {SATURATION_LAG_NS // NS_PER_MS} ms)")
    if f.schedule_lag_ns > SATURATION_LAG_NS:
        symptoms.append(f"open-loop schedule lag p99 {_ms(f.schedule_lag_ns)} (arrivals left late)")
    if f.cpu_mean >= SATURATION_CPU:
        symptoms.append(f"CPU {f.cpu_mean:.0%} of one core")
    if not symptoms:
        return Verdict(False, (), ())
    host = f.host
    proc = host.process_cores if host is not None else None
    own = max(f.cpu_mean, proc or 0.0)
    # CPU causes by their measured share, the largest first (a stable sort: on a tie the
    # run's own client, then its emulator, then the machine)
    shares = sorted(_cpu_shares(f, own), key=lambda sh: -sh.cores)
    causes = [Cause(sh.kind, sh.figure if i == 0 else sh.short, sh.advice if i == 0 else None,
                    "primary" if i == 0 else "secondary") for i, sh in enumerate(shares)]
    share = f.gc_pause_ns / f.run_ns if f.run_ns > 0 else 0.0
    if f.gc_pause_max_ns >= SATURATION_LAG_NS and share >= GC_PAUSE_SHARE:
        # primary only when no CPU cause passed: the pauses are measured in wall time, so a
        # process short of CPU sees them stretched, and the CPU's remedy comes first
        fig = (f"Python's garbage collector paused hopbench {f.gc_collections} times for {_ms(f.gc_pause_ns)} "
               f"in all ({share:.1%} of the run), the longest {_ms(f.gc_pause_max_ns)}")
        causes.append(Cause("collector", fig, None, "secondary") if causes else Cause(
            "collector", fig, ADVICE["collector"].text))
    busy = host.machine_busy_share if host is not None else None
    if not causes and own < BUSY_CPU and busy is None:
        # no machine counters: lagging while using little CPU means waiting for a CPU
        causes.append(Cause(
            "machine_busy",
            f"the client used {own:.0%} of one core while it lagged, so it waited for a CPU: other "
            "processes on this machine (neighbours)",
            ADVICE["waited_for_cpu"].text))
    emu = host.emulator_cores if host is not None else None
    if not causes:  # no cause passed its threshold: say what was measured
        causes.append(Cause(
            "unexplained",
            f"hopbench used {own:.0%} of one core, the collector paused {share:.1%} of the run (longest "
            f"{_ms(f.gc_pause_max_ns)})" + ("" if busy is None else f", the machine's CPUs were {busy:.0%} busy")
            + ("" if emu is None else f", hopbench's emulator used {emu:.0%} of one core"),
            ADVICE["unexplained"].text))
    return Verdict(True, tuple(symptoms), tuple(causes))


def no_free_core(host: HostUsage | None, workers: int = 1) -> str | None:
    """What took the machine's CPUs when another load generator would have none to use.

    The late client's cure (the error-bound warnings, hopbench.measure._error_bound)
    is "--workers auto" only where that adds a process with a core to run on. Here
    it would not: the machine had no idle CPU on average (at most
    :data:`MACHINE_IDLE_SHARE` idle, the verdict's "busy machine"), or ``--workers
    auto``'s rule (hopbench.engine._cores: free cores = CPUs less the other
    processes', rounded, at least 1) on the run's own figures (the neighbours' and
    the emulator's cores, not the run's load generators') gives no more than
    ``workers``.

    Args:
        host: the run's CPU figures; None (not measured) gives None.
        workers: the run's load-generator processes on this machine.

    Returns:
        A key of :data:`hopbench._advice.ADVICE` whose cure fits: ``"emulator"``
        (hopbench's emulator took more than the neighbours), ``"neighbours"``
        (other processes did), ``"run_fills_machine"`` (neither took half a core:
        the run's own processes fill the CPUs); None when a core was free or
        /proc/stat was not read. Never raises.
    """
    if host is None or host.machine_busy_share is None:
        return None
    others = host.others_cores or 0.0
    emu = host.emulator_cores or 0.0
    full = 1.0 - host.machine_busy_share <= MACHINE_IDLE_SHARE
    if not full and max(int(host.cpus - others - emu + 0.5), 1) > workers:
        return None
    if others < 0.5 and emu < 0.5:
        return "run_fills_machine"
    return "emulator" if emu > others else "neighbours"


# -- measuring the host (the only I/O here) ----------------------------------------------


@dataclass(frozen=True, slots=True)
class HostSample:
    """One reading of the counters :func:`host_usage` subtracts.

    Attributes:
        process_cpu_ns: ``time.process_time_ns()`` (every thread of the process).
        proc_stat: the aggregate ``cpu`` line of /proc/stat as (busy, total,
            steal) clock ticks, or None where it cannot be read.
        emulators: one (pid, start time in clock ticks since boot, CPU time in
            ns) per emulator process asked for and readable, in the order asked;
            the start time tells a process from a later one that reused its pid.
    """

    process_cpu_ns: int
    proc_stat: tuple[int, int, int] | None
    emulators: tuple[tuple[int, int, int], ...] = ()


def parse_proc_stat(text: str) -> tuple[int, int, int] | None:
    """(busy, total, steal) ticks from /proc/stat's aggregate ``cpu`` line (proc(5)).

    busy = user + nice + system + irq + softirq + steal; total = busy + idle +
    iowait (guest time is already inside user and nice). None when the line is
    missing or malformed. Never raises.
    """
    for line in text.splitlines():
        if line.startswith("cpu "):
            try:
                v = [int(x) for x in line.split()[1:]]
            except ValueError:
                return None
            if len(v) < 4:
                return None
            v += [0] * (8 - len(v))
            user, nice, system, idle, iowait, irq, softirq, steal = v[:8]
            busy = user + nice + system + irq + softirq + steal
            return busy, busy + idle + iowait, steal
    return None


def parse_pid_stat(text: str) -> tuple[int, int] | None:
    """(CPU ticks, start ticks) from one /proc/PID/stat line (proc(5)).

    CPU ticks = utime + stime (fields 14 and 15: every thread of the process;
    children are not included); start ticks = starttime (field 22, clock ticks
    since boot). The fields are counted after the last ``)``, since the command
    name (field 2) may hold spaces and parentheses. None when malformed. Never raises.
    """
    _, sep, rest = text.rpartition(")")
    fields = rest.split()
    if not sep or len(fields) < 20:
        return None
    try:  # fields[0] is field 3 (state): field n is fields[n - 3]
        return int(fields[11]) + int(fields[12]), int(fields[19])
    except ValueError:
        return None


def _tick_ns() -> int:
    try:
        hz = os.sysconf("SC_CLK_TCK")
    except (ValueError, OSError, AttributeError):
        hz = 100
    return 1_000_000_000 // hz if hz > 0 else 10_000_000


def sample_host(proc_stat: Path = Path("/proc/stat"), emulator_pids: tuple[int, ...] = (),
                proc: Path = Path("/proc")) -> HostSample:
    """Read the process's CPU time, the machine's counters and the emulators' CPU now.

    Args:
        proc_stat: the machine's counters (/proc/stat).
        emulator_pids: the emulator processes hopbench started on this machine
            (``EmbeddedEmulator.pid``); their ``<proc>/PID/stat`` is read.
        proc: the proc file system's root (tests point it at a folder).

    Returns:
        The HostSample; a pid whose stat cannot be read (gone) is left out of
        ``emulators``. Never raises.
    """
    try:
        ticks = parse_proc_stat(proc_stat.read_text(encoding="ascii", errors="replace"))
    except OSError:
        ticks = None
    emulators: list[tuple[int, int, int]] = []
    if emulator_pids:
        tick_ns = _tick_ns()
        for pid in emulator_pids:
            try:
                got = parse_pid_stat((proc / str(pid) / "stat").read_text(encoding="utf-8", errors="replace"))
            except OSError:
                got = None
            if got is not None:
                emulators.append((pid, got[1], got[0] * tick_ns))
    return HostSample(time.process_time_ns(), ticks, tuple(emulators))


def host_usage(a: HostSample, b: HostSample, wall_ns: int, cpus: int | None = None) -> HostUsage:
    """CPU use between two samples taken ``wall_ns`` apart.

    Args:
        a, b: the samples at the start and the end.
        wall_ns: the time between them (the run's clock), ns.
        cpus: the machine's CPUs (default ``os.cpu_count()``).

    Returns:
        HostUsage; the machine shares are None when either sample lacks
        /proc/stat or no tick passed; ``emulator_cpu_ns`` is the emulators' CPU
        between the samples, None when ``a`` has no emulator or the two
        samples do not hold the same processes (one gone by the end, or another
        process by then under its pid: a new start time).
        Never raises.
    """
    busy_share = steal_share = None
    if a.proc_stat is not None and b.proc_stat is not None:
        d_busy, d_total, d_steal = (y - x for x, y in zip(a.proc_stat, b.proc_stat))
        if d_total > 0:
            busy_share = min(max(d_busy / d_total, 0.0), 1.0)
            steal_share = min(max(d_steal / d_total, 0.0), 1.0)
    emulator_ns: int | None = None
    if a.emulators:
        ends = {(pid, start): cpu for pid, start, cpu in b.emulators}
        if set(ends) == {(pid, start) for pid, start, _ in a.emulators}:  # the same processes at both ends
            emulator_ns = sum(max(ends[pid, start] - cpu, 0) for pid, start, cpu in a.emulators)
    return HostUsage(wall_ns, max(b.process_cpu_ns - a.process_cpu_ns, 0), cpus or os.cpu_count() or 1,
                     busy_share, steal_share, emulator_ns)


def read_boot_id(proc: Path = Path("/proc")) -> str | None:
    """This machine's boot id (``<proc>/sys/kernel/random/boot_id``, proc(5): a
    random UUID per boot, the same for every process of the machine); None where
    it cannot be read. Never raises."""
    try:
        text = (proc / "sys" / "kernel" / "random" / "boot_id").read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    return text.strip() or None


def emulator_here(pids: tuple[int, ...], starts: tuple[int, ...], boot_id: str | None,
                  proc: Path = Path("/proc")) -> tuple[tuple[int, ...], str | None]:
    """Which of the driver's emulator processes this process can measure.

    A process on another machine (a Ray task) must not read the driver's pid:
    there it names another process or none. The pids are kept only when this
    machine has the driver's boot id and each pid's start time (field 22 of
    ``<proc>/PID/stat``) is the one the driver read: the same machine, the same
    process (not a namespace where the pid names another one).

    Args:
        pids: the driver's emulator pids (``EmbeddedEmulator.pid``).
        starts: their start times, clock ticks since boot, in the same order.
        boot_id: the driver's :func:`read_boot_id`.
        proc: the proc file system's root (tests point it at a folder).

    Returns:
        (pids to measure, None) when all are here; ((), reason) otherwise, the
        reason a sentence fragment for summary.json (``emulator_cpu_note``);
        ((), None) when there is no emulator. Never raises.
    """
    if not pids:
        return (), None
    if not boot_id or len(starts) != len(pids):
        return (), "not measured: the driver could not identify its emulator's machine (no /proc)"
    here = read_boot_id(proc)
    if here != boot_id:
        return (), ("not measured: this worker ran on another machine than the driver's emulator"
                    if here is not None else "not measured: this worker cannot read its machine's boot id")
    for pid, start in zip(pids, starts):
        try:
            got = parse_pid_stat((proc / str(pid) / "stat").read_text(encoding="utf-8", errors="replace"))
        except OSError:
            got = None
        if got is None or got[1] != start:
            return (), (f"not measured: the driver's emulator (pid {pid}) is not visible from this worker "
                        "(another pid namespace, or it exited)")
    return pids, None
