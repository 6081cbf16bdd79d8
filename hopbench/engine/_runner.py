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
import math
import os
import random
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
import trio

from .._clock import NS_PER_S, monotonic_offset_ns, now_ns, ns_to_s
from ..config._profile import LoadSpec, Profile, Scenario
from ..measure._counters import RunCounters
from ..measure._hdr import warm_tables
from ..measure._inflight import AWAITING_HEADERS, OUT, PHASES, STREAMING, WAITING, InFlightGauge
from ..measure._recorder import IntervalSnapshot, Recorder
from ..workload._pool import Message, Prepared, encode_body
from ..workload._trace import TraceBodies, body_template
from ._collector import CollectorWatch
from ._dispatch import Dispatcher, Slot
from ._pacer import Pacer, real_clock, timerfd_available
from ._saturation import host_usage, sample_host
from ._schedule import TAKEN, Arrivals, DueCount, WindowCount
from ._stream import StreamMixin, _asks_usage
from ._transport import StreamTransport
from ._watch import WatchMixin

__all__ = ["LoadRunner", "RunStats", "interval_end", "TICK_SLACK_NS"]

BACKOFF_MIN_S, BACKOFF_MAX_S = 0.01, 1.0  # a closed-loop user's pause after a connection error

RECENT_INTERVALS = 60  # timeline records RunStats keeps (the file has them all)


def _stderr_notice(text: str) -> None:
    print(f"hopbench: {text}", file=sys.stderr, flush=True)


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


class LoadRunner(StreamMixin, WatchMixin):
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

    stats: RunStats

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
        self._init_watch()
        self._rng = random.Random(profile.run.seed * 1_000_003 + seed_offset)
        #: which streams a scenario's ``cancel`` key closes: its own seeded
        #: stream of draws, so that the cancel key leaves the picks unchanged
        self._cancel_rng = random.Random(f"cancel:{profile.run.seed}:{seed_offset}")
        self._mono_offset_ns = 0  # CLOCK_MONOTONIC - trio's clock, taken at the run's start
        self._weights = [s.weight for s in profile.scenarios]
        self._cum = []
        acc = 0.0
        for w in self._weights:
            acc += w
            self._cum.append(acc)
        self._requests_left = request_budget if request_budget is not None else profile.run.requests
        self._stopping = False
        self._t0 = 0
        self._id_prefix = f"{seed_offset}-"
        self.on_stream = on_stream
        self._arrival_offset_ns = arrival_offset_ns
        self._arms = tuple(arms)
        self._init_stream(env)
        self._stop_event = trio.Event()  # trio events are not bound to a run until used
        self._gauge = InFlightGauge(0)  # replaced at the run's start (its t0)
        self._collector: CollectorWatch | None = None
        #: polled by a watcher: returns why the target is gone (e.g. the
        #: embedded emulator's process exited), or None while it is alive
        self.target_alive: Callable[[], str | None] | None = None
        #: the emulator processes hopbench started on this machine for the run (the
        #: embedded target's, the embedded arms', the [upstream] one): their CPU is
        #: sampled with the host's and kept apart from the neighbours' (hopbench.engine._saturation)
        self.emulator_pids: tuple[int, ...] = ()
        self.notice: Callable[[str], None] = _stderr_notice  #: what a signal does now
        self._token: Any = None  # the run's TrioToken, for stops from other threads
        # trace replay (docs/workloads.md): bodies joined from shared pre-encoded blocks
        self._trace_bodies = (TraceBodies(self.load.trace, profile.run.seed)
                              if self.load.mode == "trace" else None)
        self._templates: dict[tuple[str, int], tuple[bytes, bytes, bool]] = {}
        self.pacer: Pacer | None = None  # the open loop's, while it runs (benchmarks read its stats)
        #: the open loop's dispatcher while it runs
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
