"""TOML loading with line numbers, and typed, strict field access.

tomllib gives data without positions, but every error about a profile must name
the file, the line and the key path (``profiles/x.toml:12: load.concurrency:
expected a positive integer, got -4``). ``load_toml`` therefore also indexes
the text: a light line scanner maps each key path (table headers, array-of-table
entries, ``key = value`` lines, dotted and quoted keys) to its first line.
Keys inside inline tables or multi-line values resolve to the line of their
nearest indexed ancestor.

``Table`` wraps one TOML table: typed getters with defaults and bounds that
raise ``ProfileError`` with the position, and ``done()`` which rejects any key
no getter asked for (unknown keys are errors, never silently ignored).
Profiles, the emulator config and gate budget files all read through it.
"""

from __future__ import annotations

import builtins
import difflib
import math
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Final

from ._errors import ProfileError

try:  # Python 3.11+
    import tomllib
except ModuleNotFoundError:  # pragma: no cover - 3.10 fallback
    import tomli as tomllib  # type: ignore[no-redef]

__all__ = ["TomlDoc", "Table", "load_toml", "line_in_file", "parse_toml", "closest_key", "MISSING"]

KeyPath = tuple[str | int, ...]


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


#: the largest number a profile key takes (1e9 s is ~32 years)
NUMBER_MAX = 1e9

RATE_MIN_RPS = 1e-6
"""The lowest request rate a profile accepts (requests/s: one every ~11.6 days);
a gap of 1 / rate s must convert to integer nanoseconds (a rate of 1e-300 did not)."""

MISSING: Final = _Missing()

_HEADER_RE = re.compile(r"^\s*(\[\[?)\s*(.+?)\s*\]\]?\s*(#.*)?$")
_KEY_RE = re.compile(r"""^\s*((?:[A-Za-z0-9_-]+|"(?:[^"\\]|\\.)*"|'[^']*')(?:\s*\.\s*(?:[A-Za-z0-9_-]+|"(?:[^"\\]|\\.)*"|'[^']*'))*)\s*=""")
_PART_RE = re.compile(r"""[A-Za-z0-9_-]+|"(?:[^"\\]|\\.)*"|'[^']*'""")
_LINE_IN_MSG = re.compile(r"\(at line (\d+), column \d+\)")


def _split_key(text: str) -> list[str]:
    parts = []
    for m in _PART_RE.finditer(text):
        p = m.group(0)
        if p[0] in "\"'":
            p = p[1:-1]
        parts.append(p)
    return parts


class TomlDoc:
    """A parsed TOML file plus a key-path -> line index.

    Attributes:
        data: the parsed document (``dict``), as tomllib returns it.
        path: the file it came from (None for text with no file).
    """

    def __init__(self, data: dict[str, Any], path: Path | None, text: str = "") -> None:
        self.data = data
        self.path = path
        self._lines: dict[KeyPath, int] = {}
        #: the key path each indexed line sets (a header's table, a ``key = value``'s key)
        self._at_line: dict[int, KeyPath] = {}
        if text:
            self._index(text)

    def _index(self, text: str) -> None:
        current: KeyPath = ()
        counts: dict[KeyPath, int] = {}
        in_multiline: str | None = None
        for lineno, line in enumerate(text.splitlines(), start=1):
            if in_multiline:
                if line.count(in_multiline) % 2 == 1:
                    in_multiline = None
                continue
            stripped = line.strip()
            if not stripped or stripped.startswith("#"):
                continue
            header = _HEADER_RE.match(line)
            if header and not _KEY_RE.match(line):
                parts = tuple(_split_key(header.group(2)))
                if header.group(1) == "[[":
                    idx = counts.get(parts, 0)
                    counts[parts] = idx + 1
                    current = parts + (idx,)
                else:
                    # a sub-table of the latest array-of-tables entry
                    current = self._resolve(parts, counts)
                self._lines.setdefault(current, lineno)
                self._at_line[lineno] = current
                continue
            key = _KEY_RE.match(line)
            if key:
                path = current + tuple(_split_key(key.group(1)))
                self._lines.setdefault(path, lineno)
                self._at_line[lineno] = path
                rest = line[key.end():]
                for quote in ('"""', "'''"):
                    if rest.count(quote) % 2 == 1:
                        in_multiline = quote

    @staticmethod
    def _resolve(parts: tuple[str, ...], counts: dict[KeyPath, int]) -> KeyPath:
        out: list[str | int] = []
        for i, p in enumerate(parts):
            out.append(p)
            n = counts.get(tuple(parts[: i + 1]))
            if n is not None and i < len(parts) - 1:
                out.append(n - 1)
        return tuple(out)

    def line_of(self, path: KeyPath) -> int | None:
        """Return the 1-based line of ``path`` or of its nearest indexed ancestor."""
        while path:
            if path in self._lines:
                return self._lines[path]
            path = path[:-1]
        return None

    def key_at(self, line: int) -> KeyPath | None:
        """The key path the 1-based ``line`` sets (a table header's table, a ``key = value``'s
        key), None for a line that sets none (a comment, a value's continuation)."""
        return self._at_line.get(line)

    def root(self) -> "Table":
        """The whole document as a ``Table``."""
        return Table(self.data, self, ())


def parse_toml(text: str, path: str | Path | None = None) -> TomlDoc:
    """Parse TOML text.

    Raises:
        ProfileError: invalid TOML, with the line tomllib reported; text that starts
            with a byte order mark, named as such (TOML 1.0 allows none).
    """
    p = None if path is None else Path(path)
    if text.startswith("\ufeff"):
        # TOML 1.0 (its ABNF) has no byte order mark and tomllib's error ("Invalid
        # statement") does not say what it saw: name it and the cure
        raise ProfileError("starts with a UTF-8 byte order mark (bytes EF BB BF), which TOML does not allow: "
                           "save the file as UTF-8 without a BOM", path=p, line=1)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        msg = str(exc)
        m = _LINE_IN_MSG.search(msg)
        line = int(m.group(1)) if m else None
        said = _LINE_IN_MSG.sub('', msg).strip()
        duplicate = _duplicate_key(said, text, line) if line is not None else None
        if duplicate is not None:
            raise ProfileError(duplicate[1], path=p, line=line, key=duplicate[0]) from None
        raise ProfileError(f"invalid TOML: {said}", path=p, line=line) from None
    return TomlDoc(data, p, text)


#: tomllib's words for a key or table given twice (Python 3.11-3.13's tomllib / tomli 2)
_DUPLICATE_SAID = ("Cannot overwrite a value", "Cannot declare ")
_DUPLICATE_INLINE = re.compile(r"Duplicate inline table key '(.*)'")


def _duplicate_key(said: str, text: str, line: int) -> tuple[str, str] | None:
    """(the dotted key, the reason) when tomllib's error ``said`` is a key or a table given
    twice at ``line``, which tomllib reports without naming the key; None for any other error.
    TOML 1.0, "Keys": "Defining a key multiple times is invalid"; "Table": "you cannot define
    a table more than once". Never raises."""
    inline = _DUPLICATE_INLINE.match(said)
    if not said.startswith(_DUPLICATE_SAID) and not inline:
        return None
    doc = TomlDoc({}, None, text)
    path = doc.key_at(line)
    if inline:  # the key inside `name = { a = 1, a = 2 }`: the line's key holds the inline table
        return (_dotted((path or ()) + (inline.group(1),)),
                "given twice in one inline table: TOML allows a key once per table; keep one")
    if path is None:
        return None
    first = doc.line_of(path)
    where = f" (first at line {first})" if first is not None and first != line else ""
    if said.startswith("Cannot declare "):
        return _dotted(path), f"table declared twice{where}: TOML allows a table once; merge the two"
    return _dotted(path), f"given twice{where}: TOML allows a key once per table; keep one"


def _dotted(parts: KeyPath) -> str:
    """The display path of ``parts``: ``run.name``, ``scenario[0].model``, ``emulator.models."a b"``."""
    out = ""
    for p in parts:
        if isinstance(p, int):
            out += f"[{p}]"
        else:
            seg = p if re.fullmatch(r"[A-Za-z0-9_-]+", p) else f'"{p}"'
            out += f".{seg}" if out else seg
    return out


def load_toml(path: str | Path) -> TomlDoc:
    """Read and parse a TOML file.

    Raises:
        ProfileError: the file is missing, unreadable, not UTF-8, or not valid TOML.
    """
    p = Path(path)
    try:
        text = p.read_bytes().decode("utf-8")
    except FileNotFoundError:
        raise ProfileError("file not found", path=p) from None
    except UnicodeDecodeError as exc:
        raise ProfileError(f"not UTF-8 text ({exc.reason} at byte {exc.start})", path=p) from None
    except OSError as exc:
        raise ProfileError(f"cannot read: {exc.strerror}", path=p) from None
    return parse_toml(text, p)


def line_in_file(path: str | Path | None, key: KeyPath) -> int | None:
    """The line of ``key`` (or of its nearest ancestor) in the TOML file ``path``, for an
    error found after the profile was read (a port in use, an address taken); None when
    there is no file or it no longer parses."""
    if path is None:
        return None
    try:
        return load_toml(path).line_of(key)
    except ProfileError:
        return None


#: how close a typo must be to a valid key to be named as its fix (difflib's ratio)
CLOSE_RATIO: Final = 0.75


def closest_key(word: str, known: Iterable[str]) -> str | None:
    """The valid key ``word`` most likely misspells, or None when none is close.

    A case-only difference wins (``Seed`` -> ``seed``); otherwise difflib's
    ``get_close_matches`` with ratio >= ``CLOSE_RATIO`` (0.75: one wrong, missing or
    swapped letter in a word of 4 or more). Shared by "unknown key" messages here and
    the gate's budget grammar (``config._gate_spec.did_you_mean``). Never raises.

    Args:
        word: the key as written.
        known: the keys allowed there.
    """
    names = [n for n in known if n != word]
    by_lower = {n.lower(): n for n in names}
    if word.lower() in by_lower:
        return by_lower[word.lower()]
    close = difflib.get_close_matches(word, names, n=1, cutoff=CLOSE_RATIO)
    return close[0] if close else None


def _describe(value: Any) -> str:
    if isinstance(value, bool):
        return f"{'true' if value else 'false'} (a boolean)"
    if isinstance(value, str):
        return f"{value!r} (a string)"
    if isinstance(value, Mapping):
        return "a table"
    if isinstance(value, list):
        return "an array"
    return repr(value)


class Table:
    """A strict, typed view of one TOML table.

    Getters take the key, a default (``MISSING`` makes the key required) and
    bounds; they raise ``ProfileError`` naming file, line and key path. Each key
    read is remembered; ``done()`` then rejects every other key.

    Args:
        data: the table's mapping.
        doc: the document it belongs to (for file and line), or None.
        path: its key path inside the document, e.g. ``("scenario", 0)``.
    """

    def __init__(self, data: Mapping[str, Any], doc: TomlDoc | None, path: KeyPath) -> None:
        self.data = data
        self.doc = doc
        self.path = path
        self._seen: set[str] = set()

    # -- positions and errors ------------------------------------------------
    def key_name(self, name: str | None = None) -> str:
        """Dotted display path of ``name`` in this table, e.g. ``scenario[0].model``."""
        return _dotted(self.path + ((name,) if name is not None else ()))

    def error(self, name: str | None, reason: str) -> ProfileError:
        """Build a ``ProfileError`` for key ``name`` (None: the table itself)."""
        path = self.path + ((name,) if name is not None else ())
        line = self.doc.line_of(path) if self.doc else None
        file = self.doc.path if self.doc else None
        return ProfileError(reason, path=file, line=line, key=self.key_name(name) or None)

    def has(self, name: str) -> bool:
        """True when the key is present (and marks it as known)."""
        self._seen.add(name)
        return name in self.data

    def keys(self) -> list[str]:
        """All keys present, marking them as known (for free-form tables)."""
        self._seen.update(self.data)
        return list(self.data)

    def _get(self, name: str, default: Any) -> Any:
        self._seen.add(name)
        if name in self.data:
            return self.data[name]
        if default is MISSING:
            typo = self._typo_of(name)
            if typo is not None:  # the typo is the real error: name it, at its own line
                raise self.error(typo, f"unknown key; did you mean {name!r}? "
                                       f"({self.key_name(name)} is required and missing)")
            raise self.error(name, "required key is missing")
        return default

    def _typo_of(self, name: str) -> str | None:
        """A key written here, not (yet) read, that ``name`` is the closest fix of."""
        for key in self.data:
            if key not in self._seen and key != name and closest_key(key, [name]) == name:
                return key
        return None

    # -- typed getters -------------------------------------------------------
    def raw(self, name: str, default: Any = MISSING) -> Any:
        """The value as parsed, unchecked."""
        return self._get(name, default)

    def str(self, name: str, default: Any = MISSING, *, choices: tuple[str, ...] | None = None,
            nonempty: bool = False) -> Any:
        """A string, optionally one of ``choices``."""
        v = self._get(name, default)
        if v is default and name not in self.data:
            return v
        if not isinstance(v, str):
            want = f"one of {', '.join(repr(c) for c in choices)}" if choices else "a string"
            raise self.error(name, f"expected {want}, got {_describe(v)}")
        if choices is not None and v not in choices:
            raise self.error(name, f"expected one of {', '.join(repr(c) for c in choices)}, got {v!r}")
        if nonempty and not v:
            raise self.error(name, "expected a non-empty string, got ''")
        return v

    def bool(self, name: builtins.str, default: Any = MISSING) -> Any:
        """A boolean (``true``/``false``)."""
        v = self._get(name, default)
        if name not in self.data:
            return v
        if not isinstance(v, bool):
            raise self.error(name, f"expected true or false, got {_describe(v)}")
        return v

    def int(self, name: builtins.str, default: Any = MISSING, *, min: int | None = None,
            max: int | None = None) -> Any:
        """An integer within ``[min, max]``."""
        v = self._get(name, default)
        if name not in self.data:
            return v
        want = _range_text("an integer", min, max, integer=True)
        if isinstance(v, bool) or not isinstance(v, int):
            raise self.error(name, f"expected {want}, got {_describe(v)}")
        if (min is not None and v < min) or (max is not None and v > max):
            raise self.error(name, f"expected {want}, got {v}")
        return v

    def number(self, name: builtins.str, default: Any = MISSING, *, min: float | None = None,
               max: float | None = None, positive: builtins.bool = False) -> Any:
        """A finite int or float within bounds (``positive``: strictly > 0); at
        most ``NUMBER_MAX`` when no ``max`` is given, so that a duration in
        seconds always converts to integer nanoseconds."""
        v = self._get(name, default)
        if name not in self.data:
            return v
        if max is None:
            max = NUMBER_MAX
        want = "a positive number" if positive else _range_text("a number", min, max)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise self.error(name, f"expected {want}, got {_describe(v)}")
        if (positive and v <= 0) or (min is not None and v < min) or (max is not None and v > max):
            if positive and v > 0:  # above the bound: "a positive number, got 1e12" would say nothing
                want = f"a positive number (at most {max:g})"
            raise self.error(name, f"expected {want}, got {v}")
        return float(v)

    def str_list(self, name: builtins.str, default: Any = MISSING, *, nonempty: builtins.bool = False) -> Any:
        """An array of strings."""
        v = self._get(name, default)
        if name not in self.data:
            return v
        if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
            raise self.error(name, f"expected an array of strings, got {_describe(v)}")
        if nonempty and not v:
            raise self.error(name, "expected a non-empty array of strings, got []")
        return v

    def table(self, name: builtins.str, *, required: builtins.bool = False) -> "Table":
        """A sub-table (an empty one when absent and not required)."""
        v = self._get(name, MISSING if required else {})
        if not isinstance(v, Mapping):
            raise self.error(name, f"expected a table, got {_describe(v)}")
        return Table(v, self.doc, self.path + (name,))

    def tables(self, name: builtins.str) -> list["Table"]:
        """An array of tables (``[[name]]``), possibly empty."""
        v = self._get(name, [])
        if not isinstance(v, list) or not all(isinstance(x, Mapping) for x in v):
            raise self.error(name, f"expected an array of tables ([[{name}]]), got {_describe(v)}")
        return [Table(x, self.doc, self.path + (name, i)) for i, x in enumerate(v)]

    def done(self, also_allowed: tuple[builtins.str, ...] = ()) -> None:
        """Reject every key no getter asked for.

        Args:
            also_allowed: keys this table may hold that no getter read this time
                (e.g. workload keys of a plain-prompt scenario), named in the hint.

        Raises:
            ProfileError: naming the first unknown key, the closest allowed key not
                already written (``; did you mean 'duration_s'?``, ``closest_key``)
                and the keys allowed here.
        """
        unknown = [k for k in self.data if k not in self._seen]
        if unknown:
            known = set(self._seen) | set(also_allowed)
            allowed = ", ".join(sorted(known)) or "none"
            fix = closest_key(unknown[0], known - set(self.data))
            hint = f"; did you mean {fix!r}?" if fix is not None else ""
            raise self.error(unknown[0], f"unknown key{hint} (expected one of: {allowed})")


def _range_text(kind: str, lo: float | None, hi: float | None, integer: bool = False) -> str:
    if integer and lo in (0, 1):
        text = "a positive integer" if lo == 1 else "a non-negative integer"
        return text if hi is None else f"{text} (at most {int(hi)})"
    if lo is not None and hi is not None:
        return f"{kind} from {lo:g} to {hi:g}"
    if lo is not None:
        return f"{kind} >= {lo:g}"
    if hi is not None:
        return f"{kind} <= {hi:g}"
    return kind
