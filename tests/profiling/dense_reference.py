"""A plain transformer forward without any KV cache, in float64, for checking the paged engine.

Written independently of ``profiling.layers``/``profiling.attention``: it reads the same
weights by their Hugging Face names, repeats K/V heads explicitly (``repeat_kv``), applies
RoPE pair by pair and masks a full ``[T, T]`` score matrix. Only the rotary inverse
frequencies are shared (``rope_inv_freq``), which ``test_layers`` checks on its own.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from profiling.layers import CausalLM, rope_inv_freq


def _rms(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * w


def _rope(x: torch.Tensor, positions: torch.Tensor, inv_freq: torch.Tensor) -> torch.Tensor:
    """``x: [T, heads, D]``; element ``i`` pairs with ``i + D/2`` and rotates by ``pos * f_i``."""
    half = x.shape[-1] // 2
    angle = positions[:, None, None] * inv_freq[None, None, :]  # [T, 1, D/2]
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat((x1 * angle.cos() - x2 * angle.sin(), x2 * angle.cos() + x1 * angle.sin()), dim=-1)


def dense_logits(model: CausalLM, token_ids: Sequence[int]) -> torch.Tensor:
    """Logits ``[T, vocab]`` (float64) of every position of one sequence."""
    cfg = model.config
    w = {k: v.detach().to("cpu", torch.float64) for k, v in model.state_dict().items()}
    if cfg.tie_word_embeddings:
        w["lm_head.weight"] = w["model.embed_tokens.weight"]
    t, d, g = len(token_ids), cfg.head_dim, cfg.num_q_heads // cfg.num_kv_heads
    positions = torch.arange(t, dtype=torch.float64)
    inv_freq = rope_inv_freq(cfg).to(torch.float64)
    causal = torch.ones(t, t, dtype=torch.bool).tril()
    x = w["model.embed_tokens.weight"][torch.tensor(list(token_ids))]
    for i in range(cfg.num_layers):
        p = f"model.layers.{i}."
        h = _rms(x, w[p + "input_layernorm.weight"], cfg.rms_norm_eps)

        def proj(name: str, h: torch.Tensor = h, p: str = p) -> torch.Tensor:
            out: torch.Tensor = h @ w[p + f"self_attn.{name}.weight"].T
            bias = w.get(p + f"self_attn.{name}.bias")
            return out if bias is None else out + bias

        q = proj("q_proj").view(t, cfg.num_q_heads, d)
        k = proj("k_proj").view(t, cfg.num_kv_heads, d)
        v = proj("v_proj").view(t, cfg.num_kv_heads, d)
        if cfg.has_qk_norm:
            q = _rms(q, w[p + "self_attn.q_norm.weight"], cfg.rms_norm_eps)
            k = _rms(k, w[p + "self_attn.k_norm.weight"], cfg.rms_norm_eps)
        q, k = _rope(q, positions, inv_freq), _rope(k, positions, inv_freq)
        k, v = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)  # repeat_kv
        scores = torch.einsum("qhd,khd->hqk", q, k) / math.sqrt(d)
        probs = scores.masked_fill(~causal, float("-inf")).softmax(-1)
        attn = torch.einsum("hqk,khd->qhd", probs, v).reshape(t, -1)
        x = x + attn @ w[p + "self_attn.o_proj.weight"].T
        h = _rms(x, w[p + "post_attention_layernorm.weight"], cfg.rms_norm_eps)
        gate, up = h @ w[p + "mlp.gate_proj.weight"].T, h @ w[p + "mlp.up_proj.weight"].T
        x = x + (torch.nn.functional.silu(gate) * up) @ w[p + "mlp.down_proj.weight"].T
    logits: torch.Tensor = _rms(x, w["model.norm.weight"], cfg.rms_norm_eps) @ w["lm_head.weight"].T
    return logits
