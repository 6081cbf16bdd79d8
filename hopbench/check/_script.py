"""``hopbench check``: drive the emulator behind a gateway through a script, one step at a time.

Role: the impure shell of the check (the checks themselves are ``_checks``):
load the check profile, start the scripted upstream on ``[upstream] listen``,
and for each script step set the emulator's behaviour, send the step's requests
through the gateway (``[target]``) one after another, and join each with the
upstream requests it caused. Then grade every check and write the outputs.

The script (docs/check.md, "What each check does"), per scenario unless noted:

==================  ===========================================  ==============================
step                emulator behaviour                           checks
==================  ===========================================  ==============================
plain               8 tokens, 20/s, usage                        events_unchanged, sdk_parse,
                    (3 streams a scenario)                       no_buffering, usage_passthrough
silence             silent (no byte) after 3 tokens for two      keepalive_cadence (first
                    keepalive intervals and their tolerance      scenario only: SSE, not protocol)
midstream_error     an error event after 3 tokens                midstream_error_shape
disconnect          the connection cut after 3 tokens            disconnect_error_event
http_429/500/503    that status before the stream                fault_translation, retries
cancel              60 tokens; the client closes after 4 events  cancel_propagation
stall (long)        silent past stall_max_s after 3 tokens       stall_handling (first scenario)
==================  ===========================================  ==============================

Invariants:
- Every request carries its id in ``x-hopbench-request-id`` and as the body
  marker; upstream requests are joined by either (``_upstream``).
- Requests go one at a time, so a step's timing is the gateway's, not a queue's.
- A gateway that answers nothing makes the rest of the script moot: after a
  ``plain`` step without one response the other steps are not sent (every check
  is then ``inconclusive``, exit 4).
- An interrupt (SIGINT: ``KeyboardInterrupt``) mid-script ends the script there:
  the finished steps' checks are graded, the others are ``inconclusive`` ("not
  run: interrupted"), the outputs are written marked interrupted, and the run's
  exit status is 130 (docs/check.md, "Statuses and exit codes").
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from .._exit import EXIT_INTERRUPTED
from .._format import plural
from ..config._check_profile import load_check_profile
from ..config._contract_spec import CHECK_IDS, ContractSpec, keepalive_silence_ns
from ..config._records import Profile, Scenario
from ..config._scenario_spec import request_headers
from ..emulator._config import EmulatorConfig
from ..protocols._marker import marked_template
from ..protocols._requests import DEFAULT_PATHS
from . import _checks as ck
from ._probe import send_probe
from ._outputs import write_outputs
from ._result import CheckResult, CheckRun, check_exit_code
from ._sdk import SdkRead, SdkReader, sdk_missing
from ._upstream import ScriptedUpstream

__all__ = ["run_check", "STEPS"]

#: the script's steps in order; each check's step is in ``_STEP_OF``
STEPS: tuple[str, ...] = ("plain", "silence", "midstream_error", "disconnect", "http_429", "http_500", "http_503",
                          "cancel", "stall")
_STEP_OF = {"events_unchanged": "plain", "sdk_parse": "plain", "no_buffering": "plain", "usage_passthrough": "plain",
            "keepalive_cadence": "silence", "midstream_error_shape": "midstream_error",
            "disconnect_error_event": "disconnect", "fault_translation": "http_429", "retries": "http_429",
            "cancel_propagation": "cancel", "stall_handling": "stall"}
#: plain streams a scenario (no_buffering takes the median stream)
PLAIN_STREAMS = 3
#: content events the client reads before it closes (cancel)
CANCEL_AFTER_EVENTS = 4
_STREAM = {"ttft_ms": 100, "tokens_per_s": 20, "output_tokens": 8, "keepalive_interval_s": 0}
_AFTER = 3  # tokens before a mid-stream fault


def _behaviour(step: str, c: ContractSpec) -> dict[str, Any]:
    """The emulator keys (docs/emulator.md) of one script step."""
    faults: dict[str, Any] = {"fault_after_tokens": _AFTER}
    out: dict[str, Any] = dict(_STREAM)
    if step == "silence":
        faults.update(stall=1.0, stall_s=keepalive_silence_ns(c) / 1e9)
    elif step == "stall":
        faults.update(stall=1.0, stall_s=(c.stall_max_ns + max(10 * 10**9, c.stall_max_ns // 5)) / 1e9)
    elif step in ("midstream_error", "disconnect"):
        faults[step] = 1.0
    elif step.startswith("http_"):
        faults.update({step: 1.0, "retry_after_s": 1})
    elif step == "cancel":
        out["output_tokens"] = 60
    out["faults"] = faults
    return out


@dataclass(frozen=True, slots=True)
class _Request:
    scenario: Scenario
    url: str
    headers: dict[str, str]
    head: bytes
    tail: bytes | None  # None: no marker (header join only); head is then the whole body


def _request(profile: Profile, s: Scenario, env: Mapping[str, str] | None) -> _Request:
    """The scenario's first body, asking for usage and room for the script's tokens, split for the marker;
    its headers' secrets from ``env`` (None: os.environ), the environment the profile was checked against."""
    body = json.loads(s.bodies[0])
    body["stream"] = True
    key = "max_output_tokens" if s.protocol == "responses" else "max_tokens"
    body[key] = max(int(body.get(key) or 0), 256)
    if s.protocol == "chat":
        body["stream_options"] = {"include_usage": True}
    raw = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()
    split = marked_template(s.protocol, raw)
    assert profile.target.url is not None
    url = profile.target.url.rstrip("/") + (s.path or DEFAULT_PATHS[s.protocol])
    head, tail = split if split is not None else (raw, None)
    return _Request(s, url, request_headers(profile.target, s.protocol, env), head, tail)


def run_check(profile_path: str | Path, out_dir: str | Path | None = None, *, long: bool = False,
              env: dict[str, str] | None = None, progress: Callable[[str], None] | None = None) -> CheckRun:
    """Hold the gateway of a check profile to its contract (``hopbench check PROFILE``).

    Args:
        profile_path: the check profile: ``[target]`` the gateway, ``[upstream] listen``
            the address the gateway proxies to, ``[[scenario]]`` the protocols, an
            optional ``[contract]`` (docs/check.md).
        out_dir: where to write contract.json, contract.xml (JUnit) and contract.md
            (and the emulator's ground_truth.jsonl); None: a temporary folder, not kept.
        long: also run ``stall_handling`` with the contract's window (minutes).
        env: environment for the profile's ``api_key_env`` / ``header_env``.
        progress: called with one line per finished script step (None: silent).

    Returns:
        The ``CheckRun`` (its ``exit_code`` is the command's; 130 and ``interrupted``
        set when a SIGINT cut the script: its finished steps graded, its outputs written).

    Raises:
        ProfileError: a bad profile or ``[contract]`` (exit 2; nothing was sent).
        UpstreamStartError: ``[upstream] listen`` cannot be bound (exit 2; nothing was sent).
    """
    import tempfile

    t_start = time.monotonic()
    profile, contract = load_check_profile(profile_path, env=env)
    keep = out_dir is not None
    folder = Path(out_dir) if out_dir is not None else Path(tempfile.mkdtemp(prefix="hopbench-check-"))
    folder.mkdir(parents=True, exist_ok=True)
    up_spec = profile.upstream
    assert up_spec is not None and up_spec.host is not None and up_spec.port is not None
    requests = [_request(profile, s, env) for s in profile.scenarios]
    base_cfg = up_spec.config.to_mapping() if up_spec.config is not None else {}
    base = {k: base_cfg[k] for k in ("seed", "api_key") if k in base_cfg}
    wanted = {i for i in CHECK_IDS if i not in contract.skip}
    if not (long or contract.stall_set):
        wanted.discard("stall_handling")
    steps = [s for s in STEPS if any(_STEP_OF[i] == s or (s.startswith("http_") and _STEP_OF[i] == "http_429")
                                     for i in wanted)]
    sdk = SdkReader([s.protocol for s in profile.scenarios]) if "sdk_parse" in wanted else None  # imports the SDKs while the script runs
    try:
        trials, step_s, reads, cut = _run_script(profile, contract, requests, base, steps, folder, sdk, progress)
    finally:
        if sdk is not None:
            sdk.close()
    results = _grade(trials, contract, wanted, step_s, reads, cut, [s.protocol for s in profile.scenarios])
    run = CheckRun(results, check_exit_code(results) if cut is None else EXIT_INTERRUPTED, contract, profile,
                   time.monotonic() - t_start, folder if keep else None, step_s,
                   None if cut is None else "SIGINT", cut)
    if keep:
        write_outputs(folder, run)
    else:
        import shutil

        shutil.rmtree(folder, ignore_errors=True)
    return run


def _run_script(profile: Profile, contract: ContractSpec, requests: list[_Request], base: dict[str, Any],
                steps: list[str], folder: Path, sdk: SdkReader | None,
                progress: Callable[[str], None] | None
                ) -> tuple[dict[str, list[ck.Trial]], dict[str, float], dict[tuple[str, bytes], SdkRead], str | None]:
    """Send the script's steps; returns the trials per step, each step's seconds, the SDK reads
    and where a SIGINT cut the script (None: not interrupted): the first step it left
    unfinished, or "SDK read" after the last one. A cut step's requests are dropped; the
    steps before it keep theirs (the SDK reads are then not made: the user asked to stop)."""
    up_spec = profile.upstream
    assert up_spec is not None and up_spec.host is not None and up_spec.port is not None
    trials: dict[str, list[ck.Trial]] = {}
    step_s: dict[str, float] = {}
    seq = [0]
    reads: dict[tuple[str, bytes], SdkRead] = {}
    try:
        with ScriptedUpstream(up_spec.host, up_spec.port, folder / "ground_truth.jsonl") as upstream, \
                httpx.Client(trust_env=False, verify=profile.target.verify_tls,
                             limits=httpx.Limits(max_connections=4, max_keepalive_connections=4)) as client:
            for step in steps:
                if step != "plain" and trials.get("plain") and all(t.probe.status is None for t in trials["plain"]):
                    break  # the gateway answers nothing: the rest is moot
                t0 = time.monotonic()
                trials[step] = _run_step(step, contract, requests, base, upstream, client, seq)
                step_s[step] = time.monotonic() - t0
                if progress is not None:
                    got = sum(1 for t in trials[step] if t.probe.status is not None)
                    progress(f"{step}: {len(trials[step])} {plural(len(trials[step]), 'request')}, {got} answered, {step_s[step]:.1f} s")
        if sdk is not None:  # the child imported the SDKs while the script ran
            items = sorted({(t.protocol, b) for t in trials.get("plain", [])[::PLAIN_STREAMS]
                            if t.upstream is not None for b in (t.upstream.body, t.probe.body)})
            reads = dict(zip(items, sdk.read_all(items))) if items else {}
    except KeyboardInterrupt:  # SIGINT: grade and write what finished (docs/check.md)
        return trials, step_s, {}, next((s for s in steps if s not in trials), "SDK read")
    return trials, step_s, reads, None


def _run_step(step: str, contract: ContractSpec, requests: list[_Request], base: dict[str, Any],
              upstream: ScriptedUpstream, client: httpx.Client, seq: list[int]) -> list[ck.Trial]:
    """One script step: set the emulator's behaviour, send the step's requests one after
    another (``seq[0]``: the script's request count, numbering their ids) and join each
    with the upstream requests it caused. Returns the step's trials."""
    upstream.use(step, EmulatorConfig.from_mapping({**base, **_behaviour(step, contract)}, "<check>"))
    reqs = requests[:1] if step in ("silence", "stall") else requests
    count = PLAIN_STREAMS if step == "plain" else 1
    timeout_s = 30.0
    if step == "silence":
        timeout_s += keepalive_silence_ns(contract) / 1e9
    elif step == "stall":
        timeout_s += 2 * contract.stall_max_ns / 1e9
    probes = []
    for r in reqs:
        for _ in range(count):
            seq[0] += 1
            rid = f"chk{seq[0]:04d}-{step.replace('_', '-')}"
            body = r.head if r.tail is None else r.head + rid.encode() + r.tail
            p = send_probe(client, r.url, r.headers, body, request_id=rid, protocol=r.scenario.protocol,
                           close_after_events=CANCEL_AFTER_EVENTS if step == "cancel" else None,
                           timeout_s=timeout_s)
            probes.append((r.scenario, p))
    _settle(upstream, step, contract)
    by_id: dict[str, list[Any]] = {}
    for ex in upstream.exchanges(step):
        if ex.request_id is not None:
            by_id.setdefault(ex.request_id, []).append(ex)
    return [ck.Trial(s.name, s.protocol, step, p, tuple(by_id.get(p.request_id, ()))) for s, p in probes]


def _settle(upstream: ScriptedUpstream, step: str, c: ContractSpec) -> None:
    """Wait (briefly) until every upstream request of the step has ended or seen its client leave:
    a cancel reaches the upstream after the client returned."""
    deadline = time.monotonic() + (c.cancel_within_ns / 1e9 + 1.0 if step == "cancel" else 1.0)
    while time.monotonic() < deadline:
        if all(ex.done_ns is not None for ex in upstream.exchanges(step)):
            return
        time.sleep(0.01)


def _grade(trials: dict[str, list[ck.Trial]], c: ContractSpec, wanted: set[str],
           step_s: dict[str, float], reads: dict[tuple[str, bytes], SdkRead],
           cut: str | None = None, protocols: Sequence[str] = ()) -> list[CheckResult]:
    """Every check's result, in ``CHECK_IDS`` order; ``cut``: the step a SIGINT cut (the
    checks of it and of the steps after it, and ``sdk_parse``, whose reads were not made,
    are inconclusive, except an ``sdk_parse`` a full run would skip: no SDK of ``protocols``
    (the scenarios' protocols) is installed)."""
    faults = trials.get("http_429", []) + trials.get("http_500", []) + trials.get("http_503", [])
    plain = trials.get("plain", [])
    run: dict[str, Callable[[], CheckResult]] = {
        "events_unchanged": lambda: ck.events_unchanged(plain),
        "sdk_parse": lambda: ck.sdk_parse(plain[::PLAIN_STREAMS], lambda p, b: reads[(p, b)]),
        "no_buffering": lambda: ck.no_buffering(plain, c),
        "keepalive_cadence": lambda: ck.keepalive_cadence(trials.get("silence", []), c),
        "midstream_error_shape": lambda: ck.midstream_error_shape(trials.get("midstream_error", [])),
        "disconnect_error_event": lambda: ck.disconnect_error_event(trials.get("disconnect", []), c),
        "fault_translation": lambda: ck.fault_translation(faults),
        "cancel_propagation": lambda: ck.cancel_propagation(trials.get("cancel", []), c),
        "usage_passthrough": lambda: ck.usage_passthrough(plain),
        "stall_handling": lambda: ck.stall_handling(trials.get("stall", []), c),
        "retries": lambda: ck.retries(faults, c),
    }
    out: list[CheckResult] = []
    for cid in CHECK_IDS:
        step = _STEP_OF[cid]
        if cid in c.skip:
            out.append(CheckResult(cid, "skip", "", "not run", "skipped by the contract ([contract] skip)"))
        elif cid == "stall_handling" and cid not in wanted:
            out.append(CheckResult(cid, "skip", f"retry or error {c.stall_min_ns / 1e9:g}-{c.stall_max_ns / 1e9:g} s "
                                   "into an upstream silence", "not run",
                                   "a long check: run with --long, or set [contract] stall_min_s / stall_max_s"))
        elif cut is not None and cid == "sdk_parse" and (missing := sdk_missing(protocols)) is not None:
            out.append(CheckResult(cid, "skip", "", "not run", missing))
        elif cut is not None and (step not in trials or cid == "sdk_parse"):
            out.append(CheckResult(cid, "inconclusive", "", "not run",
                                   f"interrupted (SIGINT) at the script's {cut} step: not run"))
        elif step not in trials:
            out.append(CheckResult(cid, "inconclusive", "", "not run",
                                   "the gateway answered none of the plain requests: the script stopped there"))
        else:
            r = run[cid]()
            secs = sum(v for k, v in step_s.items() if k == step or (step == "http_429" and k.startswith("http_")))
            out.append(_with_duration(r, secs * 1000))
    return out


def _with_duration(r: CheckResult, duration_ms: float) -> CheckResult:
    from dataclasses import replace

    return replace(r, duration_ms=round(duration_ms, 1))

