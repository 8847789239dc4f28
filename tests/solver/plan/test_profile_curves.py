"""Planner curves from a profile (solver/plan/profile_curves.py), against hand-computed values.

The small profile: 2 layers, hidden 1000, 10 query and 2 KV heads of 100, MLP 3000, vocabulary
10,000, bf16 weights: attention 1000*100*(10 + 2*2) + 10*100*1000 = 2.4M and MLP 3*1000*3000 = 9M
per layer, embeddings and LM head 2*10,000*1000 = 20M: 42.8M parameters, 0.0856 GB. Two GPUs of
1 GB: memory 0.9 * 2 = 1.8 GB. KV 1e5 bytes = 1e-4 GB per token.
"""

from __future__ import annotations

from typing import Any

import pytest

from solver.errors import InvalidProfile
from solver.plan import curve_set_from_profile, fit_curves, solve_plan
from solver.plan.profile_curves import builtin_profile_names, load_builtin_profile
from solver.profile_result import ProfileResult

WEIGHTS_GB = 42.8e6 * 2 / 1e9
CONFIG = {
    "name": "tiny",
    "num_layers": 2,
    "hidden_size": 1000,
    "head_dim": 100,
    "num_heads": 10,
    "num_kv_heads": 2,
    "intermediate_size": 3000,
    "vocab_size": 10_000,
    "gemm_dtype": "bfloat16",
}
DECODE = {(100, 1): 5.0, (100, 2): 6.0, (100, 4): 8.0, (300, 1): 7.0, (300, 2): 9.0, (300, 4): 12.0}


def tiny_profile(**changes: Any) -> ProfileResult:
    fields: dict[str, Any] = {
        "T_prefill": {100: 10.0, 200: 16.0, 400: 40.0},
        "T_decode": DECODE,
        "T_interference": {(64, 4): 1.0},
        "p2p_bandwidth_GBps": 50.0,
        "bytes_per_token": 100_000,
        "model_config": CONFIG,
        "device": {"name": "tiny-gpu", "num_gpus": 2, "memory_bytes": 1_000_000_000},
    }
    fields.update(changes)
    return ProfileResult(**fields)


def test_curves_match_the_hand_computed_values() -> None:
    curves = curve_set_from_profile(tiny_profile(), 150, 100)  # decode context 150 + 100/2 = 200
    assert curves.memory_gb == pytest.approx(1.8) and curves.weights_gb == pytest.approx(WEIGHTS_GB)
    assert curves.hardware == "2x tiny-gpu" and curves.model == "tiny"
    pre, dec = curves.prefill, curves.decode
    assert pre.throughput.batches == (100.0, 200.0, 400.0)
    assert pre.throughput.values == pytest.approx((100 / 0.010, 200 / 0.016, 400 / 0.040))
    assert pre.capacity.values == pytest.approx(tuple(WEIGHTS_GB + b * 1e-4 for b in (100, 200, 400)))
    # context 200 lies halfway between kv_len 100 and 300: steps 6, 7.5 and 10 ms
    assert dec.throughput.batches == (1.0, 2.0, 4.0)
    assert dec.throughput.values == pytest.approx((1 / 0.006, 2 / 0.0075, 4 / 0.010))
    # a decode request holds its 250 tokens of KV cache
    assert dec.capacity.values == pytest.approx(tuple(WEIGHTS_GB + n * 250e-4 for n in (1, 2, 4)))
    free_tokens = (1.8 - WEIGHTS_GB) / 1e-4
    assert pre.max_batch == pytest.approx(2 * free_tokens)
    assert dec.max_batch == pytest.approx(2 * free_tokens / 250)
    assert any("mean context 200" in a for a in curves.assumptions)
    # the planner runs on them: decode limit (1.8 - C_w) / 0.025 requests, exact
    plan = solve_plan(fit_curves(curves), 4, 150, 100)
    assert plan.limits.decode.batch == pytest.approx(free_tokens / 250) and plan.limits.decode.is_exact


def test_contexts_outside_the_profiled_kv_lens() -> None:
    below = curve_set_from_profile(tiny_profile(), 10, 20)  # context 20: kv_len 100's steps
    assert below.decode.throughput.values == pytest.approx((1 / 0.005, 2 / 0.006, 4 / 0.008))
    above = curve_set_from_profile(tiny_profile(), 500, 200)  # context 600, extrapolated
    assert above.decode.throughput.values[0] == pytest.approx(1 / (0.005 + 0.002 * 500 / 200))
    assert any("extrapolated linearly in kv_len from 100 and 300" in a for a in above.assumptions)
    with pytest.raises(InvalidProfile, match=r"context 1250 tokens .* beyond 4x the largest profiled kv_len"):
        curve_set_from_profile(tiny_profile(), 1200, 100)


def test_a_batch_missing_at_the_needed_kv_len_is_left_out_and_noted() -> None:
    decode = {k: v for k, v in DECODE.items() if k != (300, 4)}
    curves = curve_set_from_profile(tiny_profile(T_decode=decode), 150, 100)
    assert curves.decode.throughput.batches == (1.0, 2.0)
    assert "decode batch 4 left out: not profiled at kv_len 100 and 300" in curves.assumptions


def test_a_torch_profile_is_one_gpu_with_its_memory_in_gb() -> None:
    torch_config = {k: v for k, v in CONFIG.items() if k not in ("num_heads", "gemm_dtype")}
    profile = tiny_profile(
        model_config={**torch_config, "num_q_heads": 10, "dtype": "float32", "tie_word_embeddings": True},
        device={"kind": "cuda", "name": "tiny-gpu", "memory_gb": 1.0},
    )
    curves = curve_set_from_profile(profile, 150, 100)
    assert curves.memory_gb == pytest.approx(0.9) and curves.hardware == "1x tiny-gpu"
    assert curves.weights_gb == pytest.approx((42.8e6 - 10e6) * 4 / 1e9)  # tied head, fp32


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"device": {"name": "x", "num_gpus": 1, "memory_bytes": 50_000_000}}, "do not fit the usable"),
        ({"device": {"name": "x"}}, "device.memory_bytes"),
        ({"device": {"num_gpus": 0, "memory_bytes": 1e9}}, "device.num_gpus"),
        ({"model_config": {**CONFIG, "hidden_size": None}}, "model_config.hidden_size"),
        ({"model_config": {**CONFIG, "gemm_dtype": "int3"}}, "unknown weight dtype 'int3'"),
        ({"T_prefill": {100: 10.0}}, "T_prefill: at least 2"),
        ({"T_decode": {(100, 1): 5.0, (300, 1): 7.0}}, "fewer than 2 batches"),
        ({"T_decode": {(100, 1): 5.0, (300, 1): 1.0, (100, 2): 6.0, (300, 2): 1.0}}, "step time of batch 1"),
    ],
)
def test_bad_profiles_name_the_problem(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidProfile, match=message):
        curve_set_from_profile(tiny_profile(**changes), 500, 500)


def test_every_shipped_profile_gives_a_plan() -> None:
    assert "default" in builtin_profile_names()
    for name in builtin_profile_names():
        curves = curve_set_from_profile(load_builtin_profile(name), 1024, 200)
        plan = solve_plan(fit_curves(curves), 16, 1024, 200)
        assert plan.baseline.rate_rps > 0 and curves.weights_gb < curves.memory_gb
    with pytest.raises(InvalidProfile, match="unknown shipped profile 'nope'"):
        load_builtin_profile("nope")
