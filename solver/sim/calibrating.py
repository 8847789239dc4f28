"""A queue-aware policy that recalibrates itself from the simulated requests' latencies.

``pdroute simulate --calibrate`` and ``bench.bench_calibration`` run it: the simulator tells the
policy each request's id when it decides (``decide_for``) and, when the request finishes, what
the run produced (``observe``: TTFT, TPOT, e2e in ms), as a gateway posting ``/feedback`` would.
The policy feeds ``pdroute_core.calibration.Calibrator`` and, every ``refresh_every``
observations, swaps in the model scaled by the refreshed corrections (never per request, as the
service). Predictions are the model's in force at decision time, so the run's prediction error
shows the calibration converging.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from pdroute_core.calibration import (
    Calibrator,
    Contributions,
    Corrections,
    calibrated_model,
    contributions,
)
from pdroute_core.routing.queue_aware import QueueAwareModel
from solver.errors import InvalidSimConfig
from solver.sim.inputs import route_inputs
from solver.sim.policies import PolicyAnswer, RouteView


@runtime_checkable
class LearningPolicy(Protocol):
    """A policy told each request's id and, when it finishes, its observed latencies.

    ``fresh`` gives the same policy with nothing learnt: a sweep starts each load from it.
    """

    @property
    def name(self) -> str: ...

    def fresh(self) -> LearningPolicy: ...

    def decide(self, view: RouteView) -> PolicyAnswer: ...

    def decide_for(self, rid: int, view: RouteView) -> PolicyAnswer: ...

    def observe(
        self, rid: int, ttft_ms: float, tpot_ms: float | None, e2e_ms: float, output_tokens: int
    ) -> None: ...


class CalibratingPolicy:
    """``queue-aware`` on a model recalibrated online (module docstring)."""

    def __init__(
        self,
        model: QueueAwareModel,
        calibrator: Calibrator | None = None,
        refresh_every: int = 50,
        name: str = "queue-aware+cal",
    ) -> None:
        if refresh_every < 1:
            raise InvalidSimConfig(f"refresh_every: expected an integer >= 1, got {refresh_every!r}")
        self.raw_model = model
        self.model = model
        self.calibrator = calibrator or Calibrator()
        self.refresh_every = refresh_every
        self._name = name
        self._pending: dict[int, tuple[Contributions, float, float]] = {}
        # (observations so far, corrections) after each refresh: the convergence trace.
        self.history: list[tuple[int, Corrections]] = []

    @property
    def name(self) -> str:
        return self._name

    def fresh(self) -> CalibratingPolicy:
        """The same policy with nothing learnt (a sweep starts each load from here)."""
        return CalibratingPolicy(
            self.raw_model, Calibrator(self.calibrator.config), self.refresh_every, self._name
        )

    def decide(self, view: RouteView) -> PolicyAnswer:
        b = self.model.decide(route_inputs(view))
        return PolicyAnswer(b.decision, b.chosen_ttft_ms, b.chosen_e2e_ms, not b.meets_slo)

    def decide_for(self, rid: int, view: RouteView) -> PolicyAnswer:
        x = route_inputs(view)
        b = self.model.decide(x)
        self._pending[rid] = (contributions(self.raw_model, x, b.decision), b.chosen_ttft_ms, b.chosen_e2e_ms)
        return PolicyAnswer(b.decision, b.chosen_ttft_ms, b.chosen_e2e_ms, not b.meets_slo)

    def observe(
        self, rid: int, ttft_ms: float, tpot_ms: float | None, e2e_ms: float, output_tokens: int
    ) -> None:
        entry = self._pending.pop(rid, None)
        if entry is None:
            return
        parts, predicted_ttft, predicted_e2e = entry
        cal = self.calibrator
        cal.observe(
            parts,
            ttft_ms=ttft_ms,
            tpot_ms=tpot_ms,
            e2e_ms=e2e_ms,
            output_tokens=output_tokens,
            predicted_ttft_ms=predicted_ttft,
            predicted_e2e_ms=predicted_e2e,
        )
        if cal.num_observations % self.refresh_every == 0:
            before = cal.current
            k = cal.refresh()
            if k != before:
                self.model = calibrated_model(self.raw_model, k)
            self.history.append((cal.num_observations, k))
