"""A/B arms (hopbench.config._arm_spec, hopbench.views._arm_differences): the [[arm]] tables and their
errors, the runner's alternation under MockClock, the differences computed with
compare's statistics, and a whole run with two embedded emulators on 127.0.0.1."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from hopbench import _exit
from hopbench.engine import _runner
from hopbench.views._arm_differences import add_arm_differences, arm_differences, render_arm_differences
from hopbench._errors import ProfileError
from hopbench.config._profile import parse_profile
from hopbench.measure._recorder import Recorder
from hopbench.driver._single import run_profile
from hopbench.cli import main

from _fake_transport import Plan, fake_transport

MS = 1_000_000
ROOT = Path(__file__).resolve().parents[1]

_SCEN = '[[scenario]]\nprotocol = "chat"\nmodel = "m"\nprompts = ["p0", "p1", "p2", "p3", "p4"]\n'
_HEAD = '[run]\nrequests = 8\n[load]\nconcurrency = 2\n'
_TWO = ('[[arm]]\nname = "direct"\nurl = "http://127.0.0.1:9"\n'
        '[[arm]]\nname = "gateway"\nurl = "http://127.0.0.1:10/"\n')


def _parse(text: str) -> Any:
    return parse_profile(text, "p.toml", env={})


def test_arms_url_arm_keeps_its_emulator_keys_unused() -> None:
    """profiles/ab-arms.toml's "slow" arm was refused once its url was a real target's
    (issue 39 item 3): its emulator keys are now validated, unused, and noted."""
    profile = _parse(_HEAD + _TWO + 'emulator = { ttft_ms = 1 }\n' + _SCEN)
    assert [(a.name, a.emulator_unused, a.emulator_config) for a in profile.arms] == [
        ("direct", False, None), ("gateway", True, None)]


def test_arms_parse_two_targets() -> None:
    p = _parse(_HEAD + _TWO + _SCEN)
    assert [(a.name, a.url) for a in p.arms] == [("direct", "http://127.0.0.1:9"),
                                                 ("gateway", "http://127.0.0.1:10")]
    assert p.scopes == ["direct", "gateway"]
    # budgets name arms (the scopes)
    assert _parse(_HEAD + _TWO + _SCEN + '[gate.scenario.gateway]\n"ttft.p99" = "<= 5s"\n').gate
    # embedded arms get [emulator] with their own keys on top
    p = _parse(_HEAD + '[emulator]\nttft_ms = 40\noutput_tokens = 7\n[[arm]]\nname = "a"\nurl = "embedded"\n'
               '[[arm]]\nname = "b"\nurl = "embedded"\nemulator = { ttft_ms = 90 }\n' + _SCEN)
    a, b = p.arms
    assert a.embedded and b.embedded
    assert a.emulator_config.default.ttft_ms == 40 and b.emulator_config.default.ttft_ms == 90
    assert b.emulator_config.default.output_tokens == a.emulator_config.default.output_tokens


@pytest.mark.parametrize(("arms", "key", "words"), [
    ('[[arm]]\nname = "a"\nurl = "http://127.0.0.1:9"\n', "arm[0]", "two or more"),
    (_TWO.replace('"gateway"', '"direct"'), "arm[1].name", "unique arm name"),
    (_TWO.replace('"gateway"', '"Direct"'), "arm[1].name", "case aside: each names its results files"),
    # [upstream] with arms: that rule, not [upstream]'s own ask for a target url (which arms refuse)
    (_TWO + '[upstream]\nlisten = "127.0.0.1:9"\n', "arm[0]", "cannot be combined yet"),
    (_TWO.replace("http://127.0.0.1:10/", "ftp://x"), "arm[1].url", "http://"),
    (_TWO.replace("http://127.0.0.1:10/", "http://u:p@h"), "arm[1].url", "credentials"),
    (_TWO.replace('name = "gateway"\n', 'name = "gateway"\nprotocol = "messages"\n')
     .replace('name = "direct"\n', 'name = "direct"\nprotocol = "chat"\n'), "arm[1].protocol", "one protocol"),
    (_TWO.replace('name = "gateway"\n', 'name = "gateway"\nprotocol = "messages"\n'), "arm[1].protocol",
     "scenarios send 'chat'"),
    (_TWO.replace('name = "gateway"\n', ''), "arm[1].name", "required"),
    (_TWO.replace('url = "http://127.0.0.1:10/"\n', ''), "arm[1].url", "required"),
    (_TWO.replace('name = "gateway"\n', 'name = "all"\n'), "arm[1].name", "reserved"),
    (_TWO.replace('name = "gateway"\n', 'name = "ALL"\n'), "arm[1].name", "'ALL' is reserved for the whole run"),
    # an arm with a url validates its emulator keys (then leaves them unused)
    (_TWO + 'emulator = { ttft_ms = -1 }\n', "arm[1].emulator.ttft_ms", "expected"),
    (_TWO + 'colour = "red"\n', "arm[1].colour", "unknown"),
    (_TWO + '[target]\nurl = "http://127.0.0.1:11"\n', "target.url", "each arm names its own url"),
    ('[[arm]]\nname = "a"\nurl = "embedded"\n[[arm]]\nname = "b"\nurl = "embedded"\n'
     'emulator = { ttft_ms = -1 }\n', "arm[1].emulator.ttft_ms", "expected"),
    (_TWO + '[gate.scenario.chat-m]\n"ttft.p99" = "<= 5s"\n', "gate.scenario.chat-m", "no arm named"),
    # arms make one scope per arm; objectives, stages and the search judge scenarios
    (_TWO + '[slo]\nttft_ms = 200\n', "slo", "not supported together"),
    (_TWO + '[[stage]]\nconcurrency = 1\nduration_s = 1\n', "stage[0]", "not supported together"),
])
def test_arms_bad_input_names_the_key(arms: str, key: str, words: str) -> None:
    with pytest.raises(ProfileError) as err:
        _parse(_HEAD + arms + _SCEN)
    text = str(err.value)
    assert "p.toml:" in text and key in text and words in text, text


def test_arms_refuse_workers(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ProfileError, match="one process"):
        _parse(_HEAD.replace("[load]", "workers = 2\n[load]") + _TWO + _SCEN)
    path = tmp_path / "p.toml"
    path.write_text(_HEAD + _TWO + _SCEN, encoding="utf-8")
    out = tmp_path / "out"
    assert main(["run", str(path), "--out", str(out), "--workers", "2"]) == _exit.EXIT_INPUT
    assert "A/B arms run in one process" in capsys.readouterr().err and not out.exists()
    assert main(["run", str(path), "--out", str(out), "--target-url", "http://127.0.0.1:9"]) == _exit.EXIT_INPUT
    assert "[[arm]] tables name the targets" in capsys.readouterr().err and not out.exists()
    path.write_text(_HEAD + _TWO.replace("http://127.0.0.1:10/", "nope") + _SCEN, encoding="utf-8")
    assert main(["run", str(path), "--out", str(out)]) == _exit.EXIT_INPUT
    assert "arm[1].url" in capsys.readouterr().err


# -- the runner ----------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["concurrency = 2", 'mode = "rate"\nrate_rps = 10'])
async def test_arms_alternate_with_the_same_requests(autojump_clock: trio.testing.MockClock, mode: str) -> None:
    seen: list[tuple[str, bytes, Any]] = []
    transport = fake_transport(Plan(head_s=0.1), seen)
    profile = _parse(_HEAD.replace("concurrency = 2", mode) + _TWO + _SCEN)
    rec, lines = Recorder(["direct", "gateway"]), []
    await _runner.LoadRunner(profile, "http://127.0.0.1:9", rec, Recorder(["direct", "gateway"]),
                             on_stream=lines.append, arms=[("direct", "http://127.0.0.1:9"),
                                                           ("gateway", "http://127.0.0.1:10")],
                                                           transport_factory=transport).run()
    assert len(seen) == 8
    # sent in turn, in rounds whose order flips (counterbalanced: direct, gateway, then gateway,
    # direct, ...); each round one body to both arms
    a, b = "http://127.0.0.1:9/v1/chat/completions", "http://127.0.0.1:10/v1/chat/completions"
    assert [u for u, _, _ in seen] == [a, b, b, a] * 2
    rounds = [(seen[i][1], seen[i + 1][1]) for i in range(0, 8, 2)]
    assert all(h.get("authorization") is None for _, _, h in seen)  # no key anywhere
    assert all(a == b for a, b in rounds)
    assert len({a for a, _ in rounds}) > 1  # the prompts still vary between rounds (seeded)
    snap = rec.snapshot()
    assert snap.counter("direct", "completed") == 4 and snap.counter("gateway", "completed") == 4
    assert sorted(x["arm"] for x in lines) == ["direct"] * 4 + ["gateway"] * 4
    assert {x["scenario"] for x in lines} == {"chat-m"}


# -- the differences ---------------------------------------------------------------------

def _summary(shift_ms: int) -> dict[str, Any]:
    """A summary with two arms: "b"'s ttft is shifted by ``shift_ms``, itl is the same."""
    rng = random.Random(4)
    rec = Recorder(["a", "b"])
    for arm, shift in (("a", 0), ("b", shift_ms)):
        for _ in range(400):
            rec.record(arm, "ttft", int((50 + shift + rng.gauss(0, 3)) * MS))
            rec.record(arm, "itl", int((10 + rng.gauss(0, 1)) * MS))
            rec.incr(arm, "started")
            rec.incr(arm, "completed")
    from hopbench.driver._results import summary_scopes
    return {"arms": [{"name": "a"}, {"name": "b"}], "scopes": summary_scopes(rec.snapshot())}


def test_arm_differences_use_compare_verdicts() -> None:
    block = arm_differences(_summary(20))
    assert block is not None and block["baseline"] == "a"
    (pair,) = block["pairs"]
    assert (pair["base"], pair["candidate"], pair["worse"]) == ("a", "b", True)
    assert pair["metrics"]["ttft"]["verdict"] == "worse"
    assert pair["metrics"]["ttft"]["change"]["p50"]["rel"] == pytest.approx(0.4, abs=0.05)
    assert pair["metrics"]["itl"]["verdict"] == "same"
    assert pair["rates"]["completion_rate"]["verdict"] == "same"
    text = render_arm_differences(block)
    assert "b against a" in text and "WORSE" in text
    same = arm_differences(_summary(0))
    assert same is not None and not same["pairs"][0]["worse"]
    assert {m["verdict"] for m in same["pairs"][0]["metrics"].values()} == {"same"}
    assert arm_differences({"scopes": {}}) is None


def test_arm_differences_unpaired_sentences_say_why_no_floor() -> None:
    """A small real shift (2 ms on 50: 4 %, under compare's old fixed 5 % floor) is worse, and its
    sentence says why no between-run noise floor applies (a user read "a count or rate" on e2e)."""
    block = arm_differences(_summary(2))
    assert block is not None
    ttft = block["pairs"][0]["metrics"]["ttft"]
    assert ttft["verdict"] == "worse" and ttft["samples_verdict"] == "same"  # the old floor missed it
    reason = ttft["figures"]["p50"]["reason"]
    assert "the arms share one run, interleaved request by request" in reason, reason
    assert "a count or rate" not in reason
    assert "alpha 0.01 after Holm, the arms interleaved in one run" in render_arm_differences(block)


def test_arm_differences_a_buffered_arm_is_never_smoother() -> None:
    """A buffering gateway's streams arrive in one read: itl near 0. The tests alone call it better;
    a buffered stream is worse, never better, on every smoothness figure (issue 38)."""
    rng = random.Random(5)
    rec = Recorder(["direct", "buffered"])
    for arm, itl_ms in (("direct", 20.0), ("buffered", 0.05)):
        for _ in range(200):
            rec.record(arm, "itl", int((itl_ms + abs(rng.gauss(0, itl_ms / 10))) * MS))
            rec.record(arm, "max_silence", int((itl_ms * 3 + abs(rng.gauss(0, 1))) * MS))
            rec.incr(arm, "started")
            rec.incr(arm, "completed")
            if arm == "buffered":
                rec.incr(arm, "proxy_buffering_suspected")
    from hopbench.driver._results import summary_scopes
    scopes = summary_scopes(rec.snapshot())
    block = arm_differences({"arms": [{"name": "direct"}, {"name": "buffered"}], "scopes": scopes})
    assert block is not None
    (pair,) = block["pairs"]
    for name in ("itl", "max_silence"):
        assert pair["metrics"][name]["verdict"] == "worse" and pair["metrics"][name]["buffered"] == "buffered"
    assert pair["worse"] is True and "(buffered buffered)" in render_arm_differences(block)
    # the other way round: the unbuffered candidate is better on them
    back = arm_differences({"arms": [{"name": "buffered"}, {"name": "direct"}], "scopes": scopes})
    assert back is not None and back["pairs"][0]["metrics"]["itl"]["verdict"] == "better"
    assert back["pairs"][0]["worse"] is False


@pytest.mark.slow
def test_arms_embedded_run_end_to_end(tmp_path: Path) -> None:
    text = (ROOT / "profiles" / "ab-arms.toml").read_text(encoding="utf-8")
    # "slow" + 200 ms here (the profile's 20 ms is lost in the noise of a machine whose
    # cores are both busy in a 3 s run): the verdict must not depend on the neighbours
    text = text.replace("duration_s = 8", "duration_s = 3").replace("emulator = { ttft_ms = 60 }",
                                                                     "emulator = { ttft_ms = 240 }")
    assert "ttft_ms = 240" in text
    profile = parse_profile(text, tmp_path / "ab.toml", env={})
    out = run_profile(profile, out_dir=tmp_path / "out")
    summary = add_arm_differences(out.out_dir, out.summary)
    assert summary["complete"] is True, summary["warnings"]
    assert [a["name"] for a in summary["arms"]] == ["fast", "slow"]
    for arm in ("fast", "slow"):
        assert summary["scopes"][arm]["counters"]["completed"] > 10
        assert (out.out_dir / f"ground_truth.{arm}.jsonl").exists()
    on_disk = json.loads((out.out_dir / "summary.json").read_text(encoding="utf-8"))
    # both arms' emulators are hopbench's own: their CPU together, apart from the neighbours'
    assert 0 <= on_disk["generator"]["emulator_cpu_cores"] <= on_disk["generator"]["cpus"]
    pair = on_disk["arm_differences"]["pairs"][0]
    # "slow" adds 200 ms to each first token: a verdict, whatever the machine's load
    assert pair["metrics"]["ttft"]["verdict"] == "worse"
    assert pair["metrics"]["ttft"]["change"]["p50"]["abs"] > 100
    from hopbench.report._page import write_report

    page = write_report(out.out_dir).read_text(encoding="utf-8")
    assert "<h2>A/B arms</h2>" in page and "slow against fast: worse on at least one figure" in page


async def test_arms_send_their_own_keys(autojump_clock: trio.testing.MockClock) -> None:
    seen: list[tuple[str, bytes, Any]] = []
    transport = fake_transport(Plan(head_s=0.1), seen)
    env = {"PROVIDER_KEY": "sk-provider", "GATEWAY_KEY": "gw-key", "TEAM": "blue"}
    arms = _TWO.replace('url = "http://127.0.0.1:9"\n', 'url = "http://127.0.0.1:9"\napi_key_env = "PROVIDER_KEY"\n')
    arms = arms.replace('url = "http://127.0.0.1:10/"\n', 'url = "http://127.0.0.1:10/"\napi_key_env = "GATEWAY_KEY"\n'
                        'header_env = { "x-team" = "TEAM" }\n')
    profile = parse_profile(_HEAD.replace("requests = 8", "requests = 4") + arms + _SCEN, "p.toml", env=env)
    assert profile.arms[0].target.api_key_env == "PROVIDER_KEY"
    await _runner.LoadRunner(profile, "http://127.0.0.1:9", Recorder(["direct", "gateway"]),
                             Recorder(["direct", "gateway"]), env=env,
                             arms=[("direct", "http://127.0.0.1:9"), ("gateway", "http://127.0.0.1:10")],
                             transport_factory=transport).run()
    got = {(u.split("/")[2], h.get("authorization"), h.get("x-team")) for u, _, h in seen}
    assert got == {("127.0.0.1:9", "Bearer sk-provider", None), ("127.0.0.1:10", "Bearer gw-key", "blue")}


def test_arms_keys_are_checked_and_kept_out_of_results() -> None:
    with pytest.raises(ProfileError, match=r"arm\[1\]\.api_key_env.*NOPE is not set"):
        _parse(_HEAD + _TWO + 'api_key_env = "NOPE"\n' + _SCEN)
    with pytest.raises(ProfileError, match=r"arm\[1\]\.headers"):
        _parse(_HEAD + _TWO + 'headers = { authorization = "Bearer x" }\n' + _SCEN)
    with pytest.raises(ProfileError, match=r"arm\[1\]\.headers\.X-Goog-Api-Key: secret headers.*header_env"):
        _parse(_HEAD + _TWO + 'headers = { "X-Goog-Api-Key" = "AIza-x" }\n' + _SCEN)
    from hopbench.config._profile import sanitized

    p = _parse(_HEAD + '[[arm]]\nname = "a"\nurl = "embedded"\n[[arm]]\nname = "b"\nurl = "embedded"\n'
               'emulator = { api_key = "emu-secret" }\n' + _SCEN)
    assert "emu-secret" not in json.dumps(sanitized(p))


@pytest.mark.slow
def test_arms_one_dead_arm_fails_the_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # One arm answers, the other refuses every connection: the A/B result means
    # nothing, so the run exits 4 and says which arm, whatever the other did.
    profile = tmp_path / "dead.toml"
    profile.write_text('[run]\nrequests = 6\n[load]\nconcurrency = 2\n'
                       '[[arm]]\nname = "live"\nurl = "embedded"\n'
                       '[[arm]]\nname = "dead"\nurl = "http://127.0.0.1:9"\n' + _SCEN, encoding="utf-8")
    out = tmp_path / "out"
    assert main(["run", str(profile), "--out", str(out), "--no-report", "--quiet"]) == _exit.EXIT_TARGET_FAILED
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert summary["scopes"]["live"]["counters"]["completed"] > 0
    assert [w for w in summary["warnings"] if w.startswith("arm dead: nothing completed")], summary["warnings"]
    assert "no stream of arm dead completed" in capsys.readouterr().err
