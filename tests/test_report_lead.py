"""report.html leads with its answer (issue 39, item 6): the page's order and its figures' presentation.

Built from results folders of the four example profiles (tests/data/report_profiles, README there);
the headless-browser check of the first screen is tests/test_report_html.py's
``test_report_first_screen_leads_with_verdict_and_purpose``.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from hopbench.measure._recorder import ALL
from hopbench.report._figures import _OUTCOME_COLOURS, detail_colour, outcome_figure, timeline_figure
from hopbench.report._page import load_run, render_html
from hopbench.report._section_verdict import Said, warnings_html
from hopbench.views._arm_differences import render_arm_differences

DATA = Path(__file__).resolve().parent / "data" / "report_profiles"
#: profile -> the section it exists for (the first under the verdict)
PURPOSE = {"gateway-overhead": "overhead", "capacity": "capacity", "ab-arms": "arms", "ci-gate": "gate"}


@pytest.fixture(scope="module")
def pages() -> dict[str, str]:
    return {name: render_html([load_run(DATA / name)]) for name in PURPOSE}


def _body(page: str) -> str:
    """The page without plotly.js (its text is not the report's)."""
    return page[page.index("</head>"):]


@pytest.mark.slow
@pytest.mark.parametrize("name", list(PURPOSE))
def test_report_page_order_verdict_then_purpose_then_figures(pages: dict[str, str], name: str) -> None:
    page = _body(pages[name])
    ids = re.findall(r'<(?:section|div) id="(verdict|gate-verdict|purpose-[a-z]+|fig-spectrum|fig-timeline)"', page)
    assert ids[0] == "verdict", ids
    purposes = [i for i in ids if i.startswith("purpose-")]
    assert purposes[0] == f"purpose-{PURPOSE[name]}", ids
    # every purpose section before the generic figures
    assert ids.index("fig-spectrum") > max(ids.index(p) for p in purposes), ids
    # the verdict holds the gate's sentence, the run figures and the warnings, before the headline table
    verdict = page[page.index('<section id="verdict">'):page.index("</section>")]
    assert "streams completed" in verdict and "<th" in verdict
    if name != "ab-arms":  # the others have a [gate]
        assert ids[1] == "gate-verdict" and "purpose-gate" in ids
        assert verdict.index("gate-verdict") < verdict.index("streams completed")


@pytest.mark.slow
def test_report_shows_the_gate_verdict_and_exit_code(pages: dict[str, str]) -> None:
    page = _body(pages["ci-gate"])
    box = re.search(r'<div id="gate-verdict" class="(\w+)"><b>(.*?)</b>(.*?)</div>', page)
    assert box is not None
    assert box.group(1) == "bad" and box.group(2).startswith("gate FAILED: ttft.count") and "exit 1" in box.group(3)
    # the Gate section lists every budget with its verdict
    gate = page[page.index('id="purpose-gate"'):]
    for key in ("ttft.p50", "e2e.p50", "tpot.p50", "output_tokens_per_s.p50", "error_rate", "ttft.count",
                "run.not_saturated"):
        assert f">{key}<" in gate, key
    inconclusive = _body(pages["gateway-overhead"])
    assert '<div id="gate-verdict" class="warn"><b>gate INCONCLUSIVE (exit 5' in inconclusive


@pytest.mark.slow
def test_report_without_gate_has_no_gate_verdict(pages: dict[str, str]) -> None:
    assert "gate-verdict" not in pages["ab-arms"] and "purpose-gate" not in pages["ab-arms"]


@pytest.mark.slow
def test_report_saturation_cause_said_once(pages: dict[str, str]) -> None:
    # the capacity run saturated: the gate, two warnings and the search all gave the same cause
    summary = json.loads((DATA / "capacity" / "summary.json").read_text(encoding="utf-8"))
    cause = "neighbours took CPU the run needed"
    assert sum(cause in w for w in summary["warnings"]) == 2 and cause in summary["capacity"]["message"]
    page = _body(pages["capacity"])
    page = page[:page.index("<h2>Load and generator")]  # not the raw summary.json tables at the end
    assert page.count(cause) == 1
    assert "cause: as above" in page
    assert "no capacity reported: at 16 requests/s hopbench itself was saturated before the gateway&#x27;s " \
           "limit (why: above)" in page


def test_said_leaves_out_what_was_said_and_shortens_a_cause() -> None:
    said = Said()
    assert said.fresh("gate FAILED: x: saturated: a; cause: busy CPUs") == "gate FAILED: x: saturated: a; cause: busy CPUs"
    assert said.fresh("saturated: a; cause: busy CPUs") is None
    assert said.fresh("saturated: lag 50 ms; cause: busy CPUs") == "saturated: lag 50 ms; cause: as above"
    assert said.fresh("something else") == "something else"


def test_report_folds_a_family_of_warnings(tmp_path: Path) -> None:
    run = load_run(DATA / "capacity")
    html = warnings_html(run)
    # six "error bound" warnings: the first in full, five folded under it
    assert html.count("<div") == 4 and html.count("error bound:") == 6
    assert '<details><summary>5 more &ldquo;error bound&rdquo; warnings</summary>' in html
    assert html.index('class="bad"') < html.index('class="warn"')  # red first


def test_report_detail_bars_have_their_outcome_colour() -> None:
    run = load_run(DATA / "gateway-overhead")
    fig = outcome_figure([run])
    (bars,) = [t for t in fig.data if t.orientation == "h"]
    # one bar per broken stream's kind; the error bodies' codes ride on their status's bar
    assert list(bars.y) == ["http_error.429 (error codes rate_limit_error 1, rate_limit_exceeded 1)"]
    legend = {t.name: t.marker.color for t in fig.data if t.orientation != "h"}
    assert list(bars.marker.color) == [legend["http_error"]] != ["#d62728"]
    assert detail_colour("failed.rate_limit_error") == _OUTCOME_COLOURS["failed"]
    assert detail_colour("timeout.idle") != detail_colour("truncated.closed")
    assert detail_colour("anomaly.unknown_event") not in _OUTCOME_COLOURS.values()


@pytest.mark.slow
def test_report_clean_run_has_no_empty_error_chart(pages: dict[str, str]) -> None:
    run = load_run(DATA / "ci-gate")
    assert not any(k.startswith(("failed.", "http_error", "anomaly.")) and n
                   for k, n in run.snapshot.scopes[ALL].counters.items())
    fig = outcome_figure([run])
    assert not [t for t in fig.data if t.orientation == "h"]
    assert "xaxis2" not in fig.layout and "by kind and error code" not in str(fig.layout.annotations)
    assert 'id="no-broken"' in pages["ci-gate"] and 'id="no-broken"' not in pages["gateway-overhead"]


def test_report_timeline_never_mixes_percent_and_ms_and_tells_tail_percentiles_apart() -> None:
    fig = timeline_figure([load_run(DATA / "ci-gate")])
    by_axis: dict[str, set[str]] = {}
    for t in fig.data:
        by_axis.setdefault(t.yaxis, set()).add(t.name)
    cpu_axis = next(a for a, names in by_axis.items() if "CPU %" in names)
    assert by_axis[cpu_axis] == {"CPU %"}
    lag_axis = next(a for a, names in by_axis.items() if "loop_lag p99 ms" in names)
    assert lag_axis != cpu_axis
    for metric in ("ttft", "itl"):
        p99, p999 = (next(t for t in fig.data if t.name == f"{metric} {p}") for p in ("p99", "p99.9"))
        assert (p99.line.dash, p99.marker.symbol) != (p999.line.dash, p999.marker.symbol)
        assert p99.line.dash != p999.line.dash and p99.marker.symbol != p999.marker.symbol


def test_report_capacity_figure_in_the_page_style() -> None:
    from hopbench.report._section_capacity import _figure
    from hopbench.views._capacity_table import capacity_rows

    summary = json.loads((DATA / "capacity" / "summary.json").read_text(encoding="utf-8"))
    fig = _figure(capacity_rows(summary), summary["capacity"], "requests/s")
    timeline = timeline_figure([load_run(DATA / "ci-gate")])
    assert fig.layout.template == timeline.layout.template  # plotly_white, as the other figures
    styles = {t.name: (t.line.color, t.line.dash, t.marker.symbol) for t in fig.data if t.type == "scatter"}
    same = {t.name: (t.line.color, t.line.dash, t.marker.symbol) for t in timeline.data}
    assert styles["TTFT p50"] == same["ttft p50"] and styles["TTFT p99"] == same["ttft p99"]


@pytest.mark.slow
def test_report_stop_reasons_table_wraps(pages: dict[str, str]) -> None:
    page = _body(pages["ci-gate"])
    section = page[page.index("<h2>Stop reasons and stream flags</h2>"):page.index("<h2>Tokens</h2>")]
    assert section.count("<table") == 2 and '<table class="wrap">' in section
    assert "proxy_<wbr>buffering_<wbr>suspected" in section


@pytest.mark.slow
def test_arm_differences_say_tok_s_as_every_other_table(pages: dict[str, str]) -> None:
    block = json.loads((DATA / "ab-arms" / "summary.json").read_text(encoding="utf-8"))["arm_differences"]
    text = render_arm_differences(block)
    assert "tokens/s" not in text
    (line,) = [ln for ln in text.splitlines() if ln.strip().startswith("output_tokens_per_s")]
    assert line.split()[1] == "tok/s"
    arms = _body(pages["ab-arms"])
    arms = arms[arms.index('id="purpose-arms"'):arms.index("</section>", arms.index('id="purpose-arms"'))]
    assert "<td class=\"l\">tok/s</td>" in arms and "tokens/s" not in arms


@pytest.mark.slow
def test_report_of_a_compare_leads_with_both_verdicts(tmp_path: Path) -> None:
    b = tmp_path / "b"
    shutil.copytree(DATA / "ci-gate", b)
    page = _body(render_html([load_run(DATA / "ci-gate"), load_run(b)]))
    ids = re.findall(r'<(?:section|div) id="(verdict|gate-verdict|purpose-[a-z]+|fig-spectrum)"', page)
    assert ids[:3] == ["verdict", "gate-verdict", "gate-verdict"] and ids[3] == "purpose-compare", ids
    assert "[A] gate FAILED" in page and "[B] gate FAILED" in page
