"""The checks: each compares what the upstream wrote with what the client read.

Role: one function per check id (docs/check.md), each pure: it takes the trials
of its script step (client probe + the upstream requests it caused) and the
contract, and returns a ``CheckResult`` with expected and observed values and a
few samples. The script that produces the trials is ``_script``.

Rules every check follows:
- A trial the client could not measure (no response at all, or no upstream
  request: the gateway answered itself) makes that scenario ``inconclusive``
  with the reason, never ``fail``.
- Timings are differences of stamps on one monotonic clock (the upstream's
  ``send`` hand-off, the client's read), in ns; reported in ms.
- Per scenario a status; the check's status is the worst of them
  (``_result.worst``).
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .._format import plural
from .._units import NS_PER_MS
from ..config._contract_spec import ContractSpec
from ._probe import Probe
from ._result import CheckResult, Status, worst
from ._sdk import SdkRead
from ._upstream import Exchange
from ._wire import decode, short, timeline

__all__ = ["Trial", "events_unchanged", "sdk_parse", "no_buffering", "keepalive_cadence",
           "midstream_error_shape", "disconnect_error_event", "fault_translation", "cancel_propagation",
           "usage_passthrough", "stall_handling", "retries", "unreached"]


@dataclass(frozen=True, slots=True)
class Trial:
    """One client request of a script step and the upstream requests it caused.

    Attributes:
        scenario: the scenario's name.
        protocol: "chat", "responses" or "messages".
        behaviour: the script step ("plain", "http_429", ...).
        probe: what the client saw.
        attempts: the upstream requests carrying the probe's id, in arrival order
            (more than one: the gateway retried).
    """

    scenario: str
    protocol: str
    behaviour: str
    probe: Probe
    attempts: tuple[Exchange, ...]

    @property
    def upstream(self) -> Exchange | None:
        """The last upstream attempt (the one whose answer the client can have got), or None."""
        return self.attempts[-1] if self.attempts else None


def _ms(t_ns: float) -> str:
    return f"{t_ns / NS_PER_MS:.1f} ms"


def unreached(t: Trial) -> str | None:
    """Why a trial cannot be judged, or None: no response, or no upstream request."""
    if t.probe.status is None:
        return f"no response from the gateway ({t.probe.error})"
    if not t.attempts:
        return (f"the upstream saw no request: the gateway answered itself (status {t.probe.status}) or "
                "routes elsewhere; is its upstream [upstream] listen?")
    return None


_Verdict = tuple[Status, str, str | None, dict[str, Any] | None]  # status, observed, why, sample


def _judge(check_id: str, expected: str, trials: Sequence[Trial],
           one: Callable[[Trial], _Verdict], *, reach: bool = True) -> CheckResult:
    """Run ``one`` per trial and fold the verdicts per scenario and overall."""
    per: dict[str, list[Status]] = {}
    observed: list[str] = []
    whys: list[str] = []
    samples: list[dict[str, Any]] = []
    for t in trials:
        why0 = unreached(t) if reach else None
        if why0 is not None:
            v: _Verdict = ("inconclusive", f"{t.scenario}: not measured", why0, None)
        else:
            v = one(t)
        status, obs, why, sample = v
        per.setdefault(t.scenario, []).append(status)
        if obs not in observed:
            observed.append(obs)
        if why is not None and status in ("fail", "inconclusive", "skip"):
            text = f"{t.scenario}: {why}"
            if text not in whys:
                whys.append(text)
        if sample is not None and len(samples) < 3 and (status == "fail" or not samples):
            samples.append({"scenario": t.scenario, "request_id": t.probe.request_id, **sample})
    scen: dict[str, str] = {name: worst(s) for name, s in per.items()}
    status = worst(scen.values())
    if not trials:
        return CheckResult(check_id, "skip", expected, "no trial", "no scenario to run it on")
    return CheckResult(check_id, status, expected, "; ".join(observed),
                       "; ".join(whys) if status != "pass" and whys else None, tuple(samples), scen)


# -- the plain streams: events, SDKs, buffering, usage ----------------------------------------------

def events_unchanged(trials: Sequence[Trial]) -> CheckResult:
    """Every upstream data event reaches the client with identical data, in order, none dropped,
    none added; comments may be added (HopBase: event contents pass unchanged)."""
    def one(t: Trial) -> _Verdict:
        assert t.upstream is not None
        up = timeline(t.upstream.writes).data
        cl = timeline(t.probe.reads).data
        if up == cl:
            return "pass", f"{t.scenario}: {len(up)} of {len(up)} {plural(len(up), 'event')} identical", None, None
        k = next((i for i, (a, b) in enumerate(zip(up, cl)) if a != b), min(len(up), len(cl)))
        rest_up, rest_cl = up[k:], cl[k:]
        dropped = sum(1 for e in rest_up if e not in rest_cl)
        added = sum(1 for e in rest_cl if e not in rest_up)
        sample = {"event_index": k,
                  "upstream": short(_show(up[k])) if k < len(up) else None,
                  "client": short(_show(cl[k])) if k < len(cl) else None}
        obs = (f"{t.scenario}: event {k} differs ({len(up)} upstream, {len(cl)} at the client; "
               f"{dropped} not delivered, {added} not from the upstream)")
        return "fail", obs, f"event {k} of {len(up)} differs", sample
    return _judge("events_unchanged", "each upstream data event, byte for byte and in order; SSE comments "
                  "may be added", trials, one)


def _show(e: tuple[str, bytes]) -> str:
    name, data = e
    head = "" if name == "message" else f"event: {name}\n"
    return head + "data: " + data.decode("utf-8", "replace")


def sdk_parse(trials: Sequence[Trial], read: Callable[[str, bytes], SdkRead]) -> CheckResult:
    """The client's stream parses with the official SDK's stream parser into what the SDK
    makes of the upstream's stream: text, tool calls and usage.

    Args:
        trials: the plain streams.
        read: ``_sdk.sdk_read`` or its precomputed answers (``SdkReader``).
    """
    def one(t: Trial) -> _Verdict:
        assert t.upstream is not None
        want = read(t.protocol, t.upstream.body)
        if want.missing is not None:
            return "skip", f"{t.scenario}: not read (no SDK installed)", want.missing, None  # why: which one
        got = read(t.protocol, t.probe.body)
        if want.error is not None:
            return ("inconclusive", f"{t.scenario}: the SDK cannot read the upstream's own stream",
                    want.error, None)
        if got.error is None and got.values == want.values:
            return "pass", f"{t.scenario}: {want.sdk} read the same text, tool calls and usage", None, None
        why = (f"{got.sdk} raised {got.error}" if got.error is not None
               else f"{got.sdk} read other values: {_diff(want.values, got.values)}")
        said = f"{got.sdk} raised an error" if got.error is not None else f"{got.sdk} read other values"
        return "fail", f"{t.scenario}: {said}", why, {"upstream": short(json.dumps(want.values)),
                                                    "client": short(json.dumps(got.values))}
    return _judge("sdk_parse", "the official SDK reads the client's stream into the upstream's text, tool calls "
                  "and usage", trials, one)


def _diff(want: dict[str, Any], got: dict[str, Any]) -> str:
    keys = [k for k in want if want.get(k) != got.get(k)]
    return ", ".join(f"{k} {short(str(got.get(k)), 60)!s} (upstream {short(str(want.get(k)), 60)})" for k in keys)


def _holds(t: Trial) -> list[int]:
    """Per upstream data event delivered, its write -> the client's read that completed it, ns
    (events matched by data, in order: a rewritten event has no hold)."""
    assert t.upstream is not None
    up = timeline(t.upstream.writes).events
    cl = timeline(t.probe.reads).events
    out, j = [], 0
    for tu, name, data in up:
        k = j
        while k < len(cl) and (cl[k][1], cl[k][2]) != (name, data):
            k += 1
        if k < len(cl):
            out.append(cl[k][0] - tu)
            j = k + 1
    return out


def no_buffering(trials: Sequence[Trial], c: ContractSpec) -> CheckResult:
    """No event held beyond the gateway's own per-event delay, the first chunk at most
    ``max_first_chunk_hold_ms``.

    The gateway's own per-event delay is the least hold of the stream (every event pays
    it); an event is held when it waits ``max_event_hold_ms`` longer. A busy machine
    delays a read now and then, a buffer holds many events: a scenario fails when the
    median stream has a quarter of its events held, or its median first chunk is held
    too long (the trials are several streams a scenario).
    """
    per: dict[str, list[Trial]] = {}
    for t in trials:
        per.setdefault(t.scenario, []).append(t)
    results: list[Trial] = []
    verdicts: dict[str, _Verdict] = {}
    for name, ts in per.items():
        ok = [t for t in ts if unreached(t) is None and t.probe.reads and t.upstream is not None
              and t.upstream.writes]
        if not ok:
            verdicts[name] = ("inconclusive", f"{name}: not measured", unreached(ts[0]) or "no body read", None)
            continue
        firsts = [t.probe.reads[0][0] - t.upstream.writes[0][0] for t in ok if t.upstream is not None]
        first = statistics.median(firsts)
        held_frac, excess_max, base = [], 0, 0
        for t in ok:
            h = _holds(t)
            if not h:
                continue
            base = min(h)
            ex = [x - base for x in h]
            held_frac.append(sum(1 for x in ex if x > c.max_event_hold_ns) / len(ex))
            excess_max = max(excess_max, max(ex))
        frac = statistics.median(held_frac) if held_frac else 0.0
        obs = (f"{name}: first chunk held {_ms(first)} (median of {len(firsts)}), gateway per-event delay "
               f"{_ms(base)}, events held beyond it: {frac:.0%} (most {_ms(excess_max)})")
        whys = []
        if first > c.max_first_chunk_hold_ns:
            whys.append(f"first chunk held {_ms(first)} > {_ms(c.max_first_chunk_hold_ns)}")
        if frac >= 0.25:
            whys.append(f"{frac:.0%} of the events held > {_ms(c.max_event_hold_ns)} beyond the per-event delay")
        sample = {"first_chunk_hold_ms": [round(x / NS_PER_MS, 3) for x in firsts],
                  "event_holds_ms": [round(x / NS_PER_MS, 3) for x in _holds(ok[0])]}
        verdicts[name] = ("fail" if whys else "pass", obs, "; ".join(whys) or None, sample)
        results.append(ok[0])
    firsts_trials = [per[n][0] for n in per]
    return _judge("no_buffering", f"first chunk within {_ms(c.max_first_chunk_hold_ns)} of the upstream's; no event "
                  f"held over {_ms(c.max_event_hold_ns)} beyond the gateway's own per-event delay",
                  firsts_trials, lambda t: verdicts[t.scenario], reach=False)


def usage_passthrough(trials: Sequence[Trial]) -> CheckResult:
    """The usage the client reads equals the upstream's (input and output tokens)."""
    def one(t: Trial) -> _Verdict:
        assert t.upstream is not None
        up = decode(t.protocol, t.upstream.writes)
        cl = decode(t.protocol, t.probe.reads)
        want, got = (up.input_tokens, up.output_tokens), (cl.input_tokens, cl.output_tokens)
        if want == (None, None):
            return "skip", f"{t.scenario}: the upstream sent no usage", "the upstream sent no usage", None
        obs = f"{t.scenario}: input/output tokens {got[0]}/{got[1]} (upstream {want[0]}/{want[1]})"
        if got == want:
            return "pass", obs, None, None
        return "fail", obs, "usage differs from the upstream's", {"upstream": list(want), "client": list(got)}
    return _judge("usage_passthrough", "the client's usage (input and output tokens) equals the upstream's",
                  trials, one)


# -- silences ---------------------------------------------------------------------------------------

def _silence(ex: Exchange) -> tuple[int, int]:
    """The longest gap between two consecutive upstream writes: (its start, its end), ns."""
    w = [t for t, _ in ex.writes]
    if ex.ended_ns is not None:
        w.append(ex.ended_ns)
    gaps = [(b - a, a, b) for a, b in zip(w, w[1:])]
    if not gaps:
        return (ex.received_ns, ex.received_ns)
    _, a, b = max(gaps)
    return a, b


def keepalive_cadence(trials: Sequence[Trial], c: ContractSpec) -> CheckResult:
    """During an upstream silence the client hears something at least every
    ``keepalive_interval_s`` + tolerance, comments only between events."""
    limit = c.keepalive_interval_ns + c.keepalive_tolerance_ns
    expected = (f"a comment at least every {c.keepalive_interval_ns / 1e9:g} s (+{c.keepalive_tolerance_ns / 1e9:g} s) "
                "while the upstream is silent, only between events")
    if not c.keepalive_interval_ns:
        return CheckResult("keepalive_cadence", "skip", expected, "not run",
                           "the contract promises no keepalives (keepalive_interval_s = 0)")

    def one(t: Trial) -> _Verdict:
        assert t.upstream is not None
        a, b = _silence(t.upstream)
        if b - a < limit:
            return ("inconclusive", f"{t.scenario}: the upstream silence lasted {_ms(b - a)}",
                    "the upstream was not silent long enough (the gateway or client ended the stream?)", None)
        tl = timeline(t.probe.reads)
        inside = [ts for ts in tl.chunk_stamps if a < ts < b]
        marks = [a, *inside, b]
        longest = max(y - x for x, y in zip(marks, marks[1:]))
        comments = sum(1 for ts, _ in tl.comments if a < ts < b)
        obs = (f"{t.scenario}: {comments} comments in {_ms(b - a)} of upstream silence; longest client silence "
               f"{_ms(longest)}; comments inside an event: {tl.comments_inside_events}")
        whys = []
        if longest > limit:
            whys.append(f"the client heard nothing for {_ms(longest)} > {_ms(limit)}")
        if tl.comments_inside_events:
            whys.append(f"{tl.comments_inside_events} comments inside an event")
        sample = {"client_comments": [short(x, 60) for _, x in tl.comments[:3]],
                  "upstream_silence_ms": round((b - a) / NS_PER_MS, 1)}
        return ("fail" if whys else "pass"), obs, "; ".join(whys) or None, sample
    return _judge("keepalive_cadence", expected, trials, one)


def stall_handling(trials: Sequence[Trial], c: ContractSpec) -> CheckResult:
    """An upstream silent past ``stall_min_s`` is retried or errored within the window."""
    tol = max(NS_PER_MS * 1000, c.stall_max_ns // 20)
    expected = (f"a retry upstream or an error to the client {c.stall_min_ns / 1e9:g}-{c.stall_max_ns / 1e9:g} s "
                "after the upstream's last event")

    def one(t: Trial) -> _Verdict:
        first = t.attempts[0]
        a, _ = _silence(first)
        retried = [x for x in t.attempts[1:] if x.received_ns > a]
        cl = decode(t.protocol, t.probe.reads)
        acted_ns: int | None = None
        how = ""
        if retried:
            acted_ns, how = retried[0].received_ns, "retried upstream"
        elif t.probe.ended_ns is not None and cl.outcome != "completed":
            acted_ns, how = t.probe.ended_ns, f"ended the client's stream ({cl.outcome}, {cl.error_code or t.probe.error})"
        if acted_ns is None:
            return ("fail", f"{t.scenario}: the silence passed through untouched (client {cl.outcome})",
                    "no retry and no error: the client waited out the whole stall", None)
        after = acted_ns - a
        obs = f"{t.scenario}: {how} {after / 1e9:.1f} s after the last event"
        if c.stall_min_ns - tol <= after <= c.stall_max_ns + tol:
            return "pass", obs, None, None
        return "fail", obs, f"acted after {after / 1e9:.1f} s, outside the window", None
    return _judge("stall_handling", expected, trials, one)


# -- faults -----------------------------------------------------------------------------------------

def midstream_error_shape(trials: Sequence[Trial]) -> CheckResult:
    """An upstream mid-stream error reaches the client as its protocol's error event, status 200 kept."""
    def one(t: Trial) -> _Verdict:
        cl = decode(t.protocol, t.probe.reads)
        last = timeline(t.probe.reads).events
        sample = {"client_last_event": short(_show(last[-1][1:])) if last else None}
        obs = (f"{t.scenario}: status {t.probe.status}, {cl.outcome} "
               f"({cl.error_code or cl.detail or t.probe.error or 'clean end, no error event'})")
        if t.probe.status == 200 and cl.outcome == "failed" and cl.error_code is not None:
            return "pass", obs, None, None
        if t.probe.status != 200:
            return "fail", obs, "the status is not 200", sample
        up = timeline(t.upstream.writes).data if t.upstream is not None else ()
        got = len(timeline(t.probe.reads).data)
        if got < len(up) - 1:  # the upstream's last data event is its error: the cut came before it
            return ("fail", obs, f"the gateway cut the stream after {got} of the upstream's {len(up)} {plural(len(up), 'event')}, "
                    "before its error event", sample)
        return "fail", obs, "no error event reached the client", sample
    return _judge("midstream_error_shape", "status 200, then the protocol's error event (chat data {\"error\"}, "
                  "responses response.failed, messages event: error)", trials, one)


def disconnect_error_event(trials: Sequence[Trial], c: ContractSpec) -> CheckResult:
    """An upstream cut mid-stream: a Messages client gets an ``error`` event before the end
    (HopBase); chat and Responses clients must at least see the stream as not completed."""
    def one(t: Trial) -> _Verdict:
        cl = decode(t.protocol, t.probe.reads)
        got = f"{cl.outcome} ({cl.error_code or cl.detail or t.probe.error or 'clean end'})"
        obs = f"{t.scenario}: {got}"
        if cl.outcome == "completed":
            return "fail", obs, "the client saw a completed stream: the gateway hid the break", None
        if t.protocol == "messages" and c.disconnect_error_event and cl.outcome != "failed":
            last = timeline(t.probe.reads).events
            return ("fail", obs, "no Anthropic error event before the end",
                    {"client_last_event": short(_show(last[-1][1:])) if last else None})
        return "pass", obs, None, None
    return _judge("disconnect_error_event", "messages: an error event before the end" if c.disconnect_error_event
                  else "the client sees the stream as broken", trials, one)


def _error_shape(protocol: str, body: bytes) -> str:
    try:
        doc = json.loads(body)
    except ValueError:
        return "not JSON"
    if not isinstance(doc, dict):
        return "not a JSON object"
    if protocol == "messages":
        ok = doc.get("type") == "error" and isinstance(doc.get("error"), dict)
        return "anthropic error" if ok else "not {\"type\": \"error\", \"error\": {...}}"
    return "openai error" if isinstance(doc.get("error"), dict) else "not {\"error\": {...}}"


def fault_translation(trials: Sequence[Trial]) -> CheckResult:
    """429/500/503 before streaming: the client gets the same status, the protocol's error
    body and, for 429, ``Retry-After``."""
    def one(t: Trial) -> _Verdict:
        up = t.attempts[-1]
        shape = _error_shape(t.protocol, t.probe.body)
        ra = t.probe.headers.get("retry-after")
        obs = f"{t.scenario}: upstream {up.status} -> {t.probe.status} {shape}" + (
            f", Retry-After {ra}" if ra is not None else "")
        whys = []
        if t.probe.status != up.status:
            whys.append(f"status {up.status} became {t.probe.status}")
        if not shape.endswith(" error"):
            whys.append(f"error body {shape}")
        if up.status == 429 and "retry-after" in up.headers and ra is None:
            whys.append("Retry-After dropped")
        sample = {"client_body": short(t.probe.body)}
        return ("fail" if whys else "pass"), obs, "; ".join(whys) or None, sample
    return _judge("fault_translation", "429/500/503 before the stream: the same status, the protocol's error body, "
                  "Retry-After kept", trials, one)


def cancel_propagation(trials: Sequence[Trial], c: ContractSpec) -> CheckResult:
    """A client close reaches the upstream within ``cancel_within_ms``; tokens written after it are wasted."""
    def one(t: Trial) -> _Verdict:
        up = t.attempts[-1]
        closed = t.probe.closed_ns
        if closed is None:
            return ("inconclusive", f"{t.scenario}: the client never closed",
                    f"the stream ended before {4} events ({t.probe.error or 'short stream'})", None)
        if up.ended_ns is not None and up.ended_ns <= closed:  # a later close of its connection is no cancel
            return ("inconclusive", f"{t.scenario}: the upstream had finished before the client closed",
                    "the upstream was no longer writing when the client closed", None)
        wasted = sum(1 for ts, _ in up.writes if ts > closed)
        if up.disconnect_ns is None or (up.ended_ns is not None and up.disconnect_ns >= up.ended_ns):
            return ("fail", f"{t.scenario}: the upstream ran to its end ({wasted} writes after the close)",
                    "the cancel never reached the upstream while it was still writing", None)
        delay = up.disconnect_ns - closed
        obs = f"{t.scenario}: reached the upstream after {_ms(delay)}, {wasted} writes after the close"
        if delay <= c.cancel_within_ns:
            return "pass", obs, None, None
        return "fail", obs, f"{_ms(delay)} > {_ms(c.cancel_within_ns)}", None
    return _judge("cancel_propagation", f"the client's close reaches the upstream within {_ms(c.cancel_within_ns)}",
                  trials, one)


def retries(trials: Sequence[Trial], c: ContractSpec) -> CheckResult:
    """Upstream attempts per client request at most ``max_attempts`` (over the failing steps)."""
    def one(t: Trial) -> _Verdict:
        n = len(t.attempts)
        obs = f"{t.scenario} {t.behaviour}: {n} attempt{'s' * (n != 1)}"
        if n <= c.max_attempts:
            return "pass", obs, None, None
        return "fail", obs, f"{n} upstream attempts > {c.max_attempts}", None
    return _judge("retries", f"at most {c.max_attempts} upstream attempts per client request", trials, one)
