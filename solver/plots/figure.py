"""A matplotlib ``Figure`` on an Agg canvas, and saving it as a PNG: shared by every figure module.

Figures are built on ``matplotlib.figure.Figure`` with an Agg canvas, never through pyplot: no
global figure state, so drawing is safe from several threads. matplotlib is imported inside the
functions, so importing this module never loads it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from matplotlib.figure import Figure

DPI = 110  # dots per inch: an 8 x 6.5 in figure is 880 x 715 pixels


def new_figure(width_in: float, height_in: float, *, constrained: bool = True) -> Figure:
    """A blank ``width_in`` x ``height_in`` inch figure at ``DPI``, with constrained layout unless
    ``constrained`` is False (the caller then sets the margins)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width_in, height_in), dpi=DPI, layout="constrained" if constrained else None)
    FigureCanvasAgg(fig)
    return fig


def save_png(fig: Figure, path: str | os.PathLike[str]) -> Path:
    """Write ``fig`` to ``path`` as a PNG at the figure's DPI (parent folders created); the path."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, format="png")
    return out
