"""The head-to-head's proxy settings per policy (each pdroute baseline runs without its input,
``-shed`` acts on the admission advice) and its figures per run."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from bench.bench_proxy_replay import proxy_env, summarise
from bench.proxy_client import Timed
from pdroute_proxy.metrics import ProxyMetrics
from pdroute_proxy.settings import ProxySettings

SLO = (7949.0, 174.9)


def read(env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ProxySettings:
    """The settings the proxy reads from ``env`` (its environment, as the bench starts it)."""
    with monkeypatch.context() as m:
        for name, value in env.items():
            m.setenv(name, value)
        return ProxySettings(engines_file=tmp_path / "engines.json")


def test_each_variant_is_pdroute_without_its_input(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    params = tmp_path / "params.json"
    full = proxy_env("pdroute", params, SLO, 4096, 16)
    one_step = proxy_env("pdroute-one-prompt-step", params, SLO, 4096, 16)
    short = proxy_env("pdroute-short-window", params, SLO, 4096, 16)
    assert {k: v for k, v in short.items() if k != "PDROUTE_ARRIVAL_WINDOW_S"} == full
    s_full, s_one, s_short = (read(e, tmp_path, monkeypatch) for e in (full, one_step, short))
    assert s_full.policy == s_one.policy == s_short.policy == "pdroute"
    assert (s_full.default_ttft_slo_ms, s_full.default_tpot_slo_ms) == SLO
    assert (s_full.prefill_step_tokens, s_full.arrival_window_s) == (4096, 30.0)  # the proxy's window
    assert (s_one.prefill_step_tokens, s_one.arrival_window_s) == (None, 30.0)
    assert (s_short.prefill_step_tokens, s_short.arrival_window_s) == (4096, 0.0)
    # A rule is the rule; without p0's budget nobody is told one.
    rule = read(proxy_env("threshold", params, SLO, None, 16), tmp_path, monkeypatch)
    assert (rule.policy, rule.prefill_step_tokens) == ("threshold", None)


def test_the_shed_variant_is_pdroute_acting_on_its_admission_advice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    params = tmp_path / "params.json"
    full = proxy_env("pdroute", params, SLO, 4096, 16)
    shed = proxy_env("pdroute-shed", params, SLO, 4096, 16)
    assert {k: v for k, v in shed.items() if k != "PDROUTE_ADMISSION_CONTROL"} == full
    s_full, s_shed = (read(e, tmp_path, monkeypatch) for e in (full, shed))
    assert (s_full.policy, s_full.admission_control) == ("pdroute", "off")
    assert (s_shed.policy, s_shed.admission_control) == ("pdroute", "shed")
    assert s_shed.prefill_step_tokens == 4096


def test_a_shed_request_is_counted_as_shed_not_lost() -> None:
    registry = CollectorRegistry()
    metrics = ProxyMetrics(registry)
    metrics.requests.labels(endpoint="completions", outcome="shed").inc(2)
    metrics.requests.labels(endpoint="completions", outcome="no_engine").inc()
    metrics.decisions.labels(path="disaggregated", reason="slo_none_feasible", decided_by="queue_aware").inc(
        2
    )
    metrics.decisions.labels(path="collocated", reason="slo_only_feasible", decided_by="queue_aware").inc(2)
    results = [
        Timed(ok=True, ttft_s=1.0, e2e_s=3.0, num_tokens=11, status=200),  # in time
        Timed(ok=True, ttft_s=9.0, e2e_s=10.0, num_tokens=11, status=200),  # TTFT late
        Timed(ok=False, ttft_s=0.0, e2e_s=0.001, num_tokens=0, status=503),  # shed
        Timed(ok=False, ttft_s=0.0, e2e_s=0.001, num_tokens=0, status=503),  # shed
        Timed(ok=False, ttft_s=0.0, e2e_s=0.001, num_tokens=0, status=503),  # no engine: lost
    ]
    args = argparse.Namespace(ttft_slo_ms=5000.0, tpot_slo_ms=300.0)
    figures = summarise(results, 10.0, generate_latest(registry).decode(), args)
    assert (figures["lost"], figures["shed"]) == (1, 2)
    assert figures["goodput"] == pytest.approx(0.1)
    assert figures["attainment"] == pytest.approx(0.2)  # the shed ones count against it
    assert figures["ttft_miss"] == pytest.approx(0.5)  # of the requests served
    assert figures["disaggregated"] == pytest.approx(0.5)
