"""The trace keys of a ``[load]`` table of mode "trace", and the trace they name, read into a ``TraceSpec``.

Role: ``trace_keys`` reads and checks the keys (``trace``, ``speedup``,
``loop``, ``start_ms``, ``end_ms``, ``block_tokens``; docs/workloads.md,
"Trace replay"); ``parse_trace`` reads the trace file (``workload._trace_file``),
cuts its window (``workload._trace_cache.window``), gives each entry its
scenario and returns the replay (``workload._trace.TraceSpec``).

Invariants:
- Every problem is a ``ProfileError`` naming file, line and key, raised at
  profile load, before any load.
- A line that names no scenario gets one drawn by weight, seeded by the run
  seed alone: every worker draws the same.
"""

from __future__ import annotations

import array
import bisect
import collections
import itertools
import operator
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .._errors import ProfileError
from .._textfile import check_regular
from ..workload._trace import TraceSpec
from ..workload._trace_cache import implied_hits_as_read, window
from ..workload._trace_file import TraceEntries, check_blocks, read_trace

__all__ = ["DEFAULT_BLOCK_TOKENS", "MAX_REPLAY_S", "parse_trace", "trace_keys"]

#: Mooncake's traces count hash ids in blocks of 512 tokens
DEFAULT_BLOCK_TOKENS = 512
#: s, the longest replay of one pass of the window hopbench accepts (365 days): a longer
#: one is a typo (a tiny speedup, timestamps in us or ns read as ms) that would leave the
#: run idle, waiting for its next arrival, for ever
MAX_REPLAY_S = 365 * 86_400


def trace_keys(t: Any) -> tuple[str, float, bool, float | None, float | None, int]:
    """Read and check the trace keys of a ``[load]`` table (not the file).

    Returns:
        (trace path as written, speedup, loop, start_ms, end_ms, block_tokens).

    Raises:
        ProfileError: a missing ``trace``, a bad value, ``end_ms <= start_ms``.
    """
    rel = t.str("trace", None, nonempty=True)
    if rel is None:
        raise t.error("trace", 'expected the trace file (load.trace = "trace.jsonl") with load.mode = "trace"')
    speedup = float(t.number("speedup", 1.0, positive=True))
    loop = bool(t.bool("loop", False))
    start_ms = t.number("start_ms", None, min=0)
    end_ms = t.number("end_ms", None, min=0)
    if start_ms is not None and end_ms is not None and end_ms <= start_ms:
        raise t.error("end_ms", f"expected end_ms > start_ms, got {end_ms:g} <= {start_ms:g}")
    block_tokens = t.int("block_tokens", DEFAULT_BLOCK_TOKENS, min=1, max=1_000_000)
    return rel, speedup, loop, start_ms, end_ms, block_tokens


def parse_trace(t: Any, base: Path, scenarios: Sequence[tuple[str, str, bool, float]], seed: int) -> TraceSpec:
    """Read the trace keys of a ``[load]`` table and the trace file.

    Keys: ``trace`` (path, relative to the profile), ``speedup`` (> 0, default
    1), ``loop`` (default false), ``start_ms`` / ``end_ms`` (the window, trace
    time), ``block_tokens`` (tokens per hash id, default 512 as Mooncake's).

    Args:
        t: the ``[load]`` table (``_toml.Table``: errors carry file, line and key).
        base: the profile's folder.
        scenarios: (name, model, uses workload keys, weight) of each scenario, in order.
        seed: the run seed (a line that names no scenario gets one drawn by
            weight, seeded: the same in every worker).

    Raises:
        ProfileError: a bad key, an unreadable or bad trace (file:line), a line
        naming an unknown scenario, a scenario with its own workload keys, an
        empty window, a pass of the window that would take more than
        ``MAX_REPLAY_S`` to replay.
    """
    rel, speedup, loop, start_ms, end_ms, block_tokens = trace_keys(t)
    path = Path(rel) if Path(rel).is_absolute() else base / rel
    for name, _, workload, _ in scenarios:
        if workload:
            raise t.error("mode", f"scenario {name!r} has its own lengths, dataset or session (input_tokens, "
                                  "dataset, a max_tokens distribution, session): with load.mode = \"trace\" the "
                                  "trace gives every request's lengths; remove them")
    try:  # a file that cannot be opened is the profile's error: its file, line and key
        check_regular(path)
    except OSError as exc:
        raise t.error("trace", f"cannot read the trace {path}: {exc.strerror}") from None
    entries = read_trace(path)
    check_blocks(entries, block_tokens, path)
    kept, start, period = window(entries, start_ms, end_ms)
    if not kept:
        raise t.error("start_ms" if start_ms is not None else "end_ms",
                      f"no request of {path} ({len(entries)} lines, {entries[0].t_ms:g} to "
                      f"{entries[-1].t_ms:g} ms) falls in the window")
    span_ms = max(kept[-1].t_ms - start, period if loop else 0.0)
    if span_ms / 1000.0 / speedup > MAX_REPLAY_S:
        raise t.error("speedup", f"replaying {span_ms:,.6g} ms of trace (lines {kept[0].line} to {kept[-1].line} "
                                 f"of {path}) at speedup {speedup:g} takes {span_ms / 1000.0 / speedup / 86_400:,.3g} "
                                 f"days, more than hopbench's limit of {MAX_REPLAY_S // 86_400} days: raise the "
                                 "speedup, or check that the timestamps are ms")
    return TraceSpec(path, kept, (index := _scenario_index(kept, scenarios, seed, path)), start, period, speedup,
                     loop, block_tokens, implied_hits_as_read(kept, _model_index(index, scenarios), block_tokens))


def _scenario_index(kept: TraceEntries, scenarios: Sequence[tuple[str, str, bool, float]], seed: int,
                    path: Path) -> array.array[int]:
    """Per entry, the index of the scenario that sends it: the one its line names, else one
    drawn by weight (``random.Random(f"hopbench-trace-scenario:{seed}")``, one
    ``choices`` draw per such entry, in entry order).

    Raises:
        ProfileError: a line naming no scenario of the profile (file:line).
    """
    names = {name: i for i, (name, _, _, _) in enumerate(scenarios)}
    rng = random.Random(f"hopbench-trace-scenario:{seed}")
    weights = [w for _, _, _, w in scenarios]
    _, _, lines, named, trace_names = kept.columns()
    # each trace name's scenario (-1: none of the profile's), and -2 for a line naming none (index -1)
    lookup = [names.get(name, -1) for name in trace_names] + [-2]
    index: array.array[int] = array.array("i", map(lookup.__getitem__, named))
    bad = index.index(-1) if -1 in index else len(index)  # entries before it are drawn, as they were
    if len(scenarios) > 1:
        unnamed = itertools.compress(range(bad), map(operator.eq, index, itertools.repeat(-2)))
        k = next(unnamed, None)
        if k is not None:
            # the first draw as the library makes it (its errors, if any), then the same draw
            # without rebuilding the weights each time: Lib/random.py (3.11), Random.choices:
            # population[bisect(cum_weights, random() * total, 0, n - 1)]
            index[k] = rng.choices(range(len(scenarios)), weights)[0]
            cum = list(itertools.accumulate(weights))
            total, hi = cum[-1] + 0.0, len(cum) - 1
            # the others in entry order, by C loops (operator.call calls rng.random); map stops at
            # the end of `unnamed` before it draws once more
            xs = map(operator.mul, map(operator.call, itertools.repeat(rng.random)), itertools.repeat(total))
            drawn = map(bisect.bisect, itertools.repeat(cum), xs, itertools.repeat(0), itertools.repeat(hi))
            collections.deque(map(operator.setitem, itertools.repeat(index), unnamed, drawn), maxlen=0)
    elif bad == len(index):
        index = array.array("i", map(max, index, itertools.repeat(0)))  # the only scenario: 0
    if bad < len(index):
        raise ProfileError(f'trace line: "scenario": no scenario named {trace_names[named[bad]]!r} in the profile '
                           f"(scenarios: {', '.join(sorted(names))})", path=path, line=lines[bad])
    return index


def _model_index(index: Sequence[int], scenarios: Sequence[tuple[str, str, bool, float]]) -> array.array[int]:
    """Per entry, an index standing for its scenario's model (scenarios of one model: one index)."""
    models = {m: k for k, m in enumerate(dict.fromkeys(m for _, m, _, _ in scenarios))}
    of_scenario = [models[m] for _, m, _, _ in scenarios]
    if len(set(of_scenario)) == 1:
        return array.array("i", bytes(4 * len(index)))
    return array.array("i", [of_scenario[k] for k in index])
