"""The ``[upstream]`` table: the emulator behind a gateway, for gateway overhead.

Role: validate where the gateway's upstream is. Either hopbench starts the
emulator itself on a fixed address that the gateway's own config points at
(``listen``, with the usual ``[emulator]`` keys beside it), or the user started
``hopbench serve --record FILE`` by hand and ``record`` names that file. Pure:
no sockets (binding is checked when the run starts, ``hopbench.driver._single``).
User documentation: docs/gateway-overhead.md.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._toml import Table

__all__ = ["UpstreamSpec", "parse_upstream", "record_missing", "record_override", "UPSTREAM_KEYS"]

#: the table's own keys; every other key is an emulator key ([emulator], docs/emulator.md)
UPSTREAM_KEYS = ("listen", "record")


@dataclass(frozen=True, slots=True)
class UpstreamSpec:
    """Where the gateway's upstream (the emulator) is.

    Attributes:
        host: the address to serve on (``listen``), or None with ``record``.
        port: its TCP port (1..65535), or None with ``record``.
        record: the ground-truth file of an emulator started by hand, or None
            with ``listen`` (the run then writes ``ground_truth.jsonl`` itself).
        config: the emulator configuration (``hopbench.emulator.EmulatorConfig``)
            for ``listen``; None with ``record``.
    """

    host: str | None
    port: int | None
    record: Path | None
    config: Any = None

    @property
    def listen(self) -> str | None:
        """``"host:port"`` as written, or None."""
        return None if self.host is None else f"{self.host}:{self.port}"


def _listen(t: Table) -> tuple[str, int]:
    text = t.str("listen", nonempty=True)
    host, sep, port_s = text.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port_s.isdigit() or not 0 < int(port_s) < 65536:
        raise t.error("listen", f"expected \"HOST:PORT\" with a port 1..65535 (e.g. \"127.0.0.1:9100\"), "
                      f"got {text!r}")
    if host != "localhost":
        try:
            ipaddress.ip_address(host)
        except ValueError:
            raise t.error("listen", f"expected an IP address of this host or localhost, got {host!r}: the "
                          "emulator must run on the host that measures (one monotonic clock)") from None
    return host, int(port_s)


def parse_upstream(t: Table, base: Path, target_url: str | None) -> UpstreamSpec | None:
    """Validate ``[upstream]``; None when the table is absent.

    Args:
        t: the ``[upstream]`` table.
        base: the profile's folder (a relative ``record`` is read from there).
        target_url: ``[target].url`` (must be set: it is the gateway).

    Raises:
        ProfileError: neither or both of ``listen`` and ``record``; a bad
            address; emulator keys beside ``record`` (that emulator was
            configured when it was started); no ``[target].url``; a bad
            emulator key (the emulator's own parser, naming the key); a
            ``record`` that is not an existing file (:func:`record_missing`).
    """
    if not t.data:
        return None
    if target_url is None:
        raise t.error(None, "expected [target].url to be the gateway: [upstream] is the emulator behind it")
    has_listen, has_record = t.has("listen"), t.has("record")
    if has_listen == has_record:
        raise t.error("listen" if has_listen else None,
                      "expected exactly one of listen (hopbench starts the emulator there) or record "
                      "(the ground truth of a `hopbench serve --record FILE` started by hand)")
    if has_record:
        rec = t.str("record", nonempty=True)
        others = [k for k in t.keys() if k != "record"]
        if others:
            raise t.error(others[0], "emulator keys go with listen only: the emulator behind record was "
                          "configured when it was started")
        path = Path(rec)
        path = path if path.is_absolute() else base / path
        missing = record_missing(path)
        if missing:
            raise t.error("record", missing)
        return UpstreamSpec(None, None, path)
    host, port = _listen(t)
    from ..emulator._config import EmulatorConfig  # the emulator owns its keys

    emu = Table({k: v for k, v in t.data.items() if k not in UPSTREAM_KEYS}, t.doc, t.path)
    return UpstreamSpec(host, port, None, EmulatorConfig.from_table(emu))


def record_missing(path: Path) -> str | None:
    """Why ``path`` cannot be a hand-started emulator's record, or None when it is a file.

    ``hopbench serve --record FILE`` creates FILE as it starts (hopbench.emulator._serve):
    a missing file means no such emulator writes there, and the run's gateway overhead
    could not be computed after its load. I/O: one ``stat``.
    """
    if path.is_file():
        return None
    what = "is not a file" if path.exists() else "does not exist"
    return (f"expected the ground-truth file of a running `hopbench serve --record FILE` (it creates the file "
            f"as it starts); {str(path)!r} {what}: start that emulator first, or fix the path")


def record_override(spec: UpstreamSpec | None, record: Path, target_url: str | None) -> UpstreamSpec:
    """``hopbench run --upstream-record FILE``: the ``[upstream]`` a profile gets from the flag.

    Args:
        spec: the profile's ``[upstream]`` (None when it has none).
        record: the flag's file (a relative path is read from the working folder,
            as every command-line path).
        target_url: ``[target].url`` after ``--target-url`` (the gateway).

    Returns:
        ``[upstream] record = FILE``: the flag sets it, or overrides the profile's own ``record``.

    Raises:
        ValueError: the profile's ``[upstream]`` has ``listen`` (hopbench would start
            an emulator of its own there: one upstream per run), or there is no
            ``[target].url`` (the gateway), or the file does not exist
            (:func:`record_missing`). The message names the flag and the key.
    """
    if spec is not None and spec.host is not None:
        raise ValueError(f"--upstream-record: the profile's [upstream] has listen = \"{spec.listen}\" (hopbench "
                         "starts the emulator there itself); drop listen from the profile or the flag")
    if target_url is None:
        raise ValueError("--upstream-record: expected [target].url (or --target-url) to be the gateway: the "
                         "record is the ground truth of the emulator behind it")
    missing = record_missing(record)
    if missing:
        raise ValueError(f"--upstream-record: {missing}")
    return UpstreamSpec(None, None, record)
