"""Prometheus series of the online calibration (docs/calibration.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Gauge

from pdroute_core.calibration import TERMS

if TYPE_CHECKING:
    from app.learners.calibration import CalibrationState

OUTCOMES = ("accepted", "unknown_id", "not_calibrated")


class CalibrationMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.correction = Gauge(
            "pdroute_calibration_correction",
            "Multiplicative correction in force per term of the queue-aware model (1 = as fitted).",
            ["term"],
            registry=registry,
        )
        self.error = Gauge(
            "pdroute_calibration_prediction_error_ratio",
            "Absolute relative error of recent predictions against the feedback (0.1 = 10 %), by"
            " latency (ttft, e2e) and quantile (0.5, 0.9); NaN before any feedback.",
            ["latency", "quantile"],
            registry=registry,
        )
        self.feedback = Counter(
            "pdroute_calibration_feedback",
            "Feedback items by outcome: accepted, unknown_id (not among the recent decisions),"
            " not_calibrated (the served model is not queue-aware).",
            ["outcome"],
            registry=registry,
        )
        for term in TERMS:
            self.correction.labels(term=term).set(1.0)
        for latency in ("ttft", "e2e"):
            for q in ("0.5", "0.9"):
                self.error.labels(latency=latency, quantile=q).set(float("nan"))
        for outcome in OUTCOMES:
            self.feedback.labels(outcome=outcome)

    def record(self, outcome: str) -> None:
        self.feedback.labels(outcome=outcome).inc()

    def update(self, state: CalibrationState) -> None:
        for term, value in state.corrections.as_dict().items():
            self.correction.labels(term=term).set(value)
        for latency in ("ttft", "e2e"):
            s = state.calibrator.error_summary(latency)
            for q, v in (("0.5", s.median_pct), ("0.9", s.p90_pct)):
                self.error.labels(latency=latency, quantile=q).set(float("nan") if v is None else v / 100.0)
