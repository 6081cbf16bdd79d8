"""Workloads: a scenario's pool of distinct requests and how each send picks one.

Role: turn a scenario's workload keys (``input_tokens``, ``max_tokens`` as a
distribution, ``dataset``, ``tokenizer``, ``prompt_pool``, ``replacement``)
into a pool of distinct requests, each with its conversation, its requested
input length and its ``max_tokens`` (docs/workloads.md). The profile loader
encodes one JSON body per pool entry once (``protocols._requests.encode_body``); the runner then
only picks an entry per request (``Picker``): no request is re-encoded.

Invariants:
- No clock and no I/O (the dataset and tokenizer files are read by
  ``_dataset`` / ``_lengths`` at profile load).
- Everything random is drawn from a ``random.Random`` seeded by the run seed
  and the scenario's index: the same profile gives the same pool.
- The pool's order is the sending order without replacement: a
  low-discrepancy order for synthetic lengths (every prefix keeps the
  requested means), a seeded shuffle for datasets.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._format import plural
from ..protocols._requests import Message, encode_body
from ._dataset import DATASET_FORMATS, DatasetSpec, Record, record_from_messages, filter_records, read_dataset
from .._errors import ProfileError
from ._lengths import (MAX_INPUT_TOKENS, MAX_OUTPUT_TOKENS, WORDS, Dist, Tokenizer, dist_from, estimate_tokens,
                       load_tokenizer, synthetic_prompt)
from .._toml import MISSING, Table
from .._textfile import check_regular

__all__ = ["Picker", "PoolEntry", "Prepared", "Workload", "WORDS", "Dist", "Tokenizer", "build_pool",
           "parse_workload", "synthetic_prompt", "uses_workload"]


@dataclass(frozen=True, slots=True)
class PoolEntry:
    """One distinct request of a scenario.

    Attributes:
        messages: the conversation to send (system first when present).
        input_tokens: the requested (synthetic) or estimated (dataset) input
            length in tokens, or None when the scenario sets none.
        max_tokens: the output cap sent, tokens.
    """

    messages: tuple[Message, ...]
    input_tokens: int | None
    max_tokens: int


@dataclass(frozen=True, slots=True)
class Prepared:
    """One request built for one send (trace replay, session turns), beside a
    scenario's pre-encoded bodies.

    Attributes:
        body: the JSON request body.
        shape: (requested input tokens or None, max_tokens sent) for the
            ``lengths`` figures, or None.
        expect_usage: the body asks for usage in the stream (chat
            ``stream_options.include_usage``).
        implied_cached: prompt tokens a server prefix cache should hit for it
            (trace replay: ``_trace_cache.implied_hits``), or None.
        fields: extra streams.jsonl fields, (name, value) pairs.
        turn: the session turn (1-based; 0: not a session turn).
        keep_text: keep the streamed text (a session's next turn sends it back).
        on_result: called with the decoder's ``StreamResult`` (None when no
            body was decoded) once the stream is recorded.
    """

    body: bytes
    shape: tuple[int | None, int] | None
    expect_usage: bool
    implied_cached: int | None = None
    fields: tuple[tuple[str, Any], ...] = ()
    turn: int = 0
    keep_text: bool = False
    on_result: Callable[[Any], None] | None = None


class Picker:
    """Chooses the pool entry of each request: seeded, with or without replacement.

    With replacement, each pick is uniform (the runner's rng, one draw per
    request, as for a plain prompt list). Without, the entries are visited in
    the pool's own order, each once before any repeats: ``build_pool`` makes
    that order a seeded shuffle (datasets) or one whose every prefix is spread
    evenly over the length distributions (``Dist.spread``).

    Args:
        n: pool size (>= 1).
        replacement: the sampling mode.
    """

    __slots__ = ("n", "replacement", "_next")

    def __init__(self, n: int, replacement: bool = True) -> None:
        self.n = n
        self.replacement = replacement
        self._next = 0

    def pick(self, rng: random.Random) -> int:
        """The next entry's index, 0 <= i < n."""
        if self.n == 1:
            return 0
        if self.replacement:
            return rng.randrange(self.n)
        i = self._next
        self._next = (i + 1) % self.n
        return i


def build_pool(rng: random.Random, *, max_tokens: Dist | None, pool_size: int,
               input_dist: Dist | None = None, records: Sequence[tuple[Record, int]] | None = None,
               prompts: Sequence[tuple[Message, ...]] | None = None,
               tokenizer: Tokenizer | None = None) -> list[PoolEntry]:
    """The distinct requests of a scenario.

    Exactly one source: ``input_dist`` (``pool_size`` synthetic prompts at
    ``Dist.spread`` lengths), ``records`` (one entry per dataset record, with its
    estimated length) or ``prompts`` (plain prompts, cycled to ``pool_size``
    entries so that a ``max_tokens`` distribution has room).

    Args:
        rng: seeded by the caller (run seed and scenario index).
        max_tokens: the output-cap distribution (``Dist.spread`` over the pool),
            or None with ``records``: each record's reference reply length
            (``estimate_tokens``; every record must have a reply).
        pool_size: entries for synthetic or plain prompts (>= 1).

    Returns:
        list of PoolEntry, non-empty.

    Raises:
        ValueError: ``max_tokens`` None without ``records`` (a caller's bug:
        ``parse_workload`` refuses it as a profile error first).
    """
    entries: list[PoolEntry] = []
    if input_dist is not None:
        if max_tokens is None:
            raise ValueError("max_tokens from the dataset needs records")
        lengths = input_dist.spread(pool_size, 2, rng)
        caps = max_tokens.spread(pool_size, 3, rng)
        for n, cap in zip(lengths, caps):
            entries.append(PoolEntry((Message("user", synthetic_prompt(n, rng, tokenizer)),), n, cap))
    elif records is not None:
        order = list(records)
        rng.shuffle(order)  # the pool's order is the sending order without replacement
        if max_tokens is None:
            caps = [max(1, estimate_tokens(rec.reply or "", tokenizer)) for rec, _ in order]
        else:
            caps = max_tokens.spread(len(order), 3, rng)
        for (rec, n), cap in zip(order, caps):
            entries.append(PoolEntry(rec.messages, n, cap))
    else:
        if max_tokens is None:
            raise ValueError("max_tokens from the dataset needs records")
        convs = list(prompts or ())
        k = len(convs) if max_tokens.constant else max(pool_size, len(convs))
        caps = max_tokens.spread(k, 3, rng)
        for i in range(k):
            entries.append(PoolEntry(convs[i % len(convs)], None, caps[i]))
    return entries


#: scenario keys that switch a scenario to a pool of requests built here
WORKLOAD_KEYS: tuple[str, ...] = ("input_tokens", "dataset", "tokenizer", "prompt_pool", "replacement",
                                   "session")
#: the most synthetic prompt text a scenario's pool may hold, bytes (docs/workloads.md, "Length limits")
MAX_POOL_BYTES = 1 << 30
DEFAULT_POOL = 512


@dataclass(frozen=True, slots=True)
class Workload:
    """A scenario's request pool and how it is sampled.

    Attributes:
        entries: the distinct requests (bodies are encoded once per entry).
        replacement: the ``Picker`` mode.
        source: "synthetic", "dataset" or "prompts" (for the record).
        tokenizer: the exact tokenizer's name, or None (word-based count).
        note: a dataset's records as read, skipped, filtered and sampled (one
            line, said before the load), else None.
    """

    entries: tuple[PoolEntry, ...]
    replacement: bool
    source: str
    tokenizer: str | None
    note: str | None = None


def _first_of(places: Sequence[tuple[int, str]]) -> str:
    """``record K (id ...), line L`` of the first of ``places`` and how many more there are."""
    line, label = places[0]
    more = f" and {len(places) - 1:,} more" if len(places) > 1 else ""
    return (f"{label}, " if label else "") + f"line {line}" + more


def uses_workload(t: Table) -> bool:
    """True when a scenario table (``_toml.Table``) uses any workload key, a
    ``max_tokens`` distribution or ``max_tokens = "dataset"``."""
    v = t.data.get("max_tokens")
    return any(k in t.data for k in WORKLOAD_KEYS) or isinstance(v, Mapping) or v == "dataset"


def parse_workload(t: Table, base: Path, seed: int, index: int,
                   prompts: Sequence[Any] | None) -> Workload:
    """Read a scenario's workload keys and build its pool.

    Args:
        t: the ``[[scenario]]`` table (``_toml.Table``: errors carry file, line, key).
        base: the profile's folder (datasets and tokenizer files are relative to it).
        seed: the run seed; ``index``: the scenario's position (each scenario
            gets its own seeded random source).
        prompts: the scenario's plain prompts when it has no ``input_tokens``
            or ``dataset`` (already read), else None.

    Raises:
        ProfileError: any bad key, distribution, dataset or tokenizer, before any load.
    """
    if "input_tokens" in t.data and "dataset" in t.data:
        raise t.error("dataset", "expected input_tokens or dataset, not both")
    if prompts is not None and ("input_tokens" in t.data or "dataset" in t.data):
        key = "input_tokens" if "input_tokens" in t.data else "dataset"
        raise t.error(key, f"expected one prompt source: prompts / prompts_file or {key}, not both")
    tokenizer: Tokenizer | None = None
    spec = t.str("tokenizer", None, nonempty=True)
    if spec is not None:
        try:
            tokenizer = load_tokenizer(spec, base)
        except ValueError as exc:
            raise t.error("tokenizer", str(exc)) from None
    pool = t.int("prompt_pool", DEFAULT_POOL, min=1, max=100_000)
    # without replacement by default: each round of picks is the whole stratified
    # pool, so the lengths sent have the requested mean without sampling noise
    replacement = t.bool("replacement", False)
    raw_max = t.raw("max_tokens", 256)
    max_tokens: Dist | None = None
    if raw_max == "dataset":  # each record's reference reply length, as vLLM's ShareGPT benchmark
        if "dataset" not in t.data:
            raise t.error("max_tokens", 'max_tokens = "dataset" needs a dataset (it takes each '
                                        "record's reference reply length)")
    else:
        max_tokens = dist_from(raw_max, lambda r: t.error("max_tokens", r), limit=MAX_OUTPUT_TOKENS)
    rng = random.Random(f"hopbench-workload:{seed}:{index}")
    if t.has("input_tokens"):
        dist = dist_from(t.raw("input_tokens"), lambda r: t.error("input_tokens", r), limit=MAX_INPUT_TOKENS)
        # the pool is built at load: bound its memory too (4 bytes a token of synthetic prompt)
        pool_bytes = pool * dist.mean * 4
        if pool_bytes > MAX_POOL_BYTES:
            fit = max(1, int(MAX_POOL_BYTES // (dist.mean * 4)))
            raise t.error("prompt_pool" if t.has("prompt_pool") else "input_tokens",
                          f"a pool of {pool} prompts of {dist.mean:,.0f} tokens on average would hold about "
                          f"{pool_bytes / 2**20:,.0f} MiB of prompt text, more than hopbench's limit of "
                          f"{MAX_POOL_BYTES // 2**20:,} MiB (docs/workloads.md, \"Length limits\"): set "
                          f"prompt_pool = {fit} or less")
        entries = build_pool(rng, max_tokens=max_tokens, pool_size=pool, input_dist=dist,
                             tokenizer=tokenizer)
        return Workload(tuple(entries), replacement, "synthetic", spec)
    if t.has("dataset"):
        return _dataset_pool(t, base, rng, pool, max_tokens, tokenizer, replacement, spec)
    convs: list[tuple[Message, ...]] = []
    for p in prompts or ():
        if isinstance(p, Mapping):  # a prompts_file line {"messages": [...]}

            def bad(line: int, reason: str) -> ProfileError:
                return t.error("prompts_file", reason)

            convs.append(record_from_messages(p, 0, bad).messages)
        else:
            convs.append((Message("user", p),))
    entries = build_pool(rng, max_tokens=max_tokens, pool_size=pool, prompts=convs)
    return Workload(tuple(entries), replacement, "prompts", spec)


def _dataset_pool(t: Table, base: Path, rng: random.Random, pool: int, max_tokens: Dist | None,
                  tokenizer: Tokenizer | None, replacement: bool, spec: str | None) -> Workload:
    """A ``dataset`` scenario's pool: the dataset read, filtered, sampled and its records
    made entries, with the note that says what happened to them (``parse_workload``'s args).

    Raises:
        ProfileError: a bad ``dataset`` table, an unreadable or bad dataset (file and line),
        no record passing the filters, a record past hopbench's length limits.
    """
    dt = t.table("dataset")
    rel = dt.str("path", MISSING, nonempty=True)
    path = Path(rel) if Path(rel).is_absolute() else base / rel
    fmt = dt.str("format", "auto", choices=DATASET_FORMATS)
    sample = dt.int("sample", None, min=1)
    bounds = {k: dt.int(k, None, min=1) for k in
              ("min_input_tokens", "max_input_tokens", "min_output_tokens", "max_output_tokens")}
    for lo, hi in (("min_input_tokens", "max_input_tokens"), ("min_output_tokens", "max_output_tokens")):
        if bounds[lo] is not None and bounds[hi] is not None and bounds[lo] > bounds[hi]:
            raise dt.error(lo, f"expected {lo} <= {hi}, got {bounds[lo]} > {bounds[hi]}")
    dt.done()
    ds = DatasetSpec(path, fmt, sample, **bounds)
    where = dt.key_name()

    def fail(line: int | None, reason: str) -> ProfileError:
        return ProfileError(f"{reason} (dataset of {where})", path=path, line=line)

    try:  # a file that cannot be opened is the profile's error: its file, line and key
        check_regular(path)
    except OSError as exc:
        raise dt.error("path", f"cannot read the dataset {path}: {exc.strerror}") from None
    skipped: list[tuple[int, str]] = []
    non_text: list[tuple[int, str, str]] = []
    # a session of turns = "dataset" replays each record's user turns: ShareGPT records keep them all
    session = t.data.get("session")
    whole = isinstance(session, Mapping) and session.get("turns") == "dataset"
    records = read_dataset(path, fmt, fail, skipped, non_text, whole=whole)

    def fail_record(rec: Record, reason: str) -> ProfileError:
        return fail(rec.line, f"{rec.label or 'a record'}: {reason}")

    kept = filter_records(records, ds, tokenizer)
    filtered = len(kept)
    if not kept:
        raise dt.error(None, f"no record of {path} ({len(records)} read) passes the length filters")
    for rec, n in kept:  # docs/workloads.md, "Length limits"
        if n > MAX_INPUT_TOKENS:
            raise fail_record(rec, f"a prompt of {n:,} input tokens, above hopbench's limit of "
                                 f"{MAX_INPUT_TOKENS:,}: leave it out with the dataset's max_input_tokens")
    no_reply = 0
    if max_tokens is None:
        with_reply = [(rec, n) for rec, n in kept if rec.reply and rec.reply.strip()]
        no_reply, kept = len(kept) - len(with_reply), with_reply
        if not kept:
            raise t.error("max_tokens", f'max_tokens = "dataset": no record of {path} that passes '
                                        "the filters has a reference reply")
        for rec, _ in kept:  # each reply's length is sent as max_tokens
            r = estimate_tokens(rec.reply or "", tokenizer)
            if r > MAX_OUTPUT_TOKENS:
                raise fail_record(rec, f'max_tokens = "dataset": a reference reply of {r:,} tokens, above '
                                     f"hopbench's limit of {MAX_OUTPUT_TOKENS:,}: leave it out with the "
                                     "dataset's max_output_tokens")
    if sample is not None:
        if sample > len(kept):
            raise dt.error("sample", f"expected at most the {len(kept)} {plural(len(kept), 'record')} that pass the "
                                     f"filters, got {sample}")
        kept = [kept[i] for i in sorted(rng.sample(range(len(kept)), sample))]
    entries = build_pool(rng, max_tokens=max_tokens, pool_size=pool, records=kept,
                         tokenizer=tokenizer)
    read = len(records) + len(skipped)
    note = f"{path.name}: {read:,} record{'' if read == 1 else 's'}"
    if skipped:
        note += (f", {len(skipped):,} skipped (no user turn first: {_first_of(skipped)})")
    if non_text:  # images, audio...: hopbench sends text conversations
        kinds = ", ".join(sorted({k for _, _, ks in non_text for k in ks.split(", ")}))
        note += (f", {len(non_text):,} with content blocks sent as their text only ({kinds} left out: "
                 f"{_first_of([(line, label) for line, label, _ in non_text])})")
    note += f", {filtered:,} within the length filters" if filtered < len(records) else ""
    if no_reply:
        note += f", {no_reply:,} without a reference reply left out (max_tokens = \"dataset\" needs one)"
    note += f", {len(kept):,} used" if len(kept) < filtered else ""
    return Workload(tuple(entries), replacement, "dataset", spec, note)
