"""A check that a file is a real PNG with something drawn on it (shared by plot tests)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image


def assert_real_png(path: Path, min_colours: int = 4) -> None:
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with Image.open(path) as img:
        pixels = np.asarray(img.convert("RGB"))
    assert pixels.shape[0] > 200 and pixels.shape[1] > 300
    non_white = np.any(pixels < 250, axis=2).mean()
    assert non_white > 0.01  # something is drawn
    assert len(np.unique(pixels.reshape(-1, 3), axis=0)) >= min_colours  # lines in colours
