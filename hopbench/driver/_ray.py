"""The Ray engine: the same workers as Ray tasks, for load from many hosts.

Role: ``run_profile_ray`` is ``run_profile_workers`` with the worker processes
replaced by Ray tasks (``[run] engine = "ray"``, ``--engine ray``). Each task
runs :func:`hopbench.driver._workers.run_worker` unchanged; messages go through one
small actor (the hub) that the driver drains every 100 ms, so intervals are
streamed (merged, logged and shown while the run goes), not delivered at the
end. The merge, the summary and the folder are :class:`hopbench.driver._merge.Merger`'s.

Invariants:

* Ray is optional (``pip install 'hopbench[ray]'``) and imported only here,
  only when this engine is used; without it :class:`~hopbench.UsageError`
  says how to install it.
* Each worker's messages reach the hub in the order sent (Ray orders a
  caller's actor calls); its last message ("done") is sent synchronously, so
  once a task has finished every message it sent can be drained.
* The common start is Unix time (``time.time()``), the only clock that hosts
  share; with hosts whose clocks disagree the per-worker ``start_skew_ms``
  in the summary shows it (NTP keeps it to milliseconds).
* Ray owns its worker processes' signals: a signal on the driver is passed to
  the tasks through the hub ("stop", seen at their next interval end, then
  ``run.grace_s``); a second one cancels the tasks.
* The embedded emulator listens on 127.0.0.1 of the driver's host: with a
  remote cluster give the profile a ``target.url`` the nodes can reach. A task
  measures the emulator's CPU only on the driver's machine (same boot id, same
  process start time: ``_saturation.emulator_here``); elsewhere its
  ``emulator_cpu_cores`` is null with ``emulator_cpu_note`` saying why.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .._clock import NS_PER_S
from .._errors import UsageError
from ..config._records import Profile
from ..measure._recorder import IntervalSnapshot
from ._common import RunOutcome
from ._merge import Merger
from ._share import WorkerShare, split_load
from ._workers import (
    _KILL_AFTER_S,
    _POLL_S,
    _READY_TIMEOUT_S,
    START_DELAY_S,
    _drive_run,
    run_worker,
)

__all__ = ["run_profile_ray", "import_ray", "RAY_INSTALL_HINT"]

RAY_INSTALL_HINT = "pip install 'hopbench[ray]'  (or: pip install 'ray[default]>=2.9')"


def import_ray() -> Any:
    """Import Ray or say how to install it.

    Raises:
        UsageError: Ray is not installed.
    """
    try:
        import ray
    except ImportError as exc:
        raise UsageError(f"the Ray engine needs Ray, which is not installed: {RAY_INSTALL_HINT}") from exc
    return ray


class _Hub:
    """The mailbox between the driver and the tasks (a Ray actor, no CPU).

    Workers ``put`` messages; the driver ``drain``s them, sets the common start
    (``set_go``: Unix time in s, or None to call the run off) and asks the
    workers to stop (``set_stop``).
    """

    def __init__(self) -> None:
        self._msgs: list[dict[str, Any]] = []
        self._go: tuple[bool, float | None] = (False, None)
        self._stop: str | None = None

    def put(self, msg: dict[str, Any]) -> None:
        self._msgs.append(msg)

    def drain(self) -> list[dict[str, Any]]:
        out, self._msgs = self._msgs, []
        return out

    def set_go(self, go_at: float | None) -> None:
        self._go = (True, go_at)

    def get_go(self) -> tuple[bool, float | None]:
        return self._go

    def set_stop(self, reason: str) -> None:
        self._stop = reason

    def get_stop(self) -> str | None:
        return self._stop


def _ray_worker(profile: Profile, base_url: str, share: WorkerShare, hub: Any) -> int:
    """The body of one Ray task (module-level: Ray ships it by reference)."""
    import ray

    def send(msg: dict[str, Any]) -> None:
        ref = hub.put.remote(msg)
        if msg["kind"] == "done":
            ray.get(ref)  # every earlier message is in the hub once this returns

    def wait_go() -> float | None:
        while True:
            is_set, go_at = ray.get(hub.get_go.remote())
            if is_set:
                return float(go_at) if go_at is not None else None
            time.sleep(0.02)

    asked: list[Any] = [None]

    def poll_stop() -> str | None:
        # never block the event loop on the hub: look at the last answer, ask again
        ref, answer = asked[0], None
        if ref is not None:
            ready, _ = ray.wait([ref], timeout=0)
            if not ready:
                return None
            answer = ray.get(ref)
        asked[0] = hub.get_stop.remote()
        return answer

    run_worker(profile, base_url, share, send, wait_go, poll_stop, install_signals=False)
    return share.index


def run_profile_ray(profile: Profile, *, out_dir: Path | None = None,
                    on_line: Callable[[str], None] | None = None,
                    progress: Callable[[IntervalSnapshot, dict[str, Any]], None] | None = None,
                    base_url: str | None = None, address: str | None = None,
                    num_cpus: int | None = None) -> RunOutcome:
    """``run_profile`` over ``profile.run.workers`` Ray tasks.

    Args:
        profile, out_dir, on_line, progress, base_url: as for ``run_profile``.
        address: the Ray cluster (``ray.init(address=...)``); default the
            profile's ``run.ray_address``; None starts a local Ray instance.
            Ignored when Ray is already initialised in this process.
        num_cpus: CPUs of a local Ray instance (default: the worker count, at
            least 2). Each task reserves one CPU.

    Returns:
        RunOutcome; summary.json has ``engine: "ray"``, ``hosts`` and
        ``worker_detail`` as for local workers.

    Raises:
        UsageError: Ray is not installed (with the install command).
        ResultsError: the results folder cannot be written.
    """
    ray = import_ray()
    shares = split_load(profile, profile.run.workers)
    address = address if address is not None else profile.run.ray_address
    started_here = False
    if not ray.is_initialized():
        kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": True}
        if address is None:
            kwargs["num_cpus"] = num_cpus if num_cpus is not None else max(2, len(shares))
        ray.init(address=address, **kwargs)
        started_here = True

    def drive(merger: Merger, url: str, interrupted: list[str | None]) -> None:
        hub = ray.remote(num_cpus=0)(_Hub).remote()
        task = ray.remote(num_cpus=1, max_retries=0)(_ray_worker)
        # the emulator's identity goes with each share: a task measures it only on its machine
        refs = {task.remote(profile, url, merger.remote_share(s), hub): s.index for s in shares}
        try:
            _pump_ray(ray, merger, hub, refs, interrupted, profile)
        finally:
            for ref in refs:
                ray.cancel(ref, force=True)
            ray.kill(hub)

    try:
        return _drive_run(profile, shares, "ray", out_dir=out_dir, on_line=on_line,
                          progress=progress, base_url=base_url, drive=drive)
    finally:
        if started_here:
            ray.shutdown()


def _pump_ray(ray: Any, merger: Merger, hub: Any, refs: dict[Any, int],
              interrupted: list[str | None], profile: Profile) -> None:
    go_sent = False
    signals_seen = 0
    ready_deadline = time.monotonic() + _READY_TIMEOUT_S
    run_deadline: float | None = None

    def drain() -> None:
        for msg in ray.get(hub.drain.remote()):
            merger.handle(msg)

    while refs:
        drain()
        n_signals = len(interrupted) - 1
        if n_signals > signals_seen:
            signals_seen = n_signals
            if not go_sent:
                ray.get(hub.set_go.remote(None))
                go_sent = True
            elif n_signals == 1:
                ray.get(hub.set_stop.remote(interrupted[0]))
            else:  # a second signal: no grace
                for ref in refs:
                    ray.cancel(ref, force=True)
        if not go_sent:
            ready = all(w.state != "starting" for w in merger.workers.values())
            if ready or time.monotonic() > ready_deadline:
                go_at = time.time() + START_DELAY_S
                ray.get(hub.set_go.remote(go_at))
                go_sent = True
                merger.load_window(go_at)
                if profile.run.duration_ns and profile.run.requests is None:
                    run_deadline = (time.monotonic() + START_DELAY_S + _KILL_AFTER_S
                                    + (profile.run.duration_ns + profile.run.grace_ns) / NS_PER_S)
        done, _ = ray.wait(list(refs), num_returns=len(refs), timeout=_POLL_S)
        if done:
            drain()
        for ref in done:
            index = refs.pop(ref)
            try:
                ray.get(ref)
            except Exception as exc:  # RayTaskError, WorkerCrashedError, TaskCancelledError
                merger.lost(index, f"Ray task failed: {type(exc).__name__}: {exc}")
        if run_deadline is not None and time.monotonic() > run_deadline:
            for ref, index in list(refs.items()):
                ray.cancel(ref, force=True)
                merger.lost(index, f"cancelled: still running {_KILL_AFTER_S:g} s after the planned end")
                del refs[ref]
    drain()
