"""``FitReport``: how well each fitted cost-model parameter matches the profile it came from.

``solver.fit.fit_profile`` builds one beside every ``CostModelParams``. It holds, per parameter,
the value, the coefficient of determination R^2 of the form that parameter enters, every
residual (measured minus fitted, ms) and the warnings a reader should see before trusting the
value. ``to_json_dict`` is the file written beside ``params.json`` (``<stem>.fit_report.json``);
``format_table`` is what ``pdroute fit`` prints.

R^2 is always the centred coefficient ``1 - SS_res / SS_tot`` with ``SS_tot`` taken about the
mean of the measurements, also for fits through the origin (where the uncentred variant would
flatter the fit). It is 1.0 for an exact fit and ``None`` when the measurements do not vary at
all but the fit still misses them (R^2 is undefined there).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from solver.jsonfile import write_json_atomic

FIT_REPORT_SCHEMA_VERSION = 1
POOR_FIT_R_SQUARED = 0.9  # warn below this R^2 ...
CLOSE_FIT_RELATIVE = 0.05  # ... unless every point lies within 5% of the fit (flat data)
FORM_BREAK_RELATIVE = 0.25  # warn when the form misses any single point by more than 25%


@dataclass(frozen=True)
class Residual:
    """One measured point against the fitted form (ms)."""

    point: str  # e.g. "L=64", "kv=128,b=4", "chunk=64,B=4"
    measured_ms: float
    fitted_ms: float

    @property
    def residual_ms(self) -> float:
        """Measured minus fitted (ms): positive where the form under-predicts."""
        return self.measured_ms - self.fitted_ms

    @property
    def relative(self) -> float | None:
        """Residual as a fraction of the larger of |measured| and |fitted|.

        The larger of the two, not the measurement alone, so that a measurement near zero (an
        interference point inside the timing noise) does not turn into a residual of 10000%.
        ``None`` when both are zero.
        """
        scale = max(abs(self.measured_ms), abs(self.fitted_ms))
        if scale == 0:
            return None
        return self.residual_ms / scale


@dataclass(frozen=True)
class ParameterFit:
    """One parameter of ``CostModelParams`` and the evidence behind it."""

    name: str  # "alpha", "beta", "batch_thresh", "gamma", "bandwidth_GBps", "bytes_per_token"
    value: float
    unit: str  # e.g. "ms/token"
    method: str  # one line: how the value was obtained
    r_squared: float | None = None  # of the form this parameter enters; None if not a fit
    residuals: tuple[Residual, ...] = ()
    warnings: tuple[str, ...] = ()
    diagnostics: Mapping[str, Any] = field(default_factory=dict)  # side fits, flags, spreads

    @property
    def max_abs_relative_residual(self) -> float | None:
        """Largest |residual| / measurement over the points (``None`` without residuals)."""
        rel = [abs(r) for r in (res.relative for res in self.residuals) if r is not None]
        return max(rel) if rel else None

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "value": self.value,
            "unit": self.unit,
            "method": self.method,
            "r_squared": self.r_squared,
            "max_abs_relative_residual": self.max_abs_relative_residual,
            "residuals": [
                {
                    "point": r.point,
                    "measured_ms": r.measured_ms,
                    "fitted_ms": r.fitted_ms,
                    "residual_ms": r.residual_ms,
                    "relative": r.relative,
                }
                for r in self.residuals
            ],
            "warnings": list(self.warnings),
            "diagnostics": dict(self.diagnostics),
        }


@dataclass(frozen=True)
class FitReport:
    """The fit of one profile: where it came from and one ``ParameterFit`` per parameter."""

    model: str
    hardware: str
    source: str
    transfer_path: str
    created_at: str
    params_id: str  # of the CostModelParams this report accompanies
    profile_id: str  # content hash of the profile that was fitted
    parameters: tuple[ParameterFit, ...]

    def parameter(self, name: str) -> ParameterFit:
        """The fit of parameter ``name`` (``KeyError`` if the report has none)."""
        for p in self.parameters:
            if p.name == name:
                return p
        raise KeyError(name)

    @property
    def warnings(self) -> tuple[str, ...]:
        """Every parameter's warnings, each prefixed with the parameter's name."""
        return tuple(f"{p.name}: {w}" for p in self.parameters for w in p.warnings)

    def to_json_dict(self) -> dict[str, Any]:
        """The JSON form written beside ``params.json``."""
        return {
            "schema_version": FIT_REPORT_SCHEMA_VERSION,
            "model": self.model,
            "hardware": self.hardware,
            "source": self.source,
            "transfer_path": self.transfer_path,
            "created_at": self.created_at,
            "params_id": self.params_id,
            "profile_id": self.profile_id,
            "parameters": {p.name: p.to_json_dict() for p in self.parameters},
            "warnings": list(self.warnings),
        }

    def format_table(self) -> str:
        """A plain-text table for the terminal: values, R^2, worst residual, then warnings."""
        lines = [
            f"fit of {self.model} on {self.hardware} ({self.source}, KV path {self.transfer_path})",
            f"params_id {self.params_id}  profile_id {self.profile_id}  created {self.created_at}",
            "",
            f"{'parameter':<16}{'value':>14}  {'unit':<12}{'R^2':>8}{'worst res':>11}{'points':>8}",
        ]
        for p in self.parameters:
            r2 = "-" if p.r_squared is None else f"{p.r_squared:.4f}"
            worst = p.max_abs_relative_residual
            worst_s = "-" if worst is None else f"{100 * worst:.1f}%"
            lines.append(
                f"{p.name:<16}{_fmt_value(p.value):>14}  {p.unit:<12}{r2:>8}{worst_s:>11}"
                f"{len(p.residuals) or '-':>8}"
            )
        lines.append("")
        lines.append("how each value was obtained:")
        lines.extend(f"  {p.name}: {p.method}" for p in self.parameters)
        side = [(p.name, k, v) for p in self.parameters for k, v in p.diagnostics.items()]
        if side:
            lines.append("")
            lines.append("diagnostics:")
            lines.extend(f"  {name}.{key} = {_fmt_diag(value)}" for name, key, value in side)
        lines.append("")
        if self.warnings:
            lines.append(f"warnings ({len(self.warnings)}):")
            lines.extend(f"  - {w}" for w in self.warnings)
        else:
            lines.append("warnings: none")
        return "\n".join(lines)


def residuals_of(
    labels: Sequence[str], measured: Sequence[float], fitted: Sequence[float]
) -> tuple[Residual, ...]:
    """One ``Residual`` per point, in order."""
    return tuple(
        Residual(point=p, measured_ms=m, fitted_ms=f)
        for p, m, f in zip(labels, measured, fitted, strict=True)
    )


def quality_warnings(what: str, r2: float | None, residuals: Sequence[Residual]) -> list[str]:
    """The poor-fit (R^2) and broken-form (one point far off) warnings shared by every fit."""
    rel = [(abs(r.relative), r) for r in residuals if r.relative is not None]
    worst_rel, worst = max(rel, key=lambda t: t[0]) if rel else (0.0, None)
    out = []
    if r2 is not None and r2 < POOR_FIT_R_SQUARED and worst_rel >= CLOSE_FIT_RELATIVE:
        out.append(f"poor fit: {what} has R^2 = {r2:.3f} (< {POOR_FIT_R_SQUARED})")
    if worst is not None and worst_rel > FORM_BREAK_RELATIVE:
        out.append(
            f"the form misses {worst.point} by {100 * (worst.relative or 0.0):+.0f}% "
            f"(measured {worst.measured_ms:.4g} ms, fitted {worst.fitted_ms:.4g} ms)"
        )
    return out


def _fmt_value(value: float) -> str:
    if value == int(value) and abs(value) >= 1:
        return f"{int(value)}"
    return f"{value:.6g}"


def _fmt_diag(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    return json.dumps(value) if isinstance(value, list | dict) else str(value)


def _round6(value: float | None) -> float | None:
    return None if value is None else round(value, 6)


def fit_quality_summary(fits: Sequence[ParameterFit]) -> dict[str, Any]:
    """The compact summary stored in ``params.json`` metadata (the report has the details)."""
    out: dict[str, Any] = {}
    for p in fits:
        if p.r_squared is None and not p.residuals and not p.warnings:
            continue
        entry: dict[str, Any] = {
            "r_squared": _round6(p.r_squared),
            "max_abs_relative_residual": _round6(p.max_abs_relative_residual),
            "warnings": list(p.warnings),
        }
        if p.name == "batch_thresh":
            entry["is_lower_bound"] = bool(p.diagnostics["is_lower_bound"])
        if p.name == "gamma":
            entry["load_scaled_r_squared"] = _round6(p.diagnostics["load_scaled_r_squared"])
        out[p.name] = entry
    out["warnings"] = [f"{p.name}: {w}" for p in fits for w in p.warnings]
    return out


def fit_report_path(params_path: str | os.PathLike[str]) -> Path:
    """Where the fit report of ``params_path`` lives: ``<dir>/<stem>.fit_report.json``."""
    p = Path(params_path)
    return p.with_name(p.stem + ".fit_report.json")


def save_fit_report(report: FitReport, path: str | os.PathLike[str]) -> Path:
    """Write the report's JSON form atomically (temp file then rename) and return its path."""
    return write_json_atomic(path, report.to_json_dict(), indent=2)
