"""The attention terms' fit: exact recovery, the derivation without T_chunk_prefix, the bits of a
profile without long prompts, and the measured chunk-prefix slope of a real engine's database."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest

from solver.fit import fit_profile
from solver.fit_attention import LONG_PROMPT_TOKENS
from solver.fit_queue import fit_queue_aware
from tests.solver.synthetic_profiles import synthetic_profile

LONG_LENS = [64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768]
SHORT_LENS = [n for n in LONG_LENS if n < LONG_PROMPT_TOKENS]
KVS = [128, 512, 2048, 8192, 32768]
BATCHES = [1, 4, 16, 64]
CHUNKS = [64, 128, 256, 512]
PREFIXES = [512, 2048, 8192, 16384, 32256]
Q, E = 4e-7, 8.7e-7  # the order of Qwen3-8B on H100 (vLLM 0.24.0 database) to 32k


def _prefill(lens: list[int], q: float) -> dict[int, float]:
    return {n: 9.0 + 0.02 * max(0.0, n - 320.0) + q * n * n for n in lens}


def _decode() -> dict[tuple[int, int], float]:
    return {(kv, b): 6.5 + 0.013 * b + 4.4e-5 * kv * b for kv, b in itertools.product(KVS, BATCHES)}


def _chunk() -> dict[tuple[int, int], float]:
    return {(c, b): c * (0.008 + 1.2e-5 * c + 1.7e-5 * b) for c, b in itertools.product(CHUNKS, [4, 16, 64])}


def _chunk_prefix(e: float) -> dict[tuple[int, int], float]:
    return {(p, c): 8.0 + 0.01 * c + e * c * p for p, c in itertools.product(PREFIXES, CHUNKS)}


def test_exact_attention_terms_are_recovered_and_reported() -> None:
    params, fits = fit_queue_aware(_prefill(LONG_LENS, Q), _decode(), _chunk(), _chunk_prefix(E))
    assert params.prefill_ms_per_token_sq == pytest.approx(Q, rel=1e-6)
    assert params.prefill_floor_ms == pytest.approx(9.0) and params.prefill_knee_tokens == 320.0
    assert params.prefill_ms_per_token == pytest.approx(0.02)
    assert params.chunk_ms_per_token_prefix == pytest.approx(E, rel=1e-9)
    by_name = {f.name: f for f in fits}
    assert list(by_name) == [
        "queue_aware.prefill",
        "queue_aware.decode_step",
        "queue_aware.chunk",
        "queue_aware.prefill_attention",
        "queue_aware.chunk_prefix",
    ]
    assert by_name["queue_aware.prefill"].r_squared == pytest.approx(1.0)
    attention = by_name["queue_aware.prefill_attention"]
    assert attention.value == params.prefill_ms_per_token_sq
    assert attention.diagnostics["share_of_longest_prefill"] == pytest.approx(
        Q * 32768**2 / _prefill(LONG_LENS, Q)[32768], rel=1e-6
    )
    prefix = by_name["queue_aware.chunk_prefix"]
    assert prefix.diagnostics["derived"] is False and prefix.r_squared == pytest.approx(1.0)
    assert len(prefix.residuals) == len(PREFIXES) * len(CHUNKS)
    assert prefix.diagnostics["intercept_ms_by_chunk"]["512"] == pytest.approx(8.0 + 5.12)
    # The decode step's context term, checked at long context.
    decode = by_name["queue_aware.decode_step"]
    assert decode.diagnostics["long_context_r_squared"] == pytest.approx(1.0)
    assert decode.diagnostics["long_context_points"] == 2.0 * len(BATCHES)


def test_without_t_chunk_prefix_the_prefix_term_is_derived_from_the_prefill() -> None:
    # Causal attention over u tokens is u^2 / 2 pairs and a c-chunk over p is c * p: e = 2 q.
    params, fits = fit_queue_aware(_prefill(LONG_LENS, Q), _decode(), _chunk())
    prefix = {f.name: f for f in fits}["queue_aware.chunk_prefix"]
    assert params.chunk_ms_per_token_prefix == 2.0 * params.prefill_ms_per_token_sq
    assert prefix.diagnostics["derived"] is True and prefix.r_squared is None
    assert "derived" in prefix.method


def test_a_profile_without_long_prompts_fits_the_forms_before_the_terms() -> None:
    # The data carry a quadratic, but up to 4,096 tokens the knee's curvature would take it: the
    # term stays 0, the fits are the three before it, and a linear fit of the same table agrees.
    curved = _prefill(SHORT_LENS, Q)
    params, fits = fit_queue_aware(curved, _decode(), _chunk())
    assert params.prefill_ms_per_token_sq == 0.0 and params.chunk_ms_per_token_prefix == 0.0
    assert [f.name for f in fits] == ["queue_aware.prefill", "queue_aware.decode_step", "queue_aware.chunk"]
    assert "prefill_ms_per_token_sq" not in fits[0].diagnostics and "per_token_sq" not in fits[0].method
    assert "long_context_r_squared" in fits[1].diagnostics  # the decode grid does reach 32k
    short_decode = {k: v for k, v in _decode().items() if k[0] < LONG_PROMPT_TOKENS}
    _p, short_fits = fit_queue_aware(curved, short_decode, _chunk())
    assert "long_context_r_squared" not in short_fits[1].diagnostics
    # A measured chunk-prefix slope needs no long prompt.
    params, fits = fit_queue_aware(curved, _decode(), _chunk(), _chunk_prefix(E))
    assert params.prefill_ms_per_token_sq == 0.0
    assert params.chunk_ms_per_token_prefix == pytest.approx(E, rel=1e-9)
    assert [f.name for f in fits][-1] == "queue_aware.chunk_prefix"


def test_a_chunk_prefix_table_without_a_slope_falls_back_to_the_derivation() -> None:
    single = {(2048, c): 10.0 + c * 0.01 for c in CHUNKS}  # one prefix per chunk size
    params, fits = fit_queue_aware(_prefill(LONG_LENS, Q), _decode(), _chunk(), single)
    prefix = fits[-1]
    assert prefix.diagnostics["derived"] is True
    assert params.chunk_ms_per_token_prefix == 2.0 * params.prefill_ms_per_token_sq
    assert any("not measured" in w for w in prefix.warnings)


def test_a_falling_chunk_prefix_table_gives_no_negative_slope() -> None:
    falling = {(p, c): 20.0 - 1e-7 * c * p for p, c in itertools.product(PREFIXES, CHUNKS)}
    params, _fits = fit_queue_aware(_prefill(SHORT_LENS, 0.0), _decode(), _chunk(), falling)
    assert params.chunk_ms_per_token_prefix == 0.0


def test_fit_profile_carries_t_chunk_prefix_into_the_params_and_report() -> None:
    base = synthetic_profile()
    profile = replace(base, T_chunk_prefix=_chunk_prefix(E))
    params, report = fit_profile(profile)
    assert params.queue_aware is not None
    assert params.queue_aware.chunk_ms_per_token_prefix == pytest.approx(E, rel=1e-9)
    assert report.parameter("queue_aware.chunk_prefix").r_squared == pytest.approx(1.0)
    assert "queue_aware.chunk_prefix" in params.metadata.fit_quality
    again, _ = fit_profile(replace(base, T_chunk_prefix=_chunk_prefix(E)))
    assert again.params_id == params.params_id  # deterministic
    plain, plain_report = fit_profile(base)
    assert plain.queue_aware is not None and plain.queue_aware.chunk_ms_per_token_prefix == 0.0
    assert [p.name for p in plain_report.parameters if p.name.startswith("queue_aware")] == [
        "queue_aware.prefill",
        "queue_aware.decode_step",
        "queue_aware.chunk",
    ]


def test_the_databases_chunk_prefix_slope_matches_the_prefills_attention() -> None:
    # Qwen3-8B on H100 SXM, vLLM 0.24.0 in aiconfigurator's database: a pass of c new tokens over
    # p cached ones (its static context step with a prefix), and the prefill of whole prompts.
    from aiconfigurator.sdk.config import RuntimeConfig

    from profiling.sources.aiconfigurator_catalog import resolve_source
    from profiling.sources.aiconfigurator_steps import StepEstimator

    src = resolve_source(model="Qwen/Qwen3-8B", system="h100_sxm", backend="vllm", backend_version="0.24.0")
    est = StepEstimator(src, 1)

    def ctx(isl: int, prefix: int) -> float:
        config = RuntimeConfig(batch_size=1, isl=isl, osl=1, prefix=prefix)
        return float(est.session.run_static(config, mode="static_ctx").get_result_dict()["context_latency"])

    prefill = {n: ctx(n, 0) for n in LONG_LENS}
    table = {(p, c): ctx(p + c, p) for p, c in itertools.product(PREFIXES, (256, 512, 1024))}
    params, fits = fit_queue_aware(prefill, _decode(), _chunk(), table)
    by_name = {f.name: f for f in fits}
    # The long prompts' passes are 39% attention; without the term the prefill form fits worse.
    prefill_r2 = by_name["queue_aware.prefill"].r_squared
    assert prefill_r2 is not None and prefill_r2 > 0.9999
    assert 0.3 < by_name["queue_aware.prefill_attention"].diagnostics["share_of_longest_prefill"] < 0.5
    # Measured and derived (2 q) agree within 10 %: both read the same attention kernels.
    e, derived = params.chunk_ms_per_token_prefix, 2.0 * params.prefill_ms_per_token_sq
    measured_r2 = by_name["queue_aware.chunk_prefix"].r_squared
    assert measured_r2 is not None and measured_r2 > 0.999
    assert abs(e / derived - 1.0) < 0.10
    # The form without it, on the same table, misses the short and middle prompts.
    without = by_name["queue_aware.prefill"].diagnostics["without_attention"]
    assert without["r_squared"] < 0.996 and without["max_abs_relative_residual"] > 0.5
