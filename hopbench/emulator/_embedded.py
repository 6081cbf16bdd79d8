"""The embedded emulator: a child process serving for the length of one run.

Role: a profile whose target is ``embedded`` gets its own emulator in another
process (``python -m hopbench.emulator``), so the load generator and the
emulator share neither an event loop nor a core.

Invariants:
- The child binds port 0 and reports the URL it got through a ready file:
  no port is picked by racing.
- ``__enter__`` returns only once ``GET /v1/models`` answers 200; if the child
  dies or does not answer within ``startup_timeout_s`` it raises
  ``EmulatorStartError`` quoting the tail of the child's output.
- ``__exit__`` sends SIGTERM to the child's process group, then SIGKILL after
  ``stop_timeout_s``; the child closes (flushes) the ground-truth file on SIGTERM,
  and every line is flushed as written anyway.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx

from .._errors import HopbenchError
from ._config import EmulatorConfig

__all__ = ["EmbeddedEmulator", "EmulatorStartError"]

_PACKAGE_ROOT = Path(__file__).resolve().parents[2]


class EmulatorStartError(HopbenchError):
    """The embedded emulator's child process died or never answered."""


def _tail(path: Path, max_bytes: int = 4000) -> str:
    try:
        data = path.read_bytes()
    except OSError:
        return ""
    return data[-max_bytes:].decode("utf-8", "replace").strip()


#: tells ``python -m hopbench.emulator`` whose death should stop it
PARENT_PID_ENV = "HOPBENCH_EMULATOR_PARENT_PID"

class EmbeddedEmulator:
    """Run the emulator in a child process for the duration of a ``with`` block.

    On Linux the child also stops (SIGTERM, graceful) when this process dies,
    even by SIGKILL (prctl PR_SET_PDEATHSIG): strictly, when the *thread* that
    entered the block ends, so enter it in a thread that outlives the block.

    Args:
        config: the emulator configuration (handed to the child as JSON).
        record_path: the ground-truth file (JSON lines), or None. The child's
            output goes to ``<record_path stem>.log`` beside it.
        host: the loopback address to bind.
        port: the TCP port to bind; 0 (the default) lets the kernel pick a free
            one. A fixed port is for an emulator that a gateway's config points
            at (``[upstream].listen``, docs/gateway-overhead.md).
        startup_timeout_s: how long to wait for the child to answer.
        stop_timeout_s: how long SIGTERM has before SIGKILL.

    Attributes:
        base_url: ``"http://127.0.0.1:PORT"`` once entered.
        log_path: the file holding the child's stdout and stderr.
        pid: the child's process id while it runs, else None.
    """

    def __init__(self, config: EmulatorConfig, *, record_path: Path | None,
                 host: str = "127.0.0.1", port: int = 0, startup_timeout_s: float = 15.0,
                 stop_timeout_s: float = 5.0) -> None:
        self.config = config
        self.record_path = record_path
        self.host = host
        self.port = port
        self.startup_timeout_s = startup_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self.base_url = ""
        self.log_path: Path | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._tmp: Path | None = None
        #: the child's exit status once stopped (negative: killed by that signal).
        self.exit_status: int | None = None

    def __enter__(self) -> "EmbeddedEmulator":
        self._tmp = Path(tempfile.mkdtemp(prefix="hopbench-emulator-"))
        cfg = self._tmp / "config.json"
        cfg.write_text(json.dumps(self.config.to_mapping()), encoding="utf-8")
        ready = self._tmp / "ready"
        if self.record_path is not None:
            self.record_path.parent.mkdir(parents=True, exist_ok=True)
            self.log_path = self.record_path.with_name(self.record_path.stem + ".log")
        else:
            self.log_path = self._tmp / "emulator.log"
        cmd = [sys.executable, "-m", "hopbench.emulator", "--host", self.host, "--port", str(self.port),
               "--config-json", str(cfg), "--ready-file", str(ready), "--log-level", "warning"]
        if self.record_path is not None:
            cmd += ["--record", str(self.record_path)]
        env = dict(os.environ)
        env[PARENT_PID_ENV] = str(os.getpid())  # the child stops when we die (see __main__)
        env["PYTHONPATH"] = os.pathsep.join(
            [str(_PACKAGE_ROOT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
        try:
            # A SIGINT/SIGTERM (raised as an exception by hopbench's handler)
            # must not land between the fork and ``self._proc`` being set: the
            # child would outlive us. Held back here, it is delivered when the
            # mask is restored, inside this try, and _stop() reaps the child.
            # (The child unblocks them itself first thing: python -m
            # hopbench.emulator.)
            # The mask only holds back signals aimed at this thread: with other
            # threads alive (a progress display, trio's worker threads) the
            # kernel hands a process signal to one of them, and CPython runs the
            # Python handler in the main thread at once. So in the main thread
            # the handlers are swapped for ones that only note the signal, which
            # is raised again once the child is known.
            held = (signal.SIGINT, signal.SIGTERM)
            noted: list[int] = []
            swapped: dict[int, Any] = {}
            if threading.current_thread() is threading.main_thread():
                swapped = {s: signal.signal(s, lambda signum, frame: noted.append(signum)) for s in held}
            mask = signal.pthread_sigmask(signal.SIG_BLOCK, held)
            try:
                with self.log_path.open("ab") as log:
                    self._proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log,
                                                  stderr=subprocess.STDOUT, env=env,
                                                  start_new_session=True)
            finally:
                signal.pthread_sigmask(signal.SIG_SETMASK, mask)
                for sig, handler in swapped.items():
                    signal.signal(sig, handler)
            for sig in noted[:1]:
                signal.raise_signal(sig)
            self._wait_ready(ready)
        except BaseException:
            self._stop()
            raise
        return self

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    def exit_reason(self) -> str | None:
        """Why the emulator's process is gone ("the embedded emulator exited
        (killed by SIGKILL)"), or None while it runs (or before it started).
        Cheap (one ``waitpid`` with WNOHANG): the runner polls it."""
        proc = self._proc
        code = None if proc is None else proc.poll()
        if code is None:
            return None
        if code < 0:
            import signal

            try:
                how = f"killed by {signal.Signals(-code).name}"
            except ValueError:
                how = f"killed by signal {-code}"
        else:
            how = f"exit code {code}"
        return f"the embedded emulator exited ({how})"

    def _wait_ready(self, ready: Path) -> None:
        assert self._proc is not None and self.log_path is not None
        deadline = time.monotonic() + self.startup_timeout_s
        headers = {}
        if self.config.api_key is not None:
            headers["authorization"] = f"Bearer {self.config.api_key}"
        with httpx.Client(trust_env=False, timeout=2.0) as client:
            while time.monotonic() < deadline:
                code = self._proc.poll()
                if code is not None:
                    raise EmulatorStartError(
                        f"the embedded emulator exited with status {code} before it answered;"
                        f" its output ({self.log_path}):\n{_tail(self.log_path)}")
                if ready.exists() and not self.base_url:
                    self.base_url = ready.read_text(encoding="utf-8").strip()
                if self.base_url:
                    try:
                        r = client.get(self.base_url + "/v1/models", headers=headers)
                        if r.status_code == 200:
                            return
                    except httpx.TransportError:
                        pass
                time.sleep(0.02)
        raise EmulatorStartError(
            f"the embedded emulator did not answer GET /v1/models within"
            f" {self.startup_timeout_s:g} s; its output ({self.log_path}):\n{_tail(self.log_path)}")

    def _stop(self) -> None:
        proc = self._proc
        try:
            if proc is not None and proc.poll() is None:
                for sig, wait_s in ((signal.SIGTERM, self.stop_timeout_s), (signal.SIGKILL, 5.0)):
                    try:
                        os.killpg(proc.pid, sig)
                    except ProcessLookupError:
                        break
                    try:
                        proc.wait(timeout=wait_s)
                        break
                    except subprocess.TimeoutExpired:
                        continue
            if proc is not None:
                self.exit_status = proc.wait()
            self._proc = None
        finally:  # a signal raised while waiting (a second Ctrl-C) still removes the folder
            if self._tmp is not None:
                shutil.rmtree(self._tmp, ignore_errors=True)
                self._tmp = None

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._stop()
