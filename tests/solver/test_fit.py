"""Fitting ``CostModelParams`` to profiles: recovery of known parameters, warnings, refusals."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, TypedDict

import numpy as np
import pytest

from pdroute_core.routing.design import AnalyticalCostModel
from solver.errors import FitError, InvalidProfile
from solver.fit import FLAT_DECODE_TOLERANCE, FitReport, Residual, fit_profile, save_fit_report
from solver.fit_report import fit_report_path
from solver.params import load_params, save_params
from solver.profile_io import load_profile, save_profile_json
from solver.profile_result import QUICK_GRIDS
from tests.solver.synthetic_profiles import DENSE_GRIDS, DESIGN_GRIDS, synthetic_profile, with_tables


class Truth(TypedDict):
    alpha: float
    beta: float
    gamma: float


TRUTH: Truth = {"alpha": 0.05, "beta": 7.0, "gamma": 0.04}
ALL_PARAMS = {"alpha", "beta", "batch_thresh", "gamma", "bandwidth_GBps", "bytes_per_token"}


def _expected(batch_thresh: float) -> dict[str, float]:
    return {
        "alpha": TRUTH["alpha"],
        "beta": TRUTH["beta"],
        "gamma": TRUTH["gamma"],
        "batch_thresh": batch_thresh,
    }


def _rel_err(value: float, truth: float) -> float:
    return abs(value / truth - 1.0)


def _all_warnings(report: FitReport) -> str:
    return "\n".join(report.warnings)


# --- recovery ---------------------------------------------------------------------------------
@pytest.mark.parametrize("batch_thresh", [2.5, 8.0, 12.0, 22.5])
def test_exact_profile_on_design_grid_recovers_every_parameter(batch_thresh: float) -> None:
    # 2.5, 12 and 22.5 lie between grid points (1-4, 8-16, 16-32); 8 is one.
    profile = synthetic_profile(
        **TRUTH, batch_thresh=batch_thresh, bandwidth_GBps=123.0, bytes_per_token=4096
    )
    params, report = fit_profile(profile)
    expected = _expected(batch_thresh)
    for name, truth in expected.items():
        assert _rel_err(getattr(params, name), truth) < 1e-9, name
    assert params.bandwidth_GBps == 123.0
    assert params.bytes_per_token == 4096
    for name in ("alpha", "beta", "batch_thresh", "gamma"):
        assert report.parameter(name).r_squared == pytest.approx(1.0, abs=1e-12)
        assert [w for w in report.parameter(name).warnings if "load-scaled" not in w] == []
    assert report.parameter("batch_thresh").diagnostics["is_lower_bound"] is False


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("batch_thresh", [12.0, 27.5])
def test_noisy_profile_recovers_parameters_within_two_percent(seed: int, batch_thresh: float) -> None:
    # 5% multiplicative noise on each of 10 samples per point, median kept (as the profiler
    # does). 27.5 lies between the grid's 24 and 32.
    profile = synthetic_profile(**TRUTH, batch_thresh=batch_thresh, grids=DENSE_GRIDS, noise=0.05, seed=seed)
    params, report = fit_profile(profile)
    expected = _expected(batch_thresh)
    for name, value in expected.items():
        assert _rel_err(getattr(params, name), value) < 0.02, (name, getattr(params, name))
    r2 = report.parameter("alpha").r_squared
    assert r2 is not None and r2 > 0.99


def test_threshold_search_is_continuous_and_beats_a_dense_brute_force() -> None:
    # Noisy data: the segment-wise closed form must reach the global minimum of the squared
    # error, which a brute-force scan over 20001 thresholds can only approach from above.
    profile = synthetic_profile(**TRUTH, batch_thresh=9.3, noise=0.05, seed=7)
    params, report = fit_profile(profile)
    t_fit = report.parameter("batch_thresh").diagnostics["least_squares_t"]
    b = np.array([k[1] for k in profile.T_decode], dtype=np.float64)
    y = np.array(list(profile.T_decode.values()))

    def sse(t: np.ndarray) -> np.ndarray:
        fitted = params.beta * np.maximum(1.0, b[None, :] / t[:, None])
        out: np.ndarray = ((y[None, :] - fitted) ** 2).sum(axis=1)
        return out

    grid = np.linspace(1.0, 32.0, 20001)
    assert sse(np.array([t_fit]))[0] <= sse(grid).min() + 1e-9
    assert t_fit not in set(DESIGN_GRIDS.batch_sizes)


# --- warnings ---------------------------------------------------------------------------------
def test_flat_decode_gives_lower_bound_at_largest_batch() -> None:
    profile = synthetic_profile(**TRUTH, batch_thresh=200.0)
    params, report = fit_profile(profile)
    fit = report.parameter("batch_thresh")
    assert params.batch_thresh == 32.0  # the largest measured batch, never extrapolated
    assert fit.diagnostics["is_lower_bound"] is True
    assert any("only a lower bound" in w for w in fit.warnings)
    assert params.metadata.fit_quality["batch_thresh"]["is_lower_bound"] is True


def test_nearly_flat_noisy_decode_is_also_a_lower_bound() -> None:
    # A threshold just under the largest batch rises less than the flatness tolerance.
    thresh = 32.0 / (1.0 + FLAT_DECODE_TOLERANCE / 2)
    params, report = fit_profile(synthetic_profile(**TRUTH, batch_thresh=thresh))
    assert params.batch_thresh == 32.0
    assert report.parameter("batch_thresh").diagnostics["least_squares_t"] == pytest.approx(thresh)
    assert "only a lower bound" in _all_warnings(report)


def test_decode_growing_from_batch_one_is_flagged_at_the_lower_edge() -> None:
    # Compute-bound from the first step on: y = beta' * b, so the threshold is the grid's 1.
    params, report = fit_profile(synthetic_profile(**TRUTH, batch_thresh=0.5))
    assert params.batch_thresh == pytest.approx(1.0)
    assert params.beta == pytest.approx(2 * TRUTH["beta"])
    assert "lower edge of the grid" in _all_warnings(report)


def test_prefill_fixed_cost_is_reported_as_a_broken_form() -> None:
    # Like vLLM on an H100: several ms of fixed cost that alpha * L cannot carry.
    profile = synthetic_profile(**TRUTH, batch_thresh=12.0, prefill_fixed_ms=8.0)
    _params, report = fit_profile(profile)
    alpha = report.parameter("alpha")
    assert alpha.diagnostics["affine_intercept_ms"] == pytest.approx(8.0)
    assert alpha.diagnostics["affine_slope_ms_per_token"] == pytest.approx(TRUTH["alpha"])
    assert any("misses L=64" in w for w in alpha.warnings)
    assert any("fixed cost" in w for w in alpha.warnings)


def test_poor_fit_warns_below_r_squared_threshold() -> None:
    base = synthetic_profile(**TRUTH, batch_thresh=12.0)
    erratic = {64: 40.0, 128: 5.0, 256: 35.0, 512: 10.0, 1024: 60.0, 2048: 20.0}
    _params, report = fit_profile(with_tables(base, T_prefill=erratic))
    r2 = report.parameter("alpha").r_squared
    assert r2 is not None and r2 < 0.9
    assert any("poor fit" in w and "R^2" in w for w in report.parameter("alpha").warnings)


def test_kv_len_dependence_of_decode_is_warned() -> None:
    _params, report = fit_profile(synthetic_profile(**TRUTH, batch_thresh=12.0, decode_kv_slope_ms=0.01))
    assert any("varies" in w and "kv_lens" in w for w in report.parameter("beta").warnings)


def test_load_scaled_interference_check_follows_the_grid() -> None:
    # Interference measured independent of B disagrees with the router's load scaling when
    # the decode batches are below batch_thresh ...
    _p, below = fit_profile(synthetic_profile(**TRUTH, batch_thresh=12.0))
    assert below.parameter("gamma").diagnostics["load_scaled_r_squared"] < 0.9
    assert "load-scaled form" in _all_warnings(below)
    # ... and agrees exactly when every decode batch is at or above it.
    _p, above = fit_profile(synthetic_profile(**TRUTH, batch_thresh=4.0))
    assert above.parameter("gamma").diagnostics["load_scaled_r_squared"] == pytest.approx(1.0)
    # The design's parameters fit without a warning (the queue-aware forms are checked apart).
    assert [w for w in above.warnings if not w.startswith("queue_aware.")] == []


def test_small_negative_interference_points_are_kept_and_counted() -> None:
    profile = synthetic_profile(**TRUTH, batch_thresh=4.0)
    table = dict(profile.T_interference)
    table[(64, 4)] = -0.05
    _params, report = fit_profile(with_tables(profile, T_interference=table))
    assert any("1 of 12 interference points are negative" in w for w in report.parameter("gamma").warnings)


# --- refusals ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("tables", "message"),
    [
        ({"T_interference": {(c, b): -0.5 for c in (64, 128) for b in (4, 8)}}, "gamma: interference slope"),
        ({"T_prefill": {512: 20.0}}, "at least 2 prompt lengths"),
        ({"T_decode": {(128, 4): 7.0, (128, 8): 7.0}}, "no batch-1 point"),
        ({"T_decode": {(128, 1): 7.0, (512, 1): 7.1}}, "at least 2 batch sizes"),
        ({"T_interference": {(64, 4): 1.0}}, "at least 2 points"),
    ],
)
def test_unfittable_profiles_raise_fit_error(tables: dict[str, Any], message: str) -> None:
    with pytest.raises(FitError, match=message):
        fit_profile(with_tables(synthetic_profile(), **tables))


@pytest.mark.parametrize(
    ("tables", "message"),
    [
        ({"T_prefill": {64: math.nan, 128: 5.0}}, r"T_prefill\[64\]: expected a finite number"),
        ({"T_decode": {(128, 1): 0.0, (128, 4): 1.0}}, "must be > 0"),
        ({"T_decode": {(128, 1): "7.0", (128, 4): 1.0}}, "expected a finite number"),
        ({"T_prefill": {}}, "T_prefill: missing or empty"),
        ({"T_decode": {128: 7.0}}, "is not 2 positive integer"),
        ({"p2p_bandwidth_GBps": math.inf}, "p2p_bandwidth_GBps"),
        ({"bytes_per_token": 0}, "bytes_per_token"),
    ],
)
def test_malformed_profiles_built_in_code_raise_invalid_profile(tables: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidProfile, match=message):
        fit_profile(with_tables(synthetic_profile(), **tables))


def _profile_json() -> dict[str, Any]:
    data: dict[str, Any] = synthetic_profile().to_json_dict()
    return data


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d.pop("T_prefill"), "T_prefill: missing"),
        (lambda d: d.pop("T_decode"), "T_decode: missing"),
        (lambda d: d.update(T_interference=[]), "T_interference: empty"),
        (lambda d: d["T_prefill"][0].update(ms="fast"), r"T_prefill\[0\].ms: expected a number"),
        (lambda d: d["T_decode"][2].update(batch=1.5), r"T_decode\[2\].batch: expected a positive integer"),
        (lambda d: d.update(bytes_per_token="147456"), "bytes_per_token: expected a positive integer"),
        (lambda d: d.pop("p2p_bandwidth_GBps"), "p2p_bandwidth_GBps: missing"),
        (lambda d: d.update(schema_version=99), "unsupported version 99"),
        (lambda d: d.update(T_prefill={"64": 3.0}), "T_prefill: expected a list"),
    ],
)
def test_bad_profile_files_are_refused_naming_file_and_field(
    tmp_path: Path, mutate: Any, message: str
) -> None:
    data = _profile_json()
    mutate(data)
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(data))
    with pytest.raises(InvalidProfile, match=message) as info:
        load_profile(path)
    assert str(path) in str(info.value)


def test_nan_and_non_json_profile_files_are_refused(tmp_path: Path) -> None:
    text = json.dumps(_profile_json()).replace('"ms": 3.2', '"ms": NaN', 1)
    assert "NaN" in text
    nan_file = tmp_path / "nan.json"
    nan_file.write_text(text)
    with pytest.raises(InvalidProfile, match="non-finite number NaN"):
        load_profile(nan_file)
    garbage = tmp_path / "garbage.json"
    garbage.write_text("{not json")
    with pytest.raises(InvalidProfile, match="not valid JSON"):
        load_profile(garbage)
    with pytest.raises(InvalidProfile, match="file not found"):
        load_profile(tmp_path / "absent.json")


# --- params, report and reproducibility -------------------------------------------------------
def test_metadata_comes_from_the_profile_and_overrides() -> None:
    profile = synthetic_profile(provenance={"source": "aiconfigurator", "created_at": "2025-12-31T23:00:00Z"})
    params, report = fit_profile(profile)
    meta = params.metadata
    assert (meta.model, meta.hardware, meta.transfer_path) == ("synthetic-8b", "Synthetic GPU", "nvlink")
    assert (meta.source, meta.created_at) == ("aiconfigurator", "2025-12-31T23:00:00Z")
    assert meta.extra["profile_id"] == report.profile_id
    assert report.params_id == params.params_id
    named, _ = fit_profile(profile, model_name="Qwen/Qwen3-8B", hardware="h100_sxm")
    assert (named.metadata.model, named.metadata.hardware) == ("Qwen/Qwen3-8B", "h100_sxm")
    bare, _ = fit_profile(synthetic_profile(provenance={}))
    assert (bare.metadata.source, bare.metadata.created_at) == ("torch-profiler", "unknown")


def test_refitting_a_saved_profile_reproduces_params_byte_for_byte(tmp_path: Path) -> None:
    profile = synthetic_profile(**TRUTH, batch_thresh=12.0, noise=0.05, seed=3, grids=DENSE_GRIDS)
    first = save_params(fit_profile(profile)[0], tmp_path / "a.json")
    loaded = load_profile(save_profile_json(profile, tmp_path / "profile.json"))
    second = save_params(fit_profile(loaded)[0], tmp_path / "b.json")
    assert first.read_bytes() == second.read_bytes()
    assert load_params(first).params_id == fit_profile(profile)[0].params_id


def test_report_json_and_table(tmp_path: Path) -> None:
    profile = synthetic_profile(**TRUTH, batch_thresh=200.0, prefill_fixed_ms=8.0)
    _params, report = fit_profile(profile)
    path = save_fit_report(report, tmp_path / "out" / "params.fit_report.json")
    data = json.loads(path.read_text())
    assert set(data["parameters"]) == {
        "alpha",
        "beta",
        "batch_thresh",
        "gamma",
        "bandwidth_GBps",
        "bytes_per_token",
        "queue_aware.prefill",
        "queue_aware.decode_step",
        "queue_aware.chunk",
    }
    assert len(data["parameters"]["alpha"]["residuals"]) == len(profile.T_prefill)
    assert len(data["parameters"]["beta"]["residuals"]) == len(profile.T_decode)
    res = data["parameters"]["alpha"]["residuals"][0]
    assert res["residual_ms"] == pytest.approx(res["measured_ms"] - res["fitted_ms"])
    assert data["warnings"] == list(report.warnings) and data["warnings"]
    json.dumps(data, allow_nan=False)
    table = report.format_table()
    for name in ALL_PARAMS:
        assert f"\n{name} " in table
    assert "only a lower bound" in table
    assert f"warnings ({len(report.warnings)}):" in table


def test_fit_from_profile_writes_params_and_report_beside_them(tmp_path: Path) -> None:
    profile_path = save_profile_json(synthetic_profile(**TRUTH, batch_thresh=12.0), tmp_path / "p.json")
    params_path = tmp_path / "deploy" / "params.json"
    fitted, fit_report = fit_profile(load_profile(profile_path), hardware="gpu-x")
    save_fit_report(fit_report, fit_report_path(save_params(fitted, params_path)))
    model = AnalyticalCostModel(load_params(params_path))
    assert model.params.alpha == pytest.approx(TRUTH["alpha"])
    assert load_params(params_path).params_id == model.params.params_id
    report = json.loads(fit_report_path(params_path).read_text())
    assert fit_report_path(params_path) == tmp_path / "deploy" / "params.fit_report.json"
    assert report["params_id"] == model.params.params_id
    assert report["hardware"] == "gpu-x"


def test_quick_grid_profile_fits() -> None:
    # The profiler's --quick grid (CPU runs) is small but must still fit.
    params, _report = fit_profile(synthetic_profile(**TRUTH, batch_thresh=3.0, grids=QUICK_GRIDS))
    assert params.batch_thresh == pytest.approx(3.0)
    assert params.gamma == pytest.approx(TRUTH["gamma"])


@pytest.mark.parametrize(
    ("measured", "fitted", "relative"),
    [
        (8.0, 2.0, 0.75),  # under-predicted: a fraction of the measurement
        (2.0, 8.0, -0.75),  # over-predicted: a fraction of the fit, not -300%
        (-0.01, 0.99, -1.0 / 0.99),  # a near-zero measurement does not explode
        (0.0, 0.0, None),
    ],
)
def test_relative_residual_is_bounded(measured: float, fitted: float, relative: float | None) -> None:
    r = Residual(point="p", measured_ms=measured, fitted_ms=fitted)
    assert r.residual_ms == measured - fitted
    assert r.relative == (None if relative is None else pytest.approx(relative))
