"""Prometheus pieces: the alert rules (promtool check and unit tests), the Operator resources
and the plain scrape configuration, each checked against the Service they scrape."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.conftest import PROMETHEUS, RULES_FILE, RULES_TESTS, find, load_yaml, render, require_tool


def promtool(*args: str, cwd: Path = PROMETHEUS) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [require_tool("promtool"), *args], capture_output=True, text=True, timeout=120, cwd=cwd
    )


def test_promtool_check_rules() -> None:
    out = promtool("check", "rules", str(RULES_FILE))
    assert out.returncode == 0, out.stdout + out.stderr
    alerts = [r["alert"] for g in load_yaml(RULES_FILE)["groups"] for r in g["rules"]]
    assert f"SUCCESS: {len(alerts)} rules found" in out.stdout


def test_promtool_test_rules() -> None:
    out = promtool("test", "rules", str(RULES_TESTS))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS" in out.stdout


def test_promtool_test_rules_fails_on_a_wrong_expectation(tmp_path: Path) -> None:
    # The unit tests can fail: the same file with one expected value changed must not pass.
    (tmp_path / "tests").mkdir()
    (tmp_path / "rules").mkdir()
    (tmp_path / "rules" / RULES_FILE.name).write_text(RULES_FILE.read_text())
    changed = RULES_TESTS.read_text().replace(
        "severity: critical, namespace: failing", "severity: warning, namespace: failing"
    )
    assert changed != RULES_TESTS.read_text()
    (tmp_path / "tests" / RULES_TESTS.name).write_text(changed)
    out = promtool("test", "rules", str(tmp_path / "tests" / RULES_TESTS.name), cwd=tmp_path)
    assert out.returncode != 0
    assert "FAILED" in out.stdout + out.stderr


def test_every_alert_is_unit_tested_firing_and_silent() -> None:
    alerts = {r["alert"] for g in load_yaml(RULES_FILE)["groups"] for r in g["rules"]}
    firing: set[str] = set()
    silent: set[str] = set()
    for case in load_yaml(RULES_TESTS)["tests"]:
        for check in case.get("alert_rule_test", []):
            (firing if check["exp_alerts"] else silent).add(check["alertname"])
    assert firing == alerts, f"alerts never shown firing: {alerts - firing}"
    assert silent == alerts, f"alerts never shown silent: {alerts - silent}"


def test_every_alert_has_severity_summary_and_description() -> None:
    for group in load_yaml(RULES_FILE)["groups"]:
        for rule in group["rules"]:
            assert rule["labels"]["severity"] in ("critical", "warning", "info"), rule["alert"]
            assert rule["annotations"]["summary"] and rule["annotations"]["description"], rule["alert"]


def test_prometheus_rule_resource_holds_the_same_groups() -> None:
    resource = load_yaml(PROMETHEUS / "prometheusrule.yaml")
    assert resource["kind"] == "PrometheusRule"
    assert resource["apiVersion"] == "monitoring.coreos.com/v1"
    assert resource["spec"]["groups"] == load_yaml(RULES_FILE)["groups"]


def test_service_monitor_selects_the_service_port() -> None:
    monitor = find(render("prometheus"), "ServiceMonitor", "pdroute")
    service = find(render("kubernetes/overlays/production"), "Service", "pdroute")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["namespace"] == service["metadata"]["namespace"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] in {p["name"] for p in service["spec"]["ports"]}
    assert endpoint["path"] == "/metrics"
    # job="pdroute", the job label the rules and the dashboard expect.
    assert service["metadata"]["labels"][monitor["spec"]["jobLabel"]] == "pdroute"


def _static(config: dict[str, Any]) -> dict[str, Any]:
    """The configuration with Kubernetes discovery replaced by a static target.

    Debian's Prometheus is built without Kubernetes service discovery, so promtool there
    cannot load kubernetes_sd_configs; everything else in the file it checks as written.
    """
    out = dict(config)
    out["scrape_configs"] = []
    for job in config["scrape_configs"]:
        job = {k: v for k, v in job.items() if k != "kubernetes_sd_configs"}
        job["static_configs"] = [{"targets": ["127.0.0.1:8000"]}]
        out["scrape_configs"].append(job)
    return out


def test_plain_scrape_config_passes_promtool(tmp_path: Path) -> None:
    config = load_yaml(PROMETHEUS / "prometheus.yml")
    (tmp_path / "rules").mkdir()
    (tmp_path / "rules" / RULES_FILE.name).write_text(RULES_FILE.read_text())
    path = tmp_path / "prometheus.yml"
    path.write_text(yaml.safe_dump(_static(config)))
    out = promtool("check", "config", str(path), cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert [RULES_FILE.relative_to(PROMETHEUS).as_posix()] == config["rule_files"]


def test_plain_scrape_config_keeps_exactly_the_service_port() -> None:
    (job,) = load_yaml(PROMETHEUS / "prometheus.yml")["scrape_configs"]
    assert job["job_name"] == "pdroute"
    (sd,) = job["kubernetes_sd_configs"]
    assert sd["role"] == "endpoints"
    service = find(render("kubernetes/overlays/production"), "Service", "pdroute")
    assert sd["namespaces"]["names"] == [service["metadata"]["namespace"]]
    # Apply the keep rules to the Service's discovery labels the way Prometheus does.
    labels = {
        "__meta_kubernetes_service_label_" + re.sub(r"[^a-zA-Z0-9_]", "_", k): v
        for k, v in service["metadata"]["labels"].items()
    }
    for port in service["spec"]["ports"]:
        meta = {**labels, "__meta_kubernetes_endpoint_port_name": port["name"]}
        for rule in (r for r in job["relabel_configs"] if r.get("action") == "keep"):
            value = ";".join(meta.get(s, "") for s in rule["source_labels"])
            assert re.fullmatch(rule["regex"], value), f"{rule} drops the Service's {port['name']} port"
    other = {**labels, "__meta_kubernetes_service_label_app_kubernetes_io_name": "something-else"}
    keep = [r for r in job["relabel_configs"] if r.get("action") == "keep"]
    assert any(
        not re.fullmatch(r["regex"], ";".join(other.get(s, "") for s in r["source_labels"])) for r in keep
    ), "the keep rules would scrape other services too"


def test_calibration_alert_says_reprofile_and_its_unit_test_can_fail(tmp_path: Path) -> None:
    (rule,) = [
        r
        for g in load_yaml(RULES_FILE)["groups"]
        for r in g["rules"]
        if r["alert"] == "PdrouteCalibrationErrorHigh"
    ]
    assert "reprofile" in rule["annotations"]["summary"] and "Reprofile" in rule["annotations"]["description"]
    assert "pdroute_calibration_prediction_error_ratio" in rule["expr"]
    (tmp_path / "tests").mkdir()
    (tmp_path / "rules").mkdir()
    # A threshold above the test's 40 % error: the alert no longer fires and the unit test fails.
    rules = RULES_FILE.read_text()
    raised = rules.replace(
        'pdroute_calibration_prediction_error_ratio{quantile="0.5"}) > 0.25',
        'pdroute_calibration_prediction_error_ratio{quantile="0.5"}) > 0.5',
    )
    assert raised != rules
    (tmp_path / "rules" / RULES_FILE.name).write_text(raised)
    (tmp_path / "tests" / RULES_TESTS.name).write_text(RULES_TESTS.read_text())
    out = promtool("test", "rules", str(tmp_path / "tests" / RULES_TESTS.name), cwd=tmp_path)
    assert out.returncode != 0
    assert "PdrouteCalibrationErrorHigh" in out.stdout + out.stderr


def _alert(name: str) -> dict[str, Any]:
    (rule,) = [r for g in load_yaml(RULES_FILE)["groups"] for r in g["rules"] if r["alert"] == name]
    return dict(rule)


def _promtool_test_with_rules(tmp_path: Path, rules: str) -> subprocess.CompletedProcess[str]:
    """The shipped unit tests run against ``rules`` instead of the shipped rule file."""
    (tmp_path / "tests").mkdir()
    (tmp_path / "rules").mkdir()
    (tmp_path / "rules" / RULES_FILE.name).write_text(rules)
    (tmp_path / "tests" / RULES_TESTS.name).write_text(RULES_TESTS.read_text())
    return promtool("test", "rules", str(tmp_path / "tests" / RULES_TESTS.name), cwd=tmp_path)


def test_engine_stale_alert_says_decisions_fall_back_to_defaults() -> None:
    rule = _alert("PdrouteEngineDataStale")
    for metric in ("pdroute_engine_configured_endpoints", "pdroute_engine_fresh_endpoints"):
        assert metric in rule["expr"]
    assert "assumed defaults" in rule["annotations"]["description"]
    assert "{{ $labels.pool }}" in rule["annotations"]["summary"]


@pytest.mark.parametrize(
    ("old", "new"),
    [
        # Without "> 0", a pool left empty in the engines file would alert forever.
        ("(pdroute_engine_configured_endpoints) > 0", "(pdroute_engine_configured_endpoints) >= 0"),
        # With a short hold, instance b's 2-minute scrape outage would alert.
        ("for: 5m", "for: 1m"),
    ],
)
def test_engine_stale_alert_unit_test_can_fail(tmp_path: Path, old: str, new: str) -> None:
    rules = RULES_FILE.read_text()
    head, marker, rule = rules.partition("- alert: PdrouteEngineDataStale")
    changed = head + marker + rule.replace(old, new, 1)
    assert changed != rules
    out = _promtool_test_with_rules(tmp_path, changed)
    assert out.returncode != 0
    assert "PdrouteEngineDataStale" in out.stdout + out.stderr
