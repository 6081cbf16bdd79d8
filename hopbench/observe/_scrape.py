"""Scrape Prometheus/OpenMetrics endpoints during a run, off the streams' path.

Role: each ``[[scrape]]`` endpoint (``hopbench.config._scrape_spec``) gets one plain
daemon thread with its own ``httpx.Client``: blocking I/O there never delays
the trio loop that reads the streams (the only cost to the load is the CPU the
thread takes, measured as ``cpu_ms_per_scrape``). A slow endpoint only delays
its own next scrape (scrapes never overlap; a late one is not made up).

Every scrape ends as exactly one of: ``ok``, ``timeout``, ``failed`` (connect
or transport error), ``http_error`` (status not 200), ``oversize`` (body over
``max_body_bytes``: reading stops there, so memory is bounded), ``not_metrics``
(HTML, or a body the official ``prometheus_client`` parser rejects). The counts
are in summary.json ``scrape`` and non-ok ones become warnings.

scrape.jsonl holds one JSON line per scrape, in time order per endpoint::

    {"url": U, "t_ms": 1234.5, "dur_ms": 3.1, "s": {"name{a=\\"b\\"}": 12.0, ...},
     "types": {"family": "counter", ...}}        # "types" only on an endpoint's first ok line
    {"url": U, "t_ms": 2234.6, "dur_ms": 2000.2, "error": "timeout"}

``t_ms`` is the scrape's start in ms from the run start (the time axis of
timeline.jsonl); sample names are the exposition's (counters with their
``_total`` suffix), labels sorted; NaN and infinities are written as strings.
Header values (possibly secrets) are never written anywhere.
"""

from __future__ import annotations

import json
import math
import os
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import httpx

from .._clock import NS_PER_MS
from ..config._scrape_spec import ScrapeSpec, scrape_headers

__all__ = ["Scraper", "EndpointStats", "parse_exposition", "OUTCOMES"]

_READY_TIMEOUT_S = 30.0
OUTCOMES = ("ok", "timeout", "failed", "http_error", "oversize", "not_metrics")


class _NotMetrics(ValueError):
    pass


def _series_key(name: str, labels: Mapping[str, str]) -> str:
    if not labels:
        return name
    inner = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    return f"{name}{{{inner}}}"


def parse_exposition(text: str, spec: ScrapeSpec | None = None, *,
                     openmetrics: bool = False) -> tuple[dict[str, Any], dict[str, str]]:
    """Parse one exposition body with ``prometheus_client``'s parsers.

    Args:
        text: the body: Prometheus text format 0.0.4 (``prometheus_client.parser``),
            or OpenMetrics 1.0 when ``openmetrics`` (``prometheus_client.openmetrics.parser``).
        spec: keeps only the families its ``metrics`` prefixes name (None: all).
        openmetrics: the response's content type was ``application/openmetrics-text``.

    Returns:
        (samples, types): ``{"name{labels}": value}`` (NaN/inf as strings) and
        ``{family: type}``.

    Raises:
        ValueError: the body is not an exposition (HTML, garbage).
    """
    if openmetrics:
        from prometheus_client.openmetrics.parser import text_string_to_metric_families
    else:
        from prometheus_client.parser import text_string_to_metric_families

    stripped = text.lstrip()
    if stripped[:1] == "<":  # an HTML page (a login form, a proxy's error page)
        raise _NotMetrics("an HTML page")
    if spec is not None and spec.metrics:
        text = _prefilter(text, spec.metrics)
    samples: dict[str, Any] = {}
    types: dict[str, str] = {}
    for fam in text_string_to_metric_families(text):  # type: ignore[no-untyped-call]
        if not fam.samples or (spec is not None and not spec.keeps(fam.name)
                               and not any(spec.keeps(x.name) for x in fam.samples)):
            continue  # a prefix may name the family (``req``) or its samples (``req_total``)
        types[fam.name] = fam.type
        for s in fam.samples:
            v = float(s.value)
            samples[_series_key(s.name, s.labels)] = v if math.isfinite(v) else str(v)
    return samples, types


def _prefilter(text: str, prefixes: tuple[str, ...]) -> str:
    """Drop the lines of families no prefix names before parsing: the parser's
    cost is per line (~20 us), a string test is ~0.2 us; the parsed result is
    then filtered by family name again (``ScrapeSpec.keeps``)."""
    kept = []
    for line in text.splitlines():
        if line.startswith("#"):
            parts = line.split(None, 3)
            if len(parts) >= 3 and parts[1] in ("HELP", "TYPE", "UNIT") and not parts[2].startswith(prefixes):
                continue
        elif line and not line.startswith(prefixes):
            continue
        kept.append(line)
    return "\n".join(kept) + "\n"


@dataclass(slots=True)
class EndpointStats:
    """What happened to one endpoint's scrapes (mutated by its thread only)."""

    url: str
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(OUTCOMES, 0))
    series: int = 0
    cpu_ns: int = 0
    last_error: str = ""

    def to_json(self) -> dict[str, Any]:
        """summary.json ``scrape[i]``: url, scrapes, each outcome's count, series
        (distinct sample keys of the last ok scrape), cpu_ms_per_scrape (the
        scraping thread's CPU, mean per scrape, ms), last_error."""
        n = sum(self.counts.values())
        return {"url": self.url, "scrapes": n, **self.counts, "series": self.series,
                "cpu_ms_per_scrape": round(self.cpu_ns / n / NS_PER_MS, 3) if n else None,
                "last_error": self.last_error or None}

    def warning(self) -> str | None:
        """A summary warning when any scrape of this endpoint did not succeed."""
        bad = {k: v for k, v in self.counts.items() if k != "ok" and v}
        if not bad:
            return None
        what = ", ".join(f"{v} {k.replace('_', ' ')}" for k, v in bad.items())
        n = sum(self.counts.values())
        return (f"scrape {self.url}: {sum(bad.values())} of {n} scrapes failed ({what})"
                + (f"; last: {self.last_error}" if self.last_error else ""))


class Scraper:
    """Scrape in a child process: one thread per endpoint there, writing
    scrape.jsonl in ``out_dir``.

    Why a process: parsing an exposition costs ~20 us of CPU per series (2000
    series: ~45 ms), holding the GIL; in a thread of the run's own process that
    raised the event-loop lag p99 from ~5 to ~20 ms and TTFT p99 by ~60 ms on a
    2-core machine (docs/observability.md). In its own process it costs the run
    nothing but a share of the machine.

    Use as a context manager: ``start`` on entry, ``stop`` on exit (stops the
    child, collects the per-endpoint counts). With ``run_start_ns`` None,
    scraping waits for :meth:`begin` (so the child's start-up is paid before
    the load starts and the time origin is the run's).

    Args:
        specs: the validated endpoints.
        out_dir: the results folder (scrape.jsonl is appended there).
        run_start_ns: the run start in ``time.monotonic_ns`` time (system-wide on
            Linux and macOS, so valid in the child), or None: given by ``begin``.
        embedded_url: the embedded emulator's base URL (for ``url = "embedded"``).
        env: where ``header_env`` values come from (default os.environ); only the
            named variables are handed to the child, through its pipe.

    Args:
        specs: the validated endpoints.
        out_dir: the results folder.
        run_start_ns: the run start in ``time.monotonic_ns`` time (t_ms's origin).
        embedded_url: the embedded emulator's base URL (for ``url = "embedded"``).
        env: where ``header_env`` values come from (default os.environ).
    """

    def __init__(self, specs: tuple[ScrapeSpec, ...], out_dir: Path, run_start_ns: int | None,
                 embedded_url: str | None = None, env: Mapping[str, str] | None = None) -> None:
        self._run_start_ns = run_start_ns
        self._args = (specs, out_dir, embedded_url,
                      {v: (os.environ if env is None else env)[v] for s in specs for v in s.header_env.values()
                       if v in (os.environ if env is None else env)})
        self.stats = [EndpointStats(_Threads.url_of(s, embedded_url)) for s in specs]
        self._proc: Any = None
        self._stop: Any = None
        self._conn: Any = None

    def __enter__(self) -> Scraper:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        """Start the child process (``spawn``: nothing of the run is inherited but the arguments)."""
        import multiprocessing

        ctx = multiprocessing.get_context("spawn")
        self._stop = ctx.Event()
        parent, child = ctx.Pipe(duplex=True)
        self._proc = ctx.Process(target=_child_main, args=(*self._args, self._stop, child),
                                 name="hopbench-scrape", daemon=True)
        self._proc.start()
        child.close()
        self._conn = parent
        # wait for the child's imports (~0.5 s of CPU) so that they do not compete
        # with the first seconds of load; a child that never gets ready is reported at stop()
        try:
            if self._conn.poll(_READY_TIMEOUT_S):
                self._conn.recv()
        except (EOFError, OSError):
            pass
        if self._run_start_ns is not None:
            self.begin(self._run_start_ns)

    def begin(self, run_start_ns: int) -> None:
        """Start scraping, ``t_ms`` counting from ``run_start_ns`` (``time.monotonic_ns``)."""
        try:
            self._conn.send(run_start_ns)
        except (OSError, ValueError):
            pass  # the child is gone: stop() reports it

    def stop(self) -> None:
        """Stop the child (an in-flight scrape ends within its timeout) and take its counts."""
        if self._proc is None:
            return
        self._stop.set()
        longest_s = max((s.timeout_ns for s in self._args[0]), default=0) / 1e9
        try:
            if self._conn.poll(longest_s + _READY_TIMEOUT_S):
                for st, data in zip(self.stats, self._conn.recv()):
                    st.counts, st.series, st.cpu_ns, st.last_error = data
            else:
                for st in self.stats:
                    st.last_error = st.last_error or "the scraping process did not report its counts"
        except (EOFError, OSError):
            for st in self.stats:
                st.last_error = "the scraping process died"
        self._proc.join(timeout=5.0)
        if self._proc.is_alive():
            self._proc.kill()
            self._proc.join()
        self._conn.close()
        self._proc = None

    def summary(self) -> list[dict[str, Any]]:
        """summary.json ``scrape``: one EndpointStats.to_json per endpoint."""
        return [s.to_json() for s in self.stats]

    def warnings(self) -> list[str]:
        """One warning per endpoint with failed scrapes (or whose counts were lost)."""
        out = [w for s in self.stats if (w := s.warning()) is not None]
        out += [f"scrape {s.url}: {s.last_error}" for s in self.stats
                if not sum(s.counts.values()) and s.last_error and s.warning() is None]
        return out


def _child_main(specs: tuple[ScrapeSpec, ...], out_dir: Path, embedded_url: str | None,
                env: dict[str, str], stop: Any, conn: Any) -> None:
    """The scraping process: threads until ``stop`` is set (or the run's process is
    gone), then the counts on ``conn``. SIGINT and SIGTERM are left to the run,
    which stops this process itself, so that a Ctrl-C still yields the counts."""
    import signal

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    parent = os.getppid()
    from prometheus_client import parser  # noqa: F401  (imported before "ready", see Scraper.start)
    from prometheus_client.openmetrics import parser as _om  # noqa: F401

    conn.send("ready")
    threads = None
    while not stop.is_set() and os.getppid() == parent:  # wait for begin(): the run's time origin
        if conn.poll(0.2):
            threads = _Threads(specs, out_dir, int(conn.recv()), embedded_url, env)
            break
    if threads is None:
        threads = _Threads(specs, out_dir, 0, embedded_url, env)  # stopped before the load: no scrape
    else:
        threads.start()
    try:
        while not stop.wait(0.5) and os.getppid() == parent:
            pass
    finally:
        threads.stop()
        conn.send([(st.counts, st.series, st.cpu_ns, st.last_error) for st in threads.stats])
        conn.close()


class _Threads:
    """One thread per endpoint, writing scrape.jsonl (runs inside the scraping process)."""

    def __init__(self, specs: tuple[ScrapeSpec, ...], out_dir: Path, run_start_ns: int,
                 embedded_url: str | None = None, env: Mapping[str, str] | None = None) -> None:
        self.specs = specs
        self.path = out_dir / "scrape.jsonl"
        self.run_start_ns = run_start_ns
        self.embedded_url = embedded_url
        self.env = os.environ if env is None else env
        self.stats = [EndpointStats(self.url_of(s, embedded_url)) for s in specs]
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._file: IO[str] | None = None
        self._threads: list[threading.Thread] = []

    @staticmethod
    def url_of(spec: ScrapeSpec, embedded_url: str | None) -> str:
        """The URL scraped (``embedded`` resolved)."""
        if spec.url == "embedded":
            return f"{embedded_url}/metrics" if embedded_url else "embedded (no embedded emulator)"
        return spec.url

    def start(self) -> None:
        """Open scrape.jsonl and start one daemon thread per endpoint."""
        self._file = open(self.path, "a", encoding="utf-8")
        for spec, st in zip(self.specs, self.stats):
            t = threading.Thread(target=self._loop, args=(spec, st), name=f"hopbench-scrape-{st.url}",
                                 daemon=True)
            self._threads.append(t)
            t.start()

    def stop(self) -> None:
        """Stop the threads (an in-flight scrape ends within its timeout) and close the file."""
        self._stop.set()
        for t in self._threads:
            t.join()
        if self._file is not None:
            self._file.close()
            self._file = None

    def _write(self, record: dict[str, Any]) -> None:
        line = json.dumps(record, separators=(",", ":")) + "\n"
        with self._lock:
            if self._file is not None:
                self._file.write(line)
                self._file.flush()

    def _loop(self, spec: ScrapeSpec, st: EndpointStats) -> None:
        if spec.url == "embedded" and not self.embedded_url:
            st.counts["failed"] += 1
            st.last_error = "url = \"embedded\" but the target is not the embedded emulator"
            return
        headers = scrape_headers(spec, self.env)
        timeout = httpx.Timeout(spec.timeout_ns / 1e9)
        first_ok = True
        with httpx.Client(timeout=timeout, headers=headers, follow_redirects=False, trust_env=False) as client:
            next_ns = time.monotonic_ns()
            while not self._stop.is_set():
                cpu0 = time.thread_time_ns()
                t0 = time.monotonic_ns()
                record: dict[str, Any] = {"url": st.url, "t_ms": round((t0 - self.run_start_ns) / NS_PER_MS, 3)}
                outcome, detail, samples, types = self._scrape_once(client, spec, st.url, t0)
                record["dur_ms"] = round((time.monotonic_ns() - t0) / NS_PER_MS, 3)
                st.counts[outcome] += 1
                if outcome == "ok":
                    record["s"] = samples
                    st.series = len(samples)
                    if first_ok:
                        record["types"] = types
                        first_ok = False
                else:
                    record["error"] = outcome
                    st.last_error = detail
                self._write(record)
                st.cpu_ns += time.thread_time_ns() - cpu0
                next_ns += spec.interval_ns
                now = time.monotonic_ns()
                if next_ns < now:  # a slow scrape: skip the missed slots, never overlap
                    next_ns = now + spec.interval_ns - (now - next_ns) % spec.interval_ns
                self._stop.wait((next_ns - now) / 1e9)

    def _scrape_once(self, client: httpx.Client, spec: ScrapeSpec, url: str, t0_ns: int,
                     ) -> tuple[str, str, dict[str, Any], dict[str, str]]:
        deadline_ns = t0_ns + spec.timeout_ns
        try:
            with client.stream("GET", url) as resp:
                if resp.status_code != 200:
                    return "http_error", f"HTTP {resp.status_code}", {}, {}
                ctype = resp.headers.get("content-type", "")
                if "html" in ctype.lower():
                    return "not_metrics", f"content-type {ctype!r} (expected text/plain or OpenMetrics)", {}, {}
                declared = resp.headers.get("content-length", "")
                if declared.isdigit() and int(declared) > spec.max_body_bytes:  # refused unread
                    return "oversize", f"Content-Length {declared} over max_body_bytes = {spec.max_body_bytes}", {}, {}
                size = 0
                parts: list[bytes] = []
                for chunk in resp.iter_bytes():
                    size += len(chunk)
                    if size > spec.max_body_bytes:
                        return "oversize", f"body over max_body_bytes = {spec.max_body_bytes}", {}, {}
                    if time.monotonic_ns() > deadline_ns:  # a trickling body: the read timeout alone never fires
                        return "timeout", f"body not complete in {spec.timeout_ns / 1e9:g} s", {}, {}
                    parts.append(chunk)
                body = b"".join(parts)
        except httpx.TimeoutException as exc:
            return "timeout", f"{type(exc).__name__} after {spec.timeout_ns / 1e9:g} s", {}, {}
        except (httpx.HTTPError, OSError) as exc:
            return "failed", f"{type(exc).__name__}: {exc}"[:200], {}, {}
        try:
            samples, types = parse_exposition(body.decode("utf-8", errors="replace"), spec,
                                              openmetrics="openmetrics" in ctype.lower())
        except Exception as exc:  # the parser raises ValueError and others on garbage
            return "not_metrics", f"not an exposition body: {str(exc)[:120]}", {}, {}
        return "ok", "", samples, types
