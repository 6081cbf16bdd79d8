"""The validated profile as frozen records, and the rule for run and scenario names.

Role: what ``config._profile.parse_profile`` returns: a ``Profile`` holding one
record per table (``RunSpec``, ``LoadSpec``, ``TargetSpec``, a ``Scenario`` per
``[[scenario]]``; the optional tables' records come from their ``*_spec``
modules). The parsers fill them; everything after the profile load (the
engine, the drivers, the reports) reads them.

Invariants:
- Records are ``@dataclass(frozen=True, slots=True)``; times are integer ns
  (``*_ns``), converted once by the parsers; ``None`` means "no limit" or
  "not set" where a field says so.
- A record holds no secret: the API key and secret headers are only named
  (``api_key_env``, ``header_env``), read from the environment when sent.
- Run and scenario names pass ``check_name``: they become file and folder names.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ..protocols._requests import Protocol
from ..sse import DEFAULT_MAX_EVENT_BYTES
from ..workload._cancel import CancelSpec

__all__ = ["NAME_MAX_BYTES", "LoadSpec", "Profile", "RunSpec", "Scenario", "TargetSpec", "Timeouts", "check_name",
           "default_name"]


@dataclass(frozen=True, slots=True)
class Timeouts:
    """Per-stream time limits in integer ns (None: no limit).

    connect_ns: TCP (+TLS) connect; first_byte_ns: from send to the response
    headers; idle_ns: longest allowed silence (no bytes) once headers arrived;
    total_ns: the whole stream, from send to the end of the body.
    """

    connect_ns: int | None
    first_byte_ns: int | None
    idle_ns: int | None
    total_ns: int | None


@dataclass(frozen=True, slots=True)
class RunSpec:
    """The ``[run]`` table (times in ns)."""

    name: str
    duration_ns: int | None
    requests: int | None
    warmup_ns: int
    seed: int
    timeouts: Timeouts
    grace_ns: int
    interval_ns: int
    keepalive_budget_ns: int
    workers: int
    engine: Literal["local", "ray"]
    ray_address: str | None
    stream_log: bool = True
    metrics_port: int | None = None
    #: lower-case response header names recorded per stream and counted by value
    record_headers: tuple[str, ...] = ()
    #: the SSE scanner's memory bound per line / event, bytes (hopbench.sse.SSEScanner)
    max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES
    #: stop early when the first this many responses all failed and none streamed (0: never;
    #: hopbench.engine._watch.WatchMixin._check_failing, docs/profiles.md)
    stop_on_failing_target: int = 20
    #: ``workers = "auto"`` was asked for: ``workers`` is 1 until the run command sets it from
    #: the machine's free cores (hopbench.engine._cores.auto_workers; docs/scaleout.md)
    workers_auto: bool = False
    #: how ``"auto"`` was resolved, one sentence for summary.json ``workers_auto``; None otherwise
    workers_note: str | None = None


@dataclass(frozen=True, slots=True)
class LoadSpec:
    """The ``[load]`` table.

    mode "concurrency" is a closed loop of ``concurrency`` streams kept open
    (started over ``ramp_up_ns``); mode "rate" is an open loop of arrivals at
    ``rate_rps`` per second, ``arrival`` "constant" or "poisson", bounded by
    ``max_in_flight`` (arrivals that find the bound full are counted as
    ``max_in_flight_hits`` and not sent); mode "trace" replays a request
    trace (``trace``, docs/workloads.md), also bounded by ``max_in_flight``.
    """

    mode: Literal["concurrency", "rate", "trace"]
    concurrency: int
    ramp_up_ns: int
    rate_rps: float
    arrival: Literal["constant", "poisson"]
    max_in_flight: int
    #: mode "trace": the replay (hopbench.workload._trace.TraceSpec; rate_rps is then its mean rate)
    trace: Any = None
    #: mode "trace": this process's share of the entries (index, count): workers split the trace
    trace_part: tuple[int, int] = (0, 1)


@dataclass(frozen=True, slots=True)
class TargetSpec:
    """The ``[target]`` table. ``url`` None means the embedded emulator."""

    url: str | None
    paths: Mapping[str, str]
    headers: Mapping[str, str]
    header_env: Mapping[str, str]
    api_key_env: str | None
    auth: Literal["auto", "bearer", "x-api-key", "none"]
    verify_tls: bool
    transport: Literal["hopbench", "httpx"]

    @property
    def embedded(self) -> bool:
        """True when the run targets the built-in emulator."""
        return self.url is None


@dataclass(frozen=True, slots=True)
class Scenario:
    """One ``[[scenario]]``: what to send, and how often relative to the others.

    ``bodies`` holds one pre-encoded JSON request body per prompt (per pool
    entry for a workload scenario, whose ``prompts`` is then empty: the texts
    live only in the bodies, which can be large; docs/workloads.md).
    """

    name: str
    protocol: Protocol
    weight: float
    model: str
    prompts: tuple[str, ...]
    max_tokens: int
    include_usage: bool
    extra: Mapping[str, Any]
    bodies: tuple[bytes, ...]
    path: str
    #: per body: (requested input tokens or None, max_tokens sent); empty when
    #: the scenario uses no workload keys (docs/workloads.md)
    lengths: tuple[tuple[int | None, int], ...] = ()
    #: pick bodies with replacement (uniform) or without (each once per round)
    replacement: bool = True
    #: client cancellation (hopbench.workload._cancel, docs/workloads.md), or None
    cancel: CancelSpec | None = None
    #: its objectives (hopbench.config._slo_spec.Slo: [slo] with [scenario.slo] over it), None without
    slo: Any = field(default=None, compare=False)
    #: multi-turn sessions (hopbench.workload._sessions.SessionSpec), None for single requests
    session: Any = None
    #: a dataset's records as read, skipped and used (``workload._pool.Workload.note``), else None
    dataset_note: str | None = None


@dataclass(frozen=True, slots=True)
class Profile:
    """A whole validated profile.

    Attributes:
        path: the profile file (None when parsed from text).
        emulator: the raw ``[emulator]`` table, or an empty dict.
        emulator_config: that table parsed and validated by the emulator's own
            parser (``hopbench.emulator.EmulatorConfig``).
        gate: the raw ``[gate]`` table, or an empty dict.
        raw: the parsed TOML (safe to record: it holds no secrets by construction).
    """

    path: Path | None
    run: RunSpec
    load: LoadSpec
    target: TargetSpec
    scenarios: tuple[Scenario, ...]
    emulator: Mapping[str, Any]
    gate: Mapping[str, Any]
    raw: Mapping[str, Any] = field(repr=False)
    emulator_config: Any = field(default=None, repr=False, compare=False)
    #: the ``[[scrape]]`` endpoints (hopbench.config._scrape_spec.ScrapeSpec), possibly empty
    scrape: tuple[Any, ...] = field(default=(), compare=False)
    #: A/B arms (hopbench.config._arm_spec.ArmSpec), empty without ``[[arm]]``
    arms: tuple[Any, ...] = field(default=(), compare=False)
    #: ``[[stage]]`` entries (hopbench.config._stage_spec.Stage), possibly empty (docs/slo.md)
    stages: tuple[Any, ...] = field(default=(), compare=False)
    #: the ``[search]`` table (hopbench.config._search_spec.SearchSpec), or None
    search: Any = field(default=None, compare=False)
    #: the ``[upstream]`` table (hopbench.config._upstream_spec.UpstreamSpec), or None
    upstream: Any = field(default=None, compare=False)
    #: the ``[contract]`` table (hopbench.config._contract_spec.ContractSpec), or None; only
    #: ``hopbench check`` acts on it (``hopbench run`` ignores it with a note: docs/check.md)
    contract: Any = field(default=None, compare=False)

    @property
    def scopes(self) -> list[str]:
        """The results scopes: one per arm with ``[[arm]]``, else one per scenario."""
        return [a.name for a in self.arms] or [s.name for s in self.scenarios]


#: run and scenario names become file and folder names (results/<name>-<time>/,
#: <scenario>.<metric>.hgrm) and intervals.hlog tags: letters, digits, _ . -
_NAME = re.compile(r"[^\W][\w.-]*\Z")
NAME_MAX_BYTES = 100


def check_name(name: str) -> str | None:
    """Why ``name`` cannot be a run or scenario name (None when it can).

    A name is used as a folder name, in file names and as an intervals.hlog
    tag: 1 to 100 bytes (UTF-8) of letters, digits, ``_``, ``.`` and ``-``,
    not starting with ``.`` or ``-`` (so no ``/``, NUL, space or comma).
    """
    if len(name.encode("utf-8", "replace")) > NAME_MAX_BYTES:
        return f"expected at most {NAME_MAX_BYTES} bytes, got {len(name.encode('utf-8', 'replace'))}"
    if not _NAME.match(name):
        return (f"expected letters, digits, '_', '.' or '-' (not starting with '.' or '-'; the name "
                f"becomes file names), got {name[:60]!r}" + ("..." if len(name) > 60 else ""))
    return None


def default_name(text: str) -> str:
    """A valid name made from ``text`` (a file stem, "protocol-model")."""
    safe = re.sub(r"[^\w.-]", "_", text).lstrip(".-")[:NAME_MAX_BYTES] or "run"
    while len(safe.encode("utf-8")) > NAME_MAX_BYTES:
        safe = safe[:-1]
    return safe
