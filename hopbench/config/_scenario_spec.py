"""The ``[[scenario]]`` tables: what each scenario sends, encoded once, and the headers it carries.

Role: parse every ``[[scenario]]`` (protocol, model, name, weight, prompts or
``prompts_file``, ``max_tokens``, ``include_usage``, ``extra``, ``[scenario.slo]``,
client cancellation, and the workload keys handed to ``workload._pool``) into
``Scenario`` records whose request bodies are encoded here, once per prompt or
pool entry (``protocols._requests.encode_body``); read a ``prompts_file``; give
the headers every request of a protocol carries (``request_headers``). Also
the profile-wide checks about where scenario tables and their keys may stand.

Invariants:
- Every problem is a ``ProfileError`` naming file, line and key, raised before
  any load; the checks run in a fixed order (the first problem is the one said).
- Bodies are encoded at load and never again (the runner only picks one).
- Pure but for reading a ``prompts_file`` (and the datasets and tokenizers
  ``workload._pool`` reads); ``request_headers`` reads secrets from the
  environment it is given and its result must never be logged.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .._errors import ProfileError
from .._textfile import gunzip, json_value, read_regular
from .._toml import MISSING, Table
from ..protocols._requests import PROTOCOLS, WIRES, Message, auth_style, encode_body
from ..workload._cancel import parse_cancel
from ..workload._lengths import MAX_OUTPUT_TOKENS
from ..workload._pool import WORKLOAD_KEYS, parse_workload, uses_workload
from ._records import Scenario, TargetSpec, check_name, default_name

__all__ = ["parse_scenarios", "refuse_lengths_in_trace", "refuse_misplaced_scenario", "request_headers"]

#: what an error about missing or misplaced scenarios tells the reader to write
_SCENARIO_EXAMPLE = '[[scenario]] followed by its keys, e.g. protocol = "chat"'


def parse_scenarios(root: Table, base: Path, target: TargetSpec, seed: int = 0,
                    slo_base: Any = None) -> tuple[Scenario, ...]:
    """Every ``[[scenario]]`` table as a ``Scenario``, in order.

    Args:
        root: the profile's root table.
        base: the profile's folder (``prompts_file``, datasets and tokenizers are relative to it).
        target: the ``[target]`` record (the embedded emulator gives ``model`` a default;
            ``target.paths`` gives each scenario's path).
        seed: the run seed (each scenario's pool is seeded by it and the scenario's index).
        slo_base: the ``[slo]`` objectives (``measure._slo.Slo``) that a ``[scenario.slo]``
            refines, or None.

    Returns:
        tuple of Scenario, non-empty, each with its request bodies encoded.

    Raises:
        ProfileError: no ``[[scenario]]`` table, or anything wrong in one (file, line, key).
    """
    out: list[Scenario] = []
    names: set[str] = set()
    for t in _scenario_tables(root):
        out.append(_scenario(t, base, target, seed, len(out), slo_base, names))
    return tuple(out)


def _scenario_tables(root: Table) -> list[Table]:
    """The ``[[scenario]]`` tables; a ``[scenario]`` table, an empty array or none at all refused."""
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
    return tables


def _scenario(t: Table, base: Path, target: TargetSpec, seed: int, index: int, slo_base: Any,
              names: set[str]) -> Scenario:
    """One ``[[scenario]]`` table (the ``index``-th) as a record; ``names`` holds the names
    taken by the scenarios before it and gets this one's."""
    protocol = t.str("protocol", MISSING, choices=PROTOCOLS)
    model = t.str("model", "hopbench-fast" if target.embedded else MISSING, nonempty=True)
    name = _name(t, f"{protocol}-{model}", names)
    weight = t.number("weight", 1.0, positive=True)
    prompts = _prompts(t, base)
    workload = None
    session = None
    if uses_workload(t):  # docs/workloads.md: lengths, datasets (hopbench.workload._pool)
        own = t.has("prompts") or t.has("prompts_file") or not (t.has("input_tokens") or t.has("dataset"))
        workload = parse_workload(t, base, seed, index, prompts if own else None)
        if t.has("session"):  # docs/workloads.md, "Multi-turn sessions"
            from ..workload._sessions import parse_session

            session = parse_session(t.table("session"), workload.entries, seed, index, workload.source)
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
        return Scenario(name, protocol, weight, model,
                        (), max_tokens, include_usage,
                        extra_data,
                        tuple(encode_body(protocol, model, e.messages, e.max_tokens,
                                          include_usage, extra_data) for e in entries),
                        target.paths[protocol],
                        lengths=tuple((e.input_tokens, e.max_tokens) for e in entries),
                        replacement=workload.replacement, cancel=cancel, slo=slo, session=session,
                        dataset_note=workload.note)
    # a prompts_file line {"messages": [...]} is sent as written (encode_body's verbatim conversation)
    bodies = tuple(encode_body(protocol, model, p["messages"] if isinstance(p, dict) else (Message("user", p),),
                               max_tokens, include_usage, extra_data) for p in prompts)
    return Scenario(name, protocol, weight, model,
                    tuple(p if isinstance(p, str) else json.dumps(p) for p in prompts),
                    max_tokens, include_usage, extra_data, bodies, target.paths[protocol],
                    cancel=cancel, slo=slo)


def _name(t: Table, default: str, names: set[str]) -> str:
    """The scenario's ``name`` (default made from ``default``): valid, not "all", not taken."""
    name: str = t.str("name", default_name(default), nonempty=True)
    problem = check_name(name)
    if problem:
        raise t.error("name", problem)
    if name == "all":
        raise t.error("name", "\"all\" is reserved for the whole run")
    if name in names:
        raise t.error("name", f"expected a unique scenario name, got {name!r} twice")
    names.add(name)
    return name


def _prompts(t: Table, base: Path) -> list[Any]:
    """The scenario's ``prompts``, its ``prompts_file``'s, or the one default prompt."""
    if t.has("prompts") and t.has("prompts_file"):
        raise t.error("prompts_file", "expected prompts or prompts_file, not both")
    prompts: list[Any] = ["Explain server-sent events in three sentences."]
    if t.has("prompts"):
        prompts = t.str_list("prompts", nonempty=True)
    elif t.has("prompts_file"):
        prompts = _read_prompts(t, base)
    return prompts


def _read_prompts(t: Table, base: Path) -> list[Any]:
    """A ``prompts_file``'s prompts: per non-blank line a JSON string, ``{"prompt": ...}`` or
    ``{"messages": [...]}`` (kept as ``{"messages": ...}``), in file order.

    Raises:
        ProfileError: an unreadable or non-UTF-8 file, a line of another shape, a lone
        surrogate, an empty file (file and line).
    """
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


def refuse_lengths_in_trace(root: Table) -> None:
    """Reject a scenario with its own lengths in a trace replay, on the scenario's own key.

    Raises:
        ProfileError: at the file:line of the first workload key (``workload._pool.WORKLOAD_KEYS``,
            a ``max_tokens`` distribution or ``"dataset"``) of the first scenario holding one:
            the trace gives every request's lengths (docs/workloads.md, "Trace replay").
    """
    value = root.data.get("scenario")
    if not (isinstance(value, list) and all(isinstance(x, dict) for x in value)):
        return  # not [[scenario]] tables: parse_scenarios says what is wrong
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


def refuse_misplaced_scenario(root: Table) -> None:
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
