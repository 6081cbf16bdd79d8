"""Why the load generator could not keep up: a pure verdict, each cause with its figure.

Role: decide whether a run's latencies can be trusted (the ``saturated`` flag of
summary.json) and, when they cannot, tell apart what held the client back
(issue 16 item 4), because each asks for a different remedy:

* ``client_cpu``: hopbench's own CPU was the limit (its event-loop thread, or
  the whole process, at 80 % of a core or more: one Python process runs on
  one core at a time). Remedy: ``--workers`` (or a lower load). With
  ``--workers`` also when the machine's CPUs were busy (as below) and the
  run's other load-generator processes on it (sibling workers, the driver:
  ``HostUsage.siblings_cpu_ns``) used 10 % of them or more: the run fills the
  machine by itself; they are never counted among the neighbours.
* ``collector``: Python's cyclic garbage collector stopped the process long
  enough and often enough to make the loop late (a pause of 25 ms or more,
  pauses adding up to 0.5 % of the run or more). ``--workers`` helps only
  by giving each process fewer live objects to scan.
* ``emulator``: the machine's CPUs were busy (at most 10 % of them idle while
  hopbench used less than 80 % of a core) and hopbench's own emulator (the
  embedded target, an embedded A/B arm, the ``[upstream]`` emulator: a child
  process on this machine) used 10 % of the machine's CPUs or more. Remedy:
  put the emulator on another machine (an external ``target.url``) or lower
  the load; a quieter machine would not help.
* ``machine_busy``: the process wanted to run but was not given a CPU: the
  hypervisor took CPU time (``steal`` in /proc/stat, 2 % or more), or the
  machine's CPUs were busy (as above) and other processes, neighbours, used
  10 % of them or more (or the emulator did not), or, without /proc/stat, the
  loop was late while hopbench used little CPU and the collector does not
  explain it. More workers would not help; another machine or a quieter one
  would. The emulator's CPU is measured apart (its /proc/PID/stat over the
  same span as /proc/stat) and never counted among the neighbours; when both
  took 10 % of the CPUs or more both causes are named, more cores first.
* ``unexplained``: none of the above passed its threshold over the whole run
  (the machine had idle CPUs on average, hopbench and the collector were
  moderate): the figures are given as measured.

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

from ._units import NS_PER_MS

__all__ = ["SATURATION_LAG_NS", "SATURATION_CPU", "BUSY_CPU", "GC_PAUSE_SHARE", "STEAL_SHARE",
           "MACHINE_IDLE_SHARE", "CULPRIT_SHARE", "Cause", "Verdict", "GeneratorFigures", "HostUsage",
           "HostSample", "judge", "sample_host", "host_usage", "parse_proc_stat", "parse_pid_stat",
           "with_siblings", "run_host", "emulator_here", "read_boot_id"]

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
        advice: what to do about it.
    """

    kind: str
    figure: str
    advice: str


@dataclass(frozen=True, slots=True)
class Verdict:
    """The judgement of one run's load generator.

    Attributes:
        saturated: latencies include client-side delay (any symptom).
        symptoms: what was seen, as sentence fragments ("event-loop lag p99 40.0 ms
            (> 25 ms)", ...), in a fixed order; empty when not saturated.
        causes: why, strongest first; at least one when saturated, none otherwise.
    """

    saturated: bool
    symptoms: tuple[str, ...]
    causes: tuple[Cause, ...]

    def warning(self) -> str | None:
        """The summary's warning (``load generator saturated: ...``), None when not saturated."""
        if not self.saturated:
            return None
        why = "; ".join(f"{c.figure}: {c.advice}" for c in self.causes)
        return (f"load generator saturated: {', '.join(self.symptoms)}; latencies include "
                f"client-side delay; cause: {why}")

    def to_json(self) -> dict[str, Any]:
        """summary.json ``generator.saturation``: saturated, symptoms, causes [{kind, figure, advice}]."""
        return {"saturated": self.saturated, "symptoms": list(self.symptoms),
                "causes": [{"kind": c.kind, "figure": c.figure, "advice": c.advice} for c in self.causes]}


def _ms(ns: int) -> str:
    return f"{ns / NS_PER_MS:.1f} ms"


def _busy_machine(host: HostUsage, busy: float, own: float) -> list[Cause]:
    """The causes of a machine at most ``MACHINE_IDLE_SHARE`` idle while hopbench was
    not busy: its emulator, its neighbours or both, more cores first.

    Each is named when it used ``CULPRIT_SHARE`` of the machine's CPUs or more;
    when neither did, the neighbours (the only explanation when the emulator's
    CPU was not measured). With ``--workers`` on one machine the run's other
    load-generator processes (``siblings_cpu_ns``) are the run's own CPU: named as
    ``client_cpu`` when they used ``CULPRIT_SHARE`` of the CPUs, never counted
    among the neighbours. A share of the machine, not a counterfactual "idle
    without it": hopbench's own process fills the machine too, so on 2 CPUs a
    client at 75 % of a core and an emulator at 100 % leave so little idle that
    a background of 0.07 cores would count as a cause.
    """
    emu = host.emulator_cores
    others = host.others_cores or 0.0
    found: list[tuple[float, Cause]] = []
    sib = host.siblings_cores
    if sib is not None and sib >= CULPRIT_SHARE * host.cpus:
        # --workers on one machine: the sibling workers (and the driver) are the run's
        # own CPU, not neighbours (a 2-worker run on 2 CPUs fills them by itself)
        found.append((sib, Cause(
            "client_cpu",
            f"the machine's {host.cpus} CPUs were {busy:.0%} busy and this run's own load generator used "
            f"{host.client_cores:.1f} cores (this worker {own:.0%} of one core, its sibling workers and the "
            f"driver {sib:.1f} cores)",
            f"the run's own load-generator processes took {host.client_cores:.1f} of this machine's "
            f"{host.cpus} CPUs: more workers would not add CPU here; lower the load or spread the workers "
            "over more machines (engine = \"ray\")")))
    # with workers, "hopbench" is this worker: say so, and what the whole run used
    me = "hopbench" if sib is None else "this worker"
    run = "" if sib is None else f" (the run's load generator {host.client_cores:.1f} cores)"
    if emu is not None and emu >= CULPRIT_SHARE * host.cpus:
        found.append((emu, Cause(
            "emulator",
            f"the machine's {host.cpus} CPUs were {busy:.0%} busy and hopbench's own emulator (a child "
            f"process on this machine) used {emu:.0%} of one core, other processes {others:.1f} cores, "
            f"while {me} used {own:.0%} of one core{run}",
            f"the client and the emulator share this machine's {host.cpus} CPUs: more workers would not add "
            "CPU here; run the emulator on another machine (an external target.url) or lower the load "
            "(fewer streams)")))
    if others >= CULPRIT_SHARE * host.cpus or not found:
        besides = f" and its emulator {emu:.0%} of one core" if emu else ""
        found.append((others, Cause(
            "machine_busy",
            f"the machine's {host.cpus} CPUs were {busy:.0%} busy and other processes on this machine "
            f"used {others:.1f} cores while {me} used {own:.0%} of one core{run}{besides}",
            "neighbours took the CPUs, not the load: more workers would not add CPU here; use a quieter "
            "machine")))
    found.sort(key=lambda fc: -fc[0])  # stable: equal cores keep the run's own, then the emulator, first
    return [c for _, c in found]


def judge(f: GeneratorFigures) -> Verdict:
    """Judge the load generator: saturated or not, and why (the module docstring's rules).

    Args:
        f: the run's own figures.

    Returns:
        The Verdict. Never raises.
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
    causes: list[Cause] = []
    host = f.host
    proc = host.process_cores if host is not None else None
    own = max(f.cpu_mean, proc or 0.0)
    if own >= BUSY_CPU:
        fig = f"hopbench's event loop used {f.cpu_mean:.0%} of one core"
        if proc is not None and proc > f.cpu_mean + 0.05:
            fig += f" (the whole process {proc:.0%})"
        causes.append(Cause("client_cpu", fig, "the client itself was busy: add --workers or lower the load"))
    share = f.gc_pause_ns / f.run_ns if f.run_ns > 0 else 0.0
    if f.gc_pause_max_ns >= SATURATION_LAG_NS and share >= GC_PAUSE_SHARE:
        causes.append(Cause(
            "collector",
            f"Python's garbage collector paused hopbench {f.gc_collections} times for {_ms(f.gc_pause_ns)} "
            f"in all ({share:.1%} of the run), the longest {_ms(f.gc_pause_max_ns)}",
            "collector pauses stop every stream's clock at once (see generator.gc_pause_max_ms); fewer "
            "streams per process (--workers, where the machine has idle cores) shorten them"))
    steal = host.steal_share if host is not None else None
    busy = host.machine_busy_share if host is not None else None
    if host is not None and steal is not None and steal >= STEAL_SHARE:
        causes.append(Cause("machine_busy",
                            f"the hypervisor took {steal:.1%} of the machine's CPU time (steal)",
                            "the machine was busy, not the load: more workers would not add CPU here; "
                            "use a quieter machine"))
    elif host is not None and busy is not None and own < BUSY_CPU and 1.0 - busy <= MACHINE_IDLE_SHARE:
        causes.extend(_busy_machine(host, busy, own))
    elif own < BUSY_CPU and not causes and busy is None:
        # no machine counters: lagging while using little CPU means waiting for a CPU
        causes.append(Cause(
            "machine_busy",
            f"the client used {own:.0%} of one core while it lagged, so it waited for a CPU: other "
            "processes on this machine (neighbours)",
            "likely neighbours, not the load: more workers would not add CPU here"))
    emu = host.emulator_cores if host is not None else None
    if not causes:  # no cause passed its threshold: say what was measured
        causes.append(Cause(
            "unexplained",
            f"hopbench used {own:.0%} of one core, the collector paused {share:.1%} of the run (longest "
            f"{_ms(f.gc_pause_max_ns)})" + ("" if busy is None else f", the machine's CPUs were {busy:.0%} busy")
            + ("" if emu is None else f", hopbench's emulator used {emu:.0%} of one core"),
            "none of hopbench's CPU, the collector or the machine explains the lag over the whole run "
            "(short bursts of neighbours, or a blocking call); run it again, and if it repeats, profile it"))
    return Verdict(True, tuple(symptoms), tuple(causes))


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
