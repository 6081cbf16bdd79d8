"""Trace files read and checked: JSON lines (Mooncake's names too) and Azure's CSV, into compact columns.

Role: ``read_trace`` reads a request trace (docs/workloads.md, "Trace replay")
at profile load: one request per line, when it arrived (``timestamp_ms``), its
input and output lengths and, optionally, the prompt blocks it shares with
other requests (``hash_ids``, as the public Mooncake traces have them) and the
scenario that sends it; Azure's public LLM inference traces (CSV:
``TIMESTAMP,ContextTokens,GeneratedTokens``) are read too (``_read_azure``).
Every problem is a ``ProfileError`` naming the file and line; ``check_blocks``
checks the hash ids against a block size.

A trace of millions of lines is held as columns of compact arrays
(``TraceEntries``: ~36 bytes a line plus 4 a hash id, no object per line),
read 1 MiB at a time (``_CHUNK_BYTES``), each line parsed (orjson when
installed: ``_fast_loads``) and checked on the spot, and checked again by the
reference checks (``_check_line``) when anything about it is unusual; the
checks over all lines run as C loops over the columns. Measured with
benchmarks/bench_trace_load.py.

Invariants:
- Pure but for reading the trace file: no clock, no trio.
- A length of 0 (real traces hold them) is read as 1 and counted, never
  refused and never dropped: the row is an arrival (``TraceEntries.zero_rows``).
- A line is accepted with exactly the values, and refused with exactly the
  message, that ``_check_line`` (the standard library's parse, then each
  check in a fixed order) gives it; a file that is not UTF-8 anywhere is
  refused as such, whatever else is wrong with it.
- Entries are in file order; their times never go back.
"""

from __future__ import annotations

import array
import bisect
import datetime
import gzip
import itertools
import json
import operator
import re
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, overload

from .._errors import ProfileError
from .._format import plural
from .._textfile import GZIP_MAGIC, binary_kind, check_regular, gunzip, json_value
from ._lengths import MAX_INPUT_TOKENS, MAX_OUTPUT_TOKENS

try:  # optional (hopbench[fast]): parses a trace line ~4x faster (the whole load: ~1.9x)
    import orjson as _orjson

    _fast_loads: Callable[[str], Any] | None = _orjson.loads
except ImportError:  # pragma: no cover - read_trace then parses every line with the standard library
    _fast_loads = None

__all__ = ["AZURE_HEADER", "MAX_TIMESTAMP_MS", "TraceEntry", "TraceEntries", "check_blocks", "read_trace"]

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
        f'trace line: "hash_ids" has {ids} {plural(ids, "id")}, more than the {blocks} {plural(blocks, "block")} of '
        f'"input_tokens" = {input_tokens} with load.block_tokens = {block_tokens} '
        f"(ceil(input_tokens / block_tokens)); set block_tokens to the trace's block size or "
        "fix the line", path=path, line=line)
