"""The zero path: gateway overhead with no gateway at all (``[target].url`` is the emulator
``[upstream].listen`` starts), issue 36. What it reports is the method's own floor.

The upstream's "received" is the kernel's stamp of the request on the emulator's socket
(docs/gateway-overhead.md, "Times from the wire at the upstream"), so ``request_delay`` is
the client's own way from its send stamp to the socket: nothing of the emulator's
scheduling. The tolerance is what the run itself measured, never a wall-clock number: the
client's worst connect (``connect_wait`` max: a closed-loop stream's send stamp is its start,
before its connection opened), its worst lateness (``loop_lag`` max: a client preempted between
its send stamp and its write shows there) and the figure's own error bound (the stamps' move
between clocks).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _servers import free_port

from hopbench.config._profile import parse_profile
from hopbench.driver._single import run_profile
from hopbench.emulator import _rx_stamp


@pytest.mark.slow
@pytest.mark.skipif(not _rx_stamp.ANC_SIZE, reason="needs the kernel's receive stamps (Linux)")
def test_zero_path_request_delay_is_within_what_the_run_measured(tmp_path: Path) -> None:
    port = free_port()
    text = (f'[run]\nrequests = 96\n[run.timeouts]\nidle_s = 10\n[load]\nconcurrency = 16\n'
            f'[target]\nurl = "http://127.0.0.1:{port}"\n'
            f'[upstream]\nlisten = "127.0.0.1:{port}"\nttft_ms = 20\ntokens_per_s = 100\noutput_tokens = 10\n'
            '[[scenario]]\nname = "chat"\nprotocol = "chat"\nmodel = "m"\nprompts = ["hello there"]\n')
    out = tmp_path / "run"
    run_profile(parse_profile(text, tmp_path / "p.toml", env={}), out_dir=out)
    s = json.loads((out / "summary.json").read_text())
    g = s["gateway_overhead"]
    assert g["matched"] == g["streams"] == 96, g
    # every request timed from the wire, none from the emulator's app (the fallback)
    assert g["upstream_received"] == {"wire": 96, "app": 0}, g["upstream_received"]
    m = s["scopes"]["all"]["metrics"]
    rd = m["request_delay"]
    bound_ms = rd["error_bound_ms"]["p99"]  # the wire stamps' clock moves: a bound, kept per sample
    # a closed-loop stream's send stamp is its start: a new connection's request_delay holds its
    # connect (connect_wait), the rest the client's own lateness between its stamp and its write
    tolerance_ms = m["connect_wait"]["max"] + m["loop_lag"]["max"] + bound_ms
    assert rd["p99"] <= tolerance_ms, (rd, m["connect_wait"], m["loop_lag"], bound_ms)
    # the app's stamp is later than the wire's for every request: the old figure was never smaller
    truth = [json.loads(line) for line in (out / "ground_truth.jsonl").read_text().splitlines() if line]
    assert truth and all(x["t0_wire_mono_ns"] <= x["t0_mono_ns"] + x["t0_wire_error_ns"] for x in truth)
