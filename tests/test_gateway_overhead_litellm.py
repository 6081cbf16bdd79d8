"""Integration (slow, opt-in): gateway overhead through the LiteLLM proxy, retries enabled.

LiteLLM proxy 1.108.7 (``litellm[proxy]``, about 750 MB, its own virtual
environment in the test cache, as in test_integration_litellm.py) in front of
hopbench's emulator, which the run starts as ``[upstream]``; LiteLLM retries
(``num_retries = 2``) what the emulator's injected 429s and 500s answer.

Opt-in::

    .venv/bin/python -m pytest -m litellm tests/test_gateway_overhead_litellm.py

Checked: every client stream is matched with its upstream request(s) (LiteLLM
drops the ``x-hopbench-request-id`` header, so through the body marker), the
gateway's retries are counted with the upstream faults that triggered them, and
the fault matrix is filled. (LiteLLM also drops the ``event:`` lines of the
Responses stream: hopbench decodes the data-only events, see
test_integration_litellm.py.)
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest
from _servers import LITELLM_REQUIREMENT, ServerProcess, ensure_venv, free_port

from hopbench.config._profile import parse_profile
from hopbench.driver._single import run_profile

pytestmark = [pytest.mark.litellm, pytest.mark.slow]
KEY_ENV = "HOPBENCH_TEST_LITELLM_KEY"


@pytest.fixture(scope="module", autouse=True)
def _opt_in(request: pytest.FixtureRequest) -> None:
    if "litellm" not in (request.config.getoption("markexpr") or ""):
        pytest.skip("opt-in: run with -m litellm (installs ~750 MB)")


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, int, str]]:
    """(LiteLLM URL, the emulator port it proxies to, its master key)."""
    bin_dir = ensure_venv("litellm-1.108.7", LITELLM_REQUIREMENT)
    d = tmp_path_factory.mktemp("litellm")
    emu = free_port()
    key = "sk-local-" + secrets.token_hex(16)
    config = {  # JSON is valid YAML
        "model_list": [
            {"model_name": "gpt-emu", "litellm_params": {
                "model": "openai/gpt-emu", "api_base": f"http://127.0.0.1:{emu}/v1", "api_key": "sk-emu"}},
            {"model_name": "claude-emu", "litellm_params": {
                "model": "anthropic/claude-emu", "api_base": f"http://127.0.0.1:{emu}", "api_key": "sk-emu"}},
        ],
        "litellm_settings": {"telemetry": False, "num_retries": 2},
        "router_settings": {"num_retries": 2, "retry_after": 0},
    }
    (d / "litellm.yaml").write_text(json.dumps(config, indent=1), encoding="utf-8")
    port = free_port()
    argv = [str(bin_dir / "litellm"), "--config", str(d / "litellm.yaml"), "--host", "127.0.0.1",
            "--port", str(port)]
    env = {"LITELLM_MASTER_KEY": key, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_TELEMETRY": "False"}
    with ServerProcess(argv, f"http://127.0.0.1:{port}/health/liveliness", d / "litellm.log",
                       env=env, start_timeout_s=120):
        yield f"http://127.0.0.1:{port}", emu, key


def test_litellm_retries_are_counted_and_the_fault_matrix_filled(
        gateway: tuple[str, int, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url, emu, key = gateway
    text = f"""
[run]
requests = 40
grace_s = 20
[run.timeouts]
first_byte_s = 30
idle_s = 15
[load]
concurrency = 4
[target]
url = "{url}"
api_key_env = "{KEY_ENV}"
[upstream]
listen = "127.0.0.1:{emu}"
ttft_ms = 50
tokens_per_s = 200
output_tokens = 16
[upstream.faults]
http_429 = 0.1
http_500 = 0.1
retry_after_s = 0
[[scenario]]
name = "chat"
protocol = "chat"
model = "gpt-emu"
max_tokens = 32
include_usage = true
[[scenario]]
name = "messages"
protocol = "messages"
model = "claude-emu"
max_tokens = 32
"""
    monkeypatch.setenv(KEY_ENV, key)  # the runner reads the key from the environment
    profile = parse_profile(text, tmp_path / "p.toml")
    run_profile(profile, out_dir=tmp_path / "run")
    s = json.loads((tmp_path / "run" / "summary.json").read_text())
    g = s["gateway_overhead"]
    assert g["match_rate"] == 1.0, g
    assert g["matched_by"]["marker"] > 0, g  # LiteLLM drops the id header: the body marker matches
    assert g["retried_streams"] >= 1, g
    assert set(g["retry_triggers"]) <= {"http_429", "http_500"}, g
    assert sum(sum(row.values()) for row in g["fault_matrix"].values()) == g["matched"]
    assert g["per_event"] is True and s["scopes"]["all"]["metrics"]["added_ttft"]["count"] > 0
    print(json.dumps({k: g[k] for k in ("matched_by", "retried_streams", "retry_triggers", "fault_matrix",
                                        "events", "buffering", "usage")}, indent=1))
    print({m: s["scopes"]["all"]["metrics"][m]["p50"] for m in
           ("request_delay", "first_event_delay", "added_ttft", "event_delay", "added_e2e")})
