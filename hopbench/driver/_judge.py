"""The one finish path: judge a run and build its summary record.

Role: every engine (one process in ``hopbench.driver._single``, worker processes in
``hopbench.driver._workers``, Ray tasks in ``hopbench.driver._ray`` through the workers'
``Merger``) ends the same way:

1. each load generator's run-level figures become a :class:`RunCounters`
   (frozen; :meth:`RunCounters.merge` adds two of them exactly);
2. :func:`judge` (pure: no clock, no I/O) takes the profile, one
   :class:`~hopbench.driver._summary.Part` per load generator, the merged
   snapshots and the facts of the end (``RunEnd``), and returns one
   ``Summary`` record (``hopbench.driver._summary``): the verdict (complete,
   saturated, load held, warnings), the load figures (:func:`analyse`), the
   headline (:func:`headline`), the generator's figures and, with workers, one
   ``WorkerDetail`` per worker;
3. ``Summary.to_json`` is the one serialiser of the final summary.json.

Invariants:

* One process and W workers are judged by the same rules: a single-process
  run is one ``Part`` without worker facts; with workers, saturation is
  judged per worker (a merged CPU figure means nothing; each worker's sibling
  workers and the driver count as the run's own CPU, not as neighbours), the
  verdicts merged into ``generator.saturation`` (:func:`merge_saturation`), the
  machine's figures taken once by the driver (``RunEnd.host``), and everything
  else on the merged counters.
* Time is integer ns inside; the figures are rounded into ms and s here, once.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from functools import reduce
from typing import Any

from .._advice import ADVICE, cure_of, one_cure_each
from .._exit import STOP_TARGET_FAILING, STOP_TARGET_LOST, STOP_TARGET_UNREACHABLE
from .._format import plural
from .._units import NS_PER_MS, NS_PER_S
from ..config._records import Profile
from ..engine._saturation import GeneratorFigures, HostUsage, no_free_core
from ..engine._saturation import Verdict as SaturationVerdict
from ..engine._saturation import judge as judge_saturation
from ..measure._counters import RunCounters, RunStatsLike
from ..measure._inflight import BUSY_PHASES, PHASES
from ..measure._recorder import ALL, Snapshot
from ..measure._slo import slo_summary
from ._common import iso_ms
from ._summary import Generator, Headline, Part, RunEnd, Summary, Verdict, WorkerDetail
from ._warnings import run_warnings

__all__ = ["LOAD_HELD_FRACTION", "analyse", "gc_figures", "headline", "host_figures", "host_usage_figures",
           "judge", "merge_saturation", "slo_block", "trace_load"]

LOAD_HELD_FRACTION = 0.9
#: a closed loop's run.requests budget is judged for load held only over a steady window this long
#: at least, s (up to its last request): a budget of a few streams lasts milliseconds, whose mean
#: says more of the client's start than of the load (it is then not judged: ``held`` null)
BUDGET_WINDOW_MIN_S = 1.0
_SATURATED = "load generator saturated"


# -- the rules -------------------------------------------------------------------

def trace_load(spec: Any, warmup_ns: int, stop_ns: int, part: tuple[int, int] = (0, 1),
               ) -> tuple[float | None, dict[str, Any]]:
    """What a trace replay asked for in the measured window (docs/results/in-flight.md, "Load held").

    Args:
        spec: the replay (``hopbench.workload._trace.TraceSpec``).
        warmup_ns, stop_ns: the load's window, ns from the run start.
        part: a worker's share (its index, the worker count).

    Returns:
        (the trace's request rate over ``[warmup_ns, stop_ns)`` of the run, per
        second, or None when the replay is one instant (``TraceSpec.one_instant``:
        every request at one time, not looped: it has no rate, and the window
        would be the made-up gap after that instant); summary.json's
        ``load.trace`` block: ``entries`` (in the window), ``speedup``,
        ``loop``, ``scheduled`` (requests the trace put in the measured
        window), ``trace_rate_rps`` (the same per second) and ``mean_rate_rps``
        (the whole window's mean rate at this speedup), both null for one
        instant; of one worker's share with ``part``.
    """
    measured_s = max(stop_ns - warmup_ns, 1) / NS_PER_S
    scheduled = spec.scheduled_between(warmup_ns, stop_ns, *part)
    rate = None if spec.one_instant else scheduled / measured_s
    return rate, {"entries": len(spec.entries), "speedup": spec.speedup, "loop": spec.loop,
                  "scheduled": scheduled, "trace_rate_rps": None if rate is None else round(rate, 3),
                  "mean_rate_rps": None if spec.one_instant else round(spec.rate_rps, 3)}


def analyse(profile: Profile, stats: RunStatsLike, total: Snapshot) -> tuple[bool, list[str], dict[str, Any]]:
    """Judge the load generator and the load actually held.

    Args:
        profile: the profile as this load generator ran it (a worker: its share).
        stats: its ``RunStats`` or :class:`RunCounters`.
        total: its measured snapshot (histograms ``loop_lag`` and ``schedule_lag``, counters).

    Returns:
        (saturated, warnings, load): saturated is True when the client itself
        was the bottleneck (event-loop lag p99 or open-loop schedule lag p99
        over 25 ms, judged on p90 when there are fewer than 100 samples, or
        CPU over 95 % of a core), so latencies are not to be trusted; ``load``
        holds requested vs achieved figures (docs/results/in-flight.md, "Load held").

    In flight (hopbench.measure._inflight; docs/results/in-flight.md, "In flight"):
    ``mean_in_flight`` and ``peak_in_flight`` count what a gateway sees (the
    request sent, not finished); ``in_flight_by_phase`` the steady window's
    mean per phase, ``mean_busy`` (connecting + in flight) and ``mean_open``
    (every phase, client-side waiting too). Load held: a closed loop of N
    users holds its load when on average at least 90 % of N users are busy
    with the target (connecting to it counts: a k6 VU or a wrk connection
    that is connecting is still offering load; so does a session's user in its
    ``think_time_s`` between turns, ``mean_thinking``, as a k6 VU in ``sleep()``:
    the profile asked for that pause; waiting on the client side,
    or closing a stream the target has finished, does not); an open loop when the
    arrivals due in the load's window that were actually written to the target
    (whenever: the grace period after the stop too) reach 90 % of the arrivals its
    schedule had due in that window (``load.due``, counted by the runner on the
    seeded schedule itself: a short Poisson run judged on rate x window would
    fail on the schedule's own noise) and no arrival was dropped. The window is
    ``[measured start, stop)`` on the arrivals' due times for ``due``, ``sent``,
    ``arrival_rate_rps`` and ``later_turns_sent`` alike (``hopbench.engine._schedule``);
    ``load_window_s`` ends at the stop, or one mean gap after the last arrival of
    a schedule that ran out by itself (``stats.schedule_end_ns``), never past
    ``run.duration_s``. A ``run.requests`` budget leaves a closed loop unjudged
    (``held`` null); an open loop's is judged like any other.
    """
    load, verdict = _generator_load(profile, stats, total)
    warnings = [str(verdict.warning())] if verdict.saturated else []
    mean_busy, mean_in_flight, by_phase = _in_flight(stats, load)
    if profile.load.mode == "concurrency":
        if profile.run.requests is not None and _steady_ns(stats, load) < BUDGET_WINDOW_MIN_S * NS_PER_S:
            mean_busy = None  # too short a budget to judge (BUDGET_WINDOW_MIN_S): held null
        steady_ns = _steady_ns(stats, load)
        thinking = stats.steady_think_area / steady_ns if steady_ns > 0 else 0.0
        if thinking > 0:  # sessions' think times (docs/results/in-flight.md, "Load held")
            load["mean_thinking"] = round(thinking, 3)
        warnings += _closed_loop_held(profile, load, mean_busy, mean_in_flight, by_phase, thinking)
    else:
        warnings += _open_loop_held(profile, stats, total, load)
    # a saturated client read late for the verdict's reason: its cure, not a second one; on a
    # machine with no core for another load generator, not "--workers auto" either
    primary = verdict.causes[0].advice if verdict.saturated and verdict.causes else None
    late_cure = cure_of(primary) if primary else None
    if late_cure is None:
        full = no_free_core(HostUsage.from_json(stats.host), profile.run.workers)
        late_cure = ADVICE[full].cure if full is not None else None
    if _one_process(profile) and (late_cure is None or "--workers" in late_cure):
        late_cure = ADVICE["one_process"].cure  # (--workers auto is refused there: never advise it)
    warnings += run_warnings(profile, stats, total, late_cure=late_cure)
    return verdict.saturated, warnings, load


def _one_process(profile: Profile) -> bool:
    """The run cannot add load generators: ``[upstream]`` and ``[[arm]]`` runs are one process
    (``--workers`` and ``engine = "ray"`` are refused: docs/gateway-overhead.md, docs/ab-arms.md)."""
    return profile.upstream is not None or bool(profile.arms)


def _generator_load(profile: Profile, stats: RunStatsLike,
                    total: Snapshot) -> tuple[dict[str, Any], SaturationVerdict]:
    """The ``load`` block's first keys (the load generator's own figures) and its
    saturation verdict (hopbench.engine._saturation); see :func:`analyse`."""
    lag = total.histogram(ALL, "loop_lag")
    sched = total.histogram(ALL, "schedule_lag")
    cpu = stats.cpu_fractions
    cpu_mean = sum(cpu) / len(cpu) if cpu else 0.0

    # p99 needs >= 100 samples to mean anything (1 s of lag probes, 100 arrivals);
    # shorter runs are judged on p90 so that one startup hiccup is not a verdict.
    def judged(h: Any) -> int:
        return int(h.percentile(99.0 if h.count >= 100 else 90.0)) if h.count else 0

    lag_p99, sched_p99 = judged(lag), judged(sched)
    # Say what was measured and what it points at (hopbench.engine._saturation): the
    # client's own CPU, collector pauses, or a busy machine (steal, hopbench's emulator, neighbours).
    verdict = judge_saturation(GeneratorFigures(
        lag_p99, sched_p99, cpu_mean, max(cpu, default=0.0), stats.gc_collections, stats.gc_pause_ns,
        stats.gc_pause_max_ns, stats.ended_ns or stats.stop_ns, HostUsage.from_json(stats.host)))
    if _one_process(profile):  # a cure of more workers is one this run's own profile refuses
        verdict = dataclasses.replace(verdict, causes=tuple(
            dataclasses.replace(c, advice=f"{c.advice.split(': ', 1)[0]}: {ADVICE['one_process'].cure}")
            if c.advice and "--workers" in c.advice else c for c in verdict.causes))
    measured_ns = max(stats.stop_ns - profile.run.warmup_ns, 1)
    load: dict[str, Any] = {"mode": profile.load.mode, "peak_in_flight": stats.peak_in_flight,
                            "peak_open": stats.peak_open,
                            "measured_s": round(measured_ns / NS_PER_S, 6),
                            "cpu_mean": round(cpu_mean, 4), "cpu_max": round(max(cpu, default=0), 4),
                            "loop_lag_p99_ms": (lag.percentile(99.0) if lag.count else 0) / NS_PER_MS,
                            "saturation": verdict.to_json()}  # moved to generator by judge
    return load, verdict


def _in_flight(stats: RunStatsLike, load: dict[str, Any]) -> tuple[float | None, float | None,
                                                                   dict[str, float | None]]:
    """Add the steady window's in-flight means to ``load`` (``mean_in_flight``,
    ``in_flight_by_phase``, ``mean_busy``, ``mean_open``; see :func:`analyse`).

    Returns:
        (mean busy, mean in flight, mean per phase), each None when the steady
        window is empty (nothing measured).
    """
    steady_ns = _steady_ns(stats, load)
    mean_in_flight = stats.steady_area / steady_ns if steady_ns > 0 else None
    load["mean_in_flight"] = None if mean_in_flight is None else round(mean_in_flight, 3)
    by_phase = {name: (stats.steady_phase_area.get(name, 0) / steady_ns if steady_ns > 0 else None)
                for name in PHASES}
    load["in_flight_by_phase"] = {k: None if v is None else round(v, 3) for k, v in by_phase.items()}
    mean_busy = None if steady_ns <= 0 else sum(by_phase[PHASES[p]] or 0.0 for p in BUSY_PHASES)
    load["mean_busy"] = None if mean_busy is None else round(mean_busy, 3)
    load["mean_open"] = None if steady_ns <= 0 else round(sum(v or 0.0 for v in by_phase.values()), 3)
    return mean_busy, mean_in_flight, by_phase


def _steady_ns(stats: RunStatsLike, load: Mapping[str, Any]) -> int:
    """The steady window the in-flight means cover, ns: from ``steady_from_ns`` to the stop,
    or, for a closed loop whose request budget was all taken, to when its last request was
    (``schedule_end_ns``: the users' drain after it is not steady load)."""
    end_ns = stats.stop_ns
    if load.get("mode") == "concurrency" and 0 < stats.schedule_end_ns < end_ns:
        end_ns = stats.schedule_end_ns
    return end_ns - min(stats.steady_from_ns, end_ns)


def _closed_loop_held(profile: Profile, load: dict[str, Any], mean_busy: float | None,
                      mean_in_flight: float | None, by_phase: Mapping[str, float | None],
                      thinking: float = 0.0) -> list[str]:
    """A closed loop's load held (``load.requested_concurrency``, ``load.held``; see
    :func:`analyse`): at least ``LOAD_HELD_FRACTION`` of its users busy with the target
    or thinking between session turns (``thinking``: their mean number, users).

    Returns:
        the "load not held" warning, or nothing.
    """
    warnings: list[str] = []
    load["requested_concurrency"] = profile.load.concurrency
    want = profile.load.concurrency
    # a run.requests budget is judged as a duration is, over its steady window up to when its
    # last request was taken (_in_flight): the users' drain after it is not a failure to hold load
    if mean_busy is not None and mean_busy + thinking < LOAD_HELD_FRACTION * want:
        closing = by_phase.get("closing") or 0.0
        budget = " while the request budget lasted" if profile.run.requests is not None else ""
        thought = f" and {thinking:.1f} thinking between session turns" if thinking >= 0.05 else ""
        warnings.append(f"load not held: {mean_busy:.1f} of {want} users busy with the target{thought} on "
                        f"average{budget} ({mean_in_flight or 0.0:.1f} in flight, "
                        f"{by_phase['connecting'] or 0.0:.1f} connecting); "
                        f"{by_phase['waiting'] or 0.0:.1f} waiting to start"
                        + (f" and {closing:.1f} closing a finished stream" if closing >= 0.05 else "")
                        + " on the client side")
        load["held"] = False
    else:  # null: a run that measured nothing (stopped before its steady window: a target down
        # at the start, a signal during start-up, a request budget taken during the ramp-up)
        load["held"] = True if mean_busy is not None else None
    return warnings


def _open_loop_held(profile: Profile, stats: RunStatsLike, total: Snapshot, load: dict[str, Any]) -> list[str]:
    """An open loop's (rate or trace) requested vs achieved figures and load held
    (``load.requested_rate_rps`` ... ``load.held``; see :func:`analyse`).

    Returns:
        the "load not held" warnings (arrivals dropped, too few sent), possibly none.
    """
    warnings: list[str] = []
    sched = total.histogram(ALL, "schedule_lag")
    # the load's window: to the stop, or to the end of a schedule that ran out by
    # itself (a request budget, a trace without loop: one mean gap after its last
    # arrival, whether its streams drained before that or after it), and never past
    # the deadline (run.duration_s: the stop is read late on a busy loop, 1.03-1.23 s
    # into a 1 s run) (docs/results/in-flight.md, "Load held")
    end_ns = stats.schedule_end_ns or stats.stop_ns
    if profile.run.duration_ns is not None:
        end_ns = min(end_ns, profile.run.duration_ns)
    window_s = max(end_ns - profile.run.warmup_ns, 1) / NS_PER_S
    # One rule for due, sent and the arrivals: the requests *due* in [measured
    # start, stop) (hopbench.engine._schedule.WindowCount). Sent: written to the target,
    # not just started (a stream still waiting for the client's loop or a
    # connection is not load), whenever the write happened: an arrival due just
    # before the stop and written just after it is due and sent. An open loop of
    # sessions has sessions arriving, not requests: their later turns (sent after
    # think times, not on the schedule) are neither arrivals nor what the schedule
    # asked; they are counted apart (docs/results/in-flight.md, "Load held")
    arrivals, later_sent = stats.arrivals_in_window, stats.later_sent_in_window
    sent, due = stats.sent_in_window, stats.due
    achieved: float | None = sent / window_s
    arrival_rps: float | None = arrivals / window_s
    load_window_s: float | None = round(window_s, 6)
    want_rps: float | None = profile.load.rate_rps
    if profile.load.mode == "trace":  # docs/workloads.md, "Trace replay": what the trace asked
        want_rps, load["trace"] = trace_load(profile.load.trace, profile.run.warmup_ns, end_ns,
                                             profile.load.trace_part)
        if want_rps is None:  # one instant: no rate, neither asked nor achieved, and no window
            # (its end would be one made-up mean gap after the instant: docs/results.md)
            achieved = arrival_rps = load_window_s = None
            n_due = len(profile.load.trace.entries)
            load["requested_rate_note"] = (
                f"the trace's {n_due} {plural(n_due, 'request')} {plural(n_due, 'is', 'are')} due at one instant "
                "(one timestamp, not looped): no rate and no load window; judged on the requests due")
    load.update(requested_rate_rps=_round3(want_rps), achieved_rate_rps=_round3(achieved),
                arrival_rate_rps=_round3(arrival_rps), load_window_s=load_window_s,
                due=due, sent=sent, later_turns_sent=later_sent, max_in_flight=profile.load.max_in_flight,
                max_in_flight_hits=total.counter(ALL, "max_in_flight_hits"),
                dispatcher_threads=total.counter(ALL, "dispatcher_threads"),
                dispatched=total.counter(ALL, "dispatched"),
                spare_connections=total.counter(ALL, "spare_connections"),
                schedule_lag_p99_ms=(sched.percentile(99.0) if sched.count else 0) / NS_PER_MS)
    # null: nothing due in the window (stopped in warm-up or start-up) is not judged. A
    # run.requests budget is: its window ends one gap after its last arrival, so the
    # budget's end is not a failure to hold load, but arrivals taken up late are
    # (400 requests at 800/s read "240 of 400 sent", held null, where the same
    # schedule as a trace was not held)
    held: bool | None = True if due > 0 else None
    if total.counter(ALL, "max_in_flight_hits"):
        held = False
        warnings.append(f"load not held: {total.counter(ALL, 'max_in_flight_hits')} arrivals "
                        f"dropped at max_in_flight = {profile.load.max_in_flight}")
    if sent < LOAD_HELD_FRACTION * due:
        held = False
        rates = ("" if achieved is None or want_rps is None else
                 f" ({achieved:.1f} requests/s, {want_rps:g} requested"
                 + (" by the trace)" if profile.load.mode == "trace" else ")"))
        warnings.append(f"load not held: {sent:,} of the {due:,} arrivals due in the load's window "
                        f"were sent to the target{rates}{_unsent_by_target(total, due - sent)}")
    load["held"] = held
    return warnings


def _unsent_by_target(total: Snapshot, unsent: int) -> str:
    """Whose the arrivals not sent were, for the "load not held" warning: those whose
    connection the target refused or failed (``connect_error.*`` but ``fd_limit``, which is
    hopbench's own) are the target's, the rest the client's (not taken up in time).

    Returns:
        ``"; N of the M not sent: the target refused or failed their connections (...)"``
        (with ``"; the other K the client did not send in time"`` when some remain), or
        ``""`` when no connection failed on the target's side.
    """
    counters = total.scopes[ALL].counters if ALL in total.scopes else {}
    refused = counters.get("connect_error", 0) - counters.get("connect_error.fd_limit", 0)
    if refused <= 0 or unsent <= 0:
        return ""
    mine = min(refused, unsent)
    kinds = ", ".join(f"{k} {n:,}" for k, n in sorted(counters.items())
                      if k.startswith("connect_error.") and k != "connect_error.fd_limit" and n)
    rest = unsent - mine
    return (f"; {mine:,} of the {unsent:,} not sent: the target refused or failed their connections"
            + (f" ({kinds})" if kinds else "")
            + (f"; the other {rest:,} the client did not send in time" if rest else ""))


def _round3(x: float | None) -> float | None:
    return None if x is None else round(x, 3)


def headline(total: Snapshot | RunCounters, measured_s: float) -> Headline:
    """The headline figures of a measured run.

    Args:
        total: the measured run's snapshot, or its :class:`RunCounters`.
        measured_s: the measured window in seconds (``load.measured_s``; <= 0 counts as 1 s).
    """
    c = total if isinstance(total, RunCounters) else RunCounters(
        counts=dict(total.scopes[ALL].counters) if ALL in total.scopes else {})
    started = c.started
    window = measured_s if measured_s > 0 else 1.0
    return Headline(started=started, completed=c.completed, errors=c.errors, cancelled=c.cancelled,
                    client_cancelled=c.count("client_cancelled"),
                    error_rate=round(c.errors / started, 4) if started else None,
                    interrupted_rate=round(c.cancelled / started, 4) if started else None,
                    completed_per_s=round(c.completed / window, 3),
                    output_tokens_per_s=round(c.output_tokens / window, 3) if c.tokens_source.counted else None,
                    tokens_source=c.tokens_source)


def gc_figures(stats: Any) -> dict[str, Any]:
    """The garbage collector's share of the run (hopbench.engine._collector): collections,
    their total, longest and p99 pause in ms (several workers: the worst worker's p99).

    Args:
        stats: a ``RunStats`` or :class:`RunCounters` (``gc_*`` fields, ns).
    """
    return {"gc_collections": stats.gc_collections,
            "gc_pause_total_ms": round(stats.gc_pause_ns / NS_PER_MS, 3),
            "gc_pause_max_ms": round(stats.gc_pause_max_ns / NS_PER_MS, 3),
            "gc_pause_p99_ms": round(stats.gc_pause_p99_ns / NS_PER_MS, 3)}


def host_figures(stats: Any) -> dict[str, Any]:
    """The process's and the machine's CPU use over the run (hopbench.engine._saturation):
    ``process_cpu_cores`` (every thread, cores on average), ``client_cpu_cores``
    (the run's whole load generator on this machine: the process and, with
    ``--workers``, its sibling workers and the driver), ``emulator_cpu_cores``
    (hopbench's own emulator processes on this machine, cores on average; None
    without one or when unreadable) and ``emulator_cpu_note`` (why it is None
    although the run had an emulator, else None), ``neighbours_cpu_cores`` (the
    rest of the machine; None without /proc/stat), ``cpus``,
    ``machine_busy_share`` and ``steal_share`` (shares of all CPUs' time; None
    without /proc/stat); {} when not measured.

    Args:
        stats: a ``RunStats`` or :class:`RunCounters` (``host``).
    """
    return host_usage_figures(HostUsage.from_json(stats.host))


def _r4(x: float | None) -> float | None:
    return None if x is None else round(x, 4)


def host_usage_figures(host: HostUsage | None) -> dict[str, Any]:
    """:func:`host_figures` of one ``HostUsage`` ({} for None)."""
    if host is None:
        return {}
    return {"process_cpu_cores": round(host.process_cores, 4), "client_cpu_cores": round(host.client_cores, 4),
            "emulator_cpu_cores": _r4(host.emulator_cores), "emulator_cpu_note": host.emulator_note,
            "neighbours_cpu_cores": _r4(host.others_cores), "cpus": host.cpus,
            "machine_busy_share": _r4(host.machine_busy_share), "steal_share": _r4(host.steal_share)}


def merge_saturation(verdicts: Sequence[tuple[int, Mapping[str, Any] | None]]) -> dict[str, Any]:
    """The workers' saturation verdicts as one (summary.json ``generator.saturation``
    with ``--workers``): saturated when any worker was; each symptom prefixed
    ``worker K: ``; one cause per kind with the first naming worker's figure
    (prefixed) and ``workers``: every worker that named it.

    One primary cause, as for one process (hopbench.engine._saturation): the kind that
    most workers named as their primary (on a tie, the first named), with the
    figure and advice of the first worker that named it primary; every other kind is
    ``secondary``, without advice, in the order first named. A cause without
    ``role`` (a summary from an older hopbench) counts as primary when it is
    its worker's first.

    Args:
        verdicts: (worker index, ``Verdict.to_json()`` or None) per worker.

    Returns:
        {"saturated", "symptoms", "causes": [{"kind", "figure", "advice", "role",
        "workers"}]}, the primary cause first. Never raises.
    """
    saturated = False
    symptoms: list[str] = []
    causes: dict[str, dict[str, Any]] = {}
    primaries: dict[str, list[Any]] = {}  # kind -> [workers naming it primary, the first's advice, figure]
    for i, v in verdicts:
        if not isinstance(v, Mapping):
            continue
        saturated |= bool(v.get("saturated"))
        symptoms += [f"worker {i}: {x}" for x in v.get("symptoms") or ()]
        for n, c in enumerate(v.get("causes") or ()):
            if not isinstance(c, Mapping):
                continue
            kind = str(c.get("kind"))
            if c.get("role", "primary" if n == 0 else "secondary") == "primary":
                votes = primaries.setdefault(kind, [0, c.get("advice"), f"worker {i}: {c.get('figure')}"])
                votes[0] += 1
            if kind in causes:
                causes[kind]["workers"].append(i)
            else:
                causes[kind] = {"kind": kind, "figure": f"worker {i}: {c.get('figure')}", "advice": None,
                                "role": "secondary", "workers": [i]}
    top = max(primaries, key=lambda k: primaries[k][0], default=None)  # max: the first of a tie
    ordered = list(causes.values())
    if top is not None:
        causes[top].update(advice=primaries[top][1], figure=primaries[top][2], role="primary")
        ordered.sort(key=lambda c: c["kind"] != top)  # stable: the rest keep the order first named
    return {"saturated": saturated, "symptoms": symptoms, "causes": ordered}


def slo_block(profile: Profile, total: Snapshot, measured_s: float) -> dict[str, Any] | None:
    """summary.json's ``slo`` block for ``profile``'s scenarios (hopbench.measure._slo.slo_summary)."""
    return slo_summary({sc.name: sc.slo for sc in profile.scenarios}, total, measured_s)


def judge(profile: Profile, parts: Sequence[Part], total: Snapshot, warmup: Snapshot | None,
          meta: Mapping[str, Any], end: RunEnd) -> Summary:
    """Judge a run and build its summary record (pure: no clock, no files; only the
    file-descriptor warning asks the process for its ``RLIMIT_NOFILE``).

    Args:
        profile: the whole profile.
        parts: one per load generator: one without ``worker`` for a
            single-process run, one per worker (in index order) otherwise.
        total: the merged measured snapshot; warmup: the merged warm-up
            snapshot (None: the profile has no warm-up).
        meta: the pre-run metadata (``started_at_unix_s``, ``interrupted_by``,
            ``crash``, ``notes`` are read; every key goes to the document).
        end: the facts of the end.

    Returns:
        Summary. Warnings, in order: the partial-run reason (first), worker
        saturation and deaths, notes, the run's own (``analyse``), the
        embedded emulator's, "no stream was measured".

    Raises:
        ValueError: ``parts`` is empty.
    """
    if not parts:
        raise ValueError("judge: expected at least one part")
    with_workers = any(p.worker is not None for p in parts)
    # the stream counts are the merged snapshot's: it also holds what the driver
    # joined after the load (client cancels against the emulator's record)
    merged = dataclasses.replace(reduce(RunCounters.merge, (p.counters for p in parts)),
                                 counts=dict(total.scopes[ALL].counters) if ALL in total.scopes else {})
    details: list[WorkerDetail] = []
    first: list[str] = []
    any_saturated = False
    for part in parts:
        if part.worker is None:
            continue
        sat, warns, load_i = analyse(part.profile, part.counters, part.total)
        any_saturated |= sat
        w = part.worker
        first += [f"worker {w.index}: {x}" for x in warns if x.startswith(_SATURATED)]
        if w.state == "crashed":
            # "the others finished" only when some did (a Ctrl-C reaches every worker at once)
            rest = sum(1 for q in parts if q.worker is not None and q is not part and q.worker.state != "crashed")
            first.append(f"worker {w.index} died: {w.error.splitlines()[-1] if w.error else '?'}"
                         + ("; the others finished, its data up to then is included" if rest
                            else "; so did every other worker: the data up to then is included"))
        details.append(WorkerDetail(
            info=w, started=part.counters.started, completed=part.counters.completed, saturated=sat,
            cpu_mean=load_i["cpu_mean"], cpu_max=load_i["cpu_max"],
            loop_lag_p99_ms=load_i["loop_lag_p99_ms"],
            schedule_lag_p99_ms=load_i.get("schedule_lag_p99_ms"),
            peak_in_flight=load_i["peak_in_flight"], gc=gc_figures(part.counters),
            saturation=load_i.get("saturation"),
            ended_ms=part.counters.ended_ns / NS_PER_MS, interrupted_by=part.counters.interrupted_by,
            host_cpu=host_figures(part.counters)))
    # the merged counters hold no machine figures (each worker's counts only its own host's
    # share); the driver's sample of the machine over the load window stands for them, so the
    # late client's cure is the busy machine's, not "more workers", when no core was free
    machine = (dataclasses.replace(merged, host=dict(end.host)) if with_workers and merged.host is None
               and end.host is not None else merged)
    sat, own, load = analyse(profile, machine, total)
    saturation = load.pop("saturation", None)  # the verdict goes to generator (one process)
    if with_workers:
        # a merged CPU or lag figure means nothing: saturation is each worker's
        own = [x for x in own if not x.startswith(_SATURATED)]
        sat = any_saturated
        cpus = [d.cpu_mean for d in details]
        load.update(cpu_mean=round(sum(cpus) / len(cpus), 4) if cpus else 0.0,
                    cpu_max=max((d.cpu_max for d in details), default=0.0),
                    loop_lag_p99_ms=max((d.loop_lag_p99_ms for d in details), default=0.0),
                    peak_in_flight_note="sum of the workers' peaks (an upper bound)",
                    peak_open_note="sum of the workers' peaks (an upper bound)")
    notes = tuple(meta.get("notes", ())) + end.notes
    # one cause, one cure: a cure an earlier warning gave is not repeated (hopbench._advice)
    warnings = one_cure_each(first + list(notes) + own + list(end.emulator_warnings))
    interrupted_by = end.interrupted_by or meta.get("interrupted_by") or merged.interrupted_by
    crashed = end.crashed is not None
    if merged.started == 0 and interrupted_by is None and not crashed:
        started_warm = warmup.counter(ALL, "started") if warmup is not None else 0
        warnings.append(f"no stream was measured: {started_warm} started during the warm-up and none "
                        "after it (lengthen run.duration_s or shorten run.warmup_s)")
    dead = any(d.info.state == "crashed" for d in details)
    complete = not crashed and interrupted_by is None and not dead
    if not complete:
        reason = interrupted_by or ("a worker died" if dead else "")
        warnings.insert(0, f"hopbench crashed mid-run: {meta.get('crash')}" if crashed
                        else reason if reason.startswith((STOP_TARGET_UNREACHABLE, STOP_TARGET_LOST, STOP_TARGET_FAILING))
                        else f"run interrupted ({reason or 'stopped'}): results are partial (complete: false)")
    started_s = meta.get("started_at_unix_s")
    started_s = started_s if isinstance(started_s, (int, float)) else end.ended_at_unix_s
    verdict = Verdict(complete=complete, saturated=sat, load_held=load.get("held"),
                      interrupted_by=interrupted_by, warnings=tuple(dict.fromkeys(warnings)))
    if with_workers:  # the driver's one sample of its machine; the workers' verdicts merged
        host = host_usage_figures(HostUsage.from_json(dict(end.host) if end.host is not None else None))
        saturation = merge_saturation([(d.info.index, d.saturation) for d in details])
    else:
        host = host_figures(merged)
    generator = Generator(cpu_mean=load["cpu_mean"], cpu_max=load["cpu_max"],
                          loop_lag_p99_ms=load["loop_lag_p99_ms"], intervals=end.intervals,
                          gc=gc_figures(merged), host=host, saturation=saturation)
    return Summary(meta=meta, verdict=verdict, ended_at=iso_ms(end.ended_at_unix_s),
                   duration_s=round(end.ended_at_unix_s - started_s, 3), load=load,
                   headline=headline(merged, load["measured_s"]),
                   slo=slo_block(profile, total, load["measured_s"]),
                   error_samples=dict(sorted(merged.error_samples.items())), generator=generator,
                   counters=merged, total=total, warmup=warmup,
                   workers=tuple(details) if with_workers else None,
                   engine=end.engine if with_workers else None)
