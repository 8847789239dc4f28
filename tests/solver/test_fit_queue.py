"""The queue-aware forms' fit: exact recovery, the non-negative solver, and the batch check."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import numpy as np
import pytest

import solver
from solver.errors import FitError
from solver.fit import fit_profile
from solver.fit_queue import fit_queue_aware, nonneg_lstsq
from solver.profile_io import load_profile
from tests.solver.synthetic_profiles import synthetic_profile

LENS = [64, 128, 256, 512, 1024, 2048, 4096]
KVS = [128, 512, 1024, 2048]
BATCHES = [1, 4, 8, 16, 32, 64, 128, 256]
CHUNKS = [64, 128, 256, 512]
DECODE_BATCHES = [4, 8, 16, 32, 64, 128, 256]


def _tables(
    floor: float,
    per_token: float,
    knee: float,
    dec: tuple[float, float, float],
    chk: tuple[float, float, float],
) -> tuple[dict[int, float], dict[tuple[int, int], float], dict[tuple[int, int], float]]:
    prefill = {n: floor + per_token * max(0.0, n - knee) for n in LENS}
    decode = {(kv, b): dec[0] + dec[1] * b + dec[2] * kv * b for kv, b in itertools.product(KVS, BATCHES)}
    chunk = {
        (c, b): c * (chk[0] + chk[1] * c + chk[2] * b) for c, b in itertools.product(CHUNKS, DECODE_BATCHES)
    }
    return prefill, decode, chunk


def test_exact_forms_are_recovered() -> None:
    # The knee sits on the candidate grid (256 + 256 * 8/32 = 320).
    tables = _tables(9.0, 0.02, 320.0, (6.5, 0.013, 4.4e-5), (0.008, 1.2e-5, 1.7e-5))
    params, fits = fit_queue_aware(*tables)
    assert params.prefill_floor_ms == pytest.approx(9.0)
    assert params.prefill_ms_per_token == pytest.approx(0.02)
    assert params.prefill_knee_tokens == pytest.approx(320.0)
    assert params.decode_base_ms == pytest.approx(6.5)
    assert params.decode_ms_per_seq == pytest.approx(0.013)
    assert params.decode_ms_per_context_token == pytest.approx(4.4e-5)
    assert params.chunk_ms_per_token == pytest.approx(0.008)
    assert params.chunk_ms_per_token_sq == pytest.approx(1.2e-5)
    assert params.chunk_ms_per_token_seq == pytest.approx(1.7e-5)
    for fit in fits:
        assert fit.r_squared == pytest.approx(1.0)
        assert len(fit.residuals) > 0
    chunk = fits[2]
    # The check of the chunk cost's dependence on the batch: 512 * 1.7e-5 * (256 - 4) over the cost at B=4.
    at4 = 512 * (0.008 + 1.2e-5 * 512 + 1.7e-5 * 4)
    assert chunk.diagnostics["batch_dependence_at_largest_chunk"] == pytest.approx(512 * 1.7e-5 * 252 / at4)
    assert any("depends on the decode batch" in w for w in chunk.warnings)


def test_a_batch_independent_chunk_cost_passes_the_check() -> None:
    tables = _tables(9.0, 0.02, 320.0, (6.5, 0.013, 4.4e-5), (0.008, 1.2e-5, 0.0))
    _params, fits = fit_queue_aware(*tables)
    assert fits[2].diagnostics["batch_dependence_at_largest_chunk"] == pytest.approx(0.0, abs=1e-9)
    assert fits[2].diagnostics["without_batch_term_r_squared"] == pytest.approx(1.0)
    assert fits[2].warnings == ()


def test_a_chunk_cost_carried_by_the_batch_term_alone_fits() -> None:
    # Measured on a CPU engine: the excess over the decode step grows with chunk x batch only.
    prefill, decode, _ = _tables(9.0, 0.02, 320.0, (6.5, 0.013, 4.4e-5), (0.0, 0.0, 0.0))
    chunk = {(64, 2): 7.8, (64, 3): 6.3, (512, 2): 17.5, (512, 3): 40.0}
    params, fits = fit_queue_aware(prefill, decode, chunk)
    assert params.chunk_ms_per_token_seq > 0
    assert fits[2].value == params.chunk_ms_per_token
    with pytest.raises(FitError, match="T_interference: prefill tokens add no time"):
        fit_queue_aware(prefill, decode, {key: 0.0 for key in chunk})


def test_nonneg_lstsq_matches_a_brute_force_search() -> None:
    rng = np.random.default_rng(7)
    x = rng.uniform(0, 10, size=(30, 3))
    y = x @ np.array([1.5, -0.7, 0.3]) + rng.normal(0, 0.1, 30)
    coef = nonneg_lstsq([list(col) for col in x.T], list(y))
    assert min(coef) >= 0 and coef[1] == 0.0
    sse = float(((x @ np.array(coef) - y) ** 2).sum())
    # No non-negative point of a fine grid around the answer does better.
    for delta in itertools.product((-0.01, 0.0, 0.01), repeat=3):
        trial = np.maximum(0.0, np.array(coef) + np.array(delta))
        assert float(((x @ trial - y) ** 2).sum()) >= sse - 1e-9


def test_a_falling_prefill_table_falls_back_to_the_design_slope() -> None:
    prefill = {64: 10.0, 128: 9.0, 256: 8.0}
    _p, decode, chunk = _tables(9.0, 0.02, 320.0, (6.5, 0.013, 4.4e-5), (0.008, 1.2e-5, 0.0))
    params, fits = fit_queue_aware(prefill, decode, chunk)
    assert params.prefill_floor_ms == 0.0 and params.prefill_knee_tokens == 0.0
    assert params.prefill_ms_per_token == pytest.approx(
        (64 * 10 + 128 * 9 + 256 * 8) / (64**2 + 128**2 + 256**2)
    )
    assert any("does not rise" in w for w in fits[0].warnings)
    with pytest.raises(FitError, match="T_prefill"):
        fit_queue_aware({64: 0.0, 128: 0.0}, decode, chunk)


def test_design_profiles_fit_both_models_reproducibly() -> None:
    a, report = fit_profile(synthetic_profile(batch_thresh=12.0, prefill_fixed_ms=8.0, noise=0.02, seed=1))
    b, _ = fit_profile(synthetic_profile(batch_thresh=12.0, prefill_fixed_ms=8.0, noise=0.02, seed=1))
    assert a.queue_aware is not None and a.queue_aware == b.queue_aware and a.params_id == b.params_id
    assert a.schema_version == 2
    assert report.parameter("queue_aware.prefill").diagnostics["prefill_floor_ms"] > 0


def test_the_shipped_profile_fits_well() -> None:
    params, report = fit_profile(
        load_profile(Path(solver.__file__).parent / "data" / "profiles" / "default.json")
    )
    assert params.queue_aware is not None
    for name in ("queue_aware.prefill", "queue_aware.decode_step", "queue_aware.chunk"):
        r2 = report.parameter(name).r_squared
        assert r2 is not None and r2 > 0.98 and math.isfinite(r2)
