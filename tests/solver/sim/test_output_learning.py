"""``queue-aware+len`` in full simulations: told the fleet-wide mean, it learns each prompt
bucket's mean output length and predicts better; told exact lengths, it is ``queue-aware``."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from pdroute_core.output_learning import OutputLearningConfig
from pdroute_core.params import params_from_dict
from pdroute_core.routing.queue_aware import QueueAwareModel
from solver.errors import InvalidSimConfig
from solver.fit_queue import fit_queue_aware
from solver.sim import (
    ModelPolicy,
    OutputPrediction,
    RouteView,
    Workload,
    make_policies,
    make_policy,
    parse_policy_names,
    simulate,
)
from solver.sim.accuracy import PredictionError
from solver.sim.calibrating import LearningPolicy
from solver.sim.output_learning import OutputLearningPolicy
from solver.sim.prediction import bucket_means
from tests.factories import TEST_PARAMS
from tests.solver.sim.profiles import linear_fleet
from tests.solver.synthetic_profiles import synthetic_profile

FLEET = linear_fleet("conditional", 1, 3, max_num_batched_tokens=512)


def _model() -> QueueAwareModel:
    profile = synthetic_profile()
    forms, _fits = fit_queue_aware(profile.T_prefill, profile.T_decode, profile.T_interference)
    return QueueAwareModel(dataclasses.replace(params_from_dict(TEST_PARAMS), queue_aware=forms))


def _workload(n: int = 1200, rate: float = 4.0, seed: int = 3) -> Workload:
    """Half short prompts (128-255 tokens) with long outputs (300-500), half long prompts
    (2048-4095) with short outputs (30-60), in a random order; Poisson arrivals."""
    rng = np.random.default_rng(seed)
    is_long = rng.random(n) < 0.5
    prompt = np.where(is_long, rng.integers(2048, 4096, n), rng.integers(128, 256, n))
    output = np.where(is_long, rng.integers(30, 61, n), rng.integers(300, 501, n))
    arrival = np.cumsum(rng.exponential(1.0 / rate, n))
    arrival -= arrival[0]
    return Workload(arrival, prompt.astype(np.int64), output.astype(np.int64), "two-buckets")


class Recording(OutputLearningPolicy):
    """Records the output length the model was given at each decision."""

    def __init__(self, model: QueueAwareModel, config: OutputLearningConfig | None = None) -> None:
        super().__init__(model, config)
        self.given: list[int] = []

    def corrected_view(self, view: RouteView) -> RouteView:
        corrected = super().corrected_view(view)
        self.given.append(corrected.predicted_output_len)
        return corrected


def test_learns_the_bucket_means_and_predicts_e2e_better() -> None:
    model, wl = _model(), _workload()
    mean = OutputPrediction("mean")
    told = int(mean.predict(wl)[0])
    policy = Recording(model, OutputLearningConfig(window=wl.num_requests))
    rec = simulate(synthetic_profile(), wl, policy, FLEET, prediction=mean)
    baseline = simulate(synthetic_profile(), wl, ModelPolicy(model, "queue-aware"), FLEET, prediction=mean)
    # With the whole run in the window, a constant told length is corrected to the bucket mean.
    bucket, means, counts = bucket_means(wl)
    for k in np.flatnonzero(counts).tolist():
        assert policy.learner.corrected(2**k, told) == means[k]
    assert policy.learner.num_observations == wl.num_requests
    # During the run: the given lengths approach the bucket means once the buckets filled.
    given = np.array(policy.given)
    late = slice(wl.num_requests // 2, None)
    err = np.abs(given[late] - means[bucket][late]) / means[bucket][late]
    assert np.median(err) < 0.1
    assert given[:10].tolist() == [told] * 10  # the identity before min_observations
    after = PredictionError.of(rec.predicted_e2e_ms[late], rec.e2e_ms[late])
    before = PredictionError.of(baseline.predicted_e2e_ms[late], baseline.e2e_ms[late])
    assert after is not None and before is not None
    assert after.median_rel_pct is not None and before.median_rel_pct is not None
    assert after.median_rel_pct < 0.7 * before.median_rel_pct


def test_exact_predictions_decide_as_queue_aware() -> None:
    model, wl = _model(), _workload(600)
    exact = OutputPrediction("exact")
    rec = simulate(synthetic_profile(), wl, OutputLearningPolicy(model), FLEET, prediction=exact)
    ref = simulate(synthetic_profile(), wl, ModelPolicy(model, "queue-aware"), FLEET, prediction=exact)
    assert rec.was_policy_asked.all()
    np.testing.assert_array_equal(rec.is_disaggregated, ref.is_disaggregated)
    np.testing.assert_array_equal(rec.predicted_ttft_ms, ref.predicted_ttft_ms)
    np.testing.assert_array_equal(rec.predicted_e2e_ms, ref.predicted_e2e_ms)
    np.testing.assert_array_equal(rec.finish_ms, ref.finish_ms)


def test_registered_and_fresh_per_build() -> None:
    model = _model()
    assert "queue-aware+len" in parse_policy_names("all")
    a = make_policy("queue-aware+len", queue_model=model)
    b = make_policy("queue-aware+len", queue_model=model)
    assert isinstance(a, OutputLearningPolicy) and isinstance(b, OutputLearningPolicy)
    assert isinstance(a, LearningPolicy)
    assert a.name == "queue-aware+len" and a.learner is not b.learner
    for _ in range(60):
        a.decide_for(0, _view())
        a.observe(0, 1.0, 1.0, 2.0, 10)
    assert a.learner.num_observations == 60
    fresh = a.fresh()
    assert fresh.learner.num_observations == 0 and fresh.learner.config == a.learner.config
    assert [p.name for p in make_policies(["queue-aware+len"], queue_model=model)] == ["queue-aware+len"]
    with pytest.raises(InvalidSimConfig, match="queue-aware\\+len needs"):
        make_policy("queue-aware+len")


def test_unknown_ids_are_ignored() -> None:
    policy = OutputLearningPolicy(_model())
    policy.observe(7, 1.0, 1.0, 2.0, 2)
    assert policy.learner.num_observations == 0


def _view() -> RouteView:
    return RouteView(
        prompt_len=3000, predicted_output_len=200, system_load=2, decode_batch_size=2,
        prefill_queue_requests=0, chunk_size=512, prefill_pool_gpus=1,
    )  # fmt: skip
