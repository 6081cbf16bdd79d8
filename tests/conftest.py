"""Shared pytest fixtures (keep this file small and generic)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def hopbench_cli() -> Callable[..., subprocess.CompletedProcess[str]]:
    """Run the real entry point, ``python -m hopbench ARGS``, in a subprocess.

    Returns a function ``(args, env=None, timeout_s=120.0) -> CompletedProcess``
    (text output captured; ``env`` adds to a copy of os.environ; cwd is the repo).
    """

    def run(args: Sequence[str], env: Mapping[str, str] | None = None,
            timeout_s: float = 120.0) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "hopbench", *args], cwd=REPO,
                              env=dict(os.environ, **(env or {})), capture_output=True,
                              text=True, timeout=timeout_s)

    return run
