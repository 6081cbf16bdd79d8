"""Live figures out: hopbench's run in the Prometheus/OpenMetrics text format.

``hopbench run --metrics-port PORT`` (or ``[run] metrics_port``) serves
``http://127.0.0.1:PORT/metrics`` while the run goes, and answers every other
path with 404, on the standard library's WSGI server in a daemon thread:
OpenMetrics 1.0 when the scraper's ``Accept`` names it (Prometheus does), else
the Prometheus text format 0.0.4, gzipped when asked (hopbench.observe._exposition
writes the text; a query string such as ``name[]=`` is ignored: every series is
served).

Invariants:
- Figures are updated from the interval snapshots the run already publishes
  (once per ``run.interval_s``), never per event: serving costs the stream path
  nothing but one fold per interval; rendering happens on the scraper's request,
  in the server's thread, under a lock held only to copy the figures, at most
  once per interval and format (the text is kept for the next scrape).
- Per-stream series carry the stream's results scope and protocol as labels
  (``scenario`` and ``protocol``; ``arm`` and ``protocol`` with ``[[arm]]``), and
  there is no unlabelled total beside them: ``sum by ()`` over the labels is the
  run's figure, never counted twice.
- Counts are of the measured phase (after the warm-up), so the final values,
  summed over the labels, equal summary.json's ``scopes.all.counters``;
  ``streams_in_flight`` is the interval-end figure. With ``--workers`` the
  driver serves the merged view.
- Nothing unknown reads 0: counters are served at 0 from the start (a count
  that has not moved is 0, Prometheus practice), but the gauges appear with the
  first interval and a scope's histograms with its first sample.
- Histograms: the log-spaced buckets of ``hopbench.measure._metrics.LIVE_BUCKETS_S``
  (at most 4.78 % apart from 0.5 ms to 200 s), filled from the HDR interval
  histograms (a value sits in the first bucket whose bound is >= the HDR
  bucket's highest equivalent value: exact to the HDR histogram's 3 significant
  digits); ``_sum`` is the sum of those values. ``histogram_quantile`` over
  them is within 4.78 % (plus the HDR's 0.1 %) of the HDR percentile between
  0.5 ms and 200 s. Exact percentiles stay in intervals.hlog and summary.json.
- ``hopbench_run_info`` names the run (version, profile file, run name, run id:
  the results folder's name, target) and holds no secret: a URL keeps only its
  scheme, host, port and path (no user, password, query or fragment).

Series (docs/observability.md): ``hopbench_run_info``,
``hopbench_streams_started_total``, ``hopbench_streams_ended_total{outcome}``,
``hopbench_streams_broken_total{outcome,detail}``, ``hopbench_output_tokens_total``,
``hopbench_input_tokens_total``, the histograms ``hopbench_ttft_seconds``,
``hopbench_itl_seconds``, ``hopbench_e2e_seconds`` (each with the scope's labels),
``hopbench_streams_in_flight`` and ``hopbench_run_elapsed_seconds`` (no labels).
"""

from __future__ import annotations

import bisect
import threading
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from .._errors import UsageError
from .._version import __version__
from ..config._records import Profile
from ..measure._recorder import ALL, IntervalSnapshot, Snapshot
from ._exposition import HISTOGRAMS, Figures, RunLabels, render

__all__ = ["Figures", "LiveMetrics", "METRICS_PATH", "HISTOGRAMS", "RunLabels", "run_labels", "safe_url"]

#: the one path served; any other answers 404
METRICS_PATH = "/metrics"

#: the content types served: OpenMetrics when the scraper's Accept names it (Prometheus does), else text 0.0.4
_OPENMETRICS = "application/openmetrics-text; version=1.0.0; charset=utf-8"
_TEXT = "text/plain; version=0.0.4; charset=utf-8"


def safe_url(url: str) -> str:
    """``url`` with only its scheme, host, port and path: no user, password, query or
    fragment (a label must never carry a credential). Never raises: text that is not
    a URL comes back as ``"<not a url>"``."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        if ":" in host:  # IPv6 literal
            host = f"[{host}]"
        netloc = host if parts.port is None else f"{host}:{parts.port}"
    except ValueError:
        return "<not a url>"
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def run_labels(profile: Profile, run_id: str = "") -> RunLabels:
    """The labels of ``profile``'s run.

    Args:
        profile: the validated profile.
        run_id: the results folder's name (``<run name>-<UTC time>``), "" when unknown.

    Returns:
        RunLabels: one protocol per scope (scenario, or arm), and the info labels
        ``version``, ``profile`` (the file's name, "" when parsed from text), ``name``
        (``run.name``), ``run_id`` and ``target`` (``embedded``, or the target URL
        through :func:`safe_url`; with arms each arm's, comma-separated).
    """
    by_protocol = sorted({s.protocol for s in profile.scenarios})
    if profile.arms:
        arm_protocol = by_protocol[0] if len(by_protocol) == 1 else "mixed"
        protocols = {a.name: a.protocol or arm_protocol for a in profile.arms}
        target = ",".join("embedded" if a.url is None else safe_url(a.url) for a in profile.arms)
    else:
        protocols = {s.name: s.protocol for s in profile.scenarios}
        target = "embedded" if profile.target.url is None else safe_url(profile.target.url)
    info = {"version": __version__, "profile": profile.path.name if profile.path else "",
            "name": profile.run.name, "run_id": run_id, "target": target}
    return RunLabels("arm" if profile.arms else "scenario", protocols, info)


class _Hist:
    __slots__ = ("bounds_ns", "counts", "sum_ns")

    def __init__(self, bounds_s: tuple[float, ...]) -> None:
        self.bounds_ns = [round(b * 1e9) for b in bounds_s]
        self.counts = [0] * (len(bounds_s) + 1)  # the last one is +Inf
        self.sum_ns = 0

    def add(self, buckets: list[tuple[int, int]]) -> None:
        for value_ns, n in buckets:
            self.counts[bisect.bisect_left(self.bounds_ns, value_ns)] += n
            self.sum_ns += value_ns * n


class LiveMetrics:
    """The live endpoint's figures and its HTTP server.

    Args:
        port: TCP port on 127.0.0.1 (0: any free port; see ``port`` after ``start``).
        labels: the run's labels (:func:`run_labels`); without them a scope is
            labelled ``scenario`` with an empty ``protocol`` and the info metric
            carries only the version.
        host: the address to bind (127.0.0.1 unless a caller knows better).
    """

    def __init__(self, port: int, labels: RunLabels | None = None, host: str = "127.0.0.1") -> None:
        self.host, self.port = host, port
        self.labels = labels if labels is not None else RunLabels(info={"version": __version__})
        self._lock = threading.Lock()
        self._counters: dict[str, dict[str, int]] = {scope: {} for scope in self.labels.protocols}
        self._in_flight: int | None = None
        self._elapsed_ns: int | None = None
        self._hists: dict[str, dict[str, _Hist]] = {}
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self._rendered: dict[bool, tuple[int, bytes]] = {}
        self.updates = 0

    # -- lifecycle ------------------------------------------------------------------
    def start(self) -> LiveMetrics:
        """Listen on ``host:port`` (before any load).

        Raises:
            UsageError: the port cannot be bound (in use, no permission).
        """
        import socket
        from socketserver import ThreadingMixIn
        from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

        def app(environ: dict[str, Any], start_response: Any) -> Any:
            # only /metrics: a scraper pointed at a wrong path must see an error, not figures
            if environ.get("PATH_INFO") != METRICS_PATH:
                start_response("404 Not Found", [("Content-Type", "text/plain; charset=utf-8")])
                return [f"not found: hopbench serves its live metrics at {METRICS_PATH} only\n".encode()]
            openmetrics = "application/openmetrics-text" in environ.get("HTTP_ACCEPT", "")
            body = self._body(openmetrics)
            headers = [("Content-Type", _OPENMETRICS if openmetrics else _TEXT)]
            if "gzip" in environ.get("HTTP_ACCEPT_ENCODING", ""):  # Prometheus asks for it: ~15x smaller
                import gzip

                body = gzip.compress(body, compresslevel=1)
                headers.append(("Content-Encoding", "gzip"))
            start_response("200 OK", headers)
            return [body]

        class Server(ThreadingMixIn, WSGIServer):
            daemon_threads = True
            address_family = socket.AF_INET6 if ":" in self.host else socket.AF_INET

        class Quiet(WSGIRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:  # no access log on stderr
                pass

        try:
            server = make_server(self.host, self.port, app, server_class=Server, handler_class=Quiet)
        except OSError as exc:
            raise UsageError(f"--metrics-port {self.port}: cannot listen on {self.host}:{self.port}: "
                             f"{exc.strerror or exc} (is another process using it? pick another port)") from None
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, name="hopbench-live-metrics", daemon=True)
        self._thread.start()
        self.port = int(server.server_address[1])
        return self

    def stop(self) -> None:
        """Stop serving (idempotent)."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _body(self, openmetrics: bool) -> bytes:
        """The exposition as bytes, rendered once per update and format (a second scraper,
        or a scrape faster than ``run.interval_s``, costs no rendering)."""
        updates = self.updates
        cached = self._rendered.get(openmetrics)
        if cached is None or cached[0] != updates:
            cached = (updates, self.text(openmetrics).encode())
            self._rendered[openmetrics] = cached
        return cached[1]

    def text(self, openmetrics: bool = False) -> str:
        """The exposition a scrape gets now: the Prometheus text format 0.0.4, or
        OpenMetrics 1.0 text (``openmetrics=True``); hopbench.observe._exposition.render."""
        return render(self.figures(), self.labels, openmetrics)

    def __enter__(self) -> LiveMetrics:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        """``http://host:port/metrics``."""
        return f"http://{self.host}:{self.port}{METRICS_PATH}"

    # -- updates ----------------------------------------------------------------------
    def on_interval(self, iv: IntervalSnapshot, line: dict[str, Any], total: Snapshot | None = None) -> None:
        """Fold one finished interval in (the run's ``progress`` callback; O(scopes x buckets)).

        Args:
            iv: the measured interval (empty during the warm-up); its scenario (or
                arm) scopes are read, never ``all`` (their sum: read both and a
                total would count twice).
            line: its timeline record (``in_flight_now``, ``end_ns``).
            total: unused (accepted for the ``--workers`` callback shape).

        Never raises on the figures' content.
        """
        scopes = {name: sc for name, sc in iv.scopes.items() if name != ALL}
        hists = {name: {m: iv.histogram(name, m).buckets() for m in HISTOGRAMS if m in sc.histograms}
                 for name, sc in scopes.items()}
        with self._lock:
            for name, sc in scopes.items():
                counters = self._counters.setdefault(name, {})
                for key, n in sc.counters.items():
                    counters[key] = counters.get(key, 0) + n
                for m, buckets in hists[name].items():
                    by_metric = self._hists.setdefault(name, {})
                    if m not in by_metric:
                        by_metric[m] = _Hist(HISTOGRAMS[m][1])
                    by_metric[m].add(buckets)
            self._in_flight = int(line.get("in_flight_now", 0) or 0)
            self._elapsed_ns = int(line.get("end_ns", 0) or 0)
            self.updates += 1

    def figures(self) -> Figures:
        """A consistent copy of the figures (see :class:`Figures`)."""
        with self._lock:
            return Figures({scope: dict(c) for scope, c in self._counters.items()}, self._in_flight,
                           self._elapsed_ns,
                           {scope: {m: (list(h.counts), h.sum_ns) for m, h in hs.items()}
                            for scope, hs in self._hists.items()})
