"""Live progress while a run goes: a rich panel on a terminal, plain log lines otherwise.

Role: presentation only. The run hands each finished interval to
:meth:`LiveProgress.on_interval` (the interval snapshot, its timeline record
and, optionally, the cumulative measured snapshot); the figures shown are
computed from those, never from the recorder itself.

Invariants (the measurement must not be disturbed):

* ``on_interval`` only appends to a pending list under a lock: O(1), no
  decoding, no rendering. Figures are computed when they are shown, at most
  :data:`REFRESH_PER_S` times a second on a terminal (rich's refresh thread)
  and at most once per :data:`PLAIN_EVERY_NS` of run time in plain mode, so
  the cost follows the display rate, not the interval rate.
* Plain mode prints one line per second of the run's clock: the first interval
  that ends in a new whole second prints it (``[0:03 / 0:30 (0:27 left)]``:
  elapsed and left add up to the plan), whatever the intervals' lengths. A late
  tick (a busy machine ends an interval at 2.3 s, the next at 3.0 s) skips no
  second, and the run's last, short interval prints no second line for the same
  second (issue 39 item 7); only a loop stalled for more than a whole second,
  when no interval ends in that second, leaves a second without a line.
* "Last interval" figures are taken over the intervals received since the
  previous display (one interval at the default 1 s interval); "run so far"
  figures come from the cumulative snapshot when the run passes one, else
  from the sum of the measured intervals received (the same histograms).
* Times are integer ns inside; shown in ms (latency) and s (clock).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from rich import box
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

from ..measure._hdr import Histogram
from ..measure._outcomes import BROKEN
from ..config._records import Profile
from ..measure._recorder import ALL, IntervalSnapshot, Snapshot
from .._units import NS_PER_MS, NS_PER_S

__all__ = ["LiveProgress", "ProgressFigures", "REFRESH_PER_S", "PLAIN_EVERY_NS"]

REFRESH_PER_S = 2
"""Highest terminal refresh rate (renders per second)."""

PLAIN_EVERY_NS = 1_000_000_000
"""Shortest run time between two plain progress lines (ns)."""

_LATENCY = ("ttft", "itl")
_HEALTH = ("schedule_lag", "loop_lag")
_BROKEN = tuple((k, f"{k}.") for k in BROKEN)


@dataclass(frozen=True, slots=True)
class ProgressFigures:
    """What the progress display shows at one moment.

    Attributes:
        elapsed_ns: run time at the end of the last interval received.
        planned_ns: the run's planned duration (warm-up included), or None.
        requests_left: run.requests minus requests started and arrivals dropped
            at max_in_flight, or None.
        warming_up: the last interval began inside the warm-up period.
        in_flight_now, in_flight_mean: streams a gateway sees open (request
            sent, not finished) at the interval's end / on average.
        connecting_now, waiting_now: streams opening a connection / waiting
            to start on the client side at the interval's end (docs/results/in-flight.md,
            "In flight").
        started_per_s, completed_per_s, output_tokens_per_s: rates over the
            recent intervals (warm-up included, as in timeline.jsonl).
        recent, run: metric -> (p50, p99) in ns for ``ttft`` and ``itl``, over
            the recent intervals and the measured run so far (None: no value).
        broken: kind -> (total, {detail: count}) for failed, truncated,
            timeout, connect_error, http_error (``_outcomes.BROKEN``), run so far (measured).
        keepalive_violations: run so far (measured).
        cpu: generator CPU use over the recent intervals (fraction of one core).
        lag_p99_ns: ``schedule_lag`` / ``loop_lag`` -> p99 in ns over the recent
            intervals (None: not recorded, e.g. no schedule lag in a closed loop).
    """

    elapsed_ns: int
    planned_ns: int | None
    requests_left: int | None
    warming_up: bool
    in_flight_now: int
    in_flight_mean: float
    started_per_s: float
    completed_per_s: float
    output_tokens_per_s: float
    recent: dict[str, tuple[int, int] | None]
    run: dict[str, tuple[int, int] | None]
    broken: dict[str, tuple[int, dict[str, int]]]
    keepalive_violations: int
    cpu: float
    lag_p99_ns: dict[str, int | None]
    connecting_now: int = 0
    waiting_now: int = 0

    @property
    def remaining_ns(self) -> int | None:
        """Planned run time left (ns), or None for a run bounded by requests only."""
        return None if self.planned_ns is None else max(self.planned_ns - self.elapsed_ns, 0)


@dataclass(slots=True)
class _Acc:
    """Sums over the intervals received (run-so-far when no total is given)."""

    hists: dict[str, Histogram] = field(default_factory=dict)
    counters: dict[str, int] = field(default_factory=dict)


def _p50_p99(h: Histogram) -> tuple[int, int] | None:
    return (h.percentile(50.0), h.percentile(99.0)) if h.count else None


def _ms(ns: int | None) -> str:
    if ns is None:
        return "-"
    v = ns / NS_PER_MS
    return f"{v:.0f}" if v >= 1000 else f"{v:.1f}" if v >= 10 else f"{v:.2f}"


def _ms_unit(ns: int | None) -> str:
    return "-" if ns is None else f"{_ms(ns)} ms"


def _clock(ns: int) -> str:
    s = ns // NS_PER_S
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


class LiveProgress:
    """Progress of one run: a live rich panel, or plain lines (``plain=True``).

    Use as a context manager around the run and pass :meth:`on_interval` as
    the run's per-interval callback.
    """

    def __init__(self, profile: Profile, console: Console, *, plain: bool) -> None:
        """Prepare the display (nothing is shown before ``__enter__``).

        Args:
            profile: the profile being run (planned duration, request budget, warm-up).
            console: where to draw (hopbench uses ``Console(stderr=True)``).
            plain: True for one plain line per second of run time (stdout not a
                terminal); False for a live panel refreshed up to twice a second.
        """
        self.profile = profile
        self.console = console
        self.plain = plain
        self._lock = threading.Lock()
        self._pending: list[tuple[IntervalSnapshot, dict[str, Any]]] = []
        self._total: Snapshot | None = None
        self._acc = _Acc()
        self._figures: ProgressFigures | None = None
        self._shown_at = 0.0  # time.monotonic() when the figures were last computed
        self._last_plain_s: int | None = None  # the run-clock second of the last plain line
        self._live: Live | None = None
        self._closing = False

    # -- the run's side -------------------------------------------------------------

    def __enter__(self) -> LiveProgress:
        if not self.plain:
            self._live = Live(get_renderable=self._renderable, console=self.console,
                              refresh_per_second=REFRESH_PER_S, transient=False,
                              redirect_stdout=False, redirect_stderr=False)
            self._live.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._live is not None:
            self._closing = True  # the final frame shows the run's own end time
            self._live.stop()  # draws the final figures once more
            self._live = None
        elif self.plain:
            fig = self.figures()
            # the run's end: its last figures, unless a line already showed this second
            if fig is not None and fig.elapsed_ns // PLAIN_EVERY_NS != self._last_plain_s:
                self.console.print(plain_line(fig), markup=False, highlight=False, soft_wrap=True)

    def on_interval(self, iv: IntervalSnapshot, line: dict[str, Any], total: Snapshot | None = None) -> None:
        """Take one finished interval (called by the run, once per interval).

        Args:
            iv: the measured interval snapshot (empty during the warm-up).
            line: its timeline record (start_ns, end_ns, in_flight_mean,
                in_flight_now, cpu, started_total, completed, started, output_tokens).
            total: the cumulative measured snapshot so far, when the run has one
                at hand (else run-so-far figures are summed from the intervals).

        Never raises on the figures' content; costs O(1) except in plain mode
        once per second of run time, when a line is printed.
        """
        with self._lock:
            self._pending.append((iv, line))
            if total is not None:
                self._total = total
        if self.plain:
            # one line per second of the run's clock: the first interval ending in a new
            # second prints it (not "a second after the last line": a late tick then skipped
            # the next second's line)
            second = int(line.get("end_ns", 0)) // PLAIN_EVERY_NS
            if self._last_plain_s is None or second > self._last_plain_s:
                fig = self.figures()
                if fig is not None:
                    self._last_plain_s = second
                    self.console.print(plain_line(fig), markup=False, highlight=False, soft_wrap=True)

    # -- figures --------------------------------------------------------------------

    def figures(self) -> ProgressFigures | None:
        """Fold the intervals received since the last call into the figures.

        Returns:
            The current figures, or None before the first interval.
        """
        with self._lock:
            pending, self._pending = self._pending, []
            total = self._total
        if not pending:
            return self._figures
        recent: dict[str, Histogram] = {m: Histogram(m) for m in _LATENCY + _HEALTH}
        acc = self._acc
        for iv, _ in pending:
            for metric in _LATENCY + _HEALTH:
                h = iv.histogram(ALL, metric)
                if h.count:
                    recent[metric].add(h)
                    if total is None and metric in _LATENCY:
                        acc.hists.setdefault(metric, Histogram(metric)).add(h)
            scope = iv.scopes.get(ALL)
            if scope is not None:
                for key, n in scope.counters.items():
                    acc.counters[key] = acc.counters.get(key, 0) + n
        if total is not None:
            run_h = {m: total.histogram(ALL, m) for m in _LATENCY}
            s = total.scopes.get(ALL)
            counters = dict(s.counters) if s is not None else {}
        else:
            run_h = {m: acc.hists.get(m, Histogram(m)) for m in _LATENCY}
            counters = acc.counters
        lines = [ln for _, ln in pending]
        last = lines[-1]
        span_ns = max(int(last["end_ns"]) - int(lines[0].get("start_ns", 0)), 1)
        per_s = NS_PER_S / span_ns
        broken: dict[str, tuple[int, dict[str, int]]] = {}
        for kind, prefix in _BROKEN:
            details = {k[len(prefix):]: n for k, n in counters.items()
                       if k.startswith(prefix) and n}
            broken[kind] = (counters.get(kind, 0), dict(sorted(details.items())))
        run_spec = self.profile.run
        cpu_ns = sum(float(ln.get("cpu", 0.0)) * (int(ln["end_ns"]) - int(ln.get("start_ns", 0)))
                     for ln in lines)
        fig = ProgressFigures(
            elapsed_ns=int(last["end_ns"]),
            planned_ns=run_spec.duration_ns,
            # arrivals dropped at max_in_flight used up the budget too
            requests_left=(None if run_spec.requests is None
                           else max(run_spec.requests - int(last.get("started_total", 0))
                                    - int(last.get("dropped_total", 0)), 0)),
            # the last interval began inside the warm-up: its figures hold warm-up streams (by its
            # end, a late tick's 1.013 s interval of a 1 s warm-up lost the mark, as the workers'
            # merged intervals, which end at their latest worker's tick, always did)
            warming_up=int(last.get("start_ns", 0)) < run_spec.warmup_ns,
            in_flight_now=int(last.get("in_flight_now", 0)),
            # weighted by each interval's real length (a late tick's interval is longer)
            in_flight_mean=float(sum(float(ln.get("in_flight_mean", 0.0))
                                     * (int(ln["end_ns"]) - int(ln.get("start_ns", 0))) for ln in lines)
                                 / span_ns),
            started_per_s=sum(int(ln.get("started", 0)) for ln in lines) * per_s,
            completed_per_s=sum(int(ln.get("completed", 0)) for ln in lines) * per_s,
            output_tokens_per_s=sum(int(ln.get("output_tokens", 0)) for ln in lines) * per_s,
            recent={m: _p50_p99(recent[m]) for m in _LATENCY},
            run={m: _p50_p99(run_h[m]) for m in _LATENCY},
            broken=broken,
            keepalive_violations=counters.get("keepalive_violations", 0),
            cpu=cpu_ns / span_ns,
            lag_p99_ns={m: recent[m].percentile(99.0) if recent[m].count else None for m in _HEALTH},
            connecting_now=int(last.get("connecting_now", 0)),
            waiting_now=int(last.get("waiting_now", 0)),
        )
        self._figures = fig
        self._shown_at = time.monotonic()
        return fig

    def _renderable(self) -> RenderableType:
        fig = self.figures()
        if fig is None:
            return Text(f"hopbench: {self.profile.run.name}: starting...", style="dim")
        # the clock keeps ticking between intervals (display only)
        ahead_ns = 0 if self._closing else int((time.monotonic() - self._shown_at) * NS_PER_S)
        return render(fig, self.profile.run.name, min(ahead_ns, self.profile.run.interval_ns))


def _broken_text(fig: ProgressFigures) -> str:
    parts = []
    for kind, (n, details) in fig.broken.items():
        label = kind.replace("_", " ")
        if details:
            inner = ", ".join(f"{k} {v}" for k, v in details.items())
            parts.append(f"{label} {n} ({inner})")
        else:
            parts.append(f"{label} {n}")
    return "  ".join(parts)


def _time_text(fig: ProgressFigures, ahead_ns: int = 0) -> str:
    # whole seconds, and what is left counted from them: "0:03 / 0:30 (0:27 left)" (left from
    # the exact 3.3 s read 0:26, which did not add up to the plan)
    elapsed = (fig.elapsed_ns + ahead_ns) // NS_PER_S * NS_PER_S
    out = _clock(elapsed)
    if fig.planned_ns is not None:
        out += f" / {_clock(fig.planned_ns)} ({_clock(max(fig.planned_ns - elapsed, 0))} left)"
    if fig.requests_left is not None:
        out += f", {fig.requests_left} requests left"
    if fig.warming_up:
        out += " [warm-up]"
    return out


def plain_line(fig: ProgressFigures) -> str:
    """One log line of the figures (plain mode), e.g.
    ``[0:12 / 0:30 (0:18 left)] in flight 16 started 51.0/s done 50.0/s tok 4000/s
    ttft p50/p99 150/250 ms (run 151/260) itl ... broken: ... ka-viol 0 cpu 12% lag p99 1.20 ms``.
    """
    def pair(v: tuple[int, int] | None) -> str:
        return "-/-" if v is None else f"{_ms(v[0])}/{_ms(v[1])}"

    lag = fig.lag_p99_ns
    return (f"[{_time_text(fig)}] in flight {fig.in_flight_now} connecting {fig.connecting_now} "
            f"waiting {fig.waiting_now} started {fig.started_per_s:.1f}/s "
            f"done {fig.completed_per_s:.1f}/s tok {fig.output_tokens_per_s:.0f}/s "
            f"ttft p50/p99 {pair(fig.recent['ttft'])} ms (run {pair(fig.run['ttft'])}) "
            f"itl p50/p99 {pair(fig.recent['itl'])} ms (run {pair(fig.run['itl'])}) "
            f"| {_broken_text(fig)} | keepalive violations {fig.keepalive_violations} "
            f"| cpu {fig.cpu:.0%} loop lag p99 {_ms_unit(lag['loop_lag'])} "
            f"schedule lag p99 {_ms_unit(lag['schedule_lag'])}")


def render(fig: ProgressFigures, name: str, ahead_ns: int = 0) -> RenderableType:
    """The live panel for the figures (rich renderable)."""
    head = Text.assemble(("hopbench ", "bold"), (name, "bold cyan"), "  ", _time_text(fig, ahead_ns))
    rates = Text(f"in flight {fig.in_flight_now} (mean {fig.in_flight_mean:.1f}; "
                 f"+{fig.connecting_now} connecting, {fig.waiting_now} waiting to start)   "
                 f"started {fig.started_per_s:.1f}/s   completed {fig.completed_per_s:.1f}/s   "
                 f"output {fig.output_tokens_per_s:,.0f} tok/s")
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 1))
    table.add_column("ms")
    for col in ("p50 last", "p99 last", "p50 run", "p99 run"):
        table.add_column(col, justify="right")
    for metric in _LATENCY:
        r, t = fig.recent[metric], fig.run[metric]
        table.add_row(metric.upper(), _ms(r[0] if r else None), _ms(r[1] if r else None),
                      _ms(t[0] if t else None), _ms(t[1] if t else None))
    n_broken = sum(n for n, _ in fig.broken.values())
    broken = Text("broken: " + _broken_text(fig), style="red" if n_broken else "dim")
    ka = Text(f"keepalive violations {fig.keepalive_violations}",
              style="yellow" if fig.keepalive_violations else "dim")
    lag = fig.lag_p99_ns
    hot = fig.cpu >= 0.9 or any(v is not None and v > 25 * NS_PER_MS for v in lag.values())
    health = Text(f"generator: CPU {fig.cpu:.0%}   loop lag p99 {_ms_unit(lag['loop_lag'])}   "
                  f"schedule lag p99 {_ms_unit(lag['schedule_lag'])}",
                  style="bold red" if hot else "dim")
    return Group(head, rates, table, broken, ka, health)
