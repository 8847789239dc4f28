"""Planner curves derived from a pdroute profile: size the fleet of the GPUs you route on.

A *machine* is the profiled GPU group: ``device.num_gpus`` GPUs running one tensor-parallel copy
of the model (one GPU for a torch profile). GB are 1e9 bytes. For a workload of prompt length
L_p and output length L_d (tokens):

* memory C = ``MEMORY_FRACTION`` x the group's GPU memory: the rest is left, as vLLM's default
  ``gpu_memory_utilization`` leaves it, for activations, CUDA graphs and the allocator;
* weights C_w = parameters x bytes per parameter (the GEMM dtype), the parameters counted from
  the profile's ``model_config`` (embeddings, attention and SwiGLU MLP matrices; the LM head
  separately unless ``tie_word_embeddings``; norms and biases, under 0.01 %, left out);
* prefill capacity C_p(B) = C_w + B x ``bytes_per_token`` (the KV cache of the B tokens being
  prefilled); decode capacity C_d(n) = C_w + n x (L_p + L_d) x ``bytes_per_token`` (each
  request holds its KV cache to its last token);
* prefill throughput T_p(B) = B / t_prefill(B) at the profile's prompt lengths: a batch of B
  tokens is taken to cost one forward over a B-token prompt (the profile measures one prompt per
  forward); beyond the largest prompt the planner clamps (piecewise) or extrapolates (quadratic);
* decode throughput T_d(n) = n / t_decode(context, n) at the profile's batches, with the step
  time taken at the mean context of a decoding request, L_p + L_d / 2, linearly interpolated in
  kv_len between the profile's kv_lens; below the smallest kv_len the smallest is used (a
  shorter context costs no more), above the largest the step time is extrapolated linearly
  from the last two, up to ``MAX_CONTEXT_FACTOR`` x the largest measured kv_len (an
  ``InvalidProfile`` names the context beyond that).

Every assumption, and each extrapolation met, is written into the set's ``assumptions``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any

from solver.errors import InvalidProfile
from solver.plan.curvesets import CurveSet, PhaseCurves, Series
from solver.profile_io import load_profile
from solver.profile_result import ProfileResult

MEMORY_FRACTION = 0.9  # vLLM's default gpu_memory_utilization
MAX_CONTEXT_FACTOR = 4.0  # decode step times are extrapolated at most to 4x the largest kv_len
DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4, "fp8": 1, "float8": 1, "int8": 1}
GB = 1e9


def _int(config: Mapping[str, Any], *keys: str) -> int:
    for key in keys:
        value = config.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    raise InvalidProfile(
        f"model_config.{keys[0]}: needed to count the weights, missing or not a positive integer"
    )


def weights_bytes(config: Mapping[str, Any]) -> float:
    """Bytes of the model's weights, counted from a profile's ``model_config`` (see the module)."""
    h, d = _int(config, "hidden_size"), _int(config, "head_dim")
    q, kv = _int(config, "num_heads", "num_q_heads"), _int(config, "num_kv_heads")
    attention = h * d * (q + 2 * kv) + q * d * h  # Q, K, V and O projections
    mlp = 3 * h * _int(config, "intermediate_size")  # gate, up and down
    embed = _int(config, "vocab_size") * h * (1 if config.get("tie_word_embeddings") is True else 2)
    params = _int(config, "num_layers") * (attention + mlp) + embed
    dtype = str(config.get("gemm_dtype", config.get("dtype", "bfloat16")))
    if dtype not in DTYPE_BYTES:
        raise InvalidProfile(
            f"model_config.gemm_dtype: unknown weight dtype {dtype!r} ({', '.join(DTYPE_BYTES)})"
        )
    return float(params * DTYPE_BYTES[dtype])


def machine_memory_bytes(device: Mapping[str, Any]) -> tuple[float, int]:
    """Total memory (bytes) of the profiled GPU group, and its number of GPUs."""
    gpus = device.get("num_gpus", 1)
    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 1:
        raise InvalidProfile(f"device.num_gpus: expected a positive integer, got {gpus!r}")
    per_gpu = device.get("memory_bytes")
    if per_gpu is None and isinstance(device.get("memory_gb"), int | float):
        per_gpu = float(device["memory_gb"]) * GB  # torch profiles record decimal GB
    if isinstance(per_gpu, bool) or not isinstance(per_gpu, int | float) or not per_gpu > 0:
        raise InvalidProfile("device.memory_bytes: the profile does not say how much memory a GPU has")
    return float(per_gpu) * gpus, gpus


def _decode_step_ms(profile: ProfileResult, context: float, notes: list[str]) -> dict[int, float]:
    """Decode step (ms) per batch at ``context`` tokens, from the kv_len rows (see the module)."""
    kv_lens = sorted({kv for kv, _ in profile.T_decode})
    if len(kv_lens) < 2 and context > kv_lens[0]:
        raise InvalidProfile("T_decode: one kv_len only; at least two are needed to reach a longer context")
    if context > MAX_CONTEXT_FACTOR * kv_lens[-1]:
        raise InvalidProfile(
            f"context {context:g} tokens (prompt_len + output_len/2) is beyond {MAX_CONTEXT_FACTOR:g}x the "
            f"largest profiled kv_len {kv_lens[-1]}: profile longer contexts"
        )
    if context <= kv_lens[0]:
        lo = hi = kv_lens[0]
    elif context >= kv_lens[-1]:
        lo, hi = kv_lens[-2], kv_lens[-1]
        if context > hi:
            notes.append(
                f"decode step times extrapolated linearly in kv_len from {lo} and {hi} "
                f"to the context {context:g}"
            )
    else:
        hi = next(k for k in kv_lens if k >= context)
        lo = kv_lens[kv_lens.index(hi) - 1]
    steps: dict[int, float] = {}
    for batch in sorted({b for _, b in profile.T_decode}):
        if (lo, batch) not in profile.T_decode or (hi, batch) not in profile.T_decode:
            notes.append(f"decode batch {batch} left out: not profiled at kv_len {lo} and {hi}")
            continue
        t_lo, t_hi = profile.T_decode[(lo, batch)], profile.T_decode[(hi, batch)]
        step = t_lo if hi == lo else t_lo + (t_hi - t_lo) * (context - lo) / (hi - lo)
        if not (math.isfinite(step) and step > 0.0):
            raise InvalidProfile(
                f"T_decode: the step time of batch {batch} at context {context:g} is {step:.3g} ms"
            )
        steps[batch] = step
    if len(steps) < 2:
        raise InvalidProfile(f"T_decode: fewer than 2 batches profiled at kv_len {lo} and {hi}")
    return steps


def curve_set_from_profile(profile: ProfileResult, prompt_len: int, output_len: int) -> CurveSet:
    """The planner's curve set for ``profile`` at the workload (``prompt_len``, ``output_len``)."""
    for name, value in (("prompt_len", prompt_len), ("output_len", output_len)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InvalidProfile(f"{name}: expected an integer >= 1, got {value!r}")
    if len(profile.T_prefill) < 2:
        raise InvalidProfile("T_prefill: at least 2 prompt lengths are needed for a throughput curve")
    memory, gpus = machine_memory_bytes(profile.device)
    memory_gb = MEMORY_FRACTION * memory / GB
    weights_gb = weights_bytes(profile.model_config) / GB
    if weights_gb >= memory_gb:
        raise InvalidProfile(
            f"the weights ({weights_gb:.1f} GB) do not fit the usable memory ({memory_gb:.1f} GB of "
            f"{gpus} GPU(s))"
        )
    kv_gb = profile.bytes_per_token / GB
    context = prompt_len + output_len / 2.0
    notes: list[str] = []
    steps = _decode_step_ms(profile, context, notes)
    prompts = sorted(profile.T_prefill)
    batches = sorted(steps)
    free_tokens = (memory_gb - weights_gb) / kv_gb  # KV tokens the usable memory holds
    model = str(profile.model_config.get("name", "unknown model"))
    hardware = f"{gpus}x {profile.device.get('name', 'unknown GPU')}"
    return CurveSet(
        name=f"profile {model} on {hardware}",
        model=model,
        hardware=hardware,
        memory_gb=memory_gb,
        weights_gb=weights_gb,
        prefill=PhaseCurves(
            capacity=Series(
                "KV of the batch's tokens",
                tuple(map(float, prompts)),
                tuple(weights_gb + b * kv_gb for b in prompts),
            ),
            throughput=Series(
                "one forward over B tokens",
                tuple(map(float, prompts)),
                tuple(b / (profile.T_prefill[b] / 1000.0) for b in prompts),
            ),
            batch_unit="tokens",
            max_batch=2.0 * free_tokens,
        ),
        decode=PhaseCurves(
            capacity=Series(
                f"KV of {prompt_len + output_len} tokens per request",
                tuple(map(float, batches)),
                tuple(weights_gb + n * (prompt_len + output_len) * kv_gb for n in batches),
            ),
            throughput=Series(
                f"decode at context {context:g}",
                tuple(map(float, batches)),
                tuple(n / (steps[n] / 1000.0) for n in batches),
            ),
            batch_unit="requests",
            max_batch=2.0 * free_tokens / (prompt_len + output_len),
        ),
        provenance={"profile": dict(profile.provenance), "derived_by": "solver.plan.profile_curves"},
        assumptions=(
            f"machine: {gpus} GPU(s) running one copy of the model; memory {MEMORY_FRACTION:.0%} of "
            f"{memory / GB:.1f} GB",
            f"weights {weights_gb:.2f} GB counted from model_config",
            f"KV cache {profile.bytes_per_token} bytes per token; decode requests hold "
            f"{prompt_len + output_len} tokens each",
            "prefill: a batch of B tokens costs one forward over a B-token prompt",
            f"decode: step times at the mean context {context:g} tokens (prompt_len + output_len / 2)",
            *notes,
        ),
    )


@functools.cache
def builtin_profile_names() -> tuple[str, ...]:
    """Names of the profiles shipped in ``solver/data/profiles`` (listed once per process)."""
    folder = resources.files("solver") / "data" / "profiles"
    return tuple(sorted(p.name[: -len(".json")] for p in folder.iterdir() if p.name.endswith(".json")))


@functools.cache
def load_builtin_profile(name: str) -> ProfileResult:
    """A shipped profile by name, read once per process (``InvalidProfile`` for an unknown name,
    never cached)."""
    names = builtin_profile_names()
    if name not in names:
        raise InvalidProfile(f"profile: unknown shipped profile {name!r} (shipped: {', '.join(names)})")
    return load_profile(Path(str(resources.files("solver") / "data" / "profiles" / f"{name}.json")))


def resolve_profile(name_or_path: str) -> ProfileResult:
    """A shipped profile by name, else a profile file by path."""
    if name_or_path in builtin_profile_names():
        return load_builtin_profile(name_or_path)
    return load_profile(name_or_path)
