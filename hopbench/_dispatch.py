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
(an event wait on CLOCK_MONOTONIC, the GIL released),
takes an idle keep-alive connection, writes the request on its socket
(non-blocking, ``os.write`` on the descriptor) and stamps the write. Only then
does it hand the arrival to the loop (``TrioToken.run_sync_soon``), which
reads the response. The thread needs the GIL for the few microseconds of that
work, and CPython hands it over within the switch interval (0.1 ms during an
open loop, hopbench._runner): that interval, not the loop's batch, bounds how
late a request leaves.

What the thread does not do, the loop does as before (the arrival is then
handed over unsent, ``Slot.sent_ns`` None): no idle connection (a new one is
opened by the loop), a request too large to write in one go (the rest is
written by the loop: ``Slot.nsent`` bytes are out), a connection the server
closed while idle (handed back to be closed), and every arrival when
``max_in_flight`` streams are open (``Slot.full``).

Times are integer ns on hopbench's clock (hopbench._clock): the thread reads
``time.perf_counter_ns()`` plus the offset to trio's clock measured when the
dispatcher is made. Only with trio's system clock: under a fake clock the
runner paces on the loop (hopbench._pacer).
"""

from __future__ import annotations

import collections
import os
import select
import threading
import time
from typing import Any, Callable, Protocol

__all__ = ["Dispatcher", "Slot", "IdleSource", "MAX_SLEEP_S"]

MAX_SLEEP_S = 0.05
"""The thread's longest wait in one go (s), woken early by ``submit`` and ``close``."""


class IdleSource(Protocol):
    """Where the dispatcher takes idle connections from (hopbench._transport)."""

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
    the whole request went out, else None), ``conn`` (the
    connection written on), ``nsent`` (bytes written), ``full`` (max_in_flight
    streams were open: not sent), ``stale`` (connections found closed by the
    server while idle, for the loop to close).
    """

    __slots__ = ("due_ns", "origin", "data", "payload", "taken_ns", "sent_ns", "conn", "nsent",
                 "full", "stale")

    def __init__(self, due_ns: int, origin: Any, data: bytes | None, payload: Any) -> None:
        self.due_ns = due_ns
        self.origin = origin
        self.data = data
        self.payload = payload
        self.taken_ns = 0
        self.sent_ns: int | None = None
        self.conn: Any = None
        self.nsent = 0
        self.full = False
        self.stale: list[Any] = []


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

    Use ``start()``, ``submit()`` in due order, and ``close()`` (idempotent;
    arrivals not yet taken up are dropped and returned).
    """

    def __init__(self, source: IdleSource, hand_over: Callable[[Slot | None], None],
                 run_sync_soon: Callable[..., None], offset_ns: int,
                 open_count: Callable[[], int], max_open: int) -> None:
        self._source = source
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
        self._stop = threading.Event()  # set by close: ends the wait until due
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
        self.error: BaseException | None = None

    # -- the loop's side -------------------------------------------------------
    def start(self) -> None:
        """Start the thread (a daemon: it never keeps the process alive)."""
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
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
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
        queue, wake, stop = self._queue, self._wake, self._stop
        try:
            while True:
                if not queue:
                    # The order matters: clear, say idle, look again. A submit that
                    # appends after this look sees ``_idle`` and sets the event.
                    wake.clear()
                    self._idle = True
                    if not queue and not self._closed:
                        wake.wait(MAX_SLEEP_S)
                    self._idle = False
                    if self._closed:
                        return
                    continue
                if self._closed:
                    return
                slot = queue[0]
                # never early: sleep until due (an event wait: close() ends it at once)
                left = slot.due_ns - self.now_ns()
                if left > 0:
                    stop.wait(min(left / 1e9, MAX_SLEEP_S))
                    continue
                queue.popleft()
                if slot.data is not None:
                    self._bytes_out += len(slot.data)
                self._take_up(slot)
                self.taken += 1
                if not slot.full:
                    self.taken_open += 1
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
                n = os.write(fd, data)
            except BlockingIOError:
                n = 0
            except OSError:  # reset, broken pipe, timed out, unreachable: the connection is
                slot.stale.append(conn)  # unusable; the loop closes it, the next one is tried
                continue
            slot.conn, slot.nsent, slot.taken_ns = conn, n, t
            if n == len(data):
                slot.sent_ns = t
                self.sent += 1
            return
        slot.taken_ns = self.now_ns()


def _readable(fd: int) -> bool:
    """Whether ``fd`` has something to read now (poll, no wait)."""
    p = select.poll()
    p.register(fd, select.POLLIN | select.POLLERR | select.POLLHUP)
    return bool(p.poll(0))
