"""Checks of the requested grids against the model, and the KV cache they need.

Run before any weight is built, so a grid the model cannot serve fails in one line at once.
"""

from __future__ import annotations

from profiling.errors import ProfilingError
from profiling.models import ModelConfig
from solver.profile_result import ProfileGrids

REQUIRED_GRIDS = ("prompt_lens", "kv_lens", "batch_sizes", "chunk_sizes", "decode_batches")
OPTIONAL_GRIDS = ("prefix_lens",)  # empty: that table is not measured


def validate_grids(grids: ProfileGrids) -> None:
    """Raise ``ProfilingError`` unless every grid is a non-empty list of positive integers
    (``prefix_lens`` may be empty)."""
    for name in (*REQUIRED_GRIDS, *OPTIONAL_GRIDS):
        values = getattr(grids, name)
        bad = any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in values)
        if bad or (not values and name in REQUIRED_GRIDS):
            raise ProfilingError(f"grid {name} must be a non-empty list of positive integers, got {values!r}")
    if grids.interference_kv_len < 1:
        raise ProfilingError(f"interference_kv_len must be >= 1, got {grids.interference_kv_len}")
    if grids.warmup < 0 or grids.repeats < 1:
        raise ProfilingError(f"need warmup >= 0 and repeats >= 1, got {grids.warmup} and {grids.repeats}")


def positions_needed(grids: ProfileGrids) -> int:
    """The longest context of any point: a prompt, a decode's kv_len + 1, a mixed step's
    chunk beside decodes at ``interference_kv_len + 1`` (the chunk uses its own positions), or
    a chunk after the longest cached prefix."""
    return max(
        max(grids.prompt_lens),
        max(grids.kv_lens) + 1,
        max(grids.chunk_sizes) + grids.interference_kv_len + 1,
        max(grids.prefix_lens, default=0) + max(grids.chunk_sizes),
    )


def check_context(grids: ProfileGrids, config: ModelConfig) -> None:
    """Refuse grids longer than the model's context: such points measure nothing a deployment
    runs, and absurd lengths would exhaust host memory (rotary tables) before any error."""
    need = positions_needed(grids)
    if need > config.max_position_embeddings:
        raise ProfilingError(
            f"the grids need a context of {need} tokens but {config.name} supports "
            f"{config.max_position_embeddings} (max_position_embeddings); shorten the grids"
        )


def kv_capacity_tokens(grids: ProfileGrids, block_size_bound: int = 256) -> int:
    """KV tokens the cache must hold for the largest point (plus block rounding slack)."""
    return positions_needed(grids) + 2 * block_size_bound
