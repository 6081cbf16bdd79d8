"""The one finish path: judge a run and build its summary.json record.

Role: every engine (one process in ``hopbench.driver._single``, worker processes in
``hopbench.driver._workers``, Ray tasks in ``hopbench.driver._ray`` through the workers'
``Merger``) ends the same way:

1. each load generator's run-level figures become a :class:`RunCounters`
   (frozen; :meth:`RunCounters.merge` adds two of them exactly);
2. :func:`judge` (pure: no clock, no I/O) takes the profile, one
   :class:`Part` per load generator, the merged snapshots and the facts of
   the end (:class:`RunEnd`), and returns one :class:`Summary` record: the
   verdict (complete, saturated, load held, warnings), the load figures, the
   headline, the generator's figures and, with workers, one
   :class:`WorkerDetail` per worker;
3. :meth:`Summary.to_json` is the one serialiser of the final summary.json
   (``hopbench.driver._results.ResultsWriter.write_final`` writes it atomically).

Invariants:

* One process and W workers are judged by the same rules: a single-process
  run is one :class:`Part` without worker facts; with workers, saturation is
  judged per worker (a merged CPU figure means nothing; each worker's sibling
  workers and the driver count as the run's own CPU, not as neighbours), the
  verdicts merged into ``generator.saturation``, the machine's figures taken
  once by the driver (``RunEnd.host``), and everything else on the merged
  counters.
* The document's keys and their order are those of the pre-run metadata
  (``hopbench.driver._single.base_meta``), then the judged fields; docs/results.md
  defines every figure.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import reduce
from typing import Any

from .._units import NS_PER_MS, NS_PER_S
from ..measure._burst import burst_warnings
from ..measure._inflight import BUSY_PHASES, PHASES
from ..measure._outcomes import BROKEN, ERROR_RATE_WARN
from ..config._records import Profile
from ..measure._recorder import ALL, Snapshot
from ._results import SCHEMA, summary_scopes
from ..engine._saturation import SATURATION_CPU, SATURATION_LAG_NS, GeneratorFigures, HostUsage
from ..engine._saturation import judge as judge_saturation
from ..measure._slo import slo_summary
from ..measure._counters import RunCounters, RunStatsLike, StatsLike

__all__ = [
    "LOAD_HELD_FRACTION",
    "arm_failed",
    "failed_arms",
    "SATURATION_CPU",
    "SATURATION_LAG_NS",
    "Generator",
    "Headline",
    "Part",
    "RunCounters",
    "RunStatsLike",
    "StatsLike",
    "RunEnd",
    "Summary",
    "Verdict",
    "WorkerDetail",
    "WorkerInfo",
    "analyse",
    "gc_figures",
    "headline",
    "host_figures",
    "host_usage_figures",
    "merge_saturation",
    "judge",
    "outcome_warnings",
    "length_warnings",
    "INPUT_RATIO_WARN",
    "NO_OUTPUT_WARNING",
    "slo_block",
]

LOAD_HELD_FRACTION = 0.9
_SATURATED = "load generator saturated"
#: top-level keys that the judge sets (the rest of the document is the pre-run metadata)
_JUDGED = ("ended_at", "duration_s", "saturated", "warnings", "interrupted_by", "load", "headline",
           "error_samples")


# -- the rules -------------------------------------------------------------------

def trace_load(spec: Any, warmup_ns: int, stop_ns: int, part: tuple[int, int] = (0, 1),
               ) -> tuple[float | None, dict[str, Any]]:
    """What a trace replay asked for in the measured window (docs/results.md, "load").

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
        holds requested vs achieved figures (docs/results.md, "load").

    In flight (hopbench.measure._inflight; docs/results.md, "In flight"):
    ``mean_in_flight`` and ``peak_in_flight`` count what a gateway sees (the
    request sent, not finished); ``in_flight_by_phase`` the steady window's
    mean per phase, ``mean_busy`` (connecting + in flight) and ``mean_open``
    (every phase, client-side waiting too). Load held: a closed loop of N
    users holds its load when on average at least 90 % of N users are busy
    with the target (connecting to it counts: a k6 VU or a wrk connection
    that is connecting is still offering load; waiting on the client side,
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
    warnings: list[str] = []
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
    saturated = verdict.saturated
    if verdict.saturated:
        warnings.append(str(verdict.warning()))
    measured_ns = max(stats.stop_ns - profile.run.warmup_ns, 1)
    load: dict[str, Any] = {"mode": profile.load.mode, "peak_in_flight": stats.peak_in_flight,
                            "peak_open": stats.peak_open,
                            "measured_s": round(measured_ns / NS_PER_S, 6),
                            "cpu_mean": round(cpu_mean, 4), "cpu_max": round(max(cpu, default=0), 4),
                            "loop_lag_p99_ms": (lag.percentile(99.0) if lag.count else 0) / NS_PER_MS,
                            "saturation": verdict.to_json()}  # moved to generator by judge
    steady_ns = stats.stop_ns - min(stats.steady_from_ns, stats.stop_ns)
    mean_in_flight = stats.steady_area / steady_ns if steady_ns > 0 else None
    load["mean_in_flight"] = None if mean_in_flight is None else round(mean_in_flight, 3)
    by_phase = {name: (stats.steady_phase_area.get(name, 0) / steady_ns if steady_ns > 0 else None)
                for name in PHASES}
    load["in_flight_by_phase"] = {k: None if v is None else round(v, 3) for k, v in by_phase.items()}
    mean_busy = None if steady_ns <= 0 else sum(by_phase[PHASES[p]] or 0.0 for p in BUSY_PHASES)
    load["mean_busy"] = None if mean_busy is None else round(mean_busy, 3)
    load["mean_open"] = None if steady_ns <= 0 else round(sum(v or 0.0 for v in by_phase.values()), 3)
    if profile.load.mode == "concurrency":
        load["requested_concurrency"] = profile.load.concurrency
        want = profile.load.concurrency
        # a request budget that ends the run early is not a failure to hold load
        if (mean_busy is not None and profile.run.requests is None
                and mean_busy < LOAD_HELD_FRACTION * want):
            warnings.append(f"load not held: {mean_busy:.1f} of {want} users busy with the target on "
                            f"average ({mean_in_flight or 0.0:.1f} in flight, "
                            f"{by_phase['connecting'] or 0.0:.1f} connecting); "
                            f"{by_phase['waiting'] or 0.0:.1f} waiting to start on the client side")
            load["held"] = False
        else:  # null: a run.requests budget is not judged (its end is not a failure to hold load),
            # nor a run that measured nothing (stopped before its steady window: a target down
            # at the start, a signal during start-up)
            load["held"] = True if profile.run.requests is None and mean_busy is not None else None
    else:
        # the load's window: to the stop, or to the end of a schedule that ran out by
        # itself (a request budget, a trace without loop: one mean gap after its last
        # arrival, whether its streams drained before that or after it), and never past
        # the deadline (run.duration_s: the stop is read late on a busy loop, 1.03-1.23 s
        # into a 1 s run) (docs/results.md, "Load held")
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
        # asked; they are counted apart (docs/results.md, "Load held")
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
                load["requested_rate_note"] = (
                    f"the trace's {len(profile.load.trace.entries)} request(s) are due at one instant "
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
                            f"were sent to the target{rates}")
        load["held"] = held
    completed = total.counter(ALL, "completed")

    def silent(scope: str, done: int) -> bool:  # completed streams, none carried output
        return bool(done) and not total.histogram(scope, "ttft").count \
            and not total.counter(scope, "tokens.output.completed")

    run_silent = silent(ALL, completed)
    if run_silent:
        # every stream ended with its terminal event and none carried output: no
        # latency of the answer was measured (docs/results.md, "Warnings")
        warnings.append(f"{NO_OUTPUT_WARNING} none of the {completed} completed streams carried output "
                        "(no text, reasoning, refusal or tool event, no output tokens reported): "
                        "TTFT, ITL and TPOT have no samples; see streams.jsonl for what the target sent")
    # re-judged against the origin's record where one exists (hopbench.measure._burst); the embedded
    # emulator (or every A/B arm's own) has no proxy in front of it: no warning names one
    warnings += burst_warnings(total.scopes[ALL].counters if ALL in total.scopes else {},
                               embedded=profile.target.embedded and all(a.url is None for a in profile.arms))
    lagged = total.counter(ALL, "client_lagged")
    if completed and lagged > completed / 2:
        warnings.append(f"client_lagged: {lagged} of {completed} streams arrived as one burst because "
                        "hopbench's own event loop was late to read them (not evidence of a proxy; "
                        "see loop_lag)")
    withdrawn = total.counter(ALL, "idle_timeouts_withdrawn")
    if withdrawn:
        warnings.append(f"idle_timeouts_withdrawn: {withdrawn} idle timeouts were taken back: the "
                        "client read so late that the idle limit passed while the server's bytes "
                        "waited in the socket (latencies include client-side delay; see loop_lag)")
    counters = total.scopes[ALL].counters if ALL in total.scopes else {}
    for key, n in sorted(counters.items()):
        if key.startswith("out_of_range.") and n:
            warnings.append(f"{n} {key[13:]} values outside the histogram's range (counted, not recorded)")
    warnings += outcome_warnings(counters, stats)
    # an A/B arm, or one of several scenarios, that failed outright (a wrong path, a model the
    # gateway does not route) is never hidden by the others' successes in the run's error rate
    parts = ([("arm", a.name, "its differences are not measured") for a in profile.arms] if profile.arms
             else [("scenario", sc.name, "its figures are not measured") for sc in profile.scenarios]
             if len(profile.scenarios) > 1 else [])
    for kind, name, what in parts:
        c = total.scopes[name].counters if name in total.scopes else {}
        started = arm_failed(c) if kind == "arm" else scenario_failed(c)
        if started:
            warnings.append(f"{kind} {name}: nothing completed: none of its {started} streams completed "
                            f"({_top_details(c, BROKEN + ('cancelled',))}); {what}")
        elif kind == "scenario" and not run_silent and silent(name, c.get("completed", 0)):
            # its completed streams carried nothing (the run's own "no output" warning says it for all)
            warnings.append(f"scenario {name}: {NO_OUTPUT_WARNING} none of its {c['completed']} completed streams "
                            "carried output (no text, reasoning, refusal or tool event, no output tokens reported): "
                            "its TTFT, ITL and TPOT have no samples")
    warnings += length_warnings({name: s.counters for name, s in total.scopes.items()})
    return saturated, warnings, load


def _round3(x: float | None) -> float | None:
    return None if x is None else round(x, 3)


#: a scope whose target reported less than this share of the prompt tokens sent warns
INPUT_RATIO_WARN = 0.5


#: the most scopes a run's "max_tokens not honoured" warning names one by one (then "+N more")
OVER_MAX_SCOPES_NAMED = 8


def length_warnings(scopes: Mapping[str, Mapping[str, int]]) -> list[str]:
    """Warnings about the lengths the target reported against those requested
    (docs/workloads.md, "What the results show"; docs/results.md, "Warnings").

    Args:
        scopes: scope name -> counters (each scenario or arm, and ``ALL``).

    Returns:
        list of str, possibly empty, over the scopes with workload keys (``ALL``
        only when no other scope counted lengths): first one warning for the
        whole run when some completed streams reported more output tokens than
        their ``max_tokens`` (the target ignores the cap: the output ratio then
        mixes streams cut short with streams run past the cap), naming each
        scope concerned with its own count and ratio (at most
        ``OVER_MAX_SCOPES_NAMED``; a target that ignores the cap does so for
        every scope: one warning, not one per scope); then one per scope whose
        reported prompt tokens are below ``INPUT_RATIO_WARN`` of those sent. A
        chat template only adds tokens and the word-based count is exact for BPE
        vocabularies, so less than half means the prompt was cut (a gateway or
        server truncating the context) or the usage is not a count of it; TTFT
        and tokens/s then do not describe the prompts the profile asked for.
    """
    named = [(n, c) for n, c in scopes.items()
             if n != ALL and (c.get("length.output.streams") or c.get("length.input.streams"))]
    if not named and ALL in scopes:
        named = [(ALL, scopes[ALL])]
    out: list[str] = []
    over_by: list[tuple[str, int, int, float]] = []  # (scope, over, streams, output ratio)
    for name, c in named:
        over, n_out = c.get("length.output.over_max", 0), c.get("length.output.streams", 0)
        if over and n_out:
            req, got = c.get("length.output.requested", 0), c.get("length.output.reported", 0)
            over_by.append((name, over, n_out, got / req if req else 0.0))
    if len(over_by) == 1:
        name, over, n_out, ratio = over_by[0]
        who = "" if name == ALL else f"scope {name}: "
        out.append(f"{who}max_tokens not honoured: {over} of {n_out} completed streams reported more "
                   "output tokens than the max_tokens they were sent; the target ignores max_tokens "
                   f"(the output ratio ×{ratio:.3f} mixes streams cut short with "
                   "streams run past the cap)")
    elif over_by:
        over_all = sum(o for _, o, _, _ in over_by)
        n_all = sum(c.get("length.output.streams", 0) for _, c in named)
        each = "; ".join(f"{name}: {over} of {n_out}, ×{ratio:.3f}"
                         for name, over, n_out, ratio in over_by[:OVER_MAX_SCOPES_NAMED])
        more = (f"; +{len(over_by) - OVER_MAX_SCOPES_NAMED} more"
                if len(over_by) > OVER_MAX_SCOPES_NAMED else "")
        out.append(f"max_tokens not honoured in {len(over_by)} scopes ({each}{more}): {over_all} of {n_all} "
                   "completed streams reported more output tokens than the max_tokens they were sent; the "
                   "target ignores max_tokens (each scope's output ratio mixes streams cut short with "
                   "streams run past the cap; lengths.output.over_max per scope)")
    for name, c in named:
        who = "" if name == ALL else f"scope {name}: "
        n_in, req_in = c.get("length.input.streams", 0), c.get("length.input.requested", 0)
        got_in = c.get("length.input.reported", 0)
        if n_in and req_in and got_in < INPUT_RATIO_WARN * req_in:
            out.append(f"{who}the target reported ×{got_in / req_in:.3f} of the prompt tokens sent "
                       f"(mean {got_in / n_in:,.1f} of {req_in / n_in:,.1f} over {n_in} streams): it cuts the "
                       "prompts (context truncation) or its usage does not count them; TTFT and tokens/s "
                       "do not describe the prompts requested")
    return out


#: the start of the warning for a run whose completed streams carried no output
NO_OUTPUT_WARNING = "no output:"


def arm_failed(counters: Mapping[str, int]) -> int:
    """The streams an A/B arm started (less its client cancels) when none of
    them completed, else 0 (docs/ab-arms.md: such a run exits 4)."""
    started = counters.get("started", 0) - counters.get("client_cancelled", 0)
    return started if started > 0 and not counters.get("completed", 0) else 0


def scenario_failed(counters: Mapping[str, int]) -> int:
    """``arm_failed`` for one of several scenarios, less the streams cancelled at
    the run's stop too: a scenario of streams longer than the run completes none,
    and that is the run's length (the cancelled-at-the-stop warning), not the target
    failing. The streams that ended by themselves when none completed, else 0."""
    ended = arm_failed(counters) - counters.get("cancelled", 0)
    return ended if ended > 0 else 0


def failed_scenarios(summary: Mapping[str, Any], names: Sequence[str]) -> list[str]:
    """Of the scenarios ``names`` (the profile's, in order), those whose scope in
    a summary.json had streams end by themselves and completed none
    (``scenario_failed``: docs/results.md, "Warnings"; such a run exits 4). Empty
    with A/B arms (their own rule) or a single scenario (the whole run's "nothing
    completed")."""
    if summary.get("arms") or len(names) < 2:
        return []
    scopes = summary.get("scopes") or {}
    return [n for n in names if scenario_failed((scopes.get(n) or {}).get("counters") or {})]


def failed_arms(summary: Mapping[str, Any]) -> list[str]:
    """The names of the arms of a summary.json that completed nothing (``arm_failed``)."""
    scopes = summary.get("scopes") or {}
    return [a["name"] for a in summary.get("arms") or () if isinstance(a, Mapping)
            and arm_failed((scopes.get(a.get("name")) or {}).get("counters") or {})]


def _top_details(counters: Mapping[str, int], outcomes: tuple[str, ...], n: int = 4) -> str:
    """"http_error.501 50, connect_error.refused 3": the commonest outcome details."""
    details = [(k, v) for k, v in counters.items() if v and k.partition(".")[0] in outcomes
               and "." in k and not k.startswith("http_error_code.")]
    if not details:
        details = [(k, counters.get(k, 0)) for k in outcomes if counters.get(k)]
    details.sort(key=lambda kv: (-kv[1], kv[0]))
    more = f", +{len(details) - n} more" if len(details) > n else ""
    return ", ".join(f"{k} {v}" for k, v in details[:n]) + more


def outcome_warnings(counters: Mapping[str, int], stats: StatsLike) -> list[str]:
    """Warnings about how the streams ended (docs/results.md, "Warnings").

    Args:
        counters: the "all" scope's counters of the measured run.
        stats: the runner's figures (``codes_folded``).

    Returns:
        list of str, possibly empty: always one when streams started and none
        completed; one when the error rate or the share cancelled at the stop is above
        ``ERROR_RATE_WARN``; one for file-descriptor exhaustion
        (``connect_error.fd_limit``); one for wire error codes folded into
        "other".
    """
    out: list[str] = []
    # streams the scenario's cancel key closed on purpose say nothing either way
    started = counters.get("started", 0) - counters.get("client_cancelled", 0)
    completed = counters.get("completed", 0)
    errors = sum(counters.get(k, 0) for k in BROKEN)
    cancelled = counters.get("cancelled", 0)
    wrong_type = counters.get("anomaly.wrong_content_type", 0)
    # a 2xx that is not an event stream (a web page, a wrong path): the likeliest cause, said first
    not_sse = (f"; {wrong_type} responses were not text/event-stream (anomaly.wrong_content_type)"
               if wrong_type else "")
    by = stats.cancelled_by
    why = ("still running after run.grace_s" if by is None or by == "run.grace_s" else
           f"cancelled at once by {by}, before run.grace_s ended")
    if started and not completed:
        # every one cancelled at the stop (a second SIGINT, a short grace): the stop ended
        # them, not the target; pointing at what the target said would blame it
        stopped = cancelled == started and not errors
        out.append(f"nothing completed: none of the {started} streams completed "
                   f"({_top_details(counters, BROKEN + ('cancelled',))}){not_sse}; "
                   + (f"the stop cancelled them ({why})" if stopped else
                      "see error_samples in summary.json for what the target said"))
    elif started and errors / started > ERROR_RATE_WARN:
        out.append(f"error rate {errors / started:.1%} (> {ERROR_RATE_WARN:.0%}): {errors} of {started} "
                   f"streams ended in error ({_top_details(counters, BROKEN)})")
    if started and completed and cancelled / started > ERROR_RATE_WARN:
        # (not "interruption rate": the gate's interruption_rate budget is another quantity)
        out.append(f"cancelled at the stop {cancelled / started:.1%} (> {ERROR_RATE_WARN:.0%}): {cancelled} of "
                   f"{started} streams ({why})")
    fd = counters.get("connect_error.fd_limit", 0)
    if fd:
        try:
            import resource

            soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
            limit = f"{soft} per process" if soft != resource.RLIM_INFINITY else "the system's"
        except (ImportError, OSError, ValueError):
            limit = "the process's"
        out.append(f"{fd} streams could not open a connection: hopbench ran out of file descriptors "
                   f"(limit: {limit}, `ulimit -n`); raise it (e.g. `ulimit -n 65536` before the run) "
                   "or lower the concurrency / --workers share per process")
    if stats.codes_folded:
        out.append(f"{stats.codes_folded} streams' error codes were counted as \"other\": the server sent "
                   "more distinct error codes than hopbench counts by name")
    return out


# -- the summary record --------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Headline:
    """The run in a few figures (summary.json ``headline``, docs/results.md).

    Attributes:
        started, completed, errors, cancelled: stream counts of the measured run.
        client_cancelled: streams closed on purpose by a scenario's cancel key (hopbench.workload._cancel).
        error_rate, interrupted_rate: in [0, 1], 4 decimals; None when nothing started.
        completed_per_s, output_tokens_per_s: over the measured window (``load.measured_s``).
    """

    started: int
    completed: int
    errors: int
    cancelled: int
    client_cancelled: int
    error_rate: float | None
    interrupted_rate: float | None
    completed_per_s: float
    output_tokens_per_s: float

    def to_json(self) -> dict[str, Any]:
        """The ``headline`` object, keys in the order above."""
        return {"started": self.started, "completed": self.completed, "errors": self.errors,
                "cancelled": self.cancelled, "client_cancelled": self.client_cancelled,
                "error_rate": self.error_rate,
                "interrupted_rate": self.interrupted_rate, "completed_per_s": self.completed_per_s,
                "output_tokens_per_s": self.output_tokens_per_s}


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
                    output_tokens_per_s=round(c.output_tokens / window, 3))


@dataclass(frozen=True, slots=True)
class Generator:
    """The load generator's own figures (summary.json ``generator``).

    Attributes:
        cpu_mean, cpu_max: share of one core (workers: mean of the workers' means, max of maxes).
        loop_lag_p99_ms: event-loop lag p99 (ms; workers: the worst worker's).
        intervals: intervals written to intervals.hlog / timeline.jsonl.
        gc: the collector's figures (:func:`gc_figures`).
        host: the process's and the machine's CPU use (:func:`host_figures`; with workers
            the driver's sample of its machine over the load window, every worker's CPU in
            ``client_cpu_cores``: ``_saturation.run_host``).
        saturation: the saturation verdict (``_saturation.Verdict.to_json``; with workers
            the workers' verdicts merged: :func:`merge_saturation`).
    """

    cpu_mean: float
    cpu_max: float
    loop_lag_p99_ms: float
    intervals: int
    gc: Mapping[str, Any]
    host: Mapping[str, Any]
    saturation: Mapping[str, Any] | None

    def to_json(self) -> dict[str, Any]:
        """The ``generator`` object, keys in the order above."""
        return {"cpu_mean": self.cpu_mean, "cpu_max": self.cpu_max, "loop_lag_p99_ms": self.loop_lag_p99_ms,
                "intervals": self.intervals, **self.gc, **self.host, "saturation": self.saturation}


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


@dataclass(frozen=True, slots=True)
class WorkerInfo:
    """What the driver knows of one worker beyond its counters.

    Attributes:
        index: 0..W-1.
        host, pid: where it ran (None when it never reported).
        state: "done" or "crashed".
        error: why it died (traceback or reason), else None.
        share: its share of the load as summary.json shows it
            (``concurrency`` or ``rate_rps``/``max_in_flight``/``arrival_offset_ms``, and ``requests``).
        skew_ns: how late it started after the common start (ns).
    """

    index: int
    host: str | None
    pid: int | None
    state: str
    error: str | None
    share: Mapping[str, Any]
    skew_ns: int = 0


@dataclass(frozen=True, slots=True)
class Part:
    """One load generator as the judge sees it.

    Attributes:
        profile: the profile as it ran it (a worker: its share, ``_workers.share_profile``).
        counters: its run-level record.
        total: its measured snapshot (a dead worker: the intervals it shipped).
        worker: the worker's facts; None for a single-process run.
    """

    profile: Profile
    counters: RunCounters
    total: Snapshot
    worker: WorkerInfo | None = None


@dataclass(frozen=True, slots=True)
class RunEnd:
    """The facts of the end that only the engine's shell knows (clock, files, signals).

    Attributes:
        ended_at_unix_s: wall-clock end (s since the epoch).
        crashed: hopbench's own failure (traceback or reason), else None.
        interrupted_by: the stop reason the shell saw (signal name, "target lost: ..."), else None.
        intervals: intervals written.
        notes: warnings from beside the load (unused ``[emulator]``, ``[[scrape]]`` failures).
        emulator_warnings: the embedded emulator's own lateness (``_run.emulator_warnings``).
        engine: "local" or "ray" with workers; None for one process.
        host: with workers, the run on the driver's machine over the load window
            (``_saturation.run_host(...).to_json()``); None when not measured or for
            one process (its own is in its counters).
    """

    ended_at_unix_s: float
    crashed: str | None = None
    interrupted_by: str | None = None
    intervals: int = 0
    notes: tuple[str, ...] = ()
    emulator_warnings: tuple[str, ...] = ()
    engine: str | None = None
    host: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class Verdict:
    """The run judged (what exit codes, the gate and compare read).

    Attributes:
        complete: reached its planned end: no crash, no interruption, no dead worker.
        saturated: the client (any worker) was the bottleneck (``analyse``).
        load_held: ``load.held`` (None: not judged: a closed loop's ``run.requests``
            budget, nothing due or measured).
        interrupted_by: the stop reason, else None.
        warnings: what went wrong, most important first, no repeats.
    """

    complete: bool
    saturated: bool
    load_held: bool | None
    interrupted_by: str | None
    warnings: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class WorkerDetail:
    """One worker in summary.json ``worker_detail`` (docs/results.md, "Workers")."""

    info: WorkerInfo
    started: int
    completed: int
    saturated: bool
    cpu_mean: float
    cpu_max: float
    loop_lag_p99_ms: float
    schedule_lag_p99_ms: float | None
    peak_in_flight: int
    gc: Mapping[str, Any]
    saturation: Mapping[str, Any] | None
    ended_ms: float
    interrupted_by: str | None
    host_cpu: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The object as summary.json shows it."""
        w = self.info
        return {"index": w.index, "host": w.host, "pid": w.pid, "state": w.state, "error": w.error,
                "share": dict(w.share), "started": self.started, "completed": self.completed,
                "saturated": self.saturated, "cpu_mean": self.cpu_mean, "cpu_max": self.cpu_max,
                "loop_lag_p99_ms": self.loop_lag_p99_ms, "schedule_lag_p99_ms": self.schedule_lag_p99_ms,
                "peak_in_flight": self.peak_in_flight, **self.gc, "saturation": self.saturation,
                "start_skew_ms": w.skew_ns / NS_PER_MS,
                "ended_ms": self.ended_ms, "interrupted_by": self.interrupted_by,
                "host_cpu": dict(self.host_cpu)}


@dataclass(frozen=True, slots=True)
class Summary:
    """One finished run: what summary.json holds.

    Attributes:
        meta: the facts known before the judging (``_run.base_meta`` and what the
            shell added: start, ground truth, scrape, crash); its keys lead the document.
        verdict: complete, saturated, load held, interrupted, warnings.
        ended_at: ISO 8601 UTC, ms; duration_s: wall-clock run time (s, 3 decimals).
        load: requested vs achieved figures (``analyse``; workers: merged, CPU from the workers).
        headline, generator: see their records.
        slo: the scenarios' SLO block (``hopbench.measure._slo.slo_summary``), None without SLOs.
        error_samples: error kind -> first messages, sorted by kind.
        counters: the merged run-level record.
        workers: one detail per worker; None for one process.
        engine: "local" / "ray" with workers, else None.
        total, warmup: the measured and warm-up snapshots (warmup None without a warm-up).
    """

    meta: Mapping[str, Any]
    verdict: Verdict
    ended_at: str
    duration_s: float
    load: Mapping[str, Any]
    headline: Headline
    slo: Mapping[str, Any] | None
    error_samples: Mapping[str, tuple[str, ...]]
    generator: Generator
    counters: RunCounters
    total: Snapshot
    warmup: Snapshot | None
    workers: tuple[WorkerDetail, ...] | None = None
    engine: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The summary.json document (docs/results.md): ``schema``, the metadata
        keys in their order, the judged fields, ``complete``, ``scopes``, ``warmup``."""
        doc: dict[str, Any] = {"schema": SCHEMA}
        doc.update((k, v) for k, v in self.meta.items() if k != "notes")
        v = self.verdict
        doc.update(ended_at=self.ended_at, duration_s=self.duration_s, saturated=v.saturated,
                   warnings=list(v.warnings), interrupted_by=v.interrupted_by, load=dict(self.load),
                   headline=self.headline.to_json(), slo=self.slo,
                   error_samples={k: list(x) for k, x in self.error_samples.items()})
        if self.workers is not None:
            doc.update(workers=len(self.workers), engine=self.engine,
                       hosts=sorted({d.info.host for d in self.workers if d.info.host}),
                       worker_detail=[d.to_json() for d in self.workers])
        doc["generator"] = self.generator.to_json()
        doc["schema"] = SCHEMA
        doc["complete"] = v.complete
        doc["scopes"] = summary_scopes(self.total)
        doc["warmup"] = None if self.warmup is None else summary_scopes(self.warmup)
        return doc


def slo_block(profile: Profile, total: Snapshot, measured_s: float) -> dict[str, Any] | None:
    """summary.json's ``slo`` block for ``profile``'s scenarios (hopbench.measure._slo.slo_summary)."""
    return slo_summary({sc.name: sc.slo for sc in profile.scenarios}, total, measured_s)


def _iso(t: float) -> str:
    import datetime as _dt

    return _dt.datetime.fromtimestamp(t, _dt.timezone.utc).isoformat(timespec="milliseconds")


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
            first.append(f"worker {w.index} died: {w.error.splitlines()[-1] if w.error else '?'}"
                         "; the others finished, its data up to then is included")
        details.append(WorkerDetail(
            info=w, started=part.counters.started, completed=part.counters.completed, saturated=sat,
            cpu_mean=load_i["cpu_mean"], cpu_max=load_i["cpu_max"],
            loop_lag_p99_ms=load_i["loop_lag_p99_ms"],
            schedule_lag_p99_ms=load_i.get("schedule_lag_p99_ms"),
            peak_in_flight=load_i["peak_in_flight"], gc=gc_figures(part.counters),
            saturation=load_i.get("saturation"),
            ended_ms=part.counters.ended_ns / NS_PER_MS, interrupted_by=part.counters.interrupted_by,
            host_cpu=host_figures(part.counters)))
    sat, own, load = analyse(profile, merged, total)
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
    warnings = first + list(notes) + own + list(end.emulator_warnings)
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
                        else reason if reason.startswith(("target unreachable", "target lost"))
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
    return Summary(meta=meta, verdict=verdict, ended_at=_iso(end.ended_at_unix_s),
                   duration_s=round(end.ended_at_unix_s - started_s, 3), load=load,
                   headline=headline(merged, load["measured_s"]),
                   slo=slo_block(profile, total, load["measured_s"]),
                   error_samples=dict(sorted(merged.error_samples.items())), generator=generator,
                   counters=merged, total=total, warmup=warmup,
                   workers=tuple(details) if with_workers else None,
                   engine=end.engine if with_workers else None)
