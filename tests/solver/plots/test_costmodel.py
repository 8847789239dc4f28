"""The four figures are real PNG files with content that follows the parameters."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from pdroute_core.params import CostModelParams, ParamsMetadata
from pdroute_core.routing.design import AnalyticalCostModel
from solver.fit import fit_profile
from solver.plots import costmodel as plots
from solver.plots.costmodel import (
    BAR_LOADS,
    BAR_PROMPT_LENS,
    COLLOCATED_COLOUR,
    DISAGGREGATED_COLOUR,
    plot_all,
    plot_decision_heatmap,
    plot_decode_curve,
)
from solver.plots.figure import save_png
from tests.solver.synthetic_profiles import synthetic_profile

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
NAMES = ["decision_heatmap.png", "latency_bars.png", "transfer_vs_interference.png", "decode_curve.png"]


def _rtx4090_model(**overrides: float) -> AnalyticalCostModel:
    values = {"alpha": 0.05, "beta": 20.0, "batch_thresh": 16.0, "gamma": 0.0869, "bandwidth_GBps": 12.9}
    values.update(overrides)
    return AnalyticalCostModel(
        CostModelParams(
            alpha=values["alpha"],
            beta=values["beta"],
            batch_thresh=values["batch_thresh"],
            gamma=values["gamma"],
            bandwidth_GBps=values["bandwidth_GBps"],
            bytes_per_token=147456,
            metadata=ParamsMetadata(model="test-model", hardware="RTX 4090"),
        )
    )


def _pixels(path: Path) -> np.ndarray:
    with Image.open(path) as img:
        rgb: np.ndarray = np.asarray(img.convert("RGB"), dtype=np.int16)
    return rgb


def _share_of_colour(rgb: np.ndarray, hex_colour: str) -> float:
    target = np.array([int(hex_colour[i : i + 2], 16) for i in (1, 3, 5)], dtype=np.int16)
    close = np.abs(rgb - target).max(axis=2) <= 8
    return float(close.mean())


def test_plot_all_writes_four_real_non_blank_pngs(tmp_path: Path) -> None:
    profile = synthetic_profile(batch_thresh=12.0)
    model = AnalyticalCostModel(fit_profile(profile)[0])
    paths = plots.plot_all(model, tmp_path / "nested" / "plots", profile=profile)
    assert [Path(p).name for p in paths] == NAMES
    for p in map(Path, paths):
        data = p.read_bytes()
        assert data[:8] == PNG_MAGIC, p
        assert len(data) > 10_000, p
        rgb = _pixels(p)
        assert rgb.shape[0] >= 400 and rgb.shape[1] >= 600, p
        # Not a single colour: many distinct colours (lines, text, fills, antialiasing).
        assert len(np.unique(rgb.reshape(-1, 3), axis=0)) > 50, p


def _figures(monkeypatch: pytest.MonkeyPatch, model: AnalyticalCostModel, tmp_path: Path) -> dict[str, Any]:
    """``plot_all``'s matplotlib figures by file name (each still written as a PNG)."""
    figures: dict[str, Any] = {}

    def keep(fig: Any, path: Path) -> Path:
        figures[path.name] = fig
        return save_png(fig, path)

    monkeypatch.setattr(plots, "save_png", keep)
    plots.plot_all(model, tmp_path, profile=synthetic_profile(batch_thresh=16.0))
    return figures


def _rgb(colour: Any) -> tuple[float, float, float]:
    from matplotlib.colors import to_rgb

    return to_rgb(colour)


def test_figures_show_what_they_claim(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    model = _rtx4090_model()
    p = model.params
    figures = _figures(monkeypatch, model, tmp_path)
    assert sorted(figures) == sorted(NAMES)
    for name, fig in figures.items():  # titled with model, hardware and params_id
        suptitle = fig.get_suptitle()
        title = suptitle or fig.axes[0].get_title()
        assert all(part in title for part in ("test-model", "RTX 4090", p.params_id)), name

    # Bars: t_collocated (red) and t_disaggregated (green) per prompt_len, output_len 50, each
    # pair marked with the router's own decision in that decision's colour.
    bars = figures["latency_bars.png"]
    marks_seen = set()
    for ax, load in zip(bars.axes, BAR_LOADS, strict=True):
        assert ax.get_title() == f"system_load {load}"
        routes = [model.route(n, 50, load) for n in BAR_PROMPT_LENS]
        red = [r.get_height() for r in ax.patches if _rgb(r.get_facecolor()) == _rgb(COLLOCATED_COLOUR)]
        green = [r.get_height() for r in ax.patches if _rgb(r.get_facecolor()) == _rgb(DISAGGREGATED_COLOUR)]
        assert red == pytest.approx([t_c for _, t_c, _ in routes])
        assert green == pytest.approx([t_d for _, _, t_d in routes])
        marks = [(t.get_text(), _rgb(t.get_color())) for t in ax.texts]
        expected = [
            ("D", _rgb(DISAGGREGATED_COLOUR)) if d == "disaggregated" else ("C", _rgb(COLLOCATED_COLOUR))
            for d, _, _ in routes
        ]
        assert marks == expected
        marks_seen |= {m for m, _ in marks}
    assert marks_seen == {"C", "D"}  # break-even load ~2.1: C at load 0, D at load 8

    # Transfer (solid line) vs interference at full load (dashed), green where transfer is cheaper.
    (ax,) = figures["transfer_vs_interference.png"].axes
    lines = {line.get_label(): line for line in ax.get_lines()}
    transfer = lines[f"KV transfer ({p.bandwidth_GBps:.4g} GB/s)"]
    interference = lines["interference, load >= batch_thresh"]
    assert transfer.get_linestyle() == "-" and interference.get_linestyle() == "--"
    x = transfer.get_xdata()
    assert transfer.get_ydata() == pytest.approx(x * p.transfer_rate_ms_per_token)
    assert interference.get_ydata() == pytest.approx(x * p.gamma)
    (fill,) = ax.collections
    assert _rgb(fill.get_facecolor()[0][:3]) == _rgb(DISAGGREGATED_COLOUR)

    # Decode: the fitted two-segment curve, measured points, batch_thresh as a dashed vertical line.
    (ax,) = figures["decode_curve.png"].axes
    thresh_lines = [line for line in ax.get_lines() if line.get_label().startswith("batch_thresh")]
    assert len(thresh_lines) == 1 and thresh_lines[0].get_linestyle() == "--"
    assert list(thresh_lines[0].get_xdata()) == [p.batch_thresh, p.batch_thresh]
    fitted = next(line for line in ax.get_lines() if line.get_label().startswith("fitted"))
    b = fitted.get_xdata()
    assert fitted.get_ydata() == pytest.approx([model.t_decode_step(v) for v in b])
    assert len(ax.collections) == 4  # one scatter per measured kv_len


def test_heatmap_colours_follow_the_decision(tmp_path: Path) -> None:
    # The design's RTX 4090 figures: break-even load ~2.1, so most of loads 0..32 is green.
    mixed = _pixels(plot_decision_heatmap(_rtx4090_model(), tmp_path / "mixed.png"))
    assert _share_of_colour(mixed, DISAGGREGATED_COLOUR) > 0.3
    assert _share_of_colour(mixed, COLLOCATED_COLOUR) > 0.02
    # A KV path 1000x slower and one output token (so the decode terms hardly differ): the
    # transfer never pays off, and only the legend swatch is green.
    slow_model = _rtx4090_model(bandwidth_GBps=0.0129)
    slow = _pixels(plot_decision_heatmap(slow_model, tmp_path / "slow.png", output_len=1))
    assert _share_of_colour(slow, DISAGGREGATED_COLOUR) < 0.01
    assert _share_of_colour(slow, COLLOCATED_COLOUR) > 0.3


def test_decode_curve_shows_measured_points_only_with_a_profile(tmp_path: Path) -> None:
    profile = synthetic_profile(batch_thresh=200.0)  # flat: batch_thresh is a lower bound
    model = AnalyticalCostModel(fit_profile(profile)[0])
    bare = plot_decode_curve(model, tmp_path / "bare.png")
    measured = plot_decode_curve(model, tmp_path / "measured.png", profile)
    assert bare.read_bytes() != measured.read_bytes()
    # matplotlib's first colour cycle entry (#1f77b4) marks the first kv_len's points.
    assert _share_of_colour(_pixels(measured), "#1f77b4") > _share_of_colour(_pixels(bare), "#1f77b4")


def test_plots_work_for_params_without_a_fit_report(tmp_path: Path) -> None:
    # Hand-written params (no fit_quality, batch_thresh far beyond the default load range).
    paths = plot_all(_rtx4090_model(batch_thresh=300.0), tmp_path, output_len=20, chunk_size=64)
    assert all(p.read_bytes()[:8] == PNG_MAGIC for p in paths)


@pytest.mark.parametrize(
    "module",
    [
        "pdroute_core.routing.design",
        "solver.fit",
        "solver.params",
        "solver.plan",
        "solver.plots",
        "solver.sim",
    ],
)
def test_core_modules_do_not_import_matplotlib(module: str) -> None:
    code = f"import sys, {module}; sys.exit('matplotlib' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0
