"""The KV-cache capacity of one engine instance, from aiconfigurator's memory model.

``kv_capacity_tokens`` is the number of tokens whose KV cache one instance (its ``tp_size``
GPUs together) holds once the weights, the activations and the runtime's own reservations are
in memory. It is aiconfigurator's ``estimate_kv_cache`` (``aiconfigurator.sdk.memory``), the
estimate its own OOM checks use, for one GPU of the tensor-parallel group::

    kv_bytes  = capacity x fraction - (weights + activations + runtime overhead + NCCL)
    kv_tokens = floor(kv_bytes / kv_bytes_per_token_per_gpu)

* ``capacity``: the GPU's memory in the system spec (``gpu.mem_capacity``; 80 GiB on an H100
  SXM, 141 GB on an H200 SXM).
* ``fraction``: the engine's default memory fraction for that version, as the database knows
  it: vLLM's ``gpu_memory_utilization`` (0.92 from vLLM 0.22, 0.90 before) and SGLang's
  ``mem_fraction_static`` apply to the total; TensorRT-LLM's ``free_gpu_memory_fraction``
  (0.90) to what the weights and activations leave free.
* ``weights``: the model's weights on one GPU at ``tp_size`` (its share of the sharded
  layers). ``activations``: sized by the engine's per-step token budget, ``ACTIVATION_TOKENS``
  = 8,192, vLLM's default ``max_num_batched_tokens`` for its OpenAI server on GPUs of at least
  70 GiB. Runtime overhead and, with TP, NCCL buffers: aiconfigurator's figures per backend.
* ``kv_bytes_per_token_per_gpu``: ``layers x (kv_heads / tp) x head_dim x 2 x dtype bytes``.
  Each GPU keeps its ``1/tp`` share of the KV heads of every token, so the tokens one GPU
  holds are the tokens the instance holds: the figure is not multiplied by ``tp_size``.

An estimate, not a measurement: a real engine also reserves CUDA-graph memory and rounds to
whole blocks. The live-engine source reads the real figure from a running engine.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from profiling.sources.aiconfigurator_catalog import ResolvedSource
from solver.errors import UnsupportedSource

ACTIVATION_TOKENS = 8192  # tokens of one engine step that the activations are sized for


@dataclass(frozen=True)
class KVCapacity:
    """aiconfigurator's KV-cache capacity estimate for one instance, with its derivation."""

    tokens: int  # KV-cache tokens one instance holds
    fraction: float  # the engine's memory fraction used
    fraction_of: str  # "total" (vLLM, SGLang) or "free" (TensorRT-LLM) memory
    memory_bytes: int  # one GPU's memory capacity
    kv_bytes_per_gpu: int  # the KV budget of one GPU
    kv_bytes_per_token_per_gpu: int
    breakdown_bytes: dict[str, int]  # the non-KV memory of one GPU: weights, activations, ...

    def provenance(self, backend: str, tp_size: int) -> dict[str, Any]:
        """The derivation as a profile records it (``provenance["kv_capacity"]``)."""
        return {
            "tokens": self.tokens,
            "source": "aiconfigurator memory model (estimate_kv_cache), not a measurement",
            "formula": (
                f"floor(({self.memory_bytes} B x {self.fraction} of {self.fraction_of} memory - "
                f"non-KV memory) / {self.kv_bytes_per_token_per_gpu} B per token) on each of "
                f"{tp_size} GPU(s); each holds its share of every token's KV heads"
            ),
            "memory_fraction": self.fraction,
            "memory_fraction_of": self.fraction_of,
            "memory_fraction_note": f"{backend}'s default for this version, as aiconfigurator records it",
            "gpu_memory_bytes": self.memory_bytes,
            "kv_bytes_per_gpu": self.kv_bytes_per_gpu,
            "kv_bytes_per_token_per_gpu": self.kv_bytes_per_token_per_gpu,
            "non_kv_bytes_per_gpu": dict(self.breakdown_bytes),
            "activation_tokens": ACTIVATION_TOKENS,
        }


def estimate_kv_capacity(src: ResolvedSource, tp_size: int) -> KVCapacity:
    """The KV-cache capacity of ``src``'s model on ``tp_size`` GPUs (module docstring)."""
    from aiconfigurator.sdk.backends.factory import get_backend
    from aiconfigurator.sdk.memory import estimate_kv_cache

    backend = get_backend(src.backend)
    fraction = backend.get_default_free_gpu_memory_fraction(src.backend_version)
    if fraction is None:
        raise UnsupportedSource(f"aiconfigurator knows no default memory fraction for {src.backend}")
    of_free = bool(backend.memory_fraction_of_free())
    try:
        estimate = estimate_kv_cache(
            src.model,
            src.system,
            src.backend,
            src.backend_version,
            max_num_tokens=ACTIVATION_TOKENS,
            max_batch_size=1,  # does not enter the non-KV memory (aiconfigurator's docs)
            memory_fraction_kind="of_free" if of_free else "of_total",
            memory_fraction_value=float(fraction),
            tp_size=tp_size,
        )
    except ValueError as exc:
        raise UnsupportedSource(
            f"aiconfigurator could not size the KV cache of {src.model} on {src.system} "
            f"at tp {tp_size}: {exc}"
        ) from None
    breakdown = {str(k): int(v) for k, v in (estimate.get("memory_breakdown") or {}).items()}
    return KVCapacity(
        tokens=int(estimate["total_kv_size_tokens"]),
        fraction=float(fraction),
        fraction_of="free" if of_free else "total",
        memory_bytes=int(estimate["total_gpu_capacity_bytes"]),
        kv_bytes_per_gpu=int(estimate["total_kv_size_bytes"]),
        kv_bytes_per_token_per_gpu=int(estimate["kv_size_per_token_bytes"]),
        breakdown_bytes=breakdown,
    )
