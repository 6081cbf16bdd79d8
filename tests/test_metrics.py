"""The metric registry (hopbench.measure._metrics) is the one list of metrics: every
metric name used anywhere (summary table, compare, gate budgets, SLO objectives, the
report's figures, the live panel, Prometheus names) is in it, and the lists read from
it keep their order and their members."""

from __future__ import annotations

import dataclasses

import pytest

from hopbench._units import NS_PER_MS
from hopbench.config._gate_spec import parse_budgets, table_from_mapping
from hopbench.config._slo_spec import SLO_KEYS
from hopbench.driver._overhead import OVERHEAD_METRICS
from hopbench.measure._metrics import METRICS, UNIT_LABELS, MetricSpec, metrics_where
from hopbench.measure._slo import OBJECTIVES, Slo
from hopbench.observe import _progress
from hopbench.observe._live_metrics import HISTOGRAMS
from hopbench.report import _figures, _page
from hopbench.views._arm_differences import ARM_METRICS
from hopbench.views._compare import DEFAULT_METRICS, HIGHER_IS_BETTER, PER_EVENT

FIGURES = {None, "latency", "keepalive", "overhead"}


def test_metrics_registry_records_are_consistent() -> None:
    for name, spec in METRICS.items():
        assert spec.name == name
        assert spec.unit in UNIT_LABELS
        assert 0 < spec.lowest < spec.highest
        assert spec.figure in FIGURES
        assert bool(spec.live_help) == bool(spec.live_buckets_s)
        assert list(spec.live_buckets_s) == sorted(spec.live_buckets_s)
        if spec.unit == "ms":  # a time: recorded in ns, lower is better
            assert spec.divisor == NS_PER_MS and not spec.higher_is_better


def test_metrics_where_reads_fields_in_display_order() -> None:
    assert metrics_where(figure="latency") == ("ttft", "itl", "tpot", "e2e")
    assert metrics_where(figure="keepalive") == ("keepalive_interval", "max_silence")
    assert metrics_where(higher_is_better=True) == ("output_tokens_per_s",)
    order = list(METRICS)
    for field in dataclasses.fields(MetricSpec):
        if field.type in ("bool", bool):
            names = metrics_where(**{field.name: True})
            assert list(names) == sorted(names, key=order.index)
    with pytest.raises(AttributeError):
        metrics_where(colour="red")


def test_metrics_every_list_names_registry_metrics() -> None:
    lists = {
        "compare DEFAULT_METRICS": DEFAULT_METRICS,
        "compare PER_EVENT": tuple(PER_EVENT),
        "arm differences ARM_METRICS": ARM_METRICS,
        "report SPECTRUM_METRICS": _figures.SPECTRUM_METRICS,
        "report timeline tags": tuple(t.split(".", 1)[1] for t in _page._TIMELINE_TAGS),
        "progress panel": _progress._LATENCY + _progress._HEALTH,
        "live HISTOGRAMS": tuple(HISTOGRAMS),
        "driver OVERHEAD_METRICS": OVERHEAD_METRICS,
    }
    for where, names in lists.items():
        assert names and set(names) <= set(METRICS), (where, set(names) - set(METRICS))
    assert {m for m in HIGHER_IS_BETTER if "rate" not in m and "." not in m} <= set(METRICS)
    # the gateway overhead the driver fills is the report's overhead figure, in order
    assert metrics_where(figure="overhead") == OVERHEAD_METRICS


def test_metrics_prometheus_names_come_from_the_registry() -> None:
    assert list(HISTOGRAMS) == ["ttft", "itl", "e2e"]
    for metric, (name, bounds, help_text) in HISTOGRAMS.items():
        assert name == f"hopbench_{metric}_seconds"
        assert bounds == METRICS[metric].live_buckets_s and help_text == METRICS[metric].live_help


def test_metrics_slo_objectives_are_registry_metrics() -> None:
    limited = {spec.slo: name for name, spec in METRICS.items() if spec.slo}
    assert OBJECTIVES == ("completed", "ttft", "content_ttft", "itl", "tpot", "e2e")
    assert set(OBJECTIVES[1:]) == set(limited)
    slo_fields = {f.name for f in dataclasses.fields(Slo)}
    ms_keys = {k.removesuffix("_ms") for k in SLO_KEYS if k.endswith("_ms")}
    assert ms_keys == set(limited)  # [slo] <objective>_ms, one per objective
    for objective in limited:
        assert f"{objective}_ns" in slo_fields


def test_metrics_gate_budgets_accept_every_registry_metric() -> None:
    limits = {f"{m}.p99": "<= 1 s" if spec.unit == "ms" else ">= 1" for m, spec in METRICS.items()}
    budgets, _ = parse_budgets(table_from_mapping(limits, "test"))
    assert [b.metric for b in budgets] == list(METRICS)
    assert [b.unit for b in budgets] == [METRICS[m].unit for m in METRICS]
