"""LoadRunner._build_request (issue 17): the request it builds from a cached
template is the one httpx's ``client.build_request`` builds (URL joined with the
base URL, merged headers, timeouts), and httpx's cookie handling still works
once a target sets a cookie (then httpx builds every request itself)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from hopbench.engine import _runner, _stream
from hopbench.config._profile import load_profile
from hopbench.measure._recorder import Recorder
from hopbench.engine._transport import _request_bytes

from _raw_http import read_request


def _runner_for(tmp_path: Path, base_url: str, transport: str = "hopbench") -> _runner.LoadRunner:
    prof = tmp_path / "p.toml"
    prof.write_text("""[run]
name = "t"
requests = 1

[load]
concurrency = 1

[target]
url = "http://127.0.0.1:9"
headers = { x-team = "a", user-agent = "hb-test" }
transport = "TRANSPORT"

[[scenario]]
name = "a"
protocol = "chat"
model = "m"
""".replace("TRANSPORT", transport), encoding="utf-8")
    return _runner.LoadRunner(load_profile(prof), base_url, Recorder(["a"]), Recorder(["a"]))


async def _trace(name: str, info: dict[str, Any]) -> None:
    pass


@pytest.mark.parametrize("transport", ["hopbench", "httpx"])
def test_runner_request_template_matches_httpx_build_request(tmp_path: Path, transport: str) -> None:
    async def main() -> None:
        for base_url in ("http://127.0.0.1:9", "http://127.0.0.1:9/prefix/"):
            runner = _runner_for(tmp_path, base_url, transport)
            async with runner._make_client() as client:
                runner._client = client
                base = runner._headers["chat"]
                for k in range(3):  # the first builds the template, the next reuse it
                    rid = f"w0-{k}"
                    body = b'{"k": %d}' % k
                    got = runner._build_request("/v1/chat/completions", body, base, rid, _trace)
                    want = client.build_request("POST", "/v1/chat/completions", content=body,
                                                headers={**base, _stream.REQUEST_ID_HEADER: rid},
                                                extensions={"trace": _trace})
                    assert got.url == want.url and got.method == want.method == "POST"
                    if transport == "httpx":  # httpx frames the body by the request's own headers
                        assert sorted(got.headers.multi_items()) == sorted(want.headers.multi_items())
                    else:  # hopbench's transport frames it itself: the same bytes on the wire
                        assert sorted(got.headers.multi_items()) == sorted(
                            (k, v) for k, v in want.headers.multi_items() if k != "content-length")
                        assert _request_bytes(got, got.content) == _request_bytes(want, want.content)
                        assert b"content-length: %d\r\n" % len(body) in _request_bytes(got, got.content)
                    assert got.headers["user-agent"] == "hb-test"  # the profile's, not httpx's
                    assert got.content == want.content == body
                    assert got.extensions == want.extensions
                assert len(runner._request_templates) == 1
    trio.run(main)


def test_runner_request_cookies_skip_work_but_are_kept(tmp_path: Path) -> None:
    async def main() -> None:
        runner = _runner_for(tmp_path, "http://127.0.0.1:9")
        async with runner._make_client() as client:
            runner._client = client
            base = runner._headers["chat"]
            req = runner._build_request("/v1/chat/completions", b"{}", base, "w0-1", _trace)
            client.cookies.extract_cookies(httpx.Response(200, request=req))  # no Set-Cookie: nothing
            assert not client.cookies
            client.cookies.extract_cookies(httpx.Response(200, headers={"set-cookie": "s=1; Path=/"},
                                                          request=req))
            assert client.cookies.get("s") == "1"
            # with a cookie in the jar, httpx builds the request (and sends the cookie)
            again = runner._build_request("/v1/chat/completions", b"{}", base, "w0-2", _trace)
            assert again.headers["cookie"] == "s=1"
    trio.run(main)


@pytest.mark.slow
@pytest.mark.parametrize("transport", ["hopbench", "httpx"])
async def test_runner_request_cookies_and_large_bodies_reach_the_wire(transport: str) -> None:
    """End to end over 127.0.0.1 (review of the direct send to hopbench's transport):
    a cookie the target sets is sent back on later requests, and a body of several
    MB (past the transport's 64 KiB one-buffer size) arrives whole with its
    Content-Length, on both transports."""
    from functools import partial

    seen: list[tuple[str | None, str | None, int]] = []  # (cookie, content-length, body bytes read)
    sse = (b'data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":'
           b'{"content":"hi"},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n')

    async def handler(stream: trio.SocketStream) -> None:
        buf = b""
        try:
            while (got := await read_request(stream, buf)) is not None:
                head, body, buf = got
                fields = {k.strip().lower(): v.strip().decode("latin-1") for k, _, v in
                          (line.partition(b":") for line in head.split(b"\r\n")[1:])}
                seen.append((fields.get(b"cookie"), fields.get(b"content-length"), len(body)))
                cookie = b"set-cookie: sid=s1; Path=/\r\n" if len(seen) == 1 else b""
                await stream.send_all(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n" + cookie
                                      + b"content-length: %d\r\n\r\n" % len(sse) + sse)
        except trio.BrokenResourceError:
            pass
        finally:
            await stream.aclose()

    pad = "x" * 3_000_000
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(partial(trio.serve_tcp, handler, 0, host="127.0.0.1"))
        url = f"http://127.0.0.1:{listeners[0].socket.getsockname()[1]}"
        from hopbench.config._profile import parse_profile

        profile = parse_profile(
            f'[run]\nrequests = 3\n[load]\nconcurrency = 1\n[target]\nurl = "{url}"\n'
            f'transport = "{transport}"\n[[scenario]]\nprotocol = "chat"\nmodel = "m"\n'
            f'extra = {{ pad = "{pad}" }}\n', "p.toml", env={})
        rec = Recorder(["chat-m"])
        with trio.fail_after(60):
            await _runner.LoadRunner(profile, url, rec, Recorder(["chat-m"])).run()
        nursery.cancel_scope.cancel()
    assert rec.snapshot().counter("all", "completed") == 3
    assert [c for c, _, _ in seen] == [None, "sid=s1", "sid=s1"]
    assert all(n > 3_000_000 and cl == str(n) for _, cl, n in seen)
