"""httpx's AsyncClient as the engine uses it (``transport = "httpx"`` and request building).

Role: I/O plumbing of the engine, one job: an ``httpx.AsyncClient`` whose cookie jar
skips the work httpx does on every response that sets no cookie (measured: ~45 us
a request, benchmarks/README.md). The stream's own code (hopbench.engine._stream)
builds its client from here; nothing else differs from httpx's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import httpx

if TYPE_CHECKING:
    from ._transport import StreamTransport

__all__ = ["_Client", "_Cookies", "send_own"]


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


async def send_own(client: httpx.AsyncClient, own: StreamTransport, request: httpx.Request) -> httpx.Response:
    """``client.send(request, stream=True)`` through hopbench's own transport, without
    httpx's client layers (auth, redirects, event hooks, the response's timer), which a
    load client's requests never use: they cost ~40 us a request, ~5 % of a stream's CPU
    in a replay at 1,000 requests/s. What of them matters is kept: the response's
    request, the cookie jar (a target's Set-Cookie goes into ``client``'s; every later
    request is then built by httpx with it), the request of an httpx error (as httpx's
    ``request_context`` sets it).

    Raises:
        whatever the transport raises (httpx's exceptions, MalformedResponse).
    """
    try:
        response = await own.handle_async_request(request)
    except httpx.RequestError as exc:
        if exc._request is None:  # (httpx's own request_context does the same)
            exc.request = request
        raise
    response.request = request
    client.cookies.extract_cookies(response)  # (_Cookies: nothing without a Set-Cookie)
    return response
