"""Number formatting and the load's phrase, shared by the views of a results folder.

Role: the rounding rules for reporting-unit figures (ms, tokens/s), each
defined once: :func:`fmt_num` so that the terminal and the HTML page show the
same digits for the same value, :func:`fmt_cell` for ``hopbench compare``'s
cells and :func:`fmt_limit` for ``hopbench gate``'s values and limits; and one
phrase for summary.json ``load``'s requested-vs-achieved figures
(:func:`load_phrase`), so that the terminal's and report.html's ``load:``
line and ``hopbench gate``'s ``run.load_held`` say the same thing in the same
words; and one phrase for the machine's CPU figures of summary.json
``generator`` (:func:`cpu_phrase`, the ``cpu:`` line of both views). Pure; imports nothing from hopbench (every view may import it; the gate
does not load rich for it).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["fmt_num", "fmt_cell", "fmt_limit", "load_phrase", "cpu_phrase", "plural", "fmt_size"]


def plural(n: int, noun: str, many: str | None = None) -> str:
    """``noun`` for a count of 1, else its plural (``many``, or ``noun`` + "s"): "1 worker",
    "2 workers", never "worker(s)" (issue 39: every message true). The caller prints the count.
    Never raises."""
    return noun if n == 1 else (many if many is not None else noun + "s")


def fmt_size(n_bytes: int) -> str:
    """A file's size for a message: MB (10^6 bytes) with one decimal, or KB (10^3) under
    0.1 MB, so a small file never reads "0.0 MB" (issue 39): "1.3 MB", "42.5 KB". Never raises."""
    return f"{n_bytes / 1e6:.1f} MB" if n_bytes >= 100_000 else f"{n_bytes / 1e3:.1f} KB"


def fmt_num(value: object) -> str:
    """A reporting-unit float with about 3-4 significant figures; a nonzero one that would read
    ``0.000`` (a same-read gap, 0 ns kept as HDR's 1 ns) as ``<0.001`` (as the terminal's tables)."""
    if not isinstance(value, (int, float)):
        return "-"
    v = float(value)
    a = abs(v)
    if v and a < 0.0005:
        return "<0.001" if v > 0 else ">-0.001"
    if a >= 1000:
        return f"{v:,.0f}"
    if a >= 100:
        return f"{v:.1f}"
    if a >= 1:
        return f"{v:.2f}"
    return f"{v:.3f}"


def _short(v: float) -> str:
    """The digits compare and gate share: 0 as "0", one decimal from 100, two from 1, else 3 figures."""
    if v == 0:
        return "0"
    a = abs(v)
    if a >= 100:
        return f"{v:.1f}"
    if a >= 1:
        return f"{v:.2f}"
    return f"{v:.3g}"


def fmt_tiny(value: float) -> str | None:
    """``"<0.001"`` (``">-0.001"`` below zero) for a nonzero value under 0.001 in magnitude (a gap
    below 1 us: a same-read gap of 0 ns kept as HDR's 1 ns), else None: the one rule compare's
    cells, the gate's table and the verdicts' sentences share, never ``"1e-06"``."""
    if value and abs(value) < 0.001:
        return "<0.001" if value > 0 else ">-0.001"
    return None


def fmt_cell(value: float | int | None) -> str:
    """A figure in a ``hopbench compare`` cell (reporting unit, or a count).

    Args:
        value: a statistic in its reporting unit (ms, tokens/s), a change of one,
            or an integer count; None when the side has no sample.

    Returns:
        ``"-"`` for None; an integer as it is (``"1234"``); a float as
        :func:`_short` has it, but a nonzero value under 0.001 (a gap below 1 us:
        a same-read gap of 0 ns kept as HDR's 1 ns) as ``"<0.001"`` (``">-0.001"``
        below zero), never ``"1e-06"``. Never raises.
    """
    if value is None:
        return "-"
    if isinstance(value, int):
        return str(value)
    return fmt_tiny(value) or _short(value)


def fmt_confidence(alpha: float) -> str:
    """The confidence ``1 - alpha`` as a percentage with the digits it needs: ``"99%"`` for 0.01,
    ``"99.9%"`` for 0.001, ``"99.9999999%"`` for 1e-9 (never ``"100%"`` for an alpha above 0)."""
    return f"{100 * (1 - alpha):.10f}".rstrip("0").rstrip(".") + "%"


def fmt_limit(value: float) -> str:
    """A measured value or a limit in ``hopbench gate``'s report (reporting unit, no unit).

    Returns:
        From 100 up, whole when the tenth is 0 (``"150"``, ``"159.4"``) and
        whole from 100,000 (``"123457"``); below, as :func:`_short` has it
        (``"0"``, ``"1.50"``, ``"0.0123"``); a nonzero value under 0.001 (a same-read gap of
        0 ns kept as HDR's 1 ns) as ``"<0.001"``, as :func:`fmt_cell` has it, never
        ``"1e-06"``. Never raises.
    """
    tiny = fmt_tiny(value)
    if tiny is not None:
        return tiny
    if abs(value) >= 100:
        return (f"{value:.0f}" if abs(value) >= 100_000 else f"{value:.1f}").removesuffix(".0")
    return _short(value)


def _number(load: Mapping[str, Any], key: str) -> bool:
    v = load.get(key)
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def load_phrase(load: Mapping[str, Any]) -> str:
    """The load a run held against what it asked, one phrase (docs/results/in-flight.md, "Load held").

    Args:
        load: summary.json's ``load`` block, or a stage's figures in ``stages``
            (the same keys); missing or null figures are left out.

    Returns:
        An open loop: ``9 of 10 due arrivals sent (7.50 of 10.00 requests/s)``
        (``sent`` of ``due``, then ``achieved_rate_rps`` of ``requested_rate_rps``;
        without ``due``, an older summary: ``5.50 of 15.00 requests/s sent``;
        without rates, a trace at one instant: ``2 of 2 due arrivals sent``),
        then ``, and 36 later session turns`` when sessions arrived (their turns
        after the first are not arrivals: ``later_turns_sent``), then
        ``, 57 arrivals dropped at max_in_flight = 5`` when some were; a
        closed loop: ``7.90 of 8 users busy with the target on average``
        (``mean_busy`` of ``requested_concurrency``), with sessions' think times
        ``4.36 of 8 users busy with the target and 3.50 thinking between session
        turns on average`` (``mean_thinking``); "" when the block has neither.
        Never raises.
    """
    rates = _number(load, "requested_rate_rps") and _number(load, "achieved_rate_rps")
    if _number(load, "due") and _number(load, "sent"):
        text = f"{load['sent']:,} of {load['due']:,} due arrivals sent"
        if rates:
            text += f" ({fmt_num(load['achieved_rate_rps'])} of {fmt_num(load['requested_rate_rps'])} requests/s)"
    elif rates:
        text = f"{fmt_num(load['achieved_rate_rps'])} of {fmt_num(load['requested_rate_rps'])} requests/s sent"
    elif _number(load, "requested_concurrency") and _number(load, "mean_busy"):
        thinking = (f" and {fmt_num(load['mean_thinking'])} thinking between session turns"
                    if _number(load, "mean_thinking") and load["mean_thinking"] else "")
        return (f"{fmt_num(load['mean_busy'])} of {load['requested_concurrency']:,} users busy with the "
                f"target{thinking} on average")
    else:
        return ""
    if _number(load, "later_turns_sent") and load["later_turns_sent"]:
        text += f", and {load['later_turns_sent']:,} later session turns"
    if _number(load, "max_in_flight_hits") and load["max_in_flight_hits"]:
        text += f", {load['max_in_flight_hits']:,} arrivals dropped at max_in_flight"
        if _number(load, "max_in_flight"):
            text += f" = {load['max_in_flight']:,}"
    return text


def cpu_phrase(generator: Mapping[str, Any], workers: int | None = None) -> str:
    """Who used the machine's CPUs, one phrase (docs/results/saturation.md, "Saturation verdict").

    Args:
        generator: summary.json's ``generator`` block (``client_cpu_cores``,
            ``emulator_cpu_cores`` / ``emulator_cpu_note``, ``neighbours_cpu_cores``,
            ``cpus``, ``machine_busy_share``); missing or null figures are left out.
        workers: summary.json ``workers`` (the client is then "N workers and the driver").

    Returns:
        ``client 1.25 cores (2 workers and the driver) · emulator 0.600 cores ·
        neighbours 0.000 cores · machine: 2 CPUs 92% busy``; the emulator's note
        in place of its figure when it was not measured; "" when the block has
        no client figure (an older summary). Never raises.
    """
    if not _number(generator, "client_cpu_cores"):
        return ""
    who = f" ({workers} workers and the driver)" if isinstance(workers, int) and workers > 1 else ""
    parts = [f"client {fmt_num(generator['client_cpu_cores'])} cores{who}"]
    if _number(generator, "emulator_cpu_cores"):
        parts.append(f"emulator {fmt_num(generator['emulator_cpu_cores'])} cores")
    elif generator.get("emulator_cpu_note"):
        parts.append(f"emulator {generator['emulator_cpu_note']}")
    if _number(generator, "neighbours_cpu_cores"):
        parts.append(f"neighbours {fmt_num(generator['neighbours_cpu_cores'])} cores")
    if _number(generator, "cpus") and _number(generator, "machine_busy_share"):
        parts.append(f"machine: {generator['cpus']} CPUs {generator['machine_busy_share']:.0%} busy")
    return " · ".join(parts)
