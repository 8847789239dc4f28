"""Fixtures shared by the solver tests: a small simulator sweep (the sweep and plot tests)."""

from __future__ import annotations

import pytest

from solver.sim import (
    AlwaysCollocated,
    OutputPrediction,
    PromptThreshold,
    SweepResult,
    parse_length_spec,
    poisson_workload,
    run_sweep,
)
from tests.solver.sim.profiles import linear_fleet, make_profile


@pytest.fixture(scope="session")
def sweep() -> SweepResult:
    """Two policies at three loads on a small fleet (shared by the sweep and plot tests)."""
    base = poisson_workload(400, 1.0, parse_length_spec("lognormal:800,60"), seed=4)
    return run_sweep(
        make_profile(),
        [base.at_rate(r) for r in (2.0, 8.0, 20.0)],
        [AlwaysCollocated(), PromptThreshold(700)],
        linear_fleet(num_prefill=1, num_decode=2),
        OutputPrediction("mean"),
    )
