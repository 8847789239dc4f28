"""Model folders for the local engines: a ``config.json`` only, served with dummy weights.

vLLM's ``--load-format dummy`` builds the architecture from the config and fills the weights at
random, so no checkpoint is needed; ``--skip-tokenizer-init`` drops the tokenizer (prompts are
token ids). Two Llama shapes:

- ``tiny``: hidden 256, 2 layers (fast; for protocol tests).
- ``heavy``: hidden 1024, intermediate 2816, 8 layers, 16 heads, 4 KV heads (about 156 M
  parameters: its prefill dominates any proxy's overhead, and a long prefill visibly slows the
  decodes beside it).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class ModelShape:
    """A Llama architecture (the fields of its ``config.json`` that matter here)."""

    name: str  # also the served model name
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    vocab_size: int = 32000
    max_position_embeddings: int = 4096  # the engines' max_model_len

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    def kv_bytes_per_token_of(self, dtype_bytes: int) -> int:
        """KV-cache bytes per token at ``dtype_bytes`` per element (2: bfloat16, 4: float32)."""
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * dtype_bytes

    def config_json(self) -> dict[str, Any]:
        return {
            "architectures": ["LlamaForCausalLM"],
            "model_type": "llama",
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_hidden_layers": self.num_layers,
            "num_attention_heads": self.num_heads,
            "num_key_value_heads": self.num_kv_heads,
            "head_dim": self.head_dim,
            "vocab_size": self.vocab_size,
            "max_position_embeddings": self.max_position_embeddings,
            "hidden_act": "silu",
            "rms_norm_eps": 1e-5,
            "rope_theta": 10000.0,
            "tie_word_embeddings": False,
            "torch_dtype": "bfloat16",
            "bos_token_id": 1,
            "eos_token_id": 2,
        }


TINY = ModelShape("tiny", hidden_size=256, intermediate_size=512, num_layers=2, num_heads=4, num_kv_heads=2)
HEAVY = ModelShape(
    "heavy", hidden_size=1024, intermediate_size=2816, num_layers=8, num_heads=16, num_kv_heads=4
)
SHAPES: dict[str, ModelShape] = {s.name: s for s in (TINY, HEAVY)}


def write_model(shape: ModelShape, root: Path) -> Path:
    """Write ``root/<name>/config.json`` (idempotent) and return the folder."""
    folder = root / shape.name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(shape.config_json(), indent=1) + "\n")
    return folder


def shape_named(name: str) -> ModelShape:
    """The model shape called ``name``; ``ValueError`` naming the known ones."""
    try:
        return SHAPES[name]
    except KeyError:
        raise ValueError(f"unknown model {name!r}; known: {', '.join(sorted(SHAPES))}") from None
