"""HTTP header fields a profile may send: one set of rules for the target and the scrapers.

Pure: no I/O (environment values are handed in). Used by ``_profile`` (``[target] headers``/``header_env``, and the
response headers of ``run.record_headers``) and ``_scrape_spec`` (``[[scrape]]``
``headers``/``header_env``), so that both refuse the same fields with the same words.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping

from .._toml import Table

__all__ = ["FIELD_NAME", "empty_secret", "field_problem", "is_secret_header", "read_headers", "read_header_env"]

#: RFC 9110 section 5.1: a field name is a token.
FIELD_NAME = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+\Z")
#: RFC 9110 section 5.5: a field value holds no control characters but HTAB
#: (a line break would end the header: request smuggling, or a broken request).
_FIELD_VALUE_BAD = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")

#: header names that carry credentials or session state (lower case)
_SECRET_NAMES = frozenset({"authorization", "proxy-authorization", "cookie", "set-cookie"})
#: stems that mark a secret wherever they occur in a name: X-Client-Secret,
#: X-Session-Id, X-Hub-Signature, X-Amz-Credential, Helicone-Auth, WWW-Authenticate
_SECRET_ANYWHERE = re.compile(r"secret|auth|session|passw|credential|signature|cookie|api[-_]?key")
#: "key" and "token" mark a secret only at the end of the name (X-Goog-Api-Key,
#: Ocp-Apim-Subscription-Key, X-Auth-Token, X-Amz-Security-Token, apikey): inside a
#: name they are usually metadata an LLM gateway reports or expects, e.g.
#: x-ratelimit-remaining-tokens, anthropic-ratelimit-tokens-remaining,
#: x-litellm-key-spend, x-portkey-provider
_SECRET_AT_END = re.compile(r"(key|token)\Z")
#: names that end in "key" but hold no secret (a client-chosen request id)
_NOT_SECRET = frozenset({"idempotency-key", "x-idempotency-key"})


def is_secret_header(name: str) -> bool:
    """True when a header named ``name`` may carry a credential or session state.

    The one rule for what a profile may not write out literally (``headers``
    tables: such values come only from ``header_env`` / ``api_key_env``) and
    for what ``run.record_headers`` may not record.

    Args:
        name: a header field name, any case.

    Returns:
        True for ``authorization``, ``proxy-authorization``, ``cookie``,
        ``set-cookie``; any name containing ``secret``, ``auth``, ``session``,
        ``passw``, ``credential``, ``signature``, ``cookie`` or ``api-key`` /
        ``api_key`` / ``apikey``; any name ending in ``key`` or ``token``
        (except ``idempotency-key``). False for e.g. ``content-type``,
        ``x-request-id``, ``anthropic-version``, ``openai-beta``,
        ``x-stainless-retry-count``, ``x-ratelimit-remaining-tokens``.
        Never raises.
    """
    low = name.lower()
    if low in _NOT_SECRET:
        return False
    return (low in _SECRET_NAMES or _SECRET_ANYWHERE.search(low) is not None
            or _SECRET_AT_END.search(low) is not None)


def field_problem(name: str, value: str) -> str | None:
    """Why ``name: value`` cannot be sent as an HTTP/1.1 header field, or None.

    Args:
        name: the field name as written.
        value: its value (never quoted in the message: it may be a secret).

    Returns:
        A sentence naming the rule broken (RFC 9110 sections 5.1 and 5.5; values
        US-ASCII, as httpx sends them), or None when the field can be sent. Never raises.
    """
    if FIELD_NAME.match(name) is None:
        return f"{name!r} is not a valid header name (RFC 9110 section 5.1: letters, digits, !#$%&'*+-.^_`|~)"
    if _FIELD_VALUE_BAD.search(value):
        return "the value holds a control character such as a line break (RFC 9110 section 5.5)"
    if not value.isascii():
        # RFC 9110 section 5.5 leaves obs-text (bytes 0x80-0xFF) opaque and new fields
        # SHOULD be US-ASCII; httpx encodes header values as ASCII and raised mid-run
        # (a crash, exit 3) for a key holding an "é"
        return "the value holds characters outside ASCII (RFC 9110 section 5.5), which hopbench cannot send"
    return None


def empty_secret(value: str) -> bool:
    """True when an environment variable's ``value`` would send an empty header.

    Empty or white space only: HTTP strips a field value's surrounding white space
    (RFC 9110 section 5.5), so ``"  "`` is sent as an empty key too. Never raises.
    """
    return not value.strip(" \t")


def read_headers(ht: Table, where_env: str) -> dict[str, str]:
    """A ``headers`` table: name -> value, each a field HTTP/1.1 can send.

    Args:
        ht: the table (``_toml.Table``: errors carry file, line and key).
        where_env: where the profile names secrets instead, for the message
            (e.g. ``"target.api_key_env or target.header_env"``).

    Raises:
        ProfileError: a value that is not a string, a header :func:`is_secret_header`
            names written out,
            or a field :func:`field_problem` refuses.
    """
    headers: dict[str, str] = {}
    for k in ht.keys():
        v = ht.data[k]
        if not isinstance(v, str):
            raise ht.error(k, f"expected a string header value, got {v!r}")
        if is_secret_header(k):  # its value would be recorded in summary.json and report.html
            raise ht.error(k, f"secret headers may not be written in a profile (the value would be "
                              f"recorded in summary.json and report.html): name an environment variable "
                              f"with {where_env}, e.g. header_env = {{ {json.dumps(k)} = \"MY_VAR\" }}")
        problem = field_problem(k, v)
        if problem is not None:
            raise ht.error(k, problem)
        headers[k] = v
    return headers


def read_header_env(het: Table, env: Mapping[str, str]) -> dict[str, str]:
    """A ``header_env`` table: header name -> the environment variable holding its value.

    Args:
        het: the table.
        env: the environment (``os.environ``); values are checked, never quoted.

    Raises:
        ProfileError: a variable name that is not a non-empty string, a variable
            that is not set or is set but empty (white space only: an empty header
            would be sent; :func:`empty_secret`), or a value :func:`field_problem` refuses.
    """
    header_env: dict[str, str] = {}
    for k in het.keys():
        v = het.data[k]
        if not isinstance(v, str) or not v:
            raise het.error(k, f"expected the name of an environment variable, got {v!r}")
        if v not in env:
            raise het.error(k, f"environment variable {v} is not set")
        if empty_secret(env[v]):
            raise het.error(k, f"environment variable {v} is set but empty (e.g. {v}= on the command "
                               "line): set it to the header's value, or remove the header")
        problem = field_problem(k, env[v])
        if problem is not None:  # never the value itself: it is a secret
            raise het.error(k, f"environment variable {v}: {problem.replace('the value', 'its value')}"
                               " (a trailing newline?)")
        header_env[k] = v
    return header_env
