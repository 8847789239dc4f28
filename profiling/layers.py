"""The transformer's layers (Llama / Qwen2 / Qwen3 family), named as in Hugging Face checkpoints.

Parameter names match ``transformers``' ``LlamaForCausalLM`` / ``Qwen3ForCausalLM`` state dicts
(``model.layers.3.self_attn.q_proj.weight``, ...), so a safetensors checkpoint loads by name.
Formulas follow the same implementations: RMSNorm in float32 then cast back; rotary embeddings
in the "rotate half" layout; Qwen3 applies an RMSNorm over head_dim to q and k before RoPE;
SwiGLU ``down(silu(gate(x)) * up(x))``.
"""

from __future__ import annotations

import math
from types import ModuleType

import torch
import torch.nn.functional as F
from torch import nn

from profiling.attention import paged_attention
from profiling.batch import ForwardBatch
from profiling.kv_cache import PagedKVCache
from profiling.models import ModelConfig, RopeScaling


class RMSNorm(nn.Module):
    """``x / sqrt(mean(x^2) + eps) * weight`` over the last dimension (computed in float32)."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * xf.to(x.dtype)


def rope_inv_freq(config: ModelConfig) -> torch.Tensor:
    """Rotary inverse frequencies ``theta^(-2i/d)``, with Llama 3.1's scaling when configured."""
    d = config.head_dim
    inv_freq = 1.0 / (config.rope_theta ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
    if config.rope_scaling is not None:
        inv_freq = _llama3_scale(inv_freq, config.rope_scaling)
    return inv_freq


def _llama3_scale(inv_freq: torch.Tensor, sc: RopeScaling) -> torch.Tensor:
    # transformers' _compute_llama3_parameters: long wavelengths are divided by `factor`, short
    # ones kept, and the band between is interpolated smoothly.
    low_wavelen = sc.original_max_position_embeddings / sc.low_freq_factor
    high_wavelen = sc.original_max_position_embeddings / sc.high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_wavelen, inv_freq / sc.factor, inv_freq)
    smooth = (sc.original_max_position_embeddings / wavelen - sc.low_freq_factor) / (
        sc.high_freq_factor - sc.low_freq_factor
    )
    smoothed = (1 - smooth) * scaled / sc.factor + smooth * scaled
    is_medium = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
    return torch.where(is_medium, smoothed, scaled)


class Rotary:
    """cos/sin tables for positions ``0 .. max_positions - 1`` (``[max_positions, head_dim]``)."""

    def __init__(self, config: ModelConfig, max_positions: int, device: torch.device, dtype: torch.dtype):
        freqs = torch.outer(torch.arange(max_positions, dtype=torch.float64), rope_inv_freq(config))
        emb = torch.cat((freqs, freqs), dim=-1)
        self.cos = emb.cos().to(device=device, dtype=dtype)
        self.sin = emb.sin().to(device=device, dtype=dtype)

    def tables(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``cos, sin`` of shape ``[num_tokens, 1, head_dim]`` (broadcast over heads)."""
        return self.cos[positions][:, None], self.sin[positions][:, None]


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate ``x: [T, heads, head_dim]`` by position ("rotate half" layout)."""
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


class Attention(nn.Module):
    def __init__(self, config: ModelConfig, layer_index: int) -> None:
        super().__init__()
        h, d = config.hidden_size, config.head_dim
        self.layer_index = layer_index
        self.num_q_heads, self.num_kv_heads, self.head_dim = config.num_q_heads, config.num_kv_heads, d
        bias = config.attention_bias
        self.q_proj = nn.Linear(h, config.num_q_heads * d, bias=bias)
        self.k_proj = nn.Linear(h, config.num_kv_heads * d, bias=bias)
        self.v_proj = nn.Linear(h, config.num_kv_heads * d, bias=bias)
        self.o_proj = nn.Linear(config.num_q_heads * d, h, bias=False)
        self.q_norm = RMSNorm(d, config.rms_norm_eps) if config.has_qk_norm else None
        self.k_norm = RMSNorm(d, config.rms_norm_eps) if config.has_qk_norm else None

    def forward(
        self,
        x: torch.Tensor,
        rope: tuple[torch.Tensor, torch.Tensor],
        batch: ForwardBatch,
        cache: PagedKVCache,
        flash_attn: ModuleType | None,
    ) -> torch.Tensor:
        t = x.shape[0]
        q = self.q_proj(x).view(t, self.num_q_heads, self.head_dim)
        k = self.k_proj(x).view(t, self.num_kv_heads, self.head_dim)
        v = self.v_proj(x).view(t, self.num_kv_heads, self.head_dim)
        if self.q_norm is not None and self.k_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = apply_rope(q, *rope), apply_rope(k, *rope)
        cache.write(self.layer_index, batch.slot_mapping, k, v)
        attn = paged_attention(q, k, v, batch, cache, self.layer_index, flash_attn)
        out: torch.Tensor = self.o_proj(attn)
        return out


class MLP(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))
        return out


class DecoderLayer(nn.Module):
    def __init__(self, config: ModelConfig, layer_index: int) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.self_attn = Attention(config, layer_index)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.mlp = MLP(config)

    def forward(
        self,
        x: torch.Tensor,
        rope: tuple[torch.Tensor, torch.Tensor],
        batch: ForwardBatch,
        cache: PagedKVCache,
        flash_attn: ModuleType | None,
    ) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), rope, batch, cache, flash_attn)
        out: torch.Tensor = x + self.mlp(self.post_attention_layernorm(x))
        return out


class DecoderStack(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        # An explicit (uninitialised) weight skips nn.Embedding's reset_parameters: its normal_
        # on the meta device pulls in torch's reference kernels (seconds of start-up).
        weight = torch.empty(config.vocab_size, config.hidden_size)
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size, _weight=weight)
        self.layers = nn.ModuleList(DecoderLayer(config, i) for i in range(config.num_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)


class CausalLM(nn.Module):
    """Embeddings, decoder layers, final norm and LM head (logits for each sequence's last token)."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        self.model = DecoderStack(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)

    def tie_weights(self) -> None:
        if self.config.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight

    def forward(
        self, batch: ForwardBatch, cache: PagedKVCache, rotary: Rotary, flash_attn: ModuleType | None
    ) -> torch.Tensor:
        """Logits ``[num_sequences, vocab]`` of the last token of each sequence in ``batch``."""
        x = self.model.embed_tokens(batch.input_ids)
        rope = rotary.tables(batch.positions)
        for layer in self.model.layers:
            x = layer(x, rope, batch, cache, flash_attn)
        logits: torch.Tensor = self.lm_head(self.model.norm(x[batch.logits_indices]))
        return logits
