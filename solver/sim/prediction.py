"""The output length a policy is told about each request (``--predict``)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from solver.errors import InvalidSimConfig
from solver.sim.workload import Workload

KINDS = ("exact", "fixed", "mean", "bucket-mean")


@dataclass(frozen=True)
class OutputPrediction:
    """The output length a policy is told: ``exact``, ``fixed`` (``value`` tokens), ``mean`` or
    ``bucket-mean``.

    ``mean`` is the trace-wide mean output length, rounded: what a gateway with no per-request
    predictor would use. ``bucket-mean`` is the mean output length of the requests whose prompt
    length falls in the same power-of-two bucket (``2**k <= L < 2**(k+1)``), rounded: the least a
    gateway can do with what it knows at arrival (in the conversation trace, prompts over 3,000
    tokens ask for 73 tokens on average against 211 overall). Both are taken from the whole
    trace, as a gateway would learn them from its past traffic. Comparing ``exact`` with the
    others measures the cost of misprediction.
    """

    kind: str = "exact"
    value: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise InvalidSimConfig(
                f"output prediction: unknown kind {self.kind!r} (exact, fixed:N, mean, bucket-mean)"
            )
        if self.kind == "fixed" and (self.value is None or self.value < 1):
            raise InvalidSimConfig("output prediction: fixed needs a value >= 1 token")

    @property
    def label(self) -> str:
        return f"fixed:{self.value}" if self.kind == "fixed" else self.kind

    def predict(self, workload: Workload) -> npt.NDArray[np.int64]:
        """The prediction for every request of ``workload`` (tokens)."""
        if self.kind == "exact":
            return workload.output_len.copy()
        if self.kind == "bucket-mean":
            bucket = np.log2(workload.prompt_len).astype(np.int64)  # prompt_len >= 1: bucket >= 0
            totals = np.bincount(bucket, weights=workload.output_len)
            means = np.rint(totals / np.maximum(np.bincount(bucket), 1))
            return np.maximum(means[bucket], 1).astype(np.int64)
        value = self.value if self.kind == "fixed" else round(float(np.mean(workload.output_len)))
        return np.full(workload.num_requests, max(int(value or 1), 1), dtype=np.int64)


def parse_prediction(text: str) -> OutputPrediction:
    """``exact`` | ``mean`` | ``bucket-mean`` | ``fixed:N``."""
    kind, _, value = text.strip().partition(":")
    if kind == "fixed":
        try:
            return OutputPrediction("fixed", int(value))
        except ValueError:
            raise InvalidSimConfig(f"output prediction {text!r}: expected fixed:N with N tokens") from None
    if value:
        raise InvalidSimConfig(f"output prediction {text!r}: expected exact, mean, bucket-mean or fixed:N")
    return OutputPrediction(kind)
