"""What counts as a real terminal signal, and how an in-band error is named.

Role: small pure helpers shared by the protocol decoders (issue 13 items 1
and 9). A stop / finish reason, status, error code or error type only counts
when it is really present: ``""``, whitespace, null, booleans, numbers (except
integer error codes) and containers only look present. An error with both a
code and a type is named by the more specific of the two.
"""

from __future__ import annotations

__all__ = ["as_str", "real", "reason", "error_name", "GENERIC_ERROR_NAMES"]


def as_str(value: object) -> str | None:
    """``value`` as an error code / reason string: str kept, int formatted, else None."""
    if type(value) is str:
        return value
    if type(value) is int:
        return str(value)
    return None


def real(value: object) -> str | None:
    """``value`` as a real signal string, or None when it only looks present.

    A stop / finish reason, status, error code or type is real when it is a
    string with a non-whitespace character (returned stripped) or, for error
    codes, an int (formatted). ``""``, whitespace, None, booleans, floats,
    lists and objects are not signals (issue 13 item 1).
    """
    if type(value) is str:
        value = value.strip()
        return value or None
    if type(value) is int:
        return str(value)
    return None


def reason(value: object) -> str | None:
    """A finish / stop reason or status: ``real`` for strings, None for anything else."""
    return real(value) if type(value) is str else None


GENERIC_ERROR_NAMES: frozenset[str] = frozenset(
    {
        "error", "errors", "api_error", "apierror", "server_error", "internal_error",
        "internal_server_error", "invalid_request_error", "bad_request", "bad_request_error",
        "unknown", "unknown_error", "generic_error", "exception", "none", "null",
        "undefined", "failed", "failure",
    }
)
"""Error names that say nothing about the cause (compared lower-cased)."""


def _specificity(name: str | None) -> int:
    """0 absent, 1 uninformative (purely numeric, or generic), 2 specific."""
    if name is None:
        return 0
    if name.isdigit() or name.lower() in GENERIC_ERROR_NAMES:
        return 1
    return 2


def error_name(code: str | None, etype: str | None) -> str | None:
    """The counter name of an in-band error: the more specific of code and type.

    Rule (issue 13 item 9): rank each as absent < uninformative (purely
    numeric, i.e. an HTTP status in disguise, or generic: ``GENERIC_ERROR_NAMES``)
    < specific; the type wins only when it ranks strictly higher, a tie keeps
    the code. So ``code "400"`` + ``type "no_db_connection"`` gives
    "no_db_connection", ``code 429`` + ``type "server_error"`` keeps "429",
    ``code "rate_limit_exceeded"`` + ``type "invalid_request_error"`` keeps
    the code, and a lone type is used as is.

    Args:
        code: the error's ``code`` as ``real`` returns it, or None.
        etype: the error's ``type`` as ``real`` returns it, or None.

    Returns:
        The chosen name, or None when both are None.
    """
    return etype if _specificity(etype) > _specificity(code) else code
