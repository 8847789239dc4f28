"""Online recalibration of the queue-aware model from observed latencies.

The served model (``pdroute_core.routing.queue_aware``) predicts each path's TTFT and TPOT as
sums of a few terms. Each term group gets one multiplicative correction ``k`` (1 = as fitted)::

    prefill     k_p   T_P(u)                    (prefill GPU, and a collocated prefill on an idle GPU)
    transfer    k_x   (L - h) * bytes / bw      (the KV cache over the link)
    queue_wait  k_w   W, on top of k_p          (wait for a prefill GPU: calibrated W = k_w k_p W)
    decode      k_d   s(B, K)                   (a decode step; collocated chunked TTFT: each step)
    chunk       k_c   f(c, B)                   (what prefill chunks add to a step)

so a prediction is linear in the corrections: disaggregated ``TTFT = k_w k_p W + k_p T_P(L) +
k_x X``, ``TPOT = k_d s + k_c f_pending``; collocated ``TTFT = k_d (steps) + k_c (chunks)`` on a
busy GPU or ``k_p T_P`` on an idle one, ``TPOT = k_d s`` (plus the chunks of later prompts
when a prefill rate is reported: ``rho``). ``contributions`` splits a
decision's raw (uncorrected) prediction into these terms; ``calibrated_params`` / ``calibrated_model``
(``pdroute_core.calibration_terms``, re-exported here) turn corrections into params
(coefficients scaled, bandwidth divided) plus the queue-wait scale the model multiplies in, so
the model's formulas stay as they are.

Estimator (``Calibrator``). A composite observation (TTFT or TPOT) does not say which term was
wrong; the estimator attributes it to the term that dominates it. For each term ``j`` whose
share of the corrected prediction is at least ``min_share`` (0.5: at most one term per
observation, two on an exact tie), the ratio implied by the observation, with every other term
at its current correction, is::

    r_j = (observed - sum_{i != j} k_i raw_i) / raw_j

(the coordinate-wise solution of ``observed = sum_i k_i raw_i`` in ``k_j``). ``log r_j`` enters
the term's window (the last ``window`` values) unless it fails the innovation gate
(non-finite, ``r_j <= 0`` or ``|log r_j| > log max_ratio``: counted as rejected). A term's
correction is the weighted median of its window, weights ``(1 - forgetting) ** age`` with age
counted in that term's observations, clipped to ``[lower, upper]``; it stays exactly 1 until
``min_observations`` values were accepted. Medians make one wild value (or a flood of them
short of half the window) move nothing; the clip bounds what any feedback can do.

Identifiability: a term is learnt only from observations it dominates. In a fleet where the
KV transfer never makes half of a TTFT (NVLink, and most network paths at common prompt
lengths), ``k_x`` stays 1 and the prefill correction absorbs the transfer's error in
proportion (the TTFT prediction is still corrected, the attribution is not). The queue wait is
learnt only while queues form; the decode step from every TPOT. Corrections are refreshed
(``refresh``) on the caller's schedule, not per observation, so a served model is swapped at
most that often; ratios are taken against the corrections in force, as a Gauss-Seidel sweep.

Also kept: the recent absolute relative error of the predictions in force (TTFT and e2e) for
``/params`` and the metrics (``error_summary``).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

from pdroute_core.calibration_terms import (
    IDENTITY,
    TERMS,
    Contributions,
    Corrections,
    calibrated_model,
    calibrated_params,
    contributions,
)

__all__ = [
    "IDENTITY",
    "TERMS",
    "CalibrationConfig",
    "Calibrator",
    "Contributions",
    "Corrections",
    "ErrorSummary",
    "calibrated_model",
    "calibrated_params",
    "contributions",
]


@dataclass(frozen=True)
class CalibrationConfig:
    """How the corrections are estimated (module docstring)."""

    lower: float = 0.5  # a correction never goes below this
    upper: float = 2.0  # nor above this
    forgetting: float = (
        0.002  # per later observation of the same term, a value's weight shrinks by this share
    )
    min_observations: int = 50  # accepted values a term needs before its correction leaves 1
    window: int = 512  # values kept per term (the most recent)
    min_share: float = 0.5  # a term learns from an observation it makes at least this share of
    max_ratio: float = 10.0  # innovation gate: implied ratios outside [1/max_ratio, max_ratio] are dropped
    error_window: int = 1024  # recent prediction errors kept for the summary

    def __post_init__(self) -> None:
        if not (
            math.isfinite(self.lower) and math.isfinite(self.upper) and 0 < self.lower <= 1 <= self.upper
        ):
            raise ValueError(
                f"bounds: expected 0 < lower <= 1 <= upper, got [{self.lower!r}, {self.upper!r}]"
            )
        if not (math.isfinite(self.forgetting) and 0 <= self.forgetting < 1):
            raise ValueError(f"forgetting: expected a number in [0, 1), got {self.forgetting!r}")
        for name in ("min_observations", "window", "error_window"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}: expected an integer >= 1, got {value!r}")
        if not (math.isfinite(self.min_share) and 0 < self.min_share <= 1):
            raise ValueError(f"min_share: expected a number in (0, 1], got {self.min_share!r}")
        if not (math.isfinite(self.max_ratio) and self.max_ratio > 1):
            raise ValueError(f"max_ratio: expected a number > 1, got {self.max_ratio!r}")


def _weighted_median(values: list[float], weights: list[float]) -> float:
    order = sorted(range(len(values)), key=values.__getitem__)
    half = 0.5 * sum(weights)
    acc = 0.0
    for i in order:
        acc += weights[i]
        if acc >= half:
            return values[i]
    return values[order[-1]]


def _percentile(values: list[float], pct: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    s = sorted(values)
    pos = (len(s) - 1) * pct / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


@dataclass(frozen=True)
class ErrorSummary:
    """Absolute relative error of recent predictions (%), over ``num`` observations."""

    num: int
    median_pct: float | None
    p90_pct: float | None


class Calibrator:
    """The online estimator (module docstring). Mutable; not thread-safe: one owner feeds it.

    ``observe`` takes one completed request; ``refresh`` recomputes the corrections from the
    windows and returns them (the caller then swaps its model)."""

    def __init__(self, config: CalibrationConfig | None = None) -> None:
        self.config = config or CalibrationConfig()
        self.current = IDENTITY
        self._logs: dict[str, deque[float]] = {t: deque(maxlen=self.config.window) for t in TERMS}
        self.num_accepted = dict.fromkeys(TERMS, 0)
        self.num_rejected = 0
        self.num_observations = 0
        self._errors: dict[str, deque[float]] = {
            name: deque(maxlen=self.config.error_window) for name in ("ttft", "e2e")
        }

    def _effective(self, term: str) -> float:
        k = self.current
        return k.queue_wait * k.prefill if term == "queue_wait" else getattr(k, term)

    def _learn(self, parts: dict[str, float], observed: float) -> None:
        eff = {t: self._effective(t) * v for t, v in parts.items() if v > 0.0}
        total = sum(eff.values())
        if not (total > 0.0 and math.isfinite(total)):
            return
        cfg = self.config
        gate = math.log(cfg.max_ratio)
        for term, value in eff.items():
            if value < cfg.min_share * total:
                continue
            raw = parts[term]
            ratio = (observed - (total - value)) / raw
            if term == "queue_wait":
                ratio /= self.current.prefill
            if not (math.isfinite(ratio) and ratio > 0.0) or abs(math.log(ratio)) > gate:
                self.num_rejected += 1
                continue
            self._logs[term].append(math.log(ratio))
            self.num_accepted[term] += 1

    def _record_error(self, name: str, predicted: float | None, observed: float | None) -> None:
        if predicted is None or observed is None or not observed > 0.0 or not math.isfinite(predicted):
            return
        self._errors[name].append(100.0 * abs(predicted - observed) / observed)

    def observe(
        self,
        parts: Contributions,
        *,
        ttft_ms: float | None = None,
        tpot_ms: float | None = None,
        e2e_ms: float | None = None,
        output_tokens: int | None = None,
        predicted_ttft_ms: float | None = None,
        predicted_e2e_ms: float | None = None,
    ) -> None:
        """One completed request: its decision's ``contributions`` and what was observed (ms).

        Any subset of TTFT, TPOT and e2e may be given; non-finite or negative values are
        ignored (``num_rejected``). Without a TPOT, ``(e2e - ttft) / (n - 1)`` stands for it
        (``n`` the observed output tokens, else the predicted ones). ``predicted_*`` (the
        predictions in force at decision time) feed the error summary only."""
        self.num_observations += 1

        def clean(v: float | None) -> float | None:
            if v is None:
                return None
            if not (math.isfinite(v) and v >= 0.0):
                self.num_rejected += 1
                return None
            return float(v)

        ttft, tpot, e2e = clean(ttft_ms), clean(tpot_ms), clean(e2e_ms)
        n = parts.predicted_output_len if output_tokens is None or output_tokens < 1 else output_tokens
        if tpot is None and ttft is not None and e2e is not None and n > 1 and e2e >= ttft:
            tpot = (e2e - ttft) / (n - 1)
        if ttft is not None:
            self._learn(parts.ttft, ttft)
        if tpot is not None:
            self._learn(parts.tpot, tpot)
        self._record_error("ttft", predicted_ttft_ms, ttft)
        self._record_error("e2e", predicted_e2e_ms, e2e)

    def estimate(self, term: str) -> float:
        """The term's correction from its window now (1 until ``min_observations``)."""
        cfg = self.config
        logs = self._logs[term]
        if self.num_accepted[term] < cfg.min_observations or not logs:
            return 1.0
        keep = 1.0 - cfg.forgetting
        m = len(logs)
        weights = [keep ** (m - 1 - i) for i in range(m)]
        return min(max(math.exp(_weighted_median(list(logs), weights)), cfg.lower), cfg.upper)

    def refresh(self) -> Corrections:
        """Recompute every correction; they become ``current`` (the ratios' reference)."""
        self.current = Corrections(**{t: self.estimate(t) for t in TERMS})
        return self.current

    def error_summary(self, name: str) -> ErrorSummary:
        """Median and p90 of the recent |predicted - observed| / observed of ``ttft`` or ``e2e``."""
        errs = list(self._errors[name])
        if not errs:
            return ErrorSummary(0, None, None)
        return ErrorSummary(len(errs), _percentile(errs, 50.0), _percentile(errs, 90.0))
