"""Open-loop arrivals written at their time by a thread of their own.

An open loop (``mode = "rate"`` or ``"trace"``) promises each request at its
scheduled time. On one event loop the scheduler's task waits behind whatever
the loop is running when the time comes: at 1,000 requests/s the streams take
most of a core, and trio runs a whole batch of ready streams before it gets
back to the scheduler, so arrivals left 5-20 ms late at p99 although every
timer fired on time (benchmarks/bench_trace.py ``--explain``: "other tasks").

The :class:`Dispatcher` takes the write of the request out of the loop. The
loop prepares each arrival ahead of its time (its request, already in wire
bytes) and queues it; the dispatcher's thread sleeps until the arrival is due
(``time.sleep``: CLOCK_MONOTONIC, the GIL released, at most ``MAX_SLEEP_S`` in one go),
takes an idle keep-alive connection, writes the request on its socket
(non-blocking, ``os.write`` on the descriptor) and stamps the write. Only then
does it hand the arrival to the loop (``TrioToken.run_sync_soon``), which
reads the response. The thread needs the GIL for the few microseconds of that
work, and CPython hands it over within the switch interval (20 us during an
open loop, hopbench.engine._runner): that interval, not the loop's batch, bounds how
late a request leaves. The thread's timer slack is 1 ns (``TIMER_SLACK_NS``),
and its check of a connection for a server's close keeps the GIL
(``_gil_held_readable``): each GIL release is another wait behind the loop.

What the thread does not do, the loop does as before (the arrival is then
handed over unsent, ``Slot.sent_ns`` None): no idle connection (a new one is
opened by the loop), a request too large to write in one go (the rest is
written by the loop: ``Slot.nsent`` bytes are out), a connection the server
closed while idle (handed back to be closed), and every arrival when
``max_in_flight`` streams are open (``Slot.full``). Once an arrival goes to
the loop unsent, the later arrivals of the same due time go unsent too
(``Slot.held``): the loop writes those in the order it was handed them
(hopbench.engine._runner, ``_WriteTurns``), so that none of them leaves before an
earlier one of its time (a trace's rows of one timestamp, in file order).

The cyclic garbage collector is the other thing that holds the GIL for long:
a young collection takes 0.1-5 ms here, a middle one 1-5 ms, during which the
thread cannot write (they were most of the arrivals late by over 1 ms at
1,000 requests/s, benchmarks/README.md). So while the thread runs, CPython's
the thread runs CPython's collections (:class:`GcPacer`): once CPython would
have, in the first gap before a due arrival that the collection fits in. The
run's collections keep their pace, between arrivals rather than across them.
CPython's own collection stays on as a backstop at twice its young threshold
(``GC_BACKSTOP_FACTOR``): what finds no gap, or a thread kept off the core,
CPython collects as usual.

Times are integer ns on hopbench's clock (hopbench._clock): the thread reads
``time.perf_counter_ns()`` plus the offset to trio's clock measured when the
dispatcher is made. Only with trio's system clock: under a fake clock the
runner paces on the loop (hopbench.engine._pacer).
"""

from __future__ import annotations

import collections
import ctypes
import gc
import os
import select
import sys
import threading
import time
from typing import Any, Callable, Protocol

__all__ = ["Dispatcher", "Slot", "IdleSource", "GcPacer", "MAX_SLEEP_S"]

MAX_SLEEP_S = 0.05
"""The thread's longest wait in one go (s). Its wait for a first slot is woken
early by ``submit`` and ``close``; its sleep until a slot is due is not (a
plain sleep: no lock hand-offs with the loop), so ``close`` may wait this long."""

TIMER_SLACK_NS = 1
"""The thread's timer slack (Linux ``prctl(PR_SET_TIMERSLACK)``; the kernel's
default is 50,000 ns): its waits end this close to their time. With a busy
loop beside it, the write left 0.19 ms after its time at p50 instead of 0.29
(benchmarks/README.md, "The GIL and the collector")."""

GC_MARGIN_NS = 100_000
"""A paced collection runs only if it is expected to end this long before the
next due arrival (ns)."""

GC_BACKSTOP_FACTOR = 2
"""While the pacer runs, CPython's own collection stays on with its young
threshold raised this many times (700 by default: 1,400): a collection that
found no gap, or a thread kept off the core, is run by CPython as usual, so
garbage and pauses stay bounded whatever the thread does."""

GC_FULL_MIN_NS = 60_000_000_000
"""The least time between two full collections the pacer runs (ns). CPython
skips a full collection while the objects promoted since the last one are
under 25 % of those that survived it, a count Python cannot read; this floor
stands in for it (CPython's own, the backstop, keeps its rule)."""

_GC_GUESS_NS = (500_000, 2_000_000, 50_000_000)
"""A collection's expected pause before one of its generation was measured, ns."""


class GcPacer:
    """CPython's cyclic collections, run by the caller between due times.

    CPython collects generation ``g`` when its count exceeds its threshold
    (``gc.get_count()``, ``gc.get_threshold()``; CPython's Modules/gcmodule.c
    ``gc_collect_generations``). While the pacer is on, CPython's young
    threshold is ``GC_BACKSTOP_FACTOR`` times higher and ``collect(gap_ns)``
    runs the collection CPython would have run at the usual threshold, when it
    is expected to fit in ``gap_ns`` (the time until the next arrival) with
    ``GC_MARGIN_NS`` to spare, expected being the longest of the last eight
    pauses of that generation. What finds no gap CPython collects itself at
    the raised threshold (the backstop). A full collection by the pacer runs
    at most every ``GC_FULL_MIN_NS``.

    Attributes (written by the collecting thread): ``paced`` collections run
    in a gap.

    ``start()`` raises the threshold if automatic collection is on (else the
    pacer stays inactive: someone else owns the collector); ``stop()`` puts
    the threshold back. Times are ``time.perf_counter_ns()``.
    """

    def __init__(self) -> None:
        self.active = False
        self._thresholds: tuple[int, int, int] = (700, 10, 10)  # gc.get_threshold(), read by start()
        self.paced = 0
        self._recent: tuple[collections.deque[int], ...] = tuple(
            collections.deque([g], maxlen=8) for g in _GC_GUESS_NS)
        self._last_full_ns = time.perf_counter_ns()

    def start(self) -> None:
        """Raise CPython's young threshold (the backstop), if automatic collection is on."""
        t0, t1, t2 = gc.get_threshold()
        if gc.isenabled() and t0 > 0:
            self._thresholds = (t0, t1, t2)
            gc.set_threshold(t0 * GC_BACKSTOP_FACTOR, t1, t2)
            self.active = True

    def stop(self) -> None:
        """Put the threshold back (if ``start`` raised it); idempotent."""
        if self.active:
            self.active = False
            gc.set_threshold(*self._thresholds)

    def due(self) -> int:
        """The generation CPython would collect now at its usual thresholds (0-2), or -1 for none."""
        c0, c1, c2 = gc.get_count()
        t0, t1, t2 = self._thresholds
        if c0 <= t0:
            return -1
        if c2 > t2 and time.perf_counter_ns() - self._last_full_ns >= GC_FULL_MIN_NS:
            return 2
        return 1 if c1 > t1 else 0

    def collect(self, gap_ns: int) -> bool:
        """Run the collection that is due if it fits in ``gap_ns``; returns whether one ran."""
        if not self.active or gc.get_count()[0] <= self._thresholds[0]:
            return False
        gen = self.due()
        if gen < 0 or max(self._recent[gen]) + GC_MARGIN_NS > gap_ns:
            return False
        self.paced += 1
        t = time.perf_counter_ns()
        gc.collect(gen)
        end = time.perf_counter_ns()
        self._recent[gen].append(end - t)
        if gen == 2:
            self._last_full_ns = end
        return True


def _set_timer_slack(ns: int) -> None:
    """The calling thread's timer slack (Linux; elsewhere, or on failure, nothing)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(29, ctypes.c_ulong(ns), 0, 0, 0)  # PR_SET_TIMERSLACK (linux/prctl.h)
    except (OSError, AttributeError):
        pass


class IdleSource(Protocol):
    """Where the dispatcher takes idle connections from (hopbench.engine._transport)."""

    def take_idle_fd(self, origin: Any) -> tuple[Any, int] | None:
        """Pop an idle plain-TCP connection of ``origin``: (connection, socket fd),
        or None. Must be safe to call from another thread (a list pop)."""
        ...

    def put_back(self, conn: Any) -> None:
        """Hand a connection that turned out unusable back (called on the loop)."""
        ...


class Slot:
    """One open-loop arrival on its way through the dispatcher.

    Attributes set by the loop before ``submit``: ``due_ns`` (scheduled time,
    hopbench's clock, ns), ``origin`` (the transport's key for the target),
    ``data`` (the request's wire bytes; None: the loop sends it itself),
    ``payload`` (anything the loop needs back).

    Set by the thread: ``taken_ns`` (when it took the arrival up: the write's
    stamp, or when it gave up writing it), ``sent_ns`` (the write's stamp when
    the whole request went out, else None), ``wrote_ns`` (the stamp just after
    that write: its last byte reached the kernel between the two), ``conn`` (the
    connection written on), ``nsent`` (bytes written), ``full`` (max_in_flight
    streams were open: not sent), ``stale`` (connections found closed by the
    server while idle, for the loop to close), ``held`` (not tried: an earlier
    arrival of the same ``due_ns`` went to the loop unsent, so this one goes
    too, to leave after it).
    """

    __slots__ = ("due_ns", "origin", "data", "payload", "taken_ns", "sent_ns", "wrote_ns", "conn", "nsent",
                 "full", "stale", "held")

    def __init__(self, due_ns: int, origin: Any, data: bytes | None, payload: Any) -> None:
        self.due_ns = due_ns
        self.origin = origin
        self.data = data
        self.payload = payload
        self.taken_ns = 0
        self.sent_ns: int | None = None
        self.wrote_ns = 0
        self.conn: Any = None
        self.nsent = 0
        self.full = False
        self.stale: list[Any] = []
        self.held = False


class Dispatcher:
    """The thread that writes open-loop arrivals at their time (see the module docstring).

    Args:
        source: the transport's idle connections (:class:`IdleSource`).
        hand_over: called on the event loop's thread, via ``run_sync_soon``,
            with each :class:`Slot` once it was taken up, in due order; with
            None when the thread failed (``error`` then holds why).
        run_sync_soon: the loop's ``TrioToken.run_sync_soon``.
        offset_ns: hopbench's clock minus ``time.perf_counter_ns()``, ns.
        open_count: the loop's count of open streams (read from the thread;
            an int read is atomic under the GIL).
        max_open: the ``max_in_flight`` bound.
        pace_gc: run the process's cyclic collections from the thread, between
            due arrivals (:class:`GcPacer`), while it runs.
        max_sleep_s: the thread's longest sleep in one go, s (``MAX_SLEEP_S``;
            a test seam): ``close()`` is seen within it.

    Use ``start()``, ``submit()`` in due order, and ``close()`` (idempotent;
    arrivals not yet taken up are dropped and returned).
    """

    def __init__(self, source: IdleSource, hand_over: Callable[[Slot | None], None],
                 run_sync_soon: Callable[..., None], offset_ns: int,
                 open_count: Callable[[], int], max_open: int, pace_gc: bool = True,
                 max_sleep_s: float = MAX_SLEEP_S) -> None:
        self._source = source
        self._max_sleep_s = max_sleep_s
        self._hand_over = hand_over
        self._soon = run_sync_soon
        self._offset_ns = offset_ns
        self._open_count = open_count
        self._max_open = max_open
        self._queue: collections.deque[Slot] = collections.deque()
        # No lock on the loop's side: deque appends and pops are atomic under the GIL,
        # and ``submit`` wakes the thread only when it waits for a first slot
        # (``_idle``). A Condition's notify on every submit cost the loop ~0.2 ms
        # per arrival in lock hand-offs with the thread (cProfile, 200/s).
        # Slots taken up, waiting for the loop: the thread appends and asks the loop to
        # drain (``_drain``) only when no drain is pending, so a loop busy for a moment
        # gets one wake-up for all of them, and the thread, catching up after a stall,
        # saves a socket write (a GIL hand-off) per arrival.
        self._taken: collections.deque[Slot | None] = collections.deque()
        self._drain_pending = False
        self._wake = threading.Event()  # set by submit (thread idle) and close
        self._idle = False
        self._closed = False
        self._thread: threading.Thread | None = None
        #: written by the thread only: arrivals handed over (sent or not), and
        #: those of them that become open streams (not dropped at max_in_flight)
        self.taken = 0
        self.taken_open = 0
        #: written by the loop only: hand-overs it has run, and those of them
        #: that started a stream (its gauge counts them from then on)
        self.handed = 0
        self.handed_open = 0
        #: written by the thread only: requests it wrote on its own
        self.sent = 0
        #: wire bytes of the queued slots: added by the loop (``submit``), taken
        #: by the thread (as it takes a slot up); two counters, one writer each
        self._bytes_in = 0
        self._bytes_out = 0
        #: the thread's: the due time of the latest slot it handed over unsent to be
        #: written by the loop (None: none yet); later slots of that time follow it
        self._unsent_due_ns: int | None = None
        self.error: BaseException | None = None
        #: the collections the thread ran (None: CPython's own, as usual)
        self.gc: GcPacer | None = GcPacer() if pace_gc else None

    # -- the loop's side -------------------------------------------------------
    def start(self) -> None:
        """Start the thread (a daemon: it never keeps the process alive)."""
        if self.gc is not None:
            self.gc.start()
        self._thread = threading.Thread(target=self._run, name="hopbench-dispatch", daemon=True)
        self._thread.start()

    def submit(self, slot: Slot) -> None:
        """Queue ``slot``; slots must come in non-decreasing ``due_ns``."""
        if slot.data is not None:
            self._bytes_in += len(slot.data)
        self._queue.append(slot)
        if self._idle:  # the thread waits for a first slot (else for the head's time)
            self._wake.set()

    def close(self) -> list[Slot]:
        """Stop the thread (waits for it: at most ``MAX_SLEEP_S`` plus one write);
        returns the slots it never took up."""
        self._closed = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self.gc is not None:
            self.gc.stop()
        left = list(self._queue)
        self._queue.clear()
        return left

    @property
    def queued_bytes(self) -> int:
        """Wire bytes of the slots queued and not yet taken up (read on the loop)."""
        return self._bytes_in - self._bytes_out

    @property
    def closed(self) -> bool:
        """Whether ``close()`` was called."""
        return self._closed

    # -- the thread ------------------------------------------------------------
    def now_ns(self) -> int:
        """hopbench's clock read from any thread, ns."""
        return time.perf_counter_ns() + self._offset_ns

    def _run(self) -> None:
        queue, wake, sleep = self._queue, self._wake, time.sleep
        max_sleep_s = self._max_sleep_s
        pacer = self.gc
        _set_timer_slack(TIMER_SLACK_NS)
        try:
            while True:
                if not queue:
                    if pacer is not None:  # nothing queued: the loop plans ahead, so no arrival is near
                        pacer.collect(int(max_sleep_s * 1e9))
                    # The order matters: clear, say idle, look again. A submit that
                    # appends after this look sees ``_idle`` and sets the event.
                    wake.clear()
                    self._idle = True
                    if not queue and not self._closed:
                        wake.wait(max_sleep_s)
                    self._idle = False
                    if self._closed:
                        return
                    continue
                if self._closed:
                    return
                slot = queue[0]
                # never early: sleep until due (close() is seen within MAX_SLEEP_S)
                left = slot.due_ns - self.now_ns()
                if left > 0 and pacer is not None and pacer.collect(left):
                    continue  # (the time has moved on)
                if left > 0:
                    sleep(min(left / 1e9, max_sleep_s))
                    continue
                queue.popleft()
                if slot.data is not None:
                    self._bytes_out += len(slot.data)
                self._take_up(slot)
                self.taken += 1
                if not slot.full:
                    self.taken_open += 1
                    if slot.sent_ns is None:  # the loop writes it: the rest of its time follows
                        self._unsent_due_ns = slot.due_ns
                self._taken.append(slot)
                if not self._drain_pending:
                    self._drain_pending = True
                    self._soon(self._drain)
        except BaseException as exc:  # the loop stops the run and raises it (never silent)
            self.error = exc
            try:  # after the slots taken up before it (None: the thread failed)
                self._taken.append(None)
                self._soon(self._drain)
            except BaseException:  # the loop is gone already: close() still reports it
                pass

    def _drain(self) -> None:
        """Hand every slot taken up so far to the loop, in due order (on the loop's thread)."""
        # The order matters: no longer pending, then drain. A slot the thread appends
        # after this line either is drained below or finds nothing pending and asks again.
        self._drain_pending = False
        taken, hand_over = self._taken, self._hand_over
        while taken:
            hand_over(taken.popleft())

    def _take_up(self, slot: Slot) -> None:
        """Write ``slot``'s request on an idle connection, if it can (the thread)."""
        # open streams, and those handed over that the loop has not started yet
        if self._open_count() + (self.taken_open - self.handed_open) >= self._max_open:
            slot.full = True
            slot.taken_ns = self.now_ns()
            return
        if slot.due_ns == self._unsent_due_ns:
            # An earlier arrival of this due time went to the loop unsent: written
            # here, this one would leave before it. The loop writes both, in order.
            slot.held = True
            slot.taken_ns = self.now_ns()
            return
        data = slot.data
        while data is not None:
            got = self._source.take_idle_fd(slot.origin)
            if got is None:
                break
            conn, fd = got
            if _readable(fd):  # EOF or junk while idle: the server closed it
                slot.stale.append(conn)
                continue
            t = self.now_ns()  # stamped before the write, as the loop's own sends are
            try:
                n = os.write(fd, data)  # (the GIL released: a loopback write took ~80 us)
            except BlockingIOError:
                n = 0
            except OSError:  # reset, broken pipe, timed out, unreachable: the connection is
                slot.stale.append(conn)  # unusable; the loop closes it, the next one is tried
                continue
            slot.conn, slot.nsent, slot.taken_ns = conn, n, t
            if n == len(data):
                slot.sent_ns, slot.wrote_ns = t, self.now_ns()
                self.sent += 1
            return
        slot.taken_ns = self.now_ns()


def _os_readable(fd: int) -> bool:
    """Whether ``fd`` has something to read now (poll, no wait)."""
    p = select.poll()
    p.register(fd, select.POLLIN | select.POLLERR | select.POLLHUP)
    return bool(p.poll(0))


class _PollFd(ctypes.Structure):
    _fields_ = [("fd", ctypes.c_int), ("events", ctypes.c_short), ("revents", ctypes.c_short)]


def _gil_held_readable() -> Callable[[int], bool]:
    """The thread's readable check, made without releasing the GIL.

    ``select.poll`` releases the GIL around its system call, as every CPython
    call that may block does; a poll with no wait never blocks, but the
    release costs the thread a second wait for the GIL behind a busy loop (the
    switch interval, and the loop's hand-back). Called through ``ctypes.PyDLL``
    the GIL stays held for the microsecond of the call. Returns ``readable(fd)``
    -> whether ``fd`` has something to read (or an error, or a hang-up). Where
    libc cannot be loaded this way, ``select.poll``. (The socket write, ~80 us
    on loopback as it delivers to the peer, keeps ``os.write``: the loop runs
    meanwhile.)
    """
    try:
        c_poll = ctypes.PyDLL(None).poll
    except (OSError, AttributeError):
        return _os_readable
    c_poll.argtypes = [ctypes.POINTER(_PollFd), ctypes.c_ulong, ctypes.c_int]
    c_poll.restype = ctypes.c_int
    events = select.POLLIN | select.POLLERR | select.POLLHUP

    def readable(fd: int) -> bool:
        pfd = _PollFd(fd, events, 0)  # (one per call: any thread may ask)
        return int(c_poll(ctypes.byref(pfd), 1, 0)) > 0

    return readable


_readable = _gil_held_readable()
