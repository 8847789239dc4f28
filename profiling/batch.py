"""What one forward step runs: the token layout and the attention metadata (``ForwardBatch``).

A step is any mix of *prefill segments* (several tokens of one sequence, attending causally
to themselves and to that sequence's cached tokens) and one *decode segment* (one new token
per sequence, attending to all of its cached tokens). Tokens are laid out prefills first, then
decodes, as chunked-prefill engines pack a mixed step. Everything here is prepared once on the
host and copied to the device, so a step can be replayed (and captured in a CUDA graph) without
touching Python lists again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from profiling.errors import ProfilingError
from profiling.kv_cache import slots_for


@dataclass(frozen=True)
class SequenceChunk:
    """New tokens of one sequence for one step."""

    token_ids: tuple[int, ...]  # the tokens to run (one for a decode)
    num_cached: int  # tokens of this sequence already in the KV cache (their positions come first)
    block_table: tuple[int, ...]  # KV blocks of the sequence, covering num_cached + len(token_ids)


@dataclass(frozen=True)
class PrefillSegment:
    """A run of prompt tokens of one sequence."""

    token_start: int  # offset of its first token in the step
    num_tokens: int  # tokens in the chunk
    num_cached: int  # earlier tokens of the sequence, read from the cache
    block_table: torch.Tensor  # [1, num_blocks] int32
    seq_len: torch.Tensor  # [1] int32: num_cached + num_tokens (flash-attn's cache_seqlens)
    # [G * num_tokens, num_cached + num_tokens] bool, True = may attend (queries grouped per KV
    # head, see profiling.attention); None for a fresh prompt, which uses the causal kernel.
    mask: torch.Tensor | None


@dataclass(frozen=True)
class DecodeSegment:
    """One new token for each of ``num_seqs`` sequences."""

    token_start: int  # offset of the first decode token in the step
    num_seqs: int  # decode sequences (B)
    block_tables: torch.Tensor  # [B, max_blocks] int32 (padded with block 0)
    context_lens: torch.Tensor  # [B] int32: cached tokens + the new one
    max_context_len: int  # longest context, the gathered length
    mask: torch.Tensor | None  # [B, 1, 1, max_context_len] bool; None when all lengths are equal


@dataclass(frozen=True)
class ForwardBatch:
    """Device tensors of one step."""

    input_ids: torch.Tensor  # [num_tokens] int64
    positions: torch.Tensor  # [num_tokens] int64
    slot_mapping: torch.Tensor  # [num_tokens] int64: cache slot each new token's K/V is written to
    logits_indices: torch.Tensor  # [num_seqs] int64: last token of each sequence (LM head rows)
    prefills: tuple[PrefillSegment, ...]
    decode: DecodeSegment | None

    @property
    def num_tokens(self) -> int:
        return int(self.input_ids.shape[0])


def _check(chunk: SequenceChunk, block_size: int) -> list[int]:
    if not chunk.token_ids or chunk.num_cached < 0:
        raise ProfilingError(f"a sequence chunk needs tokens and num_cached >= 0, got {chunk!r:.80}")
    return slots_for(chunk.block_table, chunk.num_cached, len(chunk.token_ids), block_size)


def prepare_batch(
    prefills: Sequence[SequenceChunk],
    decodes: Sequence[SequenceChunk],
    *,
    block_size: int,
    num_queries_per_kv: int,
    device: torch.device,
) -> ForwardBatch:
    """Lay out ``prefills`` then ``decodes`` (each decode chunk holds exactly one token)."""
    if not prefills and not decodes:
        raise ProfilingError("a step needs at least one sequence")
    ids: list[int] = []
    positions: list[int] = []
    slots: list[int] = []
    last: list[int] = []

    def i32(rows: list[list[int]] | list[int]) -> torch.Tensor:
        return torch.tensor(rows, dtype=torch.int32, device=device)

    segments: list[PrefillSegment] = []
    for chunk in prefills:
        start, n, cached = len(ids), len(chunk.token_ids), chunk.num_cached
        slots += _check(chunk, block_size)
        ids += chunk.token_ids
        positions += range(cached, cached + n)
        last.append(len(ids) - 1)
        mask = None
        if cached:
            # Query i sits at position cached + i and sees keys 0 .. cached + i (causal, aligned
            # to the end of the context); rows repeat once per query head of a KV group.
            q_pos = torch.arange(cached, cached + n, device=device)[:, None]
            mask = (torch.arange(cached + n, device=device)[None, :] <= q_pos).repeat(num_queries_per_kv, 1)
        segments.append(
            PrefillSegment(start, n, cached, i32([list(chunk.block_table)]), i32([cached + n]), mask)
        )

    decode = None
    if decodes:
        start = len(ids)
        for chunk in decodes:
            if len(chunk.token_ids) != 1:
                raise ProfilingError(f"a decode chunk holds one token, got {len(chunk.token_ids)}")
            slots += _check(chunk, block_size)
            ids += chunk.token_ids
            positions.append(chunk.num_cached)
            last.append(len(ids) - 1)
        lens = [c.num_cached + 1 for c in decodes]
        width = max(len(c.block_table) for c in decodes)
        tables = [list(c.block_table) + [0] * (width - len(c.block_table)) for c in decodes]
        max_len = max(lens)
        mask = None
        if min(lens) != max_len:
            context = torch.tensor(lens, device=device)
            mask = (torch.arange(max_len, device=device)[None, :] < context[:, None])[:, None, None, :]
        decode = DecodeSegment(start, len(decodes), i32(tables), i32(lens), max_len, mask)

    def i64(values: list[int]) -> torch.Tensor:
        return torch.tensor(values, dtype=torch.int64, device=device)

    return ForwardBatch(i64(ids), i64(positions), i64(slots), i64(last), tuple(segments), decode)
