"""``validate`` refuses whatever ``run`` refuses before its load, naming the profile's key.

Each case is a profile that ``run`` cannot start: ``validate`` must exit 2 naming
``file:line: key``, and ``run`` must exit 2 with no request sent to the target (a
counting HTTP server on 127.0.0.1). Issue 39, item 2.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from hopbench.cli import main


class _Counting(ThreadingHTTPServer):
    daemon_threads = True
    requests = 0


class _Handler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        assert isinstance(self.server, _Counting)
        self.server.requests += 1
        self.send_error(500)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def target() -> Iterator[_Counting]:
    server = _Counting(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def busy_port() -> Iterator[int]:
    """A port another process listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        yield sock.getsockname()[1]


def _profile(url: str, run_extra: str = "", tail: str = "") -> str:
    return (f"[run]\nrequests = 4\n{run_extra}[load]\nconcurrency = 1\n[target]\nurl = \"{url}\"\n"
            '[[scenario]]\nprotocol = "chat"\nmodel = "m"\n' + tail)


#: case -> (the profile's text from the target's URL and a busy port, the key named, its line)
CASES: dict[str, tuple[Callable[[str, int], str], str, int]] = {
    "upstream_record_missing": (lambda url, port: _profile(url, tail='[upstream]\nrecord = "nope.jsonl"\n'),
                                "upstream.record", 11),
    "upstream_with_workers": (lambda url, port: _profile(url, "workers = 2\n",
                                                         '[upstream]\nlisten = "127.0.0.1:1"\n'),
                              "run.workers", 3),
    "metrics_port_in_use": (lambda url, port: _profile(url, f"metrics_port = {port}\n"), "run.metrics_port", 3),
    "upstream_listen_in_use": (lambda url, port: _profile(url, tail=f'[upstream]\nlisten = "127.0.0.1:{port}"\n'),
                               "upstream.listen", 11),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_validate_refuses_what_run_refuses_before_load(case: str, tmp_path: Path, target: _Counting,
                                                        busy_port: int, capsys: pytest.CaptureFixture[str]) -> None:
    text, key, line = CASES[case]
    path = tmp_path / "p.toml"
    path.write_text(text(f"http://127.0.0.1:{target.server_address[1]}", busy_port))
    assert main(["validate", str(path)]) == 2
    captured = capsys.readouterr()
    assert f"p.toml:{line}: {key}: " in captured.err and ": ok" not in captured.out
    assert main(["run", str(path), "--out", str(tmp_path / "run"), "--quiet", "--no-report"]) == 2
    assert f"p.toml:{line}: {key}: " in capsys.readouterr().err
    assert target.requests == 0  # refused before any load


def test_validate_passes_a_runnable_upstream_record(tmp_path: Path, target: _Counting,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "gt.jsonl").write_text("")  # what `hopbench serve --record` creates as it starts
    path = tmp_path / "p.toml"
    path.write_text(_profile(f"http://127.0.0.1:{target.server_address[1]}", tail='[upstream]\nrecord = "gt.jsonl"\n'))
    assert main(["validate", str(path)]) == 0
    assert capsys.readouterr().out.strip() == f"{path}: ok"
