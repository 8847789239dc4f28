"""The four measurements of the profiling job and ``run_full_profile``.

- Prefill: one fresh prompt of ``prompt_len`` tokens per forward -> ``T_prefill[prompt_len]``.
- Decode: ``B`` virtual sequences that share one block table of ``kv_len`` cached tokens, one
  new token each -> ``T_decode[(kv_len, B)]``. Sharing keeps the cache small while every
  sequence still gathers and attends over its full ``kv_len + 1`` context.
- Interference at ``interference_kv_len``: the pure decode step of ``B`` such sequences
  (``T_baseline``) and the mixed step of a fresh ``chunk``-token prompt plus the same ``B``
  decodes in one forward (``T_mixed``), their runs interleaved (baseline, mixed, baseline, ...)
  so that background load hits both alike; ``T_interference[(chunk, B)] = T_mixed - T_baseline``.
- KV transfer bandwidth (``profiling.transfer``), unless the operator states one.

Every point: ``grids.warmup`` untimed runs, ``grids.repeats`` timed runs, the median kept and all
samples saved. On CUDA a prepared step is captured once as a CUDA graph and replayed (see
``ModelRunner.capture``). A point that fails (out of memory, ...) is reported in one line and
recorded in ``provenance["failed_points"]``; the others are kept.

Run it: ``pdroute profile --model qwen3-8b -o profile_data.pt`` (see docs/profiling.md).
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from pdroute_core.errors import PdrouteError
from profiling.engine import ModelRunner, resolve_device
from profiling.environment import describe_device, describe_versions, utc_now
from profiling.errors import ProfilingError, first_line
from profiling.grid_checks import check_context, kv_capacity_tokens, positions_needed, validate_grids
from profiling.io import check_writable, save_profile
from profiling.measurements import Measurements
from profiling.models import ModelConfig, resolve_model
from profiling.points import PointRecorder, require_table
from profiling.timing import Timing
from profiling.transfer import TransferMeasurement, measure_kv_bandwidth
from solver.profile_result import ProfileGrids, ProfileResult

__all__ = [
    "Measurements",
    "check_context",
    "kv_capacity_tokens",
    "positions_needed",
    "run_full_profile",
    "validate_grids",
]

SOURCE = "torch-profiler"
MIN_TRANSFER_BYTES_CUDA = 256 * 2**20  # large enough that per-copy latency is negligible
MIN_TRANSFER_BYTES_CPU = 8 * 2**20


@contextmanager
def _cpu_threads(device: torch.device, num_threads: int | None) -> Iterator[None]:
    """Run with ``num_threads`` intra-op threads on the CPU, restoring torch's setting after."""
    if device.type != "cpu" or num_threads is None:
        yield
        return
    if num_threads < 1:
        raise ProfilingError(f"cpu_threads must be >= 1, got {num_threads}")
    before = torch.get_num_threads()
    torch.set_num_threads(num_threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _measure_transfer(
    runner: ModelRunner, grids: ProfileGrids, points: PointRecorder, src_gpu: int, dst_gpu: int
) -> TransferMeasurement:
    use_cuda = runner.device.type == "cuda"
    num_bytes = max(
        runner.config.bytes_per_token(runner.dtype_bytes) * max(grids.prompt_lens),
        MIN_TRANSFER_BYTES_CUDA if use_cuda else MIN_TRANSFER_BYTES_CPU,
    )
    found: list[TransferMeasurement] = []

    def measure() -> dict[str, Timing]:
        m = measure_kv_bandwidth(
            num_bytes, src_gpu, dst_gpu, use_cuda=use_cuda, warmup=grids.warmup, repeats=grids.repeats
        )
        found.append(m)
        return {f"transfer/{num_bytes}": m.timing}

    points.run(f"transfer/{num_bytes}", measure)
    if not found:
        raise ProfilingError(
            "the KV transfer bandwidth could not be measured (see the warning above); "
            "state it with --bandwidth-gbps and --transfer-path"
        )
    return found[0]


def _build_runner(
    config: ModelConfig,
    grids: ProfileGrids,
    dev: torch.device,
    *,
    dtype: str | None,
    seed: int,
    checkpoint: str | Path | None,
    attention: str,
) -> ModelRunner:
    """The runner for ``grids``; a failed allocation (out of memory) is one ``ProfilingError``."""
    capacity = kv_capacity_tokens(grids)
    try:
        return ModelRunner(
            config,
            kv_capacity_tokens=capacity,
            device=str(dev),
            dtype=dtype,
            seed=seed,
            checkpoint=checkpoint,
            attention=attention,
        )
    except PdrouteError:
        raise
    except RuntimeError as exc:  # torch.OutOfMemoryError and the CPU allocator's errors
        raise ProfilingError(
            f"could not build {config.name} with a KV cache of {capacity} tokens on {dev} "
            f"({type(exc).__name__}: {first_line(exc)}); use smaller grids or another device"
        ) from None


def _long_context_provenance(grids: ProfileGrids, chunked: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Provenance of the long-context measurements, only where they ran (so a profile of the
    design's grids records what it always did)."""
    out: dict[str, Any] = {}
    if grids.prefix_lens:
        out["chunk_prefix_layout"] = (
            "prefix written into the cache by untimed passes, then one timed pass of the chunk's "
            "fresh tokens over it (profiling.prefix_passes)"
        )
    if chunked:
        out["chunked_prefill"] = chunked
    return out


def run_full_profile(
    model_path: str,
    output_path: str | Path | None,
    src_gpu: int = 0,
    dst_gpu: int = 1,
    *,
    grids: ProfileGrids = ProfileGrids(),  # noqa: B008 (frozen, immutable default)
    device: str | None = None,
    dtype: str | None = None,
    checkpoint: str | Path | None = None,
    seed: int = 0,
    attention: str = "auto",
    cuda_graphs: bool = True,
    cpu_threads: int | None = 1,
    bandwidth_gbps: float | None = None,
    transfer_path: str | None = None,
    progress: bool = True,
    prefill_pass_tokens: int | None = None,
) -> ProfileResult:
    """Profile ``model_path`` (preset or ``config.json``) and save to ``output_path`` (.pt / .json).

    The model runs on ``cuda:{src_gpu}`` (``device`` "cuda", or "auto" with a GPU present) or on
    the CPU; ``dst_gpu`` is the other end of the KV path. ``bandwidth_gbps`` with
    ``transfer_path`` replaces the bandwidth measurement by an operator-stated figure. On the
    CPU the run uses ``cpu_threads`` intra-op threads (``None``: torch's default): a CPU
    profile is a smoke run, and one thread keeps its timings stable on a shared machine, where
    multi-threaded small kernels mostly measure thread scheduling. Prompts longer than
    ``prefill_pass_tokens`` (and, on a GPU, any whose one forward runs out of memory, in passes
    of ``CHUNKED_PREFILL_TOKENS``) are measured as chunked prefill (``profiling.prefix_passes``).
    """
    validate_grids(grids)
    if prefill_pass_tokens is not None and prefill_pass_tokens < 1:
        raise ProfilingError(f"prefill_pass_tokens must be >= 1, got {prefill_pass_tokens}")
    if (bandwidth_gbps is None) != (transfer_path is None):
        raise ProfilingError("give --bandwidth-gbps and --transfer-path together (a figure and its path)")
    if bandwidth_gbps is not None and not (math.isfinite(bandwidth_gbps) and bandwidth_gbps > 0):
        raise ProfilingError(f"--bandwidth-gbps must be a positive number, got {bandwidth_gbps!r}")
    config = resolve_model(model_path)
    check_context(grids, config)
    if output_path is not None:
        check_writable(output_path)
    started = time.monotonic()
    dev = resolve_device(device)
    if dev.type == "cuda":
        src_gpu = dev.index if dev.index is not None else src_gpu
        dev = resolve_device(f"cuda:{src_gpu}")
    with _cpu_threads(dev, cpu_threads):
        runner = _build_runner(
            config, grids, dev, dtype=dtype, seed=seed, checkpoint=checkpoint, attention=attention
        )
        build_s = time.monotonic() - started
        bench = Measurements(
            runner,
            grids,
            use_graphs=cuda_graphs and dev.type == "cuda",
            seed=seed,
            prefill_pass_tokens=prefill_pass_tokens,
        )
        total = len(grids.prompt_lens) + len(grids.kv_lens) * len(grids.batch_sizes)
        total += len(grids.chunk_sizes) * (len(grids.decode_batches) + len(grids.prefix_lens))
        total += bandwidth_gbps is None
        points = PointRecorder(total, progress)
        graphs_note = "on" if bench.use_graphs else "off"
        try:
            if bench.use_graphs and (problem := bench.graph_problem()) is not None:
                points.note(f"warning: CUDA graph capture failed ({problem}); timing eager steps instead")
                bench.use_graphs, graphs_note = False, f"off (capture failed: {problem})"
            t_prefill = bench.prefill(points)
            t_decode = bench.decode(points)
            t_interference, t_mixed, t_baseline = bench.interference(points)
            t_chunk_prefix = bench.chunk_prefix(points)
            transfer: dict[str, Any] = {"source": "operator", "detail": "stated by the operator"}
            if bandwidth_gbps is None or transfer_path is None:
                measured = _measure_transfer(runner, grids, points, src_gpu, dst_gpu)
                bandwidth_gbps, transfer_path = measured.bandwidth_gbps, measured.transfer_path
                transfer = {"source": "measured", "detail": measured.detail, "num_bytes": measured.num_bytes}
        finally:
            points.close()
        device_info = describe_device(dev, dst_gpu)
    require_table(t_prefill, "prefill", points.failed)
    require_table(t_decode, "decode", points.failed)
    require_table(t_interference, "interference", points.failed)
    result = ProfileResult(
        T_prefill=t_prefill,
        T_decode=t_decode,
        T_interference=t_interference,
        T_mixed=t_mixed,
        T_baseline=t_baseline,
        T_chunk_prefix=t_chunk_prefix,
        interference_kv_len=grids.interference_kv_len,
        p2p_bandwidth_GBps=bandwidth_gbps,
        bytes_per_token=config.bytes_per_token(runner.dtype_bytes),
        model_config={**config.to_json_dict(), "dtype": str(runner.dtype).removeprefix("torch.")},
        device=device_info,
        transfer_path=transfer_path,
        versions=describe_versions(runner.flash_attn),
        grids=grids.to_json_dict(),
        samples=points.samples,
        provenance={
            "source": SOURCE,
            "created_at": utc_now(),
            "weights": f"checkpoint {checkpoint}" if checkpoint is not None else f"random (seed {seed})",
            "attention_backend": runner.attention_backend,
            "block_size": runner.block_size,
            "timing": "cuda events" if dev.type == "cuda" else "time.perf_counter",
            "cuda_graphs": graphs_note,
            "decode_layout": "B virtual sequences sharing one block table of kv_len tokens",
            "interference_layout": "fresh chunk-token prompt + the baseline's B decodes, one forward; "
            "baseline and mixed runs interleaved",
            "transfer": transfer,
            **_long_context_provenance(grids, bench.chunked_prefill),
            "failed_points": points.failed,
            "build_s": round(build_s, 3),
            "elapsed_s": round(time.monotonic() - started, 3),
        },
    )
    if output_path is not None:
        save_profile(result, output_path)
    return result
