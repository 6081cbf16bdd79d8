"""Stream outcomes, their counter names, and the rates over them: defined once.

Role: the one list of what a stream can end as (``OUTCOMES``), which of those
are broken streams (``BROKEN``), the counter prefixes that carry an outcome's
detail (``DETAIL_PREFIXES``: ``timeout.idle``, ``connect_error.refused``,
``http_error.429``, ``http_error_code.rate_limit_exceeded``...), and the rates a
budget or a comparison may name (``RATES``, computed by :func:`rate_value`).
The terminal summary, report.html, the progress line, ``hopbench gate`` and
``hopbench compare`` all read these names from here, so a new detail shows up
in all of them at once. Metric names live in :data:`hopbench.measure._metrics.METRICS`.

Invariants: pure (no clock, no trio, no httpx); the counters are the ones the
runner writes (docs/results/counters.md, "Counters"); rates are documented in
docs/gate.md.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from .._errors import UsageError

__all__ = [
    "ANOMALY_PREFIX",
    "BROKEN",
    "DETAIL_PREFIXES",
    "DetailTally",
    "ERROR_RATE_WARN",
    "OUTCOMES",
    "RATES",
    "OUTPUT_TOKEN_COUNTERS",
    "RateSpec",
    "TokensSource",
    "detail_tally",
    "measured_duration_s",
    "output_tokens",
    "rate_value",
    "tokens_source",
    "tokens_unlike",
]

OUTCOMES: Final = ("completed", "failed", "truncated", "timeout", "connect_error", "http_error", "cancelled",
                   "client_cancelled")
"""Every outcome a stream can end with, in report order (each is a counter).
``client_cancelled``: the scenario's ``cancel`` key closed the stream on
purpose (hopbench.workload._cancel): neither an error nor an interruption, and left
out of every rate's denominator, like ``cancelled``."""
BROKEN: Final = ("failed", "truncated", "timeout", "connect_error", "http_error")
"""The outcomes of a broken stream (``broken`` in headlines: their sum)."""
DETAIL_PREFIXES: Final = tuple(f"{o}." for o in BROKEN) + ("http_error_code.",)
"""Counter prefixes of outcome details: ``<outcome>.<detail>`` for every broken
outcome, and ``http_error_code.<code>`` (the error body's code)."""
ANOMALY_PREFIX: Final = "anomaly."
"""Counter prefix of protocol anomalies (``anomaly.<kind>``): not outcomes."""
ERROR_RATE_WARN: Final = 0.05
"""The share of started streams that ended broken (or were cancelled) above which
a run warns and the headlines turn red (docs/results/counters.md, "Warnings")."""

OUTPUT_TOKEN_COUNTERS: Final = ("tokens.output.completed", "tokens.output.broken",
                                "tokens.output_events.completed", "tokens.output_events.broken")
"""The counters a run's output tokens sum: the usage tokens of streams that reported
usage, and the output events of those that reported none (the fallback ``tpot`` and
per-stream tokens/s use: ``hopbench.measure._rules.measure``; docs/results/counters.md,
"Output tokens without usage")."""


@dataclass(frozen=True, slots=True)
class TokensSource:
    """Where a run's (or a scope's) output token count came from.

    Attributes:
        source: ``"usage"`` (every counted stream reported usage), ``"events"``
            (none did: one token per output event the client counted), ``"mixed"``
            (some of each), ``"none"`` (no stream reported usage or carried an
            output event: no token count exists, and no figure made of it is 0).
        usage_streams: streams whose output tokens came from their usage.
        events_streams: streams without usage whose output events were counted.
    """

    source: str
    usage_streams: int
    events_streams: int

    @property
    def counted(self) -> bool:
        """True when a token count exists (``source`` is not ``"none"``)."""
        return self.source != "none"

    def label(self) -> str:
        """A short label for the terminal and report.html: ``""`` for usage,
        ``"~ counted from events"``, ``"~ partly counted from events (N of M streams)"``
        or ``"no token counts"``."""
        match self.source:
            case "usage":
                return ""
            case "events":
                return "~ counted from events"
            case "mixed":
                return (f"~ partly counted from events ({self.events_streams:,} of "
                        f"{self.usage_streams + self.events_streams:,} streams)")
        return "no token counts"

    def to_json(self) -> dict[str, Any]:
        """``{"source", "usage_streams", "events_streams"}`` (summary.json ``headline.tokens_source``)."""
        return {"source": self.source, "usage_streams": self.usage_streams, "events_streams": self.events_streams}

    @classmethod
    def from_json(cls, data: object) -> TokensSource | None:
        """Inverse of :meth:`to_json`; None for anything else (a summary.json written
        before the key existed, which counted usage only)."""
        if not isinstance(data, Mapping) or data.get("source") not in ("usage", "events", "mixed", "none"):
            return None
        return cls(str(data["source"]), _c(data, "usage_streams"), _c(data, "events_streams"))


def _getter(counters: Mapping[str, Any] | Callable[[str], int]) -> Callable[[str], int]:
    if callable(counters):
        return counters
    return lambda key: _c(counters, key)


def output_tokens(counters: Mapping[str, Any] | Callable[[str], int]) -> int:
    """A scope's output tokens: usage where streams reported it, else their output events.

    Args:
        counters: a scope's counters, or a function from a counter name to its count.

    Returns:
        The sum of :data:`OUTPUT_TOKEN_COUNTERS`, >= 0 (0 also when no count
        exists: ask :func:`tokens_source` before reading 0 as a measurement).
    """
    get = _getter(counters)
    return sum(get(k) for k in OUTPUT_TOKEN_COUNTERS)


def tokens_source(counters: Mapping[str, Any] | Callable[[str], int]) -> TokensSource:
    """Where a scope's output tokens came from, from its ``output_tokens_from.*`` counters.

    Results written before those counters existed counted usage only: any usage
    token there reads ``"usage"`` (streams unknown, 0), none reads ``"none"``.

    Args:
        counters: a scope's counters, or a function from a counter name to its count.
    """
    get = _getter(counters)
    usage, events = get("output_tokens_from.usage"), get("output_tokens_from.events")
    if not usage and not events:
        legacy = get("tokens.output.completed") + get("tokens.output.broken")
        return TokensSource("usage" if legacy else "none", 0, 0)
    source = "mixed" if usage and events else "usage" if usage else "events"
    return TokensSource(source, usage, events)


def _counted_from(t: TokensSource) -> str:
    match t.source:
        case "usage":
            return "usage"
        case "events":
            return "output events (no usage reported)"
        case "mixed":
            return (f"usage and output events ({t.events_streams:,} of "
                    f"{t.usage_streams + t.events_streams:,} streams without usage)")
    return "nothing"


def tokens_unlike(base: TokensSource, cand: TokensSource, names: tuple[str, str] = ("base", "candidate")) -> str:
    """Why two token counts cannot be compared, or "" when they can.

    A count that does not exist is no 0 (a rate of it is not -100 %), and one run's
    usage tokens against the other's output events are different units (an output
    event may carry several tokens): compare and the gate judge a token figure only
    when both sides counted it the same way (docs/compare.md, "Token throughput").

    Args:
        base / cand: each side's :func:`tokens_source`.
        names: how to name the two sides in the sentence.

    Returns:
        One phrase (no trailing period), or "".
    """
    missing = [n for n, t in zip(names, (base, cand)) if not t.counted]
    if missing:
        who = " and ".join(missing)
        return (f"no token counts in the {who} (no stream reported usage or carried an output event): "
                "a missing count is not 0")
    if base.source != cand.source:
        return (f"the {names[0]} counted its tokens from {_counted_from(base)}, the {names[1]} from "
                f"{_counted_from(cand)}: different units (an output event may carry several tokens)")
    return ""


@dataclass(frozen=True, slots=True)
class RateSpec:
    """One rate a budget can name (``"error_rate" = "<= 0.01"``).

    Attributes:
        name: the budget key.
        description: the definition, as documented.
        fraction: True for a proportion in 0..1 (accepts ``%`` limits).
        unit: the unit shown beside a value: ``""`` for a proportion,
            ``"tokens/s"`` or ``"/s"`` for a per-second rate.
    """

    name: str
    description: str
    fraction: bool
    unit: str = ""


RATES: Final[dict[str, RateSpec]] = {
    r.name: r
    for r in (
        RateSpec("error_rate", "(failed + truncated + timeout + connect_error + http_error) / "
                 "(started - cancelled - client_cancelled)", True),
        RateSpec("completion_rate", "completed / (started - cancelled - client_cancelled)", True),
        RateSpec("interruption_rate", "(failed + truncated + timeout) / responded", True),
        RateSpec("failed_rate", "failed / responded", True),
        RateSpec("truncated_rate", "truncated / responded", True),
        RateSpec("timeout_rate", "timeout / responded", True),
        RateSpec("http_error_rate", "http_error / (started - cancelled - client_cancelled)", True),
        RateSpec("keepalive_violation_rate", "keepalive_violations / streams with a response (max_silence.count)", True),
        RateSpec("output_tokens_per_s", "output tokens (usage, else output events: tokens.output.* + "
                 "tokens.output_events.*) / measured duration; none without a token count", False, "tokens/s"),
        RateSpec("completed_per_s", "completed / measured duration", False, "/s"),
    )
}
"""Rate names a budget may use; ``responded`` = started - cancelled - client_cancelled
- http_error - connect_error."""


CODE_PREFIX: Final = "http_error_code."
"""Counter prefix of an HTTP error body's code: a sub-detail of ``http_error.<status>``
(the same streams), never a second tally."""


@dataclass(frozen=True, slots=True)
class DetailTally:
    """A scope's outcome details, one count per broken stream (what the terminal's
    ``details:`` line and report.html's "by kind and error code" chart show).

    Attributes:
        details: ``(<outcome>.<detail>, n)`` sorted by name, n > 0: each broken stream
            in exactly one (their sum is the broken streams whose detail is known).
        codes: ``(code, n)`` of ``http_error_code.<code>``, sorted by name: the error
            bodies' codes of the ``http_error.*`` streams (a sub-detail of them: the
            counters do not say which status each code came with).
        anomalies: ``(anomaly.<kind>, n)`` sorted by name: protocol flags, not outcomes
            (a stream may have several, a completed one too).
    """

    details: tuple[tuple[str, int], ...]
    codes: tuple[tuple[str, int], ...]
    anomalies: tuple[tuple[str, int], ...]

    def codes_text(self) -> str:
        """``"error code x 3, y 12"`` (``"error codes ..."`` for several), or ``""``."""
        if not self.codes:
            return ""
        return (f"error code{'s' if len(self.codes) > 1 else ''} "
                + ", ".join(f"{c} {n:,}" for c, n in self.codes))


def detail_tally(counters: Mapping[str, Any]) -> DetailTally:
    """A scope's counters as :class:`DetailTally` (pure; never raises on odd counters:
    non-positive or non-integer counts are left out).

    Args:
        counters: a scope's counters (summary.json ``scopes.<name>.counters``).
    """
    def pick(prefix: tuple[str, ...] | str, cut: int = 0) -> tuple[tuple[str, int], ...]:
        return tuple(sorted((k[cut:], int(n)) for k, n in counters.items()
                            if isinstance(n, int) and n > 0 and k.startswith(prefix)))

    outcome_prefixes = tuple(p for p in DETAIL_PREFIXES if p != CODE_PREFIX)
    return DetailTally(pick(outcome_prefixes), pick(CODE_PREFIX, len(CODE_PREFIX)), pick(ANOMALY_PREFIX))


def _c(counters: Mapping[str, Any], key: str) -> int:
    v = counters.get(key, 0)
    return v if isinstance(v, int) and not isinstance(v, bool) else 0


def measured_duration_s(summary: Mapping[str, Any], results_dir: Path | None = None) -> tuple[float | None, str]:
    """The measured duration of a run (warm-up excluded), in seconds, and where it came from.

    In order: ``summary["load"]["measured_s"]`` when the run recorded it; else
    the last interval end in ``results_dir/timeline.jsonl`` minus
    ``run.warmup_s``; else ``duration_s - run.warmup_s`` (wall clock: includes
    start-up, so it under-states a rate slightly).

    Returns:
        (seconds or None when unknown, source description).
    """
    load = summary.get("load")
    if isinstance(load, Mapping):
        m = load.get("measured_s")
        if isinstance(m, (int, float)) and not isinstance(m, bool) and m > 0:
            return float(m), "load.measured_s"
    profile = summary.get("profile")
    run = profile.get("run", {}) if isinstance(profile, Mapping) else {}
    warm = run.get("warmup_s", 0) if isinstance(run, Mapping) else 0
    warm_s = float(warm) if isinstance(warm, (int, float)) and not isinstance(warm, bool) else 0.0
    if results_dir is not None:
        path = Path(results_dir) / "timeline.jsonl"
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
            last = json.loads(lines[-1]) if lines else None
            end_ns = last.get("end_ns") if isinstance(last, dict) else None
            if isinstance(end_ns, int) and end_ns / 1e9 > warm_s:
                return end_ns / 1e9 - warm_s, "timeline.jsonl last end - run.warmup_s"
        except (OSError, ValueError, IndexError):
            pass
    dur = summary.get("duration_s")
    if isinstance(dur, (int, float)) and not isinstance(dur, bool) and dur > warm_s:
        return float(dur) - warm_s, "duration_s - run.warmup_s (wall clock)"
    return None, "unknown"


def rate_value(name: str, counters: Mapping[str, Any], metrics: Mapping[str, Any],
               measured_s: float | None) -> tuple[float | None, int, int]:
    """Compute rate ``name`` (a key of :data:`RATES`) for one scope.

    Args:
        name: the rate.
        counters: the scope's counters from summary.json.
        metrics: the scope's metrics from summary.json (for max_silence.count).
        measured_s: measured duration in seconds, for the per-second rates.

    Returns:
        (value or None when the denominator is 0, or for ``output_tokens_per_s``
        when no token count exists (:func:`tokens_source` ``"none"``), numerator, denominator);
        for per-second rates the denominator is the number of streams counted
        (started - cancelled - client_cancelled), so that min_count applies to it too.
    """
    started = _c(counters, "started")
    cancelled = _c(counters, "cancelled") + _c(counters, "client_cancelled")  # neither counts
    failed, truncated, timeout = _c(counters, "failed"), _c(counters, "truncated"), _c(counters, "timeout")
    http, conn = _c(counters, "http_error"), _c(counters, "connect_error")
    streams = started - cancelled
    responded = streams - http - conn
    num: int
    den: int
    match name:
        case "error_rate":
            num, den = failed + truncated + timeout + conn + http, streams
        case "completion_rate":
            num, den = _c(counters, "completed"), streams
        case "interruption_rate":
            num, den = failed + truncated + timeout, responded
        case "failed_rate":
            num, den = failed, responded
        case "truncated_rate":
            num, den = truncated, responded
        case "timeout_rate":
            num, den = timeout, responded
        case "http_error_rate":
            num, den = http, streams
        case "keepalive_violation_rate":
            ms = metrics.get("max_silence")
            cnt = ms.get("count", 0) if isinstance(ms, Mapping) else 0
            num, den = _c(counters, "keepalive_violations"), cnt if isinstance(cnt, int) else 0
        case "output_tokens_per_s" | "completed_per_s":
            if name == "output_tokens_per_s":
                num = output_tokens(counters)
                if not tokens_source(counters).counted:  # no count is no rate, never 0 tokens/s
                    return None, num, streams
            else:
                num = _c(counters, "completed")
            if not measured_s or measured_s <= 0:
                return None, num, streams
            return num / measured_s, num, streams
        case _:
            raise UsageError(f"unknown rate {name!r}: expected one of {', '.join(RATES)}")
    if den <= 0:
        return None, num, max(den, 0)
    return num / den, num, den

