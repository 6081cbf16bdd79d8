"""The ``[[scrape]]`` profile tables: which Prometheus/OpenMetrics endpoints to
scrape during a run (validated before any load; pure, no I/O).

Each table names one endpoint::

    [[scrape]]
    url = "http://127.0.0.1:4000/metrics"   # or "embedded": the embedded emulator's /metrics
    interval_s = 1.0                        # default 1.0, at least 0.1
    timeout_s = 2.0                         # default: min(interval_s, 5.0)
    metrics = ["litellm_", "process_cpu"]   # optional name prefixes (default: every family)
    max_body_bytes = 4_000_000              # default 4 MB: a larger body is refused, counted
    [scrape.headers]                        # literal, non-secret headers
    x-team = "bench"
    [scrape.header_env]                     # header -> environment variable holding its value
    authorization = "LITELLM_METRICS_AUTH"

Secrets never appear in the profile: ``Authorization``-like headers are refused
in ``headers`` and come only from ``header_env`` (only the variable's *name* is
stored here; the value is read when the scraper starts). Units: seconds in the
profile, integer ns in :class:`ScrapeSpec`. Documented in docs/profiles.md and
docs/observability.md.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from ._fields import read_header_env, read_headers
from .._toml import MISSING, Table
from .._units import s_to_ns

__all__ = ["ScrapeSpec", "parse_scrapes", "EMBEDDED", "scrape_headers"]

#: ``url = "embedded"``: the embedded emulator's own ``/metrics``.
EMBEDDED = "embedded"
_METRIC_PREFIX = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*\Z")  # Prometheus data model, metric names
MAX_BODY_BYTES_DEFAULT = 4_000_000


@dataclass(frozen=True, slots=True)
class ScrapeSpec:
    """One validated ``[[scrape]]`` endpoint.

    Attributes:
        url: the endpoint URL, or ``"embedded"``.
        interval_ns: time between scrape starts, ns.
        timeout_ns: the whole scrape's time limit (connect to last byte), ns.
        metrics: metric-family name prefixes to keep (empty: keep all).
        max_body_bytes: a body larger than this is refused and counted "oversize".
        headers: literal header values (never secret).
        header_env: header name -> environment variable holding its value.
    """

    url: str
    interval_ns: int
    timeout_ns: int
    metrics: tuple[str, ...]
    max_body_bytes: int
    headers: Mapping[str, str]
    header_env: Mapping[str, str]

    def keeps(self, family: str) -> bool:
        """True when metric family ``family`` passes the name filter."""
        return not self.metrics or family.startswith(self.metrics)


def _url_problem(url: str) -> str | None:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return f"expected an http:// or https:// URL or \"embedded\", got {url!r}"
    if parts.username or parts.password:
        return "credentials in the URL are not allowed: use scrape.header_env"
    if parts.query or parts.fragment:
        return "a query string or fragment is not allowed (it would be recorded): use scrape.header_env"
    try:
        parts.port
    except ValueError as exc:
        return f"invalid port in {url!r}: {exc}"
    return None


def parse_scrapes(tables: list[Table], env: Mapping[str, str]) -> tuple[ScrapeSpec, ...]:
    """Validate the profile's ``[[scrape]]`` tables.

    Args:
        tables: ``root.tables("scrape")`` (possibly empty).
        env: the environment, to check that ``header_env`` variables are set.

    Returns:
        one ScrapeSpec per table, in profile order.

    Raises:
        ProfileError: a bad key, naming file, line and key path.
    """
    out: list[ScrapeSpec] = []
    for t in tables:
        url = t.str("url", MISSING, nonempty=True)
        if url != EMBEDDED:
            problem = _url_problem(url)
            if problem:
                raise t.error("url", problem)
        interval_s = t.number("interval_s", 1.0, min=0.1)
        timeout_s = t.number("timeout_s", min(interval_s, 5.0), positive=True)
        metrics = t.str_list("metrics", [])
        for m in metrics:
            if not _METRIC_PREFIX.match(m):
                raise t.error("metrics", f"expected metric-name prefixes ([a-zA-Z_:][a-zA-Z0-9_:]*), got {m!r}")
        max_body = t.int("max_body_bytes", MAX_BODY_BYTES_DEFAULT, min=1024, max=1_000_000_000)
        headers = read_headers(t.table("headers"), "[scrape.header_env]")
        header_env = read_header_env(t.table("header_env"), env)
        t.done()
        out.append(ScrapeSpec(url, s_to_ns(interval_s), s_to_ns(timeout_s), tuple(metrics), max_body,
                              headers, header_env))
    return tuple(out)


def scrape_headers(spec: ScrapeSpec, env: Mapping[str, str]) -> dict[str, str]:
    """The headers one scrape sends (secrets resolved from ``env``: never log or record)."""
    # the Prometheus text format (0.0.4): what every exporter serves; OpenMetrics
    # bodies are parsed too when a server sends them anyway
    headers = {"accept": "text/plain;version=0.0.4;q=1,*/*;q=0.1"}
    headers.update({k.lower(): v for k, v in spec.headers.items()})
    headers.update({k.lower(): env[var] for k, var in spec.header_env.items() if var in env})
    return headers
