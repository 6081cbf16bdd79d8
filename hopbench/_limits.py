"""The process's file-descriptor limit, raised before a load needs it.

Role: base (standard library only). Every open stream holds a socket, so a
closed loop of ``concurrency`` users or an open loop of ``max_in_flight``
streams needs that many file descriptors, plus the results files, the
emulator's pipes and the interpreter's own: :data:`FD_HEADROOM`. Linux's
default soft limit (``ulimit -n``) is often 1,024 and in containers as low as
256, while the hard limit is usually far higher; load testers raise the soft
limit themselves at start (Locust does), and hopbench does the same before any
load is sent, so that a run neither piles up ``connect_error.fd_limit`` errors
nor loses its results to "Too many open files".

Invariants: the soft limit is only ever raised, never above the hard limit
(an unprivileged process may not raise the hard limit: setrlimit(2)); where
the platform has no ``resource`` module (Windows) nothing changes and the
limit reads as unknown.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["FD_HEADROOM", "FdLimit", "fds_needed", "raise_fd_limit"]

#: File descriptors a run holds besides its streams: results files, the embedded
#: emulator's pipes and sockets, the interpreter's own, the live metrics server.
FD_HEADROOM = 64


@dataclass(frozen=True, slots=True)
class FdLimit:
    """The file-descriptor limit around one raise.

    Attributes:
        needed: file descriptors the load needs (streams + :data:`FD_HEADROOM`).
        before: the soft limit found, or None where the platform has none.
        soft: the soft limit now (raised toward ``needed``, at most ``hard``).
        hard: the hard limit (None: unknown; ``resource.RLIM_INFINITY`` reads as None too).
    """

    needed: int
    before: int | None
    soft: int | None
    hard: int | None

    @property
    def enough(self) -> bool:
        """Whether the soft limit now covers the load (True where the limit is unknown)."""
        return self.soft is None or self.soft >= self.needed

    def advice(self, key: str) -> str:
        """One sentence for a limit that is not enough: what the load needs, what the
        process may open, and the two cures; ``key`` names the profile key that sets
        the load (e.g. ``[load].concurrency``)."""
        return (f"{key} needs about {self.needed:,} open files (one per stream, plus {FD_HEADROOM}); "
                f"this process may open at most {self.soft:,} (`ulimit -n`, hard limit {self.hard:,}): "
                f"raise the limit (e.g. `ulimit -n {max(self.needed, 4096)}` as root or in "
                f"/etc/security/limits.conf) or lower {key}")


def fds_needed(streams: int) -> int:
    """File descriptors a load of at most ``streams`` open streams needs (>= 0 streams)."""
    return max(streams, 0) + FD_HEADROOM


def _finite(v: int, infinity: int) -> int | None:
    return None if v == infinity or v < 0 else v


def raise_fd_limit(needed: int) -> FdLimit:
    """Raise the soft ``RLIMIT_NOFILE`` toward ``needed`` (never above the hard limit).

    Args:
        needed: the file descriptors the load needs (:func:`fds_needed`).

    Returns:
        The limit before and after. Never raises: a refused ``setrlimit`` leaves
        the limit as it was (``soft == before``).
    """
    try:
        import resource
    except ImportError:  # pragma: no cover - Windows: no RLIMIT_NOFILE to raise
        return FdLimit(needed, None, None, None)
    inf = resource.RLIM_INFINITY
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    before = _finite(soft, inf)
    if before is not None and before < needed:
        target = needed if hard == inf else min(needed, hard)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):  # a container that forbids it: the limit stays
            pass
    return FdLimit(needed, before, _finite(soft, inf), _finite(hard, inf))
