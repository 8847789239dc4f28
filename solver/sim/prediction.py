"""The output length a policy is told about each request (``--predict``)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from solver.errors import InvalidSimConfig
from solver.sim.workload import Workload


@dataclass(frozen=True)
class OutputPrediction:
    """The output length a policy is told: ``exact``, ``fixed`` (``value`` tokens) or ``mean``.

    ``mean`` is the trace-wide mean output length, rounded: what a gateway with no per-request
    predictor would use. Comparing ``exact`` with the others measures the cost of misprediction.
    """

    kind: str = "exact"
    value: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in ("exact", "fixed", "mean"):
            raise InvalidSimConfig(f"output prediction: unknown kind {self.kind!r} (exact, fixed:N, mean)")
        if self.kind == "fixed" and (self.value is None or self.value < 1):
            raise InvalidSimConfig("output prediction: fixed needs a value >= 1 token")

    @property
    def label(self) -> str:
        return f"fixed:{self.value}" if self.kind == "fixed" else self.kind

    def predict(self, workload: Workload) -> npt.NDArray[np.int64]:
        """The prediction for every request of ``workload`` (tokens)."""
        if self.kind == "exact":
            return workload.output_len.copy()
        value = self.value if self.kind == "fixed" else round(float(np.mean(workload.output_len)))
        return np.full(workload.num_requests, max(int(value or 1), 1), dtype=np.int64)


def parse_prediction(text: str) -> OutputPrediction:
    """``exact`` | ``mean`` | ``fixed:N``."""
    kind, _, value = text.strip().partition(":")
    if kind == "fixed":
        try:
            return OutputPrediction("fixed", int(value))
        except ValueError:
            raise InvalidSimConfig(f"output prediction {text!r}: expected fixed:N with N tokens") from None
    if value:
        raise InvalidSimConfig(f"output prediction {text!r}: expected exact, mean or fixed:N")
    return OutputPrediction(kind)
