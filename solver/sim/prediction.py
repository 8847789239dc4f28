"""The output length a policy is told about each request (``--predict``)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from pdroute_core.output_defaults import OutputLenDefaults
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
            bucket, means, _ = bucket_means(workload)
            return means[bucket]
        value = self.value if self.kind == "fixed" else round(float(np.mean(workload.output_len)))
        return np.full(workload.num_requests, max(int(value or 1), 1), dtype=np.int64)


def bucket_means(
    workload: Workload,
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Each request's power-of-two prompt bucket ``k`` (``2**k <= prompt_len < 2**(k+1)``), and
    per bucket ``k``: the mean output length of its requests (tokens, rounded, at least 1) and
    their count (0 for an empty bucket)."""
    bucket = np.log2(workload.prompt_len).astype(np.int64)  # prompt_len >= 1: bucket >= 0
    counts = np.bincount(bucket)
    totals = np.bincount(bucket, weights=workload.output_len)
    means = np.maximum(np.rint(totals / np.maximum(counts, 1)), 1).astype(np.int64)
    return bucket, means, counts


def output_table(workload: Workload) -> OutputLenDefaults:
    """The service's table of default output lengths (``PDROUTE_DEFAULT_OUTPUT_LEN_BY_PROMPT``)
    that tells every request of ``workload`` what ``bucket-mean`` tells it: one
    ``(2**k, mean)`` entry per non-empty bucket; the default is the trace-wide mean (``mean``)."""
    _, means, counts = bucket_means(workload)
    default = OutputPrediction("mean").predict(workload)[0]  # a workload has a request
    pairs = tuple((2**k, int(means[k])) for k in np.flatnonzero(counts).tolist())
    return OutputLenDefaults(int(default), pairs)


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
