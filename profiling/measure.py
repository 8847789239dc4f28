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
import random
import time
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

import torch

from pdroute_core.errors import PdrouteError
from profiling.batch import SequenceChunk
from profiling.engine import ModelRunner, resolve_device
from profiling.environment import describe_device, describe_versions, utc_now
from profiling.errors import ProfilingError, first_line
from profiling.io import check_writable, save_profile
from profiling.models import ModelConfig, resolve_model
from profiling.points import PointRecorder, require_table
from profiling.timing import Timing, time_interleaved
from profiling.transfer import TransferMeasurement, measure_kv_bandwidth
from solver.profile_result import ProfileGrids, ProfileResult

SOURCE = "torch-profiler"
MIN_TRANSFER_BYTES_CUDA = 256 * 2**20  # large enough that per-copy latency is negligible
MIN_TRANSFER_BYTES_CPU = 8 * 2**20


def validate_grids(grids: ProfileGrids) -> None:
    """Raise ``ProfilingError`` unless every grid is a non-empty list of positive integers."""
    for name in ("prompt_lens", "kv_lens", "batch_sizes", "chunk_sizes", "decode_batches"):
        values = getattr(grids, name)
        if not values or any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in values):
            raise ProfilingError(f"grid {name} must be a non-empty list of positive integers, got {values!r}")
    if grids.interference_kv_len < 1:
        raise ProfilingError(f"interference_kv_len must be >= 1, got {grids.interference_kv_len}")
    if grids.warmup < 0 or grids.repeats < 1:
        raise ProfilingError(f"need warmup >= 0 and repeats >= 1, got {grids.warmup} and {grids.repeats}")


def positions_needed(grids: ProfileGrids) -> int:
    """The longest context of any point: a prompt, a decode's kv_len + 1, or a mixed step's
    chunk beside decodes at ``interference_kv_len + 1`` (the chunk uses its own positions)."""
    return max(
        max(grids.prompt_lens),
        max(grids.kv_lens) + 1,
        max(grids.chunk_sizes) + grids.interference_kv_len + 1,
    )


def check_context(grids: ProfileGrids, config: ModelConfig) -> None:
    """Refuse grids longer than the model's context: such points measure nothing a deployment
    runs, and absurd lengths would exhaust host memory (rotary tables) before any error."""
    need = positions_needed(grids)
    if need > config.max_position_embeddings:
        raise ProfilingError(
            f"the grids need a context of {need} tokens but {config.name} supports "
            f"{config.max_position_embeddings} (max_position_embeddings); shorten the grids"
        )


def kv_capacity_tokens(grids: ProfileGrids, block_size_bound: int = 256) -> int:
    """KV tokens the cache must hold for the largest point (plus block rounding slack)."""
    return positions_needed(grids) + 2 * block_size_bound


class Measurements:
    """The measurements on one runner (each method fills one table)."""

    def __init__(self, runner: ModelRunner, grids: ProfileGrids, *, use_graphs: bool, seed: int) -> None:
        self.runner, self.grids, self.use_graphs = runner, grids, use_graphs
        self._rng = random.Random(seed)

    def _tokens(self, n: int) -> tuple[int, ...]:
        return tuple(self._rng.randrange(self.runner.config.vocab_size) for _ in range(n))

    def _table(self, tables: dict[tuple[str, int], list[int]], kind: str, num_tokens: int) -> list[int]:
        """The block table of ``(kind, num_tokens)``, allocated on first use within one point."""
        if (kind, num_tokens) not in tables:
            tables[(kind, num_tokens)] = self.runner.allocator.allocate(num_tokens)
        return tables[(kind, num_tokens)]

    def _time(self, steps: list[tuple[int | None, int | None, int]]) -> tuple[Timing, ...]:
        """Time steps given as ``(prefill_len, kv_len, num_decodes)``, interleaved.

        Each step is an optional fresh prompt of ``prefill_len`` tokens plus ``num_decodes``
        decodes at ``kv_len`` that share one block table (the same table for every step).
        """
        alloc = self.runner.allocator
        tables: dict[tuple[str, int], list[int]] = {}
        try:
            fns = []
            for prefill_len, kv_len, num_decodes in steps:
                prefills, decodes = [], []
                if prefill_len is not None:
                    table = self._table(tables, "prefill", prefill_len)
                    prefills.append(SequenceChunk(self._tokens(prefill_len), 0, tuple(table)))
                if kv_len is not None and num_decodes:
                    table = self._table(tables, "decode", kv_len + 1)
                    decodes = [
                        SequenceChunk(self._tokens(1), kv_len, tuple(table)) for _ in range(num_decodes)
                    ]
                batch = self.runner.prepare(prefills, decodes)
                fns.append(
                    self.runner.capture(batch) if self.use_graphs else partial(self.runner.forward, batch)
                )
            return time_interleaved(
                fns, warmup=self.grids.warmup, repeats=self.grids.repeats, device=self.runner.device
            )
        finally:
            for table in tables.values():
                alloc.free(table)

    def _single(self, name: str, step: tuple[int | None, int | None, int]) -> dict[str, Timing]:
        return {name: self._time([step])[0]}

    def prefill(self, points: PointRecorder) -> dict[int, float]:
        out = {}
        for n in self.grids.prompt_lens:
            name = f"prefill/{n}"
            t = points.run(name, partial(self._single, name, (n, None, 0)))
            if t is not None:
                out[n] = t[name].median_ms
        return out

    def decode(self, points: PointRecorder) -> dict[tuple[int, int], float]:
        out = {}
        for kv in self.grids.kv_lens:
            for b in self.grids.batch_sizes:
                name = f"decode/{kv}x{b}"
                t = points.run(name, partial(self._single, name, (None, kv, b)))
                if t is not None:
                    out[(kv, b)] = t[name].median_ms
        return out

    def _pair(self, chunk: int, kv: int, b: int) -> dict[str, Timing]:
        base, mixed = self._time([(None, kv, b), (chunk, kv, b)])
        return {f"baseline/{chunk}x{b}": base, f"mixed/{chunk}x{b}": mixed}

    def interference(self, points: PointRecorder) -> tuple[dict[tuple[int, int], float], ...]:
        """``(T_interference, T_mixed, T_baseline)``, each keyed by ``(chunk, B)``."""
        kv = self.grids.interference_kv_len
        diff, mixed, base = {}, {}, {}
        for c in self.grids.chunk_sizes:
            for b in self.grids.decode_batches:
                t = points.run(f"interference/{c}x{b}", partial(self._pair, c, kv, b))
                if t is not None:
                    base[(c, b)] = t[f"baseline/{c}x{b}"].median_ms
                    mixed[(c, b)] = t[f"mixed/{c}x{b}"].median_ms
                    diff[(c, b)] = mixed[(c, b)] - base[(c, b)]
        return diff, mixed, base

    def graph_problem(self) -> str | None:
        """None when a small mixed step captures as a CUDA graph, else why it did not."""
        try:
            self._time(
                [(min(self.grids.chunk_sizes), min(self.grids.kv_lens), min(self.grids.decode_batches))]
            )
        except RuntimeError as exc:
            return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        return None


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
) -> ProfileResult:
    """Profile ``model_path`` (preset or ``config.json``) and save to ``output_path`` (.pt / .json).

    The model runs on ``cuda:{src_gpu}`` (``device`` "cuda", or "auto" with a GPU present) or on
    the CPU; ``dst_gpu`` is the other end of the KV path. ``bandwidth_gbps`` with
    ``transfer_path`` replaces the bandwidth measurement by an operator-stated figure. On the
    CPU the run uses ``cpu_threads`` intra-op threads (``None``: torch's default): a CPU
    profile is a smoke run, and one thread keeps its timings stable on a shared machine, where
    multi-threaded small kernels mostly measure thread scheduling.
    """
    validate_grids(grids)
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
        bench = Measurements(runner, grids, use_graphs=cuda_graphs and dev.type == "cuda", seed=seed)
        total = len(grids.prompt_lens) + len(grids.kv_lens) * len(grids.batch_sizes)
        total += len(grids.chunk_sizes) * len(grids.decode_batches) + (bandwidth_gbps is None)
        points = PointRecorder(total, progress)
        graphs_note = "on" if bench.use_graphs else "off"
        try:
            if bench.use_graphs and (problem := bench.graph_problem()) is not None:
                points.note(f"warning: CUDA graph capture failed ({problem}); timing eager steps instead")
                bench.use_graphs, graphs_note = False, f"off (capture failed: {problem})"
            t_prefill = bench.prefill(points)
            t_decode = bench.decode(points)
            t_interference, t_mixed, t_baseline = bench.interference(points)
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
            "failed_points": points.failed,
            "build_s": round(build_s, 3),
            "elapsed_s": round(time.monotonic() - started, 3),
        },
    )
    if output_path is not None:
        save_profile(result, output_path)
    return result
