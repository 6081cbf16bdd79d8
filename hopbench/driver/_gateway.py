"""The I/O shell of gateway overhead: start (or find) the upstream emulator, then read and judge.

Role: ``hopbench.driver._single`` calls :func:`open_upstream` before the load (it starts
the emulator on ``[upstream].listen``, or notes where the hand-started
emulator's ``[upstream].record`` ends) and :func:`gateway_overhead` after it
(reads streams.jsonl and the ground truth written during the run, runs the
pure :func:`hopbench.driver._overhead.analyse`, records the overhead histograms into
the run's recorder). User documentation: docs/gateway-overhead.md.

Invariants:
- Only the ground truth written during this run counts: for ``record``, the
  file's size at the run's start is the offset reading begins at.
- A failure here never loses the run's results: errors become warnings.
"""

from __future__ import annotations

import errno
import json
import socket
import time
from contextlib import ExitStack
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._errors import ProfileError
from .._toml import line_in_file
from ._overhead import OVERHEAD_METRICS, analyse, client_from_line, upstream_from_record
from ..workload._cancel import ClientCancel, join_record
from ..measure._recorder import ALL, Recorder
from ..config._upstream_spec import UpstreamSpec
from ..emulator._record import boot_id

__all__ = ["UpstreamHandle", "check_listen_free", "open_upstream", "gateway_overhead", "join_upstream_cancels", "CANCEL_WAIT_S"]

#: how long the run waits, after its load, for a hand-started emulator's record to gain the
#: lines of the streams the client cancelled, s (an upstream that was not told of the cancel
#: writes its line only when its stream ends on its own)
CANCEL_WAIT_S = 15.0


@dataclass(frozen=True, slots=True)
class UpstreamHandle:
    """Where this run's ground truth is.

    Attributes:
        ground_truth: the JSON-lines file.
        offset: its size (bytes) when the run started; only what follows counts.
        source: how the profile named the upstream, for messages.
        alive: with ``listen``: why the emulator's process is gone, or None
            while it runs (``EmbeddedEmulator.exit_reason``); None with ``record``.
        pid: with ``listen``: the emulator's process id (its CPU is kept apart
            from the neighbours', hopbench.engine._saturation); None with ``record``.
    """

    ground_truth: Path
    offset: int
    source: str
    alive: Callable[[], str | None] | None = None
    pid: int | None = None


def check_listen_free(spec: UpstreamSpec, profile_path: Path | None) -> None:
    """Refuse an ``[upstream].listen`` address that cannot be bound (bound and released at once).

    Raises:
        ProfileError: in use, or cannot be bound or resolved (key ``upstream.listen``).
    """
    assert spec.host is not None and spec.port is not None
    try:
        infos = socket.getaddrinfo(spec.host, spec.port, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise ProfileError(f"cannot resolve {spec.host!r}: {exc}", path=profile_path,
                           line=line_in_file(profile_path, ("upstream", "listen")), key="upstream.listen") from None
    for family, kind, proto, _, addr in infos:
        with socket.socket(family, kind, proto) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind(addr)
            except OSError as exc:
                why = ("is already in use (another process listens there: stop it, or point the gateway and "
                       "[upstream].listen at a free port; a `hopbench serve --record FILE` started by hand "
                       "goes in [upstream].record instead)" if exc.errno == errno.EADDRINUSE
                       else f"cannot be bound: {exc.strerror}")
                raise ProfileError(f"{spec.listen} {why}", path=profile_path,
                                   line=line_in_file(profile_path, ("upstream", "listen")), key="upstream.listen") from None


def open_upstream(spec: UpstreamSpec, stack: ExitStack, out: Path, profile_path: Path | None) -> UpstreamHandle:
    """Start the emulator on ``spec.listen`` (stopped when ``stack`` closes), or
    note where ``spec.record`` ends.

    Args:
        spec: the ``[upstream]`` table.
        stack: owns the emulator's lifetime.
        out: the results folder (the emulator writes ``ground_truth.jsonl`` there).
        profile_path: the profile file, for messages.

    Raises:
        ProfileError: ``listen`` is in use or cannot be bound (key ``upstream.listen``).
        EmulatorStartError: the emulator did not start (its output quoted).
    """
    if spec.record is not None:
        try:
            offset = spec.record.stat().st_size
        except OSError:
            offset = 0  # not written yet: everything the run sees counts
        return UpstreamHandle(spec.record, offset, f'[upstream].record = "{spec.record}"')
    check_listen_free(spec, profile_path)
    from ..emulator import EmbeddedEmulator

    path = out / "ground_truth.jsonl"
    assert spec.host is not None and spec.port is not None
    emu = stack.enter_context(EmbeddedEmulator(spec.config, record_path=path, host=spec.host, port=spec.port))

    def alive() -> str | None:
        why = emu.exit_reason()
        return None if why is None else why.replace("the embedded emulator", "the upstream emulator ([upstream])")

    return UpstreamHandle(path, 0, f'[upstream].listen = "{spec.listen}"', alive, emu.pid)


def _lines(path: Path, offset: int) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    with path.open("rb") as f:
        f.seek(offset)
        for raw in f:
            try:
                doc = json.loads(raw)
            except ValueError:
                continue  # a half-written last line of a killed process
            if isinstance(doc, dict):
                found.append(doc)
    return found


def gateway_overhead(handle: UpstreamHandle, streams_path: Path, t0_mono_ns: int, warmup_ns: int,
                     rec: Recorder) -> tuple[dict[str, Any], list[str]]:
    """Match the run's streams with the upstream's requests; record the overhead histograms.

    Args:
        handle: from :func:`open_upstream`.
        streams_path: the run's streams.jsonl (with the overhead fields).
        t0_mono_ns: the run's start on CLOCK_MONOTONIC (``LoadRunner.t0_mono_ns``).
        warmup_ns: streams started before this offset are not counted.
        rec: the run's measured recorder: receives the OVERHEAD_METRICS values
            per scenario (and so summary.json's statistics, gates and compare).

    Returns:
        (the ``gateway_overhead`` block, warnings). Never raises: a file that
        cannot be read becomes a warning.
    """
    try:
        lines = _lines(streams_path, 0)
    except OSError as exc:
        return {"upstream": handle.source, "error": str(exc)}, [f"gateway overhead: cannot read {streams_path}: {exc}"]
    try:
        records = _lines(handle.ground_truth, handle.offset)
    except OSError as exc:
        records = []
        missing = (f"gateway overhead: cannot read the upstream's ground truth {handle.ground_truth} "
                   f"({handle.source}): {exc}")
    else:
        missing = ""
    clients = [c for c in (client_from_line(x, t0_mono_ns, warmup_ns) for x in lines) if c is not None]
    ups = [u for u in (upstream_from_record(r) for r in records) if u is not None]
    result = analyse(clients, ups, boot_id=boot_id(), source=handle.source)
    scopes = set(rec.scopes) - {ALL}
    for (scope, metric), values in result.values.items():
        if scope in scopes and metric in OVERHEAD_METRICS:
            rec.record_many(scope, metric, values)
    for (scope, metric), bounded in result.bounds.items():  # docs/results/units.md, "Times from the wire"
        if scope in scopes and metric in OVERHEAD_METRICS:
            for v, below, above in bounded:
                rec.record_bound(scope, metric, v, below, above)
    warnings = ([missing] if missing else []) + result.warnings
    return result.block, warnings


def _complete_lines(path: Path, offset: int) -> tuple[list[dict[str, Any]], int]:
    """The whole lines (ending in a newline) of ``path`` from ``offset`` on, and where they end.

    A line still being written is left for the next call; a missing file reads as none.
    """
    found: list[dict[str, Any]] = []
    try:
        with path.open("rb") as f:
            f.seek(offset)
            for raw in f:
                if not raw.endswith(b"\n"):
                    break
                offset += len(raw)
                try:
                    doc = json.loads(raw)
                except ValueError:
                    continue
                if isinstance(doc, dict):
                    found.append(doc)
    except OSError:
        pass
    return found, offset


def join_upstream_cancels(handle: UpstreamHandle, cancels: list[ClientCancel], rec: Recorder, *,
                          wait_s: float = CANCEL_WAIT_S,
                          sleep: Callable[[float], None] = time.sleep,
                          clock: Callable[[], float] = time.monotonic) -> list[str]:
    """Join the client's cancels with the gateway's upstream's record (``cancel_delay``, wasted tokens).

    With ``[upstream] listen`` the emulator has stopped: its record is whole. With
    ``[upstream] record`` (an emulator started by hand, still running) only the lines
    written since the run began count, and the lines of the cancelled streams may
    still be coming: an upstream that was not told of the cancel writes its line
    when its stream ends. This waits for them (polling the file), at most ``wait_s``.

    Args:
        handle: from :func:`open_upstream`.
        cancels: the runner's ``cancels``.
        rec: the run's measured recorder (hopbench.workload._cancel.record_join).
        wait_s: the longest wait for the missing lines, s.
        sleep, clock: injected for tests (``time.sleep``, ``time.monotonic``).

    Returns:
        warnings (hopbench.workload._cancel.join_record's, and one naming the record and the
        wait when lines did not arrive in time). Never raises.
    """
    if not cancels:
        return []
    lines, pos = _complete_lines(handle.ground_truth, handle.offset)
    warnings: list[str] = []
    if handle.alive is None:  # a hand-started emulator: it may still be writing
        want = {c.request_id for c in cancels}

        def missing() -> set[str]:
            seen = {d.get("request_id") for d in lines} | {d.get("marker_id") for d in lines}
            return want - seen

        deadline = clock() + wait_s
        while missing() and clock() < deadline:
            sleep(0.05)
            more, pos = _complete_lines(handle.ground_truth, pos)
            lines.extend(more)
        late = missing()
        if late:
            warnings.append(f"client cancellation: {len(late)} of {len(cancels)} cancelled streams had no line in "
                            f"the upstream's record ({handle.source}) {wait_s:g} s after the run: its streams "
                            "may still be running (or never reached it); they count as unmatched")
    return join_record(rec, cancels, handle.ground_truth, lines) + warnings
