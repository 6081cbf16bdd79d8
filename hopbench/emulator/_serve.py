"""Serving the emulator: hypercorn's trio worker, and ``hopbench serve``.

Role: ``serve`` runs ``EmulatorApp`` under ``hypercorn.trio.serve`` until a
shutdown trigger fires, reporting the address it really bound (port 0 picks a
free port); ``serve_main`` is the command line around it (``hopbench serve``
and ``python -m hopbench.emulator``).

Invariants:
- The ground-truth file is flushed per line and closed when ``serve`` returns,
  on SIGTERM/SIGINT as well (``serve_main`` turns both into a graceful stop).
- With ``--ready-file`` the bound base URL is written to that file atomically
  (write + rename) once the socket listens: the parent of an embedded emulator
  learns the port without racing for it.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path

import trio
from hypercorn.config import Config as HypercornConfig
from hypercorn.trio import serve as hypercorn_serve

from .._errors import ProfileError
from ._app import EmulatorApp
from ._config import EmulatorConfig
from ._record import GroundTruthWriter

__all__ = ["serve", "serve_main"]

_LOG_LEVELS = ("debug", "info", "warning", "error", "critical")


def _hypercorn_config(host: str, port: int, log_level: str) -> HypercornConfig:
    hc = HypercornConfig()
    hc.bind = [f"[{host}]:{port}" if ":" in host else f"{host}:{port}"]
    hc.loglevel = log_level.upper()
    hc.accesslog = None
    # A load test opens many connections at once and keeps them pooled.
    hc.backlog = 4096
    hc.keep_alive_timeout = 120
    hc.graceful_timeout = 2.0
    hc.read_timeout = None
    return hc


async def serve(
    config: EmulatorConfig,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    record_path: Path | None = None,
    log_level: str = "warning",
    shutdown_trigger: Callable[[], Awaitable[None]] | None = None,
    task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve the emulator until ``shutdown_trigger`` returns (or forever).

    Args:
        config: the emulator configuration.
        host: the address to bind (loopback by default).
        port: the TCP port; 0 picks a free one.
        record_path: ground-truth JSON-lines file to append to, or None.
        log_level: hypercorn's error-log level.
        shutdown_trigger: an async callable whose return starts a graceful stop.
        task_status: ``nursery.start`` receives the bound base URL,
            e.g. ``"http://127.0.0.1:41234"``.
    """
    writer = GroundTruthWriter(record_path) if record_path is not None else None
    try:
        app = EmulatorApp(config, writer)
        hc = _hypercorn_config(host, port, log_level)
        async with trio.open_nursery() as nursery:
            binds = await nursery.start(partial(
                hypercorn_serve, app, hc,  # type: ignore[arg-type]
                shutdown_trigger=shutdown_trigger, mode="asgi"))
            task_status.started(binds[0])
    finally:
        if writer is not None:
            writer.close()


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="hopbench serve",
        description="Run the built-in HopBase-style gateway emulator (docs/emulator.md).")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="TCP port, 0 for any free (default 8000)")
    p.add_argument("--config", type=Path, help="emulator TOML config file")
    p.add_argument("--record", type=Path, help="append ground truth (JSON lines) to this file")
    p.add_argument("--log-level", default="warning", choices=_LOG_LEVELS)
    # Used by EmbeddedEmulator: the config as JSON (to_mapping) and where to report the URL.
    p.add_argument("--config-json", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--ready-file", type=Path, help=argparse.SUPPRESS)
    return p


def _write_ready(path: Path, url: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(url + "\n", encoding="utf-8")
    os.replace(tmp, path)


async def _main(args: argparse.Namespace, config: EmulatorConfig) -> None:
    stop = trio.Event()

    async def watch_signals(task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            task_status.started()
            async for _ in signals:
                stop.set()
                return

    async with trio.open_nursery() as nursery:
        await nursery.start(watch_signals)
        url = await nursery.start(partial(
            serve, config, host=args.host, port=args.port, record_path=args.record,
            log_level=args.log_level, shutdown_trigger=stop.wait))
        if args.ready_file is not None:
            _write_ready(args.ready_file, url)
        print(f"hopbench emulator listening on {url}", flush=True)


def serve_main(argv: list[str] | None = None) -> int:
    """``hopbench serve``: parse ``argv`` and serve until SIGINT/SIGTERM.

    Args:
        argv: the arguments after ``serve`` (None: ``sys.argv[1:]``).

    Returns:
        The exit status: 0 after a clean stop, 2 for a bad command line or config.
    """
    parser = _parser()
    args = parser.parse_args(argv)
    if not 0 <= args.port <= 65535:
        parser.error(f"--port: expected 0 to 65535, got {args.port}")
    if args.record is not None:
        try:  # a record file that cannot be written is a usage error, not a listen error
            args.record.parent.mkdir(parents=True, exist_ok=True)
            with open(args.record, "a", encoding="utf-8"):
                pass
        except OSError as exc:
            print(f"hopbench serve: --record {args.record}: cannot write: {exc.strerror or exc}",
                  file=sys.stderr)
            return 2
    try:
        if args.config_json is not None:
            data = json.loads(args.config_json.read_text(encoding="utf-8"))
            config = EmulatorConfig.from_mapping(data, str(args.config_json))
        elif args.config is not None:
            config = EmulatorConfig.from_file(str(args.config))
        else:
            config = EmulatorConfig()
    except (ProfileError, OSError, ValueError) as exc:
        print(f"hopbench serve: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr)
    status = 0
    try:
        trio.run(_main, args, config)
    except* (OSError, OverflowError) as group:
        exc: BaseException = group
        while isinstance(exc, BaseExceptionGroup) and exc.exceptions:  # the innermost cause
            exc = exc.exceptions[0]
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        print(f"hopbench serve: cannot listen on {args.host}:{args.port}: {reason}", file=sys.stderr)
        status = 2
    return status
