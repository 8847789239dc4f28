"""Planner figures (solver/plots/plan.py): real PNG files with drawn content."""

from __future__ import annotations

from pathlib import Path

from solver.plan.curvesets import load_builtin_curve_set
from solver.plan.fitted import fit_curves
from solver.plan.plan import solve_grid
from solver.plots.plan import plot_curve_fits, write_grid_figures
from tests.solver.plan.curve_factory import make_curve_set
from tests.solver.plots.png import assert_real_png


def test_grid_figures_are_written(tmp_path: Path) -> None:
    grid = solve_grid(fit_curves(make_curve_set()), 10, [50, 100, 400, 9000], [20, 50, 200])
    paths = write_grid_figures(grid, "test", tmp_path / "out")
    assert [p.name for p in paths] == ["heatmap_s_p.png", "heatmap_s_d.png", "policy_map.png"]
    for path in paths:
        assert_real_png(path, min_colours=8)


def test_curve_fit_figure_for_each_builtin_set(tmp_path: Path) -> None:
    for name in ("bloom-176b-8xh100", "llama2-70b-8xh100"):
        curves = load_builtin_curve_set(name)
        path = plot_curve_fits(curves, tmp_path / f"{name}.png")
        assert_real_png(path, min_colours=8)
