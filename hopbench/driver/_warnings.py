"""The run's warnings about its streams: how they ended, their lengths, the scopes that failed.

Role: pure rules (no clock, no I/O but the file-descriptor limit
``outcome_warnings`` asks the process for) from a measured snapshot's
counters to the sentences of summary.json ``warnings`` (docs/results/counters.md,
"Warnings"): :func:`run_warnings` for the judge (``hopbench.driver._judge.analyse``),
and the rules the exit code and the gate read again from a summary.json
(:func:`failed_arms`, :func:`failed_scenarios`, :data:`NO_OUTPUT_WARNING`).

Invariants:

* A warning names what was seen and what it points at; the ones that decide an
  exit code start with a fixed prefix (``NO_OUTPUT_WARNING``) or are recomputed
  from the counters (``arm_failed``, ``scenario_failed``), never parsed back
  from their prose.
* Streams a scenario's cancel key closed on purpose (``client_cancelled``) count
  neither as failures nor as started.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .._advice import ADVICE
from ..config._records import Profile
from ..measure._burst import burst_warnings
from ..measure._error_bound import error_bound_warnings, scope_error_bounds
from ..measure._counters import StatsLike
from ..measure._outcomes import BROKEN, ERROR_RATE_WARN
from ..measure._recorder import ALL, Snapshot

__all__ = ["INPUT_RATIO_WARN", "NO_OUTPUT_WARNING", "OVER_MAX_SCOPES_NAMED", "arm_failed", "failed_arms",
           "failed_scenarios", "length_warnings", "outcome_warnings", "run_warnings", "scenario_failed"]

#: a scope whose target reported less than this share of the prompt tokens sent warns
INPUT_RATIO_WARN = 0.5


#: the most scopes a run's "max_tokens not honoured" warning names one by one (then "+N more")
OVER_MAX_SCOPES_NAMED = 8


def length_warnings(scopes: Mapping[str, Mapping[str, int]]) -> list[str]:
    """Warnings about the lengths the target reported against those requested
    (docs/workloads.md, "What the results show"; docs/results/counters.md, "Warnings").

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
        out.append(f"{who}max_tokens not honoured: {over:,} of {n_out:,} completed streams reported more "
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
                       f"(mean {got_in / n_in:,.1f} of {req_in / n_in:,.1f} over {n_in:,} streams): it cuts the "
                       "prompts (context truncation) or its usage does not count them; TTFT and tokens/s "
                       "do not describe the prompts requested")
    return out


#: the start of the warning for a run whose completed streams carried no output
NO_OUTPUT_WARNING = "no output:"


def cancelled_by_design(counters: Mapping[str, int]) -> bool:
    """Whether every stream of a run (or a part of one) was cancelled and the scenario's
    cancel key closed some: the rest were still short of their cancel point when the run
    stopped (``cancelled`` at the stop), none completed or ended in an error. Such a run
    did what it asked (``cancel = { fraction = 1, ... }``): it is judged on its cancels
    (client_cancelled, cancel_delay, wasted tokens), never as "nothing completed"
    (docs/results/counters.md, "Warnings"; issue 38).

    Args:
        counters: a scope's counters (or a summary's headline: ``started``,
            ``completed``, ``cancelled``, ``client_cancelled``, ``errors``).
    """
    client = counters.get("client_cancelled", 0)
    errors = counters["errors"] if "errors" in counters else sum(counters.get(k, 0) for k in BROKEN)
    return (client > 0 and not counters.get("completed", 0) and not errors
            and counters.get("started", 0) == client + counters.get("cancelled", 0))


def arm_failed(counters: Mapping[str, int]) -> int:
    """The streams an A/B arm started (less its client cancels) when none of
    them completed, else 0 (docs/ab-arms.md: such a run exits 4); 0 too when every
    stream was cancelled, by the cancel key or at the stop (``cancelled_by_design``)."""
    started = counters.get("started", 0) - counters.get("client_cancelled", 0)
    if cancelled_by_design(counters):
        return 0
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
    (``scenario_failed``: docs/results/counters.md, "Warnings"; such a run exits 4). Empty
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
    """Warnings about how the streams ended (docs/results/counters.md, "Warnings").

    Args:
        counters: the "all" scope's counters of the measured run.
        stats: the runner's figures (``codes_folded``).

    Returns:
        list of str, possibly empty: always one when streams started and none
        completed ("nothing completed", or "cancelled at the stop" when the others were
        all cancelled by the cancel key: ``cancelled_by_design``); one when the error rate or the share cancelled at the stop is above
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
    if started and not completed and cancelled_by_design(counters):
        # the cancel key closed the others on purpose: the run is judged on its cancels
        out.append(f"cancelled at the stop: {cancelled:,} streams had not reached their cancel point ({why}); "
                   f"the other {counters.get('client_cancelled', 0)} were closed by the scenario's cancel key, "
                   "as asked: the run is judged on its cancels")
    elif started and not completed:
        # every one cancelled at the stop (a second SIGINT, a short grace): the stop ended
        # them, not the target; pointing at what the target said would blame it
        stopped = cancelled == started and not errors
        out.append(f"nothing completed: none of the {started:,} streams completed "
                   f"({_top_details(counters, BROKEN + ('cancelled',))}){not_sse}; "
                   + (f"the stop cancelled them ({why})" if stopped else
                      "see error_samples in summary.json for what the target said" if stats.error_samples else
                      "the target sent no error text with them"))
    elif started and errors / started > ERROR_RATE_WARN:
        out.append(f"error rate {errors / started:.1%} (> {ERROR_RATE_WARN:.0%}): {errors} of {started} "
                   f"streams ended in error ({_top_details(counters, BROKEN)})")
    if started and completed and cancelled / started > ERROR_RATE_WARN:
        # (not "interruption rate": the gate's interruption_rate budget is another quantity)
        out.append(f"cancelled at the stop {cancelled / started:.1%} (> {ERROR_RATE_WARN:.0%}): {cancelled} of "
                   f"{started:,} streams ({why})")
    fd = counters.get("connect_error.fd_limit", 0)
    if fd:
        try:
            import resource

            soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
            limit = f"{soft} per process" if soft != resource.RLIM_INFINITY else "the system's"
        except (ImportError, OSError, ValueError):
            limit = "the process's"
        out.append(f"{fd:,} streams could not open a connection: {ADVICE['fd_limit'].cause} "
                   f"(limit: {limit}, `ulimit -n`); {ADVICE['fd_limit'].cure}")
    if stats.codes_folded:
        out.append(f"{stats.codes_folded} streams' error codes were counted as \"other\": the server sent "
                   "more distinct error codes than hopbench counts by name")
    return out


def run_warnings(profile: Profile, stats: StatsLike, total: Snapshot, *, late_cure: str | None = None) -> list[str]:
    """The judge's warnings about a measured run's streams (docs/results/counters.md, "Warnings").

    Args:
        profile: the profile as this load generator ran it (its scenarios and arms).
        stats: its ``RunStats`` or ``RunCounters`` (``codes_folded``, ``cancelled_by``).
        total: its measured snapshot.
        late_cure: the cure for a client that read late (the figures' error bounds): the
            saturation verdict's when the run was saturated (one cause, one cure:
            hopbench._advice), None for the registry's ``client_read_late``.

    Returns:
        list of str, possibly empty, in this order: no output at all, bursts
        (``hopbench.measure._burst``), figures whose error bound is too wide
        (``hopbench.measure._error_bound``), the client's own lateness, idle timeouts
        taken back, values out of the histograms' range, :func:`outcome_warnings`,
        an arm or one of several scenarios that completed nothing (or, a scenario,
        whose completed streams carried no output), :func:`length_warnings`.
    """
    warnings: list[str] = []
    completed = total.counter(ALL, "completed")

    def silent(scope: str, done: int) -> bool:  # completed streams, none carried output
        return bool(done) and not total.histogram(scope, "ttft").count \
            and not total.counter(scope, "tokens.output.completed")

    run_silent = silent(ALL, completed)
    if run_silent:
        # every stream ended with its terminal event and none carried output: no
        # latency of the answer was measured (docs/results/counters.md, "Warnings")
        warnings.append(f"{NO_OUTPUT_WARNING} none of the {completed:,} completed streams carried output "
                        "(no text, reasoning, refusal or tool event, no output tokens reported): "
                        "TTFT, ITL and TPOT have no samples; see streams.jsonl for what the target sent")
    # re-judged against the origin's record where one exists (hopbench.measure._burst); the embedded
    # emulator (or every A/B arm's own) has no proxy in front of it: no warning names one
    warnings += burst_warnings(total.scopes[ALL].counters if ALL in total.scopes else {},
                               embedded=profile.target.embedded and all(a.url is None for a in profile.arms))
    # figures whose tail the client's own stamps cannot vouch for (docs/results/units.md,
    # "Times from the wire"), whatever the loop lag
    if ALL in total.scopes:
        warnings += error_bound_warnings(scope_error_bounds(total.scopes[ALL].histograms, total.scopes[ALL].bounds),
                                         cure=late_cure or ADVICE["client_read_late"].cure)
    lagged = total.counter(ALL, "client_lagged")
    if completed and lagged > completed / 2:
        warnings.append(f"client_lagged: {lagged:,} of {completed:,} streams arrived as one burst because "
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
            warnings.append(f"{kind} {name}: nothing completed: none of its {started:,} streams completed "
                            f"({_top_details(c, BROKEN + ('cancelled',))}); {what}")
        elif kind == "scenario" and not run_silent and silent(name, c.get("completed", 0)):
            # its completed streams carried nothing (the run's own "no output" warning says it for all)
            warnings.append(f"scenario {name}: {NO_OUTPUT_WARNING} none of its {c['completed']} completed streams "
                            "carried output (no text, reasoning, refusal or tool event, no output tokens reported): "
                            "its TTFT, ITL and TPOT have no samples")
    warnings += length_warnings({name: s.counters for name, s in total.scopes.items()})
    return warnings
