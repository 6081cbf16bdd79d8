"""``hopbench export DIR --format csv|jsonl|parquet``: a results folder as flat tables.

Role: notebooks and BI tools read runs without parsing summary.json by hand.
Two tables, written to ``--out`` (default ``DIR/export/``):

- ``summary.<ext>``: one row per figure of summary.json, long format:
  ``run`` (the run's name), ``scope`` (a scenario or ``all``), ``kind``
  (``counter``, ``tokens`` or ``metric``), ``name`` (``completed``,
  ``output.completed``, ``ttft.p99``...), ``value`` (a number), ``unit``
  (the metric's reporting unit: ``ms`` for times, as in summary.json; "" for
  counts), ``run_dir`` (the results folder's name: the column streams.<ext>
  shares, to join the two; last, so the columns before it are as they were).
- ``streams.<ext>``: streams.jsonl, one row per finished stream, after a ``run``
  column (the results folder's name, unique per run, so that several runs'
  exports concatenate) and ``run_dir`` (the same folder name: summary.<ext>'s
  join key); ``warmup`` marks the warm-up's streams (true; null in a folder
  written before the field existed); the columns are declared (``STREAM_COLUMNS``: the same
  columns, in the same order and of the same types, from run to run); a folder
  with no per-stream record (``run.stream_log = false``, a ``--workers`` run by an
  older hopbench) gets the columns and no row, and a warning saying why.
- ``scrape.<ext>`` (only when the run scraped, ``[[scrape]]``): scrape.jsonl in
  long format, one row per sample: ``url``, ``t_ms``, ``series`` (``name{labels}``),
  ``value`` (a number, or "NaN"/"+Inf" as text), ``error`` (null; for a failed
  scrape one row with ``series`` and ``value`` null and the outcome here).

After the figures, ``summary.<ext>`` carries whether the run can be trusted
(``trust_rows``, appended: the figure rows before them are unchanged):
``kind`` ``run`` (``complete``, ``saturated``, ``load.held`` as 1/0, the
load's requested and achieved figures, ``warnings`` (their number), and text
facts as ``<fact>.<text>`` = 1, as capacity's ``status.<status>``:
``interrupted_by.SIGINT``, ``profile.<file>``, ``hopbench_version.<v>``) and
``kind`` ``warning`` (one row per warning: ``name`` its text, ``value`` its
1-based place in summary.json's list). Text never goes in ``value``, so that
column stays numeric (parquet infers one type per column).

A staged or searched folder (``[[stage]]``, ``[search]``: docs/slo.md) is
exported from its stage/probe sub-folders, every row with a ``stage`` column
(``staged_rows``; docs/observability.md). A folder with nothing to export is
an error, never an empty export.

Formats: ``csv`` (RFC 4180, UTF-8, header row; null as an empty field),
``jsonl`` (one JSON object per line), ``parquet`` (needs the optional extra
``pip install 'hopbench[parquet]'``, i.e. pyarrow; every declared column has
one arrow type whatever its values: a column with no value in a run is still
typed, never ``null``; ``events`` a struct, ``headers`` a map, the per-event
lists lists of int64, ``value`` and ``t_ms`` float64). Everything read from the folder, nothing recomputed.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .._errors import ResultsError, UsageError
from ..driver._results import GATE_NAME, read_summary
from .._textfile import decode_line, iter_lines
from ..protocols import EVENT_CHANNELS

__all__ = ["export_results", "summary_rows", "trust_rows", "trust_warnings", "stream_rows", "scrape_rows",
           "staged_rows", "stream_columns", "no_streams_warning", "FORMATS", "SUMMARY_COLUMNS", "SCRAPE_COLUMNS",
           "STREAM_COLUMNS", "STREAM_OPTIONAL"]

FORMATS = ("csv", "jsonl", "parquet")
SUMMARY_COLUMNS = ("run", "scope", "kind", "name", "value", "unit", "run_dir")
#: the columns streams.<ext> has before the declared ones (a staged folder's adds ``stage``)
_STREAM_FIRST = ("run", "run_dir")
SCRAPE_COLUMNS = ("url", "t_ms", "series", "value", "error")
#: streams.<ext>'s declared columns and their types, in order, after ``run``, ``run_dir`` (and a
#: staged folder's ``stage``): docs/results/files.md, "streams.jsonl". Types: "text", "int", "bool", "events"
#: (the output events per channel), "map" (name -> text), "ints" (a list of integers). Each
#: column is typed alike in every export, also when no row has a value (a run without bursts,
#: cached tokens or recorded headers); those in ``STREAM_OPTIONAL`` (keys a profile adds: arms,
#: sessions, traces, workload lengths, gateway overhead) appear only when a row has them. A key
#: not declared here (a newer hopbench's) follows them, typed by pyarrow's inference.
STREAM_COLUMNS: tuple[tuple[str, str], ...] = (
    ("id", "text"), ("scenario", "text"), ("arm", "text"), ("warmup", "bool"), ("outcome", "text"), ("detail", "text"),
    ("status", "int"), *((f"{t}_ns", "int") for t in ("start", "sent", "headers", "first_token",
                                                       "first_content", "terminal", "end", "ttft",
                                                       "ttft_content", "e2e", "tail")),
    ("content_events", "int"), ("output_events", "int"), ("events", "events"),
    ("input_tokens", "int"), ("output_tokens", "int"), ("total_tokens", "int"), ("tokens_source", "text"),
    ("stop_class", "text"), ("max_silence_ns", "int"), ("keepalives", "int"), ("client_lag_ns", "int"),
    ("cached_tokens", "int"), ("headers", "map"), ("burst", "text"), ("burst_held_ns", "int"),
    ("session", "text"), ("turn", "int"), ("trace_line", "int"), ("trace_pass", "int"),
    ("requested_input_tokens", "int"), ("requested_max_tokens", "int"),
    ("first_read_ns", "int"), ("content_read_ns", "ints"), ("content_chars", "ints"), ("content_crc", "ints"),
    ("keepalive_read_ns", "ints"), ("quiet_read_ns", "ints"), ("content_bound_ns", "ints"),
    ("first_read_bound_ns", "int"))
STREAM_OPTIONAL = frozenset({"arm", "session", "turn", "trace_line", "trace_pass", "requested_input_tokens",
                             "requested_max_tokens", "first_read_ns", "content_read_ns", "content_chars",
                             "content_crc", "keepalive_read_ns", "quiet_read_ns", "content_bound_ns",
                             "first_read_bound_ns"})
#: every table's column types (parquet: one arrow type per column, whatever the run held)
_TYPES: dict[str, str] = {"run": "text", "run_dir": "text", "stage": "text", "scope": "text", "kind": "text",
                          "name": "text", "value": "float", "unit": "text", "url": "text", "t_ms": "float",
                          "series": "text", "error": "text"}
_STATS = ("count", "min", "mean", "p50", "p90", "p99", "p999", "max", "out_of_range")
#: summary.json ``load`` figures exported as ``run`` rows (``load.<key>``), when present and numbers
_LOAD_FIGURES = ("requested_rate_rps", "achieved_rate_rps", "due", "sent", "requested_concurrency", "mean_busy")


def summary_rows(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """summary.json's per-scope figures as long rows (``SUMMARY_COLUMNS``), scopes in file order."""
    rows: list[dict[str, Any]] = []
    run = summary.get("name")
    for scope, data in (summary.get("scopes") or {}).items():
        if not isinstance(data, dict):
            continue
        for name, v in sorted((data.get("counters") or {}).items()):
            rows.append({"run": run, "scope": scope, "kind": "counter", "name": name, "value": v, "unit": ""})
        for direction, kinds in (data.get("tokens") or {}).items():
            for kind, v in (kinds or {}).items():
                rows.append({"run": run, "scope": scope, "kind": "tokens", "name": f"{direction}.{kind}",
                             "value": v, "unit": ""})
        for metric, stats in (data.get("metrics") or {}).items():
            if not isinstance(stats, dict):
                continue
            for stat in _STATS:
                if stat in stats and stats[stat] is not None:
                    unit = "" if stat in ("count", "out_of_range") else str(stats.get("unit") or "")
                    rows.append({"run": run, "scope": scope, "kind": "metric", "name": f"{metric}.{stat}",
                                 "value": stats[stat], "unit": unit})
    return rows


def gate_rows(results_dir: Path, run: Any) -> list[dict[str, Any]]:
    """The gate's verdict as ``hopbench run`` wrote it (``gate.json``, docs/results.md),
    as long rows (``kind`` "run", ``scope`` "all"): ``gate.passed`` (1/0),
    ``gate.exit_code``, and per budget ``gate.budget.<key>`` = 1 when it held, 0
    when it breached or was inconclusive. [] without gate.json (no ``[gate]``, or
    results written before it existed).

    Raises:
        ResultsError: gate.json exists but is not a JSON object with a boolean "passed".
    """
    path = Path(results_dir) / GATE_NAME
    if not path.is_file():
        return []
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ResultsError(f"{path}: unreadable gate verdict: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("passed"), bool):
        raise ResultsError(f'{path}: expected a JSON object with a boolean "passed" (hopbench run\'s gate verdict)')
    facts: list[tuple[str, int]] = [("gate.passed", int(data["passed"]))]
    if isinstance(data.get("exit_code"), int):
        facts.append(("gate.exit_code", data["exit_code"]))
    for b in data.get("budgets") or ():
        if isinstance(b, dict) and isinstance(b.get("key"), str):
            facts.append((f"gate.budget.{b['key']}", int(b.get("passed") is True)))
    return [{"run": run, "scope": "all", "kind": "run", "name": k, "value": v, "unit": ""} for k, v in facts]


def trust_rows(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """Whether the run can be trusted, as long rows (``SUMMARY_COLUMNS``, ``scope`` "all").

    The run-level facts of summary.json (docs/results/summary-json.md, "summary.json" and
    "Warnings") that :func:`summary_rows` leaves out, so that a partial,
    saturated or under-loaded run does not look whole in a notebook. Each row
    only when summary.json has the fact (an older or a running summary may lack some):

    - ``kind`` "run": ``complete``, ``saturated``, ``load.held`` (1/0);
      ``load.requested_rate_rps``, ``load.achieved_rate_rps`` (requests/s),
      ``load.due``, ``load.sent`` (an open loop's arrivals due and requests sent),
      ``load.requested_concurrency``, ``load.mean_busy`` (users); ``warnings``
      (how many); and the text facts as ``<fact>.<text>`` = 1 (the convention of
      capacity's ``status.<status>``): ``interrupted_by.<reason>`` (only when
      interrupted), ``profile.<profile file>``, ``hopbench_version.<version>``.
    - ``kind`` "warning": one row per warning, ``name`` its text, ``value`` its
      1-based place in the list (most important first).

    The run's name is every row's ``run``. summary.json records the ``[gate]``
    budgets, not a gate verdict: the verdict ``hopbench run`` wrote (gate.json)
    is :func:`gate_rows`; export does not re-run the gate.

    Args:
        summary: a summary.json dict.

    Returns:
        list of row dicts, in the order above; [] when summary.json has none of them.
    """
    run = summary.get("name")
    facts: list[tuple[str, float | int, str]] = []

    def flag(name: str, v: Any) -> None:
        if isinstance(v, bool):
            facts.append((name, int(v), ""))

    def text(fact: str, v: Any) -> None:
        if isinstance(v, str) and v:
            facts.append((f"{fact}.{v}", 1, ""))

    flag("complete", summary.get("complete"))
    text("interrupted_by", summary.get("interrupted_by"))
    flag("saturated", summary.get("saturated"))
    load = summary.get("load")
    if isinstance(load, dict):
        flag("load.held", load.get("held"))
        for key in _LOAD_FIGURES:
            v = load.get(key)
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                facts.append((f"load.{key}", v, _unit(key)))
    warnings = summary.get("warnings")
    warnings = [w for w in warnings if isinstance(w, str)] if isinstance(warnings, list) else None
    if warnings is not None:
        facts.append(("warnings", len(warnings), ""))
    profile = summary.get("profile")
    if isinstance(profile, dict):
        text("profile", profile.get("_source"))
    env = summary.get("environment")
    if isinstance(env, dict):
        text("hopbench_version", env.get("hopbench"))
    rows = [{"run": run, "scope": "all", "kind": "run", "name": k, "value": v, "unit": u} for k, v, u in facts]
    rows += [{"run": run, "scope": "all", "kind": "warning", "name": w, "value": i, "unit": ""}
             for i, w in enumerate(warnings or (), 1)]
    return rows


def trust_warnings(summary: dict[str, Any], where: Path | str) -> list[str]:
    """What ``hopbench export`` says on stderr about a run that cannot be taken at face value.

    One message each for an incomplete run (``complete`` false), a saturated
    load generator (``saturated``), a load not held (``load.held`` false) and
    a run in which no stream completed, or none was measured (``headline``:
    what ``hopbench run`` exits 4 for), naming ``where`` and, when summary.json
    has one, the matching warning.

    Args:
        summary: a summary.json dict (a staged folder's: the whole staged run).
        where: the results folder, as the messages name it.

    Returns:
        list of messages, possibly empty.
    """
    warnings = [w for w in summary.get("warnings") or () if isinstance(w, str)]

    def first(*starts: str) -> str:  # the matching warning; a worker's ("worker K: ...") too
        return next((f": {w}" for w in warnings
                     if w.startswith(starts) or w.partition(": ")[2].startswith(starts)), "")

    out: list[str] = []
    if summary.get("complete") is False:
        reason = summary.get("interrupted_by")
        why = f"interrupted by {reason}" if isinstance(reason, str) and reason else "complete: false"
        out.append(f"exported run {where} is incomplete ({why}): its figures cover only part of the planned "
                   f"run{first('hopbench crashed', 'run interrupted', 'target ')}")
    if summary.get("saturated") is True:
        out.append(f"exported run {where} is saturated: the load generator was the bottleneck, its latencies "
                   f"include client-side delay{first('load generator saturated')}")
    load = summary.get("load")
    if isinstance(load, dict) and load.get("held") is False:
        out.append(f"exported run {where} did not hold its load{first('load not held')}")
    head = summary.get("headline")
    if isinstance(head, dict):  # what `hopbench run` exits 4 for (run.streams_* in docs/gate.md)
        started = head.get("started")
        cancelled = head.get("client_cancelled") or 0
        if started == 0:
            out.append(f"exported run {where}: no stream was measured (none started after the warm-up)")
        elif isinstance(started, int) and not head.get("completed") and started > cancelled:
            out.append(f"exported run {where}: no stream completed ({started:,} started): its figures are of "
                       f"failures, not answers{first('nothing completed')}")
    return out


def stream_rows(results_dir: Path, warn: Callable[[str], None] | None = None) -> list[dict[str, Any]]:
    """streams.jsonl's records ([] when absent: :func:`no_streams_warning` says why).

    Args:
        results_dir: the results folder.
        warn: told about a cut last line (skipped, see :func:`_jsonl`).

    Raises:
        ResultsError: a line other than a cut last one is not a JSON object (naming file and line).
    """
    path = results_dir / "streams.jsonl"
    return _jsonl(path, warn) if path.exists() else []


def no_streams_warning(results_dir: Path, summary: dict[str, Any]) -> str:
    """What export says on stderr for a results folder with no per-stream record.

    Args:
        results_dir: the folder (a stage's sub-folder for a staged run); summary: its summary.json.

    Returns:
        e.g. "DIR: this run kept no per-stream records (streams.jsonl missing:
        run.stream_log = false in the profile): its streams table has its columns and no row".
    """
    path = results_dir / "streams.jsonl"
    return (f"{results_dir}: this run kept no per-stream records ({_no_streams_reason(summary, path)}): "
            "its streams table has its columns and no row")


def _no_streams_reason(summary: dict[str, Any], path: Path) -> str:
    if path.exists():
        return f"{path.name} is empty: no stream ended"
    profile = summary.get("profile")
    run = profile.get("run") if isinstance(profile, dict) else None
    if isinstance(run, dict) and run.get("stream_log") is False:
        return f"{path.name} missing: run.stream_log = false in the profile"
    workers = summary.get("workers")
    if isinstance(workers, int) and workers > 1:
        return (f"{path.name} missing: a --workers run by an older hopbench, which wrote none "
                "(hopbench now merges the workers' records into one streams.jsonl)")
    if not summary.get("started_at"):
        return f"{path.name} missing: the run stopped before its load started"
    return f"{path.name} missing: deleted, or never written"


def scrape_rows(results_dir: Path, warn: Callable[[str], None] | None = None) -> list[dict[str, Any]] | None:
    """scrape.jsonl as long rows (``SCRAPE_COLUMNS``), or None when the run did not scrape.

    Args:
        results_dir: the results folder.
        warn: told about a cut last line (skipped, see :func:`_jsonl`).

    Raises:
        ResultsError: a line other than a cut last one is not a JSON object (naming file and line).
    """
    path = results_dir / "scrape.jsonl"
    if not path.exists():
        return None
    rows: list[dict[str, Any]] = []
    for rec in _jsonl(path, warn):
        base = {"url": rec.get("url"), "t_ms": rec.get("t_ms")}
        samples = rec.get("s")
        if isinstance(samples, dict):
            rows += [dict(base, series=k, value=v if isinstance(v, (int, float)) else str(v), error=None)
                     for k, v in samples.items()]
        else:
            rows.append(dict(base, series=None, value=None, error=rec.get("error")))
    return rows


def _unit(name: str) -> str:
    if name.endswith("_ms"):
        return "ms"
    if name.endswith("_tokens_per_s"):
        return "tokens/s"
    if name.endswith("_rps") or name.endswith("_per_s"):
        return "requests/s"
    return ""


def _numbers(data: Any, prefix: str = "") -> list[tuple[str, float | int]]:
    """The numbers (bools as 1/0) of a JSON object, nested keys joined by dots, in file order."""
    out: list[tuple[str, float | int]] = []
    if not isinstance(data, dict):
        return out
    for k, v in data.items():
        if isinstance(v, bool):
            out.append((prefix + k, int(v)))
        elif isinstance(v, (int, float)):
            out.append((prefix + k, v))
        elif isinstance(v, dict):
            out += _numbers(v, f"{prefix}{k}.")
    return out


def staged_rows(results_dir: Path, summary: dict[str, Any], warn: Callable[[str], None] | None = None,
                ) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]] | None]:
    """The tables of a staged or searched results folder (``[[stage]]``, ``[search]``: docs/slo.md).

    Such a folder holds one complete results folder per stage or probe
    (``stage-NN-*/``, ``probe-NN-*/``, named by ``summary["stages"][i]["folder"]``);
    every row gets a ``stage`` column naming that sub-folder.

    Returns:
        (summary rows, stream rows, scrape rows or None when no stage scraped):
        summary rows are, per stage, its judged figures (``kind`` "stage":
        ``load``, ``passed``, ``good_fraction``, ``ttft_p99_ms``..., bools as
        1/0, plus ``of_record`` 1 for the stage of record) and its own
        summary.json's figures (as :func:`summary_rows`); then the capacity's
        numbers (``kind`` "capacity", ``stage`` null: ``rate_rps``,
        ``concurrency``, ``lowest_failing``..., and ``status.<status>`` = 1);
        then, appended so that the rows above stay as they were, each
        stage's :func:`trust_rows` (from its own summary.json) and the whole
        staged run's (``stage`` null: its ``complete`` covers every stage).

    Raises:
        ResultsError: a stage's sub-folder or file is unreadable or damaged
        (file:line). A stage whose sub-folder is missing is skipped and
        ``warn`` is told.
    """
    run = summary.get("name")
    run_id = Path(results_dir).resolve().name  # streams' run, every row's run_dir: the folder, unique per run
    record = summary.get("stage_of_record")
    srows: list[dict[str, Any]] = []
    trust: list[dict[str, Any]] = []
    streams: list[dict[str, Any]] = []
    scraped: list[dict[str, Any]] | None = None
    for st in summary.get("stages") or []:
        if not isinstance(st, dict):
            continue
        folder = st.get("folder")
        figures = [("of_record", int(folder == record)), *_numbers(st)]
        srows += [{"run": run, "stage": folder, "scope": "all", "kind": "stage", "name": k, "value": v,
                   "unit": _unit(k)} for k, v in figures]
        sub = results_dir / str(folder) if isinstance(folder, str) and folder else None
        if sub is None or not (sub / "summary.json").is_file():
            if warn is not None:
                warn(f"{results_dir}: stage {folder!r} has no results folder (no {sub or folder}/summary.json): "
                     "its streams and figures are not exported")
            continue
        sub_summary = read_summary(sub)
        srows += [dict(r, stage=folder) for r in summary_rows(sub_summary)]
        trust += [dict(r, stage=folder) for r in trust_rows(sub_summary)]
        got = stream_rows(sub, warn)
        if not got and warn is not None:
            warn(no_streams_warning(sub, sub_summary))
        streams += [{"run": run_id, "run_dir": run_id, "stage": folder, **r} for r in got]
        sc = scrape_rows(sub, warn)
        if sc is not None:
            scraped = (scraped or []) + [dict({"stage": folder}, **r) for r in sc]
    cap = summary.get("capacity")
    if isinstance(cap, dict):
        figures = _numbers(cap)
        if isinstance(cap.get("status"), str):
            figures.append((f"status.{cap['status']}", 1))
        srows += [{"run": run, "stage": None, "scope": "all", "kind": "capacity", "name": k, "value": v,
                   "unit": _unit(k)} for k, v in figures]
    srows += trust + [dict(r, stage=None) for r in trust_rows(summary) + gate_rows(results_dir, run)]
    return [dict(r, run_dir=run_id) for r in srows], streams, scraped


def _jsonl(path: Path, warn: Callable[[str], None] | None = None) -> list[dict[str, Any]]:
    """The JSON objects of a JSON-lines file, one per non-blank line.

    The run appends each record as one line ending in a newline; a crash (or
    ``kill -9``) mid-write can leave the file's last line cut: no newline at
    its end and not valid JSON. That one line is skipped and ``warn`` is told
    (naming the file and the line); the complete lines before it are kept.

    Raises:
        ResultsError: any other line is not UTF-8 text or not a JSON object
        (naming file:line), or the file cannot be read.
    """
    rows: list[dict[str, Any]] = []
    try:
        lines = list(iter_lines(path))
    except OSError as exc:
        raise ResultsError(f"cannot read {path}: {exc.strerror or exc}") from None
    for n, raw, last in lines:
        cut = last and not raw.endswith(b"\n")
        try:
            line = decode_line(raw, path, n)
        except ResultsError:
            if not cut:
                raise
            line = "\ufffd"  # a character cut by the crash: not JSON, skipped as a cut line below
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except ValueError as exc:
            if cut:
                if warn is not None:
                    warn(f"{path}:{n}: the last line was cut (no newline at its end, not JSON: the run "
                         f"stopped mid-write); skipped it, exported the {len(rows)} complete lines before it")
                continue
            raise ResultsError(f"{path}:{n}: not JSON: {exc}") from None
        if not isinstance(rec, dict):
            raise ResultsError(f"{path}:{n}: expected a JSON object per line")
        rows.append(rec)
    return rows


def stream_columns(rows: Sequence[dict[str, Any]], first: Sequence[str] = _STREAM_FIRST) -> list[str]:
    """streams.<ext>'s columns: ``first``, the declared ``STREAM_COLUMNS`` (those in
    ``STREAM_OPTIONAL`` only when a row has them), then any other key in first-seen order."""
    present = {k for r in rows for k in r}
    return _columns(rows, [*first, *(c for c, _ in STREAM_COLUMNS if c not in STREAM_OPTIONAL or c in present)])


def _columns(rows: Sequence[dict[str, Any]], first: Sequence[str] = ()) -> list[str]:
    cols = list(first)
    seen = set(cols)
    for r in rows:
        for k in r:
            if k not in seen:
                seen.add(k)
                cols.append(k)
    return cols


def _cell(v: Any) -> Any:
    if v is None:
        return ""
    if isinstance(v, (dict, list)):
        return json.dumps(v, separators=(",", ":"))
    return v


def _write(path: Path, rows: list[dict[str, Any]], columns: list[str], fmt: str) -> None:
    if fmt == "csv":
        with open(path, "w", encoding="utf-8", newline="") as f:
            w = csv.writer(f)
            w.writerow(columns)
            for r in rows:
                w.writerow([_cell(r.get(c)) for c in columns])
    elif fmt == "jsonl":
        with open(path, "w", encoding="utf-8") as f:
            for r in rows:
                f.write(json.dumps({c: r.get(c) for c in columns}, separators=(",", ":")) + "\n")
    else:
        import pyarrow.parquet as pq

        try:
            table = _arrow_table(rows, columns)
        except ResultsError as exc:
            raise ResultsError(f"cannot export {path.name}: {exc}") from None
        pq.write_table(table, path)


def _arrow_table(rows: list[dict[str, Any]], columns: list[str]) -> Any:
    """The rows as an arrow table, each declared column with its declared type (``_TYPES``,
    ``STREAM_COLUMNS``) whatever the values (all null: still that type); others inferred.

    Raises:
        ResultsError: a column's values do not fit its type (naming the column).
    """
    import pyarrow as pa

    kinds = {**dict(STREAM_COLUMNS), **_TYPES}
    events = pa.struct([(k, pa.int64()) for k in EVENT_CHANNELS])
    arrow = {"text": pa.string(), "int": pa.int64(), "float": pa.float64(), "events": events,
             "map": pa.map_(pa.string(), pa.string()), "ints": pa.list_(pa.int64()), "bool": pa.bool_()}
    arrays = []
    for c in columns:
        values = [r.get(c) for r in rows]
        kind = kinds.get(c)
        if kind == "float":  # a scrape's "NaN" and "+Inf" are text in csv and jsonl, numbers here
            values = [float(v) if isinstance(v, str) else v for v in values]
        try:
            arrays.append(pa.array(values, type=arrow[kind]) if kind is not None else
                          pa.array(values) if rows else pa.array([], pa.null()))
        except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:  # a hand-edited or damaged file
            want = f"{kind} values" if kind is not None else "values of one type"
            raise ResultsError(f"column {c!r}: expected {want} ({exc})") from None
    return pa.Table.from_arrays(arrays, names=columns)


def export_results(results_dir: Path, fmt: str, out: Path | None = None,
                   warn: Callable[[str], None] | None = None) -> list[Path]:
    """Write ``summary.<ext>``, ``streams.<ext>`` (and ``scrape.<ext>``) for one results folder.

    Args:
        results_dir: a folder written by ``hopbench run``.
        fmt: one of ``FORMATS``.
        out: the folder to write (default ``results_dir/export``; created).
        warn: receives one message per jsonl file whose last line was cut by a
            crash mid-write (that line is skipped), and one per reason the run
            cannot be taken at face value (:func:`trust_warnings`: incomplete,
            saturated, load not held); None: silent.

    Returns:
        the files written (two, three when the run scraped).

    Raises:
        UsageError: an unknown format, or parquet without pyarrow installed.
        ResultsError: the folder cannot be read, or the output folder cannot be written.
    """
    if fmt not in FORMATS:
        raise UsageError(f"--format: expected one of {', '.join(FORMATS)}, got {fmt!r}")
    if fmt == "parquet":
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            raise UsageError("--format parquet needs pyarrow: pip install 'hopbench[parquet]' "
                             "(or use --format csv / jsonl)") from None
    results_dir = Path(results_dir)
    summary = read_summary(results_dir)
    stages = summary.get("stages")
    if isinstance(stages, list) and stages:
        srows, streams, scraped = staged_rows(results_dir, summary, warn)
        figures = any(r["kind"] not in ("run", "warning") for r in srows)
        summary_cols = ["run", "stage", *SUMMARY_COLUMNS[1:]]
        stream_cols, scrape_cols = stream_columns(streams, (*_STREAM_FIRST, "stage")), ["stage", *SCRAPE_COLUMNS]
    else:
        srows = summary_rows(summary)
        figures = bool(srows)
        srows += trust_rows(summary) + gate_rows(results_dir, summary.get("name"))
        run_id = results_dir.resolve().name  # the folder, unique per run: runs concatenate
        srows = [dict(r, run_dir=run_id) for r in srows]  # the join key both tables share
        streams = [{"run": run_id, "run_dir": run_id, **r} for r in stream_rows(results_dir, warn)]
        scraped = scrape_rows(results_dir, warn)
        summary_cols, stream_cols, scrape_cols = list(SUMMARY_COLUMNS), stream_columns(streams), list(SCRAPE_COLUMNS)
    if not figures and not streams and not scraped:
        raise ResultsError(f"{results_dir}: nothing to export (no figure in summary.json, no stream, no scrape)")
    if warn is not None:
        for text in trust_warnings(summary, results_dir):
            warn(text)
        if not streams and not (isinstance(stages, list) and stages):  # a stage's: said per stage above
            warn(no_streams_warning(results_dir, summary))
    out = out if out is not None else results_dir / "export"
    paths = [out / f"summary.{fmt}", out / f"streams.{fmt}"]
    try:
        out.mkdir(parents=True, exist_ok=True)
        _write(paths[0], srows, summary_cols, fmt)
        _write(paths[1], streams, stream_cols, fmt)
        if scraped is not None:
            paths.append(out / f"scrape.{fmt}")
            _write(paths[2], scraped, scrape_cols, fmt)
    except OSError as exc:
        raise ResultsError(f"cannot write the export to {exc.filename or out}: "
                           f"{exc.strerror or exc} (pick a writable folder with --out)") from None
    return paths
