"""Attention over the paged KV cache: torch SDPA over gathered blocks, or flash-attn when installed.

SDPA path (any device). Grouped-query attention is computed without repeating K/V: the
``G = num_q_heads / num_kv_heads`` query heads that share a KV head are folded into the query
length, so ``q`` becomes ``[..., num_kv_heads, G * num_queries, head_dim]`` against
``k, v: [..., num_kv_heads, num_keys, head_dim]``. This is exact (every query row is an
independent softmax over the same keys) and keeps every SDPA backend usable.

- fresh prompt (nothing cached): causal SDPA on the chunk's own K/V (``enable_gqa``), as
  engines run a first prefill (the K/V were also written to the cache for later steps);
- prompt chunk after cached tokens: gather the sequence's blocks, explicit end-aligned causal mask;
- decodes: gather every sequence's blocks into ``[B, L, kv_heads, head_dim]``, no mask when
  all contexts have the same length (the profiler's case), a padding mask otherwise.

The gather copies the context once per layer; a paged kernel (flash-attn's
``flash_attn_with_kvcache`` with ``block_table``) reads blocks in place, so decode attention is
somewhat slower on the SDPA path. The profile records which path ran.
"""

from __future__ import annotations

import importlib
from types import ModuleType

import torch
import torch.nn.functional as F

from profiling.batch import ForwardBatch
from profiling.kv_cache import PagedKVCache

BACKENDS = ("auto", "sdpa", "flash-attn")
FLASH_BLOCK_SIZE = 256  # flash-attn 2's paged KV needs block sizes divisible by 256


def load_flash_attn() -> ModuleType | None:
    """The ``flash_attn`` module if it is installed and loads, else None."""
    try:
        return importlib.import_module("flash_attn")
    except (ImportError, OSError):  # not installed, or built against another torch/CUDA
        return None


def _grouped(q: torch.Tensor, num_kv_heads: int) -> torch.Tensor:
    """``[..., T, Hq, D]`` -> ``[..., Hkv, G * T, D]`` (query heads of a KV group stacked on T)."""
    *lead, t, hq, d = q.shape
    g = hq // num_kv_heads
    q = q.reshape(*lead, t, num_kv_heads, g, d).movedim(-4, -2)  # [..., Hkv, G, T, D]
    return q.reshape(*lead, num_kv_heads, g * t, d)


def _ungrouped(o: torch.Tensor, num_tokens: int) -> torch.Tensor:
    """Inverse of ``_grouped``, flattened to ``[..., T, Hq * D]``."""
    *lead, hkv, gt, d = o.shape
    o = o.reshape(*lead, hkv, gt // num_tokens, num_tokens, d).movedim(-2, -4)  # [..., T, Hkv, G, D]
    return o.reshape(*lead, num_tokens, -1)


def _sdpa(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, batch: ForwardBatch, cache: PagedKVCache, layer: int
) -> list[torch.Tensor]:
    hkv = k.shape[1]
    outs = []
    for seg in batch.prefills:
        s = slice(seg.token_start, seg.token_start + seg.num_tokens)
        if seg.mask is None:
            # 4-D inputs: the fused CUDA kernels take [batch, heads, tokens, head_dim] only.
            qs, ks, vs = (x[None, s].transpose(1, 2) for x in (q, k, v))
            o = F.scaled_dot_product_attention(qs, ks, vs, is_causal=True, enable_gqa=True)  # [1, Hq, T, D]
            outs.append(o[0].transpose(0, 1).reshape(seg.num_tokens, -1))
        else:
            kc, vc = cache.gather(layer, seg.block_table, seg.num_cached + seg.num_tokens)
            o = F.scaled_dot_product_attention(
                _grouped(q[None, s], hkv), kc.transpose(1, 2), vc.transpose(1, 2), attn_mask=seg.mask
            )  # [1, Hkv, G * T, D]
            outs.append(_ungrouped(o[0], seg.num_tokens))
    if batch.decode is not None:
        dec = batch.decode
        qd = q[dec.token_start : dec.token_start + dec.num_seqs, None]  # [B, 1, Hq, D]
        kc, vc = cache.gather(layer, dec.block_tables, dec.max_context_len)
        o = F.scaled_dot_product_attention(
            _grouped(qd, hkv), kc.transpose(1, 2), vc.transpose(1, 2), attn_mask=dec.mask
        )  # [B, Hkv, G, D]
        outs.append(_ungrouped(o, 1).reshape(dec.num_seqs, -1))
    return outs


def _flash(
    fa: ModuleType,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    batch: ForwardBatch,
    cache: PagedKVCache,
    layer: int,
) -> list[torch.Tensor]:
    k_cache, v_cache = cache.layer(layer)
    outs = []
    for seg in batch.prefills:
        s = slice(seg.token_start, seg.token_start + seg.num_tokens)
        if seg.num_cached == 0:
            o = fa.flash_attn_func(q[None, s], k[None, s], v[None, s], causal=True)
        else:  # causal is aligned to the end of the cache, as for the SDPA mask
            o = fa.flash_attn_with_kvcache(
                q[None, s],
                k_cache,
                v_cache,
                cache_seqlens=seg.seq_len,
                block_table=seg.block_table,
                causal=True,
            )
        outs.append(o[0].reshape(seg.num_tokens, -1))
    if batch.decode is not None:
        dec = batch.decode
        qd = q[dec.token_start : dec.token_start + dec.num_seqs, None]
        o = fa.flash_attn_with_kvcache(
            qd, k_cache, v_cache, cache_seqlens=dec.context_lens, block_table=dec.block_tables, causal=True
        )
        outs.append(o.reshape(dec.num_seqs, -1))
    return outs


def paged_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    batch: ForwardBatch,
    cache: PagedKVCache,
    layer: int,
    flash_attn: ModuleType | None,
) -> torch.Tensor:
    """Attention output ``[num_tokens, num_q_heads * head_dim]`` of one layer.

    ``q: [T, Hq, D]``, ``k, v: [T, Hkv, D]`` are the step's new tokens (already RoPE'd and
    written to the cache). Outputs follow the token layout of ``batch``.
    """
    outs = (
        _sdpa(q, k, v, batch, cache, layer)
        if flash_attn is None
        else _flash(flash_attn, q, k, v, batch, cache, layer)
    )
    return outs[0] if len(outs) == 1 else torch.cat(outs)
