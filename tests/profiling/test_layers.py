"""Rotary frequencies (the one piece the dense reference shares with the engine) and RMSNorm."""

from __future__ import annotations

import dataclasses
import math

import torch

from profiling.layers import RMSNorm, apply_rope, rope_inv_freq
from profiling.models import PRESETS, RopeScaling


def test_plain_rope_frequencies() -> None:
    cfg = PRESETS["tiny"]
    f = rope_inv_freq(cfg)
    expected = [cfg.rope_theta ** (-2 * i / cfg.head_dim) for i in range(cfg.head_dim // 2)]
    torch.testing.assert_close(f, torch.tensor(expected, dtype=torch.float64))


def test_llama3_scaling_by_band() -> None:
    """High frequencies untouched, low ones divided by the factor, the band between smoothed."""
    cfg = PRESETS["llama-3.1-8b"]
    plain = rope_inv_freq(dataclasses.replace(cfg, rope_scaling=None))
    scaled = rope_inv_freq(cfg)
    sc = cfg.rope_scaling
    assert isinstance(sc, RopeScaling)
    wavelen = 2 * math.pi / plain
    high = wavelen < sc.original_max_position_embeddings / sc.high_freq_factor
    low = wavelen > sc.original_max_position_embeddings / sc.low_freq_factor
    mid = ~high & ~low
    assert high.any() and low.any() and mid.any()
    torch.testing.assert_close(scaled[high], plain[high])
    torch.testing.assert_close(scaled[low], plain[low] / sc.factor)
    assert ((scaled[mid] < plain[mid]) & (scaled[mid] > plain[mid] / sc.factor)).all()


def test_rope_is_a_rotation_by_position() -> None:
    x = torch.randn(3, 2, 8, dtype=torch.float64)
    angle = torch.tensor([0.0, 0.5, 1.0], dtype=torch.float64)[:, None, None] * torch.ones(
        4, dtype=torch.float64
    )
    cos, sin = torch.cat((angle.cos(),) * 2, -1), torch.cat((angle.sin(),) * 2, -1)
    y = apply_rope(x, cos, sin)
    torch.testing.assert_close(y[0], x[0])  # position 0
    torch.testing.assert_close(y.norm(dim=-1), x.norm(dim=-1))  # rotations keep the norm


def test_rms_norm() -> None:
    norm = RMSNorm(4, eps=0.0)
    with torch.no_grad():
        norm.weight.copy_(torch.tensor([1.0, 2.0, 1.0, 1.0]))
    out = norm(torch.tensor([[3.0, 3.0, -3.0, 3.0]]))
    torch.testing.assert_close(out, torch.tensor([[1.0, 2.0, -1.0, 1.0]]))
