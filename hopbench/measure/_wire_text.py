"""Text that comes from the wire, made safe to count and to keep (pure: no I/O, no clock).

Role: a server chooses its error codes and messages. Before any of them
becomes a counter name (``failed.<code>``, ``http_error_code.<code>``) or a
kept error sample (summary.json ``error_samples``), it passes through here.

Invariants:

* a counter name built from a wire code is at most ``CODE_MAX_CHARS``
  characters of ``[A-Za-z0-9_-]`` (anything else becomes ``_``);
* no text kept or counted contains one of the run's secrets (the API key and
  the ``header_env`` values the requests carry), as sent or as a server or
  proxy commonly echoes it (JSON-escaped, percent-encoded: see
  :func:`secret_spellings`), or a ``Bearer`` credential: such a code is counted
  as ``redacted``, such a message has it replaced by ``[redacted]``;
* at most ``MAX_CODES`` distinct codes per process are counted by name; the
  rest are folded into ``other`` (and counted in ``folded``), so a server that
  sends a unique code per request cannot make one counter per request;
* at most ``SAMPLES_PER_KIND`` samples per error kind, ``MAX_SAMPLE_KINDS``
  kinds and ``SAMPLE_MAX_CHARS`` characters per sample are kept.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import quote, quote_plus

__all__ = ["CODE_MAX_CHARS", "MAX_CODES", "SAMPLES_PER_KIND", "MAX_SAMPLE_KINDS", "SAMPLE_MAX_CHARS",
           "Scrubber", "secret_spellings", "CodeNames", "ErrorSamples", "describe_exception", "exception_chain",
           "merge_samples"]

CODE_MAX_CHARS = 64
MAX_CODES = 32
SAMPLES_PER_KIND = 3
MAX_SAMPLE_KINDS = 64
SAMPLE_MAX_CHARS = 300
_MIN_SECRET_CHARS = 4  # shorter values would redact ordinary words
_CODE_CHARS = re.compile(r"[^A-Za-z0-9_-]")
_BEARER = re.compile(r"(?i)(bearer\s+)[^\s\"',;}]+")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


_PERCENT = re.compile(r"%[0-9A-F]{2}")
_UNICODE_ESCAPE = re.compile(r"\\u[0-9a-f]{4}")
#: an HTTP credential with its scheme (RFC 9110 section 11.4): "Basic dXNlcjpwYXNz"
_SCHEME_CREDENTIAL = re.compile(r"([A-Za-z][A-Za-z0-9!#$%&'*+.^_`|~-]*)[ \t]+([A-Za-z0-9._~+/=-]+)\Z")


def _json_spellings(text: str) -> set[str]:
    """``text`` as JSON encoders write it inside a string (quotes left off)."""
    out = set()
    for ascii_only in (True, False):
        j = json.dumps(text, ensure_ascii=ascii_only)[1:-1]
        out |= {j, j.replace("/", "\\/")}  # PHP, and some Java encoders, escape "/"
    # \u00e9 (Python, Go) or \u00E9 (Jackson); Go also escapes <, > and & (HTML safety)
    out |= {_UNICODE_ESCAPE.sub(lambda m: m.group(0).upper().replace("\\U", "\\u"), j) for j in list(out)}
    out |= {j.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026") for j in list(out)}
    return out


def secret_spellings(secret: str) -> set[str]:
    """The ways a server or proxy commonly echoes ``secret`` in an error body.

    Args:
        secret: a value the run sends (an API key, a ``header_env`` value).

    Returns:
        A set holding ``secret`` itself; its JSON string escapes (as
        ``json.dumps`` writes it without the quotes, ASCII-only or not, with
        ``/`` written ``\\/``, ``\\uXXXX`` in either case, Go's ``\\u003c``
        for ``<>&``), and the escapes of those escapes (a JSON error body
        quoted inside another one, as gateways wrap an upstream's error); its
        URL percent-encodings (``quote`` with ``safe=""`` and with ``/`` kept,
        ``quote_plus``; hex digits in either case). For a credential with an
        HTTP auth scheme (``"Basic dXNlcjpwYXNz"``, ``"Token abc"``): also the
        spellings of the credential without its scheme and, for ``Basic``, of
        the decoded ``user:pass``, since servers echo those.

    Base64 of a secret is not added: a server only meets base64 in Basic
    auth, where the encoded text is ``user:pass`` (covered above, decoded from
    the value the run sends), and the base64 of a secret that sits inside a
    longer text depends on its offset there, so ``b64encode(secret)`` would
    not match it. Never raises.
    """
    roots = {secret}
    m = _SCHEME_CREDENTIAL.match(secret)
    if m is not None:
        roots.add(m.group(2))
        if m.group(1).lower() == "basic":  # RFC 7617
            try:
                plain = base64.b64decode(m.group(2), validate=True).decode("utf-8")
            except (binascii.Error, UnicodeDecodeError):
                plain = ""
            roots |= {plain} - {""}
    out: set[str] = set()
    for root in roots:
        once = _json_spellings(root)
        out |= once
        for j in once:
            out |= _json_spellings(j)
        for q in (quote(root, safe=""), quote(root), quote_plus(root)):
            out |= {q, _PERCENT.sub(lambda m: m.group(0).lower(), q)}
    return out


class Scrubber:
    """Removes the run's secrets from text, in every spelling :func:`secret_spellings` lists.

    Time linear in the text's length: each spelling is first looked for with
    ``in`` (a fast substring search; the common case, no secret, ends there),
    and only a text that holds one goes through one compiled alternation of
    all spellings, longest first (so a spelling that starts another is not
    matched in its place).

    Args:
        secrets: the secret values (API keys, secret header values); values
            shorter than 4 characters are ignored, and so are spellings
            shorter than 4 characters.
    """

    def __init__(self, secrets: Iterable[str]) -> None:
        spellings: set[str] = set()
        for s in secrets:
            if len(s) >= _MIN_SECRET_CHARS:
                spellings |= secret_spellings(s)
        ordered = sorted((s for s in spellings if len(s) >= _MIN_SECRET_CHARS), key=lambda s: (-len(s), s))
        self._spellings = tuple(ordered)
        self._pattern = re.compile("|".join(map(re.escape, ordered)))

    def _holds_spelling(self, text: str) -> bool:
        return any(s in text for s in self._spellings)

    def has_secret(self, text: str) -> bool:
        """True when ``text`` holds a secret (in any spelling) or a Bearer credential."""
        return self._holds_spelling(text) or _BEARER.search(text) is not None

    def scrub(self, text: str) -> str:
        """``text`` with each secret (in any spelling) and Bearer credential replaced by ``[redacted]``."""
        if self._holds_spelling(text):
            text = self._pattern.sub("[redacted]", text)
        return _BEARER.sub(r"\1[redacted]", text)


class CodeNames:
    """Turns wire error codes into bounded counter-name suffixes.

    Args:
        scrubber: the run's secrets.
        max_codes: distinct names kept before folding into ``other``.
    """

    def __init__(self, scrubber: Scrubber, max_codes: int = MAX_CODES) -> None:
        self._scrubber = scrubber
        self._max = max_codes
        self._seen: set[str] = set()
        self.folded = 0  #: codes counted as "other" because the cap was reached

    def name(self, code: str) -> str:
        """The counter suffix for ``code``: "redacted" when it holds a secret,
        else its safe spelling (``[A-Za-z0-9_-]``, at most 64 characters), or
        "other" once ``max_codes`` distinct names were handed out. Never raises."""
        if not code:
            return "unknown"
        if self._scrubber.has_secret(code):
            safe = "redacted"
        else:
            safe = _CODE_CHARS.sub("_", code)[:CODE_MAX_CHARS]
        if safe in self._seen:
            return safe
        if len(self._seen) >= self._max:
            self.folded += 1
            return "other"
        self._seen.add(safe)
        return safe


class ErrorSamples:
    """The first few error messages or bodies per error kind, scrubbed and bounded.

    Args:
        scrubber: the run's secrets.
    """

    def __init__(self, scrubber: Scrubber) -> None:
        self._scrubber = scrubber
        self.samples: dict[str, list[str]] = {}

    def add(self, kind: str, text: str) -> None:
        """Keep ``text`` as a sample of ``kind`` (a counter name such as
        "http_error.501") unless that kind already has enough. Never raises."""
        kept = self.samples.get(kind)
        if kept is None:
            if len(self.samples) >= MAX_SAMPLE_KINDS:
                return
            kept = self.samples[kind] = []
        if len(kept) >= SAMPLES_PER_KIND:
            return
        text = " ".join(_CONTROL.sub(" ", text).split())  # one line: bodies are often HTML/JSON
        if not text:
            return
        text = self._scrubber.scrub(text)
        if len(text) > SAMPLE_MAX_CHARS:
            text = text[:SAMPLE_MAX_CHARS - 1] + "…"
        if text not in kept:
            kept.append(text)


def merge_samples(parts: Iterable[Mapping[str, Any]]) -> dict[str, list[str]]:
    """Merge ``ErrorSamples.samples`` dicts (e.g. of several workers), keeping the bounds."""
    out: dict[str, list[str]] = {}
    for part in parts:
        for kind, texts in part.items():
            if kind not in out and len(out) >= MAX_SAMPLE_KINDS:
                continue
            kept = out.setdefault(kind, [])
            for t in texts:
                if len(kept) < SAMPLES_PER_KIND and t not in kept:
                    kept.append(str(t))
    return dict(sorted(out.items()))


def describe_exception(exc: BaseException) -> str:
    """One line naming an exception and every cause inside it.

    Walks ``__cause__`` / ``__context__`` (and the first member of exception
    groups), so that a wrapper with an empty or generic message (httpx's
    ``ConnectError`` around ``ssl.SSLCertVerificationError``) does not hide the
    reason: ``"ConnectError: connect failed <- SSLCertVerificationError:
    [SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: self-signed
    certificate"``. Never raises.
    """
    parts: list[str] = []
    for e in exception_chain(exc):
        text = str(e).strip()
        part = f"{type(e).__name__}: {text}" if text else type(e).__name__
        # a cause that only repeats its wrapper's words adds nothing
        said = text or type(e).__name__
        if isinstance(e, OSError) and e.strerror:
            said = str(e.strerror)
        if not parts or said not in parts[-1]:
            parts.append(part)
    return " <- ".join(parts)


def exception_chain(exc: BaseException, limit: int = 8) -> list[BaseException]:
    """``exc`` and what it wraps (cause, else context; an exception group's
    first member), outermost first, at most ``limit`` long, without cycles."""
    out: list[BaseException] = []
    cur: BaseException | None = exc
    while cur is not None and len(out) < limit and cur not in out:
        out.append(cur)
        if isinstance(cur, BaseExceptionGroup) and cur.exceptions:
            cur = cur.exceptions[0]
        else:
            cur = cur.__cause__ or cur.__context__
    return out
