"""The exceptions hopbench raises, all under one base class.

A misbehaving *server* is never an exception here: truncated streams, malformed
JSON, wrong content types and in-band error events are counted outcomes. These
classes name who is at fault when hopbench itself cannot go on::

    HopbenchError                 base of everything hopbench raises on purpose
    ├── ProfileError              a bad profile / config / budget file (user input)
    ├── UsageError                a bad command line or a misuse of the Python API
    ├── ResultsError              a results folder that cannot be read or written
    ├── SSEError                  the SSE scanner's memory bound was exceeded
    └── RunAborted                a run stopped before its end (signal, crash, results unwritable)
"""

from __future__ import annotations

from pathlib import Path

__all__ = [
    "HopbenchError",
    "ProfileError",
    "UsageError",
    "ResultsError",
    "SSEError",
    "RunAborted",
]


class HopbenchError(Exception):
    """Base class of every exception hopbench raises deliberately."""


class ProfileError(HopbenchError):
    """A profile, emulator config or budget file is invalid.

    The message always names where: ``path:line: key.path: expected X, got Y``.

    Attributes:
        path: the file (None for a mapping that came from no file).
        line: 1-based line of the offending key, or None when unknown.
        key: dotted key path, e.g. ``"load.concurrency"`` or ``"scenario[1].model"``.
        reason: what was expected and what was seen.
    """

    def __init__(
        self,
        reason: str,
        *,
        path: str | Path | None = None,
        line: int | None = None,
        key: str | None = None,
    ) -> None:
        self.path = None if path is None else str(path)
        self.line = line
        self.key = key
        self.reason = reason
        where = self.path or "<profile>"
        if line is not None:
            where += f":{line}"
        text = f"{where}: {key}: {reason}" if key else f"{where}: {reason}"
        super().__init__(text)


class UsageError(HopbenchError):
    """A command line or API call that cannot be carried out as asked."""


class ResultsError(HopbenchError):
    """A results folder (or a file in it) that cannot be written or read back."""


class SSEError(HopbenchError):
    """An SSE line or event grew past the scanner's ``max_event_bytes`` bound.

    This is the only exception the scanner raises on wire bytes: it exists so a
    hostile or broken server cannot grow client memory without bound.
    """


class RunAborted(HopbenchError):
    """A run was stopped before its planned end (SIGINT/SIGTERM or a crash), or
    its results could not be written (e.g. a full disk; the message names the
    file and the free space). ``hopbench run`` exits 3 for it.

    Partial results are still written with ``complete: false`` where possible.
    """
