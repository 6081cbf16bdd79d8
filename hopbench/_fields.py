"""HTTP header fields a profile may send: one set of rules for the target and the scrapers.

Pure: no I/O. Used by ``_profile`` (``[target] headers``/``header_env``, and the
response headers of ``run.record_headers``) and ``_scrape_spec`` (``[[scrape]]``
``headers``/``header_env``), so that both refuse the same fields with the same words.
"""

from __future__ import annotations

import re

__all__ = ["FIELD_NAME", "SECRET_HEADERS", "field_problem"]

#: RFC 9110 section 5.1: a field name is a token.
FIELD_NAME = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+\Z")
#: RFC 9110 section 5.5: a field value holds no control characters but HTAB
#: (a line break would end the header: request smuggling, or a broken request).
_FIELD_VALUE_BAD = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")

#: request headers that carry credentials: never written in a profile, only named
#: through an environment variable (lower case)
SECRET_HEADERS: frozenset[str] = frozenset(
    {"authorization", "x-api-key", "api-key", "proxy-authorization", "cookie"})


def field_problem(name: str, value: str) -> str | None:
    """Why ``name: value`` cannot be sent as an HTTP/1.1 header field, or None.

    Args:
        name: the field name as written.
        value: its value (never quoted in the message: it may be a secret).

    Returns:
        A sentence naming the rule broken (RFC 9110 sections 5.1 and 5.5, Latin-1
        for HTTP/1.1), or None when the field can be sent. Never raises.
    """
    if FIELD_NAME.match(name) is None:
        return f"{name!r} is not a valid header name (RFC 9110 section 5.1: letters, digits, !#$%&'*+-.^_`|~)"
    if _FIELD_VALUE_BAD.search(value):
        return "the value holds a control character such as a line break (RFC 9110 section 5.5)"
    try:
        value.encode("latin-1")
    except UnicodeEncodeError:
        return "the value holds characters outside Latin-1, which HTTP/1.1 cannot carry"
    return None
