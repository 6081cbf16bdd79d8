"""Large request bodies (issue 17 item 7): a 4 MB prompt built once and sent as it is,
its write time recorded (request_write), on the embedded emulator."""

from __future__ import annotations

from pathlib import Path

from hopbench.config._profile import parse_profile


def test_large_bodies_are_built_once_and_their_write_time_recorded(tmp_path: Path) -> None:
    from hopbench.driver._single import run_profile

    profile = parse_profile('[run]\nrequests = 3\n[load]\nconcurrency = 1\n[target]\nembedded = true\n'
                            '[emulator]\nttft_ms = 0\ntokens_per_s = 0\nkeepalive_interval_s = 0\n'
                            '[[scenario]]\nname = "big"\nprotocol = "messages"\nmodel = "m"\n'
                            'input_tokens = 1000000\nmax_tokens = 4\nprompt_pool = 1\n', tmp_path / "p.toml",
                            env={})
    (body,) = profile.scenarios[0].bodies  # one distinct prompt: one body, encoded at load
    assert len(body) > 4_000_000
    outcome = run_profile(profile, out_dir=tmp_path / "run")
    scope = outcome.summary["scopes"]["big"]
    assert scope["counters"]["completed"] == 3
    assert scope["lengths"]["input"]["reported_mean"] == 1_000_000
    write = scope["metrics"]["request_write"]
    assert write["count"] == 3 and write["min"] > 0
