"""Trace replay: a JSONL request trace read, windowed, scheduled and turned into request bodies.

Role: ``[load] mode = "trace"`` (docs/workloads.md, "Trace replay"). A trace
holds one request per line: when it arrived (``timestamp_ms``), its input and
output lengths and, optionally, the prompt blocks it shares with other
requests (``hash_ids``, as the public Mooncake traces have them) and the
scenario that sends it. This module reads and checks the file (at profile
load: every problem is a ``ProfileError`` naming the file and line), gives the
schedule (``TraceSpec.arrivals``: offsets in ns from the run start), builds
each request's body (``TraceBodies``: block texts made and JSON-encoded once
per hash id, so requests that share a hash id share that block of prompt text
exactly and large bodies are joined from pre-encoded pieces, never
re-encoded), and says what cache hits the trace implies (``implied_hits``).

Invariants:
- Pure: no clock, no trio; the only I/O is reading the trace file.
- Everything random (which words a block holds, the scenario of a line
  without one) is seeded by the run seed: every worker builds the same text
  for a hash id, so a shared server cache sees the trace's sharing exactly.
- A prompt is the concatenation of its hash ids' blocks (``block_tokens``
  words of 4 characters each: one token each for the emulator and for common
  BPE vocabularies, ``_lengths.WORDS``), cut to ``input_tokens``; tokens past
  the last hash id are words unique to the request.
- Schedule offsets are integer ns, non-decreasing within a pass.
"""

from __future__ import annotations

import array
import bisect
import hashlib
import json
import random
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, overload

from ._errors import ProfileError
from ._lengths import MAX_INPUT_TOKENS, MAX_OUTPUT_TOKENS, WORDS
from ._textfile import check_regular, json_value, read_regular

__all__ = ["TraceEntry", "TraceSpec", "TraceBodies", "read_trace", "window", "implied_hits", "check_blocks",
           "trace_keys",
           "parse_trace",
           "DEFAULT_BLOCK_TOKENS", "MAX_REPLAY_S", "body_template"]

#: Mooncake's traces count hash ids in blocks of 512 tokens
DEFAULT_BLOCK_TOKENS = 512
_NS_PER_MS = 1_000_000
#: s, the longest replay of one pass of the window hopbench accepts (365 days): a longer
#: one is a typo (a tiny speedup, timestamps in us or ns read as ms) that would leave the
#: run idle, waiting for its next arrival, for ever
MAX_REPLAY_S = 365 * 86_400
#: JSON field aliases of the public Mooncake traces (``timestamp`` in ms, ``input_length``, ``output_length``)
_ALIASES = {"timestamp_ms": "timestamp", "input_tokens": "input_length", "output_tokens": "output_length"}


@dataclass(frozen=True, slots=True)
class TraceEntry:
    """One request of a trace.

    Attributes:
        t_ms: its arrival, ms of trace time (float: traces may hold fractions).
        input_tokens: prompt length, tokens (>= 1).
        output_tokens: the ``max_tokens`` to send (>= 1).
        hash_ids: the prefix blocks it is made of, in order (possibly empty).
        scenario: the scenario named on the line, or None.
        line: its 1-based line in the trace file.
    """

    t_ms: float
    input_tokens: int
    output_tokens: int
    hash_ids: tuple[int, ...]
    scenario: str | None
    line: int


def _int_field(obj: Mapping[str, Any], name: str, fail: Callable[[str], ProfileError],
               minimum: int, maximum: int) -> int:
    key = name if name in obj else _ALIASES.get(name, name)
    if key not in obj:
        raise fail(f'missing field "{name}"')
    v = obj[key]
    if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
        raise fail(f'"{key}": expected an integer >= {minimum}, got {json.dumps(v)[:40]}')
    if v > maximum:
        raise fail(f'"{key}": expected at most {maximum:,} tokens (hopbench\'s limit, docs/workloads.md), '
                   f"got {v:,}")
    return v


def read_trace(path: Path) -> list[TraceEntry]:
    """Read and check a JSONL trace.

    Each non-blank line is an object with ``timestamp_ms`` (a number >= 0),
    ``input_tokens`` (>= 1), ``output_tokens`` (>= 1), optional ``hash_ids``
    (an array of integers >= 0) and optional ``scenario`` (a string). The
    Mooncake names ``timestamp``, ``input_length``, ``output_length`` are
    accepted too. Timestamps may repeat but never go back.

    Returns:
        list of TraceEntry in file order, non-empty.

    Raises:
        ProfileError: a missing, unreadable, empty or non-UTF-8 file, a broken
        JSON line, a line that is not an object, a missing or wrong field, a
        timestamp earlier than the line before; the message names file:line.
    """
    try:
        raw = read_regular(path)
    except OSError as exc:
        raise ProfileError(f"cannot read the trace {path}: {exc.strerror}", path=path) from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        column = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
        raise ProfileError(f"the trace is not UTF-8 text (byte {column} of the line, {exc.start + 1} of the file)",
                           path=path, line=line) from None
    out: list[TraceEntry] = []
    last_t = -1.0
    last_line = 0
    for i, text_line in enumerate(text.split("\n"), start=1):  # not splitlines: see _dataset
        if not text_line.strip():
            continue

        def fail(reason: str, i: int = i) -> ProfileError:
            return ProfileError(f"trace line: {reason}", path=path, line=i)

        try:
            obj = json_value(text_line)
        except json.JSONDecodeError as exc:
            raise ProfileError(f"broken JSON line: {exc.msg} (column {exc.colno})", path=path,
                               line=i) from None
        if not isinstance(obj, dict):
            raise fail(f"expected a JSON object, got {type(obj).__name__}")
        for name, alias in _ALIASES.items():  # which one is meant? (one would be dropped unread)
            if name in obj and alias in obj:
                raise fail(f'both "{name}" and its Mooncake name "{alias}": keep one')
        tkey = "timestamp_ms" if "timestamp_ms" in obj else "timestamp"
        if tkey not in obj:
            raise fail('missing field "timestamp_ms"')
        t = obj[tkey]
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not t >= 0 or t == float("inf"):
            raise fail(f'"{tkey}": expected a number of ms >= 0, got {json.dumps(t)[:40]}')
        if t < last_t:
            raise fail(f'"{tkey}": timestamps out of order: {t:g} after {last_t:g} (line {last_line}); '
                       "sort the trace by time")
        inp = _int_field(obj, "input_tokens", fail, 1, MAX_INPUT_TOKENS)
        outp = _int_field(obj, "output_tokens", fail, 1, MAX_OUTPUT_TOKENS)
        hashes = obj.get("hash_ids", [])
        if not isinstance(hashes, list) or not all(
                isinstance(h, int) and not isinstance(h, bool) and h >= 0 for h in hashes):
            raise fail('"hash_ids": expected an array of integers >= 0')
        scenario = obj.get("scenario")
        if scenario is not None and (not isinstance(scenario, str) or not scenario):
            raise fail('"scenario": expected a scenario name (a non-empty string)')
        out.append(TraceEntry(float(t), inp, outp, tuple(hashes), scenario, i))
        last_t, last_line = float(t), i
    if not out:
        raise ProfileError(f"the trace {path} is empty (no request line)", path=path)
    return out


def check_blocks(entries: Sequence[TraceEntry], block_tokens: int, path: Path) -> None:
    """Check each entry's ``hash_ids`` against its input length.

    A Mooncake trace has ``len(hash_ids) == ceil(input_tokens / block_tokens)``:
    one id per block of the prompt, the last one possibly partial. Fewer ids
    are allowed (the prompt's remaining blocks are unique to the request:
    words no other request sends); more ids than blocks are refused (the
    trace was made with another block size, or its lengths are wrong).

    Raises:
        ProfileError: an entry with more hash ids than blocks (file:line,
        naming both numbers and the ``block_tokens`` key).
    """
    for e in entries:
        blocks = -(-e.input_tokens // block_tokens)
        if len(e.hash_ids) > blocks:
            raise ProfileError(
                f'trace line: "hash_ids" has {len(e.hash_ids)} ids, more than the {blocks} block(s) of '
                f'"input_tokens" = {e.input_tokens} with load.block_tokens = {block_tokens} '
                f"(ceil(input_tokens / block_tokens)); set block_tokens to the trace's block size or "
                "fix the line", path=path, line=e.line)


def window(entries: Sequence[TraceEntry], start_ms: float | None,
           end_ms: float | None) -> tuple[list[TraceEntry], float, float]:
    """The entries of ``[start_ms, end_ms)`` of trace time, with the window's start and period.

    Args:
        entries: the whole trace (time order).
        start_ms: window start (trace time); None: the first timestamp.
        end_ms: window end (exclusive); None: after the last entry.

    Returns:
        (entries in the window, start ms, period ms): the period, used by
        ``loop``, is ``end_ms - start_ms`` when an end is given, else the span
        from the start to the last entry plus the mean gap between entries
        (so the seam between two passes is a typical gap), at least 1 ms.
        The entry list may be empty (the caller reports it).
    """
    start = entries[0].t_ms if start_ms is None else start_ms
    kept = [e for e in entries if e.t_ms >= start and (end_ms is None or e.t_ms < end_ms)]
    if end_ms is not None:
        period = end_ms - start
    elif len(kept) > 1:
        span = kept[-1].t_ms - start
        period = span + (kept[-1].t_ms - kept[0].t_ms) / (len(kept) - 1)
    else:
        period = 1000.0
    return kept, start, max(period, 1.0)


def implied_hits(entries: Sequence[TraceEntry], models: Sequence[str], block_tokens: int,
                 ) -> tuple[tuple[int, int], ...]:
    """The prompt-cache hits a trace implies, per entry: (first pass, later passes), tokens.

    A server cache with blocks of ``block_tokens`` tokens and room for every
    block (vLLM's automatic prefix caching, the emulator's prefix cache)
    serves a request the leading blocks of its prompt that an earlier request
    (of the same model) already sent, as full blocks, after the same prefix.
    In a looped replay every full hash-id block was sent in the first pass, so
    a later pass hits all of them.

    Args:
        entries: the replayed entries in schedule order.
        models: the model of each entry (its scenario's).
        block_tokens: tokens per hash id (the trace's block size).

    Returns:
        tuple of (hit tokens in the first pass, hit tokens in later passes), one per entry.
    """
    # a trie of the prefixes sent: (model, parent node, hash id) -> node; memory is
    # one entry per distinct prefix block, not per prefix (which would be quadratic)
    nodes: dict[tuple[str, int, int], int] = {}
    out: list[tuple[int, int]] = []
    for e, model in zip(entries, models):
        full = min(len(e.hash_ids), e.input_tokens // block_tokens)
        hits = 0
        missed = False
        node = 0
        for k in range(full):
            key = (model, node, e.hash_ids[k])
            nxt = nodes.get(key)
            if nxt is not None:
                if not missed:
                    hits += 1
            else:
                missed = True
                nxt = nodes[key] = len(nodes) + 1
            node = nxt
        out.append((hits * block_tokens, full * block_tokens))
    return tuple(out)


@dataclass(frozen=True, slots=True)
class TraceSpec:
    """A validated trace replay (``[load]`` of mode "trace").

    Attributes:
        path: the trace file.
        entries: the entries of the window, in time order (non-empty).
        scenario_index: per entry, the index of the scenario that sends it.
        start_ms: the window's start, ms of trace time.
        period_ms: the window's length for ``loop`` (see ``window``).
        speedup: trace time / replay time (2: twice as fast).
        loop: replay the window again and again (until the run's duration
            or request count ends it).
        block_tokens: tokens per hash id.
        implied: per entry, the cache hits the trace implies (``implied_hits``).
    """

    path: Path
    entries: tuple[TraceEntry, ...]
    scenario_index: tuple[int, ...]
    start_ms: float
    period_ms: float
    speedup: float
    loop: bool
    block_tokens: int
    implied: tuple[tuple[int, int], ...]

    @property
    def rate_rps(self) -> float:
        """The window's mean request rate at this speedup, requests per second.

        Meaningless for a replay of :attr:`one_instant` (its period is made up:
        1 ms, or 1 s for a single entry); the reports show no rate for one.
        """
        return len(self.entries) / (self.period_ms / 1000.0) * self.speedup

    @property
    def one_instant(self) -> bool:
        """The replay is one instant: not looped, and every entry of the window
        at one timestamp (a single entry, or a burst). Such a schedule has no
        rate: requests/s over the gap after the instant (a made-up mean gap: 0.5
        ms for two entries) would read as thousands per second
        (docs/workloads.md, "Trace replay"). A looped one repeats every
        ``period_ms``: that is its rate."""
        return not self.loop and self.entries[0].t_ms == self.entries[-1].t_ms

    def offset_ns(self, i: int, rep: int) -> int:
        """Entry ``i``'s scheduled time in pass ``rep`` (0-based), ns from the replay's start."""
        t_ms = self.entries[i].t_ms - self.start_ms + rep * self.period_ms
        return int(round(t_ms * _NS_PER_MS / self.speedup))

    def arrivals(self, part: int = 0, parts: int = 1) -> Iterator[tuple[int, int, int]]:
        """The schedule: (offset ns, entry index, pass) in time order.

        Args:
            part, parts: this worker's share: the entries whose index is
                ``part`` modulo ``parts`` (the union over the parts is the
                whole trace; each keeps its own times).

        Yields:
            Forever when ``loop``, else each entry of the part once.
        """
        n = len(self.entries)
        rep = 0
        while True:
            for i in range(part, n, parts):
                yield self.offset_ns(i, rep), i, rep
            if not self.loop:
                return
            rep += 1

    def scheduled_between(self, a_ns: int, b_ns: int, part: int = 0, parts: int = 1) -> int:
        """How many requests are scheduled in ``[a_ns, b_ns)`` from the replay's
        start, counting every pass: of the whole trace, or of one worker's
        share (``part`` of ``parts``, as ``arrivals``)."""
        if b_ns <= a_ns:
            return 0
        count = 0
        period_ns = self.period_ms * _NS_PER_MS / self.speedup
        # offsets are non-decreasing within a pass, and a later pass is the first one
        # shifted by whole periods (to within 1 ns of rounding): one bisect per pass
        # that may straddle a_ns or b_ns; the passes between lie wholly inside and
        # count len(base) each, so a long looped window of a short period costs
        # O(1) passes, not one per pass (a 1 ms period over an hour: 3.6 M bisects)
        # the first pass's offsets, computed as the bisects read them: the runner asks this as
        # its clock starts (spare connections), and a list of a 500,000-line trace's offsets
        # took 0.3-0.6 s there, every arrival of the first second that late
        base = _Offsets(self, range(part, len(self.entries), parts))
        if not base:
            return 0
        if not self.loop:
            return bisect.bisect_left(base, b_ns) - bisect.bisect_left(base, a_ns)
        margin = 2 + int(2 / period_ns)  # passes of slack for the 1 ns of rounding per pass
        first = max(0, int((a_ns - base[-1]) // period_ns) - margin)  # earlier passes end before a_ns
        last = int((b_ns - base[0]) // period_ns) + margin  # later passes start at or after b_ns
        inner_lo = max(first, int((a_ns - base[0]) // period_ns) + margin)
        inner_hi = min(last, int((b_ns - base[-1]) // period_ns) - margin)  # exclusive
        if inner_hi > inner_lo:  # wholly inside [a_ns, b_ns)
            count += (inner_hi - inner_lo) * len(base)
            straddle = [*range(first, inner_lo), *range(inner_hi, last + 1)]
        else:
            straddle = list(range(first, last + 1))
        for rep in straddle:
            shift = int(round(rep * period_ns))
            count += bisect.bisect_left(base, b_ns - shift) - bisect.bisect_left(base, a_ns - shift)
        return count


class _Offsets(Sequence[int]):
    """The first pass's offsets (ns) of some entries, computed when read (a
    sequence for ``bisect``: non-decreasing, as the trace's times are)."""

    __slots__ = ("_spec", "_index")

    def __init__(self, spec: TraceSpec, index: range) -> None:
        self._spec, self._index = spec, index

    def __len__(self) -> int:
        return len(self._index)

    @overload
    def __getitem__(self, k: int) -> int: ...
    @overload
    def __getitem__(self, k: slice) -> Sequence[int]: ...

    def __getitem__(self, k: int | slice) -> int | Sequence[int]:
        if isinstance(k, slice):
            return [self._spec.offset_ns(i, 0) for i in self._index[k]]
        return self._spec.offset_ns(self._index[k], 0)


#: a replay (one pass of the window) longer than this gets a warning before the load
LONG_REPLAY_S = 24 * 3600.0


def _span(seconds: float) -> str:
    """A replay's length for a person: s, min, h or days."""
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.1f} min"
    if seconds < 3 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.3g} days"


def replay_plan(spec: TraceSpec, duration_ns: int | None, requests: int | None,
                ) -> tuple[str, str | None]:
    """What a trace replay will do, said before the load: (plan line, warning or None).

    The line gives the window's requests, one pass's replay time at
    ``spec.speedup`` and the mean rate (a replay of :attr:`TraceSpec.one_instant`
    has none: the line says the requests are due at one instant). The warning: one pass takes longer than
    ``LONG_REPLAY_S`` with nothing else to end it (a speedup far below 1 stretches
    the trace: ``speedup = 1e-6`` makes a 10 s trace 116 days), or
    ``run.duration_s`` ends the replay before the window's last request.

    Args:
        spec: the replay.
        duration_ns: ``run.duration_s`` (ns) or None.
        requests: ``run.requests`` or None.
    """
    n = len(spec.entries)
    last_s = spec.offset_ns(n - 1, 0) / 1e9  # the window's last request, from the replay's start
    pass_s = spec.period_ms / 1000.0 / spec.speedup if spec.loop else last_s
    if spec.one_instant:  # no rate (TraceSpec.one_instant): say what it is instead
        line = (f"trace replay: {n} request{'s' if n != 1 else ''} from {spec.path.name}, "
                + ("all due at one instant (no rate)" if n > 1 else "due at the replay's start (no rate)"))
    else:
        line = (f"trace replay: {n} request{'s' if n != 1 else ''} from {spec.path.name}, "
                f"{_span(pass_s)} a pass at speedup {spec.speedup:g} (mean {spec.rate_rps:.3g} requests/s)"
                + (", looped" if spec.loop else ""))
    warning = None
    if duration_ns is None and requests is None and pass_s > LONG_REPLAY_S:
        warning = (f"the trace's window takes {_span(pass_s)} to replay at load.speedup = {spec.speedup:g} "
                   "(trace time / replay time: below 1 replays slower than recorded); raise the "
                   "speedup or set run.duration_s")
    elif duration_ns is not None and not spec.loop and last_s * 1e9 >= duration_ns:
        sent = spec.scheduled_between(0, duration_ns)
        warning = (f"run.duration_s = {duration_ns / 1e9:g} ends the replay after {sent} of its {n} "
                   f"requests (the window takes {_span(last_s)} at speedup {spec.speedup:g})")
    return line, warning


_PROMPT_MARK = "\u0000hopbench-prompt\u0000"


def body_template(encode: Callable[[str], bytes]) -> tuple[bytes, bytes]:
    """Split an encoded body around its prompt: (bytes before, bytes after).

    Args:
        encode: encodes the request with the given prompt text (the caller
            binds protocol, model, max_tokens, extra).

    Returns:
        (head, tail): ``head + json_string_body(prompt) + tail`` is the body
        for any prompt whose JSON string needs no escaping (the synthetic words).
    """
    data = encode(_PROMPT_MARK)
    mark = json.dumps(_PROMPT_MARK)[1:-1].encode("ascii")
    head, sep, tail = data.partition(mark)
    if not sep:  # pragma: no cover - encode() must put the prompt in the body
        raise ValueError("the prompt placeholder is not in the encoded body")
    return head, tail


class TraceBodies:
    """Builds the prompt bytes of trace entries from shared, pre-encoded blocks.

    Block texts are made once per hash id (seeded by the run seed and the
    id) and kept as bytes when more than one request uses them (a block sent
    once is made when it is sent and not kept; made again, it is the same); a request's prompt is the join of its blocks'
    bytes (the last one cut to the input length) and of words unique to it.
    The words need no JSON escaping, so the bytes go into the body as they are.

    Args:
        spec: the trace.
        seed: the run seed.
    """

    __slots__ = ("spec", "seed", "_blocks", "_shared")

    def __init__(self, spec: TraceSpec, seed: int) -> None:
        self.spec = spec
        self.seed = seed
        self._blocks: dict[int, bytes] = {}
        # only blocks that more than one request sends are kept (a long trace's
        # one-off blocks would otherwise hold block_tokens x 4 bytes each forever)
        uses: dict[int, int] = {}
        for e in spec.entries:
            for h in e.hash_ids:
                uses[h] = uses.get(h, 0) + 1
        self._shared = {h for h, n in uses.items() if n > 1}

    def _block(self, h: int) -> bytes:
        b = self._blocks.get(h)
        if b is None:
            # seeded by the id alone: the same text whenever (and in whichever worker) it is made
            b = _words(f"hopbench-trace-block:{self.seed}:{h}", self.spec.block_tokens)
            if h in self._shared:
                self._blocks[h] = b
        return b

    def prompt(self, i: int, rep: int = 0) -> bytes:
        """Entry ``i``'s prompt text as UTF-8 (ASCII) bytes: 4 characters per token.

        ``rep`` (the pass) changes only the words past the hash-id blocks, so
        those stay unique to each request also when a trace is looped.
        """
        e = self.spec.entries[i]
        bt = self.spec.block_tokens
        parts: list[bytes] = []
        left = e.input_tokens
        for h in e.hash_ids:
            if left <= 0:
                break
            block = self._block(h)
            take = min(left, bt)
            parts.append(block if take == bt else block[: 4 * take])
            left -= take
        if left > 0:
            parts.append(_words(f"hopbench-trace-tail:{self.seed}:{i}:{rep}", left))
        return b"".join(parts)


_WORD_BYTES: tuple[bytes, ...] = tuple(w.encode("ascii") for w in WORDS)
_BIG_ENDIAN = sys.byteorder == "big"


def _words(key: str, n: int) -> bytes:
    """``n`` words of ``_lengths.WORDS`` (4 ASCII bytes each) drawn from ``key`` alone:
    the same ``key`` always gives the same text (any process, any machine).

    The word indices are the 16-bit little-endian values of SHAKE-128's output for ``key``,
    modulo the vocabulary (a skew of under 0.2 % between words, which only the
    text's look depends on): one C call for the randomness, ~4 us for a
    32-token block where a seeded ``random.Random`` took ~11 us (its seeding
    from a string hashes it with SHA-512, then fills 624 words of state).
    """
    if n <= 0:
        return b""
    words, size = _WORD_BYTES, len(_WORD_BYTES)
    raw = hashlib.shake_128(key.encode("utf-8")).digest(2 * n)
    if _BIG_ENDIAN:  # little-endian values on every machine (workers may differ)
        swapped = array.array("H", raw)
        swapped.byteswap()
        raw = swapped.tobytes()
    draw = memoryview(raw).cast("H")
    return b"".join([words[x % size] for x in draw])


def trace_keys(t: Any) -> tuple[str, float, bool, float | None, float | None, int]:
    """Read and check the trace keys of a ``[load]`` table (not the file).

    Returns:
        (trace path as written, speedup, loop, start_ms, end_ms, block_tokens).

    Raises:
        ProfileError: a missing ``trace``, a bad value, ``end_ms <= start_ms``.
    """
    rel = t.str("trace", None, nonempty=True)
    if rel is None:
        raise t.error("trace", 'expected the trace file (load.trace = "trace.jsonl") with load.mode = "trace"')
    speedup = float(t.number("speedup", 1.0, positive=True))
    loop = bool(t.bool("loop", False))
    start_ms = t.number("start_ms", None, min=0)
    end_ms = t.number("end_ms", None, min=0)
    if start_ms is not None and end_ms is not None and end_ms <= start_ms:
        raise t.error("end_ms", f"expected end_ms > start_ms, got {end_ms:g} <= {start_ms:g}")
    block_tokens = t.int("block_tokens", DEFAULT_BLOCK_TOKENS, min=1, max=1_000_000)
    return rel, speedup, loop, start_ms, end_ms, block_tokens


def parse_trace(t: Any, base: Path, scenarios: Sequence[tuple[str, str, bool, float]], seed: int) -> TraceSpec:
    """Read the trace keys of a ``[load]`` table and the trace file.

    Keys: ``trace`` (path, relative to the profile), ``speedup`` (> 0, default
    1), ``loop`` (default false), ``start_ms`` / ``end_ms`` (the window, trace
    time), ``block_tokens`` (tokens per hash id, default 512 as Mooncake's).

    Args:
        t: the ``[load]`` table (``_toml.Table``: errors carry file, line and key).
        base: the profile's folder.
        scenarios: (name, model, uses workload keys, weight) of each scenario, in order.
        seed: the run seed (a line that names no scenario gets one drawn by
            weight, seeded: the same in every worker).

    Raises:
        ProfileError: a bad key, an unreadable or bad trace (file:line), a line
        naming an unknown scenario, a scenario with its own workload keys, an
        empty window, a pass of the window that would take more than
        ``MAX_REPLAY_S`` to replay.
    """
    rel, speedup, loop, start_ms, end_ms, block_tokens = trace_keys(t)
    path = Path(rel) if Path(rel).is_absolute() else base / rel
    for name, _, workload, _ in scenarios:
        if workload:
            raise t.error("mode", f"scenario {name!r} has its own lengths, dataset or session (input_tokens, "
                                  "dataset, a max_tokens distribution, session): with load.mode = \"trace\" the "
                                  "trace gives every request's lengths; remove them")
    try:  # a file that cannot be opened is the profile's error: its file, line and key
        check_regular(path)
    except OSError as exc:
        raise t.error("trace", f"cannot read the trace {path}: {exc.strerror}") from None
    entries = read_trace(path)
    check_blocks(entries, block_tokens, path)
    kept, start, period = window(entries, start_ms, end_ms)
    if not kept:
        raise t.error("start_ms" if start_ms is not None else "end_ms",
                      f"no request of {path} ({len(entries)} lines, {entries[0].t_ms:g} to "
                      f"{entries[-1].t_ms:g} ms) falls in the window")
    span_ms = max(kept[-1].t_ms - start, period if loop else 0.0)
    if span_ms / 1000.0 / speedup > MAX_REPLAY_S:
        raise t.error("speedup", f"replaying {span_ms:,.6g} ms of trace (lines {kept[0].line} to {kept[-1].line} "
                                 f"of {path}) at speedup {speedup:g} takes {span_ms / 1000.0 / speedup / 86_400:,.3g} "
                                 f"days, more than hopbench's limit of {MAX_REPLAY_S // 86_400} days: raise the "
                                 "speedup, or check that the timestamps are ms")
    names = {name: i for i, (name, _, _, _) in enumerate(scenarios)}
    rng = random.Random(f"hopbench-trace-scenario:{seed}")
    weights = [w for _, _, _, w in scenarios]
    index: list[int] = []
    for e in kept:
        if e.scenario is None:
            index.append(rng.choices(range(len(scenarios)), weights)[0] if len(scenarios) > 1 else 0)
        elif e.scenario in names:
            index.append(names[e.scenario])
        else:
            raise ProfileError(f'trace line: "scenario": no scenario named {e.scenario!r} in the profile '
                               f"(scenarios: {', '.join(sorted(names))})", path=path, line=e.line)
    models = [scenarios[i][1] for i in index]
    return TraceSpec(path, tuple(kept), tuple(index), start, period, speedup, loop, block_tokens,
                     implied_hits(kept, models, block_tokens))
