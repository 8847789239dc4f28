"""Fit the queue-aware model's forms (``QueueAwareParams``) to a profile's tables.

The forms are in ``pdroute_core.queue_params``. Each is a small least-squares fit with
non-negative coefficients, solved from normal equations summed with ``math.fsum`` (so a
profile refits to the same bits on any machine) and reported as one ``ParameterFit`` with R^2,
every residual and the warnings of ``solver.fit_report.quality_warnings``:

- ``queue_aware.prefill``: ``T_prefill(u) = floor + per_token * max(0, u - knee) [+ per_token_sq
  * u^2]``. For each candidate knee (0, every measured prompt length, and 32 points between
  consecutive ones) the coefficients have a closed form; the knee with the least squared error
  wins. A forward has a fixed cost (weights read, kernel launches) that the design's ``alpha *
  L`` cannot show; the knee is where the prompt starts to fill the GPU. The bracket, attention,
  only from a profile with prompts of ``solver.fit_attention.LONG_PROMPT_TOKENS`` or more.
- ``queue_aware.decode_step``: ``T_decode(kv, B) = base + per_seq * B + per_ctx * (kv * B)``
  over every measured point: the step reads the weights once, does per-sequence work, and
  reads every running sequence's KV cache (``kv * B`` tokens).
- ``queue_aware.chunk``: ``T_interference(c, B) = c * (per_token + per_token_sq * c +
  per_token_seq * B)`` over every point. The diagnostics hold the check the design assumes,
  that the chunk cost does not depend on the decode batch: the same fit without the batch
  term, its R^2, and how much the batch term adds at the largest chunk between the smallest
  and the largest measured batch.
- ``queue_aware.prefill_attention`` and ``queue_aware.chunk_prefix``: the attention terms
  (``solver.fit_attention``), reported only where fitted or derived.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from itertools import combinations, pairwise
from typing import Any

from pdroute_core.queue_params import QueueAwareParams
from solver.errors import FitError
from solver.fit_attention import (
    LONG_PROMPT_TOKENS,
    fit_chunk_prefix,
    long_context_check,
    prefill_attention_fit,
)
from solver.fit_report import ParameterFit, quality_warnings, residuals_of
from solver.lstsq import r_squared, slope_through_origin

KNEE_STEPS = 32  # candidate knees between two measured prompt lengths
SQUARE_SCALE = 2.0**-20  # the L^2 column in units of (1024 tokens)^2: an exact rescaling
BATCH_DEPENDENCE_WARN = 0.25  # warn when the batch term moves the chunk cost by more than 25%


def _solve(matrix: list[list[float]], rhs: list[float]) -> list[float] | None:
    """Gaussian elimination with partial pivoting; ``None`` when singular."""
    n = len(rhs)
    a = [[*row, rhs[i]] for i, row in enumerate(matrix)]
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(a[r][col]))
        if a[pivot][col] == 0.0:
            return None
        a[col], a[pivot] = a[pivot], a[col]
        for r in range(col + 1, n):
            k = a[r][col] / a[col][col]
            for j in range(col, n + 1):
                a[r][j] -= k * a[col][j]
    x = [0.0] * n
    for i in range(n - 1, -1, -1):
        x[i] = (a[i][n] - math.fsum(a[i][j] * x[j] for j in range(i + 1, n))) / a[i][i]
    return x


def nonneg_lstsq(columns: Sequence[Sequence[float]], y: Sequence[float]) -> list[float]:
    """Least squares ``y ~ sum_k coef_k * columns[k]`` with every ``coef_k >= 0``.

    Exact for the few terms used here: every subset of the columns is solved unconstrained and
    the best subset whose coefficients are all non-negative wins (dropped terms are 0).
    """
    k = len(columns)
    best: tuple[float, list[float]] | None = None
    for size in range(k, 0, -1):
        for subset in combinations(range(k), size):
            cols = [columns[i] for i in subset]
            gram = [[math.fsum(a * b for a, b in zip(ci, cj, strict=True)) for cj in cols] for ci in cols]
            rhs = [math.fsum(a * b for a, b in zip(ci, y, strict=True)) for ci in cols]
            sol = _solve(gram, rhs)
            if sol is None or any(v < 0 for v in sol):
                continue
            coef = [0.0] * k
            for i, v in zip(subset, sol, strict=True):
                coef[i] = v
            sse = math.fsum(
                (yi - math.fsum(coef[j] * columns[j][i] for j in range(k))) ** 2 for i, yi in enumerate(y)
            )
            if best is None or sse < best[0]:
                best = (sse, coef)
    return best[1] if best is not None else [0.0] * k


def _search_prefill(
    x: Sequence[float], y: Sequence[float], attention: bool
) -> tuple[float, float, float, float, float] | None:
    """``(sse, knee, floor, per_token, per_token_sq)`` of the best knee; ``None`` if none rises."""
    knees = {0.0, *x}
    for lo, hi in pairwise(x):
        knees.update(lo + (hi - lo) * i / KNEE_STEPS for i in range(1, KNEE_STEPS))
    squares = [v * v * SQUARE_SCALE for v in x]  # scaled by a power of 2 (exact) for the solve
    best: tuple[float, float, float, float, float] | None = None
    for knee in sorted(knees):
        z = [max(0.0, v - knee) for v in x]
        if max(z) == 0.0:
            continue
        if attention:
            floor, per_token, scaled_sq = nonneg_lstsq([[1.0] * len(x), z, squares], y)
        else:
            (floor, per_token), scaled_sq = nonneg_lstsq([[1.0] * len(x), z], y), 0.0
        if per_token <= 0:
            continue
        sse = math.fsum(
            (yi - (floor + per_token * zi + scaled_sq * si)) ** 2
            for yi, zi, si in zip(y, z, squares, strict=True)
        )
        if best is None or sse < best[0]:
            best = (sse, knee, floor, per_token, scaled_sq * SQUARE_SCALE)
    return best


def _fit_prefill(table: Mapping[int, float]) -> tuple[ParameterFit, float, float, float, float]:
    lens = sorted(table)
    attention = lens[-1] >= LONG_PROMPT_TOKENS  # else the attention term is not identifiable: 0
    if len(lens) < 2:
        raise FitError(f"T_prefill: need at least 2 prompt lengths for the prefill form, got {len(lens)}")
    x = [float(n) for n in lens]
    y = [table[n] for n in lens]
    best = _search_prefill(x, y, attention)
    fallback = best is None
    if best is None:
        # A table that never rises (timing noise on a CPU run): the design's slope through the origin.
        per_token = slope_through_origin(x, y)
        if not per_token > 0:
            raise FitError("T_prefill: no positive per-token slope fits the prefill form")
        best = (0.0, 0.0, 0.0, per_token, 0.0)
    _, knee, floor, per_token, sq = best
    fitted = [floor + per_token * max(0.0, v - knee) + sq * (v * v) for v in x]
    r2 = r_squared(y, fitted)
    res = residuals_of([f"L={n}" for n in lens], y, fitted)
    warnings = quality_warnings("the prefill form", r2, res)
    if fallback:
        warnings.append(
            "the prefill time does not rise with the prompt: fixed cost 0, slope through the origin"
        )
    diagnostics: dict[str, Any] = {"prefill_floor_ms": floor, "prefill_knee_tokens": knee}
    method = "least squares of T_prefill = floor + per_token * max(0, L - knee), knee by search"
    if attention:
        method = (
            "least squares of T_prefill = floor + per_token * max(0, L - knee) + per_token_sq * L^2 "
            "(coefficients >= 0), knee by search"
        )
        diagnostics["prefill_ms_per_token_sq"] = sq
        diagnostics["without_attention"] = _linear_prefill(x, y, lens)
    fit = ParameterFit(
        name="queue_aware.prefill",
        value=per_token,
        unit="ms/token",
        method=method,
        r_squared=r2,
        residuals=res,
        warnings=tuple(warnings),
        diagnostics=diagnostics,
    )
    return fit, floor, per_token, knee, sq


def _linear_prefill(x: Sequence[float], y: Sequence[float], lens: Sequence[int]) -> dict[str, Any]:
    """The form without the attention term on the same table: how much the term buys."""
    best = _search_prefill(x, y, False)
    if best is None:
        return {}
    _, knee, floor, per_token, _sq = best
    fitted = [floor + per_token * max(0.0, v - knee) for v in x]
    res = residuals_of([f"L={n}" for n in lens], y, fitted)
    rel = [abs(r.relative) for r in res if r.relative is not None]
    return {
        "r_squared": r_squared(y, fitted),
        "max_abs_relative_residual": max(rel) if rel else None,
        "prefill_floor_ms": floor,
        "prefill_ms_per_token": per_token,
        "prefill_knee_tokens": knee,
    }


def _fit_decode(table: Mapping[tuple[int, int], float]) -> tuple[ParameterFit, list[float]]:
    keys = sorted(table)
    if len(keys) < 3:
        raise FitError(f"T_decode: need at least 3 points for the decode-step form, got {len(keys)}")
    ones = [1.0] * len(keys)
    batch = [float(b) for _, b in keys]
    context = [float(kv) * float(b) for kv, b in keys]
    y = [table[k] for k in keys]
    coef = nonneg_lstsq([ones, batch, context], y)
    if max(coef) <= 0:
        raise FitError("T_decode: the decode-step form fits no positive cost; the profile is unusable")
    fitted = [coef[0] + coef[1] * b + coef[2] * k for b, k in zip(batch, context, strict=True)]
    r2 = r_squared(y, fitted)
    res = residuals_of([f"kv={kv},b={b}" for kv, b in keys], y, fitted)
    fit = ParameterFit(
        name="queue_aware.decode_step",
        value=coef[0],
        unit="ms",
        method="least squares of T_decode = base + per_seq * B + per_ctx * kv * B (coefficients >= 0)",
        r_squared=r2,
        residuals=res,
        warnings=tuple(quality_warnings("the decode-step form", r2, res)),
        diagnostics={
            "decode_ms_per_seq": coef[1],
            "decode_ms_per_context_token": coef[2],
            **long_context_check(res, [kv for kv, _ in keys]),
        },
    )
    return fit, coef


def _fit_chunk(table: Mapping[tuple[int, int], float]) -> tuple[ParameterFit, list[float]]:
    keys = sorted(table)
    if len(keys) < 3:
        raise FitError(f"T_interference: need at least 3 points for the chunk form, got {len(keys)}")
    chunk = [float(c) for c, _ in keys]
    batch = [float(b) for _, b in keys]
    y = [table[k] for k in keys]
    cols = [chunk, [c * c for c in chunk], [c * b for c, b in zip(chunk, batch, strict=True)]]
    coef = nonneg_lstsq(cols, y)
    # A cost carried by the batch term alone is a cost: every chunk the model prices runs beside
    # at least one decode. (Noisy CPU engines give tables where it takes all of it.)
    if max(coef) <= 0:
        raise FitError("T_interference: prefill tokens add no time to a decode step; the profile is unusable")
    fitted = [c * (coef[0] + coef[1] * c + coef[2] * b) for c, b in zip(chunk, batch, strict=True)]
    r2 = r_squared(y, fitted)
    res = residuals_of([f"chunk={c},B={b}" for c, b in keys], y, fitted)
    # The check: the same form without the batch term, and what the batch term is worth.
    flat = nonneg_lstsq(cols[:2], y)
    r2_flat = r_squared(y, [c * (flat[0] + flat[1] * c) for c in chunk])
    c_max, b_min, b_max = max(chunk), min(batch), max(batch)
    at_min = c_max * (coef[0] + coef[1] * c_max + coef[2] * b_min)
    at_max = c_max * (coef[0] + coef[1] * c_max + coef[2] * b_max)
    dependence = at_max / at_min - 1.0 if at_min > 0 else 0.0
    warnings = quality_warnings("the chunk form", r2, res)
    if dependence > BATCH_DEPENDENCE_WARN:
        warnings.append(
            f"the chunk cost depends on the decode batch: a {c_max:.0f}-token chunk costs "
            f"{100 * dependence:.0f}% more beside {b_max:.0f} decodes than beside {b_min:.0f} "
            f"(modelled by the per-token-per-sequence term)"
        )
    fit = ParameterFit(
        name="queue_aware.chunk",
        value=coef[0],
        unit="ms/token",
        method="least squares of T_interference = c * (per_token + per_token_sq * c + per_token_seq * B)",
        r_squared=r2,
        residuals=res,
        warnings=tuple(warnings),
        diagnostics={
            "chunk_ms_per_token_sq": coef[1],
            "chunk_ms_per_token_seq": coef[2],
            "without_batch_term": {"chunk_ms_per_token": flat[0], "chunk_ms_per_token_sq": flat[1]},
            "without_batch_term_r_squared": r2_flat,
            "batch_dependence_at_largest_chunk": dependence,
        },
    )
    return fit, coef


def fit_queue_aware(
    t_prefill: Mapping[int, float],
    t_decode: Mapping[tuple[int, int], float],
    t_interference: Mapping[tuple[int, int], float],
    t_chunk_prefix: Mapping[tuple[int, int], float] | None = None,
) -> tuple[QueueAwareParams, tuple[ParameterFit, ...]]:
    """The queue-aware forms and their fits (module docstring): the prefill, decode-step and
    chunk forms', then the attention terms' where they are fitted or derived (none for a profile
    without long prompts or ``T_chunk_prefix``: its fits are the ones before those terms, bit for
    bit); raises ``FitError``."""
    prefill_fit, floor, per_token, knee, sq = _fit_prefill(t_prefill)
    decode_fit, dec = _fit_decode(t_decode)
    chunk_fit, chk = _fit_chunk(t_interference)
    attention: list[ParameterFit] = []
    if max(t_prefill) >= LONG_PROMPT_TOKENS:
        attention.append(prefill_attention_fit(prefill_fit, t_prefill, sq))
    prefix_fit, prefix = fit_chunk_prefix(t_chunk_prefix or {}, sq)
    if prefix_fit is not None:
        attention.append(prefix_fit)
    params = QueueAwareParams(
        prefill_floor_ms=floor,
        prefill_ms_per_token=per_token,
        prefill_knee_tokens=knee,
        decode_base_ms=dec[0],
        decode_ms_per_seq=dec[1],
        decode_ms_per_context_token=dec[2],
        chunk_ms_per_token=chk[0],
        chunk_ms_per_token_sq=chk[1],
        chunk_ms_per_token_seq=chk[2],
        prefill_ms_per_token_sq=sq,
        chunk_ms_per_token_prefix=prefix,
    )
    return params, (prefill_fit, decode_fit, chunk_fit, *attention)
