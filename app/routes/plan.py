"""``POST /plan`` and ``POST /plan/grid``: the P/D capacity planner over HTTP.

The handlers are plain ``def``: FastAPI runs them in its threadpool, so a grid solve (up to a
second or two) never blocks the event loop serving ``/route``. Built-in curve sets and shipped
profiles are chosen by name only (read, and the sets fitted, once per process); a file path is
never read on a client's behalf. Domain errors (``InfeasiblePlan``, ``InvalidCurves``,
``InvalidProfile``) are answered 422 by ``app.http.errors``; more than ``PDROUTE_MAX_CONCURRENT_GRIDS``
grids at once, 429.
"""

from __future__ import annotations

from fastapi import APIRouter

from app.deps import GridLimitDep
from app.schemas.plan import CurveSetSpec, PlanGridRequest, PlanGridResponse, PlanRequest, PlanResponse
from app.schemas.route import ErrorResponse
from solver.plan import (
    FittedCurves,
    ThroughputFitKind,
    builtin_fit,
    curve_set_from_mapping,
    curve_set_from_profile,
    fit_curves,
    grid_to_dict,
    load_builtin_profile,
    plan_to_dict,
    solve_grid,
    solve_plan,
    with_machine,
)

router = APIRouter(tags=["plan"])


def _model(
    spec: str | CurveSetSpec, fit: ThroughputFitKind, memory_gb: float | None, weights_gb: float | None
) -> FittedCurves:
    if isinstance(spec, str):
        return with_machine(builtin_fit(spec, fit), memory_gb, weights_gb)
    return fit_curves(curve_set_from_mapping(spec.model_dump()), fit, memory_gb, weights_gb)


@router.post("/plan", response_model=PlanResponse)
def post_plan(body: PlanRequest) -> PlanResponse:
    """Baseline, CUF/TUF candidates, the pick, S_p/S_d, the reference optimum and the
    recommendation for one workload, from a curve set or from a shipped profile."""
    assumptions: list[str] = []
    if body.profile is not None:
        curves = curve_set_from_profile(load_builtin_profile(body.profile), body.prompt_len, body.output_len)
        model = fit_curves(curves, body.throughput_fit, body.memory_gb, body.weights_gb)
        assumptions = list(curves.assumptions)
    elif body.curves is not None:
        model = _model(body.curves, body.throughput_fit, body.memory_gb, body.weights_gb)
    plan = solve_plan(model, body.machines, body.prompt_len, body.output_len)
    answer = plan_to_dict(plan, all_candidates=body.all_candidates)
    return PlanResponse.model_validate({**answer, "assumptions": assumptions})


@router.post(
    "/plan/grid",
    response_model=PlanGridResponse,
    responses={
        429: {"model": ErrorResponse, "description": "PDROUTE_MAX_CONCURRENT_GRIDS grids in progress"}
    },
)
def post_plan_grid(body: PlanGridRequest, grid_limit: GridLimitDep) -> PlanGridResponse:
    """S_p, S_d and the winning policy over prompt lengths (rows) x output lengths (columns).

    At most ``PDROUTE_MAX_CONCURRENT_GRIDS`` grids are computed at once; beyond that the answer
    is 429 with ``Retry-After`` (``app.grid_limit``)."""
    with grid_limit.slot():
        model = _model(body.curves, body.throughput_fit, body.memory_gb, body.weights_gb)
        grid = solve_grid(model, body.machines, body.prompt_lens, body.output_lens)
    return PlanGridResponse.model_validate(
        {"curves": model.name, "throughput_fit": model.throughput_fit, **grid_to_dict(grid)}
    )
