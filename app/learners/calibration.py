"""The service's online calibration: the estimator, the recent decisions, the calibrated model.

One ``CalibrationState`` per process (each replica calibrates from the feedback it receives).
``/route`` asks ``model_for(snapshot)`` for the model to decide with: the served model itself
when calibration is off or the model is not queue-aware, else an immutable calibrated model
that is swapped in (never edited) at most every ``refresh_every`` feedbacks or
``refresh_seconds``. ``remember`` keeps the split of a decision (``pdroute_core.calibration.
contributions``) in a bounded LRU by request id; ``feedback`` matches an observation to it (or
to the decision's inputs sent with it) and feeds the estimator. On a params change
(``params_id``) the corrections reset; the same params reloaded keep them (docs/calibration.md).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from app.learners.recent import put_recent
from app.settings import Settings
from pdroute_core.calibration import (
    IDENTITY,
    CalibrationConfig,
    Calibrator,
    Corrections,
    calibrated_model,
    contributions,
)
from pdroute_core.routing import DecisionModel, RouteInputs
from pdroute_core.routing.queue_aware import QueueAwareModel
from pdroute_core.routing.types import Decision


@dataclass(frozen=True)
class Observed:
    """One feedback item's observations (ms; any may be None)."""

    ttft_ms: float | None
    tpot_ms: float | None
    e2e_ms: float | None
    output_tokens: int | None


@dataclass(frozen=True)
class _Remembered:
    """A decision, split into terms only when its feedback comes (most never get one)."""

    inputs: RouteInputs
    path: Decision
    predicted_ttft_ms: float
    predicted_e2e_ms: float


class CalibrationState:
    """Mutable, guarded by one lock; ``/route`` reads ``model_for`` without taking it."""

    def __init__(
        self,
        config: CalibrationConfig,
        *,
        enabled: bool,
        lru_size: int,
        refresh_every: int,
        refresh_seconds: float,
        clock: Callable[[], float],
    ) -> None:
        self.enabled = enabled
        self.config = config
        self.lru_size = lru_size
        self.refresh_every = refresh_every
        self.refresh_seconds = refresh_seconds
        self._clock = clock
        self._lock = threading.Lock()
        self._recent: OrderedDict[str, _Remembered] = OrderedDict()
        self.calibrator = Calibrator(config)
        self.params_id: str | None = None
        self._raw: QueueAwareModel | None = None
        self._model: QueueAwareModel | None = None  # swapped whole, never edited
        self._since_refresh = 0
        self._refreshed_at = clock()
        self.counts = {"accepted": 0, "unknown_id": 0, "not_calibrated": 0}

    @property
    def corrections(self) -> Corrections:
        return self.calibrator.current

    def _adopt(self, params_id: str, model: QueueAwareModel) -> None:
        """Start on (new) params: corrections reset when the params changed, kept otherwise."""
        if self.params_id != params_id:
            self.calibrator = Calibrator(self.config)
            self._recent.clear()
            self.params_id = params_id
        self._raw = model
        self._model = calibrated_model(model, self.calibrator.current)

    def model_for(self, params_id: str, model: DecisionModel) -> DecisionModel:
        """The model ``/route`` decides with (module docstring)."""
        if not self.enabled:
            return model
        if not isinstance(model, QueueAwareModel):
            if self._raw is not None:  # reloaded onto a model that is not calibrated
                with self._lock:
                    self._raw = self._model = None
            return model
        if self._raw is not model:
            with self._lock:
                if self._raw is not model:
                    self._adopt(params_id, model)
        current = self._model
        return model if current is None else current

    def raw_model(self) -> QueueAwareModel | None:
        return self._raw

    def remember(
        self, request_id: str, inputs: RouteInputs, path: Decision, ttft_ms: float, e2e_ms: float
    ) -> None:
        if self._raw is None:
            return
        entry = _Remembered(inputs, path, ttft_ms, e2e_ms)
        with self._lock:
            put_recent(self._recent, request_id, entry, self.lru_size)

    def feedback(
        self,
        observed: Observed,
        *,
        request_id: str | None = None,
        inputs: RouteInputs | None = None,
        path: Decision | None = None,
    ) -> str:
        """Feed one observation; the outcome: ``accepted``, ``unknown_id`` or ``not_calibrated``."""
        raw = self._raw
        with self._lock:
            entry: _Remembered | None = None
            if raw is None:
                outcome = "not_calibrated"
            elif request_id is not None:
                entry = self._recent.pop(request_id, None)
                outcome = "unknown_id" if entry is None else "accepted"
            elif inputs is not None and path is not None:
                model = self._model or raw
                b = model.decide(inputs)
                disagg = path == "disaggregated"
                ttft = b.ttft_disaggregated_ms if disagg else b.ttft_collocated_ms
                e2e = b.t_disaggregated_ms if disagg else b.t_collocated_ms
                entry = _Remembered(inputs, path, ttft, e2e)
                outcome = "accepted"
            else:
                outcome = "unknown_id"
            self.counts[outcome] += 1
            if entry is None or raw is None:
                return outcome
            self.calibrator.observe(
                contributions(raw, entry.inputs, entry.path),
                ttft_ms=observed.ttft_ms,
                tpot_ms=observed.tpot_ms,
                e2e_ms=observed.e2e_ms,
                output_tokens=observed.output_tokens,
                predicted_ttft_ms=entry.predicted_ttft_ms,
                predicted_e2e_ms=entry.predicted_e2e_ms,
            )
            self._since_refresh += 1
            now = self._clock()
            if self._since_refresh >= self.refresh_every or now - self._refreshed_at >= self.refresh_seconds:
                before = self.calibrator.current
                k = self.calibrator.refresh()
                if k != before:
                    self._model = calibrated_model(raw, k)
                self._since_refresh = 0
                self._refreshed_at = now
            return outcome

    def summary(self) -> dict[str, object]:
        """What ``/params`` shows under ``calibration``."""
        cal = self.calibrator
        ttft, e2e = cal.error_summary("ttft"), cal.error_summary("e2e")
        return {
            "enabled": self.enabled,
            "params_id": self.params_id,
            "corrections": (cal.current if self.enabled else IDENTITY).as_dict(),
            "accepted_values": dict(cal.num_accepted),
            "rejected_values": cal.num_rejected,
            "feedback": dict(self.counts),
            "decisions_remembered": len(self._recent),
            "ttft_error_pct": {"num": ttft.num, "median": ttft.median_pct, "p90": ttft.p90_pct},
            "e2e_error_pct": {"num": e2e.num, "median": e2e.median_pct, "p90": e2e.p90_pct},
        }


def calibration_from_settings(settings: Settings, clock: Callable[[], float]) -> CalibrationState:
    """The state the service keeps (present even when off, so ``/params`` can say so)."""
    config = CalibrationConfig(
        lower=settings.calibration_lower,
        upper=settings.calibration_upper,
        forgetting=settings.calibration_forgetting,
        min_observations=settings.calibration_min_observations,
    )
    return CalibrationState(
        config,
        enabled=settings.calibration_enabled,
        lru_size=settings.calibration_lru_size,
        refresh_every=settings.calibration_refresh_every,
        refresh_seconds=settings.calibration_refresh_seconds,
        clock=clock,
    )
