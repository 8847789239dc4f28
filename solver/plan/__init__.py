"""The P/D capacity planner: how many machines prefill, how many decode, at which batches.

The flow, one way: a curve set (``curvesets``: built-in JSON or a user's file; or
``profile_curves``: derived from a pdroute profile for one workload) is fitted (``curves``, the
fits; ``fitted``, the ``FittedCurves`` and the cache of the built-in fits); ``baseline`` gives the
per-machine limits and the co-located policy, ``split`` the CUF and TUF candidates,
``reference`` the direct-search optimum; ``plan`` assembles the answer for one workload or a
grid, ``recommend`` says what to deploy, and ``report`` turns it into plain JSON values.
Figures are in ``solver.plots.plan``. Every formula and its source is in ``docs/planning.md``.

    from solver.plan import builtin_fit, solve_plan
    plan = solve_plan(builtin_fit("bloom-176b-8xh100"), machines=64, prompt_len=1024, output_len=256)
"""

from solver.plan.baseline import Baseline, Limits, phase_limits, solve_baseline
from solver.plan.curves import THROUGHPUT_FITS, Throughput, ThroughputFitKind, throughput_at
from solver.plan.curvesets import (
    CurveSet,
    PhaseCurves,
    Series,
    builtin_curve_set_names,
    curve_set_from_mapping,
    curve_set_to_mapping,
    load_builtin_curve_set,
    load_curve_set,
    resolve_curve_set,
)
from solver.plan.fitted import FittedCurves, builtin_fit, fit_curves, with_machine
from solver.plan.plan import Plan, PlanGrid, solve_grid, solve_plan
from solver.plan.profile_curves import (
    builtin_profile_names,
    curve_set_from_profile,
    load_builtin_profile,
    resolve_profile,
)
from solver.plan.recommend import Recommendation, recommend
from solver.plan.reference import ReferenceOptimum, reference_optimum
from solver.plan.report import grid_to_dict, model_parameters, plan_to_dict
from solver.plan.split import Candidate, CandidateTable

__all__ = [
    "THROUGHPUT_FITS",
    "Baseline",
    "Candidate",
    "CandidateTable",
    "CurveSet",
    "FittedCurves",
    "Limits",
    "PhaseCurves",
    "Plan",
    "PlanGrid",
    "Recommendation",
    "ReferenceOptimum",
    "Series",
    "Throughput",
    "ThroughputFitKind",
    "builtin_curve_set_names",
    "builtin_fit",
    "builtin_profile_names",
    "curve_set_from_mapping",
    "curve_set_from_profile",
    "curve_set_to_mapping",
    "fit_curves",
    "grid_to_dict",
    "load_builtin_curve_set",
    "load_builtin_profile",
    "load_curve_set",
    "model_parameters",
    "phase_limits",
    "plan_to_dict",
    "recommend",
    "reference_optimum",
    "resolve_curve_set",
    "resolve_profile",
    "solve_baseline",
    "solve_grid",
    "solve_plan",
    "throughput_at",
    "with_machine",
]
