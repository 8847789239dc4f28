"""The Grafana dashboard: well-formed, on the datasource variable, and showing what operators need."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from app.settings import Settings
from tests.deploy.conftest import DASHBOARD, RULES_FILE, find, load_yaml, render
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
        if p["type"] == "row":
            # A row header spans the width; its panels follow it (inside it only when collapsed).
            assert p["title"] and p["gridPos"]["x"] == 0 and p["gridPos"]["w"] == 24, p["title"]
            assert "targets" not in p, p["title"]
            continue
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
        ("engine scrape errors by reason", "pdroute_engine_scrape_errors_total"),
        ("engine data age per pool", "pdroute_engine_data_age_seconds"),
        ("fresh engine endpoints per pool", "pdroute_engine_fresh_endpoints"),
        ("engine scrape duration", "pdroute_engine_scrape_duration_seconds_bucket"),
        ("engines file reloads", "pdroute_engines_reloads_total"),
        ("calibration corrections per term", "pdroute_calibration_correction"),
        ("calibration prediction error", "pdroute_calibration_prediction_error_ratio"),
        ("feedback outcomes", "pdroute_calibration_feedback_total"),
        ("the service's admission advice", "pdroute_route_admissions_total"),
        ("the proxy's admission advice", "pdroute_proxy_admissions_total"),
    ],
)
def test_dashboard_covers(dashboard: dict[str, Any], topic: str, metric: str) -> None:
    read = set().union(*(metric_names(e) for e in dashboard_expressions(DASHBOARD).values()))
    assert metric in read, f"no panel shows {topic}"


def test_share_disaggregated_and_outcomes(dashboard: dict[str, Any]) -> None:
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
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


def row_bands(dashboard: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """The panels under each row header (by row title), in an uncollapsed dashboard."""
    panels = dashboard["panels"]
    rows = sorted((p for p in panels if p["type"] == "row"), key=lambda p: p["gridPos"]["y"])
    out = {}
    for i, row in enumerate(rows):
        top = row["gridPos"]["y"]
        bottom = rows[i + 1]["gridPos"]["y"] if i + 1 < len(rows) else float("inf")
        out[row["title"]] = [p for p in panels if p["type"] != "row" and top < p["gridPos"]["y"] < bottom]
    return out


def panel_metrics(panel: dict[str, Any]) -> set[str]:
    return set().union(*(metric_names(t["expr"]) for t in panel["targets"]))


@pytest.mark.parametrize(
    ("row", "prefix", "topics"),
    [
        (
            "Auto-fill",
            "pdroute_engine",
            {
                ("sum by (kind, reason)", "pdroute_engine_scrape_errors_total"),
                ("by (pool)", "pdroute_engine_data_age_seconds"),
                ("by (pool)", "pdroute_engine_fresh_endpoints"),
                ("histogram_quantile(0.99,", "pdroute_engine_scrape_duration_seconds_bucket"),
            },
        ),
        (
            "Online calibration",
            "pdroute_calibration",
            {
                ("by (term)", "pdroute_calibration_correction"),
                ('quantile="0.5"', "pdroute_calibration_prediction_error_ratio"),
                ('quantile="0.9"', "pdroute_calibration_prediction_error_ratio"),
            },
        ),
    ],
)
def test_feature_rows_hold_their_panels(
    dashboard: dict[str, Any], row: str, prefix: str, topics: set[tuple[str, str]]
) -> None:
    (panels,) = [band for title, band in row_bands(dashboard).items() if title.startswith(row)]
    assert panels, f"the {row} row is empty"
    for panel in panels:
        assert all(m.startswith(prefix) for m in panel_metrics(panel)), panel["title"]
    exprs = [t["expr"] for p in panels for t in p["targets"]]
    for clause, metric in topics:
        assert any(clause in e and metric in e for e in exprs), f"{row}: no {metric} with {clause}"


def red_line(panel: dict[str, Any]) -> float:
    """The value of a panel's red threshold line."""
    defaults = panel["fieldConfig"]["defaults"]
    assert defaults["custom"]["thresholdsStyle"]["mode"].startswith("line"), panel["title"]
    (step,) = [s for s in defaults["thresholds"]["steps"] if s["color"] == "red"]
    return float(step["value"])


def panel_reading(dashboard: dict[str, Any], metric: str) -> dict[str, Any]:
    panels: list[dict[str, Any]] = dashboard["panels"]
    (panel,) = [p for p in panels if p["type"] != "row" and metric in panel_metrics(p)]
    return panel


def test_prediction_error_panel_marks_the_alert_threshold(dashboard: dict[str, Any]) -> None:
    (rule,) = [
        r
        for g in load_yaml(RULES_FILE)["groups"]
        for r in g["rules"]
        if r["alert"] == "PdrouteCalibrationErrorHigh"
    ]
    threshold = float(re.findall(r">\s*([0-9.]+)", rule["expr"])[-1])
    panel = panel_reading(dashboard, "pdroute_calibration_prediction_error_ratio")
    assert red_line(panel) == threshold
    assert panel["fieldConfig"]["defaults"]["unit"] == "percentunit"  # the gauge is a ratio


def test_data_age_panel_marks_the_default_stale_limit(dashboard: dict[str, Any]) -> None:
    panel = panel_reading(dashboard, "pdroute_engine_data_age_seconds")
    assert red_line(panel) == Settings.model_fields["engines_stale_s"].default
    # Pools without endpoints read +Inf: left out rather than drawn off the scale.
    assert all("< +Inf" in t["expr"] for t in panel["targets"])
