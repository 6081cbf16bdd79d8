"""The Trio load engine: the only async code and the only reader of the clock.

One nursery runs the load generator (a closed loop of users or an open-loop
arrival schedule), the streams themselves, and three watchers: an interval
ticker (interval histograms to the results writer, progress), an event-loop
lag probe and the stop logic (duration, request count, signals).

Per stream: POST through httpx (``StreamTransport`` by default), raw body bytes
-> ``SSEScanner`` -> the protocol decoder -> ``StreamMeter`` (stamps only);
at the end ``_meter.measure`` applies the metric rules to the stamps and the
frozen ``StreamRecord`` goes to the ``Recorder`` and to streams.jsonl. Every foreign exception
(httpx, trio, OS) is mapped to an outcome in exactly one place,
``classify_exception``; ``trio.Cancelled`` is recorded as "cancelled" and
re-raised, never swallowed.

Outcomes (exactly one per started stream): completed, failed, truncated,
timeout, connect_error, http_error, cancelled. Error codes and texts from the
wire pass through ``_wire_detail`` (hopbench.measure._wire_text: bounded counter
names, the run's secrets scrubbed, the first few texts kept per error kind).
"""

from __future__ import annotations

import collections
import contextlib
import errno
import json
import math
import os
import random
import ssl
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import httpx
import trio

from ..measure._burst import FlaggedBurst, FlaggedLog
from ..workload._cancel import CANCEL_OUTCOME, ClientCancel, chooses
from .._clock import NS_PER_S, monotonic_offset_ns, now_ns, ns_to_s
from ._collector import CollectorWatch
from ..measure._counters import RunCounters
from .._errors import SSEError
from ..measure._inflight import AWAITING_HEADERS, CLOSING, CONNECTING, OUT, PHASES, STREAMING, WAITING, InFlightGauge
from ..measure._slo import judge, record_verdict
from ._dispatch import Dispatcher, Slot
from ..measure._hdr import warm_tables
from ._pacer import Pacer, real_clock, timerfd_available
from ..measure._meter import StreamMeter, measure
from ..measure._lines import GATEWAY_KIND_HEADERS, HeaderValues, capture_headers, overhead_line, stream_line
from ..measure._sinks import record_lengths, record_stream, recorder_sink
from ..config._profile import LoadSpec, Profile, Scenario, request_headers
from ..measure._recorder import IntervalSnapshot, Recorder
from ._runqueue import RunQueueWatch
from ._schedule import LATER_SENT, SENT, TAKEN, Arrivals, DueCount, WindowCount
from ._saturation import host_usage, sample_host
from ._transport import MalformedResponse, StreamTransport
from ..protocols import StreamResult, new_decoder
from ..workload._sessions import Conversation, record_turn
from ..workload._trace import TraceBodies, body_template
from ..workload._pool import Message, Picker, Prepared, encode_body
from ..protocols._marker import marked_template
from ..measure._wire_text import CodeNames, ErrorSamples, Scrubber, describe_exception, exception_chain
from ..sse import SSEScanner

__all__ = ["LoadRunner", "RunStats", "away_ns", "classify_exception", "interval_end", "REQUEST_ID_HEADER",
           "TICK_SLACK_NS", "UNREACHABLE_AFTER"]

REQUEST_ID_HEADER = "x-hopbench-request-id"
UNREACHABLE_AFTER = 20  # connection failures in a row, with no response between, that end a run
BACKOFF_MIN_S, BACKOFF_MAX_S = 0.01, 1.0  # a closed-loop user's pause after a connection error
_TARGET_POLL_S = 0.05  # how often the embedded emulator's process is looked at

_ERROR_BODY_LIMIT = 64 * 1024
#: how long the rest of a body may take once its terminal signal arrived
_AFTER_END_S = 1.0
RECENT_INTERVALS = 60  # timeline records RunStats keeps (the file has them all)
_SPENT_BODY = httpx.ByteStream(b"")  # a closed response's body (no cycle back to it)
_NO_SCOPE = contextlib.nullcontext()  # a stream without a client cancel: no scope of its own
_LOOP_PROBE_NS = 10_000_000  # the lag probe sleeps 10 ms at a time
_IDLE_SLACK_NS = 100_000_000  # an idle timeout may fire up to this much late
#: the loop-lag probe's late wake-ups kept for the idle check (``away_ns``): at
#: least 1 ms late, the newest 1,024 (over 10 s of a loop late at every probe)
_BLACKOUT_MIN_NS = 1_000_000
_BLACKOUTS_KEPT = 1024


def away_ns(blackouts: Sequence[tuple[int, int]], since_ns: int, now: int, due_ns: int) -> int:
    """How long the event loop was measured away between ``since_ns`` and ``now``, ns.

    The loop-lag probe sleeps until a deadline; when it wakes ``lag`` ns late at
    ``woke``, nothing in the loop ran on time during ``[woke - lag, woke]`` (the
    process was descheduled or the loop busy): no read could have been served.
    The idle check subtracts this from a silence (docs/results.md,
    ``idle_timeouts_withdrawn``): it is the client's share of it, however long
    ago in the silence it happened.

    Args:
        blackouts: the probe's late wake-ups ``(woke_ns, lag_ns)`` in wake order
            (they never overlap: the probe measures one after the other).
        since_ns: the start of the window (the last bytes' arrival), ns.
        now: the end of the window, ns.
        due_ns: when the probe is due now; past it, ``[due_ns, now]`` is a
            blackout not yet measured.

    Returns:
        The summed overlap of the blackouts with ``[since_ns, now]``, ns (>= 0).
        Never raises.
    """
    away = max(0, now - max(due_ns, since_ns))
    for woke, lag in reversed(blackouts):
        if woke <= since_ns:
            break
        away += max(0, min(woke, now) - max(woke - lag, since_ns))
    return away


def _stderr_notice(text: str) -> None:
    print(f"hopbench: {text}", file=sys.stderr, flush=True)


def classify_exception(exc: BaseException, phase: str) -> tuple[str, str]:
    """Map a foreign exception raised during a stream to (outcome, detail).

    The one place where httpx / trio / OS errors become outcomes (STYLE.md §4).

    Args:
        exc: what was raised.
        phase: "headers" (before the response head arrived) or "body".

    Returns:
        (outcome, detail): outcome one of "connect_error", "timeout",
        "truncated"; detail a short machine-readable reason (counter suffix).

    The whole ``__cause__`` / ``__context__`` chain is looked at: a file
    descriptor limit (EMFILE/ENFILE) anywhere in it is "connect_error" /
    "fd_limit" (hopbench's own limit, not the target's), a TLS error inside a
    ConnectError is "connect_error" / "tls", and a malformed response whose
    head had already arrived (``response_started``) is "truncated" /
    "malformed" whatever the phase.

    Raises:
        exc itself when it is neither an httpx, trio, OS nor SSE error: that is
        a bug in hopbench, and the run stops with partial results (crash).
    """
    chain = exception_chain(exc)
    # the reason may sit anywhere in the chain (httpx wraps OSError and
    # ssl errors; trio groups the per-address connect errors)
    if any(isinstance(e, OSError) and e.errno in (errno.EMFILE, errno.ENFILE) for e in chain):
        return "connect_error", "fd_limit"  # this process, not the target
    if isinstance(exc, MalformedResponse) and getattr(exc, "response_started", False):
        return "truncated", "malformed"  # a response that started is a broken stream
    if isinstance(exc, httpx.ConnectError) and any(isinstance(e, ssl.SSLError) for e in chain):
        return "connect_error", "tls"
    if isinstance(exc, httpx.ConnectTimeout):
        return "timeout", "connect"
    if isinstance(exc, httpx.PoolTimeout):
        return "timeout", "pool"
    if isinstance(exc, httpx.TimeoutException):
        return "timeout", "first_byte" if phase != "body" else "idle"
    if isinstance(exc, httpx.ConnectError):
        return "connect_error", "refused" if "refused" in str(exc).lower() else "connect"
    if isinstance(exc, SSEError):
        return "truncated", "oversize_event"
    if isinstance(exc, MalformedResponse):  # not HTTP/1.1: no usable response
        return ("truncated", "malformed") if phase == "body" else ("connect_error", "malformed_response")
    if isinstance(exc, (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError,
                        trio.BrokenResourceError, OSError)):
        if phase == "body":
            return "truncated", "closed" if isinstance(exc, httpx.RemoteProtocolError) else "reset"
        return "connect_error", "closed_before_response"
    if isinstance(exc, httpx.HTTPError):  # e.g. DecodingError of a compressed body
        return ("truncated" if phase == "body" else "connect_error"), type(exc).__name__
    raise exc


def _detail(result: StreamResult) -> str:
    """The counter detail of a stream whose body was read: the decoder's own
    reason when it gave one ("malformed_event", "abort", "usage_missing"),
    else failed by its in-band error code, truncated "closed" (the body ended
    without a terminal signal)."""
    if result.detail:
        return result.detail
    if result.outcome == "failed":
        return result.error_code or "unknown"
    return "closed" if result.outcome == "truncated" else ""


def _asks_usage(protocol: str, body: bytes) -> bool:
    """Whether a request body asks for usage in the stream (chat
    ``stream_options.include_usage``, OpenAI API reference: Create chat
    completion); the decoder then treats a missing usage chunk as a cut."""
    if protocol != "chat":
        return False
    try:
        data = json.loads(body)
    except ValueError:
        return False
    opts = data.get("stream_options") if isinstance(data, dict) else None
    return isinstance(opts, dict) and opts.get("include_usage") is True


def _http_error_code(body: bytes) -> str | None:
    """The error code of an HTTP error body (OpenAI: error.code or error.type;
    Anthropic: error.type), or None."""
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None
    if isinstance(data, dict):
        err = data.get("error")
        if isinstance(err, dict):
            for k in ("code", "type"):
                v = err.get(k)
                if isinstance(v, str) and v:
                    return v
    return None


@dataclass(slots=True)
class RunStats:
    """What the runner knows about the run itself (not per stream).

    Times are integer ns relative to the run start unless named otherwise.
    In-flight figures (hopbench.measure._inflight, docs/results.md "In flight"):
    ``in_flight``, ``peak_in_flight``, ``in_flight_area`` and ``steady_area``
    count what a gateway sees (request sent, not finished); ``peak_open``
    every stream the client held open; ``steady_phase_area`` the steady
    window's stream-ns per phase name; ``sent_measured`` the requests written
    to the target in the measured window (after warm-up, before the stop);
    ``due`` (open loop) the arrivals its schedule had due in that window
    (``hopbench.engine._schedule.DueCount``; docs/results.md, ``load.due``);
    ``arrivals_in_window``, ``sent_in_window``, ``later_sent_in_window`` (open
    loop) the arrivals due in that window that the client took up, those of them
    it wrote (after the stop too), and the later session turns due in it that it
    wrote (``hopbench.engine._schedule.WindowCount``: ``load.arrival_rate_rps``,
    ``load.sent``, ``load.later_turns_sent``).
    """

    started_ns: int = 0
    stop_ns: int = 0
    schedule_end_ns: int = 0
    ended_ns: int = 0
    interrupted_by: str | None = None
    requests_started: int = 0
    arrivals: int = 0
    max_in_flight_hits: int = 0
    in_flight: int = 0
    peak_in_flight: int = 0
    in_flight_area: float = 0.0  # stream-ns, for the time-weighted mean
    steady_area: float = 0.0
    peak_open: int = 0
    steady_phase_area: dict[str, int] = field(default_factory=dict)
    sent_measured: int = 0
    due: int = 0
    arrivals_in_window: int = 0
    sent_in_window: int = 0
    later_sent_in_window: int = 0
    steady_from_ns: int = 0
    last_change_ns: int = 0
    cpu_fractions: list[float] = field(default_factory=list)
    #: garbage collections during the run, their total, longest and p99 pause (ns)
    gc_collections: int = 0
    gc_pause_ns: int = 0
    gc_pause_max_ns: int = 0
    gc_pause_p99_ns: int = 0
    #: the process's and the machine's CPU use over the run (``_saturation.HostUsage.to_json``)
    host: dict[str, Any] | None = None
    #: the last ``RECENT_INTERVALS`` timeline records (bounded: a run of hours must not
    #: grow with its length) and how many intervals the run closed in all
    intervals: list[dict[str, Any]] = field(default_factory=list)
    interval_count: int = 0
    #: error kind (counter name, e.g. "http_error.501") -> its first messages
    #: or bodies, scrubbed of the run's secrets (hopbench.measure._wire_text)
    error_samples: dict[str, list[str]] = field(default_factory=dict)
    #: wire error codes counted as "other" (the distinct-code cap was reached)
    codes_folded: int = 0
    #: what cancelled the streams still open after the stop: "run.grace_s" (the
    #: grace period ran out) or "a second SIGINT" / "a second SIGTERM"; None: none was
    cancelled_by: str | None = None


TICK_SLACK_NS = 1_000_000
"""An interval tick closed within this long of its due time (1 ms: the
resolution of intervals.hlog's stamps) keeps the due time as its end, so
intervals stay on the ``run.interval_s`` grid (and exact under a fake clock)."""


_REQUEST_ID_RAW = REQUEST_ID_HEADER.encode("ascii")


class _Cookies(httpx.Cookies):
    """httpx's cookie jar, minus its work on responses that set no cookie.

    httpx hands every response to ``CookieJar.extract_cookies`` (~70 us each,
    wrapping the request and response for urllib), which finds nothing to do
    when there is no Set-Cookie header (RFC 6265 section 5.2; Set-Cookie2 is
    obsolete, RFC 6265 section 9.4, and urllib ignores it by default).
    """

    def extract_cookies(self, response: httpx.Response) -> None:
        if "set-cookie" in response.headers:
            super().extract_cookies(response)


class _Client(httpx.AsyncClient):
    """httpx's AsyncClient with ``_Cookies`` as its jar (otherwise the same)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.cookies = super().cookies  # the jar httpx made, as a _Cookies

    @property
    def cookies(self) -> httpx.Cookies:
        return self._jar

    @cookies.setter
    def cookies(self, cookies: Any) -> None:
        self._jar: httpx.Cookies = _Cookies(cookies)


@dataclass(slots=True, eq=False)
class _Plan:
    """One request made ready before its send (``LoadRunner._plan``): its
    scenario, what it was built from, its arm (compare rounds), the client's
    own cancel draw, scope, headers (with its id), (input, output) length
    shape, whether usage is expected, its in-flight stage ``[phase, written]``,
    and the httpx request (or the exception building it raised)."""

    sc: Scenario
    req: Prepared | None
    arm: tuple[str, str] | None
    cancel: Any
    scope_name: str
    headers: dict[str, str]
    shape: tuple[int | None, int] | None
    expect: bool
    stage: list[Any]
    request: httpx.Request | Exception | None = None


class _WriteTurns:
    """The writes of one due time's requests that the loop makes itself, in the
    order their streams were started (docs/workloads.md, "Trace replay": rows of
    one timestamp leave in file order).

    trio runs a batch of ready tasks in either order (trio/_core/_run.py reverses
    the batch half the time), and a stream that has to connect first writes
    later than one with an idle connection; so the order of the tasks says
    nothing about the order of the writes. Each stream of the due time holds a
    ticket (``take``, in the order the streams are started) and, at the start of
    its write (the transport's ``send_request_headers.started`` trace, just
    before the socket write, which begins with no checkpoint in between),
    awaits ``wait`` for its turn, then ``release``s it. A stream that ends
    without writing (failed, timed out, cancelled) releases its ticket as it
    ends (``LoadRunner._stream``'s ``finally``), so it never holds up the ones
    after it. One instance per due time; the streams' plans hold it, and it is
    freed with the last of them. A lone stream of its time never waits.
    """

    __slots__ = ("issued", "turn", "done", "waiting")

    def __init__(self) -> None:
        self.issued = 0  # tickets handed out, 0, 1, ...
        self.turn = 0  # the ticket whose write is next: every lower one wrote or ended
        self.done: set[int] = set()  # tickets above ``turn`` released out of turn (ended unwritten)
        self.waiting: dict[int, trio.Event] = {}  # ticket -> the event its stream waits on

    def take(self) -> int:
        """The next ticket."""
        k = self.issued
        self.issued += 1
        return k

    async def wait(self, k: int) -> None:
        """Return once every ticket below ``k`` was released (no wait if so already).

        Raises:
            trio.Cancelled: the stream's scope was cancelled meanwhile.
        """
        while k > self.turn:
            ev = self.waiting[k] = trio.Event()
            await ev.wait()

    def release(self, k: int) -> None:
        """Ticket ``k``'s stream writes now, or ended; idempotent. When the next
        turn's stream waits, wakes every waiting stream, in ticket order: when
        trio runs the next batch in that order (half its batches) they all write
        in it, one after the other; otherwise the ones not yet due wait again."""
        if k != self.turn:
            if k > self.turn:
                self.done.add(k)
            return
        self.turn += 1
        done = self.done
        while self.turn in done:
            done.discard(self.turn)
            self.turn += 1
        if self.turn in self.waiting:  # (else the next stream has not come to its write yet)
            waiting, self.waiting = self.waiting, {}
            for j in sorted(waiting):
                waiting[j].set()


DISPATCH = os.environ.get("HOPBENCH_DISPATCH", "1").strip().lower() not in ("0", "false", "no", "off")
"""Whether open loops write their requests from hopbench.engine._dispatch's thread
(where it can: see ``LoadRunner._dispatchable``). ``HOPBENCH_DISPATCH=0`` in
the environment (or ``false``, ``no``, ``off``) turns it off (docs/workloads.md, "Open-loop pacing"):
benchmarks compare the two, and a user can rule the thread out."""

LOOKAHEAD_NS = 250_000_000
"""How far ahead of its time an open-loop arrival is planned and queued for the
dispatcher (ns): the loop may be this late without the arrival leaving late.
A loop at ~80 % of a core falls this far behind for a moment when something
else takes the GIL (a checkpoint's statistics, the collector): at 50 ms,
600 requests/s left 10-100 ms late at p99 at each checkpoint (issue 17)."""

CATCH_UP_TURN_NS = 10_000_000
"""How long the open loop's planner may plan on in one event-loop turn while it
is behind (ns): see ``LoadRunner._plan_wait``."""

LOOKAHEAD_MIN_NS = 50_000_000
"""The lookahead while the queued requests hold ``QUEUED_BYTES_MAX`` or more (ns)."""

QUEUED_BYTES_MAX = 64 << 20
"""Wire bytes queued for the dispatcher beyond which the loop plans only
``LOOKAHEAD_MIN_NS`` ahead: large bodies at a high rate stay bounded in memory
(100 requests/s of 5 MB bodies: 125 MB at 250 ms)."""


def _plain_origins(arms: Any, base_url: str) -> list[Any]:
    """The plain-http target origins (the ``(name, url)`` arms', else ``base_url``'s), sorted."""
    urls = [url for _, url in arms] if arms else [base_url]
    origins = {StreamTransport.origin_of(httpx.Request("POST", u)) for u in urls}
    return sorted(o for o in origins if o[0] == b"http")


def _lookahead_ns(disp: Dispatcher) -> int:
    """How far ahead of its time the next open-loop arrival is planned (ns)."""
    return LOOKAHEAD_NS if disp.queued_bytes < QUEUED_BYTES_MAX else LOOKAHEAD_MIN_NS


SPARES_PER_MISS = 2
"""Spare connections the loop opens each time hopbench.engine._dispatch's thread found
no idle connection for an arrival (``LoadRunner._missed``)."""

SPARES_OPENING_MAX = 8
"""At most this many spare connections are being opened at once."""

SPARES_FAILED_MAX = 4
"""No more spare connections to an origin once this many of them failed to open."""

SPARES_AT_START_MAX = 64
"""At most this many spare connections are opened before an open loop starts."""

SPARES_RESERVE_NS = 150_000_000
"""The idle connections the open loop keeps ready while it runs cover this much
of its arrivals (ns): the requested rate times this, plus ``SPARES_PER_MISS``,
at most ``SPARES_RESERVE_MAX``. A stream's connection is idle again only once
the loop read its end: a loop held up 100 ms (a checkpoint's summary, the
first second's set-up) left 26-87 of 10,000 arrivals at 1,000/s with no idle
connection and late by as much with 50 ms (benchmarks/README.md, "The GIL and
the collector")."""

SPARES_RESERVE_MAX = 256
"""At most this many idle connections per origin are kept ready (``SPARES_RESERVE_NS``)."""

PREOPEN_MAX_S = 1.0
"""How long an open loop waits, before its clock starts, for its first spare
connections (``LoadRunner._preopen_spares``), s."""

SPARES_AHEAD_NS = 50_000_000
"""Spares opened before an open loop starts cover this much of its first
arrivals (ns): the requested rate times this, plus ``SPARES_PER_MISS``."""


SWITCH_INTERVAL_S = 0.00002
"""sys.setswitchinterval during an open-loop run (CPython's default is 0.005 s)."""


@contextlib.contextmanager
def _switch_interval(mode: str) -> Iterator[None]:
    """During an open-loop run (``mode`` "rate" or "trace"), let a thread that
    waits for the GIL have it after 20 us instead of CPython's 5 ms
    (sys.setswitchinterval): the dispatcher's thread (hopbench.engine._dispatch) writing
    a due request while the event loop runs, and the event loop while the
    ticker's publishing thread runs. Measured with benchmarks/bench_trace.py
    --canned at 300 requests/s: queue_delay p99 1.8-1.9 ms against 3.2-5.7 ms
    with 0.5 ms; at 1,000 requests/s p99 0.5-0.7 ms against 1.0-64 ms with 0.1 ms
    (benchmarks/README.md, "The GIL and the collector"). Restored after."""
    if mode not in ("rate", "trace"):
        yield
        return
    before = sys.getswitchinterval()
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    try:
        yield
    finally:
        sys.setswitchinterval(before)


def interval_end(now_rel_ns: int, due_rel_ns: int) -> int:
    """Where an interval closed at ``now_rel_ns`` ends (ns from the run start).

    Args:
        now_rel_ns: when the ticker actually closes the interval.
        due_rel_ns: when it was due (a multiple of the interval).

    Returns:
        ``due_rel_ns`` when the tick is within ``TICK_SLACK_NS`` of it, else
        ``now_rel_ns``: a late ticker's interval covers the time that really
        passed, so its rates, means and CPU share divide by that time.
    """
    return due_rel_ns if abs(now_rel_ns - due_rel_ns) <= TICK_SLACK_NS else now_rel_ns


class LoadRunner:
    """Runs one profile's load against ``base_url`` inside ``trio.run``.

    Args:
        profile: the validated profile.
        base_url: e.g. "http://127.0.0.1:8000" (the emulator's or the target's).
        recorder: receives the measured samples (after warm-up).
        warmup_recorder: receives the samples of streams started during warm-up.
        on_interval: called (synchronously) at each interval's end with the
            measured IntervalSnapshot, the warm-up one (empty after warm-up) and
            the interval's timeline record (a dict), e.g. to append to intervals.hlog.
        load: the share of the load this process generates (workers split it);
            defaults to the profile's.
        env: where secrets are read from (default os.environ).
        request_budget: this process's share of ``run.requests``.
        seed_offset: distinguishes workers (random streams and request ids).
        arrival_offset_ns: open loop only: the schedule's first arrival comes
            this long after the run start (workers phase-shift constant
            arrivals so that the merged schedule stays evenly spaced).
        arms: A/B arms (hopbench.config._arm_spec) as (name, base URL) pairs, or empty.
            Requests go to the arms in turn; a round of one request per arm
            sends one drawn (scenario, body, cancel choice) to each; each arm
            records under its name as the scope (``recorder``'s scopes).
        on_stream: called with one dict per finished stream (streams.jsonl):
            id, scenario, outcome, detail, status, and ns offsets from the run
            start (start, sent, headers, first_token, end) plus ttft_ns,
            e2e_ns, tokens and max_silence_ns.

    Attributes set after construction (optional):
        target_alive: polled every 50 ms during the run; returns why the
            target is gone (e.g. ``EmbeddedEmulator.exit_reason``) or None.
            A reason stops the run at once as "target lost: ...".
        notice: receives one-line texts the user must see now (what a signal
            does, a lost target); default: printed on stderr.

    The run also stops by itself when ``UNREACHABLE_AFTER`` connection
    attempts in a row fail with no response between them ("target
    unreachable" before any response, "target lost" after one); closed-loop
    users back off (``BACKOFF_MIN_S`` doubling to ``BACKOFF_MAX_S``) after a
    connection error once the target has answered.
    """

    def __init__(self, profile: Profile, base_url: str, recorder: Recorder,
                 warmup_recorder: Recorder,
                 on_interval: Callable[[IntervalSnapshot, IntervalSnapshot, dict[str, Any]], None] | None = None,
                 load: LoadSpec | None = None, env: dict[str, str] | None = None,
                 request_budget: int | None = None, seed_offset: int = 0,
                 on_stream: Callable[[dict[str, Any]], None] | None = None,
                 arrival_offset_ns: int = 0, arms: Sequence[tuple[str, str]] = ()) -> None:
        self.profile = profile
        self.base_url = base_url
        self.rec = recorder
        self.warm = warmup_recorder
        self.on_interval = on_interval
        self.load = load or profile.load
        self.stats = RunStats()
        self._rng = random.Random(profile.run.seed * 1_000_003 + seed_offset)
        #: which streams a scenario's ``cancel`` key closes: its own seeded
        #: stream of draws, so that the cancel key leaves the picks unchanged
        self._cancel_rng = random.Random(f"cancel:{profile.run.seed}:{seed_offset}")
        #: the measured streams the client cancelled on purpose (hopbench.workload._cancel)
        self.cancels: list[ClientCancel] = []
        #: the measured streams flagged proxy_buffering_suspected, re-judged after the run
        #: against the origin's record (hopbench.measure._burst; bounded, kept whatever run.stream_log)
        self.flagged = FlaggedLog()
        self._mono_offset_ns = 0  # CLOCK_MONOTONIC - trio's clock, taken at the run's start
        #: per scenario: which of its bodies each request sends (docs/workloads.md)
        self._pickers = {s.name: Picker(len(s.bodies), s.replacement) for s in profile.scenarios}
        self._headers = {p: request_headers(profile.target, p, env) for p in
                         {s.protocol for s in profile.scenarios}}
        self._weights = [s.weight for s in profile.scenarios]
        self._cum = []
        acc = 0.0
        for w in self._weights:
            acc += w
            self._cum.append(acc)
        self._requests_left = request_budget if request_budget is not None else profile.run.requests
        self._next_id = 0
        self._stopping = False
        self._t0 = 0
        self._id_prefix = f"{seed_offset}-"
        self.on_stream = on_stream
        self._arrival_offset_ns = arrival_offset_ns
        self._arms = tuple(arms)
        # an arm's own auth keys (hopbench.config._arm_spec: its target), else the profile's target
        arm_targets = {a.name: a.target for a in profile.arms if a.target is not None}
        self._arm_headers = {(name, p): request_headers(arm_targets[name], p, env)
                             for name, _ in self._arms if name in arm_targets for p in self._headers}
        self._arm_next = 0  # the arm the next request goes to
        self._round: tuple[Scenario, int, Any] | None = None  # the round's (scenario, body, cancel)
        self._stop_event = trio.Event()  # trio events are not bound to a run until used
        self._reached = False
        self._gauge = InFlightGauge(0)  # replaced at the run's start (its t0)
        self._collector: CollectorWatch | None = None
        self._connect_failures = 0  # in a row, since the last response
        env_map = os.environ if env is None else env
        secrets: list[str] = []
        for t in (profile.target, *arm_targets.values()):
            secrets += [env_map[v] for v in t.header_env.values() if v in env_map]
            if t.api_key_env is not None and t.api_key_env in env_map:
                secrets.append(env_map[t.api_key_env])
        self._scrubber = scrubber = Scrubber(secrets)
        self._codes = CodeNames(scrubber)
        self._samples = ErrorSamples(scrubber)
        self.stats.error_samples = self._samples.samples
        #: polled by a watcher: returns why the target is gone (e.g. the
        #: embedded emulator's process exited), or None while it is alive
        self.target_alive: Callable[[], str | None] | None = None
        #: the emulator processes hopbench started on this machine for the run (the
        #: embedded target's, the embedded arms', the [upstream] one): their CPU is
        #: sampled with the host's and kept apart from the neighbours' (hopbench.engine._saturation)
        self.emulator_pids: tuple[int, ...] = ()
        self.notice: Callable[[str], None] = _stderr_notice  #: what a signal does now
        self._last_error = ""  # the last stream exception's text, for the unreachable message
        self._token: Any = None  # the run's TrioToken, for stops from other threads
        self._expect_usage = {b: _asks_usage(s.protocol, b) for s in profile.scenarios for b in s.bodies}
        # trace replay (docs/workloads.md): bodies joined from shared pre-encoded blocks
        self._trace_bodies = (TraceBodies(self.load.trace, profile.run.seed)
                              if self.load.mode == "trace" else None)
        self._templates: dict[tuple[str, int], tuple[bytes, bytes, bool]] = {}
        self._request_templates: dict[tuple[int, str], tuple[httpx.URL, httpx.Headers,
                                                             dict[str, Any], dict[str, str]]] = {}
        self.pacer: Pacer | None = None  # the open loop's, while it runs (benchmarks read its stats)
        #: hopbench's own transport (None with httpx's), and the open loop's dispatcher while it runs
        self._transport: StreamTransport | None = None
        self._dispatcher: Dispatcher | None = None
        self._submitted = 0  # arrivals queued for the dispatcher
        self._plan_turn_ns = 0  # when the open loop's planner last yielded (_plan_wait)
        # the loop's own writes of the latest due time it started streams for (_write_turn)
        self._turns: _WriteTurns | None = None
        self._turns_due_ns = 0
        self._spares_opening = 0  # spare connections being opened (_open_spare)
        self._reserve = self._spares_reserve() if self.load.mode != "concurrency" else 0  # (_top_up)
        self._want_idle = 0  # idle connections a planned burst wants (_ahead)
        self._due_recent: collections.deque[int] = collections.deque()  # (_ahead)
        self._spares_failed: dict[Any, int] = {}  # origin -> spare connects that failed
        self._dispatchers: list[Dispatcher] = []  # this run's (the stop waits for their hand-overs)
        self._deadline_ns: int | None = None  # t0 + run.duration: no arrival at or after it
        self._drained = trio.Event()
        #: the generator ends by itself (a trace replayed once): the run ends when it has
        self._finite = self.load.mode == "trace" and not self.load.trace.loop
        self._last_due_ns: int | None = None  # the open loop's latest arrival taken up (clock ns)
        # a schedule that runs out by itself (a request budget, a trace without loop): one gap
        # of the whole run's rate, set as the clock starts; its window ends that long after its
        # last arrival (WindowCount.raise_floor, stats.schedule_end_ns; docs/results.md, "Load held")
        self._take_gap_ns: int | None = None
        #: the open loop's schedule (its arrival times, ns) and the count of those due in the
        #: measured window (load.due); set as the clock starts
        self._schedule: Iterator[int] | None = None
        self._due: DueCount | None = None
        #: the open loop's requests by due time in the measured window (load.sent, ...)
        self._window: WindowCount | None = None
        self._sessions_started: dict[str, int] = {}  # per scenario: sessions begun (their index)
        self._header_values = HeaderValues()
        self._record_headers = profile.run.record_headers + (  # behind a gateway: which gateway
            tuple(h for h in GATEWAY_KIND_HEADERS if h not in profile.run.record_headers)
            if getattr(profile, "upstream", None) is not None else ())
        # The loop-lag probe's state, read at every body read (client_lag_ns):
        # when it is due, and its last measured lag and wake-up stamp.
        self._probe_due_ns = 1 << 62
        self._lag_ns = 0
        self._lag_at_ns = -(1 << 62)
        #: the loop thread's run-queue wait in the loop's latest turn (entered in run())
        self._runq = RunQueueWatch()
        #: its late wake-ups (woke_ns, lag_ns), newest last: the idle check's ``away_ns``
        self._blackouts: collections.deque[tuple[int, int]] = collections.deque(maxlen=_BLACKOUTS_KEPT)
        # Gateway overhead (docs/gateway-overhead.md): each body's last user message
        # carries the request id too, and streams.jsonl gets per-event stamps.
        self._overhead = profile.upstream is not None
        self._markers = ({b: marked_template(s.protocol, b) for s in profile.scenarios for b in s.bodies}
                         if self._overhead else {})
        #: CLOCK_MONOTONIC (the emulator's clock) at the run's start t0, ns
        self.t0_mono_ns = 0

    # -- helpers ---------------------------------------------------------------
    def _pick(self) -> Scenario:
        scenarios = self.profile.scenarios
        if len(scenarios) == 1:
            return scenarios[0]
        x = self._rng.random() * self._cum[-1]
        for s, c in zip(scenarios, self._cum):
            if x < c:
                return s
        return scenarios[-1]

    def _take_request(self) -> bool:
        if self._stopping:
            return False
        if self._requests_left is None:
            return True
        if self._requests_left <= 0:
            return False
        self._requests_left -= 1
        return True

    def _sync_stats(self) -> None:
        """Copy the in-flight gauge's figures into ``self.stats``."""
        st, g = self.stats, self._gauge
        st.in_flight = g.in_flight
        st.peak_in_flight = g.peak_in_flight
        st.peak_open = g.peak_open
        area, steady = g.area, g.steady_area
        st.in_flight_area = area[AWAITING_HEADERS] + area[STREAMING]
        st.steady_area = steady[AWAITING_HEADERS] + steady[STREAMING]
        st.steady_phase_area = dict(zip(PHASES, steady))
        st.sent_measured = g.sent_measured
        st.last_change_ns = g.last_ns
        if self._window is not None:
            st.arrivals_in_window, st.sent_in_window, st.later_sent_in_window = self._window.counts

    def _make_client(self) -> httpx.AsyncClient:
        t = self.profile.target
        to = self.profile.run.timeouts
        conn_s = ns_to_s(to.connect_ns) if to.connect_ns else None
        # Read timeouts are enforced by the runner's own deadlines (first byte,
        # idle, total), so they can be told apart; httpx's read timeout is off.
        timeout = httpx.Timeout(connect=conn_s, read=None, write=conn_s, pool=conn_s)
        if t.transport == "hopbench":
            self._transport = own = StreamTransport(verify=t.verify_tls)
            transport: httpx.AsyncBaseTransport = own
        else:
            n = max(self.load.concurrency, self.load.max_in_flight)
            transport = httpx.AsyncHTTPTransport(
                verify=t.verify_tls,
                limits=httpx.Limits(max_connections=n, max_keepalive_connections=n))
        return _Client(base_url=self.base_url, transport=transport, timeout=timeout,
                       trust_env=t.transport == "httpx")

    def _build_request(self, path: str, content: bytes, base: dict[str, str], request_id: str,
                       trace: Callable[[str, dict[str, Any]], Any]) -> httpx.Request:
        """The request ``client.build_request("POST", path, content=..., headers={**base,
        REQUEST_ID_HEADER: request_id}, extensions={"trace": trace})`` would build, for a
        sixth of its CPU (~45 us instead of ~300 us): the URL joined with the base URL,
        the client's headers merged with ``base`` and the timeouts are worked out once
        per (``base``, ``path``) by httpx itself, then reused. Once the target has set a
        cookie (the client's jar is not empty) every request is built by httpx, with it.

        Raises:
            whatever httpx raises for a bad URL or header (the caller's boundary maps it).
        """
        if self._client.cookies:
            return self._client.build_request("POST", path, content=content,
                                              headers={**base, REQUEST_ID_HEADER: request_id},
                                              extensions={"trace": trace})
        key = (id(base), path)
        tpl = self._request_templates.get(key)
        if tpl is None:
            probe = self._client.build_request("POST", path, content=b"", headers=base)
            merged = httpx.Headers(probe.headers)
            for name in (REQUEST_ID_HEADER, "content-length"):  # per request
                if name in merged:
                    del merged[name]
            # (base is kept referenced: its id stays its own while the template lives)
            tpl = (probe.url, merged, probe.extensions["timeout"], base)
            self._request_templates[key] = tpl
        if self._transport is None:  # httpx's transport: it frames the body by the request's headers
            return httpx.Request("POST", tpl[0], content=content,
                                 headers=[*tpl[1].raw, (_REQUEST_ID_RAW, request_id.encode("ascii"))],
                                 extensions={"trace": trace, "timeout": tpl[2]})
        # hopbench's transport writes Content-Length itself (_transport._request_bytes):
        # the body as a ready stream skips httpx's encoding of it and its defaults
        # (Host and the rest are in the template already), ~60 us a request
        headers = httpx.Headers(tpl[1])
        headers[REQUEST_ID_HEADER] = request_id
        request = httpx.Request("POST", tpl[0], headers=headers, stream=httpx.ByteStream(content),
                                extensions={"trace": trace, "timeout": tpl[2]})
        request.read()  # (its .content, which the dispatcher thread's wire form reads)
        return request

    # -- the run ---------------------------------------------------------------
    async def run(self) -> RunStats:
        """Generate the load until the duration or request count is reached or a
        signal arrives; in-flight streams then get ``run.grace_s`` to finish and
        are cancelled (outcome "cancelled") after that.

        Returns:
            RunStats of the run. Never raises for server behaviour.
        """
        run = self.profile.run
        self._generator_done = trio.Event()
        self._idle_changed = trio.Event()
        self._token = trio.lowlevel.current_trio_token()
        # the client (and its TLS context) is made before the clock starts
        async with self._make_client() as client:
            # start-up objects, the client's among them, are frozen out of the
            # collector's scans (hopbench/engine/_collector.py); its pauses are measured
            warm_tables()
            if self.load.mode != "concurrency" and real_clock():
                timerfd_available()  # (looked up once: the pacer is then made at once)
            if self.load.mode != "concurrency" and self._dispatchable():
                await self._preopen_spares()
            with CollectorWatch() as collector, _switch_interval(self.load.mode), self._runq:
                self._collector = collector
                self._client = client
                self._t0 = t0 = now_ns()
                self._deadline_ns = t0 + run.duration_ns if run.duration_ns else None
                self._mono_offset_ns = monotonic_offset_ns()
                self.t0_mono_ns = t0 + self._mono_offset_ns  # t0 on CLOCK_MONOTONIC (gateway overhead)
                st = self.stats
                st.started_ns = 0
                st.last_change_ns = t0
                st.steady_from_ns = run.warmup_ns + self.load.ramp_up_ns
                self._gauge = InFlightGauge(t0, t0 + st.steady_from_ns, t0 + run.warmup_ns)
                if self.load.mode != "concurrency" and (self._requests_left is not None or self._finite) \
                        and not (self.load.mode == "trace" and self.load.trace.one_instant):
                    # (a trace at one instant has no rate: the gap after it would be made up,
                    # 1 ms / its entries, and would cut off arrivals taken up 13 ms late;
                    # it has no window and is judged on its due arrivals alone: docs/results.md)
                    self._take_gap_ns = int(NS_PER_S / (self.load.rate_rps * self.load.trace_part[1]))
                self._cpu0 = time.thread_time_ns()
                host0 = sample_host(emulator_pids=self.emulator_pids)
                self._area0 = [0] * len(PHASES)
                async with trio.open_nursery() as watchers:
                    watchers.start_soon(self._loop_lag_probe)
                    watchers.start_soon(self._ticker)
                    watchers.start_soon(self._signals, watchers.cancel_scope)
                    if self.target_alive is not None:
                        watchers.start_soon(self._watch_target, self.target_alive)
                    async with trio.open_nursery() as streams:
                        self._streams = streams
                        gen = trio.CancelScope()
                        streams.start_soon(self._generate, gen)
                        deadline = self._deadline_ns
                        with trio.move_on_at(ns_to_s(deadline) if deadline else math.inf):
                            await self._stop_requested()
                        self._stop(gen)
                        with trio.move_on_after(ns_to_s(run.grace_ns)) as grace:
                            await self._wait_idle()
                        if grace.cancelled_caught and st.cancelled_by is None:
                            st.cancelled_by = "run.grace_s"
                        streams.cancel_scope.cancel()
                    # Cancelling the watchers waits for a ticker that is still
                    # publishing in its thread: only then may the last interval be
                    # folded (two folds at once would race on the totals).
                    watchers.cancel_scope.cancel()
                self._final_interval()
        st.gc_collections = collector.collections
        st.gc_pause_ns, st.gc_pause_max_ns = collector.pause_ns, collector.pause_max_ns
        st.gc_pause_p99_ns = collector.pause_percentile_ns(99.0)
        t_end = now_ns()
        st.ended_ns = t_end - t0
        st.host = host_usage(host0, sample_host(emulator_pids=self.emulator_pids), st.ended_ns).to_json()
        self._gauge.advance(t_end)
        self._sync_stats()
        return st

    def counters(self) -> RunCounters:
        """The run's counters as one mergeable record: ``stats`` and the measured
        recorder's "all" counters (``hopbench.measure._counters``). Call after :meth:`run`
        (or after a stop before the start: the record is then empty)."""
        return RunCounters.of(self.stats, self.rec.snapshot())

    async def _stop_requested(self) -> None:
        async with trio.open_nursery() as n:
            async def on(ev: trio.Event) -> None:
                await ev.wait()
                n.cancel_scope.cancel()
            n.start_soon(on, self._stop_event)
            if self._requests_left is not None or self._finite:
                n.start_soon(on, self._generator_done)

    def request_stop(self, reason: str | None = None) -> None:
        """Stop generating new load (e.g. on SIGINT); in-flight streams get the grace period.

        Safe from the run's own tasks, from other threads (``on_interval``
        callbacks run in a worker thread) and before the run starts.
        """
        if reason and self.stats.interrupted_by is None:
            self.stats.interrupted_by = reason
        try:
            trio.lowlevel.current_task()
        except RuntimeError:  # not in the run's thread
            if self._token is not None:
                try:
                    trio.from_thread.run_sync(self._stop_event.set, trio_token=self._token)
                except trio.RunFinishedError:
                    pass
                return
        self._stop_event.set()

    def _stop(self, gen: trio.CancelScope) -> None:
        t = now_ns()
        self._gauge.stop(t)
        self._sync_stats()
        self._stopping = True
        self.stats.stop_ns = t - self._t0
        if self._due is not None:
            self.stats.due = self._due_at(t)
        if self._window is not None:  # (its deadline bounds it too)
            self._window.stop(t)
        # Closed-loop users run their streams inside the generator: they stop by
        # themselves after the current stream (``_take_request``), which keeps
        # the grace period for in-flight streams. The open-loop scheduler only
        # sleeps between arrivals, so it can be cancelled outright.
        if self.load.mode != "concurrency":
            gen.cancel()
            if self._dispatcher is not None:  # nothing is written after the stop
                self._dispatcher.close()

    async def _wait_idle(self) -> None:
        # Arrivals the dispatcher's thread took up before the stop (written, or
        # handed over to be written) reach the loop through run_sync_soon: they
        # are started (and counted open) before the wait for the open ones, so
        # that they get the grace period too (a review found them cancelled at
        # once). _stop closed the thread: ``taken`` no longer grows.
        while any(d.closed and d.error is None and d.handed < d.taken for d in self._dispatchers):
            await trio.sleep(0)
        while self._gauge.open > 0:
            await self._idle_changed.wait()

    async def _watch_target(self, alive: Callable[[], str | None]) -> None:
        """Stop the run as soon as ``alive()`` says the target is gone (the
        embedded emulator's process exited): its streams would only fail."""
        while True:
            reason = alive()
            if reason is not None:
                if not self._stopping:
                    t_s = (now_ns() - self._t0) / NS_PER_S
                    if self.stats.interrupted_by is None:
                        self.stats.interrupted_by = f"target lost: {reason} {t_s:.1f} s into the run"
                        self.notice(f"{self.stats.interrupted_by}; stopping the run")
                    self.request_stop()
                return
            await trio.sleep(_TARGET_POLL_S)

    async def _signals(self, scope: trio.CancelScope) -> None:
        import signal
        try:
            with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as sigs:
                count = 0
                async for signum in sigs:
                    count += 1
                    name = signal.Signals(signum).name
                    self.request_stop(name)
                    if count == 1:
                        grace_s = self.profile.run.grace_ns / NS_PER_S
                        self.notice(f"{name}: stopping: no new streams; the {self._gauge.open} in flight "
                                    f"get {grace_s:g} s to finish ({name} again cancels them now)")
                    elif count == 2:  # a second signal: no grace
                        if self._gauge.open and self.stats.cancelled_by is None:
                            self.stats.cancelled_by = f"a second {name}"
                        self.notice(f"{name} again: cancelling the streams in flight now ({self._gauge.open} "
                                    "open), without waiting for run.grace_s; then writing results")
                        self._streams.cancel_scope.cancel()
                    else:
                        self.notice(f"{name}: already stopping; writing results")
        except RuntimeError:  # not in the main thread (tests, workers): no handlers
            await trio.sleep_forever()

    async def _generate(self, scope: trio.CancelScope) -> None:
        with scope:
            if self.load.mode == "concurrency":
                await self._closed_loop()
            elif self.load.mode == "trace":
                await self._trace_loop()
            else:
                await self._open_loop()
        if self._take_gap_ns is not None and not self._stopping and self._last_due_ns is not None:
            # The schedule ran out by itself (a request budget, a trace without loop):
            # the load's window ends one mean gap after its last arrival, not after
            # the streams still open drain (docs/results.md, achieved_rate_rps). The gap is
            # the whole run's: a worker's share (rate / n, trace_part) interleaves with the
            # others', whose ends are merged by max (hopbench.measure._counters)
            self.stats.schedule_end_ns = self._last_due_ns - self._t0 + self._take_gap_ns
            if self._window is not None:  # arrivals a late client took up after it are not its load
                self._window.end(self._t0 + self.stats.schedule_end_ns)
        # closed loop with a request budget: users end by themselves
        if self._requests_left is not None or self._finite:
            with trio.CancelScope(shield=True):
                await self._wait_idle()
            self._generator_done.set()

    async def _closed_loop(self) -> None:
        n = self.load.concurrency
        ramp = self.load.ramp_up_ns
        async with trio.open_nursery() as users:
            for i in range(n):
                users.start_soon(self._user, self._t0 + (ramp * i) // n)

    async def _user(self, start_ns: int) -> None:
        if start_ns > self._t0:
            await trio.sleep_until(ns_to_s(start_ns))
        backoff_s = 0.0
        while self._take_request():
            sc = self._pick()
            if sc.session is not None:  # a whole session: its turns one after the other
                outcome = await self._session(sc, None)
            else:
                outcome = await self._stream(sc, None)
            if outcome == "connect_error" and self._reached:
                # A target that refuses connections answers in microseconds: a
                # user that retried at once would be a hot loop of errors. Back
                # off (10 ms doubling to 1 s) until a stream connects again.
                # (Before any response the unreachable check ends the run after
                # UNREACHABLE_AFTER failures: no pause needed to get there.)
                backoff_s = min(max(2 * backoff_s, BACKOFF_MIN_S), BACKOFF_MAX_S)
                await trio.sleep(backoff_s)
                continue
            backoff_s = 0.0
            # A stream can fail without ever yielding (e.g. a request that cannot
            # be sent): without this the user would spin, starving every other
            # task, the stop and the signal handlers.
            await trio.lowlevel.checkpoint()

    def _due_at(self, stop_ns: int) -> int:
        """The arrivals the open loop's schedule had due from the measured start to
        ``stop_ns`` (clock ns) or the deadline, whichever is first: those taken up,
        and those the loop had not reached yet (continued on a fork of the schedule;
        a trace's own rest, which the cancelled generator no longer reads). At most
        the rest of a ``run.requests`` budget of the latter."""
        assert self._due is not None
        end = stop_ns if self._deadline_ns is None else min(stop_ns, self._deadline_ns)
        sched = self._schedule
        rest: Iterator[int] = iter(())
        if isinstance(sched, Arrivals):
            rest = sched.fork()
        elif sched is not None:
            rest = sched
        return self._due.at_stop(end, rest, self._requests_left)

    async def _open_loop(self) -> None:
        arrivals = Arrivals(self._t0 + self._arrival_offset_ns, self.load.rate_rps,
                            self.load.arrival == "poisson", self._rng)
        self._schedule = arrivals
        self._due = DueCount(self._t0 + self.profile.run.warmup_ns)
        self._window = WindowCount(self._due.from_ns, self._deadline_ns)
        async with self._open_pacer() as pacer:
            await self._open_arrivals(pacer, arrivals)

    async def _open_arrivals(self, pacer: Pacer, arrivals: Arrivals) -> None:
        st = self.stats
        due, window = self._due, self._window
        assert due is not None and window is not None
        # (not st.arrivals: with the dispatcher an arrival counts only once written)
        for intended in arrivals:
            if self._deadline_ns is not None and intended >= self._deadline_ns:
                due.ended()
                return  # the run's window is [t0, t0 + duration): nothing is due at its end
            due.pending(intended)
            disp = self._dispatcher
            wake = await self._plan_wait(pacer, disp, intended)
            due.passed(wake)  # (the pacer never returns early: every time before it is past)
            if not self._take_request():
                due.ended()
                return
            due.planned()
            self._last_due_ns = intended
            if self._take_gap_ns is not None:  # (WindowCount.raise_floor: a finite schedule)
                window.raise_floor(intended + self._take_gap_ns)
            if disp is not None:
                self._submit(disp, intended, self._pick(), None)
                continue
            t = now_ns()
            lag = t - intended
            self._recorder_for(intended).record_global("schedule_lag", max(lag, 0))
            st.arrivals += 1
            window.note(TAKEN, intended, t)
            # every stream the client holds counts, also those spawned but not
            # yet running (waiting): max_in_flight is a hard bound on the client
            if self._gauge.open >= self.load.max_in_flight:
                st.max_in_flight_hits += 1
                self._recorder_for(intended).incr_global("max_in_flight_hits")
                continue
            sc = self._pick()
            if sc.session is not None:  # a session arrives: its turns follow by themselves
                self._streams.start_soon(self._session, sc, intended)
                continue
            self._gauge.move(t, OUT, WAITING)  # waits for the loop to run its task
            self._streams.start_soon(self._stream, sc, intended, True, None, None, None, t)

    async def _trace_loop(self) -> None:
        """Replay the trace: each entry at its scheduled time (docs/workloads.md,
        "Trace replay"); latency counts from that time, as in the open loop."""
        async with self._open_pacer() as pacer:
            await self._trace_arrivals(pacer)

    async def _trace_arrivals(self, pacer: Pacer) -> None:
        spec = self.load.trace
        scenarios = self.profile.scenarios
        st = self.stats
        t0 = self._t0
        entries = spec.arrivals(*self.load.trace_part)
        # the schedule's times (load.due): the entries the loop has not reached yet, read
        # only once the loop stopped reading them (the rest of a schedule cut by the stop)
        self._schedule = (t0 + offset_ns for offset_ns, _, _ in entries)
        due = self._due = DueCount(t0 + self.profile.run.warmup_ns)
        window = self._window = WindowCount(due.from_ns, self._deadline_ns)
        for offset_ns, i, rep in entries:
            intended = t0 + offset_ns
            if self._deadline_ns is not None and intended >= self._deadline_ns:
                due.ended()
                return  # the run's window is [t0, t0 + duration): nothing is due at its end
            due.pending(intended)
            disp = self._dispatcher
            wake = await self._plan_wait(pacer, disp, intended)
            due.passed(wake)  # (the pacer never returns early: every time before it is past)
            if not self._take_request():
                due.ended()
                return
            due.planned()
            self._last_due_ns = intended
            if self._take_gap_ns is not None:  # (WindowCount.raise_floor: a finite schedule)
                window.raise_floor(intended + self._take_gap_ns)
            if disp is not None:
                sc = scenarios[spec.scenario_index[i]]
                self._submit(disp, intended, sc, self._trace_request(sc, i, rep))
                continue
            t = now_ns()
            rec = self._recorder_for(intended)
            rec.record_global("schedule_lag", max(t - intended, 0))
            st.arrivals += 1
            window.note(TAKEN, intended, t)
            if self._gauge.open >= self.load.max_in_flight:
                st.max_in_flight_hits += 1
                rec.incr_global("max_in_flight_hits")
                continue
            sc = scenarios[spec.scenario_index[i]]
            req = self._trace_request(sc, i, rep)
            self._gauge.move(t, OUT, WAITING)
            self._streams.start_soon(self._stream, sc, intended, True, req, None, None, t,
                                     self._write_turn(intended))

    def _write_turn(self, due_ns: int) -> tuple[_WriteTurns, int]:
        """A ticket among the loop's own writes of the requests due at ``due_ns``
        (clock ns), for a stream about to be started: arrivals come in due order,
        so the streams of one due time get theirs one after the other, in the
        order they are started (``_WriteTurns``). Different due times are not
        ordered against each other."""
        turns = self._turns
        if turns is None or due_ns != self._turns_due_ns:
            turns = self._turns = _WriteTurns()
            self._turns_due_ns = due_ns
        return turns, turns.take()

    @contextlib.asynccontextmanager
    async def _open_pacer(self) -> Any:
        """The open loop's pacer (hopbench.engine._pacer: a timerfd wake, due arrivals
        sent in bounded bursts), kept on ``self.pacer`` for benchmarks, and its
        dispatcher (``self._dispatcher``, when ``_dispatchable()``). On a normal
        exit waits until the dispatcher took up every queued arrival and the
        loop started them; closes both after (queued arrivals dropped)."""
        pacer = self.pacer = Pacer()
        disp = None
        if self._dispatchable():
            assert self._transport is not None
            self._drained = trio.Event()
            disp = self._dispatcher = Dispatcher(
                self._transport, self._handed, self._token.run_sync_soon,
                now_ns() - time.perf_counter_ns(), lambda: self._gauge.open, self.load.max_in_flight)
            self._submitted = 0
            self._dispatchers.append(disp)
            disp.start()
            self.rec.incr_global("dispatcher_threads")  # (the measured record: whatever the warm-up)
            self._open_spares_at_start()
        try:
            yield pacer
            if disp is not None:
                while disp.handed < self._submitted and disp.error is None:
                    self._drained = trio.Event()
                    await self._drained.wait()
        finally:
            pacer.close()
            if disp is not None:
                self._dispatcher = None
                disp.close()
                if disp.error is not None:
                    raise RuntimeError(f"the open loop's dispatcher thread failed: {disp.error!r}") \
                        from disp.error

    async def _plan_wait(self, pacer: Pacer, disp: Dispatcher | None, intended: int) -> int:
        """Wait until the arrival due at ``intended`` is to be planned; returns
        that time (ns): ``intended`` itself without a dispatcher, else the
        lookahead before it.

        The pacer yields to the loop after ``BURST_MAX`` due arrivals in a row
        (hopbench.engine._pacer), so that streams run between sends. With the
        dispatcher, planning is not sending: an arrival is planned well before
        its time, and the planner that falls behind (its next arrival due in
        less than half the lookahead) plans on without yielding, for at most
        ``CATCH_UP_TURN_NS`` a turn. With the bursts alone, it planned 16
        arrivals a turn: a loop whose turns took 20-40 ms (the first second, a
        publishing second) planned under 1,000 a second, its queue ran dry and
        the lag grew until the end (1,000 requests/s: p99 50-400 ms in a third
        of the runs; benchmarks/README.md, "The GIL and the collector")."""
        if disp is None:
            await pacer.wait(intended)
            return intended
        ahead = _lookahead_ns(disp)
        wake = intended - ahead
        now = now_ns()
        if intended - now < ahead // 2 and now - self._plan_turn_ns < CATCH_UP_TURN_NS:
            return wake  # behind (and so past its wake): no yield this turn
        wakes = pacer.stats.wakes
        await pacer.wait(wake)
        if pacer.stats.wakes != wakes:  # it yielded: a new turn
            self._plan_turn_ns = now_ns()
        return wake

    def _dispatchable(self) -> bool:
        """Whether this run's open loop writes from hopbench.engine._dispatch's thread:
        hopbench's own transport, a plain-http target, trio's real clock, and
        ``DISPATCH`` on. (TLS connections, a fake clock and httpx's transport
        pace on the loop: docs/workloads.md, "Open-loop pacing".)"""
        return (DISPATCH and getattr(self._transport, "take_idle_fd", None) is not None and real_clock()
                and self.base_url.lower().startswith("http://"))

    def _spares_at_start(self) -> int:
        """How many spare connections an open loop opens per target origin as
        its clock starts (docs/workloads.md, "Open-loop pacing"): the arrivals
        due in its first ``SPARES_AHEAD_NS``, or the requested rate (a trace: its
        first second's) times that, whichever is more, plus ``SPARES_PER_MISS``;
        at most ``SPARES_AT_START_MAX`` and ``max_in_flight``."""
        if self.load.mode == "rate":
            rate, first = self.load.rate_rps, 0
        else:
            spec, part = self.load.trace, self.load.trace_part
            rate = float(spec.scheduled_between(0, NS_PER_S, *part))
            first = spec.scheduled_between(0, SPARES_AHEAD_NS, *part)  # a burst at the start
        n = max(math.ceil(rate * SPARES_AHEAD_NS / NS_PER_S), first) + SPARES_PER_MISS
        return min(n, SPARES_AT_START_MAX, self.load.max_in_flight)

    async def _preopen_spares(self) -> None:
        """Open an open loop's first spare connections (``_spares_at_start`` per
        origin) before the clock starts, waiting at most ``PREOPEN_MAX_S``, as
        wrk2 connects before it starts: an arrival due at the start then finds
        an idle connection and the dispatcher's thread writes it on time (it
        waited behind the loop's connect, 12-46 ms late on a busy machine, and
        in a short run that one arrival was the schedule lag's p99: "saturated").
        What is not open by then is opened as the clock starts, as before."""
        assert isinstance(self._transport, StreamTransport)
        n = self._spares_at_start()
        with trio.move_on_after(PREOPEN_MAX_S):
            async with trio.open_nursery() as nursery:
                for origin in _plain_origins(self._arms, self.base_url):
                    for _ in range(n):
                        self._spares_opening += 1
                        nursery.start_soon(self._open_spare, origin)

    def _open_spares_at_start(self) -> None:
        """Start opening the spare connections of ``_spares_at_start`` for each
        plain-http target origin (the arms' or the target's) that are not idle
        already (``_preopen_spares``), in the background as the clock starts:
        an arrival due before they are open is written by the loop, as without
        them. Not awaited: a target that does not accept delays nothing and is
        left to the requests to report."""
        assert isinstance(self._transport, StreamTransport)
        n = self._spares_at_start()
        for origin in _plain_origins(self._arms, self.base_url):
            for _ in range(n - self._transport.idle_count(origin)):
                self._streams.start_soon(self._open_spare, origin)
                self._spares_opening += 1

    async def _open_spare(self, origin: Any) -> None:
        """One spare connection to ``origin``: counted in "spare_connections", or,
        when it could not be opened or kept, in "spare_connection_failures"."""
        assert isinstance(self._transport, StreamTransport)
        connect_ns = self.profile.run.timeouts.connect_ns
        opened = False
        try:
            if await self._transport.open_spare(origin, ns_to_s(connect_ns) if connect_ns else None):
                self.rec.incr_global("spare_connections")
                opened = True
            else:
                self.rec.incr_global("spare_connection_failures")
                self._spares_failed[origin] = self._spares_failed.get(origin, 0) + 1
        finally:
            self._spares_opening -= 1
        if opened and self._want_idle > self._reserve and self._dispatcher is not None:
            self._top_up(origin)  # a planned burst's spares, one after another (_ahead)

    def _spares_reserve(self) -> int:
        """The idle connections per origin the open loop keeps ready while the
        dispatcher's thread writes (``_top_up``): the requested rate's arrivals
        in ``SPARES_RESERVE_NS`` plus ``SPARES_PER_MISS``, at most
        ``SPARES_RESERVE_MAX`` and ``max_in_flight`` (no more streams, so no
        more connections, are ever open at once)."""
        return min(math.ceil(self.load.rate_rps * SPARES_RESERVE_NS / NS_PER_S) + SPARES_PER_MISS,
                   SPARES_RESERVE_MAX, self.load.max_in_flight)

    def _ahead(self, origin: Any, due_ns: int) -> None:
        """An arrival due at ``due_ns`` was queued for the thread (the planner,
        up to the lookahead before it): keep as many idle connections of
        ``origin`` as arrivals are due in the ``SPARES_RESERVE_NS`` up to it, plus
        ``SPARES_PER_MISS`` (a trace of 2 rows, a 3 s gap, then 150 rows 0.1 ms
        apart: the thread wrote 9 of the 152, finding the handful of idle
        connections the trace's mean rate keeps, and the loop connected for the
        rest), at most ``SPARES_RESERVE_MAX`` and ``max_in_flight``; at least
        the rate's reserve (``_top_up``). Opened as the burst is planned, ahead
        of its time, and topped up as each spare opens (``_open_spare``)."""
        recent = self._due_recent
        recent.append(due_ns)
        while recent[0] <= due_ns - SPARES_RESERVE_NS:  # (a half-open window: a steady rate's
            recent.popleft()                              # count is its reserve's, no more)
        want = min(len(recent) + SPARES_PER_MISS, SPARES_RESERVE_MAX, self.load.max_in_flight)
        self._want_idle = max(want, self._reserve)
        if want > self._reserve:
            self._top_up(origin)

    def _top_up(self, origin: Any) -> None:
        """Open spares of ``origin`` while fewer than the idle connections
        wanted (the rate's reserve, ``_spares_reserve()``, or the arrivals
        planned in a burst, ``_ahead``) are idle or being opened, so that a load
        whose streams pile up (the first seconds of an open loop of long
        streams: in flight grows to rate x stream length) finds one idle at
        each arrival instead of missing (``_missed``) once per new connection.
        Called as the thread takes an idle one, as a burst is planned and as a
        spare opens. Bounded as ``_missed``: ``SPARES_OPENING_MAX`` being
        opened, none to an origin after ``SPARES_FAILED_MAX`` failures, plain
        http only. Raises RuntimeError once the streams' nursery closed."""
        assert isinstance(self._transport, StreamTransport)
        if (origin[0] != b"http" or self._spares_failed.get(origin, 0) >= SPARES_FAILED_MAX):
            return
        want = max(self._reserve, self._want_idle)
        n = min(want - self._transport.idle_count(origin) - self._spares_opening,
                SPARES_OPENING_MAX - self._spares_opening)
        for _ in range(n):
            self._streams.start_soon(self._open_spare, origin)
            self._spares_opening += 1

    def _missed(self, origin: Any) -> None:
        """The dispatcher's thread found no idle connection for an arrival (the
        loop writes it on a new one): open ``SPARES_PER_MISS`` spare connections
        so that the pool grows ahead of the load (at most ``SPARES_OPENING_MAX``
        being opened at once). Never for a TLS origin (the thread does not write
        on those), nor once ``SPARES_FAILED_MAX`` spares of that origin failed
        (the target refuses them: its requests report why). Raises RuntimeError
        once the streams' nursery closed (the run is over)."""
        if (self._spares_opening + SPARES_PER_MISS > SPARES_OPENING_MAX or origin[0] != b"http"
                or self._spares_failed.get(origin, 0) >= SPARES_FAILED_MAX):
            return
        for _ in range(SPARES_PER_MISS):
            self._streams.start_soon(self._open_spare, origin)
            self._spares_opening += 1

    def _submit(self, disp: Dispatcher, intended: int, sc: Scenario, req: Prepared | None) -> None:
        """Plan one arrival and queue it for the dispatcher's thread."""
        plan = None if sc.session is not None else self._plan(sc, req)
        data = None
        assert self._transport is not None
        if plan is not None and isinstance(plan.request, httpx.Request):
            try:
                data = self._transport.wire(plan.request)
            except httpx.LocalProtocolError:
                data = None  # sent by the loop, and refused there (the stream's boundary)
            origin = self._transport.origin_of(plan.request)
            if origin[0] != b"http":  # TLS (an arm's https URL): the loop writes it
                data = None
        else:
            origin = None
        self._submitted += 1
        disp.submit(Slot(intended, origin, data, (sc, plan)))
        if data is not None:
            self._ahead(origin, intended)

    def _handed(self, slot: Slot | None) -> None:
        """The dispatcher's thread took ``slot`` up (run on the loop's thread by
        ``run_sync_soon``): count it and start its stream. None: the thread
        failed (the run stops; the error is raised as the open loop ends)."""
        disp = self._dispatchers[-1] if self._dispatchers else None  # the open loop's (one at a time)
        if slot is None:
            self._drained.set()
            self.request_stop("the open loop's dispatcher thread failed")
            return
        if disp is not None:
            disp.handed += 1
            if disp.handed >= self._submitted:
                self._drained.set()
        intended = slot.due_ns
        sc, plan = slot.payload
        assert self._transport is not None
        for conn in slot.stale:
            self._transport.put_back(conn)
        st = self.stats
        rec = self._recorder_for(intended)
        st.arrivals += 1
        if self._window is not None:
            self._window.note(TAKEN, intended, now_ns(), slot.taken_ns)
        if slot.full:
            rec.record_global("schedule_lag", max(slot.taken_ns - intended, 0))
            st.max_in_flight_hits += 1
            rec.incr_global("max_in_flight_hits")
            return
        gauge = self._gauge
        try:
            if plan is None:  # a session: its first turn is sent by the loop
                t = now_ns()
                rec.record_global("schedule_lag", max(t - intended, 0))
                self._streams.start_soon(self._session, sc, intended)
                return
            if slot.conn is not None:  # written, all or in part, on this connection
                plan.request.extensions["hopbench.presend"] = (slot.conn, slot.nsent, slot.data)
            # (started first: the gauge only counts a stream that will end)
            if slot.sent_ns is not None:
                self._streams.start_soon(self._stream, sc, intended, True, None, plan, slot.sent_ns,
                                         slot.taken_ns)
                rec.record_global("schedule_lag", max(slot.sent_ns - intended, 0))
                rec.incr_global("dispatched")
                if not slot.stale:  # idle ones the server had closed: more would be closed in turn
                    self._top_up(slot.origin)
                t_sent = max(slot.sent_ns, gauge.last_ns)
                gauge.move(t_sent, OUT, AWAITING_HEADERS)
                plan.stage[0], plan.stage[1], plan.stage[2] = AWAITING_HEADERS, True, t_sent
            else:  # the loop writes it: lag to the loop's take-over, as without the thread
                plan.stage[5] = self._write_turn(intended)  # (after those of its time handed before)
                self._streams.start_soon(self._stream, sc, intended, True, None, plan, None, slot.taken_ns)
                t = now_ns()
                rec.record_global("schedule_lag", max(t - intended, 0))
                gauge.move(t, OUT, WAITING)
                if (slot.data is not None and slot.conn is None and slot.origin is not None and not slot.stale
                        and not slot.held):  # (held: not tried, an earlier one of its time missed)
                    # every connection busy: grow the pool (idle ones the server had closed
                    # mean it was large enough: more would only be closed in turn)
                    self._missed(slot.origin)
        except RuntimeError:  # the streams' nursery closed: the run is over
            if slot.conn is not None:
                self._transport.put_back(slot.conn)
        finally:
            if disp is not None:  # after the gauge counts it: the thread may over-count, never under
                disp.handed_open += 1

    def _trace_request(self, sc: Scenario, i: int, rep: int) -> Prepared:
        """Entry ``i``'s body: the scenario's encoded head and tail around the
        prompt joined from pre-encoded blocks (nothing shared is re-encoded)."""
        spec = self.load.trace
        e = spec.entries[i]
        key = (sc.name, e.output_tokens)
        tpl = self._templates.get(key)
        if tpl is None:
            def encode(prompt: str) -> bytes:
                return encode_body(sc.protocol, sc.model, (Message("user", prompt),), e.output_tokens,
                                   sc.include_usage, sc.extra)
            head, tail = body_template(encode)
            tpl = (head, tail, _asks_usage(sc.protocol, encode("")))
            if len(self._templates) < 4096:
                self._templates[key] = tpl
        assert self._trace_bodies is not None
        body = tpl[0] + self._trace_bodies.prompt(i, rep) + tpl[1]
        return Prepared(body, (e.input_tokens, e.output_tokens), tpl[2],
                        spec.implied[i][0 if rep == 0 else 1], (("trace_line", e.line), ("trace_pass", rep)))

    async def _session(self, sc: Scenario, intended_ns: int | None) -> str:
        """One multi-turn session (docs/workloads.md, "Multi-turn sessions"):
        each turn sends the conversation so far and the target's streamed
        text is appended for the next; a think time passes before each later
        turn. The first turn's request was already taken from the budget.
        The session ends early when a turn does not complete with text, or
        the run stops. Open loop: a later turn's latency counts from when its
        think time ended (its intended start).

        Returns:
            The last turn's outcome.
        """
        spec = sc.session
        picker = self._pickers[sc.name]
        k = self._sessions_started.get(sc.name, 0)
        self._sessions_started[sc.name] = k + 1
        conv = Conversation(sc.protocol, sc.model, sc.include_usage, sc.extra,
                            spec.entries[picker.pick(self._rng)], script=spec.from_dataset)
        # a dataset record replayed as a session has as many turns as user messages
        n_turns = conv.turns if spec.from_dataset else spec.turn_counts[k % len(spec.turn_counts)]
        sid = f"{self._id_prefix}{sc.name}-{k}"
        box: list[Any] = [None]
        outcome = "cancelled"
        for turn in range(1, n_turns + 1):
            if turn > 1:
                due = now_ns() + spec.think_ns
                if spec.think_ns:
                    await trio.sleep_until(ns_to_s(due))
                if not self._take_request():
                    break
                if intended_ns is not None:
                    intended_ns = due
                req = conv.request(None if spec.from_dataset else spec.entries[picker.pick(self._rng)])
            else:
                req = conv.request(None)
            req = replace(req, fields=(("session", sid), *req.fields), turn=turn, keep_text=True,
                          on_result=lambda r: box.__setitem__(0, r))
            box[0] = None
            outcome = await self._stream(sc, intended_ns, False, req)
            result = box[0]
            if outcome != "completed" or result is None or not result.text:
                break
            conv.answer(result.text)
        return outcome

    def _recorder_for(self, start_ns: int) -> Recorder:
        return self.warm if start_ns - self._t0 < self.profile.run.warmup_ns else self.rec

    # -- one stream ------------------------------------------------------------
    def _plan(self, sc: Scenario, req: Prepared | None = None) -> _Plan:
        """Everything about one request that comes before it is sent: its id,
        arm, pool entry, cancel draw, headers, body and the httpx request
        (built here: its ~50 us of CPU are the client's own work, not the
        target's latency). An open loop plans ahead of the arrival's time
        (hopbench.engine._dispatch); every other stream right before it sends."""
        self._next_id += 1
        arm = self._arms[self._arm_next] if self._arms else None
        if arm is not None and self._arm_next and self._round is not None:
            sc, pick, cancel = self._round  # the round's other arms: the same request
        else:
            # a request built for this send (trace, session turn) picks no pool entry
            pick = self._pickers[sc.name].pick(self._rng) if req is None else -1
            cancel = sc.cancel if chooses(sc.cancel, self._cancel_rng) else None
            self._round = (sc, pick, cancel)
        if arm is not None:
            self._arm_next = (self._arm_next + 1) % len(self._arms)
        scope_name = arm[0] if arm is not None else sc.name
        headers = dict(self._arm_headers.get((scope_name, sc.protocol)) or self._headers[sc.protocol])
        headers[REQUEST_ID_HEADER] = f"{self._id_prefix}{self._next_id}"
        if req is None:  # one of the scenario's pre-encoded bodies
            body = sc.bodies[pick]
            shape = sc.lengths[pick] if sc.lengths else None
            expect = self._expect_usage.get(body, False)
        else:  # built for this send (trace replay, session turns)
            body, shape, expect = req.body, req.shape, req.expect_usage
        content = body
        if self._overhead:  # the request id also in the last user message (docs/gateway-overhead.md)
            tpl = self._markers.get(body) if req is None else marked_template(sc.protocol, body)
            if tpl is not None:
                content = tpl[0] + headers[REQUEST_ID_HEADER].encode() + tpl[1]
        gauge = self._gauge
        # [the stream's phase (hopbench.measure._inflight), whether its request was written,
        # when the gauge counted it awaiting headers (clock ns), the stream's timeout
        # scope and its total deadline (ns) once _stream has them, its turn among the
        # loop's writes of its due time (_WriteTurns, ticket) or None]
        stage: list[Any] = [WAITING, False, 0, None, None, None]
        first_byte_ns = self.profile.run.timeouts.first_byte_ns
        plan = _Plan(sc, req, arm, cancel, scope_name, headers, shape, expect, stage)

        # (the closure never holds the plan: plan -> request -> trace -> plan
        # would be a cycle per stream, freed only by the collector)
        async def trace(name: str, info: dict[str, Any]) -> None:
            # httpcore's trace names; StreamTransport emits the same two
            if name.endswith("send_request_headers.started"):
                turn = stage[5]
                if turn is not None:  # after the earlier requests of its due time (_WriteTurns)
                    await turn[0].wait(turn[1])
                    turn[0].release(turn[1])
                t = now_ns()
                if stage[0] == CONNECTING and stage[3] is not None and first_byte_ns:
                    # first_byte_s counts from the request's send, not from before its
                    # connect (docs/profiles.md): a slow connect within connect_s is
                    # not a first-byte timeout
                    total = stage[4]
                    stage[3].deadline = ns_to_s(t + first_byte_ns if total is None
                                                else min(t + first_byte_ns, total))
                gauge.move(t, stage[0], AWAITING_HEADERS, not stage[1])
                stage[0], stage[1], stage[2] = AWAITING_HEADERS, True, t
            elif name.endswith(("connect_tcp.started", "connect_unix_socket.started")):
                if stage[3] is not None and first_byte_ns:  # the connect has connect_s
                    stage[3].deadline = ns_to_s(1 << 62 if stage[4] is None else stage[4])
                gauge.move(now_ns(), stage[0], CONNECTING)
                stage[0] = CONNECTING

        try:
            plan.request = self._build_request(sc.path if arm is None else arm[1] + sc.path, content,
                                               self._arm_headers.get((scope_name, sc.protocol))
                                               or self._headers[sc.protocol], headers[REQUEST_ID_HEADER],
                                               trace)
        except Exception as exc:  # raised again inside the per-stream boundary of _stream
            plan.request = exc
        return plan

    async def _stream(self, sc: Scenario, intended_ns: int | None, counted: bool = False,
                      req: Prepared | None = None, plan: _Plan | None = None,
                      sent_ns: int | None = None, taken_ns: int | None = None,
                      turn: tuple[_WriteTurns, int] | None = None) -> str:
        """One stream, from its send to its record; returns its outcome.
        ``plan``: made ahead (open loop); ``sent_ns``: when hopbench.engine._dispatch's
        thread wrote its request (the gauge already has it awaiting headers);
        ``taken_ns``: when the open loop took its arrival up (load.sent);
        ``turn``: its place among the loop's writes of its due time (``_write_turn``;
        a plan made ahead has it in its stage already)."""
        to = self.profile.run.timeouts
        if plan is None:
            plan = self._plan(sc, req)
        if turn is not None:
            plan.stage[5] = turn
        sc, req, arm, cancel = plan.sc, plan.req, plan.arm, plan.cancel
        scope_name, headers, shape, expect, stage = (plan.scope_name, plan.headers, plan.shape,
                                                     plan.expect, plan.stage)
        request = plan.request
        assert request is not None
        self.stats.requests_started += 1
        gauge = self._gauge
        if not counted:  # (an open-loop arrival was counted when it was spawned or sent)
            gauge.move(now_ns(), OUT, WAITING)
        sent = now_ns() if sent_ns is None else sent_ns
        start = intended_ns if intended_ns is not None else sent
        rec = self._recorder_for(start)
        # gaps go to the recorder as they are measured: into the interval they occurred in
        slo = sc.slo  # a per-request ITL percentile needs the stream's own digest (docs/slo.md)
        meter = StreamMeter(start, sent, recorder_sink(rec, scope_name),
                            itl_digest=slo is not None and slo.itl_ns is not None
                            and slo.itl_percentile is not None)
        if self._overhead:  # per-event stamps for gateway overhead (grow with the stream)
            meter.event_chars, meter.event_read_ns, meter.event_crc, meter.keepalive_read_ns = [], [], [], []
            meter.quiet_read_ns = []
        rec.incr(scope_name, "started")
        outcome = "cancelled"
        detail = ""
        result: StreamResult | None = None
        # [what the decoder made of the body, whether its terminal signal arrived]:
        # kept when the body then breaks or times out
        # and [2] the error text worth keeping (exception chain, HTTP error body)
        # and [3] when the response (and, unfinished, its connection) began to close
        # and [4] what was wrong with a 2xx response's head (a Content-Type other than
        # text/event-stream): the sample of a stream that then broke with no text of its own
        box: list[Any] = [None, False, None, None, None]
        total_deadline = sent + to.total_ns if to.total_ns else None
        try:
            with trio.CancelScope() as scope:
                first = sent + to.first_byte_ns if to.first_byte_ns else None
                scope.deadline = ns_to_s(min(x for x in (first, total_deadline, 1 << 62) if x is not None))
                stage[3], stage[4] = scope, total_deadline  # (a connect moves `first`: see _plan)
                # the client's own cancel after a time (hopbench.workload._cancel): a scope
                # of its own, told apart from the timeouts' scope
                # (no scope at all without one: ~5 us a stream)
                leave = (trio.CancelScope(deadline=ns_to_s(sent + cancel.after_ns))
                         if cancel is not None and cancel.after_ns is not None else None)
                with leave if leave is not None else _NO_SCOPE:
                    try:
                        outcome, detail, result = await self._exchange(
                            sc, request, meter, scope, total_deadline, rec, box, stage, expect,
                            None if cancel is None else cancel.after_events, scope_name,
                            (req is not None and req.keep_text) or self._overhead)
                    except trio.Cancelled:
                        raise
                    except Exception as exc:  # the per-stream boundary
                        phase = "body" if meter.headers_ns is not None else "headers"
                        outcome, detail = classify_exception(exc, phase)
                        self._last_error = box[2] = self._scrubber.scrub(describe_exception(exc))[:300]
                        result = box[0]
                        if box[1]:  # broken after its terminal signal: the stream itself ended
                            outcome, detail = result.outcome, _detail(result)
                if leave is not None and leave.cancelled_caught:
                    outcome, detail, result = CANCEL_OUTCOME, "after_ms", box[0]
                    if box[1]:  # its terminal signal had arrived: it ended by itself
                        outcome, detail = result.outcome, _detail(result)
            if scope.cancelled_caught and box[1]:
                result = box[0]  # the rest of the body after the terminal signal never came
                outcome, detail = result.outcome, _detail(result)
            elif scope.cancelled_caught:
                t = now_ns()
                if total_deadline is not None and t >= total_deadline:
                    detail = "total"
                elif meter.headers_ns is None:
                    detail = "first_byte"
                else:
                    detail = "idle"
                outcome = "timeout"
                result = box[0]
        finally:
            if stage[5] is not None:  # written or not, it no longer holds up the later ones
                stage[5][0].release(stage[5][1])
            end = now_ns()
            meter.close(end)
            detail = self._wire_detail(outcome, detail, result, box[2], box[4])
            self._check_reachable(outcome, detail, meter.headers_ns is not None)
            record = measure(meter, end, outcome, detail, result,
                             keepalive_budget_ns=self.profile.run.keepalive_budget_ns)
            record_stream(rec, scope_name, record, self._header_values)
            if sc.slo is not None:  # docs/slo.md
                record_verdict(rec, scope_name, judge(sc.slo, record))
            if outcome == CANCEL_OUTCOME and rec is self.rec:  # joined with the upstream's record
                closed = box[3] if box[3] is not None else end  # (no response yet: httpx closed it)
                self.cancels.append(ClientCancel(headers[REQUEST_ID_HEADER], scope_name,
                                                 closed + self._mono_offset_ns, record.output_events))
            if record.proxy_buffering_suspected and record.burst_held_ns is not None and rec is self.rec:
                self.flagged.add(FlaggedBurst(headers[REQUEST_ID_HEADER], scope_name, record.burst_held_ns,
                                              record.output_events))
            record_lengths(rec, scope_name, record, shape)
            if (req is not None and req.implied_cached is not None and record.cached_tokens is not None
                    and record.input_tokens):  # the trace's own hit figure, over the same streams
                rec.incr(scope_name, "cache.implied_tokens", req.implied_cached)
                if shape is not None and shape[0]:  # its denominator: the tokens hopbench sent
                    rec.incr(scope_name, "cache.implied_prompt_tokens", shape[0])
            if req is not None and req.turn:  # docs/results.md, "Sessions"
                record_turn(rec, scope_name, req.turn, outcome, record.ttft_ns, record.input_tokens,
                            record.cached_tokens)
                if req.turn > 1:  # not an arrival: "Load held" counts sessions, not their turns
                    rec.incr(scope_name, "session.later_turns_started")
                    if stage[1]:
                        rec.incr(scope_name, "session.later_turns_sent")
            if stage[1] and intended_ns is not None and self._window is not None:
                # an open loop's request, counted by its due time whenever it was written
                # (load.sent; a later session turn is not an arrival: docs/results.md, "Load held")
                later = req is not None and req.turn > 1
                self._window.note(LATER_SENT if later else SENT, intended_ns, end, None if later else taken_ns)
            if self.on_stream is not None:
                line = stream_line(record, headers[REQUEST_ID_HEADER], scope_name, self._t0)
                if arm is not None:
                    line["arm"], line["scenario"] = arm[0], sc.name
                if shape is not None:  # docs/workloads.md
                    line["requested_input_tokens"], line["requested_max_tokens"] = shape
                if req is not None:
                    line.update(req.fields)
                if self._overhead:
                    line.update(overhead_line(meter, self._t0))
                self.on_stream(line)
            gauge.move(max(end, gauge.last_ns), stage[0], OUT)
            self._idle_changed.set()
            self._idle_changed = trio.Event()
            if req is not None and req.on_result is not None:
                req.on_result(result)
        return outcome

    async def _exchange(self, sc: Scenario, request: httpx.Request | Exception,
                        meter: StreamMeter, scope: trio.CancelScope, total_deadline: int | None,
                        rec: Recorder, box: list[Any], stage: list[Any],
                        expect_usage: bool = False, cancel_events: int | None = None,
                        scope_name: str = "", keep_text: bool = False,
                        ) -> tuple[str, str, StreamResult | None]:
        client = self._client
        idle_ns = self.profile.run.timeouts.idle_ns
        if isinstance(request, Exception):
            raise request
        own = self._transport
        response = (await client.send(request, stream=True) if own is None
                    else await self._send_own(own, request))
        try:
            t = now_ns()
            status = meter.status = response.status_code
            meter.on_headers(t)
            if self._record_headers:
                meter.headers = capture_headers(response.headers.get, self._record_headers)
            # The head arrived at its kernel stamp, maybe well before a busy loop read it:
            # the stream is counted streaming from then on (never before its send), so
            # that an end counted back to its bytes' arrival (below) never comes before
            # it (a head and its terminal event in one read made "streaming" negative).
            # hopbench's own transport hands its body out (None from httpx's): its stamps
            # here, and below it is iterated directly (no httpx generator layers per read)
            direct = response.extensions.get("hopbench.body")
            head_rx = getattr(direct, "head_rx_ns", 0) or 0
            streaming_ns = self._gauge.move_late(t, t - head_rx if head_rx else 0,
                                                 max(meter.sent_ns, stage[2]), stage[0], STREAMING)
            stage[0] = STREAMING
            slack = min(idle_ns // 16, _IDLE_SLACK_NS) if idle_ns is not None else 0
            never = 1 << 62
            total = total_deadline if total_deadline is not None else never
            # from here on the idle limit (or none) replaces the first-byte one
            scope.deadline = ns_to_s(min(t + idle_ns + slack, total) if idle_ns is not None else total)
            ext = response.extensions
            if ext.get("hopbench.reused") is False:  # only fresh connections have a connect time
                rec.record(scope_name or sc.name, "connect_wait", ext.get("hopbench.connect_ns", 0))
            if ext.get("hopbench.retried"):
                rec.incr(scope_name or sc.name, "stale_connection_retries")
            write_ns = ext.get("hopbench.write_ns")
            if write_ns is not None:  # hopbench's own transport (docs/results.md, request_write)
                rec.record(scope_name or sc.name, "request_write", write_ns)
            if status >= 300:
                data = b""
                async for chunk in response.aiter_raw():
                    data += chunk
                    if len(data) > _ERROR_BODY_LIMIT:
                        break
                code = _http_error_code(data)
                # whole (at most _ERROR_BODY_LIMIT and a read): the sample is scrubbed of
                # secrets before it is cut short, so a key across a cut cannot leak in part
                box[2] = data.decode("utf-8", "replace")
                return "http_error", f"{status}" + (f":{code}" if code else ""), None
            ctype = response.headers.get("content-type", "")
            if not ctype.startswith("text/event-stream"):
                rec.incr(scope_name or sc.name, "anomaly.wrong_content_type")
                box[4] = (f"{status} with Content-Type {ctype[:64]!r}, expected text/event-stream "
                          "(not a stream: a web page, a wrong path, or a non-streaming answer?)")
            scanner = SSEScanner(max_event_bytes=self.profile.run.max_event_bytes)
            dec = new_decoder(sc.protocol, keep_text=keep_text, expect_usage=expect_usage)
            kept = dec.kept_fragments() if meter.event_crc is not None else None  # gateway overhead
            identity = response.headers.get("content-encoding", "identity") == "identity"
            # iterating hopbench's body directly skips httpx's three generator layers
            # per read (closing still goes through response.aclose())
            # kernel receive stamps of hopbench's transport (its rx_ns), where it has them
            stamps = direct if identity and hasattr(direct, "rx_ns") else None
            chunks = (direct if direct is not None and identity
                      else response.aiter_raw() if identity else response.aiter_bytes()).__aiter__()
            # Re-arming a trio deadline costs ~1.6 us; doing it on every read
            # would be the largest single cost of a paced stream. The deadline
            # is instead set ``slack`` past the idle limit and re-armed at most
            # once per ``slack``: an idle timeout then fires after a silence of
            # idle_s to idle_s + slack (never early), slack <= 100 ms.
            rearm_at = t + slack
            left = False  # the client cancelled after cancel_events content events
            # The idle limit has its own scope: when it passes, the stream ends
            # only if the server was silent. Bytes that arrived within the limit
            # and wait in the socket mean the client was late (its process
            # descheduled between two reads): the timeout is taken back and the
            # read goes on (hopbench's transport only: its reader survives a
            # cancelled read; docs/results.md, "idle_timeouts_withdrawn").
            if idle_ns is not None:
                scope.deadline = ns_to_s(total)
            idle = trio.CancelScope(deadline=ns_to_s(min(t + idle_ns + slack, never)) if idle_ns is not None
                                    else math.inf)
            # when the last bytes read reached the socket (kernel stamp, else the read less
            # the loop's lag); first the response head's read
            arrived = stamps.head_rx_ns if stamps is not None and stamps.head_rx_ns else t
            try:
                while True:  # the idle scope, entered again after a withdrawal
                    with idle:
                        async for chunk in chunks:
                            t = now_ns()
                            # the read's client lag (a burst read late is the client's
                            # doing) and how late its latest bytes were read
                            lag, late = self._client_lag_ns(t, stamps.rx_ns if stamps is not None else 0)
                            before, arrived = arrived, t - late
                            meter.on_read(t, lag)
                            if idle_ns is not None and t >= rearm_at:
                                idle.deadline = ns_to_s(t + idle_ns + slack)
                                rearm_at = t + slack
                            for item in scanner.feed(chunk):
                                obs = dec.feed(item)
                                if obs:
                                    meter.on_observations(t, obs)
                                    if kept is not None:
                                        meter.on_event_texts(obs, kept)
                            if dec.ended and not box[1]:
                                # The terminal signal arrived ([DONE], message_stop,
                                # response.completed/failed): the stream's outcome is
                                # decided. What is left (the chunked terminator) gets
                                # _AFTER_END_S; a body that then breaks or hangs does
                                # not turn a finished stream into a broken one.
                                box[1] = True
                                # the gateway is done with it: what is left is the client's.
                                # It was done when the bytes arrived, not when a busy loop
                                # served the read: counted back to the terminal bytes' arrival,
                                # never before the read before it arrived (in flight as the
                                # gateway sees it, docs/results.md "In flight"), nor before the
                                # gauge counted it streaming
                                self._gauge.move_late(t, late, max(before, streaming_ns), stage[0], CLOSING)
                                stage[0] = CLOSING
                                scope.deadline = min(scope.deadline, trio.current_time() + _AFTER_END_S)
                                idle.deadline = math.inf
                                rearm_at = never
                            elif cancel_events is not None and not box[1] and (
                                    meter.itl_count + (meter.last_content_ns is not None) >= cancel_events):
                                left = True  # closing the response below closes its connection
                                break
                    if not idle.cancelled_caught:
                        break
                    # The idle limit passed: the server's silence, or the client's
                    # lateness? Only bytes waiting in the socket can tell. Their
                    # kernel stamp is an upper bound of when the first of them
                    # arrived (Linux moves a segment's stamp to the latest one
                    # coalesced into it); the time the loop was measured away since
                    # the last bytes arrived (away_ns: every late wake-up of the
                    # probe in the silence, not only a recent one, as a busy
                    # machine may deschedule the process again between the probe's
                    # wake-up and this check) is how much of the silence the
                    # client itself made.
                    waiting = stamps.waiting_rx_ns() if stamps is not None else None
                    now = now_ns()
                    late = max(self._loop_lag_ns(now),
                               away_ns(self._blackouts, arrived, now, self._probe_due_ns))
                    if waiting is not None and idle_ns is not None and (
                            waiting - arrived <= idle_ns or now - arrived - late < idle_ns):
                        rec.incr(scope_name or sc.name, "idle_timeouts_withdrawn")
                        idle = trio.CancelScope(deadline=ns_to_s(now + idle_ns + slack))
                        rearm_at = now + slack
                        continue
                    scope.cancel()  # a real idle timeout: classified by the caller (detail "idle")
                    await trio.lowlevel.checkpoint()
            finally:
                # keep what arrived, also for timeouts and broken connections
                box[0] = dec.finish(discarded_partial=scanner.close())
                # a body left by an exception (e.g. an oversize event) is an
                # async generator stopped at a yield: close it now, not at GC
                await chunks.aclose()  # type: ignore[union-attr]
            result = box[0]
            assert result is not None
            if left:
                return CANCEL_OUTCOME, "after_events", result
            return result.outcome, _detail(result), result
        finally:
            box[3] = now_ns()  # a client cancel's close stamp (hopbench.workload._cancel)
            try:
                await response.aclose()
            finally:
                # httpx's BoundAsyncStream points back at its response: a cycle
                # (with the request, headers, URL: ~30 objects a stream) that only
                # the cyclic collector would free (hopbench/engine/_collector.py)
                response.stream = _SPENT_BODY

    async def _send_own(self, own: StreamTransport, request: httpx.Request) -> httpx.Response:
        """``self._client.send(request, stream=True)`` through hopbench's own
        transport, without httpx's client layers (auth, redirects, event hooks,
        the response's timer), which a load client's requests never use: they
        cost ~40 us a request, ~5 % of a stream's CPU in a replay at 1,000
        requests/s. What of them matters is kept: the response's request, the
        cookie jar (a target's Set-Cookie goes into it; every later request is
        then built by httpx with it, ``_build_request``), the request of an
        httpx error (as httpx's ``request_context`` sets it).

        Raises:
            whatever the transport raises (httpx's exceptions, MalformedResponse).
        """
        try:
            response = await own.handle_async_request(request)
        except httpx.RequestError as exc:
            if exc._request is None:  # (httpx's own request_context does the same)
                exc.request = request
            raise
        response.request = request
        self._client.cookies.extract_cookies(response)  # (_Cookies: nothing without a Set-Cookie)
        return response

    def _wire_detail(self, outcome: str, detail: str, result: StreamResult | None,
                     text: str | None, head_note: str | None = None) -> str:
        """Bound a detail that holds a wire error code (hopbench.measure._wire_text) and
        keep the first error texts of its kind (``RunStats.error_samples``);
        ``head_note`` (what was wrong with a 2xx head) is the text when the
        stream has none of its own, so a broken stream is never sampled empty."""
        if outcome == "failed":
            detail = self._codes.name(detail)
            if text is None and result is not None:
                text = result.error_message
        if text is None and head_note is not None:
            text = self._scrubber.scrub(head_note)
        elif outcome == "http_error" and ":" in detail:
            status, _, code = detail.partition(":")
            detail = f"{status}:{self._codes.name(code)}"
        self.stats.codes_folded = self._codes.folded
        if text and outcome not in ("completed", "cancelled", CANCEL_OUTCOME):
            kind = f"{outcome}.{detail.partition(':')[0]}" if detail else outcome
            self._samples.add(kind, text)
        return detail

    def _check_reachable(self, outcome: str, detail: str, got_response: bool) -> None:
        """Stop early when the target cannot be reached: ``UNREACHABLE_AFTER``
        connection failures in a row with no response between them. Before
        any response that is "target unreachable" (a wrong URL or port); after
        one, "target lost" (the target died or stopped answering mid-run).
        Either way a hot loop of connection errors must not look like a
        result. Running out of file descriptors (``fd_limit``) is hopbench's
        own limit and does not count."""
        if got_response:
            self._reached = True
            self._connect_failures = 0
        elif outcome == "connect_error" and detail != "fd_limit" and not self._stopping:
            self._connect_failures += 1
            # once: streams already under way keep failing until the stop lands
            if self._connect_failures == UNREACHABLE_AFTER and self.stats.interrupted_by is None:
                last = self._last_error
                why = f" (last error: {last})" if last else ""
                if "CERTIFICATE_VERIFY_FAILED" in last:
                    why += "; for a self-signed certificate set target.verify_tls = false"
                if self._reached:
                    t_s = (now_ns() - self._t0) / NS_PER_S
                    self.stats.interrupted_by = (
                        f"target lost: it answered before, then the last {self._connect_failures} "
                        f"connection attempts to {self.base_url} failed ({detail or 'connect error'}), "
                        f"{t_s:.1f} s into the run{why}")
                    self.notice(f"{self.stats.interrupted_by}; stopping the run")
                else:
                    self.stats.interrupted_by = (
                        f"target unreachable: the first {self._connect_failures} connection attempts to "
                        f"{self.base_url} failed ({detail or 'connect error'}) and none got a response{why}")
                self.request_stop()

    def _loop_lag_ns(self, t_ns: int) -> int:
        """How late the event loop serves what it runs at ``t_ns`` by the loop-lag
        probe, ns >= 0: its overdue time (it has not run yet), or the lag it just
        measured (it ran within the last 10 ms)."""
        lag = t_ns - self._probe_due_ns
        if t_ns - self._lag_at_ns <= _LOOP_PROBE_NS and self._lag_ns > lag:
            lag = self._lag_ns
        return lag if lag > 0 else 0

    def _client_lag_ns(self, t_ns: int, rx_ns: int) -> tuple[int, int]:
        """A body read served at ``t_ns`` whose latest bytes the kernel stamped
        ``rx_ns`` (clock ns; 0: no stamp): (client lag, lateness of its latest bytes), ns.

        The client lag (docs/results.md, "Client lag per read") is the largest of
        the kernel stamp's lateness, the loop-lag probe's estimate and the loop
        thread's run-queue wait in the loop's latest turn (hopbench.engine._runqueue):
        Linux gives coalesced segments the latest one's stamp, so the stamp alone
        cannot tell how long the first of a read's bytes waited. The probe's
        estimate is capped at the time since the loop's previous turn began (no
        byte of this read arrived before it). The second figure is when the read's
        latest bytes arrived, as exactly as known: by the kernel stamp when there
        is one (a terminal event is the last bytes of a stream: the stamp is its
        arrival), else the client lag."""
        runq = self._runq
        lag = self._loop_lag_ns(t_ns)
        if runq.turn_from_ns and lag > t_ns - runq.turn_from_ns:
            lag = t_ns - runq.turn_from_ns
        if runq.wait_ns > lag:
            lag = runq.wait_ns
        if rx_ns:
            late = t_ns - rx_ns if t_ns > rx_ns else 0
            return (late if late > lag else lag), late
        return lag, lag

    # -- watchers --------------------------------------------------------------
    async def _loop_lag_probe(self) -> None:
        while True:
            t = now_ns()
            target = t + _LOOP_PROBE_NS
            self._probe_due_ns = target
            await trio.sleep_until(ns_to_s(target))
            woke = now_ns()
            lag = max(woke - target, 0)
            self._lag_ns, self._lag_at_ns = lag, woke
            if lag >= _BLACKOUT_MIN_NS:
                self._blackouts.append((woke, lag))
            self._recorder_for(t).record_global("loop_lag", lag)

    async def _ticker(self) -> None:
        iv = self.profile.run.interval_ns
        k = 1
        while True:
            await trio.sleep_until(ns_to_s(self._t0 + k * iv))
            # The ticker can run late (a busy loop, a collector pause, a slow
            # publish): the interval ends when it is closed, not when it was due,
            # so that rates and means divide by the time they cover (issue 16).
            end_rel = interval_end(now_ns() - self._t0, k * iv)
            work = self._close_interval(end_rel)
            if work is not None:
                # Encoding and folding the interval's histograms, writing the
                # files and checkpoints take 10-200 ms: off the event loop, so
                # that no stream's stamps wait for them (loop_lag shows it).
                await trio.to_thread.run_sync(self._publish, *work)
            k = max(k, end_rel // iv) + 1  # ticks missed while late are skipped, not caught up

    def _close_interval(self, end_rel_ns: int) -> tuple[Any, Any, dict[str, Any]] | None:
        """On the loop: detach the interval's recordings (O(scopes)) and note
        the runner's own figures for it; None when the interval is empty."""
        st = self.stats
        start_rel = st.intervals[-1]["end_ns"] if st.intervals else 0
        if end_rel_ns <= start_rel:
            return None
        g = self._gauge
        g.advance(now_ns())
        self._sync_stats()
        cpu = time.thread_time_ns()  # the loop thread's own CPU, not the publishing thread's
        cpu_frac = (cpu - self._cpu0) / max(end_rel_ns - start_rel, 1)
        self._cpu0 = cpu
        area = [a - b for a, b in zip(g.area, self._area0)]
        self._area0 = list(g.area)
        dur = end_rel_ns - start_rel
        line: dict[str, Any] = {
            "start_ns": start_rel, "end_ns": end_rel_ns,
            "in_flight_mean": (area[AWAITING_HEADERS] + area[STREAMING]) / dur,
            "in_flight_now": st.in_flight, "cpu": round(cpu_frac, 4),
            "started_total": st.requests_started,
            "dropped_total": st.max_in_flight_hits,  # (they count against run.requests too)
        }
        for i, name in enumerate(PHASES):  # the phases by name (docs/results.md, "In flight")
            line[f"{name}_mean"] = area[i] / dur
            line[f"{name}_now"] = g.now[i]
        if end_rel_ns - start_rel >= self.profile.run.interval_ns // 2:
            st.cpu_fractions.append(cpu_frac)  # a short final interval would skew it
        if end_rel_ns >= st.steady_from_ns and self._collector is not None:
            self._collector.freeze_now()  # set up (warm-up, ramp-up done): out of the scans
            self._collector = None
        st.intervals.append(line)
        st.interval_count += 1
        if len(st.intervals) > 2 * RECENT_INTERVALS:
            del st.intervals[:-RECENT_INTERVALS]
        return (self.rec.detach_interval(start_rel, end_rel_ns),
                self.warm.detach_interval(start_rel, end_rel_ns), line)

    def _publish(self, detached: Any, warm_detached: Any, line: dict[str, Any]) -> None:
        """Fold a detached interval into the totals and hand it on (``on_interval``).
        Runs in a worker thread during the run (one at a time), on the loop at the end."""
        snap = self.rec.fold(detached)
        warm = self.warm.fold(warm_detached)
        if self.on_interval is not None:
            self.on_interval(snap, warm, line)

    def _emit_interval(self, end_rel_ns: int) -> None:
        work = self._close_interval(end_rel_ns)
        if work is not None:
            self._publish(*work)

    def _final_interval(self) -> None:
        self._emit_interval(now_ns() - self._t0)
