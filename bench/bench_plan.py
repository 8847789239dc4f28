"""Capacity-planner solve times: one plan at X = 1000 and a 32 x 32 grid at X = 64.

    .venv/bin/python -m bench.bench_plan [--curves bloom-176b-8xh100] [--repeats 30]

Targets: one plan for X <= 1000 under 20 ms; a 32 x 32 grid for X = 64 under 0.5 s. Baselines,
measured in the same run, each printed as a ratio beside the absolute figure:

* the same solve written as a per-x Python loop over scalars (CUF rates, both TUF rate residuals
  and the reference rate at every x), i.e. what vectorising over x replaces; the loop's best CUF
  rate is checked against the vectorised one so that both compute the same thing;
* for the grid, also ``solve_plan`` called once per cell (what the grid did before it computed
  each prompt length's limits and peaks once per row); both grids are checked equal;
* for a request naming a built-in set, reading and fitting the set (what every ``/plan``
  request did before ``builtin_fit`` cached it) against the cached lookup.

Also prints the 32 x 32 grid at X = 1000, the largest request ``POST /plan/grid`` accepts.
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import time
from collections.abc import Callable
from importlib import resources

import numpy as np

from solver.errors import InfeasiblePlan
from solver.plan import (
    FittedCurves,
    PlanGrid,
    Throughput,
    builtin_curve_set_names,
    builtin_fit,
    fit_curves,
    load_curve_set,
    phase_limits,
    resolve_curve_set,
    solve_baseline,
    solve_grid,
    solve_plan,
    throughput_at,
)
from solver.plan.reference import search_grid

GRID_LENS = [round(128 * 2 ** (9 * k / 31)) for k in range(32)]  # 128 .. 65536, geometric


def _scalar(curve: Throughput, batch: float) -> float:
    return float(throughput_at(curve, batch))


def solve_plan_loop(model: FittedCurves, machines: int, prompt_len: int, output_len: int) -> float:
    """The per-x scalar loop: baseline, then for every x the CUF rate, both TUF residuals and the
    reference rate. Returns the best CUF rate (for the cross-check)."""
    limits = phase_limits(model, prompt_len)
    solve_baseline(model, machines, prompt_len, output_len)
    cap_p, cap_d = limits.prefill.batch, limits.decode.batch
    m = cap_p / prompt_len
    grid_p = search_grid(model.prefill.throughput, float(prompt_len), cap_p)
    grid_d = search_grid(model.decode.throughput, 1.0, cap_d)
    best_t_p = max(_scalar(model.prefill.throughput, b) for b in grid_p)
    best_t_d = max(_scalar(model.decode.throughput, b) for b in grid_d)
    best_cuf = best_ref = 0.0
    for x in range(1, machines):
        t_p = _scalar(model.prefill.throughput, cap_p)
        t_d = _scalar(model.decode.throughput, cap_d)
        best_cuf = max(best_cuf, min((machines - x) * t_p / prompt_len, x * t_d / output_len))
        n_d = min(max((machines - x) * m / x, 1.0), cap_d)  # TUF-P
        _ = (machines - x) * t_p / prompt_len - x * _scalar(model.decode.throughput, n_d) / output_len
        n_p = min(max(x * cap_d / (machines - x), 1.0), m)  # TUF-D
        _ = (machines - x) * _scalar(
            model.prefill.throughput, n_p * prompt_len
        ) / prompt_len - x * t_d / output_len
        best_ref = max(best_ref, min((machines - x) * best_t_p / prompt_len, x * best_t_d / output_len))
    return best_cuf


def _median_s(
    fn: Callable[[], object], repeats: int, clock: Callable[[], float] = time.perf_counter
) -> float:
    """Median seconds of ``fn`` by ``clock`` (wall by default; ``time.process_time`` for CPU)."""
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        started = clock()
        fn()
        times.append(clock() - started)
    return statistics.median(times)


def _grid_loop(model: FittedCurves, machines: int) -> None:
    for prompt_len in GRID_LENS:
        for output_len in GRID_LENS:
            try:
                solve_plan_loop(model, machines, prompt_len, output_len)
            except InfeasiblePlan:  # skipped, as the grid does
                continue


def _grid_per_cell(model: FittedCurves, machines: int) -> list[list[float | None]]:
    """``solve_plan`` for every cell on its own: the grid before per-row reuse. Speedups per cell."""
    rows: list[list[float | None]] = []
    for prompt_len in GRID_LENS:
        row: list[float | None] = []
        for output_len in GRID_LENS:
            try:
                row.append(solve_plan(model, machines, prompt_len, output_len).speedup)
            except InfeasiblePlan:
                row.append(None)
        rows.append(row)
    return rows


def _same_speedups(grid: PlanGrid, per_cell: list[list[float | None]]) -> bool:
    return all(
        (p is None and c is None) or (p is not None and p.speedup == c)
        for plan_row, cell_row in zip(grid.plans, per_cell, strict=True)
        for p, c in zip(plan_row, cell_row, strict=True)
    )


def _model_lines(name: str, repeats: int) -> str:
    """Reading and fitting a built-in set per request against the per-process cached fit."""
    if name not in builtin_curve_set_names():
        return f"{name} is not a built-in set: no cached fit to compare"
    path = resources.files("solver") / "data" / "curves" / f"{name}.json"
    fit_s = _median_s(lambda: fit_curves(load_curve_set(str(path))), repeats)
    cached_s = _median_s(lambda: builtin_fit(name), repeats)
    return (
        f"built-in model per request: read + fit {fit_s * 1e3:.3f} ms; cached {cached_s * 1e6:.2f} us; "
        f"read+fit/cached {fit_s / cached_s:.0f}x"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--curves", default="bloom-176b-8xh100")
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args()
    model = fit_curves(resolve_curve_set(args.curves))
    machines, prompt_len, output_len = 1000, 1024, 256

    vec = solve_plan(model, machines, prompt_len, output_len)
    loop_best = solve_plan_loop(model, machines, prompt_len, output_len)
    cuf_best = float(
        vec.candidates.rate_rps[np.char.startswith(np.array(vec.candidates.policy), "CUF")].max()
    )
    if abs(loop_best - cuf_best) > 1e-9 * cuf_best:
        raise SystemExit(f"loop and vectorised CUF disagree: {loop_best} vs {cuf_best}")

    plan_s = _median_s(lambda: solve_plan(model, machines, prompt_len, output_len), args.repeats)
    loop_s = _median_s(
        lambda: solve_plan_loop(model, machines, prompt_len, output_len), max(3, args.repeats // 5)
    )
    print(f"curves {args.curves}, throughput fit {model.throughput_fit}")
    print(
        f"one plan, X = {machines}, L_p = {prompt_len}, L_d = {output_len}: {plan_s * 1e3:.2f} ms median "
        f"(target < 20 ms: {'PASS' if plan_s < 0.020 else 'FAIL'}); per-x loop {loop_s * 1e3:.2f} ms; "
        f"loop/vectorised {loop_s / plan_s:.1f}x; {len(vec.candidates)} candidates"
    )

    for grid_machines, target in ((64, 0.5), (1000, None)):
        grid = solve_grid(model, grid_machines, GRID_LENS, GRID_LENS)
        grid_s = _median_s(functools.partial(solve_grid, model, grid_machines, GRID_LENS, GRID_LENS), 5)
        feasible = sum(p is not None for row in grid.plans for p in row)
        verdict = (
            "" if target is None else f" (target < {target:g} s: {'PASS' if grid_s < target else 'FAIL'})"
        )
        line = (
            f"32 x 32 grid, X = {grid_machines}: {grid_s:.3f} s (median of 5){verdict}; {feasible} feasible"
        )
        if grid_machines == 64:
            # CPU time of this process: what the solve costs when other jobs share the cores
            solve = functools.partial(solve_grid, model, grid_machines, GRID_LENS, GRID_LENS)
            cpu_s = _median_s(solve, 5, time.process_time)
            line += f"; CPU {cpu_s:.3f} s; load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs"
            if not _same_speedups(grid, _grid_per_cell(model, 64)):
                raise SystemExit("the grid and solve_plan per cell disagree")
            per_cell_s = _median_s(functools.partial(_grid_per_cell, model, 64), 5)
            grid_loop_s = _median_s(functools.partial(_grid_loop, model, 64), 3)
            line += (
                f"; solve_plan per cell {per_cell_s:.3f} s, per-cell/grid {per_cell_s / grid_s:.2f}x"
                f"; per-x loop {grid_loop_s:.3f} s, loop/grid {grid_loop_s / grid_s:.1f}x"
            )
        print(line)
    print(_model_lines(args.curves, args.repeats))


if __name__ == "__main__":
    main()
