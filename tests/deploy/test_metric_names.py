"""Every metric the dashboard and the alert rules read is one that a live server exports."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.app.conftest import LiveServer, free_port
from tests.app.engines.engine_server import EngineServer
from tests.app.engines.expositions import vllm_text
from tests.deploy.conftest import DASHBOARD, RULES_FILE
from tests.deploy.promql import dashboard_expressions, metric_names, rule_expressions


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        ("up", {"up"}),
        ('sum by (decision) (rate(a_total{job=~"$job", x="by (y)"}[$__rate_interval]))', {"a_total"}),
        (
            'histogram_quantile(0.99, sum by (namespace, le) (rate(h_bucket{handler="/route"}[5m]))) > 0.01',
            {"h_bucket"},
        ),
        ("max by (job) (age_seconds) > 30 * 86400", {"age_seconds"}),
        ("count by (ns) (count by (ns, params_id) (info))", {"info"}),
        ("absent(info)", {"info"}),
        ("a / on (instance) group_left (model) b", {"a", "b"}),
        ("a unless b offset 5m", {"a", "b"}),
        ("sum(rate(x_sum[1m])) / sum(rate(x_count[1m])) == bool 0", {"x_sum", "x_count"}),
        ("rate(c[5m:1m]) * 1e3", {"c"}),
        ('label_values(info{job=~"$job", ns=~"$ns"}, instance)', {"info"}),
        ("label_values(instance)", set()),
        ("label_values(info, job)", {"info"}),
        ('max(ts{job="j"}) * 1000', {"ts"}),
    ],
)
def test_metric_names_of_an_expression(expr: str, names: set[str]) -> None:
    assert metric_names(expr) == names


def exported_sample_names(text: str) -> set[str]:
    """Sample names of an exposition: counters with _total, histograms as _bucket/_sum/_count."""
    return {s.name for family in text_string_to_metric_families(text) for s in family.samples}


@pytest.fixture(scope="module")
def referenced() -> dict[str, set[str]]:
    exprs = {**{f"rule {k}": v for k, v in rule_expressions(RULES_FILE).items()}}
    exprs.update({f"dashboard {k}": v for k, v in dashboard_expressions(DASHBOARD).items()})
    return {where: metric_names(expr) for where, expr in exprs.items()}


@pytest.fixture
def engines_file(tmp_path: Path) -> Iterator[Path]:
    """An engines file of one live vLLM decode engine and one prefill endpoint nobody listens on:
    the auto-fill gauges get a fresh pool and the error counter a series."""
    engine = EngineServer(vllm_text())
    fleet = {
        "pools": {
            "decode": [{"id": "d0", "url": engine.url, "kind": "vllm"}],
            "prefill": [{"id": "p0", "url": f"http://127.0.0.1:{free_port()}/metrics", "kind": "vllm"}],
        }
    }
    path = tmp_path / "engines.json"
    path.write_text(json.dumps(fleet))
    yield path
    engine.stop()


def test_every_referenced_metric_is_exported(
    make_server: Callable[..., LiveServer],
    params_file: Path,
    engines_file: Path,
    referenced: dict[str, set[str]],
) -> None:
    server = make_server(
        params_path=params_file, watch_params=False, engines_file=engines_file, scrape_interval_s=0.02
    )
    with server.client() as c:
        # One request of each kind, so that every labelled histogram has a series.
        assert c.post("/route", json={"prompt_len": 512, "system_load": 0}).status_code == 200
        assert c.post("/route", json={"prompt_len": 512, "system_load": 64}).status_code == 200
        batch = {"requests": [{"prompt_len": 100, "system_load": 1}]}
        assert c.post("/route/batch", json=batch).status_code == 200
        # The scraper's first rounds: a failed scrape of p0 and a good one of d0.
        deadline = time.monotonic() + 10
        while True:
            exported = exported_sample_names(c.get("/metrics").text)
            if "pdroute_engine_scrape_errors_total" in exported or time.monotonic() > deadline:
                break
            time.sleep(0.05)
    assert "pdroute_route_decisions_total" in exported  # the scrape itself is what it should be
    # The proxy's series are checked against a live proxy (tests/pdroute_proxy/test_dashboard_metrics.py).
    service = {
        where: {n for n in names if not n.startswith("pdroute_proxy_")} for where, names in referenced.items()
    }
    unknown = {where: names - exported for where, names in service.items() if names - exported}
    assert unknown == {}, f"metrics not exported by the service: {unknown}"
    # Each expression reads at least one metric (an expression that reads none is a typo).
    assert all(referenced.values()), [where for where, names in referenced.items() if not names]


def test_the_check_sees_a_misspelt_metric() -> None:
    exported = {"pdroute_route_decisions_total"}
    # A counter named without _total, or a histogram by its base name, is not a series.
    for expr in ("rate(pdroute_route_decisions[5m])", "pdroute_predicted_latency_seconds"):
        assert metric_names(expr) - exported
