"""A check profile: the profile ``hopbench check`` reads (docs/check.md).

Role: an ordinary profile (``[target]`` the gateway, ``[upstream] listen`` the
emulator behind it, ``[[scenario]]`` the protocols) with its ``[contract]``
(``_contract_spec``; the HopBase contract without one), and the rules only a
check needs: a gateway URL, an ``[upstream] listen`` for the emulator, and that
address not the gateway's own. ``hopbench validate`` reads a profile with a
``[contract]`` table here, so that it refuses what ``hopbench check`` would.
Pure: no sockets, no load.

Invariants: every rule is checked before any load is sent, and each refusal is
a ``ProfileError`` naming file, line and key.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlsplit

from .._toml import Table, load_toml
from ._contract_spec import ContractSpec
from ._profile import _build
from ._records import Profile

__all__ = ["load_check_profile"]


def _host_port(url: str) -> tuple[str, int] | None:
    parts = urlsplit(url)
    if parts.hostname is None:
        return None
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return parts.hostname, port


def _same_host(a: str, b: str) -> bool:
    """Whether two hosts name one listening address (localhost = 127.0.0.1; 0.0.0.0 = any)."""
    def norm(h: str) -> str:
        h = h.strip("[]").lower()
        return "127.0.0.1" if h == "localhost" else ("::1" if h == "ip6-localhost" else h)
    x, y = norm(a), norm(b)
    if x == y:
        return True
    try:
        return ipaddress.ip_address(x).is_unspecified or ipaddress.ip_address(y).is_unspecified
    except ValueError:
        return False


def load_check_profile(path: str | Path, *, env: Mapping[str, str] | None = None
                       ) -> tuple[Profile, ContractSpec]:
    """Read a check profile: a profile with ``[upstream] listen`` and an optional ``[contract]``.

    Args:
        path: the TOML file.
        env: environment for ``api_key_env`` / ``header_env`` (default os.environ).

    Returns:
        (the profile, its contract: ``profile.contract``, or the HopBase contract
        without a ``[contract]`` table).

    Raises:
        ProfileError: anything ``load_profile`` refuses; a bad ``[contract]``
            (``parse_contract``); no ``[target].url`` or no ``[upstream] listen``
            (the check starts the emulator behind the gateway itself); ``listen``
            equal to the gateway's address (the gateway would be its own upstream).
    """
    doc = load_toml(path)
    # the check sends its own script, one request at a time: [load] and [run] are not used,
    # so a check profile may leave them out (a profile that `hopbench run` also runs has them)
    doc.data.setdefault("load", {"concurrency": 1})
    run = doc.data.setdefault("run", {})
    if isinstance(run, dict) and "duration_s" not in run:
        run.setdefault("requests", 1)
    profile = _build(doc, env if env is not None else os.environ)
    root = Table(doc.data, doc, ())
    if profile.target.url is None:
        raise root.error("target", "expected [target].url to be the gateway under check "
                                   "(hopbench check drives a real gateway)")
    up = profile.upstream
    if up is None or up.host is None or up.port is None:
        raise Table(doc.data.get("upstream", {}), doc, ("upstream",)).error(
            "listen", "expected [upstream] listen = \"HOST:PORT\": the check starts the "
                      "emulator there and drives it (the gateway's config points at it)")
    target = _host_port(profile.target.url)
    if target is not None and target[1] == up.port and _same_host(target[0], up.host):
        raise Table(doc.data["upstream"], doc, ("upstream",)).error(
            "listen", f"{up.listen} is the gateway's own address ([target].url = {profile.target.url!r}): "
                      "expected the address the gateway proxies to")
    return profile, profile.contract if profile.contract is not None else ContractSpec()
