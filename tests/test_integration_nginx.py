"""Integration (opt-in): the proxy-buffering flag through a real nginx.

Two front doors of one nginx 1.22 (Debian ``nginx-light``) to the embedded
emulator: one streams event by event (``proxy_buffering off``), the other gzips the SSE
body and buffers it (``proxy_buffering on``, the emulator's
``X-Accel-Buffering: no`` ignored): each stream then reaches the client as one
read at its end, a buffering gateway. The flag must fire behind the second and
never behind the first.

Opt-in, since it needs the nginx binary::

    apt-get install -y nginx-light
    .venv/bin/python -m pytest -m nginx tests/test_integration_nginx.py
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from _gateways import BUFFERING, STREAMING, binary, ports, start

from hopbench.config._profile import parse_profile
from hopbench.driver._single import run_profile
from hopbench.emulator import EmbeddedEmulator

pytestmark = [pytest.mark.nginx, pytest.mark.slow]

_EMULATOR = "[emulator]\nttft_ms = 100\ntokens_per_s = 50\noutput_tokens = 20\n"


@pytest.fixture(scope="module", autouse=True)
def _opt_in(request: pytest.FixtureRequest) -> None:
    if "nginx" not in (request.config.getoption("markexpr") or ""):
        pytest.skip("opt-in: run with -m nginx (needs the nginx binary)")
    if binary("nginx") is None:
        pytest.fail("nginx is not installed (apt-get install -y nginx-light)", pytrace=False)


@pytest.fixture(scope="module")
def doors(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """(streaming URL, buffering URL), both in front of one emulator."""
    cfg = parse_profile(_EMULATOR + '[run]\nrequests = 1\n[load]\nconcurrency = 1\n'
                        '[[scenario]]\nprotocol = "chat"\n', "e.toml").emulator_config
    with EmbeddedEmulator(cfg, record_path=None) as emu:
        emu_port = int(emu.base_url.rsplit(":", 1)[1])
        streaming, buffering = ports(2)
        with start("nginx", tmp_path_factory.mktemp("nginx"), emu_port,
                   {streaming: STREAMING, buffering: BUFFERING}) as urls:
            yield urls[0], urls[1]


def _run(url: str, out: Path) -> tuple[dict[str, int], list[dict[str, object]]]:
    profile = parse_profile(f'[run]\nrequests = 8\n[load]\nconcurrency = 4\n[target]\nurl = "{url}"\n'
                            '[[scenario]]\nprotocol = "chat"\nmodel = "hopbench-fast"\n', out / "p.toml", env={})
    run_profile(profile, out_dir=out / "run")
    summary = json.loads((out / "run" / "summary.json").read_text())
    lines = [json.loads(x) for x in (out / "run" / "streams.jsonl").read_text().splitlines()]
    return summary["scopes"]["all"]["counters"], lines


def test_nginx_buffering_gateway_is_flagged_and_streaming_one_is_not(
        doors: tuple[str, str], tmp_path: Path) -> None:
    streaming, buffering = doors
    (tmp_path / "s").mkdir()
    (tmp_path / "b").mkdir()
    ok, _ = _run(streaming, tmp_path / "s")
    assert ok.get("completed") == 8
    assert ok.get("proxy_buffering_suspected", 0) == 0
    bad, lines = _run(buffering, tmp_path / "b")
    assert bad.get("completed") == 8
    assert bad.get("proxy_buffering_suspected", 0) + bad.get("client_lagged", 0) == 8
    assert bad.get("proxy_buffering_suspected", 0) >= 6, (bad, [x["client_lag_ns"] for x in lines])
