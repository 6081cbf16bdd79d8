"""UTF-8 text of results files, with a file:line error for bytes that are not UTF-8.

Role: every reader of a results folder (summary.json, streams.jsonl,
scrape.jsonl, timeline.jsonl, latency.hlog) decodes through here, so a file
damaged by a disk error, a foreign tool or a crash says where (``file:line``
and the byte within the line) instead of raising ``UnicodeDecodeError``
(docs/results.md, "Reading a results folder").

Invariants:
- Pure: the only I/O is reading the named file.
- Line numbers and byte offsets are 1-based; a line ends at ``\\n``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from ._errors import ResultsError

__all__ = ["not_utf8", "decode_line", "read_text", "iter_lines"]


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
