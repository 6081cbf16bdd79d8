"""Self-watching: the engine measures its own lateness and the target's reachability.

Role: a mixin of ``LoadRunner`` (hopbench.engine._runner). The loop-lag probe
wakes every 10 ms and measures how late it woke (``loop_lag``), keeping the
late wake-ups (blackouts) for the idle check (:func:`away_ns`); the client lag
of a body read combines the probe's estimate, the kernel's receive stamp and
the loop thread's run-queue wait (hopbench.engine._runqueue); a watcher polls
whether the embedded target is alive; the reachability check stops a run whose
connection attempts keep failing, and the failing-target check one whose target
answers but has never streamed (``run.stop_on_failing_target``).

Invariants: every figure here is integer ns on the runner's clock
(hopbench._clock.now_ns); lags are never negative; reading a lag
(``_loop_lag_ns``, ``_client_lag_ns``) is synchronous, allocation-free but
for its result, and cheap enough for every body read.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Sequence
from typing import Any

import trio

from .._clock import NS_PER_S, now_ns, ns_to_s
from .._exit import STOP_TARGET_FAILING, STOP_TARGET_LOST, STOP_TARGET_UNREACHABLE
from ..measure._recorder import Recorder
from ._runqueue import RunQueueWatch

__all__ = ["FAILING_PREFIX", "UNREACHABLE_AFTER", "WatchMixin", "away_ns"]

UNREACHABLE_AFTER = 20  # connection failures in a row, with no response between, that end a run
#: how the failing-target stop reason begins (``RunStats.interrupted_by``; the driver's exit 4)
FAILING_PREFIX = STOP_TARGET_FAILING
_TARGET_POLL_S = 0.05  # how often the embedded emulator's process is looked at
_LOOP_PROBE_NS = 10_000_000  # the lag probe sleeps 10 ms at a time
#: the loop-lag probe's late wake-ups kept for the idle check (``away_ns``): at
#: least 1 ms late, the newest 1,024 (over 10 s of a loop late at every probe)
_BLACKOUT_MIN_NS = 1_000_000
_BLACKOUTS_KEPT = 1024


def away_ns(blackouts: Sequence[tuple[int, int]], since_ns: int, now: int, due_ns: int) -> int:
    """How long the event loop was measured away between ``since_ns`` and ``now``, ns.

    The loop-lag probe sleeps until a deadline; when it wakes ``lag`` ns late at
    ``woke``, nothing in the loop ran on time during ``[woke - lag, woke]`` (the
    process was descheduled or the loop busy): no read could have been served.
    The idle check subtracts this from a silence (docs/results/counters.md,
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

class WatchMixin:
    """The runner's watch on itself and on its target (a mixin of ``LoadRunner``).

    Owns (sets): ``_probe_due_ns``, ``_lag_ns``, ``_lag_at_ns`` (the probe's due
    time, its last lag and when it woke, ns), ``_blackouts`` (its late
    wake-ups), ``_runq`` (the loop thread's run-queue watch, entered by
    ``LoadRunner.run``), ``_reached`` (a response ever arrived),
    ``_connect_failures`` (in a row, since the last response) and
    ``_last_error`` (the last stream exception's text, written by the stream's
    boundary, ``LoadRunner._stream``, for the unreachable message), ``_streamed``
    (a stream ever completed or carried output) and ``_failing`` (the failed
    responses before that, by head: ``"HTTP <status> <content type>"``).

    Reads of ``LoadRunner``: ``stats``, ``profile``, ``notice``, ``base_url``, ``_t0``,
    ``_stopping``, ``request_stop`` and ``_recorder_for``.
    """

    stats: Any  # LoadRunner's RunStats (hopbench.engine._runner imports this module)
    profile: Any  # LoadRunner's Profile (run.stop_on_failing_target)
    notice: Callable[[str], None]
    base_url: str
    _t0: int
    _stopping: bool
    request_stop: Callable[..., None]
    _recorder_for: Callable[[int], Recorder]

    def _init_watch(self) -> None:
        """Set the watch's own attributes (called by ``LoadRunner.__init__``)."""
        self._reached = False
        self._connect_failures = 0  # in a row, since the last response
        self._last_error = ""  # the last stream exception's text, for the unreachable message
        self._streamed = False  # a stream ever completed or carried output: the target streams
        self._failing: collections.Counter[tuple[str, str]] = collections.Counter()  # (head, outcome) -> n
        # The loop-lag probe's state, read at every body read (client_lag_ns):
        # when it is due, and its last measured lag and wake-up stamp.
        self._probe_due_ns = 1 << 62
        self._lag_ns = 0
        self._lag_at_ns = -(1 << 62)
        #: the loop thread's run-queue wait in the loop's latest turn (entered in run())
        self._runq = RunQueueWatch()
        #: its late wake-ups (woke_ns, lag_ns), newest last: the idle check's ``away_ns``
        self._blackouts: collections.deque[tuple[int, int]] = collections.deque(maxlen=_BLACKOUTS_KEPT)

    async def _watch_target(self, alive: Callable[[], str | None]) -> None:
        """Stop the run as soon as ``alive()`` says the target is gone (the
        embedded emulator's process exited): its streams would only fail."""
        while True:
            reason = alive()
            if reason is not None:
                if not self._stopping:
                    t_s = (now_ns() - self._t0) / NS_PER_S
                    if self.stats.interrupted_by is None:
                        self.stats.interrupted_by = f"{STOP_TARGET_LOST}: {reason} {t_s:.1f} s into the run"
                        self.notice(f"{self.stats.interrupted_by}; stopping the run")
                    self.request_stop()
                return
            await trio.sleep(_TARGET_POLL_S)

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
                        f"{STOP_TARGET_LOST}: it answered before, then the last {self._connect_failures} "
                        f"connection attempts to {self.base_url} failed ({detail or 'connect error'}), "
                        f"{t_s:.1f} s into the run{why}")
                    self.notice(f"{self.stats.interrupted_by}; stopping the run")
                else:
                    self.stats.interrupted_by = (
                        f"{STOP_TARGET_UNREACHABLE}: the first {self._connect_failures} connection attempts to "
                        f"{self.base_url} failed ({detail or 'connect error'}) and none got a response{why}")
                self.request_stop()

    def _check_failing(self, outcome: str, detail: str, status: int | None, ctype: str, streamed: bool) -> None:
        """Stop early when the target answers but has never streamed: the first
        ``run.stop_on_failing_target`` responses (N, 0: never) all failed (an HTTP
        error, a web page, a body that is not a stream) and no stream ever completed
        or carried an output event. Hammering such a target for the whole run
        measures nothing (issue 39: 10,406 requests in 8 s to "Welcome to nginx!").

        Streams without a response (connection failures: ``_check_reachable``'s) and
        the client's own cancels count neither way. Once one stream has streamed,
        the target is never stopped by this check, however many fail after.
        The stop reason (``stats.interrupted_by``) begins ``FAILING_PREFIX`` and names
        the commonest observed failure: status, Content-Type and outcome.
        """
        if streamed:
            self._streamed = True
            return
        limit = self.profile.run.stop_on_failing_target
        if (self._streamed or not limit or status is None or self._stopping
                or outcome in ("completed", "cancelled", "client_cancelled")):
            return
        kind = f"{outcome}.{detail.partition(':')[0]}" if detail else outcome
        failing = self._failing
        failing[(f"HTTP {status} {ctype.partition(';')[0].strip() or '(no Content-Type)'}", kind)] += 1
        n = failing.total()
        if n == limit and self.stats.interrupted_by is None:
            (head, kind), k = failing.most_common(1)[0]
            self.stats.interrupted_by = (
                f"{FAILING_PREFIX}: the first {n} responses from {self.base_url} all failed and none streamed an "
                f"event ({k} of {n}: {head}, {kind}); stopped early (run.stop_on_failing_target = {limit})")
            # no notice while the run goes (as target unreachable's): the stop is at once, and the
            # run's warnings (or, with --quiet, its exit line) say it, once
            self.request_stop()

    def _loop_lag_ns(self, t_ns: int) -> int:
        """How late the event loop serves what it runs at ``t_ns`` by the loop-lag
        probe, ns >= 0: its overdue time (it has not run yet), or the lag it just
        measured (it ran within the last 10 ms)."""
        lag = t_ns - self._probe_due_ns
        if t_ns - self._lag_at_ns <= _LOOP_PROBE_NS and self._lag_ns > lag:
            lag = self._lag_ns
        return lag if lag > 0 else 0

    def _client_lag_ns(self, t_ns: int, rx_ns: int, after_turn: bool) -> tuple[int, int]:
        """A body read served at ``t_ns`` whose latest bytes the kernel stamped
        ``rx_ns`` (clock ns; 0: no stamp): (client lag, lateness of its latest bytes), ns.

        The client lag (docs/results/in-flight.md, "Client lag per read") is the largest of
        the kernel stamp's lateness, the loop-lag probe's estimate and the loop
        thread's run-queue wait in the loop's latest turn (hopbench.engine._runqueue):
        Linux gives coalesced segments the latest one's stamp, so the stamp alone
        cannot tell how long the first of a read's bytes waited. With ``after_turn``
        (no byte of this read arrived before the loop's previous turn began: the
        transport's ``_Body.after_turn``, a read that waited for its bytes or came
        right after one that did) the probe's estimate is capped at the time since
        that turn began; a read that found its bytes waiting after one that did too
        may hold bytes a whole turn older, so it keeps the probe's estimate whole.
        The second figure is when the read's
        latest bytes arrived, as exactly as known: by the kernel stamp when there
        is one (a terminal event is the last bytes of a stream: the stamp is its
        arrival), else the client lag."""
        runq = self._runq
        lag = self._loop_lag_ns(t_ns)
        if after_turn and runq.turn_from_ns and lag > t_ns - runq.turn_from_ns:
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
