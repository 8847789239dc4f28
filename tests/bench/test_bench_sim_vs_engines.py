"""The pieces of bench_sim_vs_engines that need no engine: the simulated side of the comparison
on a real profile, the proxy-side figures, and the model's predicted / measured TTFT."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from bench.bench_sim_vs_engines import (
    at_proxy,
    engine_served,
    parse_histograms,
    predicted_over_measured,
    simulated,
)
from pdroute_core.routing import RouteInputs
from solver.plan.profile_curves import load_builtin_profile
from solver.sim.workload import LengthDistribution, poisson_workload
from tests.factories import qa_model


def test_the_simulated_side_runs_both_modes_on_the_fleet_of_the_engines() -> None:
    profile = load_builtin_profile("default")
    lengths = LengthDistribution("lognormal", prompt_mean=300, output_mean=20, sigma=0.8)
    w = poisson_workload(60, 20.0, lengths, seed=3)
    w = type(w)(w.arrival_s, np.clip(w.prompt_len, 16, 1024), np.clip(w.output_len, 2, 64), w.source)
    colloc = simulated(profile, w, "collocated", 512)
    disagg = simulated(profile, w, "disaggregated", 512)
    for figures in (colloc, disagg):
        assert figures["extrapolated_steps"] == 0
        assert 0 < figures["ttft_p50"] <= figures["ttft_p90"] <= figures["ttft_p99"]
        assert 0 < figures["tpot_p50"] <= figures["tpot_p90"] <= figures["tpot_p99"]
    assert colloc != disagg  # the policy reached the simulated fleet


def record(ttft_ms: float | None, tpot_ms: float | None, **kw: Any) -> dict[str, Any]:
    base = {"outcome": "ok", "fallbacks": [], "served": "collocated", "inputs": {"prompt_len": 200}}
    return {**base, "ttft_ms": ttft_ms, "tpot_ms": tpot_ms, **kw}


def test_proxy_side_figures_leave_out_the_failed_requests() -> None:
    records = [record(float(i), 10.0 + i) for i in range(1, 101)]
    records += [record(None, None, outcome="NoEngine"), record(1e9, 1e9, outcome="UpstreamError")]
    figures = at_proxy(records)
    assert figures["ttft_p50"] in (50.0, 51.0) and figures["ttft_p99"] == 99.0
    assert figures["tpot_p50"] in (60.0, 61.0)


def test_the_model_ratio_is_its_ttft_of_the_served_path_over_the_measured() -> None:
    model = qa_model()
    inputs = {"prompt_len": 800, "predicted_output_len": 50, "system_load": 4, "decode_batch_size": 4}
    b = model.decide(RouteInputs(**inputs))
    records = [
        record(b.ttft_collocated_ms, 20.0, inputs=inputs),
        record(b.ttft_disaggregated_ms / 2, 20.0, inputs=inputs, served="disaggregated"),
        record(1.0, 1.0, inputs=inputs, fallbacks=["prefill_down"]),  # not served as decided
    ]
    ratios = predicted_over_measured(records, model)
    assert math.isclose(ratios["model_ratio_p50"], 1.0) or math.isclose(ratios["model_ratio_p50"], 2.0)
    assert math.isclose(ratios["model_ratio_p90"], 2.0)


VLLM_METRICS = """\
# HELP vllm:iteration_tokens_total Histogram of number of tokens per engine_step.
# TYPE vllm:iteration_tokens_total histogram
vllm:iteration_tokens_total_bucket{engine="0",le="1.0",model_name="m"} 0.0
vllm:iteration_tokens_total_bucket{engine="0",le="+Inf",model_name="m"} {steps}
vllm:iteration_tokens_total_count{engine="0",model_name="m"} {steps}
vllm:iteration_tokens_total_sum{engine="0",model_name="m"} {tokens}
# HELP vllm:request_prefill_time_seconds Histogram of time spent in PREFILL phase for request.
# TYPE vllm:request_prefill_time_seconds histogram
vllm:request_prefill_time_seconds_bucket{engine="0",le="+Inf",model_name="m"} {requests}
vllm:request_prefill_time_seconds_count{engine="0",model_name="m"} {requests}
vllm:request_prefill_time_seconds_sum{engine="0",model_name="m"} {prefill_s}
# HELP vllm:request_queue_time_seconds Histogram of time spent in WAITING phase for request.
# TYPE vllm:request_queue_time_seconds histogram
vllm:request_queue_time_seconds_bucket{engine="0",le="+Inf",model_name="m"} {requests}
vllm:request_queue_time_seconds_count{engine="0",model_name="m"} {requests}
vllm:request_queue_time_seconds_sum{engine="0",model_name="m"} {queue_s}
"""


def metrics(**values: float) -> str:
    text = VLLM_METRICS
    for name, value in values.items():
        text = text.replace(f"{{{name}}}", str(value))
    return text


def test_the_prefill_engines_run_is_read_from_its_histograms() -> None:
    before = parse_histograms(metrics(steps=10, tokens=5000, requests=10, prefill_s=2.0, queue_s=0.5))
    after = parse_histograms(metrics(steps=40, tokens=50_000, requests=100, prefill_s=29.0, queue_s=9.5))
    assert before["steps"] == (10.0, 5000.0)
    served = engine_served(before, after)
    # 90 prompts in 30 steps: three a step; 27 s of prefill and 9 s of queueing over 90 requests.
    assert served["steps"] == 30 and served["requests"] == 90 and served["prompts_per_step"] == 3.0
    assert math.isclose(served["prefill_ms_mean"], 300.0) and math.isclose(served["queue_ms_mean"], 100.0)
    assert math.isnan(engine_served(after, after)["prompts_per_step"])  # an idle run
