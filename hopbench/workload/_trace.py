"""Trace replay: a JSONL request trace read, windowed, scheduled and turned into request bodies.

Role: ``[load] mode = "trace"`` (docs/workloads.md, "Trace replay"). A trace
holds one request per line: when it arrived (``timestamp_ms``), its input and
output lengths and, optionally, the prompt blocks it shares with other
requests (``hash_ids``, as the public Mooncake traces have them) and the
scenario that sends it; Azure's public LLM inference traces (CSV:
``TIMESTAMP,ContextTokens,GeneratedTokens``) are read too (``_read_azure``). This module reads and checks the file (at profile
load: every problem is a ``ProfileError`` naming the file and line), gives the
schedule (``TraceSpec.arrivals``: offsets in ns from the run start), builds
each request's body (``TraceBodies``: block texts made and JSON-encoded once
per hash id, so requests that share a hash id share that block of prompt text
exactly and large bodies are joined from pre-encoded pieces, never
re-encoded), and says what cache hits the trace implies (``implied_hits``).

A trace of millions of lines is held as columns of compact arrays
(``TraceEntries``: ~36 bytes a line plus 4 a hash id, no object per line),
read 1 MiB at a time, each line parsed (orjson when installed) and checked
on the spot, and checked again by the reference checks (``_check_line``)
when anything about it is unusual; the checks over all lines (hash-id counts,
scenarios) run as C loops over the columns; the cache hits a trace implies
are worked out as the runner reads them (``_Implied``). Measured with
benchmarks/bench_trace_load.py.

Invariants:
- Pure: no clock, no trio; the only I/O is reading the trace file.
- Everything random (which words a block holds, the scenario of a line
  without one) is seeded by the run seed: every worker builds the same text
  for a hash id, so a shared server cache sees the trace's sharing exactly.
- A prompt is the concatenation of its hash ids' blocks (``block_tokens``
  words of 4 characters each: one token each for the emulator and for common
  BPE vocabularies, ``_lengths.WORDS``), cut to ``input_tokens``; tokens past
  the last hash id are words unique to the request.
- Schedule offsets are integer ns, non-decreasing within a pass; entries of one
  timestamp are scheduled in file order.
- A length of 0 (real traces hold them) is read as 1 and counted, never
  refused and never dropped: the row is an arrival (``TraceEntries.zero_rows``).
- A line is accepted with exactly the values, and refused with exactly the
  message, that ``_check_line`` (the standard library's parse, then each
  check in a fixed order) gives it; a file that is not UTF-8 anywhere is
  refused as such, whatever else is wrong with it.
"""

from __future__ import annotations

import array
import bisect
import collections
import datetime
import gzip
import hashlib
import itertools
import json
import operator
import random
import re
import sys
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, overload

from .._errors import ProfileError
from .._units import NS_PER_MS
from ._lengths import MAX_INPUT_TOKENS, MAX_OUTPUT_TOKENS, WORDS
from .._textfile import GZIP_MAGIC, binary_kind, check_regular, gunzip, json_value

try:  # optional (hopbench[fast]): parses a trace line ~4x faster (the whole load: ~1.9x)
    import orjson as _orjson

    _fast_loads: Callable[[str], Any] | None = _orjson.loads
except ImportError:  # pragma: no cover - read_trace then parses every line with the standard library
    _fast_loads = None

__all__ = ["TraceEntry", "TraceEntries", "TraceSpec", "TraceBodies", "read_trace", "window", "implied_hits",
           "check_blocks",
           "trace_keys",
           "parse_trace",
           "DEFAULT_BLOCK_TOKENS", "MAX_REPLAY_S", "body_template"]

#: Mooncake's traces count hash ids in blocks of 512 tokens
DEFAULT_BLOCK_TOKENS = 512
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
        input_tokens: prompt length, tokens (>= 1: a line's 0 is read as 1, ``zero_rows``).
        output_tokens: the ``max_tokens`` to send (>= 1: a line's 0 is read as 1).
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


class TraceEntries(Sequence[TraceEntry]):
    """The entries of a trace (or of a window of it), stored column-wise in compact arrays.

    A 500,000-line trace held as ``TraceEntry`` objects took ~870 MB with ~8.5
    hash ids a line (an object, a tuple and an int object per hash id per line;
    benchmarks/bench_trace_load.py); here a line costs 36 bytes plus 4 bytes per
    hash id (8 when an id is 2**32 or more; a Python int per id only for ids of
    2**64 or more): ~35 MB. Indexing makes a ``TraceEntry`` when asked
    (equal to the one the line describes); the hot readers (the schedule, the
    body builder, the implied cache hits) read the columns with the accessors
    below instead. Slicing with step 1 gives a view sharing the arrays (a window).

    Columns: ``t_ms`` (float64, ms of trace time), input and output tokens
    (int32), the line (int64), each line's hash ids (one flat array and the
    offset of each line's first id) and its scenario (an index into the names
    seen in the trace, -1 for none). Beside them, the lines whose input or
    output length was 0 in the file (stored as 1: ``zero_rows``), in file
    order, with which of the two was 0 (1 input, 2 output, 3 both).
    """

    __slots__ = ("_t", "_inp", "_out", "_line", "_hoff", "_hashes", "_sc", "_names", "_lo", "_n",
                 "_zlines", "_zwhich")

    def __init__(self, t: array.array[float], inp: array.array[int], out: array.array[int],
                 line: array.array[int], hoff: array.array[int], hashes: array.array[int] | list[int],
                 sc: array.array[int], names: list[str], lo: int = 0, n: int | None = None,
                 zero_lines: array.array[int] | None = None, zero_which: array.array[int] | None = None) -> None:
        self._t, self._inp, self._out, self._line = t, inp, out, line
        self._hoff, self._hashes, self._sc, self._names = hoff, hashes, sc, names
        self._lo = lo
        self._n = len(t) - lo if n is None else n
        self._zlines: array.array[int] = array.array("q") if zero_lines is None else zero_lines
        self._zwhich: array.array[int] = array.array("b") if zero_which is None else zero_which

    def __len__(self) -> int:
        return self._n

    def _index(self, k: int) -> int:
        if k < 0:
            k += self._n
        if not 0 <= k < self._n:
            raise IndexError("trace entry index out of range")
        return self._lo + k

    @overload
    def __getitem__(self, k: int) -> TraceEntry: ...
    @overload
    def __getitem__(self, k: slice) -> Sequence[TraceEntry]: ...

    def __getitem__(self, k: int | slice) -> TraceEntry | Sequence[TraceEntry]:
        if isinstance(k, slice):
            lo, hi, step = k.indices(self._n)
            return self.view(lo, hi) if step == 1 else [self[j] for j in range(lo, hi, step)]
        j = self._index(k)
        s = self._sc[j]
        return TraceEntry(self._t[j], self._inp[j], self._out[j], tuple(self._hashes[self._hoff[j]:self._hoff[j + 1]]),
                          None if s < 0 else self._names[s], self._line[j])

    def __iter__(self) -> Iterator[TraceEntry]:
        for k in range(self._n):
            yield self[k]

    def view(self, lo: int, hi: int) -> TraceEntries:
        """Entries ``lo`` to ``hi`` (exclusive; clamped to this view), sharing the arrays."""
        lo = min(max(lo, 0), self._n)
        hi = min(max(hi, lo), self._n)
        return TraceEntries(self._t, self._inp, self._out, self._line, self._hoff, self._hashes, self._sc,
                            self._names, self._lo + lo, hi - lo, self._zlines, self._zwhich)

    def zero_rows(self) -> tuple[int, int, int, int | None]:
        """The lines of this view whose input or output length was 0 in the file (each
        read as 1: a 0-token row is still an arrival; docs/workloads.md, "Trace replay").

        Returns:
            (rows, rows with 0 input tokens, rows with 0 output tokens, the first such
            row's 1-based line or None): a row with both at 0 counts in both.
        """
        if not self._zlines or not self._n:
            return 0, 0, 0, None
        lines = self._line
        lo = bisect.bisect_left(self._zlines, lines[self._lo])
        hi = bisect.bisect_right(self._zlines, lines[self._lo + self._n - 1])
        which = self._zwhich[lo:hi]
        return (hi - lo, sum(w & 1 for w in which), sum(w >> 1 for w in which),
                self._zlines[lo] if hi > lo else None)

    def t_ms(self, k: int) -> float:
        """Entry ``k``'s arrival, ms of trace time."""
        return self._t[self._index(k)]

    def input_tokens(self, k: int) -> int:
        """Entry ``k``'s prompt length, tokens."""
        return self._inp[self._index(k)]

    def hash_ids(self, k: int) -> Sequence[int]:
        """Entry ``k``'s hash ids, in order (a copy: an array, or a list for ids of 2**64 or more)."""
        j = self._index(k)
        return self._hashes[self._hoff[j]:self._hoff[j + 1]]

    def line(self, k: int) -> int:
        """Entry ``k``'s 1-based line in the trace file."""
        return self._line[self._index(k)]

    def bisect_t(self, t_ms: float) -> int:
        """The first entry whose time is ``>= t_ms`` (``len(self)`` if none): the times never go back."""
        return bisect.bisect_left(self._t, t_ms, self._lo, self._lo + self._n) - self._lo

    def ids_column(self) -> Sequence[int]:
        """Every line's hash ids in one sequence (of the whole trace: ``columns``' offsets
        index it), not a copy: not to be changed."""
        return self._hashes

    @classmethod
    def of(cls, entries: Sequence[TraceEntry]) -> TraceEntries:
        """``entries`` as columns (for the functions that take any sequence of entries)."""
        if isinstance(entries, TraceEntries):
            return entries
        names = list(dict.fromkeys(e.scenario for e in entries if e.scenario is not None))
        index = {name: k for k, name in enumerate(names)}
        return cls(array.array("d", [e.t_ms for e in entries]), array.array("i", [e.input_tokens for e in entries]),
                   array.array("i", [e.output_tokens for e in entries]), array.array("q", [e.line for e in entries]),
                   array.array("q", itertools.accumulate((len(e.hash_ids) for e in entries), initial=0)),
                   [h for e in entries for h in e.hash_ids],
                   array.array("i", [-1 if e.scenario is None else index[e.scenario] for e in entries]), names)

    def columns(self) -> tuple[Sequence[int], Sequence[int], Sequence[int], Sequence[int], list[str]]:
        """This view's input tokens, hash-id offsets (``len(self) + 1`` of them, into the flat
        ids), lines and scenario indices (-1: none), and the scenario names they index:
        read-only views of the arrays (no copy)."""
        lo, hi = self._lo, self._lo + self._n
        return (memoryview(self._inp)[lo:hi].toreadonly(), memoryview(self._hoff)[lo:hi + 1].toreadonly(),
                memoryview(self._line)[lo:hi].toreadonly(), memoryview(self._sc)[lo:hi].toreadonly(), self._names)


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


#: said of a line that is not JSON but holds commas: a CSV trace (docs/workloads.md, "Trace replay")
_CSV = ("; a trace is one JSON object per line, or a CSV file whose first line is Azure's header "
        "TIMESTAMP,ContextTokens,GeneratedTokens: convert it to lines of timestamp_ms, input_tokens, "
        "output_tokens")


#: said of a line that opens a JSON array: a trace written as one array (json.dump of a list)
_ARRAY = "; a trace is one JSON object per line (JSONL), not a JSON array: write each request on its own line"


def _check_line(text_line: str, i: int, path: Path, last_t: float, last_line: int,
                ) -> tuple[int | float, int, int, list[int], str | None]:
    """Every check of one trace line, on the standard library's parse: the line's values
    (lengths as written: 0 included), or the ProfileError that names what is wrong (the
    first problem, in a fixed order).

    The reference for ``read_trace``'s fast path: a line that path does not take
    whole comes here, so every message and every accepted value is this code's.
    """
    def fail(reason: str) -> ProfileError:
        return ProfileError(f"trace line: {reason}", path=path, line=i)

    try:
        obj = json_value(text_line)
    except json.JSONDecodeError as exc:
        csv = "," in text_line and not text_line.lstrip().startswith(("{", "["))
        array = text_line.lstrip().startswith("[")
        raise ProfileError(f"broken JSON line: {exc.msg} (column {exc.colno})" + (_CSV if csv else "")
                           + (_ARRAY if array else ""), path=path, line=i) from None
    if not isinstance(obj, dict):
        raise fail(f"expected a JSON object, got {type(obj).__name__}" + (_ARRAY if isinstance(obj, list) else ""))
    for name, alias in _ALIASES.items():  # which one is meant? (one would be dropped unread)
        if name in obj and alias in obj:
            raise fail(f'both "{name}" and its Mooncake name "{alias}": keep one')
    tkey = "timestamp_ms" if "timestamp_ms" in obj else "timestamp"
    if tkey not in obj:
        raise fail('missing field "timestamp_ms"')
    t = obj[tkey]
    if isinstance(t, bool) or not isinstance(t, (int, float)) or not t >= 0 or t == float("inf"):
        raise fail(f'"{tkey}": expected a number of ms >= 0, got {json.dumps(t)[:40]}')
    if t >= MAX_TIMESTAMP_MS:  # (an int past a float's range raised OverflowError further on)
        raise fail(f'"{tkey}": expected ms under {MAX_TIMESTAMP_MS:.3g} (292 years: its offsets are '
                   f'int64 ns; a timestamp in us or ns?), got {str(t)[:40]}')
    if t < last_t:
        raise fail(f'"{tkey}": timestamps out of order: {t:g} after {last_t:g} (line {last_line}); '
                   "sort the trace by time")
    # 0 is a length real traces hold (a request cut off or refused before it generated):
    # the caller reads it as 1 and counts it (TraceEntries.zero_rows)
    inp = _int_field(obj, "input_tokens", fail, 0, MAX_INPUT_TOKENS)
    outp = _int_field(obj, "output_tokens", fail, 0, MAX_OUTPUT_TOKENS)
    hashes = obj.get("hash_ids", [])
    if not isinstance(hashes, list) or not all(
            isinstance(h, int) and not isinstance(h, bool) and h >= 0 for h in hashes):
        raise fail('"hash_ids": expected an array of integers >= 0')
    scenario = obj.get("scenario")
    if scenario is not None and (not isinstance(scenario, str) or not scenario):
        raise fail('"scenario": expected a scenario name (a non-empty string)')
    return t, inp, outp, hashes, scenario


def _not_utf8(path: Path) -> ProfileError | None:
    """The error for a trace that is not UTF-8 (line, byte of the line and of the file), or
    None when it is. Reads the whole file: only on the way to an error."""
    raw = Path(path).read_bytes()
    packed = " (decompressed)" if raw.startswith(GZIP_MAGIC) else ""
    raw = gunzip(raw)
    try:
        raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        column = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
        kind = binary_kind(raw)
        return ProfileError(f"the trace is not UTF-8 text (byte {column} of the line, {exc.start + 1} of the "
                            f"file{packed})" + (f": it is {kind}; hopbench reads JSON lines or Azure's CSV"
                                                if kind else ""), path=path, line=line)
    return None


class _Reader(Protocol):
    """What the trace reader reads from: a file opened "rb", or a gzip file."""

    def read(self, size: int, /) -> bytes: ...


def _blocks(f: _Reader) -> Iterator[tuple[bytes, bool]]:
    """The file's bytes in blocks of whole lines (each ends with ``\\n`` but the last,
    which is the file's last line when it has no ``\\n``): (block, is it the last)."""
    parts: list[bytes] = []
    while True:
        chunk = f.read(_CHUNK_BYTES)
        if not chunk:
            rest = b"".join(parts)
            if rest:
                yield rest, True
            return
        cut = chunk.rfind(b"\n") + 1
        if not cut:  # a line longer than a chunk: gather it (a join at its end, never quadratic)
            parts.append(chunk)
            continue
        parts.append(chunk[:cut])
        yield b"".join(parts), False
        parts = [chunk[cut:]] if cut < len(chunk) else []


_CHUNK_BYTES = 1 << 20
_NO: Any = object()
_NO_HASHES: list[int] = []  # never changed
#: a trace timestamp (ms) must be under this: 2**63 ns, the offsets' int64 range (292 years;
#: today's Unix time in ms is ~1.8e12, in us ~1.8e15). A line whose timestamp is not (e.g. an
#: integer the fast parser, orjson, read as a float past 64 bits) is read again by the
#: standard library, which refuses it at its line
MAX_TIMESTAMP_MS = 2 ** 63 / 1e6
_U32, _U64 = 2 ** 32, 2 ** 64
_TAIL_BLOCK = (1 << 22) - 1


def read_trace(path: Path) -> TraceEntries:
    """Read and check a JSONL trace.

    Each non-blank line is an object with ``timestamp_ms`` (a number >= 0),
    ``input_tokens`` (>= 0), ``output_tokens`` (>= 0), optional ``hash_ids``
    (an array of integers >= 0) and optional ``scenario`` (a string). The
    Mooncake names ``timestamp``, ``input_length``, ``output_length`` are
    accepted too. Timestamps may repeat but never go back (equal ones keep the
    file's order: the entries are in file order, and so is the schedule). A
    length of 0 is an arrival all the same: it is read as 1 (an empty prompt
    cannot be sent, and the APIs' ``max_tokens`` is at least 1) and counted
    (``TraceEntries.zero_rows``; the run and ``hopbench validate`` say how
    many: ``TraceSpec.zero_note``). A file whose first
    line is Azure's header ``TIMESTAMP,ContextTokens,GeneratedTokens`` is read
    as Azure's CSV trace instead (``_read_azure``).

    The file is read in blocks of 1 MiB of whole lines (memory: the entries'
    columns, ``TraceEntries``, not the file), decompressed on the way when
    it is a gzip file (its first bytes, whatever its name). A line that names
    a key twice is refused (``_textfile.json_value``; the fast path sends it
    there: ``_quotes_match``). A line is parsed by orjson when
    installed (hopbench[fast]) and checked on the spot; a line that fails any
    check there, or holds what orjson reads otherwise than the standard
    library (``true``/``false``, an integer of 64 bits or more), is read again
    by the standard library and checked by ``_check_line``: its verdict and
    message are the only ones.

    Returns:
        TraceEntries in file order, non-empty.

    Raises:
        ProfileError: a missing, unreadable, empty or non-UTF-8 file (a damaged gzip file too), a broken
        JSON line, a line that is not an object, a missing or wrong field, a
        timestamp earlier than the line before; the message names file:line.
        A file that is not UTF-8 anywhere gets that error whatever else is wrong.
    """
    try:
        check_regular(path)
        with open(path, "rb") as f:
            packed = f.read(2) == GZIP_MAGIC
        with (gzip.open(path, "rb") if packed else open(path, "rb")) as f:
            head = f.read(len(AZURE_HEADER) + 8)
        with (gzip.open(path, "rb") if packed else open(path, "rb")) as f:
            if head.removeprefix(b"\xef\xbb\xbf").lower().startswith(AZURE_HEADER):
                return _read_azure(f, path)
            return _read(f, path)
    except (OSError, EOFError, zlib.error) as exc:  # gzip: BadGzipFile (an OSError), EOFError, zlib.error
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else \
            f"a damaged or truncated gzip file ({exc})"
        raise ProfileError(f"cannot read the trace {path}: {reason}", path=path) from None


def _read(f: _Reader, path: Path) -> TraceEntries:
    """``read_trace`` on the opened file, line by line: each line's dict is dropped as soon
    as its fields are in the columns (holding a block's dicts to check them column by
    column with C loops was tried: 1.7x the CPU, the memory no longer reused while hot)."""
    t_col: array.array[float] = array.array("d")
    inp_col: array.array[int] = array.array("i")
    out_col: array.array[int] = array.array("i")
    line_col: array.array[int] = array.array("q")
    hoff: array.array[int] = array.array("q", [0])
    hashes: array.array[int] | list[int] = array.array("I")
    compact = True  # hashes is an array (ids below 2**64): fromlist checks the ids' type and sign
    sc_col: array.array[int] = array.array("i")
    names: dict[str, int] = {}
    zero_lines: array.array[int] = array.array("q")  # lines with a length of 0, read as 1
    zero_which: array.array[int] = array.array("b")
    # the fast parse keeps the last value of a key named twice: _quotes_match sends such a
    # line to _check_line, whose parse (json_value) refuses it
    loads: Callable[[str], Any] = json.loads if _fast_loads is None else _fast_loads
    max_in, max_out = MAX_INPUT_TOKENS, MAX_OUTPUT_TOKENS
    add_t, add_inp, add_out, add_line = t_col.append, inp_col.append, out_col.append, line_col.append
    add_end, add_sc = hoff.append, sc_col.append
    last_t = -1.0
    last_line = 0
    i = 0
    first = True
    for block, last in _blocks(f):
        try:
            text = block.decode("utf-8")
        except UnicodeDecodeError:
            raise (_not_utf8(path) or ProfileError("the trace changed while it was read", path=path)) from None
        if first:
            first = False
            if text.startswith("\ufeff"):  # as the "utf-8-sig" codec: a BOM at the file's start only
                text = text[1:]
        lines = text.split("\n")  # not splitlines: see _dataset
        if not last:
            lines.pop()  # the block ends with "\n": what follows it is the next block's
        for text_line in lines:
            i += 1
            if not text_line or text_line.isspace():  # = not text_line.strip()
                continue
            try:
                obj = loads(text_line)
            except Exception:  # noqa: BLE001 - _check_line says what is wrong
                obj = None
            if type(obj) is dict:
                get = obj.get
                a, b = get("timestamp_ms", _NO), get("timestamp", _NO)
                t = a if b is _NO else (b if a is _NO else _NO)
                a, b = get("input_tokens", _NO), get("input_length", _NO)
                inp = a if b is _NO else (b if a is _NO else _NO)
                a, b = get("output_tokens", _NO), get("output_length", _NO)
                outp = a if b is _NO else (b if a is _NO else _NO)
                ids = get("hash_ids", _NO_HASHES)
                scenario = get("scenario")
                tt = type(t)
                fast = ((tt is int or tt is float) and 0 <= t < MAX_TIMESTAMP_MS and t >= last_t
                        and type(inp) is int and 1 <= inp <= max_in and type(outp) is int and 1 <= outp <= max_out
                        and (scenario is None or type(scenario) is str and scenario != "")
                        and (text_line.count('"') == 2 * len(obj) + (2 if scenario is not None else 0)
                             or _quotes_match(obj, text_line))
                        and type(ids) is list and (not ids or compact and (
                            "true" not in text_line and "false" not in text_line  # no JSON boolean
                            or set(map(type, ids)) == {int})))  # (one would pass fromlist as 0 or 1)
                if fast and ids:
                    try:
                        hashes.fromlist(ids)  # type: ignore[union-attr]  # compact: an array
                    except (TypeError, OverflowError):  # not ints >= 0 of 32 bits: _check_line decides
                        fast = False
            else:
                fast = False
            if not fast:
                try:
                    t, inp, outp, ids, scenario = _check_line(text_line, i, path, last_t, last_line)
                except ProfileError as exc:
                    raise (_not_utf8(path) or exc) from None  # as a whole-file decode would have
                if ids:
                    hashes = _add_ids(hashes, ids)
                    compact = type(hashes) is not list
                if not inp or not outp:  # (only here: the fast path takes lengths >= 1 only)
                    zero_lines.append(i)
                    zero_which.append((not inp) | (not outp) << 1)
                    inp, outp = inp or 1, outp or 1
            tf = float(t)
            add_t(tf)
            add_inp(inp)
            add_out(outp)
            add_line(i)
            add_end(len(hashes))
            add_sc(-1 if scenario is None else names.setdefault(scenario, len(names)))
            last_t, last_line = tf, i
    if not t_col:
        raise ProfileError(f"the trace {path} is empty (no request line)", path=path)
    return TraceEntries(t_col, inp_col, out_col, line_col, hoff, hashes, sc_col, list(names),
                        zero_lines=zero_lines, zero_which=zero_which)


#: the header of Azure's public LLM inference traces (AzurePublicDataset: AzureLLMInferenceTrace_*.csv), lower case
AZURE_HEADER = b"timestamp,contexttokens,generatedtokens"


_AZURE_TIME = re.compile(r"(\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?(Z|[+-]\d\d:?\d\d)?", re.ASCII)


def _azure_ns(stamp: str) -> int:
    """An Azure trace's TIMESTAMP (``2023-11-16 18:15:46.6805900``, up to 9 fractional
    digits; UTC unless it ends with an offset, ``+00:00``, as pandas writes one) as
    integer ns since the Unix epoch.

    Raises:
        ValueError: not such a date and time.
    """
    m = _AZURE_TIME.fullmatch(stamp.strip())
    if m is None:
        raise ValueError(stamp)
    dt = datetime.datetime.fromisoformat(m[1] + (m[3] or "+00:00"))
    return int(dt.timestamp()) * 1_000_000_000 + int((m[2] or "").ljust(9, "0"))


def _azure_error(path: Path, line: int, reason: str) -> ProfileError:
    return ProfileError(f"Azure trace row: {reason}", path=path, line=line)


def _read_azure(f: _Reader, path: Path) -> TraceEntries:
    """An Azure LLM inference trace (CSV: ``TIMESTAMP,ContextTokens,GeneratedTokens``) read into
    entries: the time in ms after the first row's, ``ContextTokens`` as the input tokens,
    ``GeneratedTokens`` as the output tokens, no hash ids (docs/workloads.md, "Trace replay").
    Rows are checked as JSON lines are (lengths at least 0 and at most the limits, times in
    order), each error naming its line (the header is line 1); a length of 0 is read as 1
    and counted (``TraceEntries.zero_rows``), as for JSON lines."""
    t_col: array.array[float] = array.array("d")
    inp_col: array.array[int] = array.array("i")
    out_col: array.array[int] = array.array("i")
    line_col: array.array[int] = array.array("q")
    zero_lines: array.array[int] = array.array("q")
    zero_which: array.array[int] = array.array("b")
    first_ns: int | None = None
    last_t, last_line, last_stamp, i = -1.0, 0, "", 0
    prev_whole, prev_base = "\0", 0  # the last row's time up to its decimal point, and its ns
    max_in, max_out = MAX_INPUT_TOKENS, MAX_OUTPUT_TOKENS
    for block, last in _blocks(f):
        try:
            text = block.decode("utf-8")
        except UnicodeDecodeError:
            raise (_not_utf8(path) or ProfileError("the trace changed while it was read", path=path)) from None
        lines = text.split("\n")
        if not last:
            lines.pop()
        for row in lines:
            i += 1
            if i == 1 or not row or row.isspace():
                continue
            cells = row.split(",")
            if len(cells) != 3:
                raise _azure_error(path, i, f"expected 3 cells (TIMESTAMP,ContextTokens,GeneratedTokens), got "
                                            f"{len(cells)}: {row.strip()[:60]!r}")
            stamp = cells[0].strip()
            whole, _, frac = stamp.partition(".")
            if whole == prev_whole and (not frac or len(frac) <= 9 and frac.isascii() and frac.isdigit()):
                ns = prev_base + int(frac.ljust(9, "0"))  # (rows within one second: parsed once)
            else:
                try:
                    ns = _azure_ns(stamp)
                except ValueError:
                    raise _azure_error(path, i, f"TIMESTAMP: expected a date and time such as "
                                                f"2023-11-16 18:15:46.6805900, got {stamp[:40]!r}") from None
                if not frac or len(frac) <= 9 and frac.isascii() and frac.isdigit():
                    prev_whole, prev_base = whole, ns - int(frac.ljust(9, "0"))
            inp, outp = cells[1].strip(), cells[2].strip()
            for name, cell, limit in (("ContextTokens", inp, max_in), ("GeneratedTokens", outp, max_out)):
                if not (cell.isascii() and cell.isdigit()):  # (no sign, point, space, "²")
                    raise _azure_error(path, i, f"{name}: expected an integer >= 0, got {cell[:40]!r}")
                if int(cell) > limit:
                    raise _azure_error(path, i, f"{name}: expected at most {limit:,} tokens (hopbench's limit, "
                                                f"docs/workloads.md), got {int(cell):,}")
            n_in, n_out = int(inp), int(outp)
            if not n_in or not n_out:  # an arrival all the same, sent with 1 token (zero_rows)
                zero_lines.append(i)
                zero_which.append((not n_in) | (not n_out) << 1)
            if first_ns is None:
                first_ns = ns
            t = (ns - first_ns) / 1e6
            if t < last_t:
                raise _azure_error(path, i, f"TIMESTAMP: timestamps out of order: {stamp} after {last_stamp} "
                                            f"(line {last_line}); sort the trace by time")
            t_col.append(t)
            inp_col.append(n_in or 1)
            out_col.append(n_out or 1)
            line_col.append(i)
            last_t, last_line, last_stamp = t, i, stamp
    if not t_col:
        raise ProfileError(f"the trace {path} is empty (no request line)", path=path)
    n = len(t_col)
    return TraceEntries(t_col, inp_col, out_col, line_col, array.array("q", [0] * (n + 1)), array.array("I"),
                        array.array("i", [-1] * n), [], zero_lines=zero_lines, zero_which=zero_which)


def _quotes_match(obj: dict[str, Any], text_line: str) -> bool:
    """True when ``text_line`` holds exactly the quotes of ``obj``'s keys and string values:
    then no key is named twice (a key named twice adds quotes that the parsed object, which
    keeps one of its values, does not have). False also for a line whose strings hold
    escaped quotes or that nests strings in arrays or objects: ``_check_line`` then decides."""
    return text_line.count('"') == 2 * len(obj) + 2 * sum(type(v) is str for v in obj.values())


def _add_ids(hashes: array.array[int] | list[int], ids: list[int]) -> array.array[int] | list[int]:
    """``ids`` (checked: ints >= 0) appended to the flat hash ids, widened as they need:
    4-byte ids, 8-byte ids once one is 2**32 or more, a list of ints once one is 2**64 or more."""
    if isinstance(hashes, list):
        hashes.extend(ids)
        return hashes
    top = max(ids)
    if top >= _U64:
        wide = hashes.tolist()
        wide.extend(ids)
        return wide
    if top >= _U32 and hashes.typecode == "I":
        hashes = array.array("Q", hashes)
    hashes.fromlist(ids)
    return hashes


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
    if isinstance(entries, TraceEntries):  # the columns: no TraceEntry made per line
        inp, hoff, lines, _, _ = entries.columns()
        counts = map(operator.sub, itertools.islice(hoff, 1, None), hoff)
        # ceil(n / block_tokens) < ids, by C loops: -(-n // block_tokens) < ids
        ceil = map(operator.neg, map(operator.floordiv, map(operator.neg, inp), itertools.repeat(block_tokens)))
        k = next(itertools.compress(itertools.count(), map(operator.lt, ceil, counts)), None)
        if k is not None:
            _too_many_ids(hoff[k + 1] - hoff[k], inp[k], block_tokens, path, lines[k])
        return
    for e in entries:
        if len(e.hash_ids) > -(-e.input_tokens // block_tokens):
            _too_many_ids(len(e.hash_ids), e.input_tokens, block_tokens, path, e.line)


def _too_many_ids(ids: int, input_tokens: int, block_tokens: int, path: Path, line: int) -> None:
    blocks = -(-input_tokens // block_tokens)
    raise ProfileError(
        f'trace line: "hash_ids" has {ids} ids, more than the {blocks} block(s) of '
        f'"input_tokens" = {input_tokens} with load.block_tokens = {block_tokens} '
        f"(ceil(input_tokens / block_tokens)); set block_tokens to the trace's block size or "
        "fix the line", path=path, line=line)


@overload
def window(entries: TraceEntries, start_ms: float | None,
           end_ms: float | None) -> tuple[TraceEntries, float, float]: ...
@overload
def window(entries: Sequence[TraceEntry], start_ms: float | None,
           end_ms: float | None) -> tuple[Sequence[TraceEntry], float, float]: ...


def window(entries: Sequence[TraceEntry], start_ms: float | None,
           end_ms: float | None) -> tuple[Sequence[TraceEntry], float, float]:
    """The entries of ``[start_ms, end_ms)`` of trace time, with the window's start and period.

    Args:
        entries: the whole trace (time order).
        start_ms: window start (trace time); None: the first timestamp.
        end_ms: window end (exclusive); None: after the last entry.

    Returns:
        (entries in the window: a view of ``entries`` when it is ``TraceEntries``,
        else a list; start ms, period ms): the period, used by
        ``loop``, is ``end_ms - start_ms`` when an end is given, else the span
        from the start to the last entry plus the mean gap between entries
        (so the seam between two passes is a typical gap), at least 1 ms; 1 s
        for a single entry or entries all at one timestamp (no gap to go by:
        two rows at one instant looped every 1 ms, 2,000 requests/s).
        The entry list may be empty (the caller reports it).
    """
    kept: Sequence[TraceEntry]
    if isinstance(entries, TraceEntries):  # in time order: the window is a slice, found by bisection
        start = entries.t_ms(0) if start_ms is None else start_ms
        lo = entries.bisect_t(start)
        view = entries.view(lo, len(entries) if end_ms is None else entries.bisect_t(end_ms))
        first, last = (view.t_ms(0), view.t_ms(len(view) - 1)) if len(view) else (0.0, 0.0)
        kept = view
    else:
        start = entries[0].t_ms if start_ms is None else start_ms
        kept = [e for e in entries if e.t_ms >= start and (end_ms is None or e.t_ms < end_ms)]
        first, last = (kept[0].t_ms, kept[-1].t_ms) if kept else (0.0, 0.0)
    if end_ms is not None:
        period = end_ms - start
    elif len(kept) > 1 and last > first:
        span = last - start
        period = span + (last - first) / (len(kept) - 1)
    else:  # one entry, or all at one timestamp: no gap to repeat by; once a second
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
    ids = {m: k for k, m in enumerate(dict.fromkeys(models))}
    return tuple(_Implied(entries, array.array("i", [ids[m] for m in models]), block_tokens))


class _Implied(Sequence[tuple[int, int]]):
    """``implied_hits`` computed as it is read: entry ``k``'s figures walk the trie of the
    prefixes sent (in entry order) up to ``k`` the first time an entry at or past it is
    read, so loading a trace costs nothing here and the runner, which reads its entries
    in order, pays a few us per request (a dict look-up per block it shares, plus one).

    The trie is path-compressed: where an entry's prefix leaves the trie, one node is
    made and the rest of the entry's full blocks hang off it unmade (the node's tail:
    that entry, from that block on); a later entry that follows a tail makes its nodes
    one block at a time. The hits are those of the whole trie (every prefix of every
    earlier entry's full blocks), while the memory is ~2 dict entries per entry plus
    one per block shared (a trie of every prefix block took one per block: ~4 M for
    500,000 Mooncake-style lines).

    Args:
        entries: the replayed entries in schedule order.
        model: per entry, an index standing for its model (equal indices: one cache).
        block_tokens: tokens per hash id.
    """

    __slots__ = ("_entries", "_model", "_bt", "_hits", "_tries", "_nodes", "_columns")

    def __init__(self, entries: Sequence[TraceEntry], model: Sequence[int], block_tokens: int) -> None:
        self._entries, self._model, self._bt = entries, model, block_tokens
        self._hits: array.array[int] = array.array("q")  # first-pass hit blocks of the entries walked
        # per model: (parent node << 64 | hash id) -> node (ids of 2**64 or more: a tuple key),
        # and node -> its tail (entry << 22 | block index: at most 2,000,000 blocks a prompt)
        self._tries: dict[int, tuple[dict[object, int], dict[int, int]]] = {}
        self._nodes = 0
        self._columns: tuple[Sequence[int], Sequence[int], Sequence[int]] | None = None

    def __reduce__(self) -> tuple[Any, ...]:  # a worker gets the inputs, not the walk so far
        return (_Implied, (self._entries, self._model, self._bt))

    def __len__(self) -> int:
        return len(self._entries)

    def _cols(self) -> tuple[Sequence[int], Sequence[int], Sequence[int]]:
        """(input tokens, hash-id offsets, the flat hash ids) of the entries, read in place."""
        if self._columns is None:
            entries = TraceEntries.of(self._entries)
            inp, hoff, _, _, _ = entries.columns()
            self._columns = (inp, hoff, entries.ids_column())
        return self._columns

    def _walk_to(self, k: int) -> None:
        bt, hits_col, model = self._bt, self._hits, self._model
        inp, hoff, flat = self._cols()
        for e in range(len(hits_col), k + 1):
            a = hoff[e]
            full = min(hoff[e + 1] - a, inp[e] // bt)
            pair = self._tries.get(model[e])
            if pair is None:
                pair = self._tries[model[e]] = ({}, {})
            trie, tails = pair
            hits = 0
            node = 0
            while hits < full:
                h = flat[a + hits]
                key: object = node << 64 | h if h < _U64 else (node, h)
                nxt = trie.get(key)
                if nxt is None and node in tails:  # make the node's tail's first block a node
                    tail = tails.pop(node)
                    j, at = tail >> 22, tail & _TAIL_BLOCK
                    h_j = flat[hoff[j] + at]
                    self._nodes += 1
                    trie[node << 64 | h_j if h_j < _U64 else (node, h_j)] = self._nodes
                    if at + 1 < min(hoff[j + 1] - hoff[j], inp[j] // bt):
                        tails[self._nodes] = j << 22 | (at + 1)
                    if h_j == h:
                        nxt = self._nodes
                if nxt is None:  # the prefix leaves the trie here: one node, the rest its tail
                    self._nodes += 1
                    trie[key] = self._nodes
                    if hits + 1 < full:
                        tails[self._nodes] = e << 22 | (hits + 1)
                    break
                hits += 1
                node = nxt
            hits_col.append(hits)

    @overload
    def __getitem__(self, k: int) -> tuple[int, int]: ...
    @overload
    def __getitem__(self, k: slice) -> Sequence[tuple[int, int]]: ...

    def __getitem__(self, k: int | slice) -> tuple[int, int] | Sequence[tuple[int, int]]:
        if isinstance(k, slice):
            return [self[j] for j in range(*k.indices(len(self)))]
        n_entries = len(self._entries)
        if k < 0:
            k += n_entries
        if not 0 <= k < n_entries:
            raise IndexError("trace entry index out of range")
        if k >= len(self._hits):
            self._walk_to(k)
        inp, hoff, _ = self._cols()
        return self._hits[k] * self._bt, min(hoff[k + 1] - hoff[k], inp[k] // self._bt) * self._bt


@dataclass(frozen=True, slots=True)
class TraceSpec:
    """A validated trace replay (``[load]`` of mode "trace").

    Attributes:
        path: the trace file.
        entries: the entries of the window, in time order (non-empty; compact
            columns: index it for a ``TraceEntry``, or read a column).
        scenario_index: per entry, the index of the scenario that sends it (an int array).
        start_ms: the window's start, ms of trace time.
        period_ms: the window's length for ``loop`` (see ``window``).
        speedup: trace time / replay time (2: twice as fast).
        loop: replay the window again and again (until the run's duration
            or request count ends it).
        block_tokens: tokens per hash id.
        implied: per entry, the cache hits the trace implies (``implied_hits``;
            computed in entry order as it is read).
    """

    path: Path
    entries: TraceEntries
    scenario_index: Sequence[int]
    start_ms: float
    period_ms: float
    speedup: float
    loop: bool
    block_tokens: int
    implied: Sequence[tuple[int, int]]

    @property
    def rate_rps(self) -> float:
        """The window's mean request rate at this speedup, requests per second.

        Meaningless for a replay of :attr:`one_instant` (its period is made up:
        1 s); the reports show no rate for one.
        """
        return len(self.entries) / (self.period_ms / 1000.0) * self.speedup

    @property
    def one_instant(self) -> bool:
        """The replay is one instant: not looped, and every entry of the window
        at one timestamp (a single entry, or a burst). Such a schedule has no
        rate: requests/s over a gap after the instant would be made up (the
        period's 1 s divided among the entries; before, 0.5 ms for two entries:
        thousands per second) (docs/workloads.md, "Trace replay"). A looped one
        repeats every ``period_ms``: that is its rate."""
        return not self.loop and self.entries.t_ms(0) == self.entries.t_ms(len(self.entries) - 1)

    @property
    def zero_note(self) -> str | None:
        """What the window's rows with a length of 0 became, for a person, or None
        when it has none (``TraceEntries.zero_rows``; docs/workloads.md, "Trace
        replay"): ``3 rows of t.csv have 0 tokens (2 with 0 input tokens, 1 with 0
        output tokens; first at line 17): each is replayed as an arrival with 1 token
        instead (...)``; the window's rows only."""
        rows, n_in, n_out, first = self.entries.zero_rows()
        if not rows:
            return None
        kinds = ", ".join(f"{n} with 0 {what} tokens" for n, what in ((n_in, "input"), (n_out, "output")) if n)
        return (f"{rows} row{'s' if rows != 1 else ''} of {self.path.name} "
                f"{'have' if rows != 1 else 'has'} 0 tokens ({kinds}; first at line {first}): "
                f"{'each is' if rows != 1 else 'it is'} replayed as an arrival with 1 token instead "
                "(an empty prompt cannot be sent; max_tokens is at least 1)")

    def offset_ns(self, i: int, rep: int) -> int:
        """Entry ``i``'s scheduled time in pass ``rep`` (0-based), ns from the replay's start."""
        t_ms = self.entries.t_ms(i) - self.start_ms + rep * self.period_ms
        return int(round(t_ms * NS_PER_MS / self.speedup))

    def arrivals(self, part: int = 0, parts: int = 1) -> Iterator[tuple[int, int, int]]:
        """The schedule: (offset ns, entry index, pass) in time order; entries of
        one timestamp in file order (their offsets are equal: the runner takes
        them up in the order given here).

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
        period_ns = self.period_ms * NS_PER_MS / self.speedup
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
    has none: the line says the requests are due at one instant), then
    :attr:`TraceSpec.zero_note` when the window has rows with 0 tokens. The warning: one pass takes longer than
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
    note = spec.zero_note
    if note is not None:
        line += f"; {note}"
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
    id) and kept as bytes from the second time one is sent (a block sent
    once is made when it is sent and not kept; made again, it is the same:
    a long trace's one-off blocks would otherwise hold ``block_tokens`` x 4
    bytes each for ever); a request's prompt is the join of its blocks'
    bytes (the last one cut to the input length) and of words unique to it.
    The words need no JSON escaping, so the bytes go into the body as they are.
    Which ids were sent is a bitmap for ids below 2**26 (at most 8 MiB, grown
    as ids are sent), a set above.

    Args:
        spec: the trace.
        seed: the run seed.
    """

    __slots__ = ("spec", "seed", "_blocks", "_sent", "_sent_big")

    def __init__(self, spec: TraceSpec, seed: int) -> None:
        self.spec = spec
        self.seed = seed
        self._blocks: dict[int, bytes] = {}
        self._sent = bytearray()  # bit h: block h was made before
        self._sent_big: set[int] = set()

    def _sent_before(self, h: int) -> bool:
        """Whether block ``h`` was made before; notes that it is now."""
        if h >= _BITMAP_IDS:
            if h in self._sent_big:
                return True
            self._sent_big.add(h)
            return False
        sent, at, bit = self._sent, h >> 3, 1 << (h & 7)
        if at >= len(sent):
            sent.extend(bytes(at + 1 - len(sent)))
        was = sent[at] & bit
        sent[at] |= bit
        return bool(was)

    def _block(self, h: int) -> bytes:
        b = self._blocks.get(h)
        if b is None:
            # seeded by the id alone: the same text whenever (and in whichever worker) it is made
            b = _words(f"hopbench-trace-block:{self.seed}:{h}", self.spec.block_tokens)
            if self._sent_before(h):
                self._blocks[h] = b
        return b

    def prompt(self, i: int, rep: int = 0) -> bytes:
        """Entry ``i``'s prompt text as UTF-8 (ASCII) bytes: 4 characters per token.

        ``rep`` (the pass) changes only the words past the hash-id blocks, so
        those stay unique to each request also when a trace is looped.
        """
        entries = self.spec.entries
        bt = self.spec.block_tokens
        parts: list[bytes] = []
        left = entries.input_tokens(i)
        for h in entries.hash_ids(i):
            if left <= 0:
                break
            block = self._block(h)
            take = min(left, bt)
            parts.append(block if take == bt else block[: 4 * take])
            left -= take
        if left > 0:
            parts.append(_words(f"hopbench-trace-tail:{self.seed}:{i}:{rep}", left))
        return b"".join(parts)


#: hash ids below this are noted in TraceBodies' bitmap (8 MiB at most), larger ones in a set
_BITMAP_IDS = 1 << 26
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
    return TraceSpec(path, kept, (index := _scenario_index(kept, scenarios, seed, path)), start, period, speedup,
                     loop, block_tokens, _Implied(kept, _model_index(index, scenarios), block_tokens))


def _scenario_index(kept: TraceEntries, scenarios: Sequence[tuple[str, str, bool, float]], seed: int,
                    path: Path) -> array.array[int]:
    """Per entry, the index of the scenario that sends it: the one its line names, else one
    drawn by weight (``random.Random(f"hopbench-trace-scenario:{seed}")``, one
    ``choices`` draw per such entry, in entry order).

    Raises:
        ProfileError: a line naming no scenario of the profile (file:line).
    """
    names = {name: i for i, (name, _, _, _) in enumerate(scenarios)}
    rng = random.Random(f"hopbench-trace-scenario:{seed}")
    weights = [w for _, _, _, w in scenarios]
    _, _, lines, named, trace_names = kept.columns()
    # each trace name's scenario (-1: none of the profile's), and -2 for a line naming none (index -1)
    lookup = [names.get(name, -1) for name in trace_names] + [-2]
    index: array.array[int] = array.array("i", map(lookup.__getitem__, named))
    bad = index.index(-1) if -1 in index else len(index)  # entries before it are drawn, as they were
    if len(scenarios) > 1:
        unnamed = itertools.compress(range(bad), map(operator.eq, index, itertools.repeat(-2)))
        k = next(unnamed, None)
        if k is not None:
            # the first draw as the library makes it (its errors, if any), then the same draw
            # without rebuilding the weights each time: Lib/random.py (3.11), Random.choices:
            # population[bisect(cum_weights, random() * total, 0, n - 1)]
            index[k] = rng.choices(range(len(scenarios)), weights)[0]
            cum = list(itertools.accumulate(weights))
            total, hi = cum[-1] + 0.0, len(cum) - 1
            # the others in entry order, by C loops (operator.call calls rng.random); map stops at
            # the end of `unnamed` before it draws once more
            xs = map(operator.mul, map(operator.call, itertools.repeat(rng.random)), itertools.repeat(total))
            drawn = map(bisect.bisect, itertools.repeat(cum), xs, itertools.repeat(0), itertools.repeat(hi))
            collections.deque(map(operator.setitem, itertools.repeat(index), unnamed, drawn), maxlen=0)
    elif bad == len(index):
        index = array.array("i", map(max, index, itertools.repeat(0)))  # the only scenario: 0
    if bad < len(index):
        raise ProfileError(f'trace line: "scenario": no scenario named {trace_names[named[bad]]!r} in the profile '
                           f"(scenarios: {', '.join(sorted(names))})", path=path, line=lines[bad])
    return index


def _model_index(index: Sequence[int], scenarios: Sequence[tuple[str, str, bool, float]]) -> array.array[int]:
    """Per entry, an index standing for its scenario's model (scenarios of one model: one index)."""
    models = {m: k for k, m in enumerate(dict.fromkeys(m for _, m, _, _ in scenarios))}
    of_scenario = [models[m] for _, m, _, _ in scenarios]
    if len(set(of_scenario)) == 1:
        return array.array("i", bytes(4 * len(index)))
    return array.array("i", [of_scenario[k] for k in index])
