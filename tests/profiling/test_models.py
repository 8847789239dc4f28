"""Presets, ``bytes_per_token`` and Hugging Face ``config.json`` reading."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from profiling.errors import InvalidModelConfig
from profiling.models import PRESETS, ModelConfig, RopeScaling, load_hf_config, resolve_model

# Fields of the published Qwen/Qwen3-8B and meta-llama/Llama-3.1-8B config.json files.
QWEN3_8B_HF: dict[str, Any] = {
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
    "hidden_size": 4096,
    "intermediate_size": 12288,
    "num_attention_heads": 32,
    "num_hidden_layers": 36,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "vocab_size": 151936,
    "rms_norm_eps": 1e-06,
    "rope_theta": 1000000,
    "rope_scaling": None,
    "tie_word_embeddings": False,
    "max_position_embeddings": 40960,
    "torch_dtype": "bfloat16",
}
LLAMA31_8B_HF: dict[str, Any] = {
    "model_type": "llama",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
    "rms_norm_eps": 1e-05,
    "rope_theta": 500000.0,
    "rope_scaling": {
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
        "rope_type": "llama3",
    },
    "max_position_embeddings": 131072,
}


def _write(tmp_path: Path, data: Any, name: str = "Model") -> Path:
    d = tmp_path / name
    d.mkdir()
    (d / "config.json").write_text(json.dumps(data))
    return d / "config.json"


def test_qwen3_8b_preset_is_the_published_architecture() -> None:
    q = PRESETS["qwen3-8b"]
    assert (q.num_layers, q.hidden_size, q.num_q_heads, q.num_kv_heads, q.head_dim) == (36, 4096, 32, 8, 128)
    assert (q.intermediate_size, q.vocab_size, q.has_qk_norm) == (12288, 151936, True)
    # 36 layers x 8 KV heads x 128 x (K and V) x 2 bytes.
    assert q.bytes_per_token(2) == 36 * 8 * 128 * 2 * 2 == 147456
    assert q.bytes_per_token(4) == 2 * q.bytes_per_token(2)
    assert 8.1e9 < q.num_params() < 8.3e9  # Qwen3-8B: 8.2B parameters
    assert 0.55e9 < PRESETS["qwen3-0.6b"].num_params() < 0.8e9
    assert 7.9e9 < PRESETS["llama-3.1-8b"].num_params() < 8.1e9


@pytest.mark.parametrize(("hf", "preset"), [(QWEN3_8B_HF, "qwen3-8b"), (LLAMA31_8B_HF, "llama-3.1-8b")])
def test_hf_config_reads_into_the_same_architecture_as_the_preset(
    tmp_path: Path, hf: dict[str, Any], preset: str
) -> None:
    path = _write(tmp_path, hf, "Some-Model")
    for given in (path, path.parent, str(path)):
        cfg = load_hf_config(given)
        assert cfg.name == "Some-Model"
        fields = {k: v for k, v in cfg.to_json_dict().items() if k != "name"}
        expected = {k: v for k, v in PRESETS[preset].to_json_dict().items() if k != "name"}
        assert fields == expected
    assert resolve_model(str(path)).num_layers == PRESETS[preset].num_layers


def test_hf_defaults_and_newer_rope_parameters(tmp_path: Path) -> None:
    data = {
        k: v
        for k, v in LLAMA31_8B_HF.items()
        if k not in ("num_key_value_heads", "rope_scaling", "rope_theta")
    }
    data["rope_parameters"] = {"rope_type": "default", "rope_theta": 1234.0}
    cfg = load_hf_config(_write(tmp_path, data))
    assert cfg.num_kv_heads == 32 and cfg.head_dim == 128 and cfg.rope_theta == 1234.0
    assert cfg.rope_scaling is None and not cfg.attention_bias
    qwen2 = load_hf_config(_write(tmp_path, {**data, "model_type": "qwen2"}, "q2"))
    assert qwen2.attention_bias and not qwen2.has_qk_norm


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "config file not found"),
        ("{not json", "not a readable JSON"),
        ([1, 2], "expected a JSON object"),
        ({**QWEN3_8B_HF, "model_type": "qwen3_moe"}, "model_type 'qwen3_moe' is not supported"),
        (
            {k: v for k, v in QWEN3_8B_HF.items() if k != "num_hidden_layers"},
            "missing field 'num_hidden_layers'",
        ),
        ({**QWEN3_8B_HF, "num_key_value_heads": 7}, "not a multiple"),
        ({**QWEN3_8B_HF, "hidden_size": "big"}, "hidden_size"),
        ({**QWEN3_8B_HF, "rope_scaling": {"rope_type": "yarn", "factor": 4}}, "'yarn' is not supported"),
        ({**LLAMA31_8B_HF, "rope_scaling": {"rope_type": "llama3"}}, "malformed llama3"),
    ],
)
def test_bad_hf_configs_are_refused_clearly(tmp_path: Path, content: Any, message: str) -> None:
    path = tmp_path / "config.json"
    if content is not None:
        path.write_text(content if isinstance(content, str) else json.dumps(content))
    with pytest.raises(InvalidModelConfig, match=message):
        load_hf_config(path)


def test_unknown_preset_names_the_presets() -> None:
    with pytest.raises(InvalidModelConfig, match=r"unknown model 'qwen9'.*qwen3-8b"):
        resolve_model("qwen9")
    with pytest.raises(InvalidModelConfig, match="config file not found"):
        resolve_model("/nonexistent/config.json")


def test_model_config_validation() -> None:
    with pytest.raises(InvalidModelConfig, match="num_layers"):
        ModelConfig("x", 0, 8, 2, 1, 4, 8, 8)
    with pytest.raises(InvalidModelConfig, match="even"):
        ModelConfig("x", 1, 8, 2, 1, 3, 8, 8)
    with pytest.raises(InvalidModelConfig, match="rope_theta"):
        ModelConfig("x", 1, 8, 2, 1, 4, 8, 8, rope_theta=0.0)
    assert RopeScaling(8.0, 1.0, 4.0, 8192) == PRESETS["llama-3.1-8b"].rope_scaling
