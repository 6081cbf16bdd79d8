"""Install and run third-party servers for the integration tests (127.0.0.1 only).

Role: test support, not product code. Each server lives in its own virtual
environment under a cache folder (``$HOPBENCH_TEST_CACHE``, default
``~/.cache/hopbench-test``), created once with ``python -m venv`` + ``pip
install <pinned requirement>`` and reused while it holds the marker file
written after a successful install (a half-made venv is rebuilt). A file lock
keeps concurrent test runs from installing into the same folder at once.
Versions are the ones checked in docs/real-servers.md.

Policy when the install fails (no registry, no network): the test FAILS,
unless ``HOPBENCH_SKIP_NETWORK_INSTALL=1`` is set, then it is skipped.

``ServerProcess`` starts a server, polls its health URL and always stops it
(SIGTERM, then SIGKILL after a few seconds); its output goes to a log file
(no pipes to leak) whose tail is shown when the server fails to start.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

__all__ = [
    "LLMOCK_REQUIREMENT",
    "LITELLM_REQUIREMENT",
    "cache_root",
    "ensure_venv",
    "free_port",
    "ServerProcess",
]

LLMOCK_REQUIREMENT = "llmock==0.2.2"
LITELLM_REQUIREMENT = "litellm[proxy]==1.108.7"
_MARKER = ".hopbench-installed"
_INSTALL_TIMEOUT_S = 900.0


def cache_root() -> Path:
    """The folder holding the servers' virtual environments."""
    env = os.environ.get("HOPBENCH_TEST_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "hopbench-test"


def _install_failed(message: str) -> None:
    if os.environ.get("HOPBENCH_SKIP_NETWORK_INSTALL") == "1":
        pytest.skip(f"{message} (skipped: HOPBENCH_SKIP_NETWORK_INSTALL=1)")
    pytest.fail(f"{message} (set HOPBENCH_SKIP_NETWORK_INSTALL=1 to skip instead)", pytrace=False)


def ensure_venv(name: str, requirement: str) -> Path:
    """A virtual environment with ``requirement`` installed; returns its ``bin`` folder.

    Args:
        name: folder name under ``cache_root()``, e.g. "llmock-0.2.2".
        requirement: a pinned pip requirement, e.g. "llmock==0.2.2".

    Raises:
        pytest.fail.Exception (or pytest.skip.Exception, see the module
        docstring) when the environment cannot be created.
    """
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    venv = root / name
    bin_dir = venv / "bin"
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        marker = venv / _MARKER
        if marker.exists() and marker.read_text() == requirement:
            return bin_dir
        shutil.rmtree(venv, ignore_errors=True)
        steps = [[sys.executable, "-m", "venv", str(venv)],
                 [str(bin_dir / "python"), "-m", "pip", "install", "--quiet",
                  "--disable-pip-version-check", requirement]]
        for cmd in steps:
            try:
                proc = subprocess.run(cmd, capture_output=True, text=True, timeout=_INSTALL_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                _install_failed(f"installing {requirement}: {cmd[2]} timed out")
                raise AssertionError("unreachable")
            if proc.returncode != 0:
                tail = (proc.stderr or proc.stdout)[-2000:]
                _install_failed(f"installing {requirement} failed ({' '.join(cmd[:4])}):\n{tail}")
        marker.write_text(requirement)
    return bin_dir


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now (the kernel's choice)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ServerProcess:
    """A server child process, started and health-checked, always stopped.

    Args:
        argv: the command line.
        health_url: polled with GET until it answers 2xx.
        log_path: where stdout and stderr go.
        env: extra environment variables (added to a copy of os.environ).
        start_timeout_s: how long to wait for health before failing.

    Use as a context manager; ``stop()`` is idempotent.
    """

    def __init__(self, argv: Sequence[str], health_url: str, log_path: Path,
                 env: Mapping[str, str] | None = None, start_timeout_s: float = 30.0) -> None:
        self.argv = list(argv)
        self.health_url = health_url
        self.log_path = log_path
        self.env = dict(os.environ, **(env or {}))
        self.start_timeout_s = start_timeout_s
        self._proc: subprocess.Popen[bytes] | None = None
        self._log = None

    def __enter__(self) -> ServerProcess:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def log_tail(self, n_chars: int = 3000) -> str:
        """The end of the server's log."""
        try:
            return self.log_path.read_text(errors="replace")[-n_chars:]
        except OSError:
            return ""

    def start(self) -> None:
        """Start the process and wait for its health URL; fail the test if it never answers."""
        self._log = open(self.log_path, "wb")
        self._proc = subprocess.Popen(self.argv, stdout=self._log, stderr=subprocess.STDOUT,
                                      stdin=subprocess.DEVNULL, env=self.env)
        deadline = time.monotonic() + self.start_timeout_s
        while True:
            if self._proc.poll() is not None:
                self.stop()
                pytest.fail(f"{self.argv[0]} exited with {self._proc.returncode} before it was "
                            f"healthy:\n{self.log_tail()}", pytrace=False)
            try:
                with urllib.request.urlopen(self.health_url, timeout=2) as r:
                    if 200 <= r.status < 300:
                        return
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                self.stop()
                pytest.fail(f"{self.argv[0]} not healthy at {self.health_url} after "
                            f"{self.start_timeout_s:.0f} s:\n{self.log_tail()}", pytrace=False)
            time.sleep(0.2)

    def stop(self) -> None:
        """Terminate (then kill) the process and close its log."""
        proc, self._proc = self._proc, None
        if proc is not None:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=10)
        log, self._log = self._log, None
        if log is not None:
            log.close()
