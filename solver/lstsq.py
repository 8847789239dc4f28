"""Least-squares primitives with correctly rounded sums (``math.fsum``).

Plain Python floats rather than numpy reductions: numpy's pairwise/SIMD summation may round
differently on different CPUs, and a fitted params file must regenerate byte for byte
anywhere. The fits here have tens of points, so speed does not matter.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def r_squared(measured: Sequence[float], fitted: Sequence[float]) -> float | None:
    """Centred R^2 = 1 - SS_res / SS_tot; 1.0 for an exact fit, None if the data never vary."""
    mean = math.fsum(measured) / len(measured)
    ss_tot = math.fsum((y - mean) ** 2 for y in measured)
    ss_res = math.fsum((y - f) ** 2 for y, f in zip(measured, fitted, strict=True))
    if ss_res == 0:
        return 1.0
    if ss_tot == 0:
        return None
    return 1.0 - ss_res / ss_tot


def slope_through_origin(x: Sequence[float], y: Sequence[float]) -> float:
    """Least-squares ``k`` of ``y = k * x``: ``sum(x*y) / sum(x^2)``."""
    return math.fsum(a * b for a, b in zip(x, y, strict=True)) / math.fsum(a * a for a in x)


def affine(x: Sequence[float], y: Sequence[float]) -> tuple[float, float]:
    """Least-squares ``(slope, intercept)`` of ``y = slope * x + intercept`` (centred sums)."""
    xm = math.fsum(x) / len(x)
    ym = math.fsum(y) / len(y)
    slope = math.fsum((a - xm) * (b - ym) for a, b in zip(x, y, strict=True)) / math.fsum(
        (a - xm) ** 2 for a in x
    )
    return slope, ym - slope * xm
