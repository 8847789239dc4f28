"""``CurveSet``: the measured batch-scaling curves the capacity planner works from, and its JSON form.

File format (schema version 1)::

    {
      "schema_version": 1,
      "name": "bloom-176b-8xh100",
      "model": "BLOOM-176B", "hardware": "8x H100 80GB TP8",
      "memory_gb": 640.0,          # C: memory of one machine (GB)
      "weights_gb": 352.49,        # C_w: model weights on one machine (GB)
      "provenance": {...},         # free-form: where the figures come from
      "assumptions": ["...", ...], # every modelling assumption, one per line
      "prefill": {
        "batch_unit": "tokens",    # B_p counts tokens
        "max_batch": 131072,       # optional: upper bound of the planner's search domain
        "capacity":   {"label": "...", "provenance": "...", "points": [[B, GB], ...]},
        "throughput": {"label": "...", "provenance": {...}, "points": [[B, tokens/s], ...]}
      },
      "decode": {"batch_unit": "requests", ...same keys...}
    }

A capacity point is the memory (GB, weights included) one machine uses at batch B; a throughput
point is the tokens/s one machine delivers at batch B. Validation is complete before a
``CurveSet`` exists; every error names the field.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from solver.errors import InvalidCurves

SCHEMA_VERSION = 1
# Without an explicit max_batch, the search domain ends at this multiple of the largest batch seen.
DEFAULT_DOMAIN_FACTOR = 16.0
# Largest batch, value or max_batch accepted: far above any real machine, small enough that the
# fits and the fleet totals (up to thousands of machines) stay finite in float64.
MAX_COORDINATE = 1e12
BATCH_UNITS = {"prefill": "tokens", "decode": "requests"}


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidCurves(f"{where}: expected a number, got {type(value).__name__}")
    if not math.isfinite(value):
        raise InvalidCurves(f"{where}: must be finite, got {value!r}")
    return float(value)


@dataclass(frozen=True)
class Series:
    """One labelled set of (batch, value) points with its provenance."""

    label: str
    batches: tuple[float, ...]  # batch sizes (tokens for prefill, requests for decode), > 0
    values: tuple[float, ...]  # GB for capacity, tokens/s for throughput
    provenance: str | Mapping[str, Any] = ""

    def check(self, where: str, *, kind: str) -> None:
        """Raise ``InvalidCurves`` naming ``where`` if the points cannot be fitted."""
        if len(self.batches) != len(self.values):
            raise InvalidCurves(f"{where}.points: batches and values differ in length")
        if len(self.batches) < 2:
            raise InvalidCurves(f"{where}.points: need at least 2 points, got {len(self.batches)}")
        for i, (b, v) in enumerate(zip(self.batches, self.values, strict=True)):
            _number(b, f"{where}.points[{i}][0]")
            _number(v, f"{where}.points[{i}][1]")
            if not 0 < b <= MAX_COORDINATE:
                raise InvalidCurves(
                    f"{where}.points[{i}]: batch must be in (0, {MAX_COORDINATE:g}], got {b!r}"
                )
            if not 0 <= v <= MAX_COORDINATE:
                raise InvalidCurves(
                    f"{where}.points[{i}]: {kind} must be in [0, {MAX_COORDINATE:g}], got {v!r}"
                )
        if len(set(self.batches)) < 2:
            raise InvalidCurves(f"{where}.points: need at least 2 distinct batches")
        if kind == "throughput":
            if len(set(self.batches)) != len(self.batches):
                raise InvalidCurves(f"{where}.points: throughput batches must be distinct")
            if max(self.values) <= 0:
                raise InvalidCurves(f"{where}: the curve never reaches a positive throughput")


@dataclass(frozen=True)
class PhaseCurves:
    """Capacity (GB) and throughput (tokens/s) of one phase against its batch."""

    capacity: Series
    throughput: Series
    batch_unit: str  # "tokens" (prefill) or "requests" (decode)
    max_batch: float | None = None  # search-domain bound; None -> DEFAULT_DOMAIN_FACTOR x largest batch

    def domain_max(self) -> float:
        """Upper end of the batch domain the planner searches (same unit as the batches)."""
        if self.max_batch is not None:
            return self.max_batch
        return DEFAULT_DOMAIN_FACTOR * max(*self.capacity.batches, *self.throughput.batches)


@dataclass(frozen=True)
class CurveSet:
    """A model on a machine: its memory, weights and both phases' curves."""

    name: str
    model: str
    hardware: str
    memory_gb: float  # C, GB per machine
    weights_gb: float  # C_w, GB per machine
    prefill: PhaseCurves
    decode: PhaseCurves
    provenance: Mapping[str, Any] = field(default_factory=dict)
    assumptions: tuple[str, ...] = ()
    schema_version: int = SCHEMA_VERSION

    def __post_init__(self) -> None:
        if self.schema_version != SCHEMA_VERSION:
            raise InvalidCurves(
                f"schema_version: unsupported version {self.schema_version!r} (this pdroute reads "
                f"{SCHEMA_VERSION})"
            )
        if not self.name:
            raise InvalidCurves("name: must not be empty")
        for key in ("memory_gb", "weights_gb"):
            if _number(getattr(self, key), key) <= 0:
                raise InvalidCurves(f"{key}: must be > 0, got {getattr(self, key)!r}")
        for phase_name in ("prefill", "decode"):
            phase: PhaseCurves = getattr(self, phase_name)
            if phase.batch_unit != BATCH_UNITS[phase_name]:
                raise InvalidCurves(
                    f"{phase_name}.batch_unit: must be {BATCH_UNITS[phase_name]!r}, got {phase.batch_unit!r}"
                )
            if phase.max_batch is not None and not (
                0 < _number(phase.max_batch, f"{phase_name}.max_batch") <= MAX_COORDINATE
            ):
                raise InvalidCurves(
                    f"{phase_name}.max_batch: must be in (0, {MAX_COORDINATE:g}], got {phase.max_batch!r}"
                )
            phase.capacity.check(f"{phase_name}.capacity", kind="capacity")
            phase.throughput.check(f"{phase_name}.throughput", kind="throughput")


def _series_from(data: Any, where: str) -> Series:
    if not isinstance(data, Mapping):
        raise InvalidCurves(f"{where}: expected an object with label and points")
    points = data.get("points")
    if not isinstance(points, Sequence) or isinstance(points, str):
        raise InvalidCurves(f"{where}.points: expected a list of [batch, value] pairs")
    batches, values = [], []
    for i, point in enumerate(points):
        if not isinstance(point, Sequence) or isinstance(point, str) or len(point) != 2:
            raise InvalidCurves(f"{where}.points[{i}]: expected a [batch, value] pair")
        batches.append(_number(point[0], f"{where}.points[{i}][0]"))
        values.append(_number(point[1], f"{where}.points[{i}][1]"))
    label = data.get("label", "")
    provenance = data.get("provenance", "")
    if not isinstance(label, str):
        raise InvalidCurves(f"{where}.label: expected a string")
    if not isinstance(provenance, str | Mapping):
        raise InvalidCurves(f"{where}.provenance: expected a string or an object")
    return Series(label=label, batches=tuple(batches), values=tuple(values), provenance=provenance)


def _phase_from(data: Any, where: str) -> PhaseCurves:
    if not isinstance(data, Mapping):
        raise InvalidCurves(f"{where}: expected an object with capacity and throughput")
    max_batch = data.get("max_batch")
    return PhaseCurves(
        capacity=_series_from(data.get("capacity"), f"{where}.capacity"),
        throughput=_series_from(data.get("throughput"), f"{where}.throughput"),
        batch_unit=str(data.get("batch_unit", BATCH_UNITS[where])),
        max_batch=None if max_batch is None else _number(max_batch, f"{where}.max_batch"),
    )


def curve_set_from_mapping(data: Any) -> CurveSet:
    """Build and validate a ``CurveSet`` from its JSON mapping (raises ``InvalidCurves``)."""
    if not isinstance(data, Mapping):
        raise InvalidCurves("curve set: expected a JSON object")
    for key in ("name", "memory_gb", "weights_gb", "prefill", "decode"):
        if key not in data:
            raise InvalidCurves(f"{key}: missing")
    assumptions = data.get("assumptions", [])
    if not isinstance(assumptions, Sequence) or isinstance(assumptions, str):
        raise InvalidCurves("assumptions: expected a list of strings")
    provenance = data.get("provenance", {})
    if not isinstance(provenance, Mapping):
        raise InvalidCurves("provenance: expected an object")
    version = data.get("schema_version", SCHEMA_VERSION)
    if isinstance(version, bool) or not isinstance(version, int):
        raise InvalidCurves(f"schema_version: expected an integer, got {version!r}")
    return CurveSet(
        name=str(data["name"]),
        model=str(data.get("model", "unknown")),
        hardware=str(data.get("hardware", "unknown")),
        memory_gb=_number(data["memory_gb"], "memory_gb"),
        weights_gb=_number(data["weights_gb"], "weights_gb"),
        prefill=_phase_from(data["prefill"], "prefill"),
        decode=_phase_from(data["decode"], "decode"),
        provenance=dict(provenance),
        assumptions=tuple(str(a) for a in assumptions),
        schema_version=version,
    )


def _series_to(series: Series) -> dict[str, Any]:
    points = [[b, v] for b, v in zip(series.batches, series.values, strict=True)]
    provenance = series.provenance if isinstance(series.provenance, str) else dict(series.provenance)
    return {"label": series.label, "provenance": provenance, "points": points}


def curve_set_to_mapping(curves: CurveSet) -> dict[str, Any]:
    """The JSON mapping of ``curves`` (inverse of ``curve_set_from_mapping``)."""
    phases = {}
    for name in ("prefill", "decode"):
        phase: PhaseCurves = getattr(curves, name)
        phases[name] = {
            "batch_unit": phase.batch_unit,
            "max_batch": phase.max_batch,
            "capacity": _series_to(phase.capacity),
            "throughput": _series_to(phase.throughput),
        }
    return {
        "schema_version": curves.schema_version,
        "name": curves.name,
        "model": curves.model,
        "hardware": curves.hardware,
        "memory_gb": curves.memory_gb,
        "weights_gb": curves.weights_gb,
        "provenance": dict(curves.provenance),
        "assumptions": list(curves.assumptions),
        **phases,
    }


def load_curve_set(path: str | Path) -> CurveSet:
    """Read and validate a curve-set JSON file."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError as exc:
        raise InvalidCurves(f"{path}: no such curve-set file") from exc
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InvalidCurves(f"{path}: unreadable curve-set JSON ({exc})") from exc
    try:
        return curve_set_from_mapping(data)
    except InvalidCurves as exc:
        raise InvalidCurves(f"{path}: {exc}") from exc


@functools.cache
def builtin_curve_set_names() -> tuple[str, ...]:
    """Names of the curve sets shipped in ``solver/data/curves`` (listed once per process)."""
    folder = resources.files("solver") / "data" / "curves"
    return tuple(sorted(p.name[: -len(".json")] for p in folder.iterdir() if p.name.endswith(".json")))


@functools.cache
def load_builtin_curve_set(name: str) -> CurveSet:
    """Load a built-in curve set by name, read and validated once per process.

    Raises ``InvalidCurves`` for an unknown name (an error is never cached, so the cache holds
    the shipped sets only). The set is frozen: every caller may share it.
    """
    names = builtin_curve_set_names()
    if name not in names:
        raise InvalidCurves(f"curves: unknown built-in curve set {name!r} (built in: {', '.join(names)})")
    return load_curve_set(Path(str(resources.files("solver") / "data" / "curves" / f"{name}.json")))


def resolve_curve_set(name_or_path: str) -> CurveSet:
    """A built-in set by name, else a curve-set file by path."""
    if name_or_path in builtin_curve_set_names():
        return load_builtin_curve_set(name_or_path)
    if not Path(name_or_path).exists():
        raise InvalidCurves(
            f"curves: {name_or_path!r} is neither a built-in set ({', '.join(builtin_curve_set_names())}) "
            "nor an existing file"
        )
    return load_curve_set(name_or_path)
