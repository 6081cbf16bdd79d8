"""The emulator's configuration: validated once, then immutable.

Role: turn a TOML table (a whole emulator config file's root, or a profile's
``[emulator]`` table) into an ``EmulatorConfig``. Every key is read through the
strict ``Table`` getters, so an error names the file, the line and the key path
(``profiles/x.toml:31: emulator.faults.http_429: expected a number from 0 to 1,
got 2``) and unknown keys are rejected.

Invariants:
- Human units in the file (``ttft_ms``, ``keepalive_interval_s``); the
  ``Behaviour`` record converts to integer nanoseconds through its ``*_ns``
  properties, in one place.
- A per-model table (``[models."claude-x"]``) starts from the top-level values
  and overrides only the keys it sets; its ``[faults]`` table is merged key by
  key with the top-level one. ``seed`` and ``api_key`` are top-level only.
- ``to_mapping()`` is JSON-able and ``from_mapping(to_mapping())`` gives an equal
  config (the parent hands the config to the child process this way).

The key reference is docs/emulator.md.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from .._errors import ProfileError
from ..workload._lengths import load_tokenizer
from .._toml import Table, TomlDoc, load_toml

__all__ = ["Behaviour", "EmulatorConfig", "FaultConfig", "FAULT_NAMES", "MIDSTREAM_CODES"]

#: Fault names in the order the per-request draw walks them (docs/emulator.md, "Faults").
FAULT_NAMES: tuple[str, ...] = (
    "http_429",
    "http_500",
    "http_503",
    "midstream_error",
    "disconnect",
    "stall",
    "omit_done",
    "slow_headers",
)

#: ``response.error.code`` values of a Responses ``response.failed`` (docs/protocols.md, Responses stream).
MIDSTREAM_CODES: tuple[str, ...] = ("rate_limit_exceeded", "server_error", "invalid_prompt")

TTFT_DISTRIBUTIONS: tuple[str, ...] = ("uniform", "normal", "lognormal", "exponential")


@dataclass(frozen=True, slots=True)
class FaultConfig:
    """Per-request fault probabilities (each 0..1, summing to at most 1) and parameters.

    Attributes:
        http_429 .. slow_headers: probability that one request gets that fault.
        retry_after_s: the ``Retry-After`` header of a 429, in whole seconds.
        stall_s: length of a stall (no bytes, no keepalive), in seconds; the stream
            then continues normally.
        slow_headers_ms: delay before the response headers, in milliseconds.
        fault_after_tokens: content deltas sent before a mid-stream fault
            (midstream_error, disconnect, stall) strikes; capped to the stream's length.
        midstream_codes: the codes a mid-stream error draws from (uniformly).
    """

    http_429: float = 0.0
    http_500: float = 0.0
    http_503: float = 0.0
    midstream_error: float = 0.0
    disconnect: float = 0.0
    stall: float = 0.0
    omit_done: float = 0.0
    slow_headers: float = 0.0
    retry_after_s: int = 1
    stall_s: float = 5.0
    slow_headers_ms: float = 1000.0
    fault_after_tokens: int = 8
    midstream_codes: tuple[str, ...] = MIDSTREAM_CODES

    def probabilities(self) -> tuple[tuple[str, float], ...]:
        """(fault name, probability) pairs in draw order."""
        return tuple((name, float(getattr(self, name))) for name in FAULT_NAMES)


@dataclass(frozen=True, slots=True)
class Behaviour:
    """How one model behaves (top-level defaults or a per-model override).

    Attributes:
        ttft_ms: mean time to first token, in milliseconds, after the think time.
        ttft_jitter_ms: spread of the TTFT, in milliseconds (see ``ttft_distribution``).
        ttft_distribution: "uniform" (mean +- jitter), "normal" (sd = jitter),
            "lognormal" (mean and sd as given), "exponential" (mean; jitter unused).
        tokens_per_s: output token rate; 0 means unpaced (as fast as possible).
        token_jitter_ms: each inter-token gap is 1/rate +- uniform(jitter), in ms, >= 0.
        output_tokens: content deltas to produce (before ``max_tokens`` caps it).
        output_tokens_jitter: +- uniform integer spread of ``output_tokens``.
        think_time_ms: silence before the first token, in ms, added to the TTFT.
        keepalive_interval_s: ``: hopbase-keepalive`` cadence in silences, in s; 0 disables.
        reasoning_tokens: reasoning deltas sent before the text (part of output_tokens).
        tool_call_probability: chance that a request carrying ``tools`` ends in a tool call.
        tool_call_tokens: argument deltas of such a tool call (part of output_tokens).
        prefill_tokens_per_s: prompt tokens processed per second before the
            first token: the TTFT grows by (input tokens - cached tokens) / rate;
            0 (the default) adds nothing.
        faults: the fault table.
        on_client_close: "stop" (the stream ends as soon as the client leaves, as
            vLLM aborts a request) or "finish" (it runs on to its end, writing to
            nobody: an upstream that never hears of the cancel; hopbench.workload._cancel
            then counts the wasted tokens).
    """

    ttft_ms: float = 200.0
    ttft_jitter_ms: float = 0.0
    ttft_distribution: str = "uniform"
    tokens_per_s: float = 50.0
    token_jitter_ms: float = 0.0
    output_tokens: int = 64
    output_tokens_jitter: int = 0
    think_time_ms: float = 0.0
    keepalive_interval_s: float = 10.0
    reasoning_tokens: int = 0
    tool_call_probability: float = 0.0
    tool_call_tokens: int = 6
    prefill_tokens_per_s: float = 0.0
    faults: FaultConfig = field(default_factory=FaultConfig)
    on_client_close: str = "stop"

    @property
    def keepalive_interval_ns(self) -> int:
        """Keepalive cadence in ns (0: keepalives off)."""
        return int(round(self.keepalive_interval_s * 1e9))

    @property
    def gap_ns(self) -> int:
        """Mean inter-token gap in ns (0 when unpaced)."""
        return 0 if self.tokens_per_s <= 0 else int(round(1e9 / self.tokens_per_s))


_BEHAVIOUR_DEFAULT = Behaviour()


def _read_faults(t: Table, base: FaultConfig) -> FaultConfig:
    values: dict[str, Any] = {}
    for name in FAULT_NAMES:
        values[name] = t.number(name, getattr(base, name), min=0, max=1)
    values["retry_after_s"] = t.int("retry_after_s", base.retry_after_s, min=0)
    values["stall_s"] = t.number("stall_s", base.stall_s, min=0)
    values["slow_headers_ms"] = t.number("slow_headers_ms", base.slow_headers_ms, min=0)
    values["fault_after_tokens"] = t.int("fault_after_tokens", base.fault_after_tokens, min=0)
    codes = t.str_list("midstream_codes", list(base.midstream_codes), nonempty=True)
    for code in codes:
        if code not in MIDSTREAM_CODES:
            raise t.error("midstream_codes",
                          f"expected codes among {', '.join(MIDSTREAM_CODES)}, got {code!r}")
    values["midstream_codes"] = tuple(codes)
    total = sum(values[name] for name in FAULT_NAMES)
    if total > 1.0 + 1e-9:
        raise t.error(None, f"fault probabilities must sum to at most 1, got {total:g}")
    t.done()
    return FaultConfig(**values)


def _read_behaviour(t: Table, base: Behaviour) -> Behaviour:
    """Read the shared behaviour keys from ``t`` with ``base`` as defaults (marks them seen)."""
    b = Behaviour(
        ttft_ms=t.number("ttft_ms", base.ttft_ms, min=0),
        ttft_jitter_ms=t.number("ttft_jitter_ms", base.ttft_jitter_ms, min=0),
        ttft_distribution=t.str("ttft_distribution", base.ttft_distribution,
                                choices=TTFT_DISTRIBUTIONS),
        tokens_per_s=t.number("tokens_per_s", base.tokens_per_s, min=0),
        token_jitter_ms=t.number("token_jitter_ms", base.token_jitter_ms, min=0),
        output_tokens=t.int("output_tokens", base.output_tokens, min=0),
        output_tokens_jitter=t.int("output_tokens_jitter", base.output_tokens_jitter, min=0),
        think_time_ms=t.number("think_time_ms", base.think_time_ms, min=0),
        keepalive_interval_s=t.number("keepalive_interval_s", base.keepalive_interval_s, min=0),
        reasoning_tokens=t.int("reasoning_tokens", base.reasoning_tokens, min=0),
        tool_call_probability=t.number("tool_call_probability", base.tool_call_probability,
                                       min=0, max=1),
        tool_call_tokens=t.int("tool_call_tokens", base.tool_call_tokens, min=1),
        prefill_tokens_per_s=t.number("prefill_tokens_per_s", base.prefill_tokens_per_s, min=0),
        faults=base.faults,
        on_client_close=t.str("on_client_close", base.on_client_close, choices=("stop", "finish")),
    )
    if t.has("faults"):
        b = replace(b, faults=_read_faults(t.table("faults"), base.faults))
    return b


def _read_tokenizer(table: Table) -> str | None:
    """The ``tokenizer`` key: loaded once here to check it (never downloads), and
    returned with a file path made absolute, so the child process finds it."""
    spec: str | None = table.str("tokenizer", None, nonempty=True)
    if spec is None:
        return None
    source = table.doc.path if table.doc is not None else None
    base = Path(source).parent if isinstance(source, (str, Path)) and Path(source).is_file() else Path.cwd()
    try:
        load_tokenizer(spec, base)
    except ValueError as exc:
        raise table.error("tokenizer", str(exc)) from None
    if spec.startswith("tiktoken:") or Path(spec).is_absolute():
        return spec
    return str((base / spec).resolve())


def _behaviour_mapping(b: Behaviour) -> dict[str, Any]:
    out = asdict(b)
    out["faults"]["midstream_codes"] = list(b.faults.midstream_codes)
    return out


@dataclass(frozen=True, slots=True)
class EmulatorConfig:
    """The whole emulator configuration.

    Attributes:
        seed: seeds every per-request random draw (same requests in the same
            order get the same behaviour).
        api_key: when set, requests must carry ``Authorization: Bearer KEY`` or
            ``x-api-key: KEY``; None accepts any request.
        default: the behaviour of models with no table of their own.
        models: per-model behaviours, by the request's ``model`` name.
        max_concurrency: requests served at once (0: no limit); the others wait
            in a FIFO queue before their schedule starts (``_capacity``).
        max_queue: requests that may wait for a slot (0: no limit); one more
            gets HTTP 503 at once.
        token_budget_per_s: output tokens/s all streams share (0: no limit):
            a stream's rate is min(tokens_per_s, budget / streams in service).
        prefix_cache_blocks: the prefix cache's capacity in blocks (the
            ``[prefix_cache]`` table's ``capacity_blocks``); 0: no cache.
        prefix_block_tokens: tokens per cached block (``block_tokens``).
        tokenizer: None (input tokens are prompt characters / 4) or the
            tokenizer that counts them, as a real server's does:
            ``"tiktoken:<encoding>"`` or an absolute path to a Hugging Face
            ``tokenizer.json`` (a relative path in the file is resolved against
            the file's folder when the config is read).
    """

    seed: int = 0
    api_key: str | None = None
    default: Behaviour = field(default_factory=Behaviour)
    models: dict[str, Behaviour] = field(default_factory=dict)
    max_concurrency: int = 0
    max_queue: int = 0
    token_budget_per_s: float = 0.0
    prefix_cache_blocks: int = 0
    prefix_block_tokens: int = 16
    tokenizer: str | None = None

    def behaviour_for(self, model: str) -> Behaviour:
        """The behaviour of ``model`` (its own table, else the default)."""
        return self.models.get(model, self.default)

    @classmethod
    def from_table(cls, table: Table) -> "EmulatorConfig":
        """Validate a TOML table and build a config.

        Args:
            table: a profile's ``[emulator]`` table or an emulator config file's root.

        Raises:
            ProfileError: a wrong type or range, an unknown key, fault probabilities
                summing past 1, a tokenizer that cannot be loaded or one beside
                ``[prefix_cache]``; the message names file, line and key path.
        """
        seed = table.int("seed", 0, min=0)
        tokenizer = _read_tokenizer(table)
        api_key = table.str("api_key", None, nonempty=True)
        max_concurrency = table.int("max_concurrency", 0, min=0)
        max_queue = table.int("max_queue", 0, min=0)
        if max_queue and not max_concurrency:
            raise table.error("max_queue", "only valid with max_concurrency (the queue is for its slots)")
        token_budget = table.number("token_budget_per_s", 0.0, min=0)
        default = _read_behaviour(table, _BEHAVIOUR_DEFAULT)
        blocks, block_tokens = 0, 16
        if table.has("prefix_cache"):  # docs/emulator.md, "Prefix cache"
            pc = table.table("prefix_cache")
            blocks = pc.int("capacity_blocks", 65536, min=1)
            block_tokens = pc.int("block_tokens", 16, min=1, max=1_000_000)
            pc.done()
            if tokenizer is not None:  # the cache cuts blocks of 4 characters per token
                raise table.error("tokenizer", "not combined with [prefix_cache], whose blocks "
                                  "count 4 characters per token (docs/emulator.md, \"Prefix cache\")")
        models: dict[str, Behaviour] = {}
        if table.has("models"):
            mt = table.table("models")
            for name in mt.keys():
                sub = mt.table(name)
                models[name] = _read_behaviour(sub, default)
                sub.done()
        table.done()
        return cls(seed=seed, api_key=api_key, default=default, models=models,
                   max_concurrency=max_concurrency, max_queue=max_queue,
                   token_budget_per_s=float(token_budget),
                   prefix_cache_blocks=blocks, prefix_block_tokens=block_tokens,
                   tokenizer=tokenizer)

    @classmethod
    def from_mapping(cls, data: dict[str, Any], source: str = "<emulator>") -> "EmulatorConfig":
        """Validate a plain mapping (e.g. parsed JSON) like a TOML table.

        Args:
            data: the mapping, shaped like the TOML file.
            source: a name for error messages in place of a file path.

        Raises:
            ProfileError: as ``from_table``.
        """
        if not isinstance(data, dict):
            raise ProfileError(f"expected a table, got {type(data).__name__}", path=source)
        doc = TomlDoc(data, None)
        doc.path = source  # type: ignore[assignment]  # shown as the file in messages
        return cls.from_table(doc.root())

    @classmethod
    def from_file(cls, path: str) -> "EmulatorConfig":
        """Load and validate an emulator TOML file.

        Raises:
            ProfileError: unreadable file, invalid TOML, or a bad key.
        """
        return cls.from_table(load_toml(path).root())

    def to_mapping(self) -> dict[str, Any]:
        """A JSON-able mapping that ``from_mapping`` turns back into an equal config."""
        out: dict[str, Any] = {"seed": self.seed}
        if self.api_key is not None:
            out["api_key"] = self.api_key
        for key in ("max_concurrency", "max_queue", "token_budget_per_s"):
            if getattr(self, key):
                out[key] = getattr(self, key)
        out.update(_behaviour_mapping(self.default))
        if self.prefix_cache_blocks:
            out["prefix_cache"] = {"capacity_blocks": self.prefix_cache_blocks,
                                   "block_tokens": self.prefix_block_tokens}
        if self.models:
            out["models"] = {name: _behaviour_mapping(b) for name, b in self.models.items()}
        if self.tokenizer is not None:
            out["tokenizer"] = self.tokenizer
        return out
