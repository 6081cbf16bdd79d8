"""UTF-8 text of results files, with a file:line error for bytes that are not UTF-8; the
checks every input file of a profile passes before it is read.

Role: every reader of a results folder (summary.json, streams.jsonl,
scrape.jsonl, timeline.jsonl, latency.hlog) decodes through here, so a file
damaged by a disk error, a foreign tool or a crash says where (``file:line``
and the byte within the line) instead of raising ``UnicodeDecodeError``
(docs/results.md, "Reading a results folder"). The readers of a profile's
input files (datasets, traces, prompts files) open them with
``open_regular`` (a device or a FIFO would be read for ever) and parse their
JSON with ``json_value`` (every parse failure a ``json.JSONDecodeError``, so
each reader's file:line error covers it).

Invariants:
- Pure: the only I/O is reading the named file.
- Line numbers and byte offsets are 1-based; a line ends at ``\\n``.
"""

from __future__ import annotations

import errno
import json
import os
import stat
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ._errors import ResultsError

__all__ = ["not_utf8", "decode_line", "read_text", "iter_lines", "check_regular", "read_regular", "json_value"]


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


def json_value(text: str) -> Any:
    """``json.loads(text)``, every failure on the text raised as ``json.JSONDecodeError``.

    Beyond malformed JSON, the standard library's parser raises
    ``RecursionError`` on arrays or objects nested about a thousand deep (its
    scanner recurses) and ``ValueError`` on an integer of more digits than
    ``sys.get_int_max_str_digits()`` (4,300 by default since Python 3.11,
    CVE-2020-10735); both are the file's fault, so its reader's file:line
    error must cover them.

    Raises:
        json.JSONDecodeError: ``msg`` says why; ``lineno``/``colno`` are
        those of the parser's own errors, else of the text's start.
    """
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        raise
    except RecursionError:
        raise json.JSONDecodeError("arrays or objects nested too deeply to parse", text, 0) from None
    except ValueError:  # the integer digit limit (the only other ValueError of json.loads)
        raise json.JSONDecodeError(f"an integer of more than {sys.get_int_max_str_digits():,} digits",
                                   text, 0) from None
