"""Fitted planner curves: quadratic least squares, clamped piecewise-linear interpolation, and
capacity inverses with their numerical boundaries.

From the design document:

* capacity C(B) = c0 + c1*B + c2*B^2, a least-squares fit over all of a phase's points (GB);
* throughput T(B) (tokens/s) is either the same quadratic fit, or linear interpolation between
  the measured points, clamped to the end values outside the measured range (no extrapolation);
  a quadratic throughput is floored at 0 (a negative throughput has no meaning);
* the inverse C^-1(M) is the largest batch B in the search domain [lo, hi] such that C(b) <= M
  for every b in [lo, B]. It is *exact* when C(B) = M there; when the fit does not reach M inside
  the domain the nearest boundary (hi) is taken and the inverse is flagged inexact.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from solver.errors import InfeasiblePlan, InvalidCurves
from solver.plan.curvesets import Series

FloatArray = npt.NDArray[np.float64]
ThroughputFitKind = Literal["piecewise", "quadratic"]
THROUGHPUT_FITS: tuple[ThroughputFitKind, ...] = ("piecewise", "quadratic")


@dataclass(frozen=True)
class QuadraticFit:
    """y = c0 + c1*B + c2*B^2 (least squares); ``degree`` < 2 when too few distinct batches."""

    c0: float
    c1: float
    c2: float
    degree: int
    rmse: float  # root-mean-square residual over the fitted points (unit of y)
    observed_min: float  # smallest fitted batch
    observed_max: float  # largest fitted batch

    def __call__(self, batch: npt.ArrayLike) -> FloatArray:
        b = np.asarray(batch, dtype=np.float64)
        return np.asarray(self.c0 + b * (self.c1 + b * self.c2), dtype=np.float64)

    def shifted(self, delta: float) -> QuadraticFit:
        """The same fit moved by ``delta`` in y (a different weights figure)."""
        return QuadraticFit(
            self.c0 + delta, self.c1, self.c2, self.degree, self.rmse, self.observed_min, self.observed_max
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": "quadratic",
            "c0": self.c0,
            "c1": self.c1,
            "c2": self.c2,
            "degree": self.degree,
            "rmse": self.rmse,
            "observed_range": [self.observed_min, self.observed_max],
        }


def fit_quadratic(series: Series, where: str | None = None) -> QuadraticFit:
    """Least-squares quadratic through ``series`` (degree drops to 1 with two distinct batches).

    The fit is solved on batches scaled to [0, 1] so the normal equations stay well conditioned
    for batches in the tens of thousands, then rescaled. Raises ``InvalidCurves`` naming ``where``
    (default: the series label) when the rescaled coefficients are not finite (batches too small
    or too close together to fit in float64).
    """
    what = where or series.label or "series"
    b = np.asarray(series.batches, dtype=np.float64)
    y = np.asarray(series.values, dtype=np.float64)
    degree = min(2, len(np.unique(b)) - 1)
    if degree < 1:
        raise InvalidCurves(f"{what}: need at least 2 distinct batches to fit")
    scale = float(b.max())
    s = b / scale
    design = np.vander(s, degree + 1, increasing=True)
    with np.errstate(all="ignore"):
        coef, *_ = np.linalg.lstsq(design, y, rcond=None)
        scaled = coef / np.power(scale, np.arange(degree + 1, dtype=np.float64))
        rmse = float(np.sqrt(np.mean((design @ coef - y) ** 2)))
    if not (np.all(np.isfinite(scaled)) and math.isfinite(rmse)):
        raise InvalidCurves(
            f"{what}: the quadratic fit of points at batches {b.min():g}..{b.max():g} is not finite "
            "(batches too small or too close together)"
        )
    coefs = [float(c) for c in scaled] + [0.0] * (2 - degree)
    return QuadraticFit(coefs[0], coefs[1], coefs[2], degree, rmse, float(b.min()), float(b.max()))


@dataclass(frozen=True)
class PiecewiseLinear:
    """Linear interpolation between measured points, clamped to the end values outside them."""

    batches: tuple[float, ...]  # strictly increasing
    values: tuple[float, ...]

    @property
    def observed_min(self) -> float:
        return self.batches[0]

    @property
    def observed_max(self) -> float:
        return self.batches[-1]

    @functools.cached_property
    def _points(self) -> tuple[FloatArray, FloatArray]:
        # converted once: np.interp would otherwise convert both tuples on every call
        return np.asarray(self.batches, dtype=np.float64), np.asarray(self.values, dtype=np.float64)

    def __call__(self, batch: npt.ArrayLike) -> FloatArray:
        # np.interp returns values[0] / values[-1] outside the range: exactly the endpoint clamp.
        xp, fp = self._points
        return np.interp(np.asarray(batch, dtype=np.float64), xp, fp)

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": "piecewise",
            "points": [[b, v] for b, v in zip(self.batches, self.values, strict=True)],
            "observed_range": [self.observed_min, self.observed_max],
            "clamp": "end values outside the observed range",
        }


def piecewise_from(series: Series) -> PiecewiseLinear:
    order = np.argsort(np.asarray(series.batches))
    return PiecewiseLinear(
        tuple(float(series.batches[i]) for i in order), tuple(float(series.values[i]) for i in order)
    )


Throughput = QuadraticFit | PiecewiseLinear


def throughput_at(curve: Throughput, batch: npt.ArrayLike) -> FloatArray:
    """Tokens/s at ``batch``; a quadratic fit is floored at 0."""
    return np.maximum(curve(batch), 0.0)


def is_clamped(curve: Throughput, batch: float) -> bool:
    """Whether ``batch`` lies outside the curve's observed range (clamped or extrapolated)."""
    return batch < curve.observed_min or batch > curve.observed_max


@dataclass(frozen=True)
class CapacityInverse:
    """The largest batch within memory, and how it was found."""

    batch: float  # largest feasible batch (tokens for prefill, requests for decode)
    is_exact: bool  # True: the fit equals the memory at ``batch``; False: a domain boundary
    boundary: Literal["upper"] | None  # the domain bound taken when not exact
    fit_root: float | None  # where the fit reaches the memory, when that is beyond the domain
    domain: tuple[float, float]  # the searched batch domain [lo, hi]

    def to_dict(self) -> dict[str, Any]:
        return {
            "batch": self.batch,
            "is_exact": self.is_exact,
            "boundary": self.boundary,
            "fit_root": self.fit_root,
            "domain": list(self.domain),
        }


def _real_roots(c0: float, c1: float, c2: float) -> list[float]:
    """Real roots of c2*B^2 + c1*B + c0, by the cancellation-free form of the quadratic formula."""
    if c2 == 0.0:
        return [] if c1 == 0.0 else [-c0 / c1]
    disc = c1 * c1 - 4.0 * c2 * c0
    if disc < 0.0:
        return []
    q = -0.5 * (c1 + math.copysign(math.sqrt(disc), c1))
    if q == 0.0:
        return [0.0]
    return sorted({q / c2, c0 / q})


def invert_quadratic(
    c0: float, c1: float, c2: float, memory_gb: float, lo: float, hi: float, what: str
) -> CapacityInverse:
    """Largest B in [lo, hi] with c0 + c1*b + c2*b^2 <= memory_gb on all of [lo, B].

    The curve leaves the feasible set at the smallest root r >= lo where it is increasing; if
    r <= hi the inverse is exact, otherwise the upper boundary hi is taken and flagged. Raises
    ``InfeasiblePlan`` naming ``what`` when even ``lo`` needs more than ``memory_gb``.
    """
    at_lo = c0 + lo * (c1 + lo * c2)
    if at_lo > memory_gb:
        raise InfeasiblePlan(f"{what}: {at_lo:.2f} GB needed at batch {lo:g}, over {memory_gb:g} GB memory")
    exits = [r for r in _real_roots(c0 - memory_gb, c1, c2) if r >= lo and c1 + 2.0 * c2 * r > 0.0]
    root = min(exits) if exits else None
    if root is not None and root <= hi:
        return CapacityInverse(root, True, None, None, (lo, hi))
    return CapacityInverse(hi, False, "upper", root, (lo, hi))


def invert_capacity(fit: QuadraticFit, memory_gb: float, lo: float, hi: float, what: str) -> CapacityInverse:
    """C^-1(memory_gb) of a fitted capacity curve over the batch domain [lo, hi]."""
    return invert_quadratic(fit.c0, fit.c1, fit.c2, memory_gb, lo, hi, what)
