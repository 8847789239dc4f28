"""Small hand-made curve sets for planner tests (not measurements of any real machine)."""

from __future__ import annotations

from collections.abc import Sequence

from solver.plan.curvesets import CurveSet, PhaseCurves, Series


def series(label: str, points: Sequence[tuple[float, float]]) -> Series:
    return Series(label, tuple(float(b) for b, _ in points), tuple(float(v) for _, v in points), "tests")


def make_curve_set(
    *,
    memory_gb: float = 100.0,
    weights_gb: float = 20.0,
    prefill_gb_per_token: float = 0.01,
    decode_gb_per_request: float = 1.0,
    prefill_throughput: Sequence[tuple[float, float]] = ((100, 5000), (10000, 5000)),
    decode_throughput: Sequence[tuple[float, float]] = ((1, 410), (100, 1400)),
    prefill_capacity_batches: Sequence[float] = (100, 1000, 5000),
    decode_capacity_batches: Sequence[float] = (1, 10, 50),
    prefill_max_batch: float | None = 1e6,
    decode_max_batch: float | None = 1e4,
    name: str = "test-linear",
) -> CurveSet:
    """Linear capacity C(B) = weights + slope*B sampled at the given batches, and the given
    throughput points. The defaults are the closed-form instance of tests/solver/plan/test_split.py."""
    prefill_cap = [(b, weights_gb + prefill_gb_per_token * b) for b in prefill_capacity_batches]
    decode_cap = [(b, weights_gb + decode_gb_per_request * b) for b in decode_capacity_batches]
    return CurveSet(
        name=name,
        model="test-model",
        hardware="test-machine",
        memory_gb=memory_gb,
        weights_gb=weights_gb,
        prefill=PhaseCurves(
            series("prefill capacity", prefill_cap),
            series("prefill throughput", prefill_throughput),
            "tokens",
            prefill_max_batch,
        ),
        decode=PhaseCurves(
            series("decode capacity", decode_cap),
            series("decode throughput", decode_throughput),
            "requests",
            decode_max_batch,
        ),
        assumptions=("hand-made test curves",),
    )
