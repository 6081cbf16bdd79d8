"""The results folder: summary.json, per-metric .hgrm files and intervals.hlog.

Role: the I/O shell around :mod:`hopbench.measure._recorder` snapshots. The runner
creates a :class:`ResultsWriter` before sending any load (so an unwritable
folder fails the run up front), calls :meth:`ResultsWriter.start`, then
:meth:`~ResultsWriter.write_interval` once a second and
:meth:`~ResultsWriter.update` every few seconds, and
:meth:`~ResultsWriter.finish` at the end (also after Ctrl-C, with
``complete=False``). The format is documented in docs/results.md.

Invariants:

* summary.json is always a complete JSON document: it is only ever replaced
  atomically (write a temporary file in the same folder, then ``os.replace``),
  so a crash or ``kill -9`` leaves the previous checkpoint, never half a file.
* Every summary has ``"schema": "hopbench.summary/1"`` and ``"complete"``.
* Statistics are in the metric's reporting unit (ms, tokens/s); beside them,
  ``hdr`` is the exact recorded histogram (hdrh V2 base64), so other tools can
  merge and recompute (:func:`snapshot_from_summary`).
* intervals.hlog and the .hgrm files are written here line by line on top of
  ``Histogram.encode()`` and ``Histogram.hgrm_text()``, not with hdrh's log
  writer (which floors the interval max and whose start-time helper raises,
  STYLE.md §8). hdrh's ``HistogramLogReader`` reads the log back (tested).
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import json
import os
import platform
import shutil
import socket
import time
from collections.abc import Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any

from .._errors import ResultsError, UsageError
from ..measure._error_bound import UNBOUNDED_METRICS, error_bounds
from ..measure._hdr import Histogram
from ..measure._metrics import METRICS
from ..measure._recorder import ALL, IntervalSnapshot, ScopeSnapshot, Snapshot
from ..workload._sessions import turns_of
from .._textfile import read_text

__all__ = [
    "SCHEMA",
    "ResultsWriter",
    "environment",
    "refuse_used_folder",
    "read_summary",
    "snapshot_from_summary",
    "summary_scopes",
]

SCHEMA = "hopbench.summary/1"
SUMMARY_NAME = "summary.json"
HLOG_NAME = "intervals.hlog"
#: ``hopbench run``'s verdict on the profile's ``[gate]`` (``GateReport.to_json``), when it has one
GATE_NAME = "gate.json"
_PROBE_NAME = ".hopbench-write-probe"
_TOKEN_KEYS = (("input", "completed"), ("output", "completed"), ("input", "broken"), ("output", "broken"))


def _json_default(obj: object) -> Any:
    # meta comes from the runner and may hold Paths, tuples or records: a
    # results file must not be lost to a serialisation detail.
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, (set, frozenset, tuple)):
        return list(obj)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.asdict(obj)
    return str(obj)


def _dumps(data: Mapping[str, Any]) -> str:
    return json.dumps(data, indent=2, allow_nan=False, default=_json_default) + "\n"


def _decimals(divisor: int) -> int:
    # enough decimals to print recorded integers exactly: ns -> ms needs 6
    return len(str(divisor)) - 1 if divisor > 1 else 0


def _metric_json(metric: str, text: str | None, out_of_range: int,
                 bounds: Mapping[str, str] | None = None) -> dict[str, Any]:
    spec = METRICS[metric]
    h = Histogram(metric) if text is None else Histogram.decode(metric, text)
    out: dict[str, Any] = dict(h.stats())
    out["unit"] = spec.unit
    out["divisor"] = spec.divisor
    out["out_of_range"] = out_of_range
    if bounds is not None and spec.unit == "ms" and h.count and metric not in UNBOUNDED_METRICS:
        # how far each percentile can be from the true one (docs/results/units.md, "Times from the wire")
        out["error_bound_ms"] = error_bounds(metric, h, bounds)
    out["hdr"] = h.encode() if text is None else text
    return out


def _tokens(counters: Mapping[str, int]) -> dict[str, dict[str, int]]:
    tokens: dict[str, dict[str, int]] = {}
    for direction, kind in _TOKEN_KEYS:
        tokens.setdefault(direction, {})[kind] = 0
    for key, n in counters.items():
        parts = key.split(".")
        if len(parts) == 3 and parts[0] == "tokens":
            tokens.setdefault(parts[1], {})[parts[2]] = n
    return tokens


def lengths_of(counters: Mapping[str, int]) -> dict[str, dict[str, float]]:
    """Requested vs server-reported token lengths (docs/workloads.md, docs/results.md).

    Returns:
        ``{"input" | "output": {"streams", "requested_mean", "reported_mean",
        "ratio"}}`` for each direction some stream measured (empty when the
        scenarios use no workload keys); ratio = reported / requested; output
        also has ``over_max``: the streams that reported more output tokens
        than their ``max_tokens`` (the target ignores it).
    """
    out: dict[str, dict[str, float]] = {}
    for direction in ("input", "output"):
        n = counters.get(f"length.{direction}.streams", 0)
        req = counters.get(f"length.{direction}.requested", 0)
        if n and req:
            got = counters.get(f"length.{direction}.reported", 0)
            out[direction] = {"streams": n, "requested_mean": req / n, "reported_mean": got / n,
                              "ratio": got / req}
            if direction == "output":
                out[direction]["over_max"] = counters.get("length.output.over_max", 0)
    return out


def cache_of(counters: Mapping[str, int]) -> dict[str, float] | None:
    """The prompt-cache figures of a scope (docs/results/counters.md, "Prompt cache").

    Returns:
        ``{"streams", "prompt_tokens", "cached_tokens", "hit_ratio"}`` over the
        streams whose usage reported cached tokens (hit_ratio = cached /
        prompt tokens), plus ``implied_tokens``, ``implied_prompt_tokens`` and
        ``implied_hit_ratio`` for a trace replay (what the trace's hash ids
        imply over the same streams, over the prompt tokens hopbench sent them:
        hopbench's own count on both sides, so a server that counts tokens
        otherwise does not skew it), or None when no stream reported them.
    """
    n = counters.get("cache.streams", 0)
    prompt = counters.get("cache.prompt_tokens", 0)
    if not n or not prompt:
        return None
    cached = counters.get("cache.cached_tokens", 0)
    out = {"streams": n, "prompt_tokens": prompt, "cached_tokens": cached, "hit_ratio": cached / prompt}
    if "cache.implied_tokens" in counters:
        implied = counters["cache.implied_tokens"]
        # summaries written before cache.implied_prompt_tokens existed: the server's count
        sent = counters.get("cache.implied_prompt_tokens") or prompt
        out.update(implied_tokens=implied, implied_prompt_tokens=sent, implied_hit_ratio=implied / sent)
    return out


def _scope_json(scope: ScopeSnapshot) -> dict[str, Any]:
    counters = dict(sorted(scope.counters.items()))
    metrics: dict[str, Any] = {}
    for metric in METRICS:  # table order: stable, readable files
        oor = counters.get("out_of_range." + metric, 0)
        text = scope.histograms.get(metric)
        if text is not None or oor:
            metrics[metric] = _metric_json(metric, text, oor, scope.bounds)
    out = {"counters": counters, "tokens": _tokens(counters), "metrics": metrics}
    lengths = lengths_of(counters)
    if lengths:
        out["lengths"] = lengths
    cache = cache_of(counters)
    if cache is not None:
        out["cache"] = cache
    turns = turns_of(counters)  # docs/results/counters.md, "Sessions"
    if turns:
        out["turns"] = turns
    return out


def summary_scopes(snapshot: Snapshot) -> dict[str, Any]:
    """The ``scopes`` section of summary.json for a snapshot ("all" last).

    Returns:
        ``{scope: {"counters": {...}, "tokens": {dir: {kind: n}},
        "metrics": {metric: {count, min, mean, p50, p90, p99, p999, max,
        unit, divisor, out_of_range, hdr}}}}``.
    """
    names = [s for s in snapshot.scopes if s != ALL] + ([ALL] if ALL in snapshot.scopes else [])
    return {name: _scope_json(snapshot.scopes[name]) for name in names}


def _build_summary(
    meta: Mapping[str, Any], total: Snapshot | None, warmup: Snapshot | None, complete: bool
) -> dict[str, Any]:
    summary: dict[str, Any] = {"schema": SCHEMA}
    summary.update(meta)
    summary["schema"] = SCHEMA
    summary["complete"] = bool(complete)
    summary["scopes"] = {} if total is None else summary_scopes(total)
    summary["warmup"] = None if warmup is None else summary_scopes(warmup)
    return summary


def refuse_used_folder(out_dir: Path) -> None:
    """Refuse a results folder that already holds files: two runs' files in one folder
    would mix (stale .hgrm files of scenarios the new run does not have). The command
    line asks before it says "running ... -> DIR" (issue 39 item 7), the writer again.

    Raises:
        ResultsError: ``cannot write results to X: the folder is not empty (...)``.
    """
    path = Path(out_dir)
    if path.is_dir() and any(path.iterdir()):
        raise ResultsError(f"cannot write results to {path}: the folder is not empty "
                           "(choose a new --out, or remove it)")


class ResultsWriter:
    """Writes one run's results folder as the run goes.

    Attributes:
        path: the results folder.
    """

    def __init__(self, out_dir: Path) -> None:
        """Create the folder (and parents) and check that it is writable.

        Raises:
            ResultsError: ``cannot write results to X: reason`` (also for an
                existing folder that is not empty).
        """
        self.path = Path(out_dir)
        self._hlog: IO[str] | None = None
        self._started = False
        probe = self.path / _PROBE_NAME
        refuse_used_folder(self.path)
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            probe.write_text("probe\n", encoding="utf-8")
            probe.unlink()
        except OSError as exc:
            raise ResultsError(
                f"cannot write results to {self.path}: {exc.strerror or exc}"
            ) from exc

    # -- files -------------------------------------------------------------

    def _replace(self, name: str, text: str) -> None:
        replace_text(self.path / name, text)

    def _write_summary(self, summary: Mapping[str, Any]) -> None:
        try:
            text = _dumps(summary)
        except ValueError as exc:  # NaN / infinity in meta
            raise ResultsError(f"cannot write {self.path / SUMMARY_NAME}: {exc}") from exc
        self._replace(SUMMARY_NAME, text)

    # -- the run -------------------------------------------------------------

    def start(self, meta: dict[str, Any]) -> None:
        """Write a first summary.json (``complete: false``) and open intervals.hlog.

        ``meta["started_at_unix_s"]`` (float seconds since the epoch), when
        present, is the log's StartTime; otherwise ``time.time()`` now.

        Raises:
            ResultsError: a file cannot be written.
        """
        self._write_summary(_build_summary(meta, None, None, complete=False))
        start_s = meta.get("started_at_unix_s")
        if not isinstance(start_s, (int, float)) or isinstance(start_s, bool):
            start_s = time.time()
        iso = datetime.fromtimestamp(start_s, tz=timezone.utc).isoformat()
        time_units = sorted({s.divisor for s in METRICS.values() if s.unit == "ms"})
        rate_units = sorted({f"{s.name} /{s.divisor}" for s in METRICS.values() if s.unit != "ms"})
        header = (
            "#[Histogram log format version 1.3]\n"
            f"#[StartTime: {start_s:.3f} (seconds since epoch), {iso}]\n"
            # Timestamps are relative to StartTime, so BaseTime is StartTime
            # (HdrHistogram's HistogramLogReader adds BaseTime to each stamp).
            f"#[BaseTime: {start_s:.3f} (seconds since epoch)]\n"
            f"#[MaxValueDivisor: {time_units[0]:.3f}]\n"
            "#[hopbench: tags are <scope>.<metric>; times recorded in ns, Interval_Max in ms;"
            f" rates recorded in milli-tokens/s, Interval_Max in tokens/s: {'; '.join(rate_units)}]\n"
            '"StartTimestamp","Interval_Length","Interval_Max","Interval_Compressed_Histogram"\n'
        )
        try:
            if self._hlog is not None:
                self._hlog.close()
            self._hlog = open(self.path / HLOG_NAME, "w", encoding="utf-8", newline="\n")
            self._hlog.write(header)
            self._hlog.flush()
        except OSError as exc:
            raise ResultsError(write_error(self.path / HLOG_NAME, exc)) from exc
        self._started = True

    def write_interval(self, iv: IntervalSnapshot) -> None:
        """Append one hlog line per non-empty (scope, metric) histogram, then flush.

        Line: ``Tag=<scope>.<metric>,<start s>,<length s>,<max>,<hdr base64>``,
        times in seconds from the run start (3 decimals, as Java writes them),
        max in the reporting unit, printed exactly (no flooring).

        Raises:
            UsageError: called before :meth:`start` or after :meth:`finish`.
            ResultsError: the file cannot be written.
        """
        if self._hlog is None:
            raise UsageError("write_interval() needs start() first (and no finish())")
        start_s = iv.start_ns / 1e9
        length_s = max(iv.end_ns - iv.start_ns, 0) / 1e9
        lines = []
        for scope, snap in iv.scopes.items():
            for metric, text in snap.histograms.items():
                spec = METRICS[metric]
                h = Histogram.decode(metric, text)
                if not h.count:
                    continue
                max_txt = f"{h.max / spec.divisor:.{_decimals(spec.divisor)}f}"
                lines.append(f"Tag={scope}.{metric},{start_s:.3f},{length_s:.3f},{max_txt},{text}\n")
        try:
            self._hlog.write("".join(lines))
            self._hlog.flush()
        except OSError as exc:
            raise ResultsError(write_error(self.path / HLOG_NAME, exc)) from exc

    def update(self, meta: dict[str, Any], total: Snapshot, complete: bool = False) -> dict[str, Any]:
        """Checkpoint: atomically rewrite summary.json with what is known so far.

        Returns:
            The summary dict written.

        Raises:
            ResultsError: the file cannot be written.
        """
        summary = _build_summary(meta, total, None, complete)
        self._write_summary(summary)
        return summary

    def finish(
        self,
        meta: dict[str, Any],
        total: Snapshot,
        warmup: Snapshot | None,
        complete: bool,
    ) -> dict[str, Any]:
        """Write the final summary.json and ``<scope>.<metric>.hgrm`` files.

        ``meta`` goes to the top level of summary.json as given; then
        ``schema``, ``complete``, ``scopes`` (from ``total``) and ``warmup``
        (same shape, or null) are set. Closes intervals.hlog.

        Returns:
            The summary dict written (what :func:`read_summary` returns).

        Raises:
            ResultsError: a file cannot be written.
        """
        return self.write_final(_build_summary(meta, total, warmup, complete), total)

    def write_final(self, summary: dict[str, Any], total: Snapshot) -> dict[str, Any]:
        """Write a final summary.json document as given (``hopbench.driver._summary.Summary.to_json``)
        and ``<scope>.<metric>.hgrm`` for ``total``'s histograms; close intervals.hlog.

        Returns:
            ``summary``.

        Raises:
            ResultsError: a file cannot be written.
        """
        # summary.json first: the smallest and most important file (it holds
        # every histogram as ``hdr``); the .hgrm files are derived views
        try:
            self._write_summary(summary)
            for scope, snap in total.scopes.items():
                for metric, text in snap.histograms.items():
                    h = Histogram.decode(metric, text)
                    if h.count:
                        self._replace(f"{scope}.{metric}.hgrm", h.hgrm_text())
        finally:
            self.close()
        return summary

    def close(self) -> None:
        """Close intervals.hlog (idempotent)."""
        if self._hlog is not None:
            try:
                self._hlog.close()
            finally:
                self._hlog = None


def replace_text(target: Path, text: str) -> None:
    """Write ``text`` (UTF-8, LF) to ``target`` atomically: a temp file beside it, then rename.

    A full disk or a signal never leaves half a file, nor the temp file, behind.

    Raises:
        ResultsError: the write failed (message from :func:`write_error`: the file
            and the free space). Other exceptions (KeyboardInterrupt) propagate
            after the temp file is removed.
    """
    tmp = target.with_name(f".{target.name}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8", newline="\n") as f:
            f.write(text)
        os.replace(tmp, target)
    except BaseException as exc:  # a full disk or a signal: never leave half a file behind
        try:
            tmp.unlink(missing_ok=True)
        except OSError:
            pass
        if isinstance(exc, OSError):
            raise ResultsError(write_error(target, exc, len(text.encode("utf-8")))) from exc
        raise


def write_error(target: Path, exc: OSError, size: int | None = None) -> str:
    """The message for a file that could not be written: the file, the OS's
    reason and, for a full disk, the free space left and the size needed."""
    msg = f"cannot write {target}: {exc.strerror or exc}"
    try:
        free = shutil.disk_usage(target.parent).free
        msg += f" ({_bytes(free)} free on its file system"
        msg += f", {_bytes(size)} needed)" if size is not None else ")"
    except OSError:
        pass
    return msg


def _bytes(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return f"{n} B"


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def environment() -> dict[str, Any]:
    """Versions and host facts for summary.json's ``environment``.

    Returns:
        ``{"hopbench", "python", "trio", "httpx", "httptools", "hdrh", "rich"}``
        versions (None when not installed), ``"python_implementation"``,
        ``"hostname"``, ``"platform"``, ``"cpu_count"``.
    """
    from .._version import __version__

    return {
        "hopbench": _version("hopbench") or __version__,
        "python": platform.python_version(),
        "python_implementation": platform.python_implementation(),
        "trio": _version("trio"),
        "httpx": _version("httpx"),
        "httptools": _version("httptools"),
        "hdrh": _version("hdrhistogram"),
        "rich": _version("rich"),
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
    }


def read_summary(path: Path) -> dict[str, Any]:
    """Read a results folder's summary.json (or the file itself).

    Raises:
        ResultsError: naming the file: missing, unreadable, not JSON, not an
            object, or not a ``hopbench.summary/1`` document.
    """
    path = Path(path)
    file = path / SUMMARY_NAME if path.is_dir() else path
    try:
        text = read_text(file)  # non-UTF-8: ResultsError naming file:line
    except OSError as exc:
        raise ResultsError(f"cannot read {file}: {exc.strerror or exc}") from exc
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ResultsError(f"{file}: not valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise ResultsError(f"{file}: expected a JSON object, got {type(data).__name__}")
    if data.get("schema") != SCHEMA:
        raise ResultsError(f"{file}: expected \"schema\": \"{SCHEMA}\", got {data.get('schema')!r}")
    if not isinstance(data.get("scopes"), dict):
        raise ResultsError(f"{file}: expected a \"scopes\" object")
    for name, scope in data["scopes"].items():  # every view reads a scope's parts as objects
        if not isinstance(scope, dict):
            raise ResultsError(f"{file}: scopes.{name}: expected an object, got {type(scope).__name__}")
        for part in ("counters", "metrics", "tokens"):
            if part in scope and not isinstance(scope[part], dict):
                raise ResultsError(f"{file}: scopes.{name}.{part}: expected an object, "
                                   f"got {type(scope[part]).__name__}")
    return data


def snapshot_from_summary(summary: dict[str, Any], section: str = "scopes") -> Snapshot:
    """Rebuild the mergeable snapshot of a summary section from its ``hdr`` fields.

    Args:
        summary: a summary dict (:func:`read_summary`, :meth:`ResultsWriter.finish`).
        section: ``"scopes"`` (the measured run) or ``"warmup"``.

    Returns:
        Snapshot with each scope's counters and the encoded histograms.

    Raises:
        ResultsError: the section is missing or null, or a field is malformed.
    """
    data = summary.get(section)
    if not isinstance(data, dict):
        raise ResultsError(f"summary: section {section!r} is missing or not an object")
    scopes: dict[str, ScopeSnapshot] = {}
    for name, scope in data.items():
        where = f"summary: {section}.{name}"
        if not isinstance(scope, dict):
            raise ResultsError(f"{where}: expected an object")
        metrics = scope.get("metrics", {})
        if not isinstance(metrics, dict):
            raise ResultsError(f"{where}.metrics: expected an object")
        hists: dict[str, str] = {}
        for metric, m in metrics.items():
            if metric not in METRICS:
                raise ResultsError(f"{where}.metrics: unknown metric {metric!r}")
            text = m.get("hdr") if isinstance(m, dict) else None
            if not isinstance(text, str):
                raise ResultsError(f"{where}.metrics.{metric}.hdr: expected a string")
            try:
                h = Histogram.decode(metric, text)
            except ResultsError as exc:
                raise ResultsError(f"{where}.metrics.{metric}.hdr: {exc}") from exc
            if h.count:
                hists[metric] = text
        snap = ScopeSnapshot.from_json(
            {"counters": scope.get("counters", {}), "histograms": hists}, where
        )
        scopes[str(name)] = snap
    return Snapshot(scopes)
