"""The Ray engine on a local Ray instance (2 CPUs), against the emulator's ground truth.

Skipped only when Ray is not installed and this is not CI; in CI (CI=true) a
missing Ray fails the run (install it: pip install 'hopbench[ray]').
"""

from __future__ import annotations

import collections
import importlib.util
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hopbench._errors import UsageError
from hopbench.config._profile import parse_profile

_HAVE_RAY = importlib.util.find_spec("ray") is not None
_IN_CI = os.environ.get("CI", "").lower() == "true"

needs_ray = pytest.mark.skipif(
    not _HAVE_RAY and not _IN_CI,
    reason="Ray is not installed (pip install 'hopbench[ray]'); this test always runs in CI")

_PROFILE = """
[run]
name = "ray"
requests = 200
seed = 3
workers = 2
interval_s = 0.5

[load]
mode = "concurrency"
concurrency = 8

[target]
embedded = true

[emulator]
ttft_ms = 5
tokens_per_s = 2000
output_tokens = 8
seed = 5

[[scenario]]
name = "chat"
protocol = "chat"
model = "gpt-emu"
max_tokens = 8
"""


@pytest.fixture(scope="module")
def local_ray() -> Iterator[Any]:
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        yield ray
    finally:
        ray.shutdown()


@pytest.mark.slow
@needs_ray
def test_ray_engine_totals_match_ground_truth(tmp_path: Path, local_ray: Any) -> None:
    from hopbench.driver._ray import run_profile_ray

    out = tmp_path / "run"
    outcome = run_profile_ray(parse_profile(_PROFILE), out_dir=out)
    # (no wall-clock bound: on a busy 2-core machine Ray's start-up alone took over a minute;
    # a run that never ends is caught by CI's own limit, a run that ends short by the counts)
    s = outcome.summary
    assert outcome.complete and outcome.crashed is None, s["warnings"]
    assert s["engine"] == "ray" and s["workers"] == 2 and s["hosts"]
    truth = [json.loads(x) for x in (out / "ground_truth.jsonl").read_text().splitlines()]
    c = s["scopes"]["all"]["counters"]
    detail = s["worker_detail"]
    assert c["started"] == sum(d["started"] for d in detail) == len(truth) == 200
    assert c["completed"] == sum(r["end"] == "completed" for r in truth)
    assert collections.Counter(r["request_id"].split("-")[0] for r in truth) == {"0": 100, "1": 100}
    # intervals were streamed and merged: the timeline adds up to the total
    timeline = [json.loads(x) for x in (out / "timeline.jsonl").read_text().splitlines()]
    assert sum(x["started"] for x in timeline) == 200
    # the tasks' per-stream records came through the hub: one streams.jsonl, start order
    streams = [json.loads(x) for x in (out / "streams.jsonl").read_text().splitlines()]
    assert sorted(r["id"] for r in streams) == sorted(r["request_id"] for r in truth)
    assert [r["start_ns"] for r in streams] == sorted(r["start_ns"] for r in streams)
    assert all(d["state"] == "done" and d["pid"] != os.getpid() for d in detail)
    if Path("/proc/sys/kernel/random/boot_id").exists():
        # local Ray: the tasks run on the driver's machine, so each measures the embedded
        # emulator (same boot id, same process start time) and counts the other as its own
        for d in detail:
            h = d["host_cpu"]
            assert h["emulator_cpu_cores"] is not None and h["emulator_cpu_note"] is None, h
            assert h["client_cpu_cores"] > h["process_cpu_cores"]
        g = s["generator"]
        assert g["emulator_cpu_cores"] is not None and g["client_cpu_cores"] >= g["process_cpu_cores"]
        assert g["saturation"] is not None and g["machine_busy_share"] is not None


def test_ray_missing_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    from hopbench.driver import _ray

    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    with pytest.raises(UsageError, match=r"pip install 'hopbench\[ray\]'"):
        _ray.import_ray()
