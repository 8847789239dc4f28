"""Prometheus series of the online output-length correction (docs/calibration.md).

One gauge child per prompt bucket that received feedback: at most ``NUM_BUCKETS`` (25) label
values, ``min_prompt_len`` a power of two, so the series stay bounded whatever the traffic.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Gauge

from pdroute_core.output_learning import OutputLenSnapshot


class OutputLearningMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.ratio = Gauge(
            "pdroute_output_len_correction_ratio",
            "Correction in force of predicted_output_len per prompt bucket (prompts of at least"
            " min_prompt_len tokens and under twice that): observed over predicted output tokens"
            " of the recent feedback; 1 until the bucket has enough feedback.",
            ["min_prompt_len"],
            registry=registry,
        )

    def update(self, snapshot: OutputLenSnapshot) -> None:
        for bucket in snapshot.buckets:
            self.ratio.labels(min_prompt_len=str(bucket.min_prompt_len)).set(bucket.ratio)
