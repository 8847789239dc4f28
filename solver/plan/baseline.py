"""Per-machine batch limits and the co-located baseline of the capacity planner.

Notation as in ``solver.plan.split``. The baseline (the design's co-located policy): every machine
runs both phases with equal concurrency n_p = n_d = n, at the largest n with
C_p(n*L_p) + C_d(n) - C_w = C (the weights are held once). With alpha the share of time spent on
prefill, flow balance alpha*T_p(n*L_p)/L_p = (1 - alpha)*T_d(n)/L_d gives, with
a_p = T_p(n*L_p)/L_p and a_d = T_d(n)/L_d::

    alpha = a_d / (a_p + a_d),   R_u = X * a_p * a_d / (a_p + a_d),   P_u = R_u*L_p,   D_u = R_u*L_d
"""

from __future__ import annotations

from dataclasses import dataclass

from solver.errors import InfeasiblePlan
from solver.plan.curves import CapacityInverse, invert_capacity, invert_quadratic, throughput_at
from solver.plan.fitted import FittedCurves


@dataclass(frozen=True)
class Limits:
    """Largest batches one machine holds: prefill in tokens, decode in requests."""

    prefill: CapacityInverse
    decode: CapacityInverse


def phase_limits(model: FittedCurves, prompt_len: int) -> Limits:
    """C_p^-1(C) and C_d^-1(C); raises ``InfeasiblePlan`` when one request does not fit."""
    prefill = invert_capacity(
        model.prefill.capacity, model.memory_gb, 0.0, model.prefill.max_batch, "prefill capacity"
    )
    if prefill.batch < prompt_len:
        raise InfeasiblePlan(
            f"prompt_len {prompt_len} does not fit a prefill machine: its capacity limit is "
            f"{prefill.batch:.0f} tokens"
        )
    decode = invert_capacity(
        model.decode.capacity, model.memory_gb, 0.0, model.decode.max_batch, "decode capacity"
    )
    if decode.batch < 1.0:
        raise InfeasiblePlan(f"decode capacity limit is {decode.batch:.3g} requests, below one request")
    return Limits(prefill, decode)


@dataclass(frozen=True)
class Baseline:
    """Every machine runs both phases at concurrency n (fleet totals in tokens/s and requests/s)."""

    concurrency: float  # n = n_p = n_d, requests per machine
    prefill_batch_tokens: float  # n * L_p
    prefill_time_share: float  # alpha
    prefill_tokens_per_s: float  # P_u
    decode_tokens_per_s: float  # D_u
    rate_rps: float  # R_u
    memory_gb: float  # C_p(n*L_p) + C_d(n) - C_w, per machine
    capacity: CapacityInverse  # the inverse in n, with its exactness


def solve_baseline(model: FittedCurves, machines: int, prompt_len: int, output_len: int) -> Baseline:
    """The co-located policy at the largest n the memory allows (see the module docstring).

    The capacity bound is one quadratic in n: (c0_p + c0_d - C_w) + (c1_p*L_p + c1_d)*n
    + (c2_p*L_p^2 + c2_d)*n^2 = C, inverted over n in [0, min(prefill max_batch / L_p, decode
    max_batch)] like any capacity curve (exact or at the domain boundary).
    """
    cp, cd = model.prefill.capacity, model.decode.capacity
    c0 = cp.c0 + cd.c0 - model.weights_gb
    c1 = cp.c1 * prompt_len + cd.c1
    c2 = cp.c2 * prompt_len**2 + cd.c2
    hi = min(model.prefill.max_batch / prompt_len, model.decode.max_batch)
    inverse = invert_quadratic(c0, c1, c2, model.memory_gb, 0.0, hi, "co-located baseline capacity")
    n = inverse.batch
    if n < 1.0:
        raise InfeasiblePlan(
            f"co-located baseline: one request of {prompt_len} prompt tokens with its decode does not fit "
            f"(memory holds {n:.3g} requests)"
        )
    a_p = float(throughput_at(model.prefill.throughput, n * prompt_len)) / prompt_len
    a_d = float(throughput_at(model.decode.throughput, n)) / output_len
    if a_p <= 0.0 or a_d <= 0.0:
        raise InfeasiblePlan(
            f"co-located baseline: the {model.throughput_fit} throughput fit gives zero tokens/s at "
            f"concurrency {n:.4g} (prefill {a_p * prompt_len:.4g}, decode {a_d * output_len:.4g})"
        )
    rate = machines * a_p * a_d / (a_p + a_d)
    return Baseline(
        concurrency=n,
        prefill_batch_tokens=n * prompt_len,
        prefill_time_share=a_d / (a_p + a_d),
        prefill_tokens_per_s=rate * prompt_len,
        decode_tokens_per_s=rate * output_len,
        rate_rps=rate,
        memory_gb=c0 + n * (c1 + n * c2),
        capacity=inverse,
    )
