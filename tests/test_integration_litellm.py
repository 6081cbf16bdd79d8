"""Integration (slow, opt-in): ``hopbench run`` through the LiteLLM proxy in front of llmock.

A real gateway as the system under test (docs/real-servers.md):
llmock 0.2.2 on one 127.0.0.1 port, LiteLLM proxy 1.108.7 (``litellm[proxy]``,
about 750 MB, its own virtual environment in the test cache) on another,
mapping ``gpt-4o-mini`` to llmock's OpenAI routes and ``claude-sonnet-4-5`` to
its Anthropic prefix. The master key is generated at test time and reaches
hopbench only through the environment (``target.api_key_env``).

Opt-in: these tests are skipped unless the marker expression selects them::

    .venv/bin/python -m pytest -m litellm tests/test_integration_litellm.py

(CI's plain ``pytest`` skips them.) An install failure fails the tests unless
``HOPBENCH_SKIP_NETWORK_INSTALL=1`` is set, as for llmock.

Checked: all three protocols stream through the gateway and complete, with
usage, in every scope the outcomes add up to the streams started; with faults
queued at llmock (429s, disconnects), the errors reach hopbench's counters and
still add up. LiteLLM drops the ``event:`` lines of the Responses stream, so
that scope also checks that hopbench decodes data-only Responses events.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from _servers import LITELLM_REQUIREMENT, LLMOCK_REQUIREMENT, ServerProcess, ensure_venv, free_port

pytestmark = [pytest.mark.litellm, pytest.mark.slow]

OUTCOMES = ("completed", "failed", "truncated", "timeout", "http_error", "connect_error", "cancelled")
KEY_ENV = "HOPBENCH_TEST_LITELLM_KEY"
PROTOCOLS = ("chat", "responses", "messages")
MODELS = {"chat": "gpt-4o-mini", "responses": "gpt-4o-mini", "messages": "claude-sonnet-4-5"}


@pytest.fixture(scope="module", autouse=True)
def _opt_in(request: pytest.FixtureRequest) -> None:
    if "litellm" not in (request.config.getoption("markexpr") or ""):
        pytest.skip("opt-in: run with -m litellm (installs ~750 MB)")


@pytest.fixture(scope="module")
def master_key() -> str:
    return "sk-local-" + secrets.token_hex(16)


@pytest.fixture(scope="module")
def llmock_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    bin_dir = ensure_venv("llmock-0.2.2", LLMOCK_REQUIREMENT)
    port = free_port()
    log = tmp_path_factory.mktemp("llmock") / "llmock.log"
    argv = [str(bin_dir / "llmock"), "serve", "--host", "127.0.0.1", "--port", str(port),
            "--log-level", "warning", "--tool-mode", "off"]
    with ServerProcess(argv, f"http://127.0.0.1:{port}/health", log):
        yield f"http://127.0.0.1:{port}"


@pytest.fixture(scope="module")
def litellm_url(llmock_url: str, master_key: str,
                tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    bin_dir = ensure_venv("litellm-1.108.7", LITELLM_REQUIREMENT)
    d = tmp_path_factory.mktemp("litellm")
    # JSON is valid YAML: no YAML writer needed. Retries off, so that every
    # upstream 429 reaches the client (LiteLLM would otherwise retry it).
    config = {
        "model_list": [
            {"model_name": "gpt-4o-mini",
             "litellm_params": {"model": "openai/gpt-4o-mini", "api_base": f"{llmock_url}/v1",
                                "api_key": "sk-llmock-upstream"}},
            {"model_name": "claude-sonnet-4-5",
             "litellm_params": {"model": "anthropic/claude-sonnet-4-5",
                                "api_base": f"{llmock_url}/anthropic",
                                "api_key": "sk-llmock-upstream"}},
        ],
        "litellm_settings": {"telemetry": False, "num_retries": 0},
        "router_settings": {"num_retries": 0},
    }
    (d / "litellm.yaml").write_text(json.dumps(config, indent=1), encoding="utf-8")
    port = free_port()
    argv = [str(bin_dir / "litellm"), "--config", str(d / "litellm.yaml"),
            "--host", "127.0.0.1", "--port", str(port)]
    env = {"LITELLM_MASTER_KEY": master_key, "LITELLM_LOCAL_MODEL_COST_MAP": "True",
           "LITELLM_TELEMETRY": "False"}
    with ServerProcess(argv, f"http://127.0.0.1:{port}/health/liveliness", d / "litellm.log",
                       env=env, start_timeout_s=120):
        yield f"http://127.0.0.1:{port}"


@pytest.fixture
def admin(llmock_url: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=llmock_url, timeout=10) as client:
        client.post("/_llmock/reset").raise_for_status()
        yield client
        client.post("/_llmock/reset").raise_for_status()


def _profile(url: str, requests: int) -> str:
    scenarios = "".join(
        f'\n[[scenario]]\nname = "{p}"\nprotocol = "{p}"\nmodel = "{MODELS[p]}"\nmax_tokens = 32\n'
        + ("include_usage = true\n" if p == "chat" else "")
        for p in PROTOCOLS)
    return f"""
[run]
name = "litellm"
requests = {requests}
seed = 9
grace_s = 20
[run.timeouts]
connect_s = 5
first_byte_s = 30
idle_s = 15
total_s = 60
[load]
concurrency = 4
[target]
url = "{url}"
api_key_env = "{KEY_ENV}"
{scenarios}"""


def _run(hopbench_cli: Any, tmp_path: Path, url: str, key: str, requests: int) -> dict[str, Any]:
    profile = tmp_path / "profile.toml"
    profile.write_text(_profile(url, requests), encoding="utf-8")
    out = tmp_path / "out"
    proc = hopbench_cli(["run", str(profile), "--out", str(out), "--quiet"],
                        env={KEY_ENV: key}, timeout_s=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert key not in json.dumps(summary)  # the secret is never recorded
    return summary


def _assert_add_up(summary: dict[str, Any], requests: int) -> None:
    started = 0
    for scope in (*PROTOCOLS, "all"):
        c = summary["scopes"][scope]["counters"]
        assert sum(c.get(k, 0) for k in OUTCOMES) == c["started"], (scope, c)
        assert c.get("cancelled", 0) == 0, (scope, c)
        if scope != "all":
            started += c["started"]
    assert started == requests == summary["scopes"]["all"]["counters"]["started"]


def test_litellm_run_all_protocols_complete(litellm_url: str, admin: httpx.Client, master_key: str,
                                            hopbench_cli: Any, tmp_path: Path) -> None:
    summary = _run(hopbench_cli, tmp_path, litellm_url, master_key, 60)
    _assert_add_up(summary, 60)
    for p in PROTOCOLS:
        c = summary["scopes"][p]["counters"]
        assert c["started"] > 0, (p, c)
        assert c["completed"] == c["started"], (p, c)
        assert c.get("tokens.output.completed", 0) >= c["completed"], (p, c)
        assert summary["scopes"][p]["metrics"]["ttft"]["count"] == c["completed"]


def test_litellm_run_upstream_faults_add_up(litellm_url: str, admin: httpx.Client, master_key: str,
                                            hopbench_cli: Any, tmp_path: Path) -> None:
    admin.post("/_llmock/scenario", json={"behaviors": [
        {"type": "fail", "status": 429, "retry_after": 1, "times": 3},
        {"type": "stream_fault", "kind": "disconnect", "after_chunks": 3, "times": 2},
    ]}).raise_for_status()
    summary = _run(hopbench_cli, tmp_path, litellm_url, master_key, 40)
    _assert_add_up(summary, 40)
    c = summary["scopes"]["all"]["counters"]
    # How a gateway surfaces an upstream 429 (status, retries) and a mid-stream
    # disconnect (cut body, or an error event in a 200 stream) is its choice;
    # what must hold is that every fault is counted as a non-completion.
    assert c.get("http_error", 0) >= 1, c
    assert c["completed"] <= 40 - 3, c
