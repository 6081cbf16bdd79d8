"""httpx's AsyncClient as the engine uses it (``transport = "httpx"`` and request building).

Role: I/O plumbing of the engine, one job: an ``httpx.AsyncClient`` whose cookie jar
skips the work httpx does on every response that sets no cookie (measured: ~45 us
a request, benchmarks/README.md). The stream's own code (hopbench.engine._stream)
builds its client from here; nothing else differs from httpx's.
"""

from __future__ import annotations

from typing import Any

import httpx

__all__ = ["_Client", "_Cookies"]


class _Cookies(httpx.Cookies):
    """httpx's cookie jar, minus its work on responses that set no cookie.

    httpx hands every response to ``CookieJar.extract_cookies`` (~70 us each,
    wrapping the request and response for urllib), which finds nothing to do
    when there is no Set-Cookie header (RFC 6265 section 5.2; Set-Cookie2 is
    obsolete, RFC 6265 section 9.4, and urllib ignores it by default).
    """

    def extract_cookies(self, response: httpx.Response) -> None:
        if "set-cookie" in response.headers:
            super().extract_cookies(response)


class _Client(httpx.AsyncClient):
    """httpx's AsyncClient with ``_Cookies`` as its jar (otherwise the same)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.cookies = super().cookies  # the jar httpx made, as a _Cookies

    @property
    def cookies(self) -> httpx.Cookies:
        return self._jar

    @cookies.setter
    def cookies(self, cookies: Any) -> None:
        self._jar: httpx.Cookies = _Cookies(cookies)
