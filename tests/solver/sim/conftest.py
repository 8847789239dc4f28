"""Fixtures for the simulator tests: a synthetic profile (see ``profiles``) and its latencies."""

from __future__ import annotations

import pytest

from solver.profile_result import ProfileResult
from solver.sim.latency import StepLatency
from tests.solver.sim.profiles import make_profile


@pytest.fixture
def profile() -> ProfileResult:
    return make_profile()


@pytest.fixture
def latency(profile: ProfileResult) -> StepLatency:
    return StepLatency(profile)
