"""The Grafana dashboard (``infra/grafana/ragstream.json``) queries only metrics the code
exports: every PromQL expression in it parses (``promql-parser``, the Prometheus grammar) and
each metric name it selects is a sample name of a metric registered by the code."""

from __future__ import annotations

import importlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import promql_parser
import pytest
from prometheus_client import REGISTRY

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "infra" / "grafana" / "ragstream.json"
PACKAGES = ("ragstream", "topics", "index", "ingest", "workers", "api")
#: Sample suffixes of each metric type (the Prometheus text exposition format).
SUFFIXES = {
    "counter": ("_total", "_created"),
    "gauge": ("",),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
    "summary": ("", "_sum", "_count", "_created"),
    "info": ("_info",),
}


def exported_names() -> set[str]:
    """Sample names of every ``ragstream_`` metric: each module of the serving packages that
    uses prometheus_client is imported, then the default registry is read."""
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if "prometheus_client" in path.read_text(encoding="utf-8"):
                module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
                importlib.import_module(module.removesuffix(".__init__"))
    names = set()
    for family in REGISTRY.collect():
        if family.name.startswith("ragstream_"):
            names |= {family.name + s for s in SUFFIXES.get(family.type, ("",))}
    return names


def expressions(dashboard: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """``(panel title, expr)`` of every query target, rows' nested panels included."""
    stack = list(dashboard["panels"])
    while stack:
        panel = stack.pop()
        stack.extend(panel.get("panels", []))
        for target in panel.get("targets", []):
            yield panel["title"], target["expr"]


def selected_metrics(expr: str) -> set[str]:
    """Metric names selected by a PromQL expression (``name{...}`` or ``{__name__="name"}``).

    Raises:
        ValueError: the expression does not parse, or selects a series without a fixed name.
    """
    names: set[str] = set()

    def visit(node: Any) -> None:
        if isinstance(node, promql_parser.VectorSelector):
            name = node.name or next(
                (m.value for m in node.matchers.matchers if m.name == "__name__"), None
            )
            if not name:
                raise ValueError(f"a selector without a metric name in {expr!r}")
            names.add(name)

    promql_parser.walk(promql_parser.parse(expr), visit)
    return names


def test_every_dashboard_query_names_an_exported_metric() -> None:
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    exported = exported_names()
    used: dict[str, set[str]] = {}
    for title, expr in expressions(dashboard):
        for name in selected_metrics(expr):
            used.setdefault(name, set()).add(title)
    missing = {name: sorted(titles) for name, titles in used.items() if name not in exported}
    assert not missing, f"the dashboard queries metrics the code does not export: {missing}"
    # The operator questions each have a panel.
    for needed in (
        "ragstream_answers_total",
        "ragstream_llm_time_to_first_token_seconds_bucket",
        "ragstream_llm_tokens_total",
        "ragstream_llm_request_duration_seconds_bucket",
        "ragstream_queue_wait_seconds_bucket",
        "ragstream_errors_total",
    ):
        assert needed in used, needed


def test_the_check_catches_a_wrong_name_and_a_broken_query() -> None:
    exported = exported_names()
    assert "ragstream_answers_total" in exported
    assert "ragstream_llm_ttft_seconds_bucket" not in exported
    assert selected_metrics(
        "histogram_quantile(0.9, sum by (le) (rate(ragstream_llm_ttft_seconds_bucket[5m])))"
    ) == {"ragstream_llm_ttft_seconds_bucket"}
    assert selected_metrics('sum(rate({__name__="ragstream_x_total"}[1m])) / on() b') == {
        "ragstream_x_total",
        "b",
    }
    with pytest.raises(ValueError):
        selected_metrics("sum(rate(ragstream_answers_total[5m])")
