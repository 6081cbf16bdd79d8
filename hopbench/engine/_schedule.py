"""An open loop's arrival times, how many of them were due in the measured window, and
how many of those the client took up and wrote.

Role: ``hopbench.engine._runner`` takes its open loop's arrival times from
:class:`Arrivals` (constant or Poisson at ``rate_rps``; a trace replay has its
own schedule, ``hopbench.workload._trace.TraceSpec.arrivals``) and notes each one it
plans in a :class:`DueCount`; at the stop, :meth:`DueCount.at_stop` says how
many arrivals the schedule had due in ``[measured start, stop)``: summary.json
``load.due``, the figure an open loop's "load held" is judged against
(``hopbench.driver._judge.analyse``; docs/results/in-flight.md, "Load held"). A seeded Poisson
schedule that happened to be sparse over a short run is then judged on the
arrivals it really had, not on rate x window. :class:`WindowCount` counts, by
the same window and the same due times, the arrivals the client took up
(``load.arrival_rate_rps``), those whose request it wrote (``load.sent``), and
the later turns of sessions it wrote (``load.later_turns_sent``): one
half-open window ``[measured start, stop)`` on the arrivals' due times for
every figure, whenever the write itself happened (docs/results/in-flight.md, "Load held").

Invariants:

* Pure: no clock, no trio; times are integer ns on the runner's clock
  (``hopbench._clock.now_ns``), passed in.
* :class:`Arrivals` draws exactly what the runner drew before it existed (one
  ``expovariate`` per Poisson arrival, from the run's random stream, when the
  arrival is planned), so a seeded run keeps its schedule; :meth:`Arrivals.fork`
  continues it on a copy of that stream and leaves the run's own untouched.
* :class:`DueCount` holds only the planned arrivals that may still be at or
  after the stop (those within the look-ahead of the latest wake-up): memory
  does not grow with the run's length; :class:`WindowCount` only those noted at
  their very due time, until the clock moves past it or the stop is known.
"""

from __future__ import annotations

import collections
import heapq
import random
from collections.abc import Iterable, Iterator

from .._units import NS_PER_S

__all__ = ["Arrivals", "DueCount", "WindowCount", "TAKEN", "SENT", "LATER_SENT", "WALK_MAX"]

WALK_MAX = 100_000
""":meth:`DueCount.at_stop` reads at most this many of a rate schedule's arrivals
after the pending one (each drawn as the run would have); the rest up to the
stop, when there are more (a client far behind a very high rate), is counted as
the rate's mean count (``rate_rps`` x the time left): walking 30 million of them
one by one held the stop 25 s, deaf to signals."""


class Arrivals:
    """Open-loop arrival times in order, ns on the runner's clock (an iterator of int).

    The first arrival is at ``start_ns`` (constant) or one exponential gap after it
    (Poisson); each next one a gap of ``1 / rate_rps`` s later (constant) or an
    exponential gap of mean ``1 / rate_rps`` s (Poisson: ``rng.expovariate``). The
    times are accumulated as a float and truncated to ns, as the runner always did.

    Args:
        start_ns: the schedule's origin (the run's start plus a worker's arrival offset), ns.
        rate_rps: requests per second, > 0.
        poisson: exponential gaps (``load.arrival = "poisson"``) instead of constant ones.
        rng: the run's random stream (Poisson gaps are drawn from it).
    """

    __slots__ = ("_t", "_gap_ns", "_rate", "_poisson", "_rng", "_first")

    @property
    def rate_rps(self) -> float:
        """The schedule's rate, requests per second."""
        return self._rate

    def __init__(self, start_ns: float, rate_rps: float, poisson: bool, rng: random.Random) -> None:
        self._t = float(start_ns)
        self._rate = rate_rps
        self._gap_ns = NS_PER_S / rate_rps
        self._poisson = poisson
        self._rng = rng
        self._first = True

    def __iter__(self) -> Iterator[int]:
        return self

    def __next__(self) -> int:
        if self._poisson:
            self._t += self._rng.expovariate(self._rate) * NS_PER_S
        else:
            self._t += 0 if self._first else self._gap_ns
            self._first = False
        return int(self._t)

    def fork(self) -> Arrivals:
        """The same schedule from here on, drawing from a copy of the random stream.

        Returns:
            an independent :class:`Arrivals` whose next time follows the last one
            this one gave; drawing from it leaves this one's stream untouched (a
            Poisson continuation: the run's own stream also serves other draws,
            so the copy's times are a fair sample of the schedule, not the very
            times the run would have planned).
        """
        rng = random.Random()
        rng.setstate(self._rng.getstate())
        other = Arrivals(0.0, self._rate, self._poisson, rng)
        other._t, other._first = self._t, self._first
        return other


class DueCount:
    """How many arrivals of an open loop's schedule were due in ``[from_ns, stop)``.

    The runner calls, for each arrival in schedule order: :meth:`pending` when it
    takes the arrival's time from the schedule (before it waits for it), then
    :meth:`planned` once the arrival is taken up (sent, queued for the dispatcher
    thread, or dropped at ``max_in_flight``: all were due), or :meth:`ended` when
    the schedule runs out there (a ``run.requests`` budget); :meth:`passed` after
    each wake-up tells it which planned times are surely in the past. At the stop,
    :meth:`at_stop` counts.

    Args:
        from_ns: the measured window's start (the run's start plus ``run.warmup_s``), ns.
    """

    __slots__ = ("from_ns", "_done", "_ahead", "_pending", "_ended")

    def __init__(self, from_ns: int) -> None:
        self.from_ns = from_ns
        self._done = 0  # planned, in the window, and before some moment already past
        self._ahead: collections.deque[int] = collections.deque()  # planned, maybe not yet due
        self._pending: int | None = None
        self._ended = False

    def pending(self, t_ns: int) -> None:
        """The schedule's next arrival is due at ``t_ns`` (not taken up yet)."""
        self._pending = t_ns

    def planned(self) -> None:
        """The pending arrival was taken up."""
        t = self._pending
        self._pending = None
        if t is not None and t >= self.from_ns:
            self._ahead.append(t)

    def ended(self) -> None:
        """The schedule ran out: the pending arrival is not part of it, none follows."""
        self._pending = None
        self._ended = True

    def passed(self, before_ns: int) -> None:
        """Every instant before ``before_ns`` is past (the clock has reached it)."""
        ahead = self._ahead
        while ahead and ahead[0] < before_ns:
            ahead.popleft()
            self._done += 1

    def at_stop(self, stop_ns: int, rest: Iterable[int] = (), limit: int | None = None) -> int:
        """The arrivals due in ``[from_ns, stop_ns)``.

        Args:
            stop_ns: when the load stopped, ns (an arrival due at it is not in the window).
            rest: the schedule's times after the pending one, in order (e.g.
                :meth:`Arrivals.fork`, or the rest of a trace's); read only up to
                ``stop_ns``, and not at all once the schedule ended: arrivals due
                before the stop that the loop had not reached yet (it was late)
                were due all the same.
            limit: at most this many of the arrivals not yet taken up (the
                pending one and ``rest``) count: what was left of a ``run.requests``
                budget; None: no bound.

        Past ``WALK_MAX`` arrivals read from an :class:`Arrivals` ``rest``, the
        rest up to the stop counts as the rate's mean count (plus one).

        Returns:
            the count, >= 0.
        """
        n = self._done + sum(1 for t in self._ahead if t < stop_ns)
        if self._ended:
            return n
        late = taken = 0
        times = rest if self._pending is None else _chain(self._pending, rest)
        for t in times:
            if t >= stop_ns or (limit is not None and taken >= limit):
                break
            if taken >= WALK_MAX and isinstance(rest, Arrivals):
                # the rest of a rate schedule, counted: its mean count from here to the
                # stop (a client far behind a very high rate; walking it froze the stop)
                more = int(rest.rate_rps * (stop_ns - max(t, self.from_ns)) / NS_PER_S) + 1
                if limit is not None:
                    more = min(more, limit - taken)
                return n + late + max(more, 0)
            taken += 1  # (an arrival of the warm-up would have used up the budget too)
            if t >= self.from_ns:
                late += 1
        return n + late


#: :meth:`WindowCount.note` kinds: an arrival taken up by the client (a stream
#: started for it, or dropped at ``max_in_flight``); an arrival whose request was
#: written to the target; a session's later turn whose request was written
TAKEN, SENT, LATER_SENT = range(3)


class WindowCount:
    """Open-loop requests counted by their due time in ``[from_ns, stop)``.

    The rule (docs/results/in-flight.md, "Load held"): a request belongs to the load's
    window when it was *due* in it, whenever it was then written. An arrival
    due just before the stop whose request the client wrote just after it (its
    connection was being opened) is sent, as ``load.due`` counts it due; one due
    at the stop instant or after it is in neither (the window is half-open, as
    :meth:`DueCount.at_stop`'s). A session's later turn is due when its think
    time ends; it is never an arrival and counts only in :data:`LATER_SENT`.

    The runner calls :meth:`note` as it takes an arrival up and as each stream
    ends (whether its request was written is known only then, possibly in the
    grace period after the stop), and :meth:`stop` once, at the stop.

    A schedule that runs out by itself (a trace without ``loop``, a
    ``run.requests`` budget) has no stop to bound what the client takes up: a
    client that fell behind takes up and writes the rest of it seconds late,
    after the load's window ended one gap past the last arrival's due time.
    Such an arrival is load the window did not hold: an arrival (and its
    request) counts only when the client took it up before the window's end
    (:meth:`end`; until it is known, :meth:`raise_floor` gives a time it is
    surely not before, so only arrivals taken up later wait). Without it a
    1,000 requests/s trace replayed 3 s late read "6,000 of 6,000 due arrivals
    sent (1,000 of 1,000 requests/s)", held.

    Args:
        from_ns: the measured window's start (the run's start plus ``run.warmup_s``), ns.
        deadline_ns: the run's deadline (its start plus ``run.duration_s``), ns, or None:
            the window never reaches past it, whenever the stop is read.

    Attributes:
        counts: list of 3 ints, indexed by :data:`TAKEN`, :data:`SENT`,
            :data:`LATER_SENT`: the requests due in the window so far (final
            once :meth:`stop` was called and every stream ended).
    """

    __slots__ = ("from_ns", "deadline_ns", "counts", "_stop", "_undecided", "_floor", "_end", "_late")

    def __init__(self, from_ns: int, deadline_ns: int | None = None) -> None:
        self.from_ns = from_ns
        self.deadline_ns = deadline_ns
        self.counts = [0, 0, 0]
        self._stop: int | None = None
        # (kind, due ns) noted at their due instant before the stop, the stop may fall on it;
        # in due order (each was noted at its due time, and notes come in clock order)
        self._undecided: collections.deque[tuple[int, int]] = collections.deque()
        # a schedule that runs out by itself: the window's end for take-ups is at or after
        # _floor; the requests taken up from the floor on wait in _late, a heap of
        # (taken ns, kind, due ns), until the floor passes their take-up or _end is known
        self._floor: int | None = None
        self._end: int | None = None
        self._late: list[tuple[int, int, int]] = []

    def note(self, kind: int, due_ns: int, now_ns: int, taken_ns: int | None = None) -> None:
        """One request of ``kind`` due at ``due_ns``, noted at ``now_ns`` (both ns on the
        runner's clock; ``due_ns <= now_ns``: nothing is taken up or written before its time).

        Before the stop, a request due before ``now_ns`` is surely before it (the stop
        is read from the same clock later); one due at ``now_ns`` waits for a later note
        whose ``now_ns`` has passed it, or for :meth:`stop`.

        ``taken_ns``: when the client took the arrival up (ns; a :data:`TAKEN` note's
        own ``now_ns`` when None; None for a later session turn: not an arrival). Once
        :meth:`end` said where a schedule that ran out by itself ended, an arrival taken
        up at or after that end is not counted.
        """
        if due_ns < self.from_ns or (self.deadline_ns is not None and due_ns >= self.deadline_ns):
            return
        if taken_ns is None and kind == TAKEN:
            taken_ns = now_ns
        if taken_ns is not None:
            if self._end is not None:
                if taken_ns >= self._end:
                    return
            elif self._floor is not None and taken_ns >= self._floor and self._stop is None:
                heapq.heappush(self._late, (taken_ns, kind, due_ns))
                return
        self._count(kind, due_ns, now_ns)

    def raise_floor(self, floor_ns: int) -> None:
        """The window of a schedule that runs out by itself ends at ``floor_ns`` or
        later (ns: the latest arrival taken up so far, plus one gap of the schedule):
        arrivals taken up before it are in; a lower floor than before changes nothing."""
        if self._floor is not None and floor_ns <= self._floor:
            return
        self._floor = floor_ns
        late = self._late
        while late and late[0][0] < floor_ns:  # (a heap: each waiting request leaves it once)
            taken_ns, kind, due_ns = heapq.heappop(late)
            self._count(kind, due_ns, taken_ns)

    def end(self, end_ns: int) -> None:
        """The window of a schedule that ran out by itself ends at ``end_ns`` (ns):
        arrivals the client took up at or after it (it was behind its schedule) are
        not counted, now or when their streams end. A second call changes nothing."""
        if self._end is not None:
            return
        self._end = end_ns
        waiting, self._late = self._late, []
        for taken_ns, kind, due_ns in sorted(waiting):
            if taken_ns < end_ns:
                self._count(kind, due_ns, taken_ns)

    def _count(self, kind: int, due_ns: int, now_ns: int) -> None:
        stop = self._stop
        if stop is not None:
            if due_ns < stop:
                self.counts[kind] += 1
            return
        undecided = self._undecided
        while undecided and undecided[0][1] < now_ns:  # the clock has passed them: before the stop
            self.counts[undecided.popleft()[0]] += 1
        if due_ns < now_ns:
            self.counts[kind] += 1
        else:
            undecided.append((kind, due_ns))

    def stop(self, stop_ns: int) -> None:
        """The window ends at ``stop_ns`` (ns: the stop; the deadline bounds it too).
        A second call changes nothing."""
        if self._stop is not None:
            return
        self._stop = stop_ns
        for kind, due_ns in self._undecided:
            if due_ns < stop_ns:
                self.counts[kind] += 1
        self._undecided.clear()
        if self._end is None:  # the stop came first: every arrival waiting was taken up before it
            waiting, self._late = self._late, []
            for taken_ns, kind, due_ns in waiting:
                self._count(kind, due_ns, taken_ns)


def _chain(first: int, rest: Iterable[int]) -> Iterator[int]:
    yield first
    yield from rest
