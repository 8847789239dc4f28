"""JSON forms of planner results: one plan, a grid, and ``model_parameters.json``.

Pure functions from result dataclasses to plain dicts (floats, ints, strings, lists, None); NaN
never appears (an infeasible grid cell is ``None``). The HTTP responses and the CLI files use
these same forms.
"""

from __future__ import annotations

import math
from dataclasses import asdict
from typing import Any

import numpy as np

from solver.plan.curvesets import CurveSet
from solver.plan.fitted import FittedCurves
from solver.plan.plan import Plan, PlanGrid
from solver.plan.recommend import recommend


def _clean(value: float) -> float | None:
    return None if math.isnan(value) else float(value)


def _cuf_balanced_row(plan: Plan) -> int | None:
    table, x = plan.candidates, plan.cuf_balanced_decode_machines
    rows = [i for i, p in enumerate(table.policy) if p.startswith("CUF") and table.decode_machines[i] == x]
    return rows[0] if rows else None


def summary_indices(plan: Plan) -> list[int]:
    """Rows worth showing: the best of each policy, the CUF row at the balanced x, every TUF row;
    ordered by rate, highest first."""
    table = plan.candidates
    keep: set[int] = set()
    for label in sorted(set(table.policy)):
        rows = [i for i, p in enumerate(table.policy) if p == label]
        keep.add(max(rows, key=lambda i: float(table.rate_rps[i])))
        if label.startswith("TUF"):
            keep.update(rows)
    balanced = _cuf_balanced_row(plan)
    if balanced is not None:
        keep.add(balanced)
    return sorted(keep, key=lambda i: (-float(table.rate_rps[i]), i))


def plan_to_dict(plan: Plan, *, all_candidates: bool = False) -> dict[str, Any]:
    """The plan as plain values; ``candidates`` is the summary unless ``all_candidates``."""
    table = plan.candidates
    indices = range(len(table)) if all_candidates else summary_indices(plan)
    reference = asdict(plan.reference)
    reference["gap_rps"] = plan.reference_gap_rps
    reference["gap_fraction"] = plan.reference_gap_rps / plan.reference.rate_rps
    reference["speedup"] = plan.reference.rate_rps / plan.baseline.rate_rps
    baseline = asdict(plan.baseline)
    baseline["capacity"] = plan.baseline.capacity.to_dict()
    balanced_row = _cuf_balanced_row(plan)
    return {
        "curves": plan.model.name,
        "machines": plan.machines,
        "prompt_len": plan.prompt_len,
        "output_len": plan.output_len,
        "memory_gb": plan.model.memory_gb,
        "weights_gb": plan.model.weights_gb,
        "throughput_fit": plan.model.throughput_fit,
        "limits": {
            "prefill_tokens": plan.limits.prefill.to_dict(),
            "decode_requests": plan.limits.decode.to_dict(),
        },
        "baseline": baseline,
        "best": asdict(plan.best),
        "speedup": plan.speedup,
        "s_p": plan.s_p,
        "s_d": plan.s_d,
        "reference_optimum": reference,
        "cuf_balanced": {
            "decode_machines": plan.cuf_balanced_decode_machines,
            "x_real": plan.cuf_balanced_x_real,
            "rate_rps": None if balanced_row is None else float(table.rate_rps[balanced_row]),
        },
        "tuf_roots": [{"policy": p, "x_continuous": x} for p, x in plan.tuf_roots],
        "num_candidates": len(table),
        "candidates": [asdict(table.row(i)) for i in indices],
        "fits": plan.model.to_dict(),
        "notes": list(plan.notes),
        "recommendation": asdict(recommend(plan)),
    }


def _matrix(values: np.ndarray[Any, Any]) -> list[list[float | None]]:
    return [[_clean(float(v)) for v in row] for row in values]


def grid_to_dict(grid: PlanGrid) -> dict[str, Any]:
    """Matrices indexed [prompt_len][output_len]; ``None`` where a cell is infeasible."""
    recommendations = [[None if p is None else recommend(p) for p in row] for row in grid.plans]
    return {
        "machines": grid.machines,
        "prompt_lens": list(grid.prompt_lens),
        "output_lens": list(grid.output_lens),
        "s_p": _matrix(grid.s_p),
        "s_d": _matrix(grid.s_d),
        "speedup": _matrix(grid.speedup),
        "reference_speedup": _matrix(grid.reference_speedup),
        "policy": [list(row) for row in grid.policy],
        "infeasible": [list(row) for row in grid.infeasible],
        # per cell: "co-located", the pick's policy, or "reference" (see solver.plan.recommend)
        "recommendation": [[None if r is None else r.policy for r in row] for row in recommendations],
        "recommended_speedup": [[None if r is None else r.speedup for r in row] for row in recommendations],
    }


def model_parameters(curves: CurveSet, model: FittedCurves, grid: PlanGrid) -> dict[str, Any]:
    """``model_parameters.json``: fitted coefficients, assumptions, and per cell every inverse
    (exact or at a boundary), the baseline's capacity inverse, and every clamp met."""
    cells = []
    for i, prompt_len in enumerate(grid.prompt_lens):
        for j, output_len in enumerate(grid.output_lens):
            plan = grid.plans[i][j]
            cell: dict[str, Any] = {"prompt_len": prompt_len, "output_len": output_len}
            if plan is None:
                cell["infeasible"] = grid.infeasible[i][j]
            else:
                cell.update(
                    prefill_limit=plan.limits.prefill.to_dict(),
                    decode_limit=plan.limits.decode.to_dict(),
                    baseline_concurrency=plan.baseline.capacity.to_dict(),
                    policy=plan.best.policy,
                    decode_machines=plan.best.decode_machines,
                    s_p=plan.s_p,
                    s_d=plan.s_d,
                    reference_gap_fraction=plan.reference_gap_rps / plan.reference.rate_rps,
                    recommendation=asdict(recommend(plan)),
                    notes=list(plan.notes),
                )
            cells.append(cell)
    return {
        "curves": curves.name,
        "model": curves.model,
        "hardware": curves.hardware,
        "machines": grid.machines,
        "fits": model.to_dict(),
        "assumptions": list(curves.assumptions),
        "provenance": dict(curves.provenance),
        "cells": cells,
    }
