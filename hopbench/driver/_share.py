"""The load split over workers: what each worker generates (pure arithmetic).

Role: :func:`split_load` cuts a profile's ``[load]`` and ``run.requests`` into one
:class:`WorkerShare` per worker; :func:`share_profile` is the profile as one worker
runs it (the judge reads each worker's part through it). Used by the local worker
processes (``hopbench.driver._workers``), Ray (``hopbench.driver._ray``) and the merger.

Invariants:

* Concurrency, ``max_in_flight`` and ``run.requests`` are split in shares that
  differ by at most 1 and sum to the profile's; workers whose share would be 0
  are not started.
* A rate R is split R/W per worker: Poisson arrivals with independent seeds (a
  superposition of independent Poisson processes of rates R/W is a Poisson
  process of rate R), constant arrivals phase-shifted by k/R (``arrival_offset_ns``,
  ns) so the merged schedule is evenly spaced at 1/R; a trace: every W-th entry.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from .._units import NS_PER_S
from .._errors import HopbenchError
from ..config._records import LoadSpec, Profile

__all__ = ["WorkerShare", "share_profile", "split_load"]


@dataclass(frozen=True, slots=True)
class WorkerShare:
    """What one worker generates.

    Attributes:
        index: worker index 0..W-1; also its ``seed_offset`` (distinct random
            choices and request ids ``<index>-<n>``).
        load: its share of ``[load]`` (concurrency / rate / max_in_flight).
        request_budget: its share of ``run.requests`` (None: no request limit).
        arrival_offset_ns: open loop, constant arrivals: the phase shift of
            this worker's schedule (k / R), so that the merged schedule stays
            evenly spaced; 0 otherwise. All workers start together.
        emulator_pids: the embedded emulator the driver started on its
            machine, whose CPU the worker keeps apart from the neighbours'
            (hopbench.engine._saturation); () without one.
        emulator_starts, emulator_boot_id: how a worker that may run on
            another machine (a Ray task) tells whether ``emulator_pids`` are
            its machine's processes (``_saturation.emulator_here``): their
            start times (clock ticks since boot) and the driver's boot id.
            ``emulator_boot_id`` None: the pids are trusted as they are (the
            local engine: one machine by construction).
        streams_part: where this worker appends its streams.jsonl lines (a path on
            the driver's machine: the local engine), merged by the driver at the end
            (``hopbench.driver._merge.merge_stream_parts``); None: it ships them to
            the driver in ``streams`` messages instead (a Ray task, which may run
            on another machine), or ``run.stream_log`` is off.
    """

    index: int
    load: LoadSpec
    request_budget: int | None
    arrival_offset_ns: int
    emulator_pids: tuple[int, ...] = ()
    emulator_starts: tuple[int, ...] = ()
    emulator_boot_id: str | None = None
    streams_part: str | None = None


def _split_int(total: int, parts: int) -> list[int]:
    """``total`` in ``parts`` integers differing by at most 1, larger first."""
    q, r = divmod(total, parts)
    return [q + (1 if i < r else 0) for i in range(parts)]


def split_load(profile: Profile, workers: int) -> list[WorkerShare]:
    """Split the profile's load over at most ``workers`` workers.

    Args:
        profile: the validated profile.
        workers: the number of workers asked for (>= 1).

    Returns:
        One WorkerShare per worker that gets a non-zero share, indices 0..n-1
        (n <= workers: a closed loop of 3 users runs on at most 3 workers, a
        budget of 2 requests on at most 2).

    Raises:
        HopbenchError: ``workers`` < 1.
    """
    if workers < 1:
        raise HopbenchError(f"workers: expected a positive integer, got {workers}")
    load = profile.load
    n = workers
    if load.mode == "concurrency":
        n = min(n, load.concurrency)
    else:
        n = min(n, load.max_in_flight)
    if profile.run.requests is not None:
        n = min(n, profile.run.requests)
    n = max(n, 1)
    budgets: list[int | None] = (
        list(_split_int(profile.run.requests, n)) if profile.run.requests is not None else [None] * n)
    shares = []
    if load.mode == "concurrency":
        for i, c in enumerate(_split_int(load.concurrency, n)):
            shares.append(WorkerShare(i, dataclasses.replace(load, concurrency=c, max_in_flight=c),
                                      budgets[i], 0))
    else:
        rate = load.rate_rps / n
        gap_ns = NS_PER_S / load.rate_rps
        for i, m in enumerate(_split_int(load.max_in_flight, n)):
            delay = int(round(i * gap_ns)) if load.arrival == "constant" and load.mode == "rate" else 0
            # a trace: every n-th entry, at its own time (hopbench.workload._trace.TraceSpec.arrivals)
            shares.append(WorkerShare(i, dataclasses.replace(load, rate_rps=rate, concurrency=m,
                                                             max_in_flight=m, trace_part=(i, n)),
                                      budgets[i], delay))
    return shares


def share_profile(profile: Profile, share: WorkerShare) -> Profile:
    """The profile as one worker sees it (its load and request budget)."""
    return dataclasses.replace(profile, load=share.load,
                               run=dataclasses.replace(profile.run, requests=share.request_budget))
