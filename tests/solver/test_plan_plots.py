"""Planner figures (solver/plan_plots.py): real PNG files with drawn content."""

from __future__ import annotations

from pathlib import Path

from PIL import Image

from solver.curves import build_model
from solver.curveset import load_builtin_curve_set
from solver.plan import solve_grid
from solver.plan_plots import plot_curve_fits, write_grid_figures
from tests.solver.curve_factory import make_curve_set

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _assert_drawn_png(path: Path, min_colours: int = 8) -> None:
    assert path.read_bytes()[:8] == PNG_MAGIC
    with Image.open(path) as image:
        colours = image.convert("RGB").getcolors(maxcolors=1 << 20)
    assert colours is not None and len(colours) >= min_colours  # more than a blank canvas


def test_grid_figures_are_written(tmp_path: Path) -> None:
    grid = solve_grid(build_model(make_curve_set()), 10, [50, 100, 400, 9000], [20, 50, 200])
    paths = write_grid_figures(grid, "test", tmp_path / "out")
    assert [p.name for p in paths] == ["heatmap_s_p.png", "heatmap_s_d.png", "policy_map.png"]
    for path in paths:
        _assert_drawn_png(path)


def test_curve_fit_figure_for_each_builtin_set(tmp_path: Path) -> None:
    for name in ("bloom-176b-8xh100", "llama2-70b-8xh100"):
        curves = load_builtin_curve_set(name)
        path = plot_curve_fits(curves, tmp_path / f"{name}.png")
        _assert_drawn_png(path)
