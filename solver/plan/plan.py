"""``Plan``: the capacity planner's answer for one (X, L_p, L_d), and ``PlanGrid`` over many.

The pick is the CUF or TUF candidate with the highest sustainable rate R_s; it is compared with
the co-located baseline (speedup R_s/R_u, S_p = P_s/P_u, S_d = D_s/D_u; S_p = S_d = R_s/R_u when
the pick is flow-balanced) and with the reference optimum of a direct search (the gap is what
CUF/TUF leave on the table). Every clamp and boundary met on the way is listed in ``notes``.

Usage::

    model = fit_curves(load_builtin_curve_set("bloom-176b-8xh100"))
    plan = solve_plan(model, machines=64, prompt_len=1024, output_len=256)
    plan.best.policy, plan.speedup
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from solver.errors import InfeasiblePlan
from solver.plan.baseline import Baseline, Limits, phase_limits, solve_baseline
from solver.plan.curves import CapacityInverse, is_clamped
from solver.plan.fitted import FittedCurves
from solver.plan.reference import ReferenceOptimum, ThroughputPeaks, reference_optimum, throughput_peaks
from solver.plan.split import Candidate, CandidateTable, all_candidates, cuf_balanced_x
from solver.plan.tuf_roots import TufRoots, tuf_roots

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class Plan:
    """The planner's answer (rates in requests/s, throughputs in tokens/s over the fleet)."""

    model: FittedCurves
    machines: int  # X
    prompt_len: int  # L_p, tokens
    output_len: int  # L_d, tokens
    limits: Limits
    baseline: Baseline
    candidates: CandidateTable  # every CUF row (x = 1..X-1), then the TUF rows
    best: Candidate
    reference: ReferenceOptimum
    cuf_balanced_decode_machines: int  # integer x nearest (X - x)*n_p = x*n_d at the CUF batches
    cuf_balanced_x_real: float  # the same balance point before rounding
    tuf_roots: tuple[tuple[str, float], ...]  # (policy, continuous x) of every TUF solution
    speedup: float  # R_s / R_u
    s_p: float  # P_s / P_u
    s_d: float  # D_s / D_u
    reference_gap_rps: float  # reference rate - pick's rate (>= 0)
    notes: tuple[str, ...]  # every inexact inverse and every clamped or extrapolated throughput


def _inverse_note(what: str, inv: CapacityInverse, unit: str) -> list[str]:
    if inv.is_exact:
        return []
    beyond = (
        "never reaches the memory" if inv.fit_root is None else f"reaches it at {inv.fit_root:.4g} {unit}"
    )
    return [f"{what}: capacity fit {beyond}; took the domain upper bound {inv.batch:.4g} {unit} (inexact)"]


def _clamp_notes(model: FittedCurves, where: str, b_p: float, n_d: float) -> list[str]:
    action = "clamped to the end value" if model.throughput_fit == "piecewise" else "extrapolated"
    notes = []
    for phase, curve, batch, unit in (
        ("prefill", model.prefill.throughput, b_p, "tokens"),
        ("decode", model.decode.throughput, n_d, "requests"),
    ):
        if is_clamped(curve, batch):
            notes.append(
                f"{where}: {phase} throughput at {batch:.4g} {unit} is outside the observed "
                f"[{curve.observed_min:g}, {curve.observed_max:g}], {action}"
            )
    return notes


def _check_finite(baseline: Baseline, table: CandidateTable, reference: ReferenceOptimum) -> None:
    """Raise ``InfeasiblePlan`` when a fit drove a figure past float64 (never answer inf or NaN).

    The fitted figures (memory, throughput, rate) are checked; the other columns are ratios of
    these and of batches within the finite search domain."""
    scalars = (
        baseline.rate_rps,
        baseline.prefill_tokens_per_s,
        baseline.decode_tokens_per_s,
        baseline.memory_gb,
        reference.rate_rps,
    )
    columns = (
        table.rate_rps,
        table.prefill_tokens_per_s,
        table.decode_tokens_per_s,
        table.prefill_memory_gb,
        table.decode_memory_gb,
        table.prefill_time_util,
        table.decode_time_util,
        table.rate_residual,
    )
    if not (all(math.isfinite(v) for v in scalars) and np.isfinite(np.concatenate(columns)).all()):
        raise InfeasiblePlan(
            "numerical overflow: the fitted curves give non-finite memory or throughput figures "
            "(check the points' units and the max_batch bounds)"
        )


def _check_workload(machines: int, prompt_len: int, output_len: int) -> None:
    for name, value, least in (
        ("machines", machines, 2),
        ("prompt_len", prompt_len, 1),
        ("output_len", output_len, 1),
    ):
        if isinstance(value, bool) or not isinstance(value, int | np.integer):
            raise InfeasiblePlan(f"{name}: expected an integer, got {value!r}")
        if value < least:
            reason = (
                "no feasible x: a split needs at least 2 machines" if name == "machines" else "must be >= 1"
            )
            raise InfeasiblePlan(f"{name} = {value}: {reason}")


@dataclass(frozen=True)
class _PromptContext:
    """What depends on the prompt length only: computed once per grid row."""

    limits: Limits
    peaks: ThroughputPeaks


def _prompt_context(model: FittedCurves, prompt_len: int) -> _PromptContext:
    with np.errstate(over="ignore", invalid="ignore"):
        limits = phase_limits(model, prompt_len)
        peaks = throughput_peaks(model.prefill.throughput, model.decode.throughput, limits, prompt_len)
    return _PromptContext(limits, peaks)


def solve_plan(model: FittedCurves, machines: int, prompt_len: int, output_len: int) -> Plan:
    """Baseline, every candidate, the pick and the reference optimum for one workload."""
    _check_workload(machines, prompt_len, output_len)
    context = _prompt_context(model, int(prompt_len))
    return _solve(model, int(machines), int(prompt_len), int(output_len), context)


def _solve(
    model: FittedCurves,
    machines: int,
    prompt_len: int,
    output_len: int,
    context: _PromptContext,
    tuf_at: TufRoots | None = None,
) -> Plan:
    """``solve_plan`` for a checked workload, given its prompt length's limits and peaks (and its
    TUF roots, when a grid searched its row at once)."""
    limits = context.limits
    # an overflow (extreme fits) is reported by _check_finite, not as a numpy warning
    with np.errstate(over="ignore", invalid="ignore"):
        baseline = solve_baseline(model, machines, prompt_len, output_len)
        table, roots = all_candidates(model, limits, machines, prompt_len, output_len, tuf_at)
        if len(table) == 0:
            raise InfeasiblePlan(
                "no feasible x: no split delivers a positive request rate (the throughput curves are "
                "zero at the capacity-limited batches)"
            )
        reference = reference_optimum(
            model.prefill.throughput,
            model.decode.throughput,
            limits,
            machines,
            prompt_len,
            output_len,
            context.peaks,
        )
    _check_finite(baseline, table, reference)
    best = table.row(int(np.argmax(table.rate_rps)))
    x_bal, x_real = cuf_balanced_x(limits, machines, prompt_len)
    notes = (
        _inverse_note("prefill limit", limits.prefill, "tokens")
        + _inverse_note("decode limit", limits.decode, "requests")
        + _inverse_note("baseline concurrency", baseline.capacity, "requests")
        + _clamp_notes(model, "baseline", baseline.prefill_batch_tokens, baseline.concurrency)
        + _clamp_notes(
            model,
            f"pick ({best.policy}, x={best.decode_machines})",
            best.prefill_batch_tokens,
            best.decode_batch,
        )
        + _clamp_notes(
            model,
            f"reference (x={reference.decode_machines})",
            reference.prefill_batch_tokens,
            reference.decode_batch,
        )
    )
    return Plan(
        model=model,
        machines=machines,
        prompt_len=prompt_len,
        output_len=output_len,
        limits=limits,
        baseline=baseline,
        candidates=table,
        best=best,
        reference=reference,
        cuf_balanced_decode_machines=x_bal,
        cuf_balanced_x_real=x_real,
        tuf_roots=roots,
        speedup=best.rate_rps / baseline.rate_rps,
        s_p=best.prefill_tokens_per_s / baseline.prefill_tokens_per_s,
        s_d=best.decode_tokens_per_s / baseline.decode_tokens_per_s,
        reference_gap_rps=max(reference.rate_rps - best.rate_rps, 0.0),
        notes=tuple(notes),
    )


@dataclass(frozen=True)
class PlanGrid:
    """Plans over prompt lengths (rows) x output lengths (columns); NaN/None where infeasible."""

    machines: int
    prompt_lens: tuple[int, ...]
    output_lens: tuple[int, ...]
    s_p: FloatArray  # S_p per cell
    s_d: FloatArray  # S_d per cell
    speedup: FloatArray  # R_s / R_u per cell
    reference_speedup: FloatArray  # reference rate / R_u per cell
    policy: tuple[tuple[str | None, ...], ...]  # winning policy label per cell
    plans: tuple[tuple[Plan | None, ...], ...]
    infeasible: tuple[tuple[str | None, ...], ...]  # the reason per infeasible cell


def _row_tuf_roots(
    model: FittedCurves, machines: int, prompt_len: int, output_lens: Sequence[int], context: _PromptContext
) -> dict[int, TufRoots]:
    """TUF roots of every valid output length of one grid row, searched together."""
    valid = []
    for output_len in output_lens:
        try:
            _check_workload(machines, prompt_len, output_len)
        except InfeasiblePlan:
            continue
        valid.append(int(output_len))
    lens = sorted(set(valid))
    with np.errstate(over="ignore", invalid="ignore"):
        found = tuf_roots(model, context.limits, int(machines), prompt_len, lens)
    return dict(zip(lens, found, strict=True))


def solve_grid(
    model: FittedCurves, machines: int, prompt_lens: Sequence[int], output_lens: Sequence[int]
) -> PlanGrid:
    """``solve_plan`` for every (prompt_len, output_len); infeasible cells keep their reason.

    Raises ``InfeasiblePlan`` (with the first cell's reason) when no cell is feasible.
    """
    shape = (len(prompt_lens), len(output_lens))
    if 0 in shape:
        raise InfeasiblePlan("grid: needs at least one prompt length and one output length")
    s_p, s_d, speedup, ref = (np.full(shape, np.nan) for _ in range(4))
    plans: list[list[Plan | None]] = [[None] * shape[1] for _ in range(shape[0])]
    reasons: list[list[str | None]] = [[None] * shape[1] for _ in range(shape[0])]
    contexts: dict[int, _PromptContext | InfeasiblePlan] = {}
    row_roots: dict[int, dict[int, TufRoots]] = {}
    for i, prompt_len in enumerate(prompt_lens):
        for j, output_len in enumerate(output_lens):
            try:
                # solve_plan, with the prompt length's limits, peaks and TUF roots found once per row
                _check_workload(machines, prompt_len, output_len)
                if int(prompt_len) not in contexts:
                    try:
                        contexts[int(prompt_len)] = _prompt_context(model, int(prompt_len))
                    except InfeasiblePlan as exc:
                        contexts[int(prompt_len)] = exc
                context = contexts[int(prompt_len)]
                if isinstance(context, InfeasiblePlan):
                    raise InfeasiblePlan(str(context))
                if int(prompt_len) not in row_roots:
                    row_roots[int(prompt_len)] = _row_tuf_roots(
                        model, machines, int(prompt_len), output_lens, context
                    )
                at = row_roots[int(prompt_len)][int(output_len)]
                plan = _solve(model, int(machines), int(prompt_len), int(output_len), context, at)
            except InfeasiblePlan as exc:
                reasons[i][j] = str(exc)
                continue
            plans[i][j] = plan
            s_p[i, j], s_d[i, j], speedup[i, j] = plan.s_p, plan.s_d, plan.speedup
            ref[i, j] = plan.reference.rate_rps / plan.baseline.rate_rps
    if all(r is not None for row in reasons for r in row):
        raise InfeasiblePlan(f"grid: no feasible cell; first: {reasons[0][0]}")
    return PlanGrid(
        machines=machines,
        prompt_lens=tuple(int(p) for p in prompt_lens),
        output_lens=tuple(int(o) for o in output_lens),
        s_p=s_p,
        s_d=s_d,
        speedup=speedup,
        reference_speedup=ref,
        policy=tuple(tuple(None if p is None else p.best.policy for p in row) for row in plans),
        plans=tuple(tuple(row) for row in plans),
        infeasible=tuple(tuple(row) for row in reasons),
    )
