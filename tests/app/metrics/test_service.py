"""``/metrics`` parsed with prometheus_client's parser, moving with traffic."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from pdroute_core.params import params_from_dict
from pdroute_core.routing.design import AnalyticalCostModel
from tests.app.conftest import LiveServer
from tests.factories import TEST_PARAMS

MODEL = AnalyticalCostModel(params_from_dict(TEST_PARAMS))


def scrape(client: httpx.Client) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    r = client.get("/metrics")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/plain")
    out = {}
    for family in text_string_to_metric_families(r.text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(m: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str) -> float:
    return m.get((name, tuple(sorted(labels.items()))), 0.0)


def total(m: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str) -> float:
    """The sum of every sample of ``name`` whose labels include ``labels``."""
    want = set(labels.items())
    return sum(v for (n, ls), v in m.items() if n == name and want <= set(ls))


def test_metrics_move_with_traffic(make_server: Callable[..., LiveServer], params_file: Path) -> None:
    now = [1_800_000_000.0]
    server = make_server(params_path=params_file, watch_params=False, clock=lambda: now[0])
    requests = [(L, load) for L in (10, 500, 4000) for load in (0, 2, 8, 40)]
    expected = {"collocated": 0, "disaggregated": 0}
    by_reason: dict[tuple[str, str], int] = {}
    saving = 0.0
    for L, load in requests:
        b = MODEL.explain(L, 200, load)
        expected[b.decision] += 1
        by_reason[(b.decision, b.reason)] = by_reason.get((b.decision, b.reason), 0) + 1
        saving += b.saving_ms / 1000
    with server.client() as c:
        before = scrape(c)
        for L, load in requests:
            assert c.post("/route", json={"prompt_len": L, "system_load": load}).status_code == 200
        c.post("/route", json={"prompt_len": 0, "system_load": 1})
        now[0] += 3600
        after = scrape(c)

    for decision, n in expected.items():
        assert total(before, "pdroute_route_decisions_total", decision=decision) == 0
        assert total(after, "pdroute_route_decisions_total", decision=decision) == n
    for (decision, reason), n in by_reason.items():
        assert value(after, "pdroute_route_decisions_total", decision=decision, reason=reason) == n
    assert value(after, "pdroute_http_requests_total", handler="/route", code="200") == len(requests)
    assert value(after, "pdroute_http_requests_total", handler="/route", code="422") == 1
    assert value(after, "pdroute_http_request_duration_seconds_count", handler="/route") == len(requests) + 1
    for path in ("collocated", "disaggregated"):
        assert value(after, "pdroute_predicted_latency_seconds_count", path=path) == len(requests)
    total_saving = sum(value(after, "pdroute_predicted_saving_seconds_sum", decision=d) for d in expected)
    assert abs(total_saving - saving) < 1e-9
    assert value(after, "pdroute_reported_system_load_count") == len(requests)
    assert value(after, "pdroute_reported_system_load_sum") == sum(load for _, load in requests)
    assert value(after, "pdroute_reported_system_load_bucket", le="0.0") == 3
    assert value(after, "pdroute_reported_decode_batch_size_sum") == len(requests)  # default 1 each
    info = {k: v for k, v in after.items() if k[0] == "pdroute_params_info"}
    assert len(info) == 1
    labels = dict(next(iter(info))[1])
    assert labels["params_id"] == MODEL.params.params_id
    assert labels["model"] == "test-model" and labels["hardware"] == "test-gpu"
    assert labels["decision_model"] == "design"  # the test params are schema 1
    created = value(after, "pdroute_params_created_timestamp_seconds")
    assert created == 1767225600.0  # 2026-01-01T00:00:00Z from the metadata
    assert value(after, "pdroute_params_age_seconds") == now[0] - created
    assert value(after, "pdroute_params_loaded_timestamp_seconds") == 1_800_000_000.0
    assert abs(value(after, "pdroute_break_even_load") - MODEL.break_even_load) < 1e-12


def test_no_request_id_in_labels(live_server: LiveServer) -> None:
    with live_server.client() as c:
        c.post("/route", json={"prompt_len": 5, "system_load": 1, "request_id": "req-123456"})
        text = c.get("/metrics").text
    assert "req-123456" not in text


def test_unmatched_paths_share_one_label(live_server: LiveServer) -> None:
    with live_server.client() as c:
        for i in range(5):
            c.get(f"/random/{i}")
        m = scrape(c)
    assert value(m, "pdroute_http_requests_total", handler="unmatched", code="404") == 5
    assert not any("/random/" in dict(k[1]).get("handler", "") for k in m)


def test_admissions_count_the_queue_aware_advice(
    make_server: Callable[..., LiveServer], queue_aware_params_file: Path
) -> None:
    server = make_server(params_path=queue_aware_params_file, watch_params=False)
    # A collocation GPU with a long local backlog (the decode GPU apart, with none), and a
    # prefill pool from idle to deep: admits, then sheds once neither path can make the TTFT
    # target.
    bodies = [
        {
            "prompt_len": L,
            "system_load": 8,
            "decode_batch_size": 8,
            "pending_prefill_tokens": 60_000,
            "decode_pending_prefill_tokens": 0,
            "prefill_queue_requests": q,
            "ttft_slo_ms": 300.0,
            "tpot_slo_ms": 50.0,
        }
        for L in (256, 4096)
        for q in (0, 4, 64)
    ]
    with server.client() as c:
        before = scrape(c)
        answers = [c.post("/route", json=body).json() for body in bodies]
        untargeted = c.post("/route", json={"prompt_len": 100, "system_load": 0})  # admitted
        assert untargeted.json()["admission"] == "admit"
        after = scrape(c)
    expected = {"admit": 1, "defer": 0, "shed": 0}
    for a in answers:
        expected[a["admission"]] += 1
    assert expected["admit"] > 1 and expected["shed"] > 0  # the premise: both kinds occur
    for admission, n in expected.items():
        assert value(before, "pdroute_route_admissions_total", admission=admission) == 0
        assert value(after, "pdroute_route_admissions_total", admission=admission) == n


def test_the_design_model_gives_no_admission_advice(live_server: LiveServer) -> None:
    with live_server.client() as c:
        c.post("/route", json={"prompt_len": 5000, "system_load": 40})
        m = scrape(c)
    assert total(m, "pdroute_route_admissions_total") == 0
