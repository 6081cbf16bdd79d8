"""Streams in flight, by phase: what the client holds open and what a gateway sees.

Role: the time-weighted bookkeeping of how many streams are in each phase of
their life, pure and synchronous (STYLE.md §1): the runner stamps each phase
change with one clock reading (integer ns) and hands it here; this module never
reads a clock, so it is exact under any clock and testable without trio.

Phases (docs/results/in-flight.md, "In flight"), in the order a stream passes them:

- ``waiting``: started on the client side, nothing sent yet: the request being
  built, an open-loop arrival spawned but not yet running, a task waiting for
  the event loop or for a pooled connection (client-side time; a gateway sees
  nothing of it);
- ``connecting``: a new connection being opened (TCP, TLS);
- ``awaiting_headers``: the request is being written or was written on an
  open connection, no response head yet;
- ``streaming``: the response head arrived, the body is being read;
- ``closing``: the protocol's terminal signal arrived (the target is done),
  the client reads what is left, releases the connection, records the stream.

"In flight" is what a gateway sees: ``awaiting_headers`` + ``streaming``
(connected, the request sent, not finished). "Busy" adds ``connecting``
(the users occupied with the target; a closed loop holds its load when its N
users are busy); "open" counts every phase (every stream the client has
started and not finished; ``load.max_in_flight`` bounds this one).

Besides the phases, the gauge counts the closed loop's users *thinking*: a
session's user between two turns (``think_time_s``) holds no stream but is
holding its share of the load, as a k6 VU in ``sleep()`` does. They are no
stream's phase (not "open", no peak), only a count with its own areas
(``think``, ``steady_think_area``: docs/results/in-flight.md, "Load held").

Invariants:
- stamps passed to ``move`` and ``advance`` never decrease;
- areas are integer stream-ns (count x ns), so means are exact ratios;
- the steady window is ``[steady_from_ns, stop)``: areas inside it are kept
  apart from the whole run's (warm-up and ramp-up excluded, grace excluded).
"""

from __future__ import annotations

__all__ = ["PHASES", "WAITING", "CONNECTING", "AWAITING_HEADERS", "STREAMING", "CLOSING", "OUT",
           "IN_FLIGHT_PHASES", "BUSY_PHASES", "InFlightGauge"]

#: phase names, in order; the index of a name is its phase number
PHASES = ("waiting", "connecting", "awaiting_headers", "streaming", "closing")
WAITING, CONNECTING, AWAITING_HEADERS, STREAMING, CLOSING = range(5)
#: not started, or finished
OUT = -1
#: what a gateway sees open (connected, request sent, not finished)
IN_FLIGHT_PHASES = (AWAITING_HEADERS, STREAMING)
#: users occupied with the target: connecting to it or exchanging with it
BUSY_PHASES = (CONNECTING, AWAITING_HEADERS, STREAMING)


class InFlightGauge:
    """Counts of streams per phase over time, with their time-weighted areas.

    O(1) per phase change, whatever the number of streams or phases: the area
    of phase p up to time t is ``acc[p] + now[p] * t``, where every change of
    ``now[p]`` by d at time s subtracts ``d * s`` from ``acc[p]`` (the same with
    t and s clipped to the steady window for the steady areas).

    Args:
        t0_ns: the run's start (clock ns); areas count from here.
        steady_from_ns: where the steady window starts, clock ns (absolute,
            >= t0_ns): after warm-up and ramp-up. Default: ``t0_ns``.
        measured_from_ns: where the measured window starts (after warm-up),
            clock ns: requests sent from here on count in ``sent_measured``.
            Default: ``t0_ns``.

    Attributes (read-only for callers):
        now: list with one int per phase (``PHASES`` order): streams in it now.
        peak_in_flight: most streams a gateway saw open at once.
        peak_open: most streams the client held open at once (every phase).
        sent_measured: requests written to the target (first entries into
            ``awaiting_headers``) from ``measured_from_ns`` until the stop.
        last_ns: the last stamp seen.
    """

    __slots__ = ("now", "peak_in_flight", "peak_open", "sent_measured", "last_ns", "_read_ns",
                 "_acc", "_steady_acc", "_steady_from", "_measured_from", "_stopped_at", "_steady_end",
                 "thinking", "_think_steady_acc", "_think_last")

    def __init__(self, t0_ns: int, steady_from_ns: int | None = None,
                 measured_from_ns: int | None = None) -> None:
        n = len(PHASES)
        self.now = [0] * n
        self._acc = [0] * n
        self._steady_acc = [0] * n
        self.peak_in_flight = 0
        self.peak_open = 0
        self.sent_measured = 0
        self.last_ns = t0_ns
        self._read_ns = t0_ns  # the last advance(): areas up to here were read (intervals)
        self._steady_from = t0_ns if steady_from_ns is None else steady_from_ns
        self._measured_from = t0_ns if measured_from_ns is None else measured_from_ns
        self._stopped_at: int | None = None
        self._steady_end: int | None = None  # end_steady(): the steady window ends before the stop
        self.thinking = 0  # users between two session turns now (``think``)
        self._think_steady_acc = 0
        self._think_last = t0_ns

    # -- reading -----------------------------------------------------------------
    @property
    def in_flight(self) -> int:
        """Streams a gateway sees open now (awaiting headers + streaming)."""
        n = self.now
        return n[AWAITING_HEADERS] + n[STREAMING]

    @property
    def open(self) -> int:
        """Streams the client holds open now (every phase)."""
        return sum(self.now)

    @property
    def area(self) -> list[int]:
        """Stream-ns per phase from the start to the last stamp (list, ``PHASES`` order)."""
        t = self.last_ns
        return [a + c * t for a, c in zip(self._acc, self.now)]

    @property
    def steady_area(self) -> list[int]:
        """Stream-ns per phase inside the steady window, up to the last stamp."""
        t = self._clip(self.last_ns)
        return [a + c * t for a, c in zip(self._steady_acc, self.now)]

    @property
    def steady_think_area(self) -> int:
        """User-ns spent thinking between session turns inside the steady window, up to
        the last stamp (``think``'s or a phase change's, whichever is later)."""
        return self._think_steady_acc + self.thinking * self._clip(max(self.last_ns, self._think_last))

    def think(self, t_ns: int, delta: int) -> None:
        """A user starts (``delta`` 1) or ends (-1) a think time between session turns
        at ``t_ns`` (clock ns). Its own stamps: they need not follow the phase
        changes' (a session's user thinks while other users' streams move).

        Raises:
            ValueError: ``delta`` is not 1 or -1, or ends a think time none started.
        """
        if delta not in (1, -1) or self.thinking + delta < 0:
            raise ValueError(f"think: delta {delta} with {self.thinking} users thinking")
        self.thinking += delta
        self._think_steady_acc -= delta * self._clip(t_ns)
        self._think_last = max(self._think_last, t_ns)

    def _clip(self, t_ns: int) -> int:
        if t_ns < self._steady_from:
            return self._steady_from
        stop = self._stopped_at
        end = self._steady_end
        if end is not None and (stop is None or end < stop):
            stop = end
        return stop if stop is not None and t_ns > stop else t_ns

    def end_steady(self, t_ns: int) -> None:
        """The steady window ends at ``t_ns`` (clock ns; at the last stamp if earlier),
        before the stop: a closed loop's request budget is all taken, and its users
        drain one by one, which is not load the client failed to hold (the judge's
        "load held", docs/results/in-flight.md). Only the first call counts; the
        counts, peaks and ``sent_measured`` go on to the stop."""
        if self._steady_end is None:
            self._steady_end = max(t_ns, self.last_ns, self._steady_from)

    # -- stamping ----------------------------------------------------------------
    def advance(self, t_ns: int) -> None:
        """Take ``t_ns`` (>= the last stamp) as the time the areas reach.

        Raises:
            ValueError: ``t_ns`` is earlier than the last stamp (a clock misuse).
        """
        if t_ns < self.last_ns:
            raise ValueError(f"stamps must not decrease: {t_ns} after {self.last_ns}")
        self.last_ns = self._read_ns = t_ns

    def move_late(self, t_ns: int, late_ns: int, floor_ns: int, src: int, dst: int) -> int:
        """A phase change the client learnt of late: its event loop served the
        read that told it ``late_ns`` after the bytes arrived (the loop lag).

        The change is counted at ``t_ns - late_ns``, but never before
        ``floor_ns`` (the caller's earliest possible time: when the stream's
        previous read arrived). The whole run's areas (``area``, which the
        intervals are read from) are not changed before the last ``advance``
        (the finished intervals stay as they were read); the steady window's
        (``steady_area``, the summary's figure, read once at the end) are: a busy
        loop serves reads up to a loop lag late, and clamping them at each
        interval's end would keep streams in flight for up to that long in every
        interval (measured: +15 % in flight at 8 users with a loop 38 ms late at
        p50). Counts and areas from then on are as if ``move`` had been called
        at that time; peaks are not lowered (they were what the client held).

        Args:
            t_ns: when the client learnt of it, clock ns, >= the last stamp.
            late_ns: how late the client's loop served that read, ns (<= 0: on time).
            floor_ns: the earliest time the change can have happened, clock ns.
            src, dst: as for ``move`` (``dst`` is never ``AWAITING_HEADERS`` here).

        Returns:
            The stamp the change was counted at in ``area``, clock ns (in
            ``steady_area`` it may be earlier: see above).

        Raises:
            ValueError: a decreasing ``t_ns``, or a phase with no stream to leave.
        """
        if t_ns < self.last_ns:
            raise ValueError(f"stamps must not decrease: {t_ns} after {self.last_ns}")
        want = max(t_ns - max(late_ns, 0), floor_ns)
        at = max(want, self._read_ns)
        if want < at:  # the steady areas go back to want (move() below puts them at `at`)
            d = self._clip(at) - self._clip(want)
            if src != OUT:
                self._steady_acc[src] -= d
            if dst != OUT:
                self._steady_acc[dst] += d
        if at >= self.last_ns:
            self.move(at, src, dst)
            self.last_ns = t_ns
            return at
        # earlier than the last stamp: the same accounting, the clock stays at t_ns
        self.move(self.last_ns, src, dst, False)
        c, cl = self._clip(at), self._clip(self.last_ns)
        if src != OUT:
            self._acc[src] -= self.last_ns - at
            self._steady_acc[src] -= cl - c
        if dst != OUT:
            self._acc[dst] += self.last_ns - at
            self._steady_acc[dst] += cl - c
        self.last_ns = t_ns
        return at

    def move(self, t_ns: int, src: int, dst: int, first_send: bool = True) -> None:
        """One stream goes from phase ``src`` to ``dst`` at ``t_ns``.

        Args:
            t_ns: the stamp, clock ns, >= the last one.
            src: its phase before (``OUT`` when it starts now).
            dst: its phase after (``OUT`` when it ends now).
            first_send: for ``dst == AWAITING_HEADERS``: False when this stream's
                request was written before (a stale keep-alive connection
                retried), so that ``sent_measured`` counts each request once.

        Raises:
            ValueError: a decreasing stamp, or a phase with no stream to leave.
        """
        if t_ns < self.last_ns:
            raise ValueError(f"stamps must not decrease: {t_ns} after {self.last_ns}")
        self.last_ns = t_ns
        now = self.now
        c = self._clip(t_ns)
        if src != OUT:
            if now[src] <= 0:
                raise ValueError(f"no stream in phase {PHASES[src]!r} to move")
            now[src] -= 1
            self._acc[src] += t_ns
            self._steady_acc[src] += c
        if dst != OUT:
            now[dst] += 1
            self._acc[dst] -= t_ns
            self._steady_acc[dst] -= c
            if dst == AWAITING_HEADERS and first_send and t_ns >= self._measured_from \
                    and self._stopped_at is None:
                self.sent_measured += 1
            in_flight = now[AWAITING_HEADERS] + now[STREAMING]
            if in_flight > self.peak_in_flight:
                self.peak_in_flight = in_flight
            if src == OUT:
                total = sum(now)
                if total > self.peak_open:
                    self.peak_open = total

    def stop(self, t_ns: int) -> None:
        """The steady and measured windows end at ``t_ns`` (the run's stop:
        what happens in the grace period after it is not steady load)."""
        self.advance(t_ns)
        if self._stopped_at is None:
            self._stopped_at = t_ns
