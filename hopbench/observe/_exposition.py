"""The live endpoint's text: its figures in the Prometheus text format 0.0.4 or OpenMetrics 1.0.

Role: the pure half of ``--metrics-port`` (hopbench.observe._live_metrics holds the
figures and the server): :func:`render` turns a :class:`Figures` copy and the run's
:class:`RunLabels` into exposition text. No clock, no I/O, no lock.

Why written here and not by ``prometheus_client``'s registry: the fine buckets
make about 850 samples a scope, and the library builds and formats each sample
(a dict of labels, a float conversion) at about 10 us: 10 ms of CPU a scrape a
scenario, holding the GIL in the run's own process beside the event loop. Here a
bucket line is one f-string on labels rendered once a scope: about 10 times less.
The tests read every rendering back with ``prometheus_client``'s two parsers.

Formats (Prometheus "Exposition formats", text format 0.0.4; OpenMetrics 1.0):
- text 0.0.4: ``# HELP``/``# TYPE`` name the sample's name (``..._total`` for a
  counter); the info metric is a gauge named ``..._info``.
- OpenMetrics: ``# HELP``/``# TYPE`` name the family (no ``_total``, no ``_info``);
  the info metric has type ``info``; the text ends with ``# EOF``.
- Label values escape ``\\``, ``"`` and newlines; values are Go-style floats
  (``1.0``, ``+Inf``: ``prometheus_client.utils.floatToGoString``), except bucket
  counts and ``_count``, which are integers.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from prometheus_client.utils import floatToGoString

from ..measure._metrics import METRICS
from ..measure._outcomes import BROKEN, OUTCOMES, output_tokens, tokens_source

__all__ = ["Figures", "HISTOGRAMS", "RunLabels", "TOKENS", "render"]

#: a float as Prometheus writes it (Go's strconv: ``1.0``, ``+Inf``, ``1e+06``); prometheus_client's, untyped
_go_float: Callable[[float], str] = floatToGoString

#: recorder metric -> (exposed name, bounds in seconds, help): the registry's metrics with a
#: ``live_help`` (hopbench.measure._metrics), in display order
HISTOGRAMS: dict[str, tuple[str, tuple[float, ...], str]] = {
    spec.name: (f"hopbench_{spec.name}_seconds", spec.live_buckets_s, spec.live_help)
    for spec in METRICS.values() if spec.live_help is not None
}

#: token counters served: family name -> (counter prefix, help); each sums ``<prefix>.completed``
#: and ``<prefix>.broken`` (hopbench.measure._sinks.record_stream)
TOKENS: dict[str, tuple[str, str]] = {
    "hopbench_output_tokens": ("tokens.output", "Output tokens received (completed and broken streams): "
                               "usage, else the output events counted"),
    "hopbench_input_tokens": ("tokens.input", "Input (prompt) tokens the server reported "
                              "(completed and broken streams)"),
}


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


@dataclass(frozen=True, slots=True)
class Figures:
    """A consistent copy of the endpoint's figures (``LiveMetrics.figures``).

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


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


#: metric -> its bucket bounds as ``le`` values, ``+Inf`` last (rendered once)
_LES: dict[str, list[str]] = {m: [*(_go_float(b) for b in bounds), "+Inf"] for m, (_, bounds, _) in HISTOGRAMS.items()}


class _Text:
    """Lines of one exposition, in one format."""

    def __init__(self, openmetrics: bool) -> None:
        self.openmetrics = openmetrics
        self.lines: list[str] = []

    def family(self, name: str, kind: str, help_text: str) -> None:
        """``# HELP`` and ``# TYPE`` of a family (``name`` without ``_total``/``_info``)."""
        if not self.openmetrics:  # text 0.0.4 names the sample; an info metric is a gauge there
            name = f"{name}_total" if kind == "counter" else f"{name}_info" if kind == "info" else name
            kind = "gauge" if kind == "info" else kind
        self.lines.append(f"# HELP {name} {help_text}")
        self.lines.append(f"# TYPE {name} {kind}")


def render(fig: Figures, labels: RunLabels, openmetrics: bool = False) -> str:
    """The exposition of ``fig`` (docs/observability.md, "Live figures").

    Args:
        fig: the figures.
        labels: the run's labels.
        openmetrics: OpenMetrics 1.0 text (ends with ``# EOF``), else the text format 0.0.4.

    Returns:
        the exposition, newline-terminated. Never raises.
    """
    out = _Text(openmetrics)
    add = out.lines.append
    scope_labels = {scope: f'{labels.scope_label}="{_escape(scope)}",'
                           f'protocol="{_escape(labels.protocols.get(scope, ""))}"'
                    for scope in sorted({*fig.counters, *fig.histograms})}
    out.family("hopbench_run", "info", "The run: hopbench version, profile file, run name, run id "
                                       "(the results folder's name), target")
    info = ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(labels.info.items()))
    add(f"hopbench_run_info{{{info}}} 1.0")
    counters = sorted(fig.counters.items())
    out.family("hopbench_streams_started", "counter", "Streams started (measured phase)")
    for scope, c in counters:
        add(f"hopbench_streams_started_total{{{scope_labels[scope]}}} {_go_float(c.get('started', 0))}")
    out.family("hopbench_streams_ended", "counter", "Streams ended, by outcome")
    for scope, c in counters:
        for outcome in OUTCOMES:
            add(f'hopbench_streams_ended_total{{{scope_labels[scope]},outcome="{outcome}"}} '
                f"{_go_float(c.get(outcome, 0))}")
    out.family("hopbench_streams_broken", "counter", "Broken streams by outcome and detail")
    for scope, c in counters:
        for key, n in sorted(c.items()):
            outcome, _, detail = key.partition(".")
            if outcome in BROKEN and detail:
                add(f'hopbench_streams_broken_total{{{scope_labels[scope]},outcome="{outcome}",'
                    f'detail="{_escape(detail)}"}} {_go_float(n)}')
    for name, (prefix, help_text) in TOKENS.items():
        out.family(name, "counter", help_text)
        for scope, c in counters:
            if prefix == "tokens.output":
                # usage, else the output events the client counted; absent, not 0, while no
                # stream of the scope had either (docs/results/counters.md)
                if not tokens_source(c).counted:
                    continue
                n = output_tokens(c)
            else:
                n = c.get(f"{prefix}.completed", 0) + c.get(f"{prefix}.broken", 0)
            add(f"{name}_total{{{scope_labels[scope]}}} {_go_float(n)}")
    out.family("hopbench_output_token_streams", "counter",
               "Streams whose output tokens were counted, by source: usage, or events (no usage)")
    for scope, c in counters:
        source = tokens_source(c)
        for kind, n in (("usage", source.usage_streams), ("events", source.events_streams)):
            add(f'hopbench_output_token_streams_total{{{scope_labels[scope]},source="{kind}"}} {_go_float(n)}')
    out.family("hopbench_streams_in_flight", "gauge", "Streams in flight at the last interval's end")
    if fig.in_flight is not None:  # unknown before the first interval: absent, not 0
        add(f"hopbench_streams_in_flight {_go_float(fig.in_flight)}")
    out.family("hopbench_run_elapsed_seconds", "gauge", "Run time covered by the figures")
    if fig.elapsed_ns is not None:
        add(f"hopbench_run_elapsed_seconds {_go_float(fig.elapsed_ns / 1e9)}")
    for metric, (name, _, help_text) in HISTOGRAMS.items():
        out.family(name, "histogram", help_text)
        for scope, by_metric in sorted(fig.histograms.items()):
            if metric not in by_metric:  # no sample yet: absent, not an empty histogram
                continue
            counts, sum_ns = by_metric[metric]
            head = f"{name}_bucket{{{scope_labels[scope]},le=\""
            acc = 0
            for le, n in zip(_LES[metric], counts):
                acc += n
                add(f'{head}{le}"}} {acc}')
            add(f"{name}_count{{{scope_labels[scope]}}} {acc}")
            add(f"{name}_sum{{{scope_labels[scope]}}} {_go_float(sum_ns / 1e9)}")
    if openmetrics:
        add("# EOF")
    return "\n".join(out.lines) + "\n"
