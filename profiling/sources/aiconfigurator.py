"""A ``ProfileResult`` estimated from NVIDIA aiconfigurator's performance database (no GPU, no torch).

Run it through the CLI (``pdroute profile --source aiconfigurator --model Qwen/Qwen3-8B --system
h100_sxm --backend vllm -o profile.json``) or call ``profile_from_aiconfigurator`` directly.

aiconfigurator (Apache-2.0) ships kernel timings collected on real GPUs and composes them into
the latency of one engine step; ``profiling.sources.aiconfigurator_steps`` maps each grid point
of the torch profiler onto one of its step estimates (and says how). The database is
deterministic: the same installed aiconfigurator gives the same profile byte for byte, and no
wall-clock time is recorded anywhere the fit copies into params.

The KV path's bandwidth is a *spec* figure from the system's YAML (``node.intra_node_bw`` for
NVLink, ``node.inter_node_bw`` for the network, ``node.pcie_bw`` for PCIe; bytes/s per GPU,
one direction), not a measurement. With tensor parallelism each of the ``tp_size`` prefill
GPUs sends its own ``1/tp_size`` share of the KV heads to its decode peer at the same time,
so ``p2p_bandwidth_GBps = tp_size x per-GPU spec`` against the whole model's
``bytes_per_token``.

``T_chunk_prefix`` (with ``grids.prefix_lens``) is the database's context step over a cached
prefix (``profiling.sources.aiconfigurator_steps``). ``kv_capacity_tokens`` is the KV-cache
capacity of one instance from aiconfigurator's memory model: the GPU's memory times the
engine's default memory fraction (vLLM 0.24: ``gpu_memory_utilization`` 0.92), less the
weights at ``tp_size``, the activations of an 8,192-token step and the runtime's overhead,
divided by the KV bytes of one token on one GPU (``profiling.sources.aiconfigurator_memory``
gives the formula; the profile's ``provenance["kv_capacity"]`` every figure).

Grids longer than the model's context (``context`` in aiconfigurator's model config: 40,960
positions for Qwen3) are refused: a prompt, a decode's ``kv_len + 1`` and a chunk's
``prefix_len + chunk`` must fit.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from profiling.sources.aiconfigurator_catalog import DATABASE_MODE, ResolvedSource, resolve_source
from profiling.sources.aiconfigurator_memory import estimate_kv_capacity
from profiling.sources.aiconfigurator_steps import StepEstimator, estimate_tables
from solver.errors import InvalidProfile, UnsupportedSource
from solver.profile_result import ProfileGrids, ProfileResult

# --transfer name -> key under the system spec's ``node`` section (bytes/s per GPU, one way).
TRANSFER_SPEC_KEYS: Mapping[str, str] = {
    "nvlink": "intra_node_bw",
    "network": "inter_node_bw",
    "pcie": "pcie_bw",
}
_LOGGERS = ("aiconfigurator", "aiconfigurator_core")
_GRID_FLAGS = ("prompt_lens", "kv_lens", "batch_sizes", "chunk_sizes", "decode_batches")
_OPTIONAL_GRID_FLAGS = ("prefix_lens",)  # may be empty: that table is not estimated
_DEFAULT_GRIDS = ProfileGrids()


@contextmanager
def _quiet_database_logs() -> Iterator[None]:
    """Keep aiconfigurator's loading chatter (fallback tables of other model families) off stderr."""
    loggers = [logging.getLogger(name) for name in _LOGGERS]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.setLevel(level)


def _check_grids(grids: ProfileGrids) -> None:
    for name in _GRID_FLAGS:
        values = getattr(grids, name)
        if not values or any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in values):
            raise InvalidProfile(f"grids.{name}: expected positive integers, got {values!r}")
    for name in _OPTIONAL_GRID_FLAGS:
        values = getattr(grids, name)
        if any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in values):
            raise InvalidProfile(f"grids.{name}: expected positive integers, got {values!r}")
    kv = grids.interference_kv_len
    if isinstance(kv, bool) or not isinstance(kv, int) or kv < 1:
        raise InvalidProfile(f"grids.interference_kv_len: expected a positive integer, got {kv!r}")


def _check_context(grids: ProfileGrids, src: ResolvedSource) -> None:
    """Refuse grid points longer than the model's context (module docstring)."""
    context = src.model_info.get("context")
    if not isinstance(context, int) or context < 1:
        return  # the model config states none: nothing to check against
    longest = {
        "prompt_lens": max(grids.prompt_lens),
        "kv_lens": max(grids.kv_lens) + 1,
        "prefix_lens": max(grids.prefix_lens, default=0) + max(grids.chunk_sizes),
    }
    for name, need in longest.items():
        if name == "prefix_lens" and not grids.prefix_lens:
            continue
        if need > context:
            raise InvalidProfile(
                f"grids.{name}: a point needs {need} positions but {src.model} has {context}; "
                "shorten the grid"
            )


def generated_by(
    *,
    model: str,
    system: str,
    backend: str,
    backend_version: str,
    transfer: str,
    tp_size: int,
    grids: ProfileGrids,
) -> str:
    """The ``pdroute profile`` command that regenerates this profile (grid flags where not default)."""
    flags = [
        f"--{name.replace('_', '-')} {','.join(map(str, value)) if isinstance(value, tuple) else value}"
        for name in (*_GRID_FLAGS, *_OPTIONAL_GRID_FLAGS, "interference_kv_len")
        if (value := getattr(grids, name)) != getattr(_DEFAULT_GRIDS, name)
    ]
    return " ".join(
        [
            f"pdroute profile --source aiconfigurator --model {model} --system {system} --backend {backend}",
            f"--backend-version {backend_version} --transfer {transfer} --tp {tp_size}",
            *flags,
        ]
    )


def profile_from_aiconfigurator(
    *,
    model: str,
    system: str,
    backend: str,
    backend_version: str | None = None,
    transfer: str = "nvlink",
    tp_size: int = 1,
    grids: ProfileGrids = ProfileGrids(),  # noqa: B008 (frozen, so a shared default is safe)
) -> ProfileResult:
    """Estimate the profiler's grids from aiconfigurator's database; all times in ms.

    Raises ``UnsupportedSource`` (one line, listing what the database supports) for a model,
    system, backend, version, transfer path or TP size it cannot serve, and ``InvalidProfile``
    for a malformed grid.
    """
    if transfer not in TRANSFER_SPEC_KEYS:
        raise UnsupportedSource(
            f"transfer path {transfer!r} has no spec figure; choose one of: {', '.join(TRANSFER_SPEC_KEYS)}"
        )
    if isinstance(tp_size, bool) or not isinstance(tp_size, int) or tp_size < 1:
        raise UnsupportedSource(f"tp size must be a positive integer, got {tp_size!r}")
    _check_grids(grids)
    with _quiet_database_logs():
        src = resolve_source(model=model, system=system, backend=backend, backend_version=backend_version)
        _check_context(grids, src)
        node = dict(src.system_spec.get("node", {}))
        gpus_per_node = int(node.get("num_gpus_per_node", 1))
        num_kv_heads = int(src.model_info["n_kv"])
        if tp_size > gpus_per_node or num_kv_heads % tp_size:
            raise UnsupportedSource(
                f"tp size {tp_size} does not fit: {system} has {gpus_per_node} GPUs per node and "
                f"{src.model} has {num_kv_heads} KV heads; supported tp sizes: "
                + ", ".join(str(n) for n in range(1, gpus_per_node + 1) if num_kv_heads % n == 0)
            )
        est = StepEstimator(src, tp_size)
        tables = estimate_tables(est, grids)
        capacity = estimate_kv_capacity(src, tp_size)
        kv_dtype = est.model.config.kvcache_quant_mode
    kv_dtype_name = str(kv_dtype.name)
    kv_bytes = int(kv_dtype.value.memory)
    layers, head_dim = int(src.model_info["layers"]), int(src.model_info["d"])
    bytes_per_token = layers * num_kv_heads * head_dim * 2 * kv_bytes
    spec_key = TRANSFER_SPEC_KEYS[transfer]
    if spec_key not in node:
        raise UnsupportedSource(f"{system}'s spec gives no node.{spec_key} for the {transfer} path")
    per_gpu_GBps = float(node[spec_key]) / 1e9
    bandwidth_GBps = per_gpu_GBps * tp_size
    command = generated_by(
        model=src.model, system=system, backend=backend, backend_version=src.backend_version,
        transfer=transfer, tp_size=tp_size, grids=grids,
    )  # fmt: skip
    hardware = system if tp_size == 1 else f"{system} tp{tp_size}"
    gpu = dict(src.system_spec.get("gpu", {}))
    grid_dict = {**grids.to_json_dict(), "warmup": 0, "repeats": 1}
    return ProfileResult(
        T_prefill=tables.prefill,
        T_decode=tables.decode,
        T_interference={k: tables.mixed[k] - tables.baseline[k] for k in tables.mixed},
        T_mixed=tables.mixed,
        T_baseline=tables.baseline,
        T_chunk_prefix=tables.chunk_prefix,
        kv_capacity_tokens=capacity.tokens,
        interference_kv_len=grids.interference_kv_len,
        p2p_bandwidth_GBps=bandwidth_GBps,
        bytes_per_token=bytes_per_token,
        model_config={
            "name": src.model,
            "architecture": src.architecture,
            "num_layers": layers,
            "num_heads": int(src.model_info["n"]),
            "num_kv_heads": num_kv_heads,
            "head_dim": head_dim,
            "hidden_size": int(src.model_info["hidden_size"]),
            "intermediate_size": int(src.model_info["inter_size"]),
            "vocab_size": int(src.model_info["vocab"]),
            "kv_dtype": kv_dtype_name,
            "kv_dtype_bytes": kv_bytes,
            "gemm_dtype": str(est.model.config.gemm_quant_mode.name),
            "tp_size": tp_size,
        },
        device={
            "name": hardware,
            "system": system,
            "num_gpus": tp_size,
            "sm_version": gpu.get("sm_version"),
            "memory_bytes": gpu.get("mem_capacity"),
            "num_gpus_per_node": gpus_per_node,
        },
        transfer_path=transfer,
        versions={
            "aiconfigurator": src.aiconfigurator_version,
            "aiconfigurator-core": src.aiconfigurator_core_version,
            "backend": f"{backend} {src.backend_version}",
        },
        grids=grid_dict,
        samples=tables.samples,
        provenance={
            "source": "aiconfigurator",
            "aiconfigurator_version": src.aiconfigurator_version,
            # The database ships inside the aiconfigurator-core wheel; its version names the data.
            "database_version": f"aiconfigurator-core {src.aiconfigurator_core_version}",
            "database_mode": DATABASE_MODE,
            "system": system,
            "backend": backend,
            "backend_version": src.backend_version,
            "backend_version_slot": src.version_slot,
            "model": src.model,
            "tp_size": tp_size,
            "kv_dtype": kv_dtype_name,
            "transfer_path": transfer,
            "bandwidth_GBps": bandwidth_GBps,
            "bandwidth_GBps_per_gpu": per_gpu_GBps,
            "bandwidth_kind": "spec",
            "bandwidth_note": (
                f"spec figure node.{spec_key} of aiconfigurator's {system} system file "
                f"(bytes/s per GPU, one direction) x tp size {tp_size}; not a measurement"
            ),
            "hardware": hardware,
            # Deterministic on purpose (the fit copies it into params): the database's version
            # stands for the date, so regenerating a params file reproduces it byte for byte.
            "created_at": f"aiconfigurator-core {src.aiconfigurator_core_version} database",
            "generated_by": command,
            "omitted_points": tables.omitted,
            "kv_capacity": capacity.provenance(backend, tp_size),
            "mixed_step_op_sources": tables.op_sources,
            "timing": "database estimate: one deterministic sample per point, no warm-up or repeats",
        },
    )
