"""Fit ``CostModelParams`` to a ``ProfileResult``: the design's rules, in plain least squares.

Usage::

    from solver.profile_io import load_profile
    from solver.fit import fit_profile, save_fit_report
    params, report = fit_profile(load_profile("profile_data.pt"))
    print(report.format_table())

The rules (every time in ms; docs/fitting.md explains how to read the result):

- ``alpha``: least-squares slope through the origin of ``T_prefill`` against prompt_len,
  ``alpha = sum(L*T) / sum(L^2)``, which is the design's form ``t_prefill = alpha * L``. The
  affine fit ``slope * L + intercept`` is reported beside it: a clearly positive intercept is a
  fixed cost per prefill that the design's form cannot carry.
- ``beta``: the mean over kv_lens of the batch-1 decode step. The cost model has no kv_len
  term, so ``beta`` stands for a decode step at any context in the measured range; the mean is
  the least-squares constant for those points (consistent with the other rules), and the spread
  across kv_lens is reported (and warned about when large).
- ``batch_thresh``: with ``beta`` fixed, the ``t`` that minimises
  ``sum over all decode points of (T - beta * max(1, b / t))^2``. Between two consecutive
  measured batches the set of points with ``b > t`` is fixed and the error is a quadratic in
  ``u = 1/t``, so each segment has a closed-form minimiser (clipped to the segment); the global
  minimum over ``t`` in ``[smallest, largest measured batch]`` is exact, not a grid search. If
  the fitted curve rises by less than ``FLAT_DECODE_TOLERANCE`` at the largest batch, decode is
  flat across the grid: ``batch_thresh`` is only known to be at least the largest batch, and is
  set to that batch with a warning (never extrapolated).
- ``gamma``: least-squares slope through the origin of ``T_interference`` against chunk tokens
  over every (chunk, decode batch) point. How well the router's load-scaled form
  ``gamma * chunk * min(B, batch_thresh) / batch_thresh`` matches the same grid is reported too.
- ``bandwidth_GBps`` and ``bytes_per_token``: taken from the profile as they are.
- the queue-aware model's forms (``queue_aware``, schema version 2): ``solver.fit_queue``, their
  attention terms (from long prompts and ``T_chunk_prefix``) ``solver.fit_attention``.

Sums use ``math.fsum`` (correctly rounded), so the same profile gives bit-identical parameters
on any machine: regenerating a params file from its profile reproduces it byte for byte.
"""

from __future__ import annotations

import itertools
import math
import numbers
from collections.abc import Mapping, Sequence

from pdroute_core.params import CostModelParams, ParamsMetadata
from solver.errors import FitError, InvalidProfile
from solver.fit_provenance import (
    check_table,
    first_str,
    hardware_name,
    jsonable,
    profile_id,
)
from solver.fit_provenance import model_name as profile_model_name
from solver.fit_queue import fit_queue_aware
from solver.fit_report import (
    POOR_FIT_R_SQUARED,
    FitReport,
    ParameterFit,
    Residual,
    fit_quality_summary,
    quality_warnings,
    residuals_of,
    save_fit_report,
)
from solver.lstsq import affine, r_squared, slope_through_origin
from solver.profile_result import ProfileResult

__all__ = ["FitReport", "ParameterFit", "Residual", "fit_profile", "save_fit_report"]

FLAT_DECODE_TOLERANCE = 0.10  # decode "flat" if the fit rises < 10% at the largest batch
KV_SPREAD_WARN = 0.25  # warn when the batch-1 step varies > 25% across kv_lens


def _fit_alpha(table: Mapping[int, float]) -> ParameterFit:
    lens = sorted(table)
    if len(lens) < 2:
        raise FitError(f"T_prefill: need at least 2 prompt lengths to fit alpha, got {len(lens)}")
    x = [float(n) for n in lens]
    y = [table[n] for n in lens]
    alpha = slope_through_origin(x, y)
    if not alpha > 0:
        raise FitError(f"alpha: prefill slope {alpha:.4g} ms/token is not positive; the profile is unusable")
    fitted = [alpha * v for v in x]
    r2 = r_squared(y, fitted)
    res = residuals_of([f"L={n}" for n in lens], y, fitted)
    slope, intercept = affine(x, y)
    r2_affine = r_squared(y, [slope * v + intercept for v in x])
    warnings = quality_warnings("alpha * L through the origin", r2, res)
    if warnings and intercept > 0:
        warnings.append(
            f"the affine fit {slope:.4g} ms/token + {intercept:.4g} ms shows a fixed cost per prefill "
            f"that alpha * L cannot represent: short prompts are under-charged"
        )
    return ParameterFit(
        name="alpha",
        value=alpha,
        unit="ms/token",
        method="least-squares slope through the origin of T_prefill vs prompt_len",
        r_squared=r2,
        residuals=res,
        warnings=tuple(warnings),
        diagnostics={
            "affine_slope_ms_per_token": slope,
            "affine_intercept_ms": intercept,
            "affine_r_squared": r2_affine,
        },
    )


def _sse(points: Sequence[tuple[float, float]], beta: float, thresh: float) -> float:
    return math.fsum((y - (beta if b <= thresh else beta * b / thresh)) ** 2 for b, y in points)


def _best_thresh(points: Sequence[tuple[float, float]], beta: float) -> float:
    """Exact minimiser over ``[min b, max b]`` of the two-segment decode error (module docstring).

    Ties go to the flat answer (largest batch) first, then to the smallest ``t``.
    """
    batches = sorted({b for b, _ in points})
    best_t, best_err = batches[-1], _sse(points, beta, batches[-1])
    for lo, hi in itertools.pairwise(batches):
        above = [(b, y) for b, y in points if b >= hi]
        u = math.fsum(b * y for b, y in above) / (beta * math.fsum(b * b for b, _ in above))
        t = 1.0 / min(max(u, 1.0 / hi), 1.0 / lo)
        err = _sse(points, beta, t)
        if err < best_err:
            best_t, best_err = t, err
    return best_t


def _fit_decode(table: Mapping[tuple[int, int], float]) -> tuple[ParameterFit, ParameterFit]:
    keys = sorted(table)
    batch1 = {kv: table[(kv, b)] for kv, b in keys if b == 1}
    if not batch1:
        raise FitError("T_decode: no batch-1 point; beta is the decode step at batch 1")
    batches = sorted({b for _, b in keys})
    if len(batches) < 2:
        raise FitError(f"T_decode: need at least 2 batch sizes to fit batch_thresh, got {batches}")
    beta = math.fsum(batch1.values()) / len(batch1)
    points = [(float(b), table[(kv, b)]) for kv, b in keys]
    t_fit = _best_thresh(points, beta)
    b_max, b_min = float(batches[-1]), float(batches[0])
    rise = b_max / t_fit
    is_lower_bound = rise < 1.0 + FLAT_DECODE_TOLERANCE
    thresh = b_max if is_lower_bound else t_fit
    measured = [y for _, y in points]
    fitted = [beta if b <= thresh else beta * b / thresh for b, _ in points]
    r2 = r_squared(measured, fitted)
    res = residuals_of([f"kv={kv},b={b}" for kv, b in keys], measured, fitted)
    spread = max(batch1.values()) / min(batch1.values()) - 1.0
    beta_warn = quality_warnings("the decode form beta * max(1, b / batch_thresh)", r2, res)
    if spread > KV_SPREAD_WARN:
        beta_warn.append(
            f"the batch-1 step varies {100 * spread:.0f}% across kv_lens {sorted(batch1)}; the form has "
            f"no kv_len term, so beta is their mean"
        )
    thresh_warn = []
    if is_lower_bound:
        thresh_warn.append(
            f"decode is flat across the grid (the best fit rises {100 * (rise - 1):.1f}% by batch "
            f"{int(b_max)}, < {100 * FLAT_DECODE_TOLERANCE:.0f}%): batch_thresh is only a lower bound, "
            f"set to the largest measured batch {int(b_max)}; measure larger batches to locate it"
        )
    elif thresh <= b_min:
        thresh_warn.append(
            f"batch_thresh sits at the lower edge of the grid (batch {int(b_min)}): decode grows from "
            f"the smallest batch on, so no memory-bound plateau was measured"
        )
    beta_fit = ParameterFit(
        name="beta",
        value=beta,
        unit="ms/step",
        method=f"mean over kv_lens {sorted(batch1)} of the batch-1 decode step",
        r_squared=r2,
        residuals=res,
        warnings=tuple(beta_warn),
        diagnostics={
            "batch1_ms_by_kv_len": {str(kv): v for kv, v in sorted(batch1.items())},
            "kv_len_spread": spread,
        },
    )
    thresh_fit = ParameterFit(
        name="batch_thresh",
        value=thresh,
        unit="sequences",
        method="continuous least squares of beta * max(1, b / t) over every decode point (beta fixed)",
        r_squared=r2,
        warnings=tuple(thresh_warn),
        diagnostics={
            "least_squares_t": t_fit,
            "is_lower_bound": is_lower_bound,
            "measured_batches": batches,
        },
    )
    return beta_fit, thresh_fit


def _fit_gamma(table: Mapping[tuple[int, int], float], thresh: float) -> ParameterFit:
    keys = sorted(table)
    if len(keys) < 2:
        raise FitError(f"T_interference: need at least 2 points to fit gamma, got {len(keys)}")
    chunks = [float(c) for c, _ in keys]
    measured = [table[k] for k in keys]
    gamma = slope_through_origin(chunks, measured)
    if not gamma > 0:
        raise FitError(
            f"gamma: interference slope {gamma:.4g} ms/token is not positive: the mixed steps were not "
            f"slower than the pure decode steps, so the profile gives no interference cost (re-measure on an "
            f"idle machine, with more --repeats or larger --chunk-sizes)"
        )
    fitted = [gamma * c for c in chunks]
    r2 = r_squared(measured, fitted)
    labels = [f"chunk={c},B={b}" for c, b in keys]
    res = residuals_of(labels, measured, fitted)
    scaled = [c * min(float(b), thresh) / thresh for c, b in keys]
    r2_router = r_squared(measured, [gamma * s for s in scaled])
    best_scaled = slope_through_origin(scaled, measured)
    r2_best_scaled = r_squared(measured, [best_scaled * s for s in scaled])
    warnings = quality_warnings("interference vs chunk tokens", r2, res)
    if r2_router is not None and r2_router < POOR_FIT_R_SQUARED:
        warnings.append(
            f"the router's load-scaled form gamma * chunk * min(B, batch_thresh) / batch_thresh matches "
            f"the grid with R^2 = {r2_router:.3f} (< {POOR_FIT_R_SQUARED}); its best gamma would be "
            f"{best_scaled:.4g} ms/token (R^2 = {_fmt_r2(r2_best_scaled)})"
        )
    negatives = sum(1 for v in measured if v < 0)
    if negatives:
        warnings.append(
            f"{negatives} of {len(measured)} interference points are negative (noise; kept in the fit)"
        )
    return ParameterFit(
        name="gamma",
        value=gamma,
        unit="ms/token",
        method="least-squares slope through the origin of T_interference vs chunk tokens (all B)",
        r_squared=r2,
        residuals=res,
        warnings=tuple(warnings),
        diagnostics={
            "load_scaled_r_squared": r2_router,
            "load_scaled_best_gamma": best_scaled,
            "load_scaled_best_r_squared": r2_best_scaled,
        },
    )


def _fmt_r2(r2: float | None) -> str:
    return "undefined" if r2 is None else f"{r2:.3f}"


def _passed_through(profile: ProfileResult) -> tuple[ParameterFit, ParameterFit]:
    bw, bpt = profile.p2p_bandwidth_GBps, profile.bytes_per_token
    if isinstance(bw, bool) or not isinstance(bw, numbers.Real) or not math.isfinite(bw) or bw <= 0:
        raise InvalidProfile(f"p2p_bandwidth_GBps: expected a finite number > 0, got {bw!r}")
    if isinstance(bpt, bool) or not isinstance(bpt, numbers.Integral) or bpt < 1:
        raise InvalidProfile(f"bytes_per_token: expected a positive integer, got {bpt!r}")
    bw_fit = ParameterFit(
        name="bandwidth_GBps",
        value=float(bw),
        unit="GB/s",
        method=f"from the profile (KV path {profile.transfer_path})",
        diagnostics={"transfer_ms_per_token": int(bpt) / (float(bw) * 1e6)},
    )
    bpt_fit = ParameterFit(
        name="bytes_per_token",
        value=float(int(bpt)),
        unit="bytes",
        method="from the profile (layers x KV heads x head dim x 2 x dtype bytes)",
    )
    return bw_fit, bpt_fit


def fit_profile(
    profile: ProfileResult, *, model_name: str | None = None, hardware: str | None = None
) -> tuple[CostModelParams, FitReport]:
    """Fit the six parameters to ``profile`` by the rules in the module docstring.

    ``model_name`` and ``hardware`` override the names found in the profile. ``created_at`` is
    the profile's creation time (``provenance["created_at"]``), never the clock, so refitting
    one profile reproduces the same params file. Raises ``InvalidProfile`` for malformed tables
    and ``FitError`` when the data cannot give a positive parameter.
    """
    check_table("T_prefill", profile.T_prefill, 1, allow_negative=False)
    check_table("T_decode", profile.T_decode, 2, allow_negative=False)
    check_table("T_interference", profile.T_interference, 2, allow_negative=True)
    alpha = _fit_alpha(profile.T_prefill)
    beta, thresh = _fit_decode(profile.T_decode)
    gamma = _fit_gamma(profile.T_interference, thresh.value)
    bandwidth, bpt = _passed_through(profile)
    if profile.T_chunk_prefix:
        check_table("T_chunk_prefix", profile.T_chunk_prefix, 2, allow_negative=False)
    queue_params, queue_fits = fit_queue_aware(
        profile.T_prefill, profile.T_decode, profile.T_interference, profile.T_chunk_prefix
    )
    fits = (alpha, beta, thresh, gamma, bandwidth, bpt, *queue_fits)
    prov = profile.provenance
    pid = profile_id(profile)
    meta = ParamsMetadata(
        model=first_str(model_name) or profile_model_name(profile),
        hardware=first_str(hardware) or hardware_name(profile),
        transfer_path=profile.transfer_path,
        source=first_str(prov.get("source")) or "torch-profiler",
        created_at=first_str(prov.get("created_at")) or "unknown",
        fit_quality=fit_quality_summary(fits),
        extra={
            "profile_id": pid,
            "fit": {
                "prefill_affine_slope_ms_per_token": alpha.diagnostics["affine_slope_ms_per_token"],
                "prefill_affine_intercept_ms": alpha.diagnostics["affine_intercept_ms"],
                "beta_kv_lens": sorted(int(k) for k in beta.diagnostics["batch1_ms_by_kv_len"]),
                "batch_thresh_least_squares": thresh.diagnostics["least_squares_t"],
            },
            "profile_provenance": jsonable(prov),
        },
    )
    params = CostModelParams(
        alpha=alpha.value,
        beta=beta.value,
        batch_thresh=thresh.value,
        gamma=gamma.value,
        bandwidth_GBps=bandwidth.value,
        bytes_per_token=int(bpt.value),
        metadata=meta,
        queue_aware=queue_params,
    )
    report = FitReport(
        model=meta.model,
        hardware=meta.hardware,
        source=meta.source,
        transfer_path=meta.transfer_path,
        created_at=meta.created_at,
        params_id=params.params_id,
        profile_id=pid,
        parameters=fits,
    )
    return params, report
