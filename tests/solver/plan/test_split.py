"""CUF and TUF candidates (solver/plan/split.py): closed-form instances, a per-x loop reference and
invariants over random curve sets.

Closed-form instance A (tests/solver/plan/curve_factory.py defaults): C = 100 GB, C_w = 20 GB,
C_p(B) = 20 + 0.01*B, C_d(n) = 20 + n, so the limits are B_p = 8000 tokens and n_d = 80; T_p = 5000
tokens/s flat, T_d(n) = 400 + 10*n. With X = 10, L_p = 100, L_d = 50:
  CUF rate(x) = min(50*(10 - x), 24*x)                 -> x = 7: min(150, 168) = 150, CUF-P
  TUF-P: n_d = 80*(10 - x)/x; rate balance (10 - x)*50 = (400*x + 800*(10 - x))/50
         -> x* = 10*34/42 = 8.0952; x = 8: n_d = 20, min(100, 96) = 96; x = 9: min(50, 88) = 50
  TUF-D: its rate balance root 500/74 = 6.76 lies outside x <= 5 (where n_p <= 80): none.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings

from solver.plan.baseline import phase_limits
from solver.plan.curves import throughput_at
from solver.plan.fitted import FittedCurves, fit_curves
from solver.plan.split import (
    CandidateTable,
    all_candidates,
    concat,
    cuf_balanced_x,
    cuf_candidates,
    tuf_candidates,
)
from tests.solver.plan.curve_factory import make_curve_set
from tests.solver.plan.plan_strategies import planner_cases

X, LP, LD = 10, 100, 50


def _model(**kw: Any) -> FittedCurves:
    return fit_curves(make_curve_set(**kw))


def test_limits_of_instance_a() -> None:
    limits = phase_limits(_model(), LP)
    assert limits.prefill.batch == pytest.approx(8000.0) and limits.prefill.is_exact
    assert limits.decode.batch == pytest.approx(80.0) and limits.decode.is_exact


def test_cuf_closed_form() -> None:
    model = _model()
    table = cuf_candidates(model, phase_limits(model, LP), X, LP, LD)
    x = np.arange(1, X)
    assert list(table.decode_machines) == list(x)
    assert list(table.prefill_machines) == list(X - x)
    expected = np.minimum(50.0 * (X - x), 24.0 * x)
    assert table.rate_rps == pytest.approx(expected)
    assert table.policy == tuple("CUF-P" if 50 * (X - k) <= 24 * k else "CUF-D" for k in x)
    k = int(np.argmax(table.rate_rps))
    row = table.row(k)
    assert (row.policy, row.decode_machines) == ("CUF-P", 7) and row.rate_rps == pytest.approx(150.0)
    assert row.prefill_time_util == 1.0 and row.decode_time_util == pytest.approx(150 / 168)
    assert row.prefill_tokens_per_s == pytest.approx(150.0 * LP)
    assert row.decode_tokens_per_s == pytest.approx(150.0 * LD)
    assert row.prefill_capacity_util == pytest.approx(1.0) and row.decode_capacity_util == pytest.approx(1.0)
    assert row.rate_residual == 0.0
    assert row.concurrency_residual == pytest.approx((3 * 80 - 7 * 80) / (7 * 80))
    assert row.x_continuous is None


def test_tuf_closed_form() -> None:
    model = _model()
    table, roots = tuf_candidates(model, phase_limits(model, LP), X, LP, LD)
    assert [label for label, _ in roots] == ["TUF-P"]
    assert roots[0][1] == pytest.approx(10 * 34 / 42, abs=1e-7)
    assert table.policy == ("TUF-P", "TUF-P")
    assert list(table.decode_machines) == [8, 9]
    assert table.decode_batch == pytest.approx([20.0, 80 / 9])
    assert table.prefill_batch_tokens == pytest.approx([8000.0, 8000.0])
    assert table.rate_rps == pytest.approx([96.0, 50.0])
    assert table.concurrency_residual == pytest.approx([0.0, 0.0], abs=1e-12)
    assert table.rate_residual == pytest.approx([(100 - 96) / 100, (50 - 88) / 88])
    assert list(table.prefill_time_util) == [1.0, 1.0] and list(table.decode_time_util) == [1.0, 1.0]


def test_tuf_d_closed_form() -> None:
    """Instance B: T_p(B) = 1000 + 0.1*B, T_d = 3000 flat. TUF-D: n_d = 80, n_p = 80x/(10 - x);
    rate balance (10 - x)*10 + 8*x = 60*x -> x* = 100/62 = 1.6129; x = 1: min(98, 60) = 60,
    x = 2: B_p = 2000, min(96, 120) = 96. CUF: min(18*(10 - x), 60*x) -> x = 3: 126, CUF-P."""
    model = _model(
        prefill_throughput=((100, 1010), (10000, 2000)), decode_throughput=((1, 3000), (100, 3000))
    )
    limits = phase_limits(model, LP)
    table, roots = tuf_candidates(model, limits, X, LP, LD)
    assert [label for label, _ in roots] == ["TUF-D"]
    assert roots[0][1] == pytest.approx(100 / 62, abs=1e-7)
    assert list(table.decode_machines) == [1, 2]
    assert table.prefill_batch_tokens == pytest.approx([8000 / 9, 2000.0])
    assert table.rate_rps == pytest.approx([60.0, 96.0])
    cuf = cuf_candidates(model, limits, X, LP, LD)
    best = cuf.row(int(np.argmax(cuf.rate_rps)))
    assert (best.policy, best.decode_machines) == ("CUF-P", 3) and best.rate_rps == pytest.approx(126.0)


def test_concurrency_balanced_x() -> None:
    model = _model()
    x, x_real = cuf_balanced_x(phase_limits(model, LP), X, LP)
    assert x == 5 and x_real == pytest.approx(5.0)
    # n_p = 8000/400 = 20, n_d = 80: x = 10*20/100 = 2
    x, x_real = cuf_balanced_x(phase_limits(model, 400), X, 400)
    assert x == 2 and x_real == pytest.approx(2.0)


def _cuf_loop(
    model: FittedCurves, machines: int, prompt_len: int, output_len: int
) -> list[tuple[str, float]]:
    """A per-x scalar loop of the CUF formulas, as written in the design."""
    limits = phase_limits(model, prompt_len)
    t_p = float(throughput_at(model.prefill.throughput, limits.prefill.batch))
    t_d = float(throughput_at(model.decode.throughput, limits.decode.batch))
    out = []
    for x in range(1, machines):
        prefill_rps = (machines - x) * t_p / prompt_len
        decode_rps = x * t_d / output_len
        if min(prefill_rps, decode_rps) > 0:  # a side delivering nothing makes no split
            out.append(("CUF-P" if prefill_rps <= decode_rps else "CUF-D", min(prefill_rps, decode_rps)))
    return out


@settings(max_examples=40, deadline=None)
@given(case=planner_cases())
def test_vectorised_cuf_matches_the_per_x_loop(case: tuple[FittedCurves, int, int, int]) -> None:
    model, machines, prompt_len, output_len = case
    table = cuf_candidates(model, phase_limits(model, prompt_len), machines, prompt_len, output_len)
    loop = _cuf_loop(model, machines, prompt_len, output_len)
    assert table.policy == tuple(p for p, _ in loop)
    assert table.rate_rps == pytest.approx([r for _, r in loop], rel=1e-12)


def _all(model: FittedCurves, machines: int, prompt_len: int, output_len: int) -> list[CandidateTable]:
    limits = phase_limits(model, prompt_len)
    return [
        cuf_candidates(model, limits, machines, prompt_len, output_len),
        tuf_candidates(model, limits, machines, prompt_len, output_len)[0],
    ]


@settings(max_examples=60, deadline=None)
@given(case=planner_cases())
def test_every_candidate_respects_capacity_and_counts(case: tuple[FittedCurves, int, int, int]) -> None:
    model, machines, prompt_len, output_len = case
    limits = phase_limits(model, prompt_len)
    for table in _all(model, machines, prompt_len, output_len):
        n = len(table)
        assert table.decode_machines.dtype.kind == "i" and table.prefill_machines.dtype.kind == "i"
        assert np.all((table.decode_machines >= 1) & (table.decode_machines <= machines - 1))
        assert np.all(table.decode_machines + table.prefill_machines == machines)
        tol = model.memory_gb * 1e-9
        assert np.all(table.prefill_memory_gb <= model.memory_gb + tol)
        assert np.all(table.decode_memory_gb <= model.memory_gb + tol)
        assert np.all(table.prefill_batch_tokens >= prompt_len * (1 - 1e-12))
        assert np.all(table.prefill_batch_tokens <= limits.prefill.batch * (1 + 1e-12))
        assert np.all(table.decode_batch >= 1 - 1e-12)
        assert np.all(table.decode_batch <= limits.decode.batch * (1 + 1e-12))
        assert np.all((table.prefill_time_util > 0) & (table.prefill_time_util <= 1))
        assert np.all((table.decode_time_util > 0) & (table.decode_time_util <= 1))
        assert np.all(np.maximum(table.prefill_time_util, table.decode_time_util) == 1.0)
        # R_s = min(P_s/L_p, D_s/L_d) for every row
        rate = np.minimum(table.prefill_tokens_per_s / prompt_len, table.decode_tokens_per_s / output_len)
        assert table.rate_rps == pytest.approx(rate, rel=1e-9, abs=1e-12)
        assert len(table.policy) == n


@settings(max_examples=60, deadline=None)
@given(case=planner_cases())
def test_cuf_rows_are_flow_balanced_and_tuf_rows_neighbour_their_root(
    case: tuple[FittedCurves, int, int, int],
) -> None:
    model, machines, prompt_len, output_len = case
    cuf, tuf = _all(model, machines, prompt_len, output_len)
    # the throttled side delivers exactly the slower side's request rate
    prefill_rps, decode_rps = cuf.prefill_tokens_per_s / prompt_len, cuf.decode_tokens_per_s / output_len
    assert prefill_rps == pytest.approx(decode_rps, rel=1e-9)
    assert np.all(cuf.rate_residual == 0.0)
    assert np.all(np.abs(tuf.decode_machines - tuf.x_continuous) < 1.0 + 1e-9)
    assert np.all(np.isnan(cuf.x_continuous))


@settings(max_examples=60, deadline=None)
@given(case=planner_cases())
def test_all_candidates_in_one_pass_equal_cuf_then_tuf(case: tuple[FittedCurves, int, int, int]) -> None:
    model, machines, prompt_len, output_len = case
    limits = phase_limits(model, prompt_len)
    table, roots = all_candidates(model, limits, machines, prompt_len, output_len)
    tuf, tuf_roots = tuf_candidates(model, limits, machines, prompt_len, output_len)
    apart = concat([cuf_candidates(model, limits, machines, prompt_len, output_len), tuf])
    assert roots == tuf_roots
    assert table.policy == apart.policy
    for f in fields(CandidateTable):
        if f.name != "policy":  # bit for bit, NaN where NaN
            np.testing.assert_array_equal(getattr(table, f.name), getattr(apart, f.name), err_msg=f.name)
