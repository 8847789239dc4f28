"""Model architectures for the profiler: built-in presets and Hugging Face ``config.json`` reading.

Torch-free: a ``ModelConfig`` is plain numbers, so it can be read, validated and written into a
profile without a GPU stack. The presets copy the published ``config.json`` of each model
(only the fields that shape the forward pass and the KV cache).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from profiling.errors import InvalidModelConfig


@dataclass(frozen=True)
class RopeScaling:
    """Llama 3.1's "llama3" rotary frequency scaling (HF ``rope_scaling`` with that rope_type)."""

    factor: float  # how much longer the context is than the original one
    low_freq_factor: float  # wavelengths above original_max / low_freq_factor are scaled fully
    high_freq_factor: float  # wavelengths below original_max / high_freq_factor are left alone
    original_max_position_embeddings: int  # the context length the model was first trained at


@dataclass(frozen=True)
class ModelConfig:
    """A decoder-only transformer (Llama / Qwen family: RMSNorm, RoPE, GQA, SwiGLU)."""

    name: str  # preset name or the checkpoint directory's name
    num_layers: int  # decoder layers
    hidden_size: int  # residual stream width
    num_q_heads: int  # query heads
    num_kv_heads: int  # key/value heads (GQA: num_q_heads is a multiple of it)
    head_dim: int  # width of one attention head
    intermediate_size: int  # SwiGLU inner width
    vocab_size: int  # embedding rows and LM-head outputs
    rms_norm_eps: float = 1e-6  # RMSNorm epsilon
    rope_theta: float = 10000.0  # rotary base
    has_qk_norm: bool = False  # Qwen3: RMSNorm over head_dim on q and k before RoPE
    attention_bias: bool = False  # Qwen2: biases on the q/k/v projections
    tie_word_embeddings: bool = False  # LM head shares the embedding matrix
    rope_scaling: RopeScaling | None = None  # Llama 3.1 frequency scaling; None = plain RoPE
    max_position_embeddings: int = 32768  # longest context the model supports (informational)

    def __post_init__(self) -> None:
        for key in (
            "num_layers",
            "hidden_size",
            "num_q_heads",
            "num_kv_heads",
            "head_dim",
            "intermediate_size",
            "vocab_size",
            "max_position_embeddings",
        ):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidModelConfig(f"{self.name}: {key} must be a positive integer, got {value!r}")
        if self.num_q_heads % self.num_kv_heads:
            raise InvalidModelConfig(
                f"{self.name}: num_q_heads {self.num_q_heads} is not a multiple of "
                f"num_kv_heads {self.num_kv_heads}"
            )
        if self.head_dim % 2:
            raise InvalidModelConfig(f"{self.name}: head_dim must be even for RoPE, got {self.head_dim}")
        for key in ("rms_norm_eps", "rope_theta"):
            value = getattr(self, key)
            if not math.isfinite(value) or value <= 0:
                raise InvalidModelConfig(f"{self.name}: {key} must be > 0, got {value!r}")

    @property
    def num_queries_per_kv(self) -> int:
        """Query heads sharing one KV head (the GQA group size)."""
        return self.num_q_heads // self.num_kv_heads

    def bytes_per_token(self, dtype_bytes: int) -> int:
        """KV-cache bytes per token: layers x kv_heads x head_dim x 2 (K and V) x dtype bytes."""
        return self.num_layers * self.num_kv_heads * self.head_dim * 2 * dtype_bytes

    def num_params(self) -> int:
        """Parameter count (embeddings and LM head included once each unless tied)."""
        h, d = self.hidden_size, self.head_dim
        attn = h * d * (self.num_q_heads + 2 * self.num_kv_heads) + self.num_q_heads * d * h
        if self.attention_bias:
            attn += d * (self.num_q_heads + 2 * self.num_kv_heads)
        norms = 2 * h + (2 * d if self.has_qk_norm else 0)
        layer = attn + 3 * h * self.intermediate_size + norms
        embed = self.vocab_size * h * (1 if self.tie_word_embeddings else 2)
        return self.num_layers * layer + embed + h

    def to_json_dict(self) -> dict[str, Any]:
        """Plain JSON form (recorded in a profile's ``model_config``)."""
        return asdict(self)


_LLAMA31_SCALING = RopeScaling(8.0, 1.0, 4.0, 8192)

PRESETS: dict[str, ModelConfig] = {
    "qwen3-8b": ModelConfig(
        name="qwen3-8b",
        num_layers=36,
        hidden_size=4096,
        num_q_heads=32,
        num_kv_heads=8,
        head_dim=128,
        intermediate_size=12288,
        vocab_size=151936,
        rms_norm_eps=1e-6,
        rope_theta=1_000_000.0,
        has_qk_norm=True,
        max_position_embeddings=40960,
    ),
    "qwen3-0.6b": ModelConfig(
        name="qwen3-0.6b",
        num_layers=28,
        hidden_size=1024,
        num_q_heads=16,
        num_kv_heads=8,
        head_dim=128,
        intermediate_size=3072,
        vocab_size=151936,
        rms_norm_eps=1e-6,
        rope_theta=1_000_000.0,
        has_qk_norm=True,
        tie_word_embeddings=True,
        max_position_embeddings=40960,
    ),
    "llama-3.1-8b": ModelConfig(
        name="llama-3.1-8b",
        num_layers=32,
        hidden_size=4096,
        num_q_heads=32,
        num_kv_heads=8,
        head_dim=128,
        intermediate_size=14336,
        vocab_size=128256,
        rms_norm_eps=1e-5,
        rope_theta=500_000.0,
        rope_scaling=_LLAMA31_SCALING,
        max_position_embeddings=131072,
    ),
    # For tests and CPU smoke runs: Qwen3-shaped (GQA 2:1, q/k norms), milliseconds per forward.
    "tiny": ModelConfig(
        name="tiny",
        num_layers=2,
        hidden_size=64,
        num_q_heads=4,
        num_kv_heads=2,
        head_dim=16,
        intermediate_size=128,
        vocab_size=256,
        rms_norm_eps=1e-6,
        rope_theta=10000.0,
        has_qk_norm=True,
        max_position_embeddings=4096,
    ),
}

# Hugging Face model_type values whose forward this engine reproduces.
_HF_TYPES = {"llama": False, "mistral": False, "qwen2": False, "qwen3": True}  # -> has q/k norm


def _field(data: dict[str, Any], key: str, where: str, default: Any = None) -> Any:
    value = data.get(key, default)
    if value is None:
        raise InvalidModelConfig(f"{where}: missing field {key!r}")
    return value


def _rope(data: dict[str, Any], where: str) -> tuple[float, RopeScaling | None]:
    """rope_theta and scaling, from the classic fields or transformers 5's ``rope_parameters``."""
    params = data.get("rope_parameters") or {}
    if not isinstance(params, dict) or not isinstance(data.get("rope_scaling") or {}, dict):
        raise InvalidModelConfig(f"{where}: rope_parameters / rope_scaling must be objects")
    theta = float(params.get("rope_theta", data.get("rope_theta", 10000.0)))
    scaling = data.get("rope_scaling") or params
    rope_type = scaling.get("rope_type", scaling.get("type", "default"))
    if rope_type == "default":
        return theta, None
    if rope_type != "llama3":
        raise InvalidModelConfig(f"{where}: rope scaling type {rope_type!r} is not supported (llama3 is)")
    try:
        return theta, RopeScaling(
            float(scaling["factor"]),
            float(scaling["low_freq_factor"]),
            float(scaling["high_freq_factor"]),
            int(scaling["original_max_position_embeddings"]),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise InvalidModelConfig(f"{where}: malformed llama3 rope_scaling ({exc})") from None


def load_hf_config(path: str | Path) -> ModelConfig:
    """Read a Hugging Face ``config.json`` (or a directory holding one) into a ``ModelConfig``."""
    p = Path(path)
    if p.is_dir():
        p = p / "config.json"
    if not p.is_file():
        raise InvalidModelConfig(f"{p}: config file not found")
    try:
        data = json.loads(p.read_text())
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        raise InvalidModelConfig(f"{p}: not a readable JSON config ({exc})") from None
    if not isinstance(data, dict):
        raise InvalidModelConfig(f"{p}: expected a JSON object")
    where = str(p)
    model_type = data.get("model_type")
    if model_type not in _HF_TYPES:
        raise InvalidModelConfig(
            f"{where}: model_type {model_type!r} is not supported (supported: {', '.join(sorted(_HF_TYPES))})"
        )
    heads = _field(data, "num_attention_heads", where)
    hidden = _field(data, "hidden_size", where)
    try:
        theta, scaling = _rope(data, where)
        return ModelConfig(
            name=p.parent.name or model_type,
            num_layers=_field(data, "num_hidden_layers", where),
            hidden_size=hidden,
            num_q_heads=heads,
            num_kv_heads=data.get("num_key_value_heads") or heads,
            head_dim=data.get("head_dim") or hidden // heads,
            intermediate_size=_field(data, "intermediate_size", where),
            vocab_size=_field(data, "vocab_size", where),
            rms_norm_eps=float(data.get("rms_norm_eps", 1e-6)),
            rope_theta=theta,
            has_qk_norm=_HF_TYPES[model_type],
            attention_bias=bool(data.get("attention_bias", model_type == "qwen2")),
            tie_word_embeddings=bool(data.get("tie_word_embeddings", False)),
            rope_scaling=scaling,
            max_position_embeddings=int(data.get("max_position_embeddings", 32768)),
        )
    except (TypeError, ValueError) as exc:
        raise InvalidModelConfig(f"{where}: malformed field ({exc})") from None


def resolve_model(name_or_path: str) -> ModelConfig:
    """A preset by name, else a ``config.json`` path (or a directory holding one)."""
    if name_or_path in PRESETS:
        return PRESETS[name_or_path]
    p = Path(name_or_path)
    if p.suffix == ".json" or p.is_dir() or p.exists():
        return load_hf_config(p)
    raise InvalidModelConfig(
        f"unknown model {name_or_path!r}: not a preset ({', '.join(PRESETS)}) and not a config.json path"
    )
