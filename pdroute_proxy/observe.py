"""What each request measured, fed to the metrics and to the online learners in-process.

TTFT is the request's arrival to its first token sent, TPOT the mean gap between its later
tokens, e2e arrival to last token (ms for the learners, seconds for the histograms). A request
served as decided (no fallback) and finished feeds calibration (the queue-aware model's terms,
``app.learners.calibration``) and output-length learning (``app.learners.output_length``), as
``POST /feedback`` does for the service; one that fell back, failed or was cancelled does not:
its latency says nothing about the path the model predicted.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from typing import Any

from app.learners.calibration import CalibrationState, Observed
from app.learners.output_length import OutputLearningState
from pdroute_proxy.errors import NoEngine, ProxyError, Shed
from pdroute_proxy.metrics import ProxyMetrics
from pdroute_proxy.relay import Job, Served

RECENT = 256  # decisions kept for GET /decisions


class Observer:
    def __init__(
        self,
        metrics: ProxyMetrics,
        monotonic: Callable[[], float],
        calibration: CalibrationState | None,
        output_learning: OutputLearningState | None,
    ) -> None:
        self.metrics = metrics
        self.monotonic = monotonic
        self.calibration = calibration
        self.output_learning = output_learning
        self.recent: deque[dict[str, Any]] = deque(maxlen=RECENT)

    def count(self, endpoint: str, exc: BaseException | None) -> None:
        if exc is None:
            outcome = "ok"
        elif isinstance(exc, asyncio.CancelledError | GeneratorExit):
            outcome = "cancelled"
        elif isinstance(exc, NoEngine):
            outcome = "no_engine"
        elif isinstance(exc, Shed):
            outcome = "shed"
        elif isinstance(exc, ProxyError):
            outcome = "client_error"
        else:
            outcome = "upstream_error"
        self.metrics.requests.labels(endpoint=endpoint, outcome=outcome).inc()

    def finish(self, job: Job, endpoint: str, num_tokens: int, exc: BaseException | None) -> None:
        """Count the request's outcome; when it completed, observe its latencies."""
        self.count(endpoint, exc)
        served = job.served
        if served is not None:
            self.recent.append(record(served, len(job.prompt), num_tokens, exc))
        if exc is not None or served is None or not served.token_times:
            return
        now = self.monotonic()
        times = served.token_times
        ttft_s = times[0] - served.arrived_at
        tpot_s = (times[-1] - times[0]) / (len(times) - 1) if len(times) > 1 else None
        e2e_s = now - served.arrived_at
        self.metrics.ttft.labels(path=served.path).observe(ttft_s)
        if tpot_s is not None:
            self.metrics.tpot.labels(path=served.path).observe(tpot_s)
        self.metrics.e2e.labels(path=served.path).observe(e2e_s)
        if served.fallbacks:
            return
        if self.calibration is not None:
            self.calibration.feedback(
                Observed(ttft_s * 1e3, None if tpot_s is None else tpot_s * 1e3, e2e_s * 1e3, num_tokens),
                inputs=served.choice.inputs,
                path=served.path,
            )
        if self.output_learning is not None and served.finish_reason == "stop":
            # Only a request that ended on its own says how long it wanted to be; one cut at
            # max_tokens ("length") says only that it was at least that long.
            self.output_learning.feedback(
                num_tokens, prompt_len=len(job.prompt), told_len=served.told_output_len
            )


def record(served: Served, prompt_len: int, num_tokens: int, exc: BaseException | None) -> dict[str, Any]:
    """One request as ``GET /decisions`` shows it: the decision, the model's admission advice and
    how late it predicted the chosen path, its inputs and their sources, the path served (none
    for a request shed), the fallbacks, the engines called, and its TTFT and TPOT as the proxy
    sent the tokens (ms)."""
    choice = served.choice
    times = served.token_times
    return {
        "decided": choice.path,
        "reason": choice.reason,
        "decided_by": choice.decided_by,
        "admission": choice.admission,
        "predicted_lateness_ms": choice.predicted_lateness_ms,
        "served": None if isinstance(exc, Shed) else served.path,
        "fallbacks": list(served.fallbacks),
        "engines": list(served.engines),
        "prompt_len": prompt_len,
        "output_tokens": num_tokens,
        "outcome": "ok" if exc is None else type(exc).__name__,
        "ttft_ms": None if not times else round((times[0] - served.arrived_at) * 1e3, 3),
        "tpot_ms": None if len(times) < 2 else round((times[-1] - times[0]) / (len(times) - 1) * 1e3, 3),
        "predicted_ttft_ms": choice.predicted_ttft_ms,
        "inputs": {k: v for k, v in vars(choice.inputs).items() if v is not None},  # flat: no asdict copy
        "sources": choice.sources,
    }
