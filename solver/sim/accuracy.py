"""Prediction error: a policy's predicted TTFT and end-to-end latency against the simulation's.

For each request the policy answered with a prediction for the path it chose, the error is
``predicted - simulated`` (ms); its absolute value is summarised by the median and the 90th
percentile (numpy's linear interpolation), in ms and relative to the simulated value (%).
Requests without a prediction, shed requests (no simulated latency) and simulated latencies of
0 ms (no relative error) are left out of the relative figures; the first two of the absolute
ones too. A policy that predicts nothing has no error (``None``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from solver.sim.report import PolicyMetrics

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class PredictionError:
    """Absolute error of one predicted latency over the requests that carry a prediction."""

    num_predicted: int  # requests with both a prediction and a simulated value
    median_abs_ms: float
    p90_abs_ms: float
    median_rel_pct: float | None  # |error| / simulated * 100; None without a simulated value > 0
    p90_rel_pct: float | None

    @classmethod
    def of(cls, predicted_ms: FloatArray, simulated_ms: FloatArray) -> PredictionError | None:
        """The error of ``predicted_ms`` against ``simulated_ms`` (NaN entries left out)."""
        both = np.isfinite(predicted_ms) & np.isfinite(simulated_ms)
        if not both.any():
            return None
        actual = simulated_ms[both]
        abs_err = np.abs(predicted_ms[both] - actual)
        med, p90 = np.percentile(abs_err, [50, 90]).tolist()
        positive = actual > 0
        rel_med = rel_p90 = None
        if positive.any():
            rel = 100.0 * abs_err[positive] / actual[positive]
            rel_med, rel_p90 = np.percentile(rel, [50, 90]).tolist()
        return cls(int(np.count_nonzero(both)), med, p90, rel_med, rel_p90)


ERROR_COLUMNS = (
    "rate/s",
    "TTFT err p50 ms",
    "TTFT err p90 ms",
    "TTFT err p50 %",
    "TTFT err p90 %",
    "e2e err p50 ms",
    "e2e err p90 ms",
    "e2e err p50 %",
    "e2e err p90 %",
)


def _num(value: float | None, digits: int) -> str:
    return "-" if value is None or not np.isfinite(value) else f"{value:,.{digits}f}"


def _error_cells(m: PolicyMetrics) -> list[str]:
    cells = [m.label, _num(m.offered_rate, 2)]
    for err in (m.ttft_error, m.e2e_error):
        if err is None:
            cells += ["-"] * 4
        else:
            cells += [
                _num(err.median_abs_ms, 1),
                _num(err.p90_abs_ms, 1),
                _num(err.median_rel_pct, 1),
                _num(err.p90_rel_pct, 1),
            ]
    return cells


def _predicting(metrics: Sequence[PolicyMetrics]) -> list[PolicyMetrics]:
    return [m for m in metrics if m.ttft_error is not None or m.e2e_error is not None]


def format_error_table(metrics: Sequence[PolicyMetrics]) -> str:
    """Prediction error per predicting policy and load (fixed width); empty if none predicts."""
    rows = [_error_cells(m) for m in _predicting(metrics)]
    if not rows:
        return ""
    header = ["policy", *ERROR_COLUMNS]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = [
        "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True)))
        for r in [header, *rows]
    ]
    return "\n".join([lines[0], "-" * len(lines[0]), *lines[1:]])


def format_error_markdown(metrics: Sequence[PolicyMetrics]) -> str:
    """The prediction-error table in Markdown; empty if no policy predicts."""
    rows = [_error_cells(m) for m in _predicting(metrics)]
    if not rows:
        return ""
    header = ["policy", *ERROR_COLUMNS]
    out = ["| " + " | ".join(header) + " |", "|---|" + "---:|" * len(ERROR_COLUMNS)]
    out.extend("| " + " | ".join(r) + " |" for r in rows)
    return "\n".join(out)
