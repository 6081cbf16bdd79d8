"""The Trio load engine: the only async code and the only reader of the clock.

Role: ``LoadRunner`` runs one profile's load inside ``trio.run``. One nursery
runs the load generator (a closed loop of users, here, or an open-loop arrival
schedule, hopbench.engine._open_loop), the streams themselves
(hopbench.engine._stream) and the watchers: an interval ticker (interval
histograms to the results writer, progress), an event-loop lag probe
(hopbench.engine._watch) and the stop logic (duration, request count, signals).
This module keeps the run's life cycle, its stop and signals, the closed loop
and the intervals; ``RunStats`` is what the runner knows about the run itself.

Per stream: POST through httpx (``StreamTransport`` by default), raw body bytes
-> ``SSEScanner`` -> the protocol decoder -> ``StreamMeter`` (stamps only);
at the end ``measure`` applies the metric rules to the stamps and the frozen
``StreamRecord`` goes to the ``Recorder`` and to streams.jsonl. Every foreign
exception (httpx, trio, OS) is mapped to an outcome in exactly one place,
hopbench.engine._classify; ``trio.Cancelled`` is recorded as "cancelled" and
re-raised, never swallowed.

Invariants: exactly one outcome per started stream (completed, failed,
truncated, timeout, connect_error, http_error, cancelled); times are integer
ns on the runner's clock (hopbench._clock), offsets from the run's start in
``RunStats``; in-flight streams get ``run.grace_s`` after the stop, then are
cancelled. Error codes and texts from the wire pass through
``_classify.wire_detail`` (hopbench.measure._wire_text: bounded counter
names, the run's secrets scrubbed, the first few texts kept per error kind).
"""
from __future__ import annotations

import math
import random
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import trio

from .._clock import NS_PER_S, monotonic_offset_ns, now_ns, ns_to_s
from ..config._records import LoadSpec, Profile, Scenario
from ..measure._counters import RunCounters
from ..measure._hdr import warm_tables
from ..measure._inflight import AWAITING_HEADERS, PHASES, STREAMING, InFlightGauge
from ..measure._recorder import IntervalSnapshot, Recorder
from ._collector import CollectorWatch
from ._open_loop import OpenLoopMixin, Tuning, _switch_interval
from ._pacer import Pacer, real_clock, timerfd_available
from ._saturation import host_usage, sample_host
from ._stream import StreamMixin
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
    In-flight figures (hopbench.measure._inflight, docs/results/in-flight.md "In flight"):
    ``in_flight``, ``peak_in_flight``, ``in_flight_area`` and ``steady_area``
    count what a gateway sees (request sent, not finished); ``peak_open``
    every stream the client held open; ``steady_phase_area`` the steady
    window's stream-ns per phase name; ``sent_measured`` the requests written
    to the target in the measured window (after warm-up, before the stop);
    ``due`` (open loop) the arrivals its schedule had due in that window
    (``hopbench.engine._schedule.DueCount``; docs/results/in-flight.md, ``load.due``);
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
    #: user-ns spent thinking between session turns in the steady window (a closed loop's
    #: users holding their load without a stream: hopbench.measure._inflight, ``think``)
    steady_think_area: int = 0
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


class LoadRunner(StreamMixin, OpenLoopMixin, WatchMixin):
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
        tuning: the open loop's knobs (hopbench.engine._open_loop.Tuning; None:
            its defaults, the module's constants). Keyword only, as the seams below.
        transport_factory: makes the client's transport when ``target.transport``
            is "hopbench", called with ``verify=`` (default ``StreamTransport``).
            A test seam: tests pass an in-memory transport on trio's clock
            (tests/_fake_transport.py).
        pacer_factory: makes the open loop's pacer (default ``Pacer``; a test and
            benchmark seam).
        collector_factory: makes the run's collector watch (default
            ``CollectorWatch``; a test and benchmark seam).

    Attributes set after construction (optional):
        target_alive: polled every 50 ms during the run; returns why the
            target is gone (e.g. ``EmbeddedEmulator.exit_reason``) or None.
            A reason stops the run at once as "target lost: ...".
        notice: receives one-line texts the user must see now (what a signal
            does, a lost target); default: printed on stderr.

    Three of its jobs sit in mixins, each setting up its own attributes from
    ``__init__``: one stream (``StreamMixin``, hopbench.engine._stream), the open
    loop and trace replay (``OpenLoopMixin``, hopbench.engine._open_loop) and
    self-watching (``WatchMixin``, hopbench.engine._watch).

    The run also stops by itself when ``UNREACHABLE_AFTER`` (hopbench.engine._watch)
    connection attempts in a row fail with no response between them ("target
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
                 arrival_offset_ns: int = 0, arms: Sequence[tuple[str, str]] = (), *,
                 tuning: Tuning | None = None,
                 transport_factory: Callable[..., StreamTransport] = StreamTransport,
                 pacer_factory: Callable[[], Pacer] = Pacer,
                 collector_factory: Callable[[], CollectorWatch] = CollectorWatch) -> None:
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
        self._init_stream(env, transport_factory)
        self._init_open_loop(tuning if tuning is not None else Tuning(), pacer_factory)
        self._collector_factory = collector_factory
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
        self._deadline_ns: int | None = None  # t0 + run.duration: no arrival at or after it
        #: the generator ends by itself (a trace replayed once): the run ends when it has
        self._finite = self.load.mode == "trace" and not self.load.trace.loop
        # a schedule that runs out by itself (a request budget, a trace without loop): one gap
        # of the whole run's rate, set as the clock starts; its window ends that long after its
        # last arrival (WindowCount.raise_floor, stats.schedule_end_ns; docs/results/in-flight.md, "Load held")
        self._take_gap_ns: int | None = None
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
        if not self._requests_left and self.load.mode == "concurrency":
            # the budget is all taken: the users drain from here, the steady window ends
            # (the judge's load held: hopbench.driver._judge._in_flight)
            t = now_ns()
            self._gauge.end_steady(t)
            self.stats.schedule_end_ns = t - self._t0
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
        st.steady_think_area = g.steady_think_area
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
            with (self._collector_factory() as collector,
                  _switch_interval(self.load.mode, self._tuning.switch_interval_s), self._runq):
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
            # the streams still open drain (docs/results/in-flight.md, achieved_rate_rps). The gap is
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
        for i, name in enumerate(PHASES):  # the phases by name (docs/results/in-flight.md, "In flight")
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
