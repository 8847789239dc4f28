"""``FittedCurves``: a curve set fitted for the planner (both phases' capacity and throughput, the
machine's memory and weights), and the per-process cache of the built-in sets' fits.

``fit_curves`` fits a ``CurveSet`` (``solver.plan.curves`` holds the fits themselves);
``with_machine`` applies a memory or weights override to a fitted model without refitting;
``builtin_fit`` fits each shipped set once per process and fit kind.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass
from typing import Any

from solver.errors import InfeasiblePlan, InvalidCurves
from solver.plan.curves import (
    THROUGHPUT_FITS,
    QuadraticFit,
    Throughput,
    ThroughputFitKind,
    fit_quadratic,
    piecewise_from,
)
from solver.plan.curvesets import CurveSet, PhaseCurves, load_builtin_curve_set


@dataclass(frozen=True)
class PhaseFit:
    """One phase's fitted capacity (GB, weights included) and throughput (tokens/s)."""

    capacity: QuadraticFit
    throughput: Throughput
    max_batch: float  # search-domain upper bound


@dataclass(frozen=True)
class FittedCurves:
    """Both phases fitted, with the machine's memory and weights (GB) in force."""

    name: str
    prefill: PhaseFit
    decode: PhaseFit
    memory_gb: float
    weights_gb: float
    throughput_fit: ThroughputFitKind

    def to_dict(self) -> dict[str, Any]:
        phases = {
            name: {
                "capacity": phase.capacity.to_dict(),
                "throughput": phase.throughput.to_dict(),
                "max_batch": phase.max_batch,
            }
            for name, phase in (("prefill", self.prefill), ("decode", self.decode))
        }
        return {
            "curves": self.name,
            "memory_gb": self.memory_gb,
            "weights_gb": self.weights_gb,
            "throughput_fit": self.throughput_fit,
            **phases,
        }


def _fit_phase(name: str, phase: PhaseCurves, kind: ThroughputFitKind) -> PhaseFit:
    throughput: Throughput = (
        piecewise_from(phase.throughput)
        if kind == "piecewise"
        else fit_quadratic(phase.throughput, f"{name}.throughput")
    )
    return PhaseFit(fit_quadratic(phase.capacity, f"{name}.capacity"), throughput, phase.domain_max())


def _check_machine(memory_gb: float, weights_gb: float) -> None:
    for key, value in (("memory_gb", memory_gb), ("weights_gb", weights_gb)):
        if not math.isfinite(value) or value <= 0:
            raise InvalidCurves(f"{key}: must be a finite number > 0, got {value!r}")
    if weights_gb >= memory_gb:
        raise InfeasiblePlan(f"weights ({weights_gb:g} GB) are larger than machine memory ({memory_gb:g} GB)")


def with_machine(
    model: FittedCurves, memory_gb: float | None = None, weights_gb: float | None = None
) -> FittedCurves:
    """``model`` on a machine with ``memory_gb``/``weights_gb`` (None keeps the model's figure).

    A weights change moves both capacity fits by (weights_gb - model.weights_gb): the curves'
    points include the weights, and only that part changes. Nothing is refitted, so a cached
    model (``builtin_fit``) serves every override.
    """
    memory = model.memory_gb if memory_gb is None else memory_gb
    weights = model.weights_gb if weights_gb is None else weights_gb
    _check_machine(memory, weights)
    if memory == model.memory_gb and weights == model.weights_gb:
        return model
    shift = weights - model.weights_gb
    return dataclasses.replace(
        model,
        prefill=dataclasses.replace(model.prefill, capacity=model.prefill.capacity.shifted(shift)),
        decode=dataclasses.replace(model.decode, capacity=model.decode.capacity.shifted(shift)),
        memory_gb=memory,
        weights_gb=weights,
    )


def fit_curves(
    curves: CurveSet,
    throughput_fit: ThroughputFitKind = "piecewise",
    memory_gb: float | None = None,
    weights_gb: float | None = None,
) -> FittedCurves:
    """Fit ``curves``; ``memory_gb``/``weights_gb`` override the set's figures (``with_machine``)."""
    if throughput_fit not in THROUGHPUT_FITS:
        raise InvalidCurves(f"throughput_fit: must be one of {THROUGHPUT_FITS}, got {throughput_fit!r}")
    # the machine is checked before fitting, so a bad override is reported whatever the points
    _check_machine(
        curves.memory_gb if memory_gb is None else memory_gb,
        curves.weights_gb if weights_gb is None else weights_gb,
    )
    fitted = FittedCurves(
        name=curves.name,
        prefill=_fit_phase("prefill", curves.prefill, throughput_fit),
        decode=_fit_phase("decode", curves.decode, throughput_fit),
        memory_gb=curves.memory_gb,
        weights_gb=curves.weights_gb,
        throughput_fit=throughput_fit,
    )
    return with_machine(fitted, memory_gb, weights_gb)


@functools.cache
def builtin_fit(name: str, throughput_fit: ThroughputFitKind = "piecewise") -> FittedCurves:
    """The fitted model of the built-in curve set ``name``, read and fitted once per process.

    The cache holds only valid (name, fit kind) pairs, at most two per shipped set: an unknown
    name or fit kind raises ``InvalidCurves`` and is not cached. The result is frozen, so sharing
    it between requests and threads is safe.
    """
    return fit_curves(load_builtin_curve_set(name), throughput_fit)
