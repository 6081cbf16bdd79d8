"""Load profiles: TOML in, validated frozen records out.

A profile says what load to put on which gateway and for how long. Every key is
checked before any load is sent: unknown keys, wrong types and impossible values
raise ``ProfileError`` naming file, line and key path (see ``_toml``). Human
units (seconds, requests per second) are converted to integer nanoseconds here,
once. Secrets are never read from the profile itself: the API key comes only
from the environment variable that ``target.api_key_env`` names, and a literal
value for a header that may carry one (``_fields.is_secret_header``: ``Authorization``,
``x-api-key``, ``X-Auth-Token``...) is refused: such values come from ``header_env``.

Every key, its unit and default is documented in docs/profiles.md.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from ..workload._cancel import CancelSpec, parse_cancel
from .._units import s_to_ns
from ..sse import DEFAULT_MAX_EVENT_BYTES
from ._fields import FIELD_NAME, empty_secret, field_problem, is_secret_header, read_header_env, read_headers
from .._errors import ProfileError
from .._toml import MISSING, RATE_MIN_RPS, Table, TomlDoc, closest_key, load_toml, parse_toml
from ..workload._lengths import MAX_OUTPUT_TOKENS
from ..workload._pool import WORKLOAD_KEYS, parse_workload, uses_workload
from ..protocols._requests import DEFAULT_PATHS, PROTOCOLS, WIRES, Message, Protocol, auth_style, encode_body
from .._textfile import gunzip, json_value, read_regular

__all__ = [
    "check_base_url",
    "Profile",
    "RunSpec",
    "LoadSpec",
    "TargetSpec",
    "Scenario",
    "Timeouts",
    "load_profile",
    "parse_profile",
]


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
    #: a dataset's records as read, skipped and used (``_workload.Workload.note``), else None
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
    #: the ``[search]`` table (hopbench.config._stage_spec.SearchSpec), or None
    search: Any = field(default=None, compare=False)
    #: the ``[upstream]`` table (hopbench.config._upstream_spec.UpstreamSpec), or None
    upstream: Any = field(default=None, compare=False)

    @property
    def scopes(self) -> list[str]:
        """The results scopes: one per arm with ``[[arm]]``, else one per scenario."""
        return [a.name for a in self.arms] or [s.name for s in self.scenarios]


def _no_workload_in_trace(root: Table) -> None:
    """Reject a scenario with its own lengths in a trace replay, on the scenario's own key.

    Raises:
        ProfileError: at the file:line of the first workload key (``_workload.WORKLOAD_KEYS``,
            a ``max_tokens`` distribution or ``"dataset"``) of the first scenario holding one:
            the trace gives every request's lengths (docs/workloads.md, "Trace replay").
    """
    value = root.data.get("scenario")
    if not (isinstance(value, list) and all(isinstance(x, dict) for x in value)):
        return  # not [[scenario]] tables: _scenarios says what is wrong
    mode_line = root.doc.line_of(("load", "mode")) if root.doc else None
    where = f" (line {mode_line})" if mode_line is not None else ""
    for t in root.tables("scenario"):
        if not uses_workload(t):
            continue
        key = next((k for k in t.data if k in WORKLOAD_KEYS or k == "max_tokens"), None)
        name = t.data.get("name")
        whose = f" (scenario {name!r})" if isinstance(name, str) else ""
        raise t.error(key, f'not used with load.mode = "trace"{where}{whose}: the trace gives every '
                           "request's input and output tokens; expected a scenario without lengths of its "
                           "own (no input_tokens, dataset, tokenizer, prompt_pool, replacement, session, "
                           "max_tokens distribution or max_tokens = \"dataset\"); remove it")


def _first_table(root: Table, name: str) -> Table:
    """``[name]`` or the first ``[[name]]`` entry (its errors carry its line), or
    the root when the key is neither (its errors name the key)."""
    value = root.data.get(name)
    if isinstance(value, list) and value and isinstance(value[0], dict):
        return root.tables(name)[0]
    if isinstance(value, dict):
        return root.table(name)
    return root


def load_profile(path: str | Path, *, env: Mapping[str, str] | None = None) -> Profile:
    """Read and validate a profile file.

    Args:
        path: the TOML file.
        env: environment for ``api_key_env`` / ``header_env`` checks (default os.environ).

    Raises:
        ProfileError: anything wrong, with file, line and key path.
    """
    return _build(load_toml(path), env if env is not None else os.environ)


def parse_profile(text: str, path: str | Path | None = None,
                  *, env: Mapping[str, str] | None = None) -> Profile:
    """Validate profile text (``path`` names it in errors and anchors prompt files)."""
    return _build(parse_toml(text, path), env if env is not None else os.environ)


def _seconds(t: Table, name: str, default: Any, *, allow_zero: bool = True) -> int | None:
    v = t.number(name, default, min=0.0) if allow_zero else t.number(name, default, positive=True)
    if v is None:
        return None
    return s_to_ns(v)


def _timeout(t: Table, name: str, default: float | None) -> int | None:
    """A timeout in seconds: a positive number, or 0 / absent for no limit."""
    v = t.number(name, default, min=0.0)
    if v is None or v == 0:
        return None
    return s_to_ns(v)


_TOP_LEVEL = ("run", "load", "target", "scenario", "emulator", "gate", "scrape", "arm", "slo", "stage",
              "search", "upstream")


def _build(doc: TomlDoc, env: Mapping[str, str]) -> Profile:
    root = doc.root()
    for key in root.data:  # a misspelt table first, before what it should have held is missed
        if key not in _TOP_LEVEL:
            hint = " (tables are [[scenario]], singular)" if key == "scenarios" else ""
            fix = None if hint else closest_key(key, set(_TOP_LEVEL) - set(root.data))
            near = f"; did you mean {fix!r}?" if fix is not None else ""
            raise root.error(key, f"unknown table{near} (expected one of: {', '.join(_TOP_LEVEL)}){hint}")
    _misplaced_scenario(root)
    base = doc.path.parent if doc.path else Path.cwd()
    run = _run(root.table("run"), doc)
    load = _load(root.table("load"))
    target = _target(root.table("target"), env)
    from ..measure._slo import Slo
    from ._slo_spec import parse_slo  # [slo] (docs/slo.md)

    slo_base: Slo | None = None
    if root.has("slo"):
        slo_base = parse_slo(root.table("slo"))
    if load.mode == "trace":  # before the scenarios' own lengths are read (datasets, tokenizers)
        _no_workload_in_trace(root)
    scenarios = _scenarios(root, base, target, run.seed, slo_base)
    if load.mode == "trace":  # the trace file, once the scenarios it names are known
        from ..workload._trace import parse_trace

        spec = parse_trace(root.table("load"), base,
                           [(sc.name, sc.model, bool(sc.lengths), sc.weight) for sc in scenarios], run.seed)
        load = replace(load, trace=spec, rate_rps=spec.rate_rps)
    emulator_t = root.table("emulator")
    from ..emulator._config import EmulatorConfig  # the emulator owns its keys

    emulator_config = EmulatorConfig.from_table(emulator_t)
    from ._arm_spec import parse_arms  # A/B arms: docs/profiles.md, [[arm]]

    arms = parse_arms(root.tables("arm"), emulator=dict(emulator_t.data),
                      scenario_protocols=[s.protocol for s in scenarios], workers=run.workers,
                      check_name=check_name, check_url=check_base_url,
                      arm_target=lambda t: _arm_target(t, target, env))
    if arms and (load.mode == "trace" or any(sc.session is not None for sc in scenarios)):
        raise _first_table(root, "arm").error(None, "[[arm]] tables send each request to every arm: not supported with "
                                "load.mode = \"trace\" or session scenarios (docs/workloads.md)")
    if arms and (target.url is not None or root.table("target").has("embedded")):
        raise root.table("target").error("url" if target.url is not None else "embedded",
                                         "with [[arm]] tables each arm names its own url: "
                                         "remove target.url / target.embedded")
    gate_t = root.table("gate")
    if gate_t.data:
        from ._gate_spec import parse_budgets  # the budget grammar owns its keys: checked before any load

        budgets, _ = parse_budgets(Table(gate_t.data, doc, ("gate",)))
        names = {a.name for a in arms} or {sc.name for sc in scenarios}  # the scopes
        for budget in budgets:
            if budget.scope != "all" and budget.scope not in names:
                raise gate_t.table("scenario").error(
                    budget.scope, f"no {'arm' if arms else 'scenario'} named {budget.scope!r} "
                                  f"({'arms' if arms else 'scenarios'}: {', '.join(sorted(names))})")
    gate_t.keys()
    from ._scrape_spec import parse_scrapes  # [[scrape]] endpoints (docs/observability.md)

    scrape = parse_scrapes(root.tables("scrape"), env)
    from ._stage_spec import parse_search, parse_stages  # [[stage]], [search] (docs/slo.md)

    if load.mode == "trace" and (root.has("stage") or root.has("search")):
        raise _first_table(root, "stage" if root.has("stage") else "search").error(None,
                         'stages and the capacity search set their own load: not with load.mode = "trace"')
    stages = parse_stages(root.tables("stage"))
    search = None
    if root.has("search"):
        search = parse_search(root.table("search"), load.mode)
        if stages:
            raise root.error("search", "expected [search] or [[stage]] entries, not both")
        if all(sc.slo is None for sc in scenarios):
            raise root.table("search").error(None, "a capacity search judges stages by their objectives: "
                                                   "add an [slo] table (docs/slo.md)")
    if arms and (stages or search is not None or any(sc.slo is not None for sc in scenarios)):
        what = "stage" if stages else "search" if search is not None else "slo"
        raise _first_table(root, what).error(
            None, "[[arm]] tables make one results scope per arm, while SLOs, stages and the capacity "
                  "search judge scenarios: not supported together (run one profile per arm's url; "
                  "docs/ab-arms.md)")
    from ._upstream_spec import parse_upstream  # the gateway's upstream (docs/gateway-overhead.md)

    upstream = parse_upstream(root.table("upstream"), base, target.url)
    root.done()
    if (run.duration_ns is None and run.requests is None and not stages and search is None
            and not (load.mode == "trace" and not load.trace.loop)):
        raise root.error("run", "expected run.duration_s or run.requests (how long to run)")
    if load.mode == "concurrency" and run.requests is not None and run.requests < 1:
        raise root.table("run").error("requests", "expected a positive integer")
    return Profile(
        path=doc.path,
        run=run,
        load=load,
        target=target,
        scenarios=scenarios,
        emulator=dict(emulator_t.data),
        gate=dict(gate_t.data),
        raw=doc.data,
        emulator_config=emulator_config,
        scrape=scrape,
        arms=arms,
        stages=stages,
        search=search,
        upstream=upstream,
    )


#: run and scenario names become file and folder names (results/<name>-<time>/,
#: <scenario>.<metric>.hgrm) and intervals.hlog tags: letters, digits, _ . -
_NAME = re.compile(r"[^\W][\w.-]*\Z")
NAME_MAX_BYTES = 100
MAX_WORKERS = 256


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


def _default_name(text: str) -> str:
    """A valid name made from ``text`` (a file stem, "protocol-model")."""
    safe = re.sub(r"[^\w.-]", "_", text).lstrip(".-")[:NAME_MAX_BYTES] or "run"
    while len(safe.encode("utf-8")) > NAME_MAX_BYTES:
        safe = safe[:-1]
    return safe


def check_workers(n: int) -> str | None:
    """Why ``n`` cannot be a number of worker processes (run.workers, --workers)."""
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_WORKERS:
        return f"expected an integer from 1 to {MAX_WORKERS}, got {n!r}"
    return None


#: ``[run].max_event_bytes``: the largest accepted (1 GiB: one event is held in memory per
#: stream, so a larger bound is no bound); the default is the scanner's own (4 MiB)
MAX_EVENT_BYTES_MAX = 1 << 30


def _run(t: Table, doc: TomlDoc) -> RunSpec:
    default_name = _default_name(doc.path.stem) if doc.path else "run"
    name = t.str("name", default_name, nonempty=True)
    problem = check_name(name)
    if problem:
        raise t.error("name", problem)
    duration = _seconds(t, "duration_s", None, allow_zero=False)
    requests = t.int("requests", None, min=1)
    warmup = _seconds(t, "warmup_s", 0.0) or 0
    if duration is not None and warmup >= duration:
        raise t.error("warmup_s", "expected less than run.duration_s (warm-up is part of the run)")
    seed = t.int("seed", 0, min=0)
    tt = t.table("timeouts")
    timeouts = Timeouts(
        connect_ns=_timeout(tt, "connect_s", 10.0),
        first_byte_ns=_timeout(tt, "first_byte_s", 60.0),
        idle_ns=_timeout(tt, "idle_s", 30.0),
        total_ns=_timeout(tt, "total_s", 600.0),
    )
    tt.done()
    grace = _seconds(t, "grace_s", 5.0) or 0
    interval = _seconds(t, "interval_s", 1.0, allow_zero=False) or s_to_ns(1.0)
    budget = _seconds(t, "keepalive_budget_s", 12.0, allow_zero=False) or s_to_ns(12.0)
    workers = t.int("workers", 1, min=1, max=MAX_WORKERS)
    engine = t.str("engine", "local", choices=("local", "ray"))
    ray_address = t.str("ray_address", None)
    stream_log = t.bool("stream_log", True)
    metrics_port = t.int("metrics_port", None, min=1, max=65535)  # docs/observability.md
    record_headers = _record_headers(t)
    max_event_bytes = t.int("max_event_bytes", DEFAULT_MAX_EVENT_BYTES, min=1, max=MAX_EVENT_BYTES_MAX)
    t.done()
    return RunSpec(name, duration, requests, warmup, seed, timeouts, grace, interval,
                   budget, workers, engine, ray_address, stream_log, metrics_port, record_headers,
                   max_event_bytes)


_RECORD_HEADERS_MAX = 16


def _record_headers(t: Table) -> tuple[str, ...]:
    """``run.record_headers``: response header names to record per stream."""
    names = t.str_list("record_headers", [])
    if len(names) > _RECORD_HEADERS_MAX:
        raise t.error("record_headers", f"expected at most {_RECORD_HEADERS_MAX} header names, got {len(names)}")
    out: list[str] = []
    for name in names:
        if FIELD_NAME.match(name) is None:
            raise t.error("record_headers", f"{name!r} is not a valid header name (RFC 9110 section 5.1: "
                                            "letters, digits, !#$%&'*+-.^_`|~)")
        low = name.lower()
        if is_secret_header(low):  # the same rule as for the headers a profile may write out
            raise t.error("record_headers", f"{name!r} may carry a secret and is never recorded")
        if low in out:
            raise t.error("record_headers", f"{name!r} is listed twice")
        out.append(low)
    return tuple(out)


def _load(t: Table) -> LoadSpec:
    mode = t.str("mode", "concurrency", choices=("concurrency", "rate", "trace"))
    if mode == "trace":  # docs/workloads.md, "Trace replay"; the file is read in _build
        from ..workload._trace import trace_keys

        for k in ("concurrency", "ramp_up_s", "rate_rps", "arrival"):
            if t.has(k):
                raise t.error(k, 'not used with load.mode = "trace" (the trace sets the arrivals)')
        max_in_flight = t.int("max_in_flight", 1000, min=1, max=1_000_000)
        trace_keys(t)
        t.done()
        return LoadSpec("trace", max_in_flight, 0, 0.0, "constant", max_in_flight)
    if mode == "concurrency":
        concurrency = t.int("concurrency", MISSING, min=1, max=1_000_000)
        ramp = _seconds(t, "ramp_up_s", 0.0) or 0
        for k in ("rate_rps", "arrival", "max_in_flight"):
            if t.has(k):
                raise t.error(k, 'only valid with load.mode = "rate"')
        t.done()
        return LoadSpec("concurrency", concurrency, ramp, 0.0, "constant", concurrency)
    rate = t.number("rate_rps", MISSING, min=RATE_MIN_RPS)
    arrival = t.str("arrival", "poisson", choices=("constant", "poisson"))
    max_in_flight = t.int("max_in_flight", 1000, min=1, max=1_000_000)
    for k in ("concurrency", "ramp_up_s"):
        if t.has(k):
            raise t.error(k, 'only valid with load.mode = "concurrency"')
    t.done()
    return LoadSpec("rate", max_in_flight, 0, rate, arrival, max_in_flight)


def check_base_url(url: str) -> str | None:
    """Why ``url`` cannot be a target's base URL (None when it can).

    Credentials and query strings are refused: they would be recorded in
    summary.json and report.html, and secrets only come from environment
    variables (``target.api_key_env``, ``target.header_env``).
    """
    if any(ord(c) < 0x21 or ord(c) == 0x7F for c in url):
        return f"expected a URL without spaces or control characters, got {url!r}"
    try:
        parts = urlsplit(url)
        host = parts.hostname
    except ValueError as exc:  # e.g. "http://[::1" (an unclosed IPv6 literal)
        return f"expected an http:// or https:// base URL, got {url!r}: {exc}"
    if parts.scheme not in ("http", "https") or not host:
        return f"expected an http:// or https:// base URL, or \"embedded\", got {url!r}"
    if parts.username or parts.password:
        return "credentials in the URL are not allowed: use target.api_key_env"
    if parts.query or parts.fragment:
        return ("a query string or fragment is not allowed in the base URL (it would be recorded "
                "in the results): put keys in target.api_key_env or target.header_env")
    try:
        port = parts.port
    except ValueError as exc:
        return f"invalid port in {url!r}: {exc}"
    if port == 0:  # httpx would connect to the scheme's default port (80/443) instead
        return f"invalid port in {url!r}: expected 1 to 65535, got 0"
    return None


_AUTH = ("auto", "bearer", "x-api-key", "none")


def _api_key_env(t: Table, env: Mapping[str, str]) -> str | None:
    """A table's ``api_key_env``: the name of a set, non-empty variable whose value can be sent.

    Raises:
        ProfileError: the variable is not set, is set but empty (``_fields.empty_secret``),
            or holds a value no header can carry; the value itself is never shown.
    """
    api_key_env: str | None = t.str("api_key_env", None, nonempty=True)
    if api_key_env is not None and api_key_env not in env:
        raise t.error("api_key_env", f"environment variable {api_key_env} is not set")
    if api_key_env is not None and empty_secret(env[api_key_env]):
        raise t.error("api_key_env", f"environment variable {api_key_env} is set but empty (e.g. "
                                     f"{api_key_env}= on the command line): set it to the API key")
    if api_key_env is not None:
        problem = field_problem("x-api-key", env[api_key_env])
        if problem is not None:
            hint = " (a trailing newline?)" if "control character" in problem else ""
            raise t.error("api_key_env", f"environment variable {api_key_env}: "
                          f"{problem.replace('the value', 'its value')}{hint}")
    return api_key_env


def _arm_target(t: Table, base: TargetSpec, env: Mapping[str, str]) -> TargetSpec:
    """An A/B arm's target: ``[target]`` with the arm's own ``api_key_env``,
    ``auth``, ``headers`` and ``header_env`` on top (docs/ab-arms.md); its URL
    is the arm's (hopbench.config._arm_spec)."""
    changes: dict[str, Any] = {}
    if t.has("headers"):
        changes["headers"] = {**base.headers, **read_headers(t.table("headers"), "the arm's api_key_env or header_env")}
    if t.has("header_env"):
        changes["header_env"] = {**base.header_env, **read_header_env(t.table("header_env"), env)}
    if t.has("api_key_env"):
        changes["api_key_env"] = _api_key_env(t, env)
    if t.has("auth"):
        changes["auth"] = t.str("auth", choices=_AUTH)
    return replace(base, **changes) if changes else base


def _target(t: Table, env: Mapping[str, str]) -> TargetSpec:
    url = t.str("url", None)
    if t.has("embedded"):
        embedded = t.bool("embedded")
        if embedded and url is not None:
            raise t.error("embedded", "expected either target.url or target.embedded = true, not both")
        if not embedded and url is None:
            raise t.error("embedded", "expected target.url when target.embedded = false")
    if url is not None:
        if url == "embedded":
            url = None
        else:
            problem = check_base_url(url)
            if problem:
                raise t.error("url", problem)
            url = url.rstrip("/")
    pt = t.table("paths")
    paths = dict(DEFAULT_PATHS)
    for proto in PROTOCOLS:
        p = pt.str(proto, paths[proto], nonempty=True)
        if not p.startswith("/"):
            raise pt.error(proto, f"expected a path starting with '/', got {p!r}")
        paths[proto] = p
    pt.done()
    headers = read_headers(t.table("headers"), "target.api_key_env or target.header_env")
    header_env = read_header_env(t.table("header_env"), env)
    api_key_env = _api_key_env(t, env)
    auth = t.str("auth", "auto", choices=_AUTH)
    verify = t.bool("verify_tls", True)
    transport = t.str("transport", "hopbench", choices=("hopbench", "httpx"))
    t.done()
    return TargetSpec(url, paths, headers, header_env, api_key_env, auth, verify, transport)


_SCENARIO_EXAMPLE = '[[scenario]] followed by its keys, e.g. protocol = "chat"'


def _misplaced_scenario(root: Table) -> None:
    """A ``scenario = ...`` key written below a ``[table]`` header belongs to that
    table in TOML (``target.scenario``): say so, instead of "unknown key".
    ``[gate.scenario.NAME]`` (a table) is the gate's own and is left alone.

    Raises:
        ProfileError: naming the file, line and the key as TOML read it.
    """
    def walk(t: Table) -> None:
        for key, v in t.data.items():
            if isinstance(v, Mapping):
                walk(Table(v, t.doc, t.path + (key,)))
            elif isinstance(v, list):
                for i, x in enumerate(v):
                    if isinstance(x, Mapping):
                        walk(Table(x, t.doc, t.path + (key, i)))
        v = t.data.get("scenario")
        if "scenario" in t.data and not isinstance(v, Mapping):
            name = ".".join(str(p) for p in t.path if isinstance(p, str))
            header = f"[[{name}]]" if isinstance(t.path[-1], int) else f"[{name}]"
            raise t.error("scenario", f"expected scenarios as top-level [[scenario]] tables, got a key "
                                      f"\"scenario\" inside {header} (in TOML a key written below a {header} "
                                      f"header belongs to that table); write {_SCENARIO_EXAMPLE}")

    for key, v in root.data.items():
        if isinstance(v, Mapping):
            walk(Table(v, root.doc, (key,)))
        elif isinstance(v, list):
            for i, x in enumerate(v):
                if isinstance(x, Mapping):
                    walk(Table(x, root.doc, (key, i)))


def _scenarios(root: Table, base: Path, target: TargetSpec, seed: int = 0,
               slo_base: Any = None) -> tuple[Scenario, ...]:
    raw = root.data.get("scenario")
    if isinstance(raw, Mapping):  # [scenario]: one table, not an array of tables
        raise root.error("scenario", "expected an array of tables, got a table: write [[scenario]] (double "
                                     "brackets) for each scenario, e.g. protocol = \"chat\" below it")
    if isinstance(raw, list) and not raw:
        raise root.error("scenario", f"expected at least one [[scenario]] table, got an empty array "
                                     f"(scenario = []); write {_SCENARIO_EXAMPLE}")
    tables = root.tables("scenario")
    if not tables:
        raise root.error("scenario", f"expected at least one [[scenario]] table, found none; write "
                                     f"{_SCENARIO_EXAMPLE}")
    out: list[Scenario] = []
    names: set[str] = set()
    for t in tables:
        protocol = t.str("protocol", MISSING, choices=PROTOCOLS)
        model = t.str("model", "hopbench-fast" if target.embedded else MISSING, nonempty=True)
        name = t.str("name", _default_name(f"{protocol}-{model}"), nonempty=True)
        problem = check_name(name)
        if problem:
            raise t.error("name", problem)
        if name == "all":
            raise t.error("name", "\"all\" is reserved for the whole run")
        if name in names:
            raise t.error("name", f"expected a unique scenario name, got {name!r} twice")
        names.add(name)
        weight = t.number("weight", 1.0, positive=True)
        prompts: list[Any] = []
        if t.has("prompts") and t.has("prompts_file"):
            raise t.error("prompts_file", "expected prompts or prompts_file, not both")
        if t.has("prompts"):
            prompts = t.str_list("prompts", nonempty=True)
        elif t.has("prompts_file"):
            prompts = _read_prompts(t, base)
        else:
            prompts = ["Explain server-sent events in three sentences."]
        workload = None
        session = None
        if uses_workload(t):  # docs/workloads.md: lengths, datasets (hopbench.workload._pool)
            own = t.has("prompts") or t.has("prompts_file") or not (t.has("input_tokens") or t.has("dataset"))
            workload = parse_workload(t, base, seed, len(out), prompts if own else None)
            if t.has("session"):  # docs/workloads.md, "Multi-turn sessions"
                from ..workload._sessions import parse_session

                session = parse_session(t.table("session"), workload.entries, seed, len(out), workload.source)
            # the record's one number: the pool's mean (each body carries its own)
            max_tokens = round(sum(e.max_tokens for e in workload.entries) / len(workload.entries))
        else:
            max_tokens = t.int("max_tokens", 256, min=1, max=MAX_OUTPUT_TOKENS)
        include_usage = t.bool("include_usage", True)
        slo = slo_base
        if t.has("slo"):
            from ._slo_spec import parse_slo

            slo = parse_slo(t.table("slo"), slo_base)
        if not WIRES[protocol].usage_option and t.has("include_usage") and "include_usage" in t.data:
            only = " or ".join(f'"{p}"' for p, w in WIRES.items() if w.usage_option)
            raise t.error("include_usage", f"only valid for protocol = {only}")
        extra = t.table("extra")
        extra_data = dict(extra.data)
        extra.keys()
        for reserved in ("stream", "model"):
            if reserved in extra_data:
                raise extra.error(reserved, "set by hopbench; use the scenario's own key")
        cancel = parse_cancel(t)  # client cancellation: hopbench.workload._cancel
        t.done(also_allowed=WORKLOAD_KEYS)
        if workload is not None:
            for k in ("max_tokens", "max_completion_tokens", "max_output_tokens", "messages", "input"):
                if k in extra_data:  # it would silently replace what the workload recorded
                    raise extra.error(k, "set by the scenario's workload keys (max_tokens, "
                                         "input_tokens, dataset): docs/workloads.md")
            entries = workload.entries
            out.append(Scenario(name, protocol, weight, model,
                                (), max_tokens, include_usage,
                                extra_data,
                                tuple(encode_body(protocol, model, e.messages, e.max_tokens,
                                                  include_usage, extra_data) for e in entries),
                                target.paths[protocol],
                                lengths=tuple((e.input_tokens, e.max_tokens) for e in entries),
                                replacement=workload.replacement, cancel=cancel, slo=slo, session=session,
                                dataset_note=workload.note))
            continue
        # a prompts_file line {"messages": [...]} is sent as written (encode_body's verbatim conversation)
        bodies = tuple(encode_body(protocol, model, p["messages"] if isinstance(p, dict) else (Message("user", p),),
                                   max_tokens, include_usage, extra_data) for p in prompts)
        out.append(Scenario(name, protocol, weight, model,
                            tuple(p if isinstance(p, str) else json.dumps(p) for p in prompts),
                            max_tokens, include_usage, extra_data, bodies, target.paths[protocol],
                            cancel=cancel, slo=slo))
    return tuple(out)


def _read_prompts(t: Table, base: Path) -> list[Any]:
    rel = t.str("prompts_file", MISSING, nonempty=True)
    path = (base / rel) if not Path(rel).is_absolute() else Path(rel)
    try:
        # utf-8-sig: a BOM (Windows editors) is not part of the first line; "\n" only, as
        # _dataset.read_dataset: splitlines would break a line at a raw U+2028 in a string
        lines = gunzip(read_regular(path)).decode("utf-8-sig").split("\n")
    except OSError as exc:
        raise t.error("prompts_file", f"cannot read {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise t.error("prompts_file", f"{path} is not UTF-8 text") from None
    prompts: list[Any] = []
    for i, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            v = json_value(line)
        except json.JSONDecodeError as exc:
            raise ProfileError(f"expected one JSON value per line (a string, or an object with "
                               f"\"prompt\" or \"messages\"): {exc.msg}", path=path, line=i) from None
        if isinstance(v, dict):
            if isinstance(v.get("prompt"), str):
                v = v["prompt"]
            elif isinstance(v.get("messages"), list) and v["messages"]:
                v = {"messages": v["messages"]}
            else:
                raise ProfileError("expected an object with a string \"prompt\" or a non-empty "
                                   "\"messages\" array", path=path, line=i)
        elif not isinstance(v, str):
            raise ProfileError(f"expected a JSON string or object, got {type(v).__name__}",
                               path=path, line=i)
        try:  # a "\\ud800" escape decodes to a lone surrogate, which no request body can encode
            json.dumps(v, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise ProfileError("a string holds a lone UTF-16 surrogate (a \\u escape without its pair): "
                               "not sendable as UTF-8", path=path, line=i) from None
        prompts.append(v)
    if not prompts:
        raise t.error("prompts_file", f"{path} holds no prompts")
    return prompts


def request_headers(target: TargetSpec, protocol: str, env: Mapping[str, str] | None = None,
                    ) -> dict[str, str]:
    """The headers every request of ``protocol`` carries (secrets resolved from env).

    Auth: ``Authorization: Bearer KEY`` for the OpenAI protocols and ``x-api-key``
    for Anthropic Messages, unless ``target.auth`` says otherwise; Messages also
    gets ``anthropic-version`` (Anthropic API reference, "Versions") unless set.
    The returned dict holds secrets: never log or record it.
    """
    env = os.environ if env is None else env
    headers = {"content-type": "application/json", "accept": "text/event-stream", **WIRES[protocol].headers}
    headers.update({k.lower(): v for k, v in target.headers.items()})
    for k, var in target.header_env.items():
        headers[k.lower()] = env[var]
    style = auth_style(protocol, target.auth)
    if target.api_key_env is not None and style is not None:
        key = env[target.api_key_env]
        if style == "bearer":
            headers["authorization"] = f"Bearer {key}"
        else:
            headers["x-api-key"] = key
    return headers


def sanitized(profile: Profile) -> dict[str, Any]:
    """The profile as recorded in results (summary.json, report.html).

    The parsed TOML: client secrets only appear as environment-variable *names*
    (``api_key_env``, ``header_env``), the emulator's ``api_key`` is replaced by
    ``"<redacted>"``, and so is the value of any ``headers`` entry (target, arm,
    scrape) whose name :func:`hopbench.config._fields.is_secret_header` flags. Loading
    refuses such entries already; this keeps a profile built another way (or
    by a future key) from recording one. Never raises.
    """
    out: dict[str, Any] = json.loads(json.dumps(profile.raw, default=str))
    out["_source"] = str(profile.path) if profile.path else None
    arms: list[Any] = out["arm"] if isinstance(out.get("arm"), list) else []
    for emulator in ([out.get("emulator"), out.get("upstream")]
                     + [a.get("emulator") for a in arms if isinstance(a, dict)]):
        if isinstance(emulator, dict):  # the emulator's own key is a secret too (also an arm's)
            tables = [emulator] + [m for m in (emulator.get("models") or {}).values() if isinstance(m, dict)]
            for table in tables:
                if "api_key" in table:
                    table["api_key"] = "<redacted>"
    _redact_secret_headers(out)
    return out


def _redact_secret_headers(node: Any) -> None:
    """Replace, in place, the value of every secret-named entry of every
    ``headers`` table inside ``node`` (JSON-shaped) by ``"<redacted>"``."""
    if isinstance(node, list):
        for item in node:
            _redact_secret_headers(item)
    elif isinstance(node, dict):
        for k, v in node.items():
            if k == "headers" and isinstance(v, dict):
                for name in v:
                    if is_secret_header(str(name)):
                        v[name] = "<redacted>"
            else:
                _redact_secret_headers(v)
