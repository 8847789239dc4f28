"""The Grafana dashboard: well-formed, on the datasource variable, and showing what operators need."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.deploy.conftest import DASHBOARD, find, render
from tests.deploy.promql import dashboard_expressions, metric_names


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return data


def test_panels_are_well_formed(dashboard: dict[str, Any]) -> None:
    panels = dashboard["panels"]
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    assert dashboard["uid"] and dashboard["title"]
    variables = {v["name"] for v in dashboard["templating"]["list"]}
    assert "datasource" in variables
    for p in panels:
        # Every panel and target reads the datasource variable, so the import works anywhere.
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]
        assert p["targets"], p["title"]
        assert len({t["refId"] for t in p["targets"]}) == len(p["targets"]), p["title"]
        for t in p["targets"]:
            assert t["datasource"]["uid"] == "${datasource}"
            # Every selector is narrowed by the dashboard's variables.
            for var in ("$job", "$namespace", "$instance"):
                assert var in t["expr"], f"{p['title']}: {t['expr']} ignores {var}"
        g = p["gridPos"]
        assert g["x"] >= 0 and g["x"] + g["w"] <= 24 and g["h"] > 0


def test_panels_do_not_overlap(dashboard: dict[str, Any]) -> None:
    cells: dict[tuple[int, int], str] = {}
    for p in dashboard["panels"]:
        g = p["gridPos"]
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, f"{p['title']} overlaps {cells[(x, y)]}"
                cells[(x, y)] = p["title"]


@pytest.mark.parametrize(
    ("topic", "metric"),
    [
        ("decisions per second by outcome", "pdroute_route_decisions_total"),
        ("predicted saving", "pdroute_predicted_saving_seconds_sum"),
        ("predicted latency of each path", "pdroute_predicted_latency_seconds_bucket"),
        ("reported system_load", "pdroute_reported_system_load_bucket"),
        ("route latency percentiles", "pdroute_http_request_duration_seconds_bucket"),
        ("params info", "pdroute_params_info"),
        ("params age", "pdroute_params_age_seconds"),
        ("reload outcomes", "pdroute_params_reloads_total"),
    ],
)
def test_dashboard_covers(dashboard: dict[str, Any], topic: str, metric: str) -> None:
    read = set().union(*(metric_names(e) for e in dashboard_expressions(DASHBOARD).values()))
    assert metric in read, f"no panel shows {topic}"


def test_share_disaggregated_and_outcomes(dashboard: dict[str, Any]) -> None:
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    assert any('decision="disaggregated"' in e and "/" in e for e in exprs), "no share disaggregated"
    assert any("sum by (decision)" in e and "pdroute_route_decisions_total" in e for e in exprs)
    assert any("sum by (decision, reason)" in e and "pdroute_route_decisions_total" in e for e in exprs)
    assert any("sum by (trigger, outcome)" in e for e in exprs), "reloads not split by outcome"
    quantiles = {
        q
        for e in exprs
        if "pdroute_http_request_duration_seconds_bucket" in e
        for q in (0.5, 0.9, 0.99)
        if f"histogram_quantile({q}," in e
    }
    assert quantiles == {0.5, 0.9, 0.99}


def test_grafana_configmap_carries_the_dashboard() -> None:
    cm = find(render("grafana"), "ConfigMap", "pdroute-dashboard")
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(cm["data"]["pdroute-dashboard.json"]) == json.loads(DASHBOARD.read_text())


def test_queries_inside_collapsed_rows_are_read(dashboard: dict[str, Any], tmp_path: Path) -> None:
    # A collapsed row holds its panels inside it: the metric checks must still see them.
    collapsed = {
        **dashboard,
        "panels": [{"id": 999, "type": "row", "title": "all", "panels": dashboard["panels"]}],
    }
    path = tmp_path / "dashboard.json"
    path.write_text(json.dumps(collapsed))
    assert set(dashboard_expressions(path).values()) == set(dashboard_expressions(DASHBOARD).values())
