"""Gateway overhead, per event: a gateway that reorders events, and gateway keepalives during
upstream silences. The tests' delaying proxy (tests/_delay_proxy.py, a real HTTP proxy in its
own process on 127.0.0.1) with ``--swap-at`` / ``--keepalive-ms`` in front of the emulator.
Bounded: a few short streams per test.
"""

from __future__ import annotations

import pytest

import json
from pathlib import Path

from _servers import free_port
from test_gateway_overhead import DelayProxy

from hopbench.config._profile import parse_profile
from hopbench.driver._single import run_profile

MS = 1_000_000


def _profile(target: str, emu_port: int, emulator: str, requests: int) -> str:
    return (f'[run]\nrequests = {requests}\n[run.timeouts]\nidle_s = 10\n[load]\nconcurrency = 2\n'
            f'[target]\nurl = "{target}"\n[upstream]\nlisten = "127.0.0.1:{emu_port}"\n{emulator}'
            '[[scenario]]\nname = "chat"\nprotocol = "chat"\nmodel = "m"\nprompts = ["hello there"]\n')


def _run(tmp_path: Path, emulator: str, requests: int, **proxy: float) -> tuple[dict, DelayProxy]:
    emu_port = free_port()
    with DelayProxy(tmp_path, emu_port, 1.0, **proxy) as gw:  # type: ignore[arg-type]
        profile = parse_profile(_profile(gw.url, emu_port, emulator, requests), tmp_path / "p.toml", env={})
        out = run_profile(profile, out_dir=tmp_path / "run")
    return out.summary, gw


@pytest.mark.slow
def test_reordered_events_are_counted_and_get_no_delay(tmp_path: Path) -> None:
    # chat: SSE event 0 is the role chunk, 1..12 the content events: 3 and 4 swap places
    summary, _ = _run(tmp_path, "ttft_ms = 20\ntokens_per_s = 200\noutput_tokens = 12\n", 8, swap_at=3)
    g = summary["gateway_overhead"]
    truths = [json.loads(x) for x in (tmp_path / "run" / "ground_truth.jsonl").read_text().splitlines()]
    swapped = 0  # streams whose swapped events carry different texts (equal ones cannot be told apart)
    for t in truths:
        texts, pos = [], 0
        for c in t["event_chars"]:
            texts.append(t["text"][pos:pos + c])
            pos += c
        swapped += texts[2] != texts[3]
    assert swapped > 0, "the emulator drew the same token twice in every stream: change the seed"
    ev = g["events"]
    assert ev["reordered"] == swapped, ev
    assert (ev["merged"], ev["split"], ev["dropped"], ev["added"]) == (0, 0, 0, 0), ev
    metrics = summary["scopes"]["all"]["metrics"]
    assert metrics["event_delay"]["count"] == 8 * 12 - swapped
    # no event came sooner than the proxy held it (a bogus delay of a moved event would)
    assert metrics["event_delay"]["min"] >= 1.0
    assert any("reordered the stream" in w for w in summary["warnings"])


SILENT = "ttft_ms = 1200\ntokens_per_s = 100\noutput_tokens = 4\n"  # think time: one silence a stream


@pytest.mark.slow
def test_gateway_keepalives_during_upstream_silences(tmp_path: Path) -> None:
    k_ms = 100.0
    summary, gw = _run(tmp_path, SILENT, 4, keepalive_ms=k_ms)
    g = summary["gateway_overhead"]
    sil = g["silences"]
    assert sil["streams"] == 4 and sil["upstream_silences"] >= 4
    assert sil["injected_keepalives_inside"] >= 4 * 5  # ~11 a stream in 1.2 s of silence
    m = summary["scopes"]["all"]["metrics"]
    # the cadence is the proxy's K, up to its own lateness and the client's loop lag
    tol_ms = 5.0 + gw.pct_ns("late_ns", 0.99) / MS + m["loop_lag"]["p99"]
    assert abs(m["injected_keepalive_interval"]["p50"] - k_ms) <= tol_ms, (m["injected_keepalive_interval"], tol_ms)
    # the client heard something every K ms or so: far less than the silence's length
    assert m["client_silence_in_upstream_silence"]["max"] < m["upstream_silence"]["min"] / 2
    assert sil["longest_client_silence_ms"] < m["upstream_silence"]["min"] / 2


@pytest.mark.slow
def test_no_gateway_keepalives_the_client_hears_the_whole_silence(tmp_path: Path) -> None:
    summary, _ = _run(tmp_path, SILENT, 4)
    g = summary["gateway_overhead"]
    sil = g["silences"]
    assert sil["upstream_silences"] >= 4 and sil["injected_keepalives_inside"] == 0
    m = summary["scopes"]["all"]["metrics"]
    assert "injected_keepalive_interval" not in m or m["injected_keepalive_interval"]["count"] == 0
    # nothing reached the client while the upstream was silent but the bytes written just
    # before it (read up to first_event_delay later): the whole silence, less that
    cs, us = m["client_silence_in_upstream_silence"], m["upstream_silence"]
    assert cs["max"] <= us["max"] * 1.001  # (HDR buckets: 3 significant digits)
    assert cs["p50"] >= us["p50"] - m["first_event_delay"]["max"] - 1.0, (cs, us, m["first_event_delay"])
    assert cs["p50"] > us["min"] / 2  # what the keepalive test shows it is not
