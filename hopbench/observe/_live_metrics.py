"""Live figures out: hopbench's run in the Prometheus/OpenMetrics text format.

``hopbench run --metrics-port PORT`` (or ``[run] metrics_port``) serves
``http://127.0.0.1:PORT/metrics`` while the run goes, and answers every other
path with 404. Rendered by ``prometheus_client``'s WSGI app (a registry of its
own, never the process-global default) behind a path check, on the standard
library's WSGI server in a daemon thread; OpenMetrics when the scraper asks for
it, else the Prometheus text format 0.0.4.

Invariants:
- Figures are updated from the interval snapshots the run already publishes
  (once per ``run.interval_s``), never per event: serving costs the stream path
  nothing but one fold per interval; rendering happens on the scraper's request,
  in the server's thread, under a lock held only to copy the figures.
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
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from .._errors import UsageError
from .._version import __version__
from ..config._records import Profile
from ..measure._metrics import METRICS
from ..measure._outcomes import BROKEN, OUTCOMES
from ..measure._recorder import ALL, IntervalSnapshot, Snapshot

__all__ = ["Figures", "LiveMetrics", "METRICS_PATH", "HISTOGRAMS", "RunLabels", "run_labels", "safe_url"]

#: the one path served; any other answers 404
METRICS_PATH = "/metrics"

#: recorder metric -> (exposed name, bounds in seconds, help): the registry's metrics with a
#: ``live_help`` (hopbench.measure._metrics), in display order
HISTOGRAMS: dict[str, tuple[str, tuple[float, ...], str]] = {
    spec.name: (f"hopbench_{spec.name}_seconds", spec.live_buckets_s, spec.live_help)
    for spec in METRICS.values() if spec.live_help is not None
}

#: token counters served: exposed name -> (counter prefix, help); each sums ``<prefix>.completed``
#: and ``<prefix>.broken`` (hopbench.measure._sinks.record_stream)
_TOKENS: dict[str, tuple[str, str]] = {
    "hopbench_output_tokens": ("tokens.output", "Output tokens received (completed and broken streams)"),
    "hopbench_input_tokens": ("tokens.input", "Input (prompt) tokens the server reported "
                              "(completed and broken streams)"),
}


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


@dataclass(frozen=True, slots=True)
class RunLabels:
    """What the endpoint names its series by.

    Attributes:
        scope_label: the label that carries a results scope: ``"scenario"``, or
            ``"arm"`` with ``[[arm]]`` (whose scopes are the arms).
        protocols: scope -> the protocol its streams speak (``chat``, ``responses``,
            ``messages``; ``mixed`` for an arm whose scenarios speak several).
        info: ``hopbench_run_info``'s labels (label -> value, no secrets).
    """

    scope_label: str = "scenario"
    protocols: Mapping[str, str] = field(default_factory=dict)
    info: Mapping[str, str] = field(default_factory=dict)


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


@dataclass(frozen=True, slots=True)
class Figures:
    """A consistent copy of the endpoint's figures (:meth:`LiveMetrics.figures`).

    Attributes:
        counters: scope -> counter name -> count (every known scope, from the start).
        in_flight: streams in flight at the last interval's end, None before the first.
        elapsed_ns: the run time the figures cover, ns; None before the first interval.
        histograms: scope -> metric -> (bucket counts, the last one +Inf; sum ns), only
            for scopes and metrics with a sample.
    """

    counters: dict[str, dict[str, int]]
    in_flight: int | None
    elapsed_ns: int | None
    histograms: dict[str, dict[str, tuple[list[int], int]]]


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

        from prometheus_client import make_wsgi_app

        metrics = make_wsgi_app(self._registry())  # text format, OpenMetrics on Accept, gzip: prometheus_client's

        def app(environ: dict[str, Any], start_response: Any) -> Any:
            # only /metrics: a scraper pointed at a wrong path must see an error, not figures
            if environ.get("PATH_INFO") != METRICS_PATH:
                start_response("404 Not Found", [("Content-Type", "text/plain; charset=utf-8")])
                return [f"not found: hopbench serves its live metrics at {METRICS_PATH} only\n".encode()]
            return metrics(environ, start_response)

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

    def _registry(self) -> Any:
        """A ``prometheus_client`` registry of its own holding only this endpoint's figures."""
        from prometheus_client import CollectorRegistry

        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Collector(self))
        return registry

    def text(self, openmetrics: bool = False) -> str:
        """The exposition a scrape would get now, without the server: the Prometheus text
        format 0.0.4, or OpenMetrics 1.0 text (``openmetrics=True``)."""
        if openmetrics:
            from prometheus_client.openmetrics.exposition import generate_latest as generate_om

            return generate_om(self._registry()).decode()
        from prometheus_client import generate_latest

        return generate_latest(self._registry()).decode()

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


class _Collector:
    def __init__(self, live: LiveMetrics) -> None:
        self.live = live

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import (CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily,
                                            InfoMetricFamily)
        from prometheus_client.utils import floatToGoString

        labels = self.live.labels
        fig = self.live.figures()
        names = [labels.scope_label, "protocol"]

        def keys(scope: str) -> list[str]:
            return [scope, labels.protocols.get(scope, "")]

        yield InfoMetricFamily("hopbench_run", "The run: hopbench version, profile file, run name, "
                               "run id (the results folder's name), target", value=dict(labels.info))
        started = CounterMetricFamily("hopbench_streams_started", "Streams started (measured phase)", labels=names)
        ended = CounterMetricFamily("hopbench_streams_ended", "Streams ended, by outcome",
                                    labels=[*names, "outcome"])
        broken = CounterMetricFamily("hopbench_streams_broken", "Broken streams by outcome and detail",
                                     labels=[*names, "outcome", "detail"])
        tokens = {name: CounterMetricFamily(name, help_text, labels=names)
                  for name, (_, help_text) in _TOKENS.items()}
        for scope, counters in sorted(fig.counters.items()):
            started.add_metric(keys(scope), counters.get("started", 0))
            for outcome in OUTCOMES:
                ended.add_metric([*keys(scope), outcome], counters.get(outcome, 0))
            for key, n in sorted(counters.items()):
                outcome, _, detail = key.partition(".")
                if outcome in BROKEN and detail:
                    broken.add_metric([*keys(scope), outcome, detail], n)
            for name, (prefix, _) in _TOKENS.items():
                tokens[name].add_metric(keys(scope), counters.get(f"{prefix}.completed", 0)
                                        + counters.get(f"{prefix}.broken", 0))
        yield from (started, ended, broken, *tokens.values())
        in_flight = GaugeMetricFamily("hopbench_streams_in_flight", "Streams in flight at the last interval's end")
        elapsed = GaugeMetricFamily("hopbench_run_elapsed_seconds", "Run time covered by the figures")
        if fig.in_flight is not None:  # unknown before the first interval: absent, not 0
            in_flight.add_metric([], fig.in_flight)
        if fig.elapsed_ns is not None:
            elapsed.add_metric([], fig.elapsed_ns / 1e9)
        yield from (in_flight, elapsed)
        for metric, (name, bounds, help_text) in HISTOGRAMS.items():
            family = HistogramMetricFamily(name, help_text, labels=names)
            les = [*(floatToGoString(b) for b in bounds), "+Inf"]
            for scope, by_metric in sorted(fig.histograms.items()):
                if metric not in by_metric:  # no sample yet: absent, not an empty histogram
                    continue
                counts, sum_ns = by_metric[metric]
                cumulative, acc = [], 0
                for le, n in zip(les, counts):
                    acc += n
                    cumulative.append((le, acc))
                family.add_metric(keys(scope), cumulative, sum_ns / 1e9)
            yield family
