"""Real gateways for the tests: their configs and their processes (127.0.0.1 only).

Role: test support, not product code. One place for the gateway configs the tests start:
nginx's (templated here, as docs/gateway-overhead.md gives it) and the haproxy and Caddy
configs of docs/check.md's cards, kept as files in tests/data/gateways/ (the cards' own
commands use them as they are) whose fixed ports the tests move to free ones.

``binary`` finds a gateway's executable (None when it is not installed: the test skips
saying so); ``start`` runs one under ``_servers.ServerProcess`` (health-checked, always
stopped) and yields its URL per front door.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

from _servers import ServerProcess, free_port

__all__ = ["BUFFERING", "CARD_DOORS", "STREAMING", "CARD_UPSTREAM", "binary", "card_config", "check_profile", "nginx_conf", "ports", "start"]

DATA = Path(__file__).parent / "data" / "gateways"

#: the cards' fixed addresses (tests/data/gateways/): the emulator's port, and each config's front doors
CARD_UPSTREAM = 19400
CARD_DOORS: Mapping[str, tuple[int, ...]] = {"haproxy.cfg": (18580, 18581), "Caddyfile": (18680,),
                                             "litellm.yaml": ()}  # LiteLLM's port is on its command line

#: nginx's location lines: streaming event by event, and buffering (the emulator's
#: ``X-Accel-Buffering: no`` ignored, the SSE body gzipped: each stream reaches the client at its end)
STREAMING = "proxy_buffering off;"
BUFFERING = "proxy_buffering on; proxy_ignore_headers X-Accel-Buffering; gzip on; gzip_types text/event-stream;"

_WHERE = {"nginx": "/usr/sbin/nginx", "haproxy": "/usr/sbin/haproxy", "caddy": "/usr/bin/caddy"}


def binary(name: str) -> str | None:
    """The path of gateway ``name`` (nginx, haproxy, caddy), or None when it is not installed."""
    found = shutil.which(name) or _WHERE.get(name)
    return found if found and Path(found).exists() else None


def card_config(name: str, upstream: int, doors: Sequence[int]) -> str:
    """The card's config ``name`` (tests/data/gateways/) with its emulator port and front doors
    moved to ``upstream`` and ``doors`` (in the order of ``CARD_DOORS[name]``)."""
    text = (DATA / name).read_text(encoding="utf-8")
    for old, new in zip((CARD_UPSTREAM, *CARD_DOORS[name]), (upstream, *doors), strict=True):
        assert text.count(f"127.0.0.1:{old}") >= 1, (name, old)
        text = text.replace(f"127.0.0.1:{old}", f"127.0.0.1:{new}")
    return text


def nginx_conf(upstream: int, doors: Mapping[int, str]) -> str:
    """An nginx config (run with ``-p PREFIX -c nginx.conf``): one server per front door,
    ``doors`` mapping its port to the proxy location's extra lines (e.g. ``proxy_buffering off;``),
    each answering ``/healthz`` itself, all proxying to 127.0.0.1:``upstream`` with keep-alive
    (docs/gateway-overhead.md's config)."""
    servers = "".join(
        f"  server {{\n    listen 127.0.0.1:{port};\n    location = /healthz {{ return 200 \"ok\"; }}\n"
        f"    location / {{\n      proxy_pass http://hopbench_emulator;\n      proxy_http_version 1.1;\n"
        f"      proxy_set_header Connection \"\";\n      {lines}\n    }}\n  }}\n"
        for port, lines in doors.items())
    return ("worker_processes 1;\npid nginx.pid;\nerror_log error.log warn;\ndaemon off;\n"
            "events { worker_connections 1024; }\nhttp {\n  access_log off;\n"
            "  client_body_temp_path body; proxy_temp_path proxy;\n"
            "  fastcgi_temp_path fastcgi; uwsgi_temp_path uwsgi; scgi_temp_path scgi;\n"
            f"  upstream hopbench_emulator {{ server 127.0.0.1:{upstream}; keepalive 16; }}\n"
            + servers + "}\n")


@contextmanager
def start(name: str, folder: Path, upstream: int, doors: Sequence[int] | Mapping[int, str], *,
          exe: str | None = None, env: Mapping[str, str] | None = None) -> Iterator[list[str]]:
    """Run gateway ``name`` (nginx, haproxy, caddy, litellm) in ``folder`` in front of 127.0.0.1:``upstream``.

    Args:
        name: the gateway; its binary must be installed (``binary``), or given as ``exe``
            (LiteLLM's ``litellm`` in its own virtual environment: ``_servers.ensure_venv``).
        env: extra environment (LiteLLM: ``LITELLM_MASTER_KEY``).
        folder: its working folder (config, logs, state).
        upstream: the port it proxies to (the emulator need not be up: health is the gateway's own).
        doors: its front doors' ports (nginx: a mapping port -> location lines; haproxy: the
            default door and the ``http-no-delay`` one; caddy: one).

    Yields:
        the doors' URLs, ``http://127.0.0.1:PORT``, in order.
    """
    exe = exe or binary(name)
    assert exe is not None, f"{name} is not installed"
    folder.mkdir(parents=True, exist_ok=True)
    extra = dict(env or {})
    health, start_timeout_s = "/healthz", 30.0
    if name == "nginx":
        assert isinstance(doors, Mapping)
        (folder / "nginx.conf").write_text(nginx_conf(upstream, doors), encoding="utf-8")
        argv = [exe, "-p", str(folder), "-c", "nginx.conf"]
    elif name == "haproxy":
        (folder / "haproxy.cfg").write_text(card_config("haproxy.cfg", upstream, list(doors)), encoding="utf-8")
        argv = [exe, "-f", str(folder / "haproxy.cfg"), "-db"]
    elif name == "caddy":
        (folder / "Caddyfile").write_text(card_config("Caddyfile", upstream, list(doors)), encoding="utf-8")
        argv = [exe, "run", "--config", str(folder / "Caddyfile"), "--adapter", "caddyfile"]
        # its state (certificates it will not need, autosaved config) stays in the folder
        extra.update(XDG_DATA_HOME=str(folder / "data"), XDG_CONFIG_HOME=str(folder / "config"), HOME=str(folder))
    elif name == "litellm":
        (folder / "litellm.yaml").write_text(card_config("litellm.yaml", upstream, []), encoding="utf-8")
        argv = [exe, "--config", str(folder / "litellm.yaml"), "--host", "127.0.0.1", "--port", str(list(doors)[0])]
        extra.update(LITELLM_LOCAL_MODEL_COST_MAP="True", LITELLM_TELEMETRY="False")
        health, start_timeout_s = "/health/liveliness", 120.0  # 6-13 s to start, more on a busy machine
    else:
        raise ValueError(f"unknown gateway {name!r}")
    door_ports = list(doors)
    with ServerProcess(argv, f"http://127.0.0.1:{door_ports[0]}{health}", folder / f"{name}.log", env=extra,
                       start_timeout_s=start_timeout_s):
        yield [f"http://127.0.0.1:{p}" for p in door_ports]


def ports(n: int) -> list[int]:
    """``n`` distinct ports free on 127.0.0.1 right now."""
    got: list[int] = []
    while len(got) < n:
        p = free_port()
        if p not in got:
            got.append(p)
    return got


def check_profile(folder: Path, url: str, upstream: int, protocols: Sequence[str] = ("chat", "messages"),
                  target_lines: str = "") -> Path:
    """A check profile (written to ``folder/check.toml``) for the gateway at ``url`` in front of
    127.0.0.1:``upstream``: one scenario per protocol (chat and Messages unless told), the HopBase
    contract with a 1 s keepalive interval (so the silence lasts 2.5 s and the check about 15-25 s),
    ``target_lines`` added to ``[target]`` (e.g. ``api_key_env = "KEY"``)."""
    models = {"chat": "gpt-emu", "responses": "gpt-emu", "messages": "claude-emu"}
    scenarios = "".join(f'[[scenario]]\nname = "{p}"\nprotocol = "{p}"\nmodel = "{models[p]}"\nprompts = ["hi"]\n'
                        for p in protocols)
    path = folder / "check.toml"
    path.write_text(f'[target]\nurl = "{url}"\n{target_lines}[upstream]\nlisten = "127.0.0.1:{upstream}"\n'
                    + scenarios + "[contract]\nkeepalive_interval_s = 1\n", encoding="utf-8")
    return path
