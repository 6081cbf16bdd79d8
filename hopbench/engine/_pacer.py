"""The open loop's pacer: wake at an arrival's intended time, to the microsecond.

Role: the one place the open-loop schedulers (``mode = "rate"`` and ``mode =
"trace"`` in ``_runner``) wait for their next arrival. Two causes of schedule
lag are cut here (benchmarks/README.md, "Trace replay schedule lag"):

* **Millisecond wake-ups.** ``trio.sleep_until`` ends in ``epoll_wait``, whose
  timeout CPython rounds *up* to whole milliseconds (``select.epoll.poll``,
  ``_PyTime_ROUND_CEILING``): every arrival then wakes 0-1 ms late, 0.5 ms on
  average. On Linux the pacer instead arms a ``timerfd`` (timerfd_create(2),
  ``CLOCK_MONOTONIC``, absolute expiry in ns) and waits for it to become
  readable with ``trio.lowlevel.wait_readable``: the kernel wakes the loop at
  the expiry plus the timer slack (50 us by default), not at the next
  millisecond. Elsewhere, and whenever trio's clock is not the system clock
  (``trio.testing.MockClock`` in tests), it falls back to ``trio.sleep_until``.
* **One arrival per loop turn.** When arrivals are already due (the loop was
  busy past their time), ``wait`` returns at once without yielding, up to
  ``burst_max`` of them in a row; the next one yields (a checkpoint) so that the
  streams, the watchers and cancellation still run. A due arrival thus no
  longer waits for a whole turn of the loop (every ready stream task) per
  arrival ahead of it.

Invariants: ``wait(deadline_ns)`` never returns before ``deadline_ns`` on
hopbench's clock (``_clock.now_ns``): the timerfd's expiry is converted with a
measured offset between the two clocks and the wait is re-armed if it ever ends
early. It yields at least once every ``burst_max`` calls. Times are integer ns
on hopbench's one clock.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import trio

from .. import _clock
from .._clock import now_ns, ns_to_s

__all__ = ["Pacer", "PacerStats", "BURST_MAX", "timerfd_available", "read_run_delay_ns", "real_clock"]

BURST_MAX = 16
"""Due arrivals sent in one wake before the scheduler yields to the loop."""

_CLOCK_MONOTONIC = 1
_TFD_NONBLOCK = 0o4000  # == O_NONBLOCK (Linux, x86 and arm)
_TFD_CLOEXEC = 0o2000000  # == O_CLOEXEC
_TFD_TIMER_ABSTIME = 1
_NS = 1_000_000_000


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


class _TimerFd:
    """A Linux timerfd on ``CLOCK_MONOTONIC`` (timerfd_create(2)), through libc.

    Raises:
        OSError: when the kernel or libc refuses (no timerfd on this system).
    """

    def __init__(self) -> None:
        create, self._settime = _timerfd_calls()
        fd = create(_CLOCK_MONOTONIC, _TFD_NONBLOCK | _TFD_CLOEXEC)
        if fd < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"timerfd_create: {os.strerror(err)}")
        self.fd = fd
        self._spec = _Itimerspec()

    def arm(self, monotonic_ns: int) -> None:
        """Expire once at ``monotonic_ns`` (absolute, ``CLOCK_MONOTONIC``, ns; > 0).

        Raises:
            OSError: timerfd_settime failed.
        """
        self._spec.it_value.tv_sec, self._spec.it_value.tv_nsec = divmod(max(monotonic_ns, 1), _NS)
        if self._settime(self.fd, _TFD_TIMER_ABSTIME, ctypes.byref(self._spec), None) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"timerfd_settime: {os.strerror(err)}")

    def drain(self) -> None:
        """Consume the expiry count so that the fd is no longer readable."""
        try:
            os.read(self.fd, 8)
        except BlockingIOError:
            pass

    def close(self) -> None:
        os.close(self.fd)


@functools.lru_cache(maxsize=None)
def _timerfd_calls() -> tuple[Any, Any]:
    """libc's timerfd_create and timerfd_settime, typed; looked up once a process
    (``ctypes.util.find_library`` runs ldconfig: ~4 ms a call, and an open loop's
    first arrival waited behind two of them)."""
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    settime = libc.timerfd_settime
    settime.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.POINTER(_Itimerspec), ctypes.POINTER(_Itimerspec)]
    settime.restype = ctypes.c_int
    create = libc.timerfd_create
    create.argtypes = [ctypes.c_int, ctypes.c_int]
    create.restype = ctypes.c_int
    return create, settime


@functools.lru_cache(maxsize=None)
def timerfd_available() -> bool:
    """Whether this system offers a timerfd (Linux); never raises. Cached: the
    runner asks before its clock starts, so that an open loop's pacer is ready at once."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        _TimerFd().close()
    except (OSError, AttributeError):
        return False
    return True


def read_run_delay_ns() -> int | None:
    """The calling thread's total run-queue wait so far, in ns, or None.

    The second field of ``/proc/thread-self/schedstat`` (Linux, sched-stats.rst:
    "time spent waiting on a runqueue"): time the thread was runnable but not on
    a core. None where the file does not exist or cannot be read.
    """
    try:
        with open("/proc/thread-self/schedstat", "rb") as f:
            return int(f.read().split()[1])
    except (OSError, IndexError, ValueError):
        return None


@dataclass(slots=True)
class PacerStats:
    """What a pacer did, for ``benchmarks/bench_trace.py --explain`` (not in results).

    Attributes:
        wakes: waits that yielded to the loop (slept, or a checkpoint after a full burst).
        in_burst: waits that returned at once (already due, within a burst).
        timerfd_waits: wakes that slept on the timerfd.
        log: when a list (the benchmark sets it), one tuple per ``wait`` call:
            ``(deadline_ns, asked_ns, woke_ns, returned_ns, yielded, run_delay_ns)``:
            when the caller asked, when the wake that serves it happened (the
            burst's head), when it returned, whether it yielded, and the thread's
            run-queue wait during the yield in ns (``read_run_delay_ns`` delta;
            -1 when not yielded or unknown). None (the default) logs nothing.
    """

    wakes: int = 0
    in_burst: int = 0
    timerfd_waits: int = 0
    log: list[tuple[int, int, int, int, bool, int]] | None = field(default=None)


class Pacer:
    """Waits until arrival deadlines on hopbench's clock (see the module docstring).

    Use inside ``trio.run`` only; ``close()`` when done (a timerfd is a file
    descriptor). ``use_timerfd=None`` picks the timerfd when available and
    trio's clock is the system clock; False forces the portable path.

    Args:
        burst_max: due arrivals returned without yielding in a row (>= 1).
        use_timerfd: see above.

    Raises:
        ValueError: burst_max < 1.
    """

    def __init__(self, burst_max: int = BURST_MAX, use_timerfd: bool | None = None) -> None:
        if burst_max < 1:
            raise ValueError(f"burst_max: expected a positive integer, got {burst_max}")
        self.burst_max = burst_max
        self.stats = PacerStats()
        self._burst = 0
        self._woke_ns = 0
        self._tfd: _TimerFd | None = None
        if use_timerfd is None:
            use_timerfd = real_clock() and timerfd_available()
        if use_timerfd:
            self._tfd = _TimerFd()
            # trio's system clock is time.perf_counter() plus an offset; on Linux
            # perf_counter is CLOCK_MONOTONIC (PEP 418), the timerfd's clock
            self._offset_ns = time.monotonic_ns() - now_ns()

    @property
    def uses_timerfd(self) -> bool:
        """Whether waits sleep on a timerfd (else on ``trio.sleep_until``)."""
        return self._tfd is not None

    async def wait(self, deadline_ns: int) -> None:
        """Return at or after ``deadline_ns`` (hopbench's clock, ns), never before.

        Returns at once, without yielding, when the deadline has passed and
        fewer than ``burst_max`` calls in a row did so; otherwise sleeps (or, if
        already due, checkpoints). A cancellation is delivered only when it yields.

        Raises:
            trio.Cancelled: when cancelled while yielding.
            OSError: the timerfd failed (not expected once created).
        """
        asked = now_ns()
        log = self.stats.log
        if asked >= deadline_ns and self._burst < self.burst_max:
            self._burst += 1
            self.stats.in_burst += 1
            if log is not None:
                log.append((deadline_ns, asked, self._woke_ns, asked, False, -1))
            return
        rd0 = read_run_delay_ns() if log is not None else None
        self._burst = 1  # this call heads the next wake (also when cancelled while yielding)
        self.stats.wakes += 1
        if asked >= deadline_ns:
            await trio.lowlevel.checkpoint()
        elif self._tfd is not None:
            await self._sleep_timerfd(deadline_ns)
        else:
            await _sleep_until(deadline_ns)
        woke = now_ns()
        self._woke_ns = woke
        if log is not None:
            rd1 = read_run_delay_ns()
            log.append((deadline_ns, asked, woke, woke, True,
                        rd1 - rd0 if rd0 is not None and rd1 is not None else -1))

    async def _sleep_timerfd(self, deadline_ns: int) -> None:
        tfd = self._tfd
        assert tfd is not None
        self.stats.timerfd_waits += 1
        while True:
            tfd.arm(deadline_ns + self._offset_ns)
            await trio.lowlevel.wait_readable(tfd.fd)
            tfd.drain()
            if now_ns() >= deadline_ns:
                return
            # woke early on hopbench's clock (the two reads of the offset were
            # apart): measure it again and wait for the rest
            self._offset_ns = time.monotonic_ns() - now_ns()

    def close(self) -> None:
        """Release the timerfd, if any. Idempotent; never raises."""
        if self._tfd is not None:
            tfd, self._tfd = self._tfd, None
            try:
                trio.lowlevel.notify_closing(tfd.fd)
            except RuntimeError:  # outside trio.run
                pass
            tfd.close()


async def _sleep_until(deadline_ns: int) -> None:
    """``trio.sleep_until`` until ``now_ns() >= deadline_ns``: a float deadline can
    round to a time that ``now_ns()`` (truncating to ns) puts 1 ns early."""
    pad_ns = 0
    while now_ns() < deadline_ns:
        await trio.sleep_until(ns_to_s(deadline_ns + pad_ns))
        pad_ns = 2 * pad_ns + 1


def real_clock() -> bool:
    """Whether hopbench's clock is trio's real clock (not a MockClock, not replaced
    by a test). Inside ``trio.run`` only."""
    if _clock._current_time is not trio.current_time:
        return False
    # trio.run's default clock is trio's SystemClock (private: told by its name)
    kind = type(trio.lowlevel.current_clock())
    return kind.__name__ == "SystemClock" and kind.__module__.startswith("trio.")
