"""The open loop and trace replay: arrivals on a schedule, and their hand-off to the dispatcher.

Role: a mixin of ``LoadRunner`` (hopbench.engine._runner). An open loop takes
its arrival times from hopbench.engine._schedule (``Arrivals``, or the trace's
own entries), each at its time through the pacer (hopbench.engine._pacer);
with the dispatcher (hopbench.engine._dispatch: hopbench's own transport, a
plain-http target, the real clock) an arrival is planned up to the lookahead
ahead of its time and queued for the dispatcher's thread, which writes it on
an idle connection at its time and hands it back to the loop (``_handed``);
the loop keeps that pool of idle connections ready (the spares: opened before
the clock starts, on a miss, for the rate's reserve and ahead of a planned
burst). Rows of one due time that the loop writes itself leave in the order
their streams were started (``_WriteTurns``).

Invariants: latency counts from an arrival's due time (wrk2), however late it
was taken up or written; every arrival taken up is counted once, by its due
time (``DueCount``, ``WindowCount``); ``max_in_flight`` is a hard bound on
the streams the client holds; nothing is written after the stop; times are
integer ns on the runner's clock.
"""

from __future__ import annotations

import collections
import contextlib
import math
import os
import random
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import trio

from .._clock import NS_PER_S, now_ns, ns_to_s
from ..config._records import LoadSpec, Profile, Scenario
from ..measure._inflight import AWAITING_HEADERS, OUT, WAITING, InFlightGauge
from ..measure._recorder import Recorder
from ..protocols._requests import Message, asks_usage, encode_body
from ..workload._pool import Prepared
from ..workload._trace_bodies import TraceBodies, body_template
from ._dispatch import Dispatcher, Slot
from ._pacer import Pacer, real_clock
from ._transport import SENT_AT
from ._schedule import TAKEN, Arrivals, DueCount, WindowCount
from ._stream import _Plan
from ._transport import StreamTransport

__all__ = ["DISPATCH", "OpenLoopMixin", "Tuning"]


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


def _lookahead_ns(tuning: Tuning, disp: Dispatcher) -> int:
    """How far ahead of its time the next open-loop arrival is planned (ns)."""
    return tuning.lookahead_ns if disp.queued_bytes < tuning.queued_bytes_max else tuning.lookahead_min_ns


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


@dataclass(frozen=True, slots=True)
class Tuning:
    """The open loop's knobs, one run's (``LoadRunner(tuning=...)``); each
    default is the module constant of the same name in capitals, which says
    what it does and why it has that value. Tests and benchmarks pass other
    values; a profile never sets them.

    Attributes:
        dispatch: write from the dispatcher's thread where it can (``DISPATCH``).
        lookahead_ns, lookahead_min_ns: how far ahead of its time an arrival is
            planned, ns, and that while ``queued_bytes_max`` wire bytes or more
            are queued for the thread.
        catch_up_turn_ns: how long a planner that is behind plans on in one
            event-loop turn, ns.
        spares_per_miss, spares_opening_max, spares_failed_max: spare
            connections opened per miss, being opened at most at once, failed
            per origin before no more are opened.
        spares_at_start_max, spares_ahead_ns, preopen_max_s: the spares opened
            before the clock starts: at most this many, covering this much of the
            first arrivals (ns), waited for at most this long (s).
        spares_reserve_ns, spares_reserve_max: the idle connections kept ready
            cover this much of the arrivals (ns), at most this many per origin.
        switch_interval_s: ``sys.setswitchinterval`` during the run, s.
    """

    dispatch: bool = DISPATCH
    lookahead_ns: int = LOOKAHEAD_NS
    lookahead_min_ns: int = LOOKAHEAD_MIN_NS
    queued_bytes_max: int = QUEUED_BYTES_MAX
    catch_up_turn_ns: int = CATCH_UP_TURN_NS
    spares_per_miss: int = SPARES_PER_MISS
    spares_opening_max: int = SPARES_OPENING_MAX
    spares_failed_max: int = SPARES_FAILED_MAX
    spares_at_start_max: int = SPARES_AT_START_MAX
    spares_ahead_ns: int = SPARES_AHEAD_NS
    preopen_max_s: float = PREOPEN_MAX_S
    spares_reserve_ns: int = SPARES_RESERVE_NS
    spares_reserve_max: int = SPARES_RESERVE_MAX
    switch_interval_s: float = SWITCH_INTERVAL_S


@contextlib.contextmanager
def _switch_interval(mode: str, interval_s: float) -> Iterator[None]:
    """During an open-loop run (``mode`` "rate" or "trace"), let a thread that
    waits for the GIL have it after ``interval_s`` (``SWITCH_INTERVAL_S``: 20 us) instead of CPython's 5 ms
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
    sys.setswitchinterval(interval_s)
    try:
        yield
    finally:
        sys.setswitchinterval(before)


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

class OpenLoopMixin:
    """Arrivals on a schedule and the dispatcher's hand-off (a mixin of ``LoadRunner``).

    Owns (sets): ``_tuning`` and ``_pacer_factory`` (``LoadRunner``'s
    parameters), ``pacer`` (the open loop's, while it runs: benchmarks read its
    stats), ``_dispatcher`` and ``_dispatchers`` (this run's), ``_submitted``,
    ``_drained``, ``_plan_turn_ns``, ``_turns`` and ``_turns_due_ns``
    (``_write_turn``), the spares' ``_spares_opening``, ``_spares_failed``,
    ``_reserve``, ``_want_idle`` and ``_due_recent``, the trace's bodies
    (``_trace_bodies``, ``_templates``), and the schedule's counts:
    ``_schedule``, ``_due``, ``_window``, ``_last_due_ns``.

    Reads of ``LoadRunner``: ``profile``, ``load``, ``stats``, ``rec``,
    ``base_url``, ``_arms``, ``_rng``, ``_t0``, ``_deadline_ns``,
    ``_arrival_offset_ns``, ``_take_gap_ns``, ``_requests_left``, ``_gauge``, ``_streams``,
    ``_token``, ``_pick``, ``_take_request``, ``request_stop``; of the stream
    (hopbench.engine._stream): ``_transport``, ``_plan``, ``_stream``,
    ``_session``, ``_recorder_for``.
    """

    profile: Profile
    load: LoadSpec
    stats: Any  # LoadRunner's RunStats (hopbench.engine._runner imports this module)
    rec: Recorder
    base_url: str
    _arms: tuple[tuple[str, str], ...]
    _rng: random.Random
    _t0: int
    _deadline_ns: int | None
    _arrival_offset_ns: int
    _take_gap_ns: int | None
    _requests_left: int | None
    _gauge: InFlightGauge
    _streams: trio.Nursery
    _token: Any
    _transport: StreamTransport | None
    _pick: Callable[[], Scenario]
    _take_request: Callable[[], bool]
    request_stop: Callable[..., None]
    _plan: Callable[[Scenario, Prepared | None], _Plan]
    _stream: Callable[..., Awaitable[str]]
    _session: Callable[[Scenario, int | None], Awaitable[str]]
    _recorder_for: Callable[[int], Recorder]

    def _init_open_loop(self, tuning: Tuning, pacer_factory: Callable[[], Pacer]) -> None:
        """Set the open loop's own attributes (called by ``LoadRunner.__init__``, which
        documents ``tuning`` and ``pacer_factory``)."""
        self._tuning = tuning
        self._pacer_factory = pacer_factory
        # trace replay (docs/workloads.md): bodies joined from shared pre-encoded blocks
        self._trace_bodies = (TraceBodies(self.load.trace, self.profile.run.seed)
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
        self._drained = trio.Event()
        self._last_due_ns: int | None = None  # the open loop's latest arrival taken up (clock ns)
        #: the open loop's schedule (its arrival times, ns) and the count of those due in the
        #: measured window (load.due); set as the clock starts
        self._schedule: Iterator[int] | None = None
        self._due: DueCount | None = None
        #: the open loop's requests by due time in the measured window (load.sent, ...)
        self._window: WindowCount | None = None

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
        # (not st.arrivals: with the dispatcher an arrival counts only once written)
        for intended in arrivals:
            if not await self._arrive(pacer, intended):
                return
            disp = self._dispatcher
            if disp is not None:
                self._submit(disp, intended, self._pick(), None)
                continue
            t = self._take_up(intended)
            if t is None:
                continue
            sc = self._pick()
            if sc.session is not None:  # a session arrives: its turns follow by themselves
                self._streams.start_soon(self._session, sc, intended)
                continue
            self._gauge.move(t, OUT, WAITING)  # waits for the loop to run its task
            self._streams.start_soon(self._stream, sc, intended, True, None, None, None, t)

    async def _arrive(self, pacer: Pacer, intended: int) -> bool:
        """The open loop's and the trace replay's arrival step: wait until the
        arrival due at ``intended`` (clock ns) is to be planned (``_plan_wait``)
        and take it from the schedule's counts (``DueCount``, ``WindowCount``) and
        the request budget.

        Returns:
            True: the arrival is taken (the caller hands it to the dispatcher or
            starts its stream); False: the schedule ends here (the run's deadline,
            the budget spent, the run stopping): nothing more is due.
        """
        due, window = self._due, self._window
        assert due is not None and window is not None
        if self._deadline_ns is not None and intended >= self._deadline_ns:
            due.ended()
            return False  # the run's window is [t0, t0 + duration): nothing is due at its end
        due.pending(intended)
        wake = await self._plan_wait(pacer, self._dispatcher, intended)
        due.passed(wake)  # (the pacer never returns early: every time before it is past)
        if not self._take_request():
            due.ended()
            return False
        due.planned()
        self._last_due_ns = intended
        if self._take_gap_ns is not None:  # (WindowCount.raise_floor: a finite schedule)
            window.raise_floor(intended + self._take_gap_ns)
        return True

    def _take_up(self, intended: int) -> int | None:
        """The loop takes the arrival due at ``intended`` (clock ns) up itself (no
        dispatcher): its schedule lag is recorded and it is counted.

        Returns:
            When it was taken up (clock ns), or None: ``max_in_flight`` streams
            are open, and the arrival is dropped (counted in max_in_flight_hits).
        """
        st = self.stats
        t = now_ns()
        rec = self._recorder_for(intended)
        rec.record_global("schedule_lag", max(t - intended, 0))
        st.arrivals += 1
        assert self._window is not None
        self._window.note(TAKEN, intended, t)
        # every stream the client holds counts, also those spawned but not
        # yet running (waiting): max_in_flight is a hard bound on the client
        if self._gauge.open >= self.load.max_in_flight:
            st.max_in_flight_hits += 1
            rec.incr_global("max_in_flight_hits")
            return None
        return t

    async def _trace_loop(self) -> None:
        """Replay the trace: each entry at its scheduled time (docs/workloads.md,
        "Trace replay"); latency counts from that time, as in the open loop."""
        async with self._open_pacer() as pacer:
            await self._trace_arrivals(pacer)

    async def _trace_arrivals(self, pacer: Pacer) -> None:
        spec = self.load.trace
        scenarios = self.profile.scenarios
        t0 = self._t0
        entries = spec.arrivals(*self.load.trace_part)
        # the schedule's times (load.due): the entries the loop has not reached yet, read
        # only once the loop stopped reading them (the rest of a schedule cut by the stop)
        self._schedule = (t0 + offset_ns for offset_ns, _, _ in entries)
        due = self._due = DueCount(t0 + self.profile.run.warmup_ns)
        self._window = WindowCount(due.from_ns, self._deadline_ns)
        for offset_ns, i, rep in entries:
            intended = t0 + offset_ns
            if not await self._arrive(pacer, intended):
                return
            sc = scenarios[spec.scenario_index[i]]
            disp = self._dispatcher
            if disp is not None:
                self._submit(disp, intended, sc, self._trace_request(sc, i, rep))
                continue
            t = self._take_up(intended)
            if t is None:
                continue
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
        pacer = self.pacer = self._pacer_factory()
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
        ahead = _lookahead_ns(self._tuning, disp)
        wake = intended - ahead
        now = now_ns()
        if intended - now < ahead // 2 and now - self._plan_turn_ns < self._tuning.catch_up_turn_ns:
            return wake  # behind (and so past its wake): no yield this turn
        wakes = pacer.stats.wakes
        await pacer.wait(wake)
        if pacer.stats.wakes != wakes:  # it yielded: a new turn
            self._plan_turn_ns = now_ns()
        return wake

    def _dispatchable(self) -> bool:
        """Whether this run's open loop writes from hopbench.engine._dispatch's thread:
        hopbench's own transport, a plain-http target, trio's real clock, and
        ``Tuning.dispatch`` on (``DISPATCH``). (TLS connections, a fake clock and httpx's transport
        pace on the loop: docs/workloads.md, "Open-loop pacing".)"""
        return (self._tuning.dispatch and getattr(self._transport, "take_idle_fd", None) is not None and real_clock()
                and self.base_url.lower().startswith("http://"))

    def _spares_at_start(self) -> int:
        """How many spare connections an open loop opens per target origin as
        its clock starts (docs/workloads.md, "Open-loop pacing"): the arrivals
        due in its first ``SPARES_AHEAD_NS``, or the requested rate (a trace: its
        first second's) times that, whichever is more, plus ``SPARES_PER_MISS``;
        at most ``SPARES_AT_START_MAX`` and ``max_in_flight``."""
        tu = self._tuning
        if self.load.mode == "rate":
            rate, first = self.load.rate_rps, 0
        else:
            spec, part = self.load.trace, self.load.trace_part
            rate = float(spec.scheduled_between(0, NS_PER_S, *part))
            first = spec.scheduled_between(0, tu.spares_ahead_ns, *part)  # a burst at the start
        n = max(math.ceil(rate * tu.spares_ahead_ns / NS_PER_S), first) + tu.spares_per_miss
        return min(n, tu.spares_at_start_max, self.load.max_in_flight)

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
        with trio.move_on_after(self._tuning.preopen_max_s):
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
        tu = self._tuning
        return min(math.ceil(self.load.rate_rps * tu.spares_reserve_ns / NS_PER_S) + tu.spares_per_miss,
                   tu.spares_reserve_max, self.load.max_in_flight)

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
        tu = self._tuning
        recent = self._due_recent
        recent.append(due_ns)
        while recent[0] <= due_ns - tu.spares_reserve_ns:  # (a half-open window: a steady rate's
            recent.popleft()                              # count is its reserve's, no more)
        want = min(len(recent) + tu.spares_per_miss, tu.spares_reserve_max, self.load.max_in_flight)
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
        tu = self._tuning
        if (origin[0] != b"http" or self._spares_failed.get(origin, 0) >= tu.spares_failed_max):
            return
        want = max(self._reserve, self._want_idle)
        n = min(want - self._transport.idle_count(origin) - self._spares_opening,
                tu.spares_opening_max - self._spares_opening)
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
        tu = self._tuning
        if (self._spares_opening + tu.spares_per_miss > tu.spares_opening_max or origin[0] != b"http"
                or self._spares_failed.get(origin, 0) >= tu.spares_failed_max):
            return
        for _ in range(tu.spares_per_miss):
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
                plan.request.extensions[SENT_AT] = (slot.sent_ns, slot.wrote_ns)  # (the thread's write)
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
            tpl = (head, tail, asks_usage(sc.protocol, encode("")))
            if len(self._templates) < 4096:
                self._templates[key] = tpl
        assert self._trace_bodies is not None
        body = tpl[0] + self._trace_bodies.prompt(i, rep) + tpl[1]
        return Prepared(body, (e.input_tokens, e.output_tokens), tpl[2],
                        spec.implied[i][0 if rep == 0 else 1], (("trace_line", e.line), ("trace_pass", rep)))
