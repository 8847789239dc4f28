"""The TUF roots (solver/plan/tuf_roots.py): a grid row searched at once gives each cell's roots."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from solver.plan.baseline import phase_limits
from solver.plan.fitted import FittedCurves, fit_curves
from solver.plan.tuf_roots import tuf_roots
from tests.solver.plan.curve_factory import make_curve_set
from tests.solver.plan.plan_strategies import planner_cases


@settings(max_examples=60, deadline=None)
@given(case=planner_cases(), extra=st.lists(st.integers(1, 100_000), min_size=1, max_size=6))
def test_a_row_searched_at_once_equals_each_cell_alone(
    case: tuple[FittedCurves, int, int, int], extra: list[int]
) -> None:
    model, machines, prompt_len, output_len = case
    limits = phase_limits(model, prompt_len)
    lens = [output_len, *extra]
    with np.errstate(over="ignore", invalid="ignore"):
        together = tuf_roots(model, limits, machines, prompt_len, lens)
        alone = [tuf_roots(model, limits, machines, prompt_len, [n])[0] for n in lens]
    for row, single in zip(together, alone, strict=True):
        assert row.keys() == single.keys() == {"TUF-P", "TUF-D"}
        for label in row:
            np.testing.assert_array_equal(row[label], single[label])  # bit for bit


def test_instance_a_has_one_tuf_p_root() -> None:
    # instance A (test_split.py): x* = 10*34/42 for TUF-P, none for TUF-D
    model = fit_curves(make_curve_set())
    (roots,) = tuf_roots(model, phase_limits(model, 100), 10, 100, [50])
    np.testing.assert_allclose(roots["TUF-P"], [10 * 34 / 42], atol=1e-7)
    assert len(roots["TUF-D"]) == 0
