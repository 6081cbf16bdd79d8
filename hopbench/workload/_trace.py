"""Trace replay's schedule: a validated replay (``TraceSpec``), its arrivals and its plan.

Role: ``[load] mode = "trace"`` (docs/workloads.md, "Trace replay"). A
``TraceSpec`` holds the replayed window of a trace (``_trace_file``, read and
checked at profile load by ``config._trace_spec``), the scenario of each
entry, the speedup and whether it loops; it gives the schedule
(``TraceSpec.arrivals``: offsets in ns from the run start), counts what is due
in a stretch (``scheduled_between``) and says before the load what the replay
will do (``replay_plan``). The bodies are ``_trace_bodies``', the cache hits a
trace implies ``_trace_cache``'s.

Invariants:
- Pure: no clock, no I/O.
- Schedule offsets are integer ns, non-decreasing within a pass; entries of one
  timestamp are scheduled in file order.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import overload

from .._units import NS_PER_MS
from ._trace_file import TraceEntries

__all__ = ["LONG_REPLAY_S", "TraceSpec", "replay_plan"]


@dataclass(frozen=True, slots=True)
class TraceSpec:
    """A validated trace replay (``[load]`` of mode "trace").

    Attributes:
        path: the trace file.
        entries: the entries of the window, in time order (non-empty; compact
            columns: index it for a ``TraceEntry``, or read a column).
        scenario_index: per entry, the index of the scenario that sends it (an int array).
        start_ms: the window's start, ms of trace time.
        period_ms: the window's length for ``loop`` (see ``window``).
        speedup: trace time / replay time (2: twice as fast).
        loop: replay the window again and again (until the run's duration
            or request count ends it).
        block_tokens: tokens per hash id.
        implied: per entry, the cache hits the trace implies (``implied_hits``;
            computed in entry order as it is read).
    """

    path: Path
    entries: TraceEntries
    scenario_index: Sequence[int]
    start_ms: float
    period_ms: float
    speedup: float
    loop: bool
    block_tokens: int
    implied: Sequence[tuple[int, int]]

    @property
    def rate_rps(self) -> float:
        """The window's mean request rate at this speedup, requests per second.

        Meaningless for a replay of :attr:`one_instant` (its period is made up:
        1 s); the reports show no rate for one.
        """
        return len(self.entries) / (self.period_ms / 1000.0) * self.speedup

    @property
    def one_instant(self) -> bool:
        """The replay is one instant: not looped, and every entry of the window
        at one timestamp (a single entry, or a burst). Such a schedule has no
        rate: requests/s over a gap after the instant would be made up (the
        period's 1 s divided among the entries; before, 0.5 ms for two entries:
        thousands per second) (docs/workloads.md, "Trace replay"). A looped one
        repeats every ``period_ms``: that is its rate."""
        return not self.loop and self.entries.t_ms(0) == self.entries.t_ms(len(self.entries) - 1)

    @property
    def zero_note(self) -> str | None:
        """What the window's rows with a length of 0 became, for a person, or None
        when it has none (``TraceEntries.zero_rows``; docs/workloads.md, "Trace
        replay"): ``3 rows of t.csv have 0 tokens (2 with 0 input tokens, 1 with 0
        output tokens; first at line 17): each is replayed as an arrival with 1 token
        instead (...)``; the window's rows only."""
        rows, n_in, n_out, first = self.entries.zero_rows()
        if not rows:
            return None
        kinds = ", ".join(f"{n} with 0 {what} tokens" for n, what in ((n_in, "input"), (n_out, "output")) if n)
        return (f"{rows} row{'s' if rows != 1 else ''} of {self.path.name} "
                f"{'have' if rows != 1 else 'has'} 0 tokens ({kinds}; first at line {first}): "
                f"{'each is' if rows != 1 else 'it is'} replayed as an arrival with 1 token instead "
                "(an empty prompt cannot be sent; max_tokens is at least 1)")

    def offset_ns(self, i: int, rep: int) -> int:
        """Entry ``i``'s scheduled time in pass ``rep`` (0-based), ns from the replay's start."""
        t_ms = self.entries.t_ms(i) - self.start_ms + rep * self.period_ms
        return int(round(t_ms * NS_PER_MS / self.speedup))

    def arrivals(self, part: int = 0, parts: int = 1) -> Iterator[tuple[int, int, int]]:
        """The schedule: (offset ns, entry index, pass) in time order; entries of
        one timestamp in file order (their offsets are equal: the runner takes
        them up in the order given here).

        Args:
            part, parts: this worker's share: the entries whose index is
                ``part`` modulo ``parts`` (the union over the parts is the
                whole trace; each keeps its own times).

        Yields:
            Forever when ``loop``, else each entry of the part once.
        """
        n = len(self.entries)
        rep = 0
        while True:
            for i in range(part, n, parts):
                yield self.offset_ns(i, rep), i, rep
            if not self.loop:
                return
            rep += 1

    def scheduled_between(self, a_ns: int, b_ns: int, part: int = 0, parts: int = 1) -> int:
        """How many requests are scheduled in ``[a_ns, b_ns)`` from the replay's
        start, counting every pass: of the whole trace, or of one worker's
        share (``part`` of ``parts``, as ``arrivals``)."""
        if b_ns <= a_ns:
            return 0
        count = 0
        period_ns = self.period_ms * NS_PER_MS / self.speedup
        # offsets are non-decreasing within a pass, and a later pass is the first one
        # shifted by whole periods (to within 1 ns of rounding): one bisect per pass
        # that may straddle a_ns or b_ns; the passes between lie wholly inside and
        # count len(base) each, so a long looped window of a short period costs
        # O(1) passes, not one per pass (a 1 ms period over an hour: 3.6 M bisects)
        # the first pass's offsets, computed as the bisects read them: the runner asks this as
        # its clock starts (spare connections), and a list of a 500,000-line trace's offsets
        # took 0.3-0.6 s there, every arrival of the first second that late
        base = _Offsets(self, range(part, len(self.entries), parts))
        if not base:
            return 0
        if not self.loop:
            return bisect.bisect_left(base, b_ns) - bisect.bisect_left(base, a_ns)
        margin = 2 + int(2 / period_ns)  # passes of slack for the 1 ns of rounding per pass
        first = max(0, int((a_ns - base[-1]) // period_ns) - margin)  # earlier passes end before a_ns
        last = int((b_ns - base[0]) // period_ns) + margin  # later passes start at or after b_ns
        inner_lo = max(first, int((a_ns - base[0]) // period_ns) + margin)
        inner_hi = min(last, int((b_ns - base[-1]) // period_ns) - margin)  # exclusive
        if inner_hi > inner_lo:  # wholly inside [a_ns, b_ns)
            count += (inner_hi - inner_lo) * len(base)
            straddle = [*range(first, inner_lo), *range(inner_hi, last + 1)]
        else:
            straddle = list(range(first, last + 1))
        for rep in straddle:
            shift = int(round(rep * period_ns))
            count += bisect.bisect_left(base, b_ns - shift) - bisect.bisect_left(base, a_ns - shift)
        return count


class _Offsets(Sequence[int]):
    """The first pass's offsets (ns) of some entries, computed when read (a
    sequence for ``bisect``: non-decreasing, as the trace's times are)."""

    __slots__ = ("_spec", "_index")

    def __init__(self, spec: TraceSpec, index: range) -> None:
        self._spec, self._index = spec, index

    def __len__(self) -> int:
        return len(self._index)

    @overload
    def __getitem__(self, k: int) -> int: ...
    @overload
    def __getitem__(self, k: slice) -> Sequence[int]: ...

    def __getitem__(self, k: int | slice) -> int | Sequence[int]:
        if isinstance(k, slice):
            return [self._spec.offset_ns(i, 0) for i in self._index[k]]
        return self._spec.offset_ns(self._index[k], 0)


#: a replay (one pass of the window) longer than this gets a warning before the load
LONG_REPLAY_S = 24 * 3600.0


def _span(seconds: float) -> str:
    """A replay's length for a person: s, min, h or days."""
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.1f} min"
    if seconds < 3 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.3g} days"


def replay_plan(spec: TraceSpec, duration_ns: int | None, requests: int | None,
                ) -> tuple[str, str | None]:
    """What a trace replay will do, said before the load: (plan line, warning or None).

    The line gives the window's requests, one pass's replay time at
    ``spec.speedup`` and the mean rate (a replay of :attr:`TraceSpec.one_instant`
    has none: the line says the requests are due at one instant), then
    :attr:`TraceSpec.zero_note` when the window has rows with 0 tokens. The warning: one pass takes longer than
    ``LONG_REPLAY_S`` with nothing else to end it (a speedup far below 1 stretches
    the trace: ``speedup = 1e-6`` makes a 10 s trace 116 days), or
    ``run.duration_s`` ends the replay before the window's last request.

    Args:
        spec: the replay.
        duration_ns: ``run.duration_s`` (ns) or None.
        requests: ``run.requests`` or None.
    """
    n = len(spec.entries)
    last_s = spec.offset_ns(n - 1, 0) / 1e9  # the window's last request, from the replay's start
    pass_s = spec.period_ms / 1000.0 / spec.speedup if spec.loop else last_s
    if spec.one_instant:  # no rate (TraceSpec.one_instant): say what it is instead
        line = (f"trace replay: {n} request{'s' if n != 1 else ''} from {spec.path.name}, "
                + ("all due at one instant (no rate)" if n > 1 else "due at the replay's start (no rate)"))
    else:
        line = (f"trace replay: {n} request{'s' if n != 1 else ''} from {spec.path.name}, "
                f"{_span(pass_s)} a pass at speedup {spec.speedup:g} (mean {spec.rate_rps:.3g} requests/s)"
                + (", looped" if spec.loop else ""))
    note = spec.zero_note
    if note is not None:
        line += f"; {note}"
    warning = None
    if duration_ns is None and requests is None and pass_s > LONG_REPLAY_S:
        warning = (f"the trace's window takes {_span(pass_s)} to replay at load.speedup = {spec.speedup:g} "
                   "(trace time / replay time: below 1 replays slower than recorded); raise the "
                   "speedup or set run.duration_s")
    elif duration_ns is not None and not spec.loop and last_s * 1e9 >= duration_ns:
        sent = spec.scheduled_between(0, duration_ns)
        warning = (f"run.duration_s = {duration_ns / 1e9:g} ends the replay after {sent} of its {n} "
                   f"requests (the window takes {_span(last_s)} at speedup {spec.speedup:g})")
    return line, warning
