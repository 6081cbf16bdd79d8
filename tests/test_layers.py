"""Import direction goes one way (STYLE.md §1): the pure core never imports the
runner, trio or httpx, and the public surface is curated (STYLE.md §2)."""

from __future__ import annotations

import subprocess
import sys

import pytest

import hopbench

PURE = ["hopbench.sse", "hopbench.protocols", "hopbench._meter", "hopbench._recorder", "hopbench._hdr",
        "hopbench._toml", "hopbench._errors", "hopbench._workload",
        "hopbench._lengths", "hopbench._dataset"]
HIGH = ["hopbench._runner", "hopbench._run", "hopbench.cli", "hopbench._transport", "trio", "httpx"]


@pytest.mark.parametrize("module", PURE)
def test_layers_pure_core_imports_no_io(module: str) -> None:
    code = (f"import sys, {module}; bad = [m for m in {HIGH!r} if m in sys.modules]; "
            "print(','.join(bad)); sys.exit(1 if bad else 0)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, f"{module} pulls in: {proc.stdout.strip()} {proc.stderr[-500:]}"


def test_layers_public_names_are_exported() -> None:
    for name in hopbench.__all__:
        assert hasattr(hopbench, name), name
    public = {n for n in dir(hopbench) if not n.startswith("_")}
    modules = {"sse", "protocols", "emulator", "cli"}
    assert public - modules <= set(hopbench.__all__), public - modules - set(hopbench.__all__)
