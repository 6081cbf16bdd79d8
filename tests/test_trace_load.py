"""Loading a large trace (hopbench.workload._trace_file.read_trace and the TraceSpec built on it): the
compact columns, read a block of lines at a time with orjson's parse checked on the spot
(and the standard library's for any unusual line), give the same entries, arrivals,
scenarios, implied cache hits and prompts as a straightforward reading of the file, and
refuse what it refuses with the same file:line messages. No timing here: the speed is
benchmarks/bench_trace_load.py's."""

from __future__ import annotations

import bisect
import json
import pickle
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hopbench import ProfileError
from hopbench.workload import _trace_bodies, _trace_file
from hopbench.config._profile import load_profile
from hopbench.workload._trace_bodies import TraceBodies
from hopbench.workload._trace_file import TraceEntries, read_trace

MS = 1_000_000
BT = 16  # block_tokens of the generated traces


def _write_trace(path: Path, n: int, seed: int) -> None:
    """``n`` request lines (and a few blank ones) in both namings, with float and repeated
    timestamps, shared and unique hash ids (one of 2**40: the id column widens), and a
    scenario on some lines."""
    rng = random.Random(seed)
    t = 0.0
    out = []
    for k in range(n):
        t += rng.choice((0, 0.5, 1, 3))
        inp = rng.randint(1, 6 * BT)
        blocks = -(-inp // BT)
        ids = [rng.randrange(40) for _ in range(rng.randint(0, min(blocks, 3)))]
        ids += [10_000 + k * 8 + j for j in range(rng.randint(0, blocks - len(ids)))]
        if k == n // 2 and ids:
            ids[-1] = 2 ** 40
        names = ("timestamp", "input_length", "output_length") if k % 3 else (
            "timestamp_ms", "input_tokens", "output_tokens")
        line: dict[str, Any] = {names[0]: t if rng.random() < 0.5 else int(t) if t == int(t) else t,
                                names[1]: inp, names[2]: rng.randint(1, 64)}
        if ids or rng.random() < 0.5:
            line["hash_ids"] = ids
        if rng.random() < 0.2:
            line["scenario"] = rng.choice(("a", "b"))
        out.append(json.dumps(line))
        if rng.random() < 0.002:
            out.append(rng.choice(("", "  ", "\t")))
    path.write_text("\n".join(out) + "\n", encoding="utf-8")


def _reference(path: Path) -> list[tuple[float, int, int, tuple[int, ...], str | None, int]]:
    """The trace read the plain way: every non-blank line's fields, by json.loads."""
    rows = []
    for i, line in enumerate(path.read_text(encoding="utf-8").split("\n"), start=1):
        if not line.strip():
            continue
        d = json.loads(line)
        t = d.get("timestamp_ms", d.get("timestamp"))
        rows.append((float(t), d.get("input_tokens", d.get("input_length")), d.get("output_tokens",
                     d.get("output_length")), tuple(d.get("hash_ids", ())), d.get("scenario"), i))
    return rows


def _profile(tmp_path: Path, load: str) -> Path:
    prof = tmp_path / "p.toml"
    prof.write_text(f'[run]\nrequests = 10\nseed = 7\n[load]\nmode = "trace"\ntrace = "t.jsonl"\n'
                    f"block_tokens = {BT}\n{load}\n[target]\nurl = \"http://127.0.0.1:9\"\n"
                    '[[scenario]]\nname = "a"\nprotocol = "chat"\nmodel = "m"\nweight = 1\n'
                    '[[scenario]]\nname = "b"\nprotocol = "chat"\nmodel = "n"\nweight = 3\n', encoding="utf-8")
    return prof


def _implied(rows: list[tuple[float, int, int, tuple[int, ...], str | None, int]], models: list[str],
             ) -> list[tuple[int, int]]:
    """The cache hits the trace implies, by a plain trie of (model, prefix) tuples."""
    seen: set[tuple[Any, ...]] = set()
    out = []
    for (_, inp, _, ids, _, _), model in zip(rows, models):
        full = min(len(ids), inp // BT)
        hits = 0
        while hits < full and (model, *ids[:hits + 1]) in seen:
            hits += 1
        seen.update((model, *ids[:k + 1]) for k in range(full))
        out.append((hits * BT, full * BT))
    return out


def _take(it: Iterator[Any], n: int) -> list[Any]:
    return [next(it) for _ in range(n)]


@pytest.mark.parametrize("reader", ["blocks", "small blocks", "no orjson"])
def test_trace_load_large_trace_matches_a_reference_parse(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          reader: str) -> None:
    """20,000 lines: the entries, the window, each pass's arrivals (whole, and a worker's
    share), the scenarios drawn, the implied hits and the prompts are those of the
    reference reading (64-byte reads: lines longer than a read, gathered; without
    orjson: every line by the standard library)."""
    if reader == "small blocks":
        monkeypatch.setattr(_trace_file, "_CHUNK_BYTES", 64)
    elif reader == "no orjson":
        monkeypatch.setattr(_trace_file, "_fast_loads", None)
    path = tmp_path / "t.jsonl"
    _write_trace(path, 20_000, seed=3)
    rows = _reference(path)
    entries = read_trace(path)
    assert isinstance(entries, TraceEntries)
    assert [(e.t_ms, e.input_tokens, e.output_tokens, e.hash_ids, e.scenario, e.line) for e in entries] == rows

    start_ms, end_ms, speedup = rows[100][0], rows[-50][0], 2.0
    spec = load_profile(_profile(tmp_path, f"loop = true\nspeedup = {speedup}\nstart_ms = {start_ms}\n"
                                           f"end_ms = {end_ms}")).load.trace
    kept = [r for r in rows if start_ms <= r[0] < end_ms]
    assert [(e.t_ms, e.line) for e in spec.entries] == [(r[0], r[5]) for r in kept]
    period = end_ms - start_ms
    n = len(kept)
    want = [(int(round((r[0] - start_ms + rep * period) * MS / speedup)), i, rep)
            for rep in range(2) for i, r in enumerate(kept)]
    assert _take(spec.arrivals(), 2 * n) == want
    assert _take(spec.arrivals(1, 3), 10) == [w for w in want if w[1] % 3 == 1][:10]
    assert spec.scheduled_between(0, 10**9) == sum(1 for w in want if w[0] < 10**9)

    rng = random.Random("hopbench-trace-scenario:7")
    scenarios = [rng.choices(range(2), [1, 3])[0] if r[4] is None else "ab".index(r[4]) for r in kept]
    assert list(spec.scenario_index) == scenarios
    assert list(spec.implied) == _implied(kept, ["mn"[s] for s in scenarios])

    bodies = TraceBodies(spec, seed=7)
    for i in range(0, n, 997):
        inp, ids = kept[i][1], kept[i][3]
        blocks = [_trace_bodies._words(f"hopbench-trace-block:7:{h}", BT) for h in ids]
        prompt = b"".join(blocks)[: 4 * inp]
        tail = inp - len(prompt) // 4
        assert bodies.prompt(i, 1) == prompt + _trace_bodies._words(f"hopbench-trace-tail:7:{i}:1", tail)


def test_trace_load_spec_pickles_to_the_same_replay(tmp_path: Path) -> None:
    """Worker processes get the profile pickled: the columns travel, the implied hits are
    recomputed there the same."""
    _write_trace(tmp_path / "t.jsonl", 500, seed=4)
    spec = load_profile(_profile(tmp_path, "")).load.trace
    first = spec.implied[3]
    copy = pickle.loads(pickle.dumps(spec))
    assert list(copy.entries) == list(spec.entries) and list(copy.implied) == list(spec.implied)
    assert copy.implied[3] == first and list(copy.scenario_index) == list(spec.scenario_index)
    assert _take(copy.arrivals(), 500) == _take(spec.arrivals(), 500)


def test_trace_load_entries_view_indexes_and_slices_as_a_sequence(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    _write_trace(path, 50, seed=5)
    rows = _reference(path)
    entries = read_trace(path)
    view = entries[10:20]
    assert isinstance(view, TraceEntries) and len(view) == 10 and view[0].line == rows[10][5]
    assert view[-1] == entries[19] and entries[-1].line == rows[-1][5]
    assert [e.line for e in entries[::7]] == [r[5] for r in rows[::7]]
    assert view.hash_ids(2) == entries.hash_ids(12) and list(view.hash_ids(2)) == list(rows[12][3])
    assert view.bisect_t(rows[15][0]) == bisect.bisect_left([r[0] for r in rows[10:20]], rows[15][0])
    with pytest.raises(IndexError):
        entries[50]


OK = '{"timestamp": 1, "input_length": 5, "output_length": 2, "hash_ids": [1, 2]}\n'


@pytest.mark.parametrize(("content", "line", "message"), [
    # a JSON boolean is an int to array(): the line goes to the reference checks, which refuse it
    (OK * 5 + '{"timestamp": 1, "input_length": 5, "output_length": 2, "hash_ids": [1, true]}\n', 6,
     '"hash_ids": expected an array of integers >= 0'),
    (OK * 5 + '{"timestamp": 1, "input_length": true, "output_length": 2}\n', 6,
     '"input_length": expected an integer >= 0, got true'),
    (OK * 5 + '{"timestamp": false, "input_length": 5, "output_length": 2}\n', 6,
     '"timestamp": expected a number of ms >= 0, got false'),
    # an integer timestamp too large for orjson's 64 bits (it reads a float): the standard
    # library's check refuses it (past the offsets' int64 ns), at its own line
    (OK + '{"timestamp": 36893488147419111424, "input_length": 5, "output_length": 2}\n'  # 2**65 + 2**13
          '{"timestamp": 36893488147419111423, "input_length": 5, "output_length": 2}\n', 2,
     '"timestamp": expected ms under 9.22e+12'),
    (OK * 3 + '{"timestamp": 1, "input_length": 5, "output_length": 2, "hash_ids": ""}\n', 4,
     '"hash_ids": expected an array of integers >= 0'),
    (OK * 3 + '{"timestamp": 1, "input_length": 5, "output_length": 2, "scenario": ""}\n', 4,
     '"scenario": expected a scenario name'),
    (OK * 3 + '{"timestamp": 1, "timestamp_ms": 1, "input_length": 5, "output_length": 2}\n', 4,
     'both "timestamp_ms" and its Mooncake name "timestamp": keep one'),
    (OK * 3 + '{"timestamp": 0.5, "input_length": 5, "output_length": 2}\n', 4, "timestamps out of order: 0.5 after 1"),
    (OK * 3 + '{"timestamp": 1, "input_length": 5, "output_length": 2000001}\n', 4,
     '"output_length": expected at most 2,000,000 tokens'),
    # a broken line before bytes that are not UTF-8: the file's error is that it is not text
    (OK + "{oops\n" + OK * 3 + '{"x": "\udcff"}\n', 6, "not UTF-8"),
])
@pytest.mark.parametrize("chunk", [16, 1 << 20])
def test_trace_load_refuses_what_the_line_checks_refuse(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      content: str, line: int, message: str, chunk: int) -> None:
    monkeypatch.setattr(_trace_file, "_CHUNK_BYTES", chunk)
    path = tmp_path / "t.jsonl"
    path.write_bytes(content.encode("utf-8", "surrogateescape"))
    with pytest.raises(ProfileError) as info:
        read_trace(path)
    assert str(info.value).startswith(f"{path}:{line}: ") and message in str(info.value), str(info.value)


@pytest.mark.parametrize("chunk", [16, 1 << 20])
def test_trace_load_wide_ids_blank_lines_and_a_bom_read_as_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  chunk: int) -> None:
    """Ids of 2**32 and more widen the id column (to a list past 2**64); blank lines (also
    Unicode spaces) count as lines; a BOM opens the file only."""
    monkeypatch.setattr(_trace_file, "_CHUNK_BYTES", chunk)
    path = tmp_path / "t.jsonl"
    line = '{{"timestamp": {}, "input_length": 5, "output_length": 2, "hash_ids": {}}}'
    lines = [line.format(1, [1, 2]), "\u2028", line.format(2, [2 ** 32]), "", line.format(3, [3]),
             line.format(3, [2 ** 64, 0]), line.format(3, [1, 2])]
    path.write_bytes(b"\xef\xbb\xbf" + "\n".join(lines).encode("utf-8"))
    got = [(e.t_ms, e.hash_ids, e.line) for e in read_trace(path)]
    assert got == [(1.0, (1, 2), 1), (2.0, (2 ** 32,), 3), (3.0, (3,), 5), (3.0, (2 ** 64, 0), 6), (3.0, (1, 2), 7)]
