"""The self-calibrating policy in full simulations: it learns a wrong decode form, and the
simulator tells it every finished request once, with the run's own latencies."""

from __future__ import annotations

import dataclasses

import pytest

from pdroute_core.calibration import CalibrationConfig, Calibrator
from pdroute_core.params import params_from_dict
from pdroute_core.routing.queue_aware import QueueAwareModel
from solver.errors import InvalidSimConfig
from solver.fit_queue import fit_queue_aware
from solver.sim import ModelPolicy, parse_length_spec, poisson_workload, simulate
from solver.sim.accuracy import PredictionError
from solver.sim.calibrating import CalibratingPolicy
from tests.factories import TEST_PARAMS
from tests.solver.sim.profiles import linear_fleet
from tests.solver.synthetic_profiles import synthetic_profile


def _models() -> tuple[QueueAwareModel, QueueAwareModel]:
    """The synthetic profile's fitted model, and one whose decode step is 0.6 of it (wrong)."""
    profile = synthetic_profile()
    forms, _fits = fit_queue_aware(profile.T_prefill, profile.T_decode, profile.T_interference)
    right = dataclasses.replace(params_from_dict(TEST_PARAMS), queue_aware=forms)
    slow = dataclasses.replace(
        forms,
        decode_base_ms=forms.decode_base_ms * 0.6,
        decode_ms_per_seq=forms.decode_ms_per_seq * 0.6,
        decode_ms_per_context_token=forms.decode_ms_per_context_token * 0.6,
    )
    return QueueAwareModel(right), QueueAwareModel(dataclasses.replace(right, queue_aware=slow))


class Recording(CalibratingPolicy):
    def __init__(self, model: QueueAwareModel) -> None:
        super().__init__(model, Calibrator(CalibrationConfig(min_observations=20)), refresh_every=20)
        self.seen: list[tuple[int, float, float | None, float, int]] = []

    def observe(
        self, rid: int, ttft_ms: float, tpot_ms: float | None, e2e_ms: float, output_tokens: int
    ) -> None:
        self.seen.append((rid, ttft_ms, tpot_ms, e2e_ms, output_tokens))
        super().observe(rid, ttft_ms, tpot_ms, e2e_ms, output_tokens)


def test_learns_a_wrong_decode_step_and_predicts_better() -> None:
    right, wrong = _models()
    wl = poisson_workload(3000, 6.0, parse_length_spec("lognormal:900,150"), seed=5)
    fleet = linear_fleet("conditional", 1, 3, max_num_batched_tokens=512)
    policy = Recording(wrong)
    rec = simulate(synthetic_profile(), wl, policy, fleet)
    baseline = simulate(synthetic_profile(), wl, ModelPolicy(wrong, "wrong"), fleet)
    # Every finished request is reported exactly once, with the run's own latencies.
    assert sorted(r for r, *_ in policy.seen) == list(range(wl.num_requests))
    for rid, ttft, tpot, e2e, out in policy.seen:
        assert ttft == rec.ttft_ms[rid] and e2e == rec.e2e_ms[rid] and out == rec.output_len[rid]
        assert (tpot is None) == (out == 1)
    k = policy.calibrator.current
    assert k.decode > 1.3  # the true step is 1 / 0.6 of the wrong one
    late = slice(wl.num_requests // 2, None)
    after = PredictionError.of(rec.predicted_e2e_ms[late], rec.e2e_ms[late])
    before = PredictionError.of(baseline.predicted_e2e_ms[late], baseline.e2e_ms[late])
    assert after is not None and before is not None and after.median_rel_pct is not None
    assert before.median_rel_pct is not None
    assert after.median_rel_pct < 0.5 * before.median_rel_pct
    assert [n for n, _ in policy.history] == list(range(20, wl.num_requests + 1, 20))
    assert right.params.queue_aware is not None


def test_unknown_ids_are_ignored_and_refresh_every_is_checked() -> None:
    right, _ = _models()
    policy = CalibratingPolicy(right)
    policy.observe(7, 1.0, 1.0, 2.0, 2)
    assert policy.calibrator.num_observations == 0
    with pytest.raises(InvalidSimConfig):
        CalibratingPolicy(right, refresh_every=0)
