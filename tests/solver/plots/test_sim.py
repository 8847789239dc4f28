"""The simulator's figures are real, non-blank PNG files."""

from __future__ import annotations

from pathlib import Path

from solver.plots.sim import plot_e2e_cdf, plot_latency_vs_load
from solver.sim import SweepResult
from tests.solver.plots.png import assert_real_png


def test_plots_are_real_pngs(sweep: SweepResult, tmp_path: Path) -> None:
    assert_real_png(plot_latency_vs_load(sweep, tmp_path / "a" / "load.png"))
    assert_real_png(plot_e2e_cdf(sweep, 7.0, tmp_path / "cdf.png"))
