"""UTF-8 text of results files, with a file:line error for bytes that are not UTF-8; the
checks every input file of a profile passes before it is read.

Role: every reader of a results folder (summary.json, streams.jsonl,
scrape.jsonl, timeline.jsonl, latency.hlog) decodes through here, so a file
damaged by a disk error, a foreign tool or a crash says where (``file:line``
and the byte within the line) instead of raising ``UnicodeDecodeError``
(docs/results/folder.md, "Reading a results folder"). The readers of a profile's
input files (datasets, traces, prompts files) open them with
``check_regular`` / ``read_regular`` (a device or a FIFO would be read for ever), decompress them
with ``gunzip`` when they are gzip files, and parse their JSON with
``json_value`` or, for a JSON array, ``json_array_items`` (every parse failure
a ``json.JSONDecodeError``, a key named twice in one object too, so each
reader's file:line error covers it).

Invariants:
- Pure: the only I/O is reading the named file.
- Line numbers and byte offsets are 1-based; a line ends at ``\\n``.
"""

from __future__ import annotations

import errno
import gzip
import json
import zlib
import os
import stat
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ._errors import ResultsError

__all__ = ["not_utf8", "decode_line", "read_text", "iter_lines", "check_regular", "read_regular", "json_value",
           "json_array_items", "gunzip", "GZIP_MAGIC", "binary_kind"]


def not_utf8(path: Path, raw: bytes, exc: UnicodeDecodeError, first_line: int = 1) -> ResultsError:
    """The error for ``raw`` (the bytes of ``path`` from line ``first_line`` on) failing to decode.

    Args:
        path: the file, for the message.
        raw: the bytes that were decoded (a whole file, or one line).
        exc: the decoder's error (``exc.start``: offset of the first bad byte in ``raw``).
        first_line: the 1-based line number of ``raw``'s first byte.

    Returns:
        ResultsError: ``"{path}:{line}: not UTF-8 text (byte {k} of the line)"``, k 1-based.
    """
    line = first_line + raw.count(b"\n", 0, exc.start)
    column = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
    return ResultsError(f"{path}:{line}: not UTF-8 text (byte {column} of the line: "
                        f"0x{raw[exc.start]:02x}); the file is damaged")


def decode_line(raw: bytes, path: Path, n: int) -> str:
    """One line's bytes as text.

    Raises:
        ResultsError: the bytes are not UTF-8 (``path:n``, byte within the line).
    """
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise not_utf8(path, raw, exc, n) from None


def read_text(path: Path) -> str:
    """A whole file as text (a UTF-8 BOM is kept, as ``Path.read_text`` would).

    Raises:
        OSError: the file cannot be read (the caller names it).
        ResultsError: its bytes are not UTF-8 (file:line, byte within the line).
    """
    raw = Path(path).read_bytes()
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise not_utf8(path, raw, exc) from None


def iter_lines(path: Path) -> Iterator[tuple[int, bytes, bool]]:
    """A file's lines as bytes, read one at a time.

    Yields:
        (1-based line number, the line's bytes including its ``\\n`` if any,
        whether it is the file's last line).

    Raises:
        OSError: the file cannot be opened or read.
    """
    with open(path, "rb") as f:
        prev: tuple[int, bytes] | None = None
        for n, line in enumerate(f, 1):
            if prev is not None:
                yield prev[0], prev[1], False
            prev = (n, line)
        if prev is not None:
            yield prev[0], prev[1], True


_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"))


def check_regular(path: Path) -> None:
    """Check that ``path`` names a regular file that can be opened for reading.

    Checked before the file is opened: opening a FIFO waits for a writer, and
    reading ``/dev/zero`` or ``/dev/urandom`` never ends (the whole file is
    read into memory at profile load).

    Raises:
        OSError: the file does not exist or cannot be opened (as ``open``
        raises it), or it is not a regular file (``strerror``: "not a regular
        file (a character device)"; the caller names the file).
    """
    mode = os.stat(path).st_mode
    if not stat.S_ISREG(mode):
        kind = next((name for test, name in _KINDS if test(mode)), "not a file")
        raise OSError(errno.EINVAL, f"not a regular file ({kind})", str(path))
    open(path, "rb").close()


def read_regular(path: Path) -> bytes:
    """The bytes of a regular file (``check_regular``, then read).

    Raises:
        OSError: as ``check_regular``, or the read failed.
    """
    check_regular(path)
    return Path(path).read_bytes()


class _DuplicateKey(Exception):
    """A JSON object that names one key twice (raised by ``_unique_keys``)."""

    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``json.loads``'s ``object_pairs_hook``: the object as a dict, refusing a key named twice."""
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _DuplicateKey(key)
            seen.add(key)
    return obj


#: the first two bytes of a gzip member (RFC 1952, section 2.3.1)
GZIP_MAGIC = b"\x1f\x8b"


#: (first bytes, what a file that starts with them is): formats a dataset or trace is found in
#: that hopbench does not read (each format's own magic number)
_BINARY = ((b"PAR1", "a Parquet file (export it as JSON lines: pandas' to_json(path, orient=\"records\", "
                     "lines=True))"),
           (b"PK\x03\x04", "a zip archive (unzip it)"), (b"BZh", "a bzip2 file (bunzip2 it)"),
           (b"\xfd7zXZ\x00", "an xz file (unxz it)"), (b"\x28\xb5\x2f\xfd", "a zstd file (unzstd it)"),
           (b"7z\xbc\xaf\x27\x1c", "a 7z archive (extract it)"), (b"Rar!\x1a\x07", "a RAR archive (extract it)"),
           (b"\x93NUMPY", "a NumPy array file"))


def binary_kind(raw: bytes) -> str | None:
    """What a file that is not text is, from its first bytes (``raw``: at least its start),
    for the reader's "not UTF-8" message, or None when it is none of the formats known here."""
    return next((kind for magic, kind in _BINARY if raw.startswith(magic)), None)


def gunzip(raw: bytes) -> bytes:
    """The bytes of a gzip-compressed file, decompressed (``raw`` as it is when it does not
    start with ``GZIP_MAGIC``): a dataset or trace may be stored as ``.jsonl.gz``.

    Raises:
        OSError: the gzip stream is damaged or cut short (``strerror`` says so).
    """
    if not raw.startswith(GZIP_MAGIC):
        return raw
    try:
        return gzip.decompress(raw)
    except (OSError, EOFError, zlib.error) as exc:
        raise OSError(errno.EINVAL, f"a damaged or truncated gzip file ({exc})") from None


def _decode_error(exc: Exception, text: str, start: int) -> json.JSONDecodeError:
    """``json_value``'s error for what ``json.loads`` raised on ``text`` from ``start`` on."""
    if isinstance(exc, json.JSONDecodeError):
        return exc
    if isinstance(exc, _DuplicateKey):
        name = json.dumps(exc.key, ensure_ascii=False)
        first = text.find(name, start)
        second = text.find(name, first + 1) if first >= 0 else -1
        return json.JSONDecodeError(f"the key {name} appears twice in one object: which value is meant "
                                    "cannot be told; keep one", text, max(second, start))
    if isinstance(exc, RecursionError):
        return json.JSONDecodeError("arrays or objects nested too deeply to parse", text, start)
    # the integer digit limit (the only other ValueError of json.loads)
    return json.JSONDecodeError(f"an integer of more than {sys.get_int_max_str_digits():,} digits", text, start)


_ARRAY_DECODER = json.JSONDecoder(object_pairs_hook=_unique_keys)
_SPACE = " \t\r\n"


def json_array_items(text: str) -> Iterator[tuple[int, Any]]:
    """The elements of the JSON array that ``text`` holds, parsed one at a time, as ``json_value``.

    One pass over the text (each element parsed once, where locating each
    element's line after ``json.loads`` parsed it all again): the caller gets
    each element's line without a second parse, and can drop each element as
    soon as it has read it.

    Yields:
        (offset of the element's first character in ``text``, the element).

    Raises:
        json.JSONDecodeError: as ``json_value`` (also text after the array's end).
    """
    n = len(text)
    i = 0
    while i < n and text[i] in _SPACE:
        i += 1
    if i >= n or text[i] != "[":
        raise json.JSONDecodeError("Expecting '['", text, i)
    i += 1
    first = True
    while True:
        while i < n and text[i] in _SPACE:
            i += 1
        if i < n and text[i] == "]" and first:
            i += 1
            break
        if not first:
            if i < n and text[i] == "]":
                i += 1
                break
            if i >= n or text[i] != ",":
                raise json.JSONDecodeError("Expecting ',' delimiter", text, i)
            i += 1
            while i < n and text[i] in _SPACE:
                i += 1
        first = False
        try:
            value, end = _ARRAY_DECODER.raw_decode(text, i)
        except (json.JSONDecodeError, _DuplicateKey, RecursionError, ValueError) as exc:
            raise _decode_error(exc, text, i) from None
        yield i, value
        i = end
    while i < n and text[i] in _SPACE:
        i += 1
    if i < n:
        raise json.JSONDecodeError("Extra data", text, i)


def json_value(text: str) -> Any:
    """``json.loads(text)``, every failure on the text raised as ``json.JSONDecodeError``.

    Beyond malformed JSON, the standard library's parser raises
    ``RecursionError`` on arrays or objects nested about a thousand deep (its
    scanner recurses) and ``ValueError`` on an integer of more digits than
    ``sys.get_int_max_str_digits()`` (4,300 by default since Python 3.11,
    CVE-2020-10735); both are the file's fault, so its reader's file:line
    error must cover them. An object that names a key twice is refused too:
    the parser would keep the last value and drop the other unread, and
    which one the file meant cannot be told (RFC 8259, section 4: "The names
    within an object SHOULD be unique").

    Raises:
        json.JSONDecodeError: ``msg`` says why; ``lineno``/``colno`` are
        those of the parser's own errors, of the key's second occurrence for
        a duplicate key, else of the text's start.
    """
    try:
        return json.loads(text, object_pairs_hook=_unique_keys)
    except (json.JSONDecodeError, _DuplicateKey, RecursionError, ValueError) as exc:
        raise _decode_error(exc, text, 0) from None
