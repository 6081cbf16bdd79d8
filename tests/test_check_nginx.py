"""Integration (opt-in): ``hopbench check`` against a real nginx, streaming and buffering.

Two front doors of one nginx 1.22 (Debian ``nginx-light``) to the address where the check starts
its emulator: one streams event by event (``proxy_buffering off``), the other gzips and buffers
the SSE body (``proxy_buffering on``, the emulator's ``X-Accel-Buffering: no`` ignored). Against
the HopBase contract (with a 1 s keepalive interval, so the silence lasts 2.5 s) both fail what
nginx does not do (keepalives, an error event on a cut Messages stream), and only the buffering
door fails ``no_buffering``. docs/check.md has the cards these reproduce.

Opt-in, since it needs the nginx binary::

    apt-get install -y nginx-light
    .venv/bin/python -m pytest -m nginx tests/test_check_nginx.py
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from _gateways import BUFFERING, STREAMING, check_profile, ports, start
from test_integration_nginx import _opt_in  # noqa: F401  (the opt-in: -m nginx, the binary installed)

from hopbench.check import CheckRun, format_table, run_check

pytestmark = [pytest.mark.nginx, pytest.mark.slow]

@pytest.fixture(scope="module")
def doors(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str, int]]:
    """(streaming URL, buffering URL, the emulator's port), nginx started and stopped here."""
    emu, streaming, buffering = ports(3)
    with start("nginx", tmp_path_factory.mktemp("nginx"), emu, {streaming: STREAMING, buffering: BUFFERING}) as urls:
        yield urls[0], urls[1], emu


def _check(tmp: Path, url: str, emu: int) -> CheckRun:
    return run_check(check_profile(tmp, url, emu), tmp / "out", env={})


def test_check_nginx_streaming_keeps_all_but_the_hopbase_extras(tmp_path: Path, doors: tuple[str, str, int]) -> None:
    run = _check(tmp_path, doors[0], doors[2])
    status = {r.id: r.status for r in run.results}
    assert {k for k, v in status.items() if v == "fail"} == {"keepalive_cadence", "disconnect_error_event"}, \
        format_table(run)
    assert status["stall_handling"] == "skip" and run.exit_code == 1
    assert all(v == "pass" for k, v in status.items()
               if k not in ("keepalive_cadence", "disconnect_error_event", "stall_handling"))


def test_check_nginx_buffering_fails_no_buffering(tmp_path: Path, doors: tuple[str, str, int]) -> None:
    run = _check(tmp_path, doors[1], doors[2])
    status = {r.id: r.status for r in run.results}
    assert status["no_buffering"] == "fail", format_table(run)
    assert status["events_unchanged"] == "pass" and status["usage_passthrough"] == "pass"  # gzip undone by the client
    # the client reads nothing before the whole stream is buffered: a cancel cannot be judged
    assert status["cancel_propagation"] == "inconclusive"
