"""Hypothesis strategies for planner property tests: random but always-feasible workloads."""

from __future__ import annotations

from hypothesis import strategies as st

from solver.plan.curves import ThroughputFitKind
from solver.plan.fitted import FittedCurves, fit_curves
from tests.solver.plan.curve_factory import make_curve_set


@st.composite
def throughput_points(draw: st.DrawFn, low: float, high: float, monotone: bool) -> list[tuple[float, float]]:
    """2..8 points over [low, high] with positive tokens/s; non-decreasing when ``monotone``."""
    n = draw(st.integers(2, 8))
    batches = sorted(draw(st.lists(st.floats(low, high), min_size=n, max_size=n, unique=True)))
    values = draw(st.lists(st.floats(1.0, 1e5), min_size=len(batches), max_size=len(batches)))
    if monotone:
        values = sorted(values)
    return list(zip(batches, values, strict=True))


@st.composite
def planner_cases(
    draw: st.DrawFn, monotone: bool = False, max_machines: int = 60, fit: ThroughputFitKind | None = None
) -> tuple[FittedCurves, int, int, int]:
    """(model, X, L_p, L_d) with linear capacity curves sized so one request always fits both on
    a prefill machine and co-located (limits of 2.5..200 prompts and 2.5..500 decode requests)."""
    memory = draw(st.floats(50.0, 1000.0))
    weights = memory * draw(st.floats(0.05, 0.9))
    prompt_len = draw(st.integers(1, 4096))
    output_len = draw(st.integers(1, 4096))
    prompts_per_machine = draw(st.floats(2.5, 200.0))
    decode_limit = draw(st.floats(2.5, 500.0))
    free = memory - weights
    curves = make_curve_set(
        memory_gb=memory,
        weights_gb=weights,
        prefill_gb_per_token=free / (prompts_per_machine * prompt_len),
        decode_gb_per_request=free / decode_limit,
        prefill_capacity_batches=(1.0, 10.0, 100.0),
        decode_capacity_batches=(1.0, 2.0, 3.0),
        prefill_throughput=draw(throughput_points(1.0, 1e6, monotone)),
        decode_throughput=draw(throughput_points(1.0, 1000.0, monotone)),
        prefill_max_batch=1e9,
        decode_max_batch=1e6,
    )
    kinds: list[ThroughputFitKind] = ["piecewise", "piecewise", "quadratic"]
    kind = fit if fit is not None else draw(st.sampled_from(kinds))
    machines = draw(st.integers(2, max_machines))
    return fit_curves(curves, kind), machines, prompt_len, output_len
