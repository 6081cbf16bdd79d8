"""The event loop thread's run-queue wait: how long the kernel kept it off a core.

Role: one of the three measures of how late the client's event loop served a
read (docs/results/in-flight.md, "Client lag per read"). A loop that is runnable but not
running (both cores busy with other processes) is late for every read it will
serve, and neither the loop-lag probe (it wakes every 10 ms) nor the kernel's
receive stamps (a read of several coalesced segments carries the latest one's
stamp, socket(7) SO_TIMESTAMPNS) see all of it. Linux counts it per thread:
``/proc/thread-self/schedstat`` holds "time on cpu, time waiting on a
runqueue, timeslices" (ns, ns, count; Documentation/scheduler/sched-stats.rst).

:class:`RunQueueWatch` is a trio instrument: after every I/O wait of the loop
it keeps the thread's run-queue wait since the I/O wait before (``wait_ns``)
and when that one ended (``turn_from_ns``): the bytes a read of this batch got
arrived after then, so both bound that read's lateness (the runner's
``_client_lag_ns``). A wake-up the kernel delayed (the bytes came, the thread
was runnable, the cores were busy) is in ``wait_ns``.

Cost: one ``pread`` of an open file and one clock reading per loop iteration,
~2.5 us (measured on Linux 6, x86-64); nothing per read.

Invariants:
- ``wait_ns`` is never negative; it is 0 where the file does not exist
  (not Linux, a kernel without CONFIG_SCHED_INFO) or cannot be read;
  under trio's ``MockClock`` the watch is not installed (a real wait means
  nothing on a fake clock): ``wait_ns`` and ``turn_from_ns`` stay 0.
- the file is opened on the thread that enters the context (the loop's:
  ``thread-self`` names the thread that opens it) and closed on exit.
"""

from __future__ import annotations

import os
import sys
from types import TracebackType

import trio

from .._clock import now_ns

__all__ = ["SCHEDSTAT", "RunQueueWatch", "read_wait_ns"]

#: the calling thread's scheduler statistics (Linux >= 3.17 for thread-self)
SCHEDSTAT = "/proc/thread-self/schedstat"


def read_wait_ns(fd: int | None) -> int:
    """The thread's total run-queue wait, ns, from an open schedstat file.

    Args:
        fd: a file descriptor of ``SCHEDSTAT`` (or any file in its format:
            three integers on one line), or None.

    Returns:
        The second field (ns spent runnable but waiting for a core since the
        thread started); 0 when ``fd`` is None or the file cannot be read or
        parsed. Never raises.
    """
    if fd is None:
        return 0
    try:
        fields = os.pread(fd, 96, 0).split()
        return int(fields[1])
    except (OSError, IndexError, ValueError):
        return 0


class RunQueueWatch(trio.abc.Instrument):
    """The loop thread's run-queue wait in the loop's latest turn, and that turn's start.

    Use as a context manager inside ``trio.run`` (it adds itself as an
    instrument of the running loop and removes itself on exit)::

        with RunQueueWatch() as runq:
            ... runq.wait_ns, runq.turn_from_ns ...   # read at any time on the loop

    A task that reads a socket in this batch got bytes that arrived after the
    previous I/O wait ended: had they been there, that wait would have reported
    them (the task was waiting on its socket), or the task's own previous read,
    in the batch before, would have taken them. So no byte of such a read waited
    longer than ``now - turn_from_ns``, and the thread's run-queue wait since then
    (``wait_ns``) is a part of its lateness that the loop-lag probe may not see.

    Args:
        path: the schedstat file (tests give another); default ``SCHEDSTAT``.

    Attributes:
        wait_ns: ns the loop thread waited on a run queue between the end of
            the I/O wait before the latest one and the end of the latest (the
            previous batch and the latest I/O wait, whose wake-up it delays);
            0 without the file.
        turn_from_ns: the end of the I/O wait before the latest one, clock ns
            (``hopbench._clock``); 0 before two waits ended.
        available: True when the schedstat file could be opened.
    """

    def __init__(self, path: str = SCHEDSTAT) -> None:
        self._path = path
        self._fd: int | None = None
        self._installed = False
        self._last_wait_ns = 0
        self._last_end_ns = 0
        self.wait_ns = 0
        self.turn_from_ns = 0
        self.available = False

    def __enter__(self) -> "RunQueueWatch":
        # a wait in real ns means nothing on a fake clock (tests): not installed then.
        # (Not imported here: trio.testing imports pytest where it is installed,
        # ~80 ms at the start of the load; a MockClock exists only once it is imported.)
        testing = sys.modules.get("trio.testing")
        if testing is not None and isinstance(trio.lowlevel.current_clock(), testing.MockClock):
            return self
        try:
            self._fd = os.open(self._path, os.O_RDONLY)
        except OSError:
            self._fd = None
        self.available = self._fd is not None
        self._last_wait_ns = read_wait_ns(self._fd)
        trio.lowlevel.add_instrument(self)
        self._installed = True
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._installed:
            self._installed = False
            try:
                trio.lowlevel.remove_instrument(self)
            except KeyError:  # pragma: no cover - removed already
                pass
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    # -- trio.abc.Instrument hook (called on the loop thread) -------------------------
    def after_io_wait(self, timeout: float) -> None:
        """The loop's I/O wait ended: a new turn, and what the thread waited for a core
        in the turn before and in this wait."""
        wait = read_wait_ns(self._fd)
        self.wait_ns = wait - self._last_wait_ns if wait > self._last_wait_ns else 0
        self._last_wait_ns = wait
        self.turn_from_ns, self._last_end_ns = self._last_end_ns, now_ns()
