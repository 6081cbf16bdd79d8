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
- Counts are of the measured phase (after the warm-up), so the final values
  equal summary.json's ``scopes.all.counters``; ``streams_in_flight`` is the
  interval-end figure. With ``--workers`` the driver serves the merged view.
- Histograms: fixed buckets (the registry's ``live_buckets_s``, in seconds)
  filled from the HDR interval histograms (a value sits in the first bucket
  whose bound is >= the HDR bucket's highest equivalent value: exact to the HDR
  histogram's 3 significant digits); ``_sum`` is the sum of those values.
  Exact percentiles stay in intervals.hlog and summary.json.

Series (docs/observability.md): ``hopbench_streams_started_total``,
``hopbench_streams_ended_total{outcome}``,
``hopbench_streams_broken_total{outcome,detail}``, ``hopbench_streams_in_flight``,
``hopbench_output_tokens_total`` (usage, else output events; absent while no
stream had either), ``hopbench_output_token_streams_total{source}``,
``hopbench_run_elapsed_seconds``,
``hopbench_ttft_seconds``, ``hopbench_itl_seconds``, ``hopbench_e2e_seconds``
(histograms).
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Iterator
from typing import Any

from .._errors import UsageError
from ..measure._metrics import METRICS
from ..measure._outcomes import BROKEN, OUTCOMES, output_tokens, tokens_source
from ..measure._recorder import ALL, IntervalSnapshot, Snapshot

__all__ = ["LiveMetrics", "METRICS_PATH", "HISTOGRAMS"]

#: the one path served; any other answers 404
METRICS_PATH = "/metrics"

#: recorder metric -> (exposed name, bounds in seconds, help): the registry's metrics with a
#: ``live_help`` (hopbench.measure._metrics), in display order
HISTOGRAMS: dict[str, tuple[str, tuple[float, ...], str]] = {
    spec.name: (f"hopbench_{spec.name}_seconds", spec.live_buckets_s, spec.live_help)
    for spec in METRICS.values() if spec.live_help is not None
}


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
        host: the address to bind (127.0.0.1 unless a caller knows better).
    """

    def __init__(self, port: int, host: str = "127.0.0.1") -> None:
        self.host, self.port = host, port
        self._lock = threading.Lock()
        self._counters: dict[str, int] = {}
        self._in_flight = 0
        self._elapsed_ns = 0
        self._hists = {m: _Hist(b) for m, (_, b, _h) in HISTOGRAMS.items()}
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

        from prometheus_client import CollectorRegistry, make_wsgi_app

        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Collector(self))
        metrics = make_wsgi_app(registry)  # text format, OpenMetrics on Accept, gzip: prometheus_client's

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
        """Fold one finished interval in (the run's ``progress`` callback; O(buckets)).

        Args:
            iv: the measured interval (empty during the warm-up).
            line: its timeline record (``in_flight_now``, ``end_ns``).
            total: unused (accepted for the ``--workers`` callback shape).

        Never raises on the figures' content.
        """
        scope = iv.scopes.get(ALL)
        hists = {m: iv.histogram(ALL, m).buckets() for m in HISTOGRAMS} if scope is not None else {}
        with self._lock:
            if scope is not None:
                for key, n in scope.counters.items():
                    self._counters[key] = self._counters.get(key, 0) + n
                for m, buckets in hists.items():
                    self._hists[m].add(buckets)
            self._in_flight = int(line.get("in_flight_now", 0) or 0)
            self._elapsed_ns = int(line.get("end_ns", 0) or 0)
            self.updates += 1

    def figures(self) -> tuple[dict[str, int], int, int, dict[str, tuple[list[int], int]]]:
        """A consistent copy: (counters, in flight, elapsed ns, {metric: (bucket counts, sum ns)})."""
        with self._lock:
            return (dict(self._counters), self._in_flight, self._elapsed_ns,
                    {m: (list(h.counts), h.sum_ns) for m, h in self._hists.items()})


class _Collector:
    def __init__(self, live: LiveMetrics) -> None:
        self.live = live

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

        counters, in_flight, elapsed_ns, hists = self.live.figures()
        yield CounterMetricFamily("hopbench_streams_started", "Streams started (measured phase)",
                                  value=counters.get("started", 0))
        ended = CounterMetricFamily("hopbench_streams_ended", "Streams ended, by outcome", labels=["outcome"])
        for outcome in OUTCOMES:
            ended.add_metric([outcome], counters.get(outcome, 0))
        yield ended
        broken = CounterMetricFamily("hopbench_streams_broken", "Broken streams by outcome and detail",
                                     labels=["outcome", "detail"])
        for key, n in sorted(counters.items()):
            outcome, _, detail = key.partition(".")
            if outcome in BROKEN and detail:
                broken.add_metric([outcome, detail], n)
        yield broken
        yield GaugeMetricFamily("hopbench_streams_in_flight", "Streams in flight at the last interval's end",
                                value=in_flight)
        # usage, else the output events the client counted; no sample at all (absent, not 0)
        # while no stream had either (docs/observability.md)
        tokens = CounterMetricFamily("hopbench_output_tokens", "Output tokens received (completed and broken "
                                     "streams): usage, else the output events counted")
        source = tokens_source(counters)
        if source.counted:
            tokens.add_metric([], output_tokens(counters))
        yield tokens
        streams = CounterMetricFamily("hopbench_output_token_streams", "Streams whose output tokens were "
                                      "counted, by source: usage, or events (no usage)", labels=["source"])
        streams.add_metric(["usage"], source.usage_streams)
        streams.add_metric(["events"], source.events_streams)
        yield streams
        yield GaugeMetricFamily("hopbench_run_elapsed_seconds", "Run time covered by the figures",
                                value=elapsed_ns / 1e9)
        for metric, (name, bounds, help_text) in HISTOGRAMS.items():
            counts, sum_ns = hists[metric]
            cumulative, acc = [], 0
            for bound, n in zip([*(f"{b:g}" for b in bounds), "+Inf"], counts):
                acc += n
                cumulative.append((bound, acc))
            yield HistogramMetricFamily(name, help_text, buckets=cumulative, sum_value=sum_ns / 1e9)
