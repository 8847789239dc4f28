"""End to end with real components: ``pdroute serve`` and a real Prometheus scraping it.

Both on loopback; Prometheus scrapes every second with the shipped alert rules loaded. A few
hundred /route requests whose decisions are known by construction go in; Prometheus's HTTP
API must then hold exactly those counts, every dashboard query must return data, every rule
must evaluate cleanly, and a refused params reload must fire its alert.
"""

from __future__ import annotations

import json
import os
import random
import re
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.app.conftest import ServeProcess, free_port
from tests.app.engines.engine_server import EngineServer
from tests.app.engines.expositions import vllm_text
from tests.deploy import prometheus_server
from tests.deploy.conftest import DASHBOARD, RULES_FILE, require_tool
from tests.deploy.prometheus_server import PrometheusServer
from tests.deploy.promql import dashboard_expressions, rule_expressions
from tests.factories import write_params

NUM_COLLOCATED = 180
NUM_DISAGGREGATED = 120


def make_requests(seed: int = 7) -> list[tuple[dict[str, int], str]]:
    """Requests with the decision each must get, for tests/conftest.py's TEST_PARAMS.

    With no decodes running (system_load 0) there is no interference and collocated decode
    runs at beta per step, so disaggregated can only add the KV transfer: collocated. With
    system_load >= 48 (3 x batch_thresh) collocated decode steps cost 3 x beta or more, while
    the target decode GPU (batch <= 15, under batch_thresh) decodes at beta: over 50 output
    tokens that gap is >= 2 s, far above any transfer here (<= 4096 tokens x 11.4 us):
    disaggregated.
    """
    rng = random.Random(seed)
    out: list[tuple[dict[str, int], str]] = []
    for _ in range(NUM_COLLOCATED):
        body = {
            "prompt_len": rng.randint(1, 16384),
            "predicted_output_len": rng.randint(1, 1000),
            "system_load": 0,
            "decode_batch_size": rng.randint(0, 64),
        }
        out.append((body, "collocated"))
    for _ in range(NUM_DISAGGREGATED):
        body = {
            "prompt_len": rng.randint(1, 4096),
            "predicted_output_len": rng.randint(50, 1000),
            "system_load": rng.randint(48, 400),
            "decode_batch_size": rng.randint(0, 15),
        }
        out.append((body, "disaggregated"))
    rng.shuffle(out)
    return out


def grafana_to_promql(query: str) -> str:
    """A dashboard query as Grafana would send it with every variable on "All"."""
    lv = re.match(r"^label_values\((.*),\s*\w+\)$", query.strip(), re.S)
    if lv:
        query = lv.group(1)
    query = query.replace("$__rate_interval", "1m")
    return re.sub(r"\$\{?\w+\}?", ".*", query)


@pytest.mark.slow
def test_prometheus_scrapes_what_pdroute_served(
    tmp_path: Path, serve_process: Callable[..., ServeProcess]
) -> None:
    binary = require_tool("prometheus")
    params_path = write_params(tmp_path / "params.json")
    # Auto-fill on, so that the engine panels have data: a live vLLM decode engine, and a
    # prefill endpoint nobody listens on (scrape errors). Requests name no target: the
    # decisions below are the caller's values only.
    engine = EngineServer(vllm_text())
    engines_path = tmp_path / "engines.json"
    fleet = {
        "pools": {
            "decode": [{"id": "d0", "url": engine.url, "kind": "vllm"}],
            "prefill": [{"id": "p0", "url": f"http://127.0.0.1:{free_port()}/metrics", "kind": "vllm"}],
        }
    }
    engines_path.write_text(json.dumps(fleet))
    env = {"PDROUTE_WATCH_INTERVAL_S": "0.2", "PDROUTE_ENGINES_FILE": str(engines_path)}
    try:
        pdroute = serve_process("--params", str(params_path), env=env)
        pdroute.wait_ready()
        run_with_prometheus(binary, tmp_path, pdroute, params_path)
    finally:
        engine.stop()


def run_with_prometheus(binary: str, tmp_path: Path, pdroute: ServeProcess, params_path: Path) -> None:
    config = (
        "global: {scrape_interval: 1s, scrape_timeout: 1s, evaluation_interval: 1s}\n"
        f'rule_files: ["{RULES_FILE}"]\n'
        "scrape_configs:\n"
        "  - job_name: pdroute\n"
        f'    static_configs: [{{targets: ["127.0.0.1:{pdroute.port}"]}}]\n'
    )
    prom = PrometheusServer(binary, config, tmp_path / "prometheus")
    try:
        prom.wait_ready()
        run_checks(prom, pdroute, params_path)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n--- prometheus log ---\n{prom.log()}") from None
    finally:
        prom.stop()


def run_checks(prom: PrometheusServer, pdroute: ServeProcess, params_path: Path) -> None:
    requests = make_requests()
    with httpx.Client(base_url=pdroute.url, timeout=10.0) as client:
        for body, decision in requests:
            r = client.post("/route", json=body)
            assert r.status_code == 200, r.text
            assert r.json()["decision"] == decision, (body, r.json())
        params_id = client.get("/params").json()["params_id"]

    # The counters and histograms, exactly, once a scrape after the traffic has landed.
    expected: dict[str, dict[str, float]] = {
        "pdroute_route_decisions_total": {"collocated": NUM_COLLOCATED, "disaggregated": NUM_DISAGGREGATED},
        'pdroute_http_requests_total{handler="/route"}': {"200": len(requests)},
        'pdroute_http_request_duration_seconds_count{handler="/route"}': {"/route": len(requests)},
        'pdroute_http_request_duration_seconds_bucket{handler="/route", le="+Inf"}': {
            "/route": len(requests)
        },
        "pdroute_predicted_latency_seconds_count": {
            "collocated": len(requests),
            "disaggregated": len(requests),
        },
        "pdroute_predicted_saving_seconds_count": {
            "collocated": NUM_COLLOCATED,
            "disaggregated": NUM_DISAGGREGATED,
        },
        "pdroute_reported_system_load_sum": {"": sum(b["system_load"] for b, _ in requests)},
        'pdroute_reported_system_load_bucket{le="0.0"}': {"": NUM_COLLOCATED},
        "pdroute_reported_decode_batch_size_sum": {"": sum(b["decode_batch_size"] for b, _ in requests)},
        "pdroute_reported_decode_batch_size_count": {"": len(requests)},
    }
    label_of = {
        "pdroute_route_decisions_total": "decision",
        "pdroute_http_requests_total": "code",
        "pdroute_http_request_duration_seconds_count": "handler",
        "pdroute_http_request_duration_seconds_bucket": "handler",
        "pdroute_predicted_latency_seconds_count": "path",
        "pdroute_predicted_saving_seconds_count": "decision",
    }

    def scraped() -> dict[str, dict[str, float]]:
        return {q: prom.values(q, label_of.get(q.split("{")[0], "")) for q in expected}

    def matches() -> bool:
        return scraped() == expected

    try:
        prom.wait_for(matches, 15.0, "the scraped counters to match the traffic")
    except AssertionError:
        assert scraped() == expected  # show the difference
    (info,) = prom.query("pdroute_params_info")
    assert info["metric"]["params_id"] == params_id
    assert info["metric"]["job"] == "pdroute"

    # Every dashboard query returns data (with every variable on "All"); rates need two scrapes.
    def dashboard_empty() -> list[str]:
        queries = dashboard_expressions(DASHBOARD).items()
        return [where for where, query in queries if not prom.query(grafana_to_promql(query))]

    try:
        prom.wait_for(lambda: not dashboard_empty(), 10.0, "every dashboard query to return data")
    except AssertionError:
        assert dashboard_empty() == []

    # Every alert rule is loaded and evaluates without error.
    def rules_healthy() -> dict[str, Any] | None:
        rules = {r["name"]: r for g in prom.api("rules")["groups"] for r in g["rules"]}
        evaluated = all(r.get("lastEvaluation", "0001").startswith("20") for r in rules.values())
        return rules if evaluated and rules else None

    rules = prom.wait_for(rules_healthy, 10.0, "every rule to be evaluated")
    assert set(rules) == set(rule_expressions(RULES_FILE))
    assert {n: (r["health"], r.get("lastError", "")) for n, r in rules.items()} == {
        n: ("ok", "") for n in rules
    }
    firing = {a["labels"]["alertname"] for a in prom.api("alerts")["alerts"] if a["state"] == "firing"}
    assert not firing & {"PdrouteRouteErrors", "PdrouteAbsent", "PdrouteParamsReloadFailed"}

    # A bad params file: the reload is refused (counted), the old params keep serving, the alert fires.
    # Replaced atomically, as a ConfigMap update is: the count below must see one refused version.
    bad = params_path.with_name("bad-params.json")
    bad.write_text('{"schema_version": 1, "alpha": -1}')
    os.replace(bad, params_path)

    def reload_alert() -> dict[str, Any] | None:
        alerts = prom.api("alerts")["alerts"]
        return next(
            (
                a
                for a in alerts
                if a["labels"]["alertname"] == "PdrouteParamsReloadFailed" and a["state"] == "firing"
            ),
            None,
        )

    alert = prom.wait_for(reload_alert, 15.0, "PdrouteParamsReloadFailed to fire")
    assert alert["labels"]["instance"] == f"127.0.0.1:{pdroute.port}"
    assert alert["labels"]["severity"] == "warning"
    reloads = {
        (s["metric"]["trigger"], s["metric"]["outcome"]): float(s["value"][1])
        for s in prom.query("pdroute_params_reloads_total")
    }
    assert ("watch", "failure") in reloads
    assert reloads == {key: 1.0 if key == ("watch", "failure") else 0.0 for key in reloads}
    with httpx.Client(base_url=pdroute.url, timeout=10.0) as client:
        r = client.post("/route", json={"prompt_len": 100, "system_load": 0})
        assert r.status_code == 200 and r.json()["params_id"] == params_id


@pytest.mark.parametrize(
    ("query", "promql"),
    [
        ('sum(rate(a{job=~"$job"}[$__rate_interval]))', 'sum(rate(a{job=~".*"}[1m]))'),
        ('label_values(info{job=~"$job", ns=~"${ns}"}, instance)', 'info{job=~".*", ns=~".*"}'),
    ],
)
def test_grafana_queries_become_promql(query: str, promql: str) -> None:
    assert grafana_to_promql(query) == promql


def test_prometheus_moves_to_another_port_when_its_port_was_taken(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The port free_port() found can be taken before prometheus binds it; the helper retries.
    binary = require_tool("prometheus")
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    ports = iter([taken.getsockname()[1], free_port()])
    monkeypatch.setattr(prometheus_server, "free_port", lambda: next(ports))
    prom = PrometheusServer(binary, "global: {scrape_interval: 1s}\n", tmp_path / "prometheus")
    try:
        prom.wait_ready()
        assert prom.port != taken.getsockname()[1]
        assert prom.http.get("/-/ready").status_code == 200
        assert "address already in use" in prom.log()
    finally:
        prom.stop()
        taken.close()
