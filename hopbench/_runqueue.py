"""The event loop thread's run-queue wait: how long the kernel kept it off a core.

Role: one of the three measures of how late the client's event loop served a
read (docs/results.md, "Client lag per read"). A loop that is runnable but not
running (both cores busy with other processes) is late for every read it will
serve, and neither the loop-lag probe (it wakes every 10 ms) nor the kernel's
receive stamps (a read of several coalesced segments carries the latest one's
stamp, socket(7) SO_TIMESTAMPNS) see all of it. Linux counts it per thread:
``/proc/thread-self/schedstat`` holds "time on cpu, time waiting on a
runqueue, timeslices" (ns, ns, count; Documentation/scheduler/sched-stats.rst).

:class:`RunQueueWatch` is a trio instrument: when the loop goes idle (it waits
for I/O with a timeout > 0) it notes the thread's run-queue wait, and after
every I/O wait it keeps how much the thread has waited since then
(``wait_ns``). Bytes that reach a socket while the loop is idle wake it at
once: any lateness of the reads served in that batch, beyond what the loop
itself was busy with, is in ``wait_ns``. It is an upper bound of that part (a
wait before the bytes arrived counts too), which is what a judgement "the client
could have piled these events up itself" needs.

Cost: one ``pread`` of an open file per loop iteration (two when the loop goes
idle), ~2.5 us each (measured on Linux 6, x86-64); nothing per read.

Invariants:
- ``wait_ns`` is never negative; it is 0 where the file does not exist
  (not Linux, a kernel without CONFIG_SCHED_INFO) or cannot be read, and
  under trio's ``MockClock`` (a real wait means nothing on a fake clock).
- the file is opened on the thread that enters the context (the loop's:
  ``thread-self`` names the thread that opens it) and closed on exit.
"""

from __future__ import annotations

import os
from types import TracebackType

import trio

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
    """The loop thread's run-queue wait since the loop last went idle.

    Use as a context manager inside ``trio.run`` (it adds itself as an
    instrument of the running loop and removes itself on exit)::

        with RunQueueWatch() as runq:
            ... runq.wait_ns ...   # ns, read at any time on the loop

    Args:
        path: the schedstat file (tests give another); default ``SCHEDSTAT``.

    Attributes:
        wait_ns: ns the loop thread waited on a run queue from the start of
            its last idle I/O wait (timeout > 0) to the end of its latest I/O
            wait; 0 without the file. Updated once per loop iteration.
        available: True when the file could be opened.
    """

    def __init__(self, path: str = SCHEDSTAT) -> None:
        self._path = path
        self._fd: int | None = None
        self._idle_from_ns = 0
        self.wait_ns = 0
        self.available = False

    def __enter__(self) -> "RunQueueWatch":
        from trio.testing import MockClock

        # a wait in real ns means nothing on a fake clock (tests): none then
        try:
            real = not isinstance(trio.lowlevel.current_clock(), MockClock)
            self._fd = os.open(self._path, os.O_RDONLY) if real else None
        except OSError:
            self._fd = None
        self.available = self._fd is not None
        if self._fd is not None:
            self._idle_from_ns = read_wait_ns(self._fd)
            trio.lowlevel.add_instrument(self)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._fd is not None:
            try:
                trio.lowlevel.remove_instrument(self)
            except KeyError:  # pragma: no cover - removed already
                pass
            os.close(self._fd)
            self._fd = None

    # -- trio.abc.Instrument hooks (called on the loop thread) ------------------------
    def before_io_wait(self, timeout: float) -> None:
        """The loop is about to wait for I/O: when it may sleep, it is idle from here."""
        if timeout > 0:
            self._idle_from_ns = read_wait_ns(self._fd)

    def after_io_wait(self, timeout: float) -> None:
        """The loop woke: what the thread waited for a core since it went idle."""
        wait = read_wait_ns(self._fd) - self._idle_from_ns
        self.wait_ns = wait if wait > 0 else 0
