"""The checks' rules on hand-made trials (hopbench.check._checks, pure): what passes, what fails,
what is inconclusive and why; the exit status; the outputs. No network, no clock."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

from hopbench.check import CheckResult, check_exit_code
from hopbench.check._checks import (Trial, cancel_propagation, events_unchanged, fault_translation,
                                    keepalive_cadence, midstream_error_shape, no_buffering, retries, sdk_parse, stall_handling,
                                    usage_passthrough)
from hopbench.check._sdk import SdkRead
from hopbench.check._probe import Probe
from hopbench.check._upstream import Exchange
from hopbench.config._contract_spec import ContractSpec

MS = 1_000_000
S = 1_000_000_000
C = ContractSpec()


def _chunk(i: int) -> bytes:
    return b'data: {"choices":[{"index":0,"delta":{"content":"t%d"}}]}\n\n' % i


def _trial(up: list[tuple[int, bytes]], cl: list[tuple[int, bytes]], *, status: int = 200,
           closed_ns: int | None = None, up_end: int | None | str = "last", disconnect_ns: int | None = None,
           attempts: int = 1, protocol: str = "chat", headers: dict[str, str] | None = None,
           up_status: int = 200, up_headers: dict[str, str] | None = None, ended_ns: int | None = None) -> Trial:
    ex = [Exchange("r1", "b", "/v1/chat/completions", 0, up_status, up_headers or {}, list(up),
                   (up[-1][0] if up else 0) if up_end == "last" else up_end, disconnect_ns)  # type: ignore[arg-type]
          for _ in range(attempts)]
    p = Probe("r1", protocol, 0, status, headers or {}, list(cl), closed_ns,
              ended_ns if ended_ns is not None else (cl[-1][0] if cl else 0))
    return Trial("s", protocol, "b", p, tuple(ex))


def test_events_unchanged_comments_may_be_added_and_reframed() -> None:
    up = [(i * 50 * MS, _chunk(i)) for i in range(5)]
    cl = [(i * 50 * MS + MS, b": keepalive\n\n" + _chunk(i).replace(b"\n", b"\r\n")) for i in range(5)]
    assert events_unchanged([_trial(up, cl)]).status == "pass"


def test_events_unchanged_fails_on_an_added_done_and_names_the_event() -> None:
    up = [(i * MS, _chunk(i)) for i in range(3)]
    cl = up + [(9 * MS, b"data: [DONE]\n\n")]  # LiteLLM on Responses streams
    r = events_unchanged([_trial(up, cl)])
    assert r.status == "fail" and "event 3 differs" in r.observed and "1 not from the upstream" in r.observed
    assert r.samples[0]["client"] == "data: [DONE]" and r.samples[0]["upstream"] is None


def test_no_upstream_request_is_inconclusive_not_fail() -> None:
    t = _trial([], [(MS, _chunk(0))])
    t = Trial(t.scenario, t.protocol, t.behaviour, t.probe, ())
    r = events_unchanged([t])
    assert r.status == "inconclusive" and "the upstream saw no request" in (r.why or "")


def test_midstream_error_shape_names_a_cut_before_the_error_apart_from_a_swallowed_error() -> None:
    err = b'data: {"error":{"message":"boom","type":"server_error","code":"server_error"}}\n\n'
    up = [(i * MS, _chunk(i)) for i in range(3)] + [(3 * MS, err)]
    assert midstream_error_shape([_trial(up, list(up))]).status == "pass"
    swallowed = midstream_error_shape([_trial(up, up[:3])])  # every content event, the error dropped
    assert swallowed.status == "fail" and swallowed.why == "s: no error event reached the client"
    cut = midstream_error_shape([_trial(up, up[:1])])  # the stream ended after its first event
    assert cut.status == "fail"
    assert cut.why == "s: the gateway cut the stream after 1 of the upstream's 4 events, before its error event"
    assert midstream_error_shape([_trial(up, up, status=502)]).why == "s: the status is not 200"


def test_no_buffering_a_constant_delay_is_the_gateways_own_a_batch_is_held() -> None:
    up = [(i * 100 * MS, _chunk(i)) for i in range(8)]
    steady = [(t + 20 * MS, b) for t, b in up]  # 20 ms each: its own per-event delay
    assert no_buffering([_trial(up, steady)] * 3, C).status == "pass"
    batch = [(800 * MS, b"".join(b for _, b in up))]  # all at the end: nginx proxy_buffering on
    r = no_buffering([_trial(up, batch)] * 3, C)
    assert r.status == "fail" and "first chunk held 800.0 ms" in r.observed


def test_keepalive_cadence_measures_the_clients_longest_silence_inside_the_upstreams() -> None:
    c = ContractSpec(keepalive_interval_ns=2 * S, keepalive_tolerance_ns=S // 2)
    up = [(0, _chunk(0)), (6 * S, _chunk(1))]
    every_s = [(0, _chunk(0))] + [(k * S, b": ka\n\n") for k in range(1, 6)] + [(6 * S, _chunk(1))]
    assert keepalive_cadence([_trial(up, every_s)], c).status == "pass"
    none = [(0, _chunk(0)), (6 * S, _chunk(1))]
    r = keepalive_cadence([_trial(up, none)], c)
    assert r.status == "fail" and "6000.0 ms" in (r.why or "")
    inside = [(0, _chunk(0)), (S, b'data: {"a":\n: ka\n'), (2 * S, b": ka\n"), (3 * S, b"data: 1}\n\n"),
              (4 * S, b": ka\n\n"), (5 * S, b": ka\n\n"), (6 * S, _chunk(1))]
    r = keepalive_cadence([_trial(up, inside)], c)
    assert r.status == "fail" and "comments inside an event" in (r.why or "")
    assert keepalive_cadence([], ContractSpec(keepalive_interval_ns=0)).status == "skip"


def test_cancel_propagation_only_blames_an_upstream_still_writing() -> None:
    up = [(i * 50 * MS, _chunk(i)) for i in range(10)]
    # the upstream had finished (450 ms) before the client closed (600 ms): not the gateway's fault
    r = cancel_propagation([_trial(up, up[:4], closed_ns=600 * MS, up_end=450 * MS)], C)
    assert r.status == "inconclusive" and "no longer writing" in (r.why or "")
    # ... also when the gateway closed the finished upstream's connection later (a buffering nginx)
    r = cancel_propagation([_trial(up, up[:4], closed_ns=600 * MS, up_end=450 * MS, disconnect_ns=900 * MS)], C)
    assert r.status == "inconclusive", r
    # still writing at the close (160 ms), ran to its end: the cancel never reached it
    r = cancel_propagation([_trial(up, up[:4], closed_ns=160 * MS, up_end=450 * MS)], C)
    assert r.status == "fail" and "6 writes after the close" in r.observed
    # reached it 30 ms after the close
    stopped = [x for x in up if x[0] <= 150 * MS]
    r = cancel_propagation([_trial(stopped, up[:4], closed_ns=160 * MS, up_end=None, disconnect_ns=190 * MS)], C)
    assert r.status == "pass" and "30.0 ms" in r.observed


def test_stall_handling_window_and_a_silence_passed_through() -> None:
    c = ContractSpec(stall_min_ns=90 * S, stall_max_ns=150 * S, stall_set=True)
    up = [(0, _chunk(0)), (200 * S, _chunk(1))]
    errored = [(0, _chunk(0)), (100 * S, b'data: {"error":{"message":"stuck","code":"server_error"}}\n\n')]
    assert stall_handling([_trial(up, errored, ended_ns=100 * S)], c).status == "pass"
    late = [(0, _chunk(0)), (170 * S, b'data: {"error":{"message":"stuck","code":"server_error"}}\n\n')]
    assert stall_handling([_trial(up, late, ended_ns=170 * S)], c).status == "fail"
    through = [(0, _chunk(0)), (200 * S, _chunk(1) + b'data: {"choices":[{"index":0,"delta":{},'
                                                    b'"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n')]
    r = stall_handling([_trial(up, through, ended_ns=200 * S)], c)
    assert r.status == "fail" and "waited out the whole stall" in (r.why or "")


def test_fault_translation_and_retries() -> None:
    body = b'{"error":{"type":"rate_limit_error","code":"rate_limit_exceeded","message":"slow down"}}'
    ok = _trial([(0, body)], [(MS, body)], status=429, up_status=429, headers={"retry-after": "1"},
                up_headers={"retry-after": "1"})
    assert fault_translation([ok]).status == "pass"
    rewritten = _trial([(0, body)], [(MS, b'{"detail":"error"}')], status=500, up_status=429,
                       up_headers={"retry-after": "1"})
    r = fault_translation([rewritten])
    assert r.status == "fail" and "status 429 became 500" in (r.why or "") and "Retry-After dropped" in (r.why or "")
    assert retries([_trial([(0, body)], [(MS, body)], attempts=3)], ContractSpec(max_attempts=3)).status == "pass"
    r = retries([_trial([(0, body)], [(MS, body)], attempts=4)], ContractSpec(max_attempts=3))
    assert r.status == "fail" and "4 upstream attempts > 3" in (r.why or "")


def test_usage_passthrough_compares_with_the_upstreams_usage() -> None:
    usage = b'data: {"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":7,"total_tokens":12}}\n\n'
    up = [(0, _chunk(0)), (MS, usage), (2 * MS, b"data: [DONE]\n\n")]
    assert usage_passthrough([_trial(up, up)]).status == "pass"
    other = [(0, _chunk(0)), (MS, usage.replace(b'"completion_tokens":7', b'"completion_tokens":9')),
             (2 * MS, b"data: [DONE]\n\n")]
    r = usage_passthrough([_trial(up, other)])
    assert r.status == "fail" and "7" in r.observed and "9" in r.observed


def test_sdk_parse_says_its_reason_once_not_in_both_observed_and_why() -> None:
    # issue 39: a skip (no SDK) and a fail printed the same sentence as observed and as why
    up = [(0, _chunk(0)), (MS, b"data: [DONE]\n\n")]
    missing = sdk_parse([_trial(up, up)], lambda p, b: SdkRead("", missing="the openai SDK is not installed"))
    assert missing.status == "skip" and missing.why == "s: the openai SDK is not installed"
    assert "not installed" not in missing.observed
    answers = {True: SdkRead("openai 9", {"text": "t0"}), False: SdkRead("openai 9", {"text": "t1"})}
    cl = [(0, _chunk(1)), (MS, b"data: [DONE]\n\n")]
    other = sdk_parse([_trial(up, cl)], lambda p, b: answers[b == _chunk(0) + b"data: [DONE]\n\n"])
    assert other.status == "fail" and other.why is not None and "t1" in other.why and "t1" not in other.observed


def test_check_exit_code_rule() -> None:
    def r(status: str) -> CheckResult:
        return CheckResult("x", status, "e", "o")  # type: ignore[arg-type]
    assert check_exit_code([r("pass"), r("skip"), r("inconclusive")]) == 0
    assert check_exit_code([r("pass"), r("fail")]) == 1
    assert check_exit_code([r("skip"), r("inconclusive")]) == 4  # nothing could be checked
    assert check_exit_code([]) == 4


def test_outputs_round_trip(tmp_path: Path) -> None:
    from hopbench.check import CheckRun, junit_xml, markdown, write_outputs
    from hopbench.config._profile import parse_profile

    profile = parse_profile('[run]\nrequests = 1\n[load]\nconcurrency = 1\n[target]\nurl = "http://127.0.0.1:1"\n'
                            '[[scenario]]\nname = "c"\nprotocol = "chat"\nmodel = "m"\nprompts = ["x"]\n', env={})
    results = [CheckResult("events_unchanged", "fail", "same | bytes", "event 3 differs", "event 3 differs"),
               CheckResult("sdk_parse", "inconclusive", "e", "o", "no SDK"), CheckResult("retries", "pass", "e", "o")]
    run = CheckRun(results, 1, C, profile, 1.5)
    write_outputs(tmp_path, run)
    doc = json.loads((tmp_path / "contract.json").read_text())
    assert [c["status"] for c in doc["checks"]] == ["fail", "inconclusive", "pass"]
    assert doc["contract"]["source"] == "HopBase" and doc["counts"] == {"pass": 1, "fail": 1, "skip": 0,
                                                                        "inconclusive": 1}
    suite = ET.fromstring(junit_xml(run).split("?>", 1)[1])
    assert suite.get("failures") == "1" and suite.get("skipped") == "1"
    assert markdown(run).index("events_unchanged") < markdown(run).index("retries")  # failures first
    assert "same \\| bytes" in markdown(run)
