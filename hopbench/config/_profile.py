"""Load profiles: TOML in, validated frozen records out.

Role: ``load_profile`` / ``parse_profile`` read a profile and build its
``Profile`` (``_records``): this module reads ``[run]``, ``[load]`` and
``[target]`` itself, hands each other table to its parser (``[[scenario]]``:
``_scenario_spec``; ``[slo]``, ``[[arm]]``, ``[gate]``, ``[[scrape]]``,
``[[stage]]``/``[search]``, ``[upstream]``, ``[contract]``: their ``*_spec`` modules; the trace
file: ``workload._trace``; ``[emulator]``: the emulator's own config), checks
what spans tables, and says what may be recorded (``sanitized``).

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
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from .._units import s_to_ns
from ..sse import DEFAULT_MAX_EVENT_BYTES
from ._fields import FIELD_NAME, empty_secret, field_problem, is_secret_header, read_header_env, read_headers
from .._toml import MISSING, RATE_MIN_RPS, Table, TomlDoc, closest_key, load_toml, parse_toml
from ..protocols._requests import DEFAULT_PATHS, PROTOCOLS
from ._records import LoadSpec, Profile, RunSpec, Scenario, TargetSpec, Timeouts, check_name, default_name
from ._scenario_spec import parse_scenarios, refuse_lengths_in_trace, refuse_misplaced_scenario, request_headers

__all__ = [
    "AUTO_WORKERS",
    "MAX_WORKERS",
    "check_base_url",
    "check_workers",
    "load_profile",
    "parse_profile",
    "sanitized",
]


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
              "search", "upstream", "contract")


def _build(doc: TomlDoc, env: Mapping[str, str]) -> Profile:
    """The profile of a parsed TOML document: each table read by its parser, then the
    checks across tables, in a fixed order (the first problem is the one said).

    Raises:
        ProfileError: anything wrong, with file, line and key path.
    """
    root = doc.root()
    _known_tables(root)
    refuse_misplaced_scenario(root)
    contract = _contract(root)
    if contract is not None and "run" not in root.data and "load" not in root.data:
        # a check profile (docs/check.md): say what it is for before any load key is missed
        raise root.error("run", "expected run.duration_s or run.requests (how long to run); a profile with "
                                "[contract] is for `hopbench check`, which needs neither")
    base = doc.path.parent if doc.path else Path.cwd()
    run = _run(root.table("run"), doc)
    load = _load(root.table("load"))
    target = _target(root.table("target"), env)
    scenarios, load = _scenarios(root, base, run, load, target)
    emulator_t = root.table("emulator")
    from ..emulator._config import EmulatorConfig  # the emulator owns its keys

    emulator_config = EmulatorConfig.from_table(emulator_t)
    arms = _arms(root, emulator_t, scenarios, run, load, target, env)
    gate_t = root.table("gate")
    if gate_t.data:
        _check_gate(Table(gate_t.data, doc, ("gate",)), gate_t, arms, scenarios)
    gate_t.keys()
    from ._scrape_spec import parse_scrapes  # [[scrape]] endpoints (docs/observability.md)

    scrape = parse_scrapes(root.tables("scrape"), env)
    stages, search = _stages(root, load, scenarios)
    if arms and (stages or search is not None or any(sc.slo is not None for sc in scenarios)):
        what = "stage" if stages else "search" if search is not None else "slo"
        raise _first_table(root, what).error(
            None, "[[arm]] tables make one results scope per arm, while SLOs, stages and the capacity "
                  "search judge scenarios: not supported together (run one profile per arm's url; "
                  "docs/ab-arms.md)")
    from ._upstream_spec import parse_upstream  # the gateway's upstream (docs/gateway-overhead.md)

    if arms and root.has("upstream"):  # before [upstream]'s own checks, which would ask for a target url
        raise _first_table(root, "arm").error(None, "[upstream] (gateway overhead) and [[arm]] tables cannot "
                                                    "be combined yet: measure one gateway per run")
    upstream = parse_upstream(root.table("upstream"), base, target.url)
    _check_upstream(root, run, arms, upstream)
    root.done()
    if (run.duration_ns is None and run.requests is None and not stages and search is None
            and not (load.mode == "trace" and not load.trace.loop)):
        check = "; a profile with [contract] is for `hopbench check`, which needs neither" if contract else ""
        raise root.error("run", f"expected run.duration_s or run.requests (how long to run){check}")
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
        contract=contract,
    )


def _contract(root: Table) -> Any:
    """The ``[contract]`` table (``_contract_spec.ContractSpec``), or None without one.

    Every profile reads it, so that ``hopbench run`` and ``validate`` refuse a bad
    contract as ``hopbench check`` does (docs/check.md); only the check acts on it.
    """
    if "contract" not in root.data:
        return None
    from ._contract_spec import parse_contract  # the [contract] keys and rules (docs/check.md)

    return parse_contract(root.table("contract"))


def _known_tables(root: Table) -> None:
    """Refuse a top-level table hopbench does not know, naming the closest known one."""
    for key in root.data:  # a misspelt table first, before what it should have held is missed
        if key not in _TOP_LEVEL:
            hint = " (tables are [[scenario]], singular)" if key == "scenarios" else ""
            fix = None if hint else closest_key(key, set(_TOP_LEVEL) - set(root.data))
            near = f"; did you mean {fix!r}?" if fix is not None else ""
            raise root.error(key, f"unknown table{near} (expected one of: {', '.join(_TOP_LEVEL)}){hint}")


def _scenarios(root: Table, base: Path, run: RunSpec, load: LoadSpec,
               target: TargetSpec) -> tuple[tuple[Scenario, ...], LoadSpec]:
    """The scenarios (over the ``[slo]`` table's objectives) and, in a trace replay, the
    load with its trace read (the trace names the scenarios)."""
    from ..measure._slo import Slo
    from ._slo_spec import parse_slo  # [slo] (docs/slo.md)

    slo_base: Slo | None = None
    if root.has("slo"):
        slo_base = parse_slo(root.table("slo"))
    if load.mode == "trace":  # before the scenarios' own lengths are read (datasets, tokenizers)
        refuse_lengths_in_trace(root)
    scenarios = parse_scenarios(root, base, target, run.seed, slo_base)
    if load.mode == "trace":  # the trace file, once the scenarios it names are known
        from ._trace_spec import parse_trace

        spec = parse_trace(root.table("load"), base,
                           [(sc.name, sc.model, bool(sc.lengths), sc.weight) for sc in scenarios], run.seed)
        load = replace(load, trace=spec, rate_rps=spec.rate_rps)
    return scenarios, load


def _arms(root: Table, emulator_t: Table, scenarios: tuple[Scenario, ...], run: RunSpec, load: LoadSpec,
          target: TargetSpec, env: Mapping[str, str]) -> tuple[Any, ...]:
    """The ``[[arm]]`` tables (``config._arm_spec.ArmSpec``), refused beside a trace replay,
    sessions, or a ``[target]`` url."""
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
    return arms


def _check_upstream(root: Table, run: RunSpec, arms: tuple[Any, ...], upstream: Any) -> None:
    """``[upstream]`` (gateway overhead) runs in one process, without ``[[arm]]``: the
    streams and the upstream's record are matched on one clock (docs/gateway-overhead.md).
    Checked here, with the key's line, so that ``validate`` refuses what ``run`` would;
    ``--workers`` / ``--engine`` are checked again once applied (``_run_command.profile_overrides``)."""
    if upstream is None:
        return
    run_t = root.table("run")
    if run.workers > 1:
        raise run_t.error("workers", f"[upstream] (gateway overhead) runs in one process: expected 1, got "
                                     f"{run.workers} (or run without [upstream])")
    if run.engine == "ray":
        raise run_t.error("engine", '[upstream] (gateway overhead) runs in one process: expected "local", '
                                    'got "ray" (or run without [upstream])')


def _check_gate(budgets_t: Table, gate_t: Table, arms: tuple[Any, ...], scenarios: tuple[Scenario, ...]) -> None:
    """Check ``[gate]`` before any load: the budget grammar's own keys, and that each
    budget's scope names an arm (with arms) or a scenario."""
    from ._gate_spec import parse_budgets  # the budget grammar owns its keys: checked before any load

    budgets, _ = parse_budgets(budgets_t)
    names = {a.name for a in arms} or {sc.name for sc in scenarios}  # the scopes
    for budget in budgets:
        if budget.arms_figure is not None and not arms:
            raise gate_t.error(budget.key, "an A/B arms budget needs [[arm]] tables (docs/ab-arms.md): "
                                           "this profile has none")
        if budget.scope != "all" and budget.scope not in names:
            raise gate_t.table("scenario").error(
                budget.scope, f"no {'arm' if arms else 'scenario'} named {budget.scope!r} "
                              f"({'arms' if arms else 'scenarios'}: {', '.join(sorted(names))})")


def _stages(root: Table, load: LoadSpec, scenarios: tuple[Scenario, ...]) -> tuple[tuple[Any, ...], Any]:
    """The ``[[stage]]`` entries and the ``[search]`` table (``config._stage_spec``): one or
    the other, not in a trace replay, a search only with objectives to judge by."""
    from ._search_spec import parse_search  # [search] (docs/slo.md)
    from ._stage_spec import parse_stages  # [[stage]] (docs/slo.md)

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
    return stages, search


MAX_WORKERS = 256


AUTO_WORKERS = "auto"
"""``run.workers = "auto"`` / ``--workers auto``: as many workers as the machine's free
cores (``hopbench.engine._cores``; docs/scaleout.md)."""


def check_workers(n: int | str) -> str | None:
    """Why ``n`` cannot be a number of worker processes (run.workers, --workers):
    :data:`AUTO_WORKERS` or an integer from 1 to :data:`MAX_WORKERS`; None when it can."""
    if n == AUTO_WORKERS:
        return None
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_WORKERS:
        got = str(n).lower() if isinstance(n, bool) else repr(n)  # (TOML spells true/false)
        return f"expected {AUTO_WORKERS!r} or an integer from 1 to {MAX_WORKERS}, got {got}"
    return None


#: ``[run].max_event_bytes``: the largest accepted (1 GiB: one event is held in memory per
#: stream, so a larger bound is no bound); the default is the scanner's own (4 MiB)
MAX_EVENT_BYTES_MAX = 1 << 30

#: ``[run].stop_on_failing_target``'s default: this many responses all failing, none streamed
#: (as many as the connection failures that stop an unreachable target: engine._watch.UNREACHABLE_AFTER)
STOP_ON_FAILING_DEFAULT = 20


def _run(t: Table, doc: TomlDoc) -> RunSpec:
    default = default_name(doc.path.stem) if doc.path else "run"
    name = t.str("name", default, nonempty=True)
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
    raw_workers = t.raw("workers", 1)
    problem = check_workers(raw_workers)
    if problem:
        raise t.error("workers", problem)
    workers_auto = raw_workers == AUTO_WORKERS
    # "auto": 1 until the run command counts the free cores (engine._cores.auto_workers)
    workers = 1 if workers_auto else int(raw_workers)
    engine = t.str("engine", "local", choices=("local", "ray"))
    if workers_auto and engine == "ray":
        raise t.error("workers", f"{AUTO_WORKERS!r} counts this machine's free cores; with engine = \"ray\" "
                                 "the workers run on the cluster: give their number")
    ray_address = t.str("ray_address", None)
    stream_log = t.bool("stream_log", True)
    metrics_port = t.int("metrics_port", None, min=1, max=65535)  # docs/observability.md
    record_headers = _record_headers(t)
    max_event_bytes = t.int("max_event_bytes", DEFAULT_MAX_EVENT_BYTES, min=1, max=MAX_EVENT_BYTES_MAX)
    stop_failing = t.int("stop_on_failing_target", STOP_ON_FAILING_DEFAULT, min=0)  # docs/profiles.md
    t.done()
    return RunSpec(name, duration, requests, warmup, seed, timeouts, grace, interval,
                   budget, workers, engine, ray_address, stream_log, metrics_port, record_headers,
                   max_event_bytes, stop_failing, workers_auto=workers_auto)


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
        from ._trace_spec import trace_keys

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
