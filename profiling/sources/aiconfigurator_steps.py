"""Mapping the profiler's grid points onto aiconfigurator's engine-step estimates.

aiconfigurator composes kernel timings collected on real GPUs (GEMMs, attention, collectives,
per engine and engine version) into the latency of one engine step. Each grid point of the
torch profiler maps onto one of its step estimates:

* ``T_prefill[L]``: ``InferenceSession.run_static(mode="static_ctx")``, batch 1, ``isl=L``: the
  context step of one L-token prompt.
* ``T_decode[(kv_len, B)]``: ``run_static(mode="static_gen")``, batch B, ``isl=kv_len, osl=2``:
  exactly one generation step whose B sequences hold ``kv_len`` cached tokens each (the
  database attends over ``isl + osl // 2 + 1 = kv_len + 1`` positions, the new token included).
* ``T_mixed[(chunk, B)]``: ``InferenceSession.run_mixed`` with ``MixedStepInput(chunk, B)`` and
  ``isl=interference_kv_len, osl=1``: one engine step of ``chunk`` prefill tokens plus B
  decodes at ``interference_kv_len``. The database models the chunk as one slice of a prompt
  of ``isl`` tokens (attention cost of that prompt divided by ``ceil(isl / chunk)``), so the
  chunk's attention is that of chunked prefill of an ``interference_kv_len``-token prompt.
* ``T_chunk_prefix[(prefix_len, chunk)]``: ``run_static(mode="static_ctx")``, batch 1,
  ``isl=prefix_len + chunk`` with ``prefix=prefix_len``: the context step of a prompt whose
  first ``prefix_len`` tokens are already cached (a prefix-cache hit), so only the ``chunk``
  new tokens run, attending over all ``prefix_len + chunk`` positions. That is one pass of a
  chunk of a long prompt over the chunks before it; with ``prefix_len`` 0 it is ``T_prefill``.
* ``T_baseline[(chunk, B)]``: the pure decode step of the same B sequences (the ``T_decode``
  estimate at ``interference_kv_len``; its decode pass is the mixed step's decode pass), and
  ``T_interference = T_mixed - T_baseline`` as in the torch profiler.

The database is deterministic: every point has one sample, ``grids.warmup``/``repeats`` do not
apply, and the same installed aiconfigurator gives the same profile byte for byte. Points the
database judges out of GPU memory (weights + activations + KV cache over capacity) are left
out and listed in ``provenance["omitted_points"]``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from profiling.sources.aiconfigurator_catalog import DATABASE_MODE, ResolvedSource
from solver.errors import UnsupportedSource
from solver.profile_result import ProfileGrids


@dataclass
class StepTables:
    """The grid points' latencies (ms) and what was left out."""

    prefill: dict[int, float] = field(default_factory=dict)
    decode: dict[tuple[int, int], float] = field(default_factory=dict)
    mixed: dict[tuple[int, int], float] = field(default_factory=dict)
    baseline: dict[tuple[int, int], float] = field(default_factory=dict)
    chunk_prefix: dict[tuple[int, int], float] = field(default_factory=dict)
    samples: dict[str, list[float]] = field(default_factory=dict)
    omitted: list[str] = field(default_factory=list)
    op_sources: dict[str, str] = field(default_factory=dict)


class StepEstimator:
    """One aiconfigurator ``InferenceSession`` for a resolved model/system/backend at ``tp_size``."""

    def __init__(self, source: ResolvedSource, tp_size: int) -> None:
        from aiconfigurator.sdk import perf_database
        from aiconfigurator.sdk.backends.factory import get_backend
        from aiconfigurator.sdk.config_builders import build_model_config
        from aiconfigurator.sdk.inference_session import InferenceSession
        from aiconfigurator.sdk.models import get_model

        database = perf_database.get_database_view(
            source.system, source.backend, source.backend_version, database_mode=DATABASE_MODE
        )
        if database is None:
            raise UnsupportedSource(
                f"aiconfigurator could not load its {source.backend} {source.backend_version} "
                f"database for {source.system}"
            )
        self.where = f"{source.model} on {source.system} at tp {tp_size}"  # for error messages
        self.model = get_model(source.model, build_model_config(tp_size, 1, 1, 1, 1), source.backend)
        self.session = InferenceSession(self.model, database, get_backend(source.backend))

    def static(self, mode: str, batch: int, isl: int, osl: int, prefix: int = 0) -> tuple[float | None, Any]:
        """Latency (ms) of one static context or generation step, or None when out of memory;
        ``prefix`` of the ``isl`` tokens are already cached (context steps)."""
        from aiconfigurator.sdk.config import RuntimeConfig

        config = RuntimeConfig(batch_size=batch, isl=isl, osl=osl, prefix=prefix)
        summary = self.session.run_static(config, mode=mode)
        if summary.check_oom() or summary.check_kv_cache_oom():
            return None, summary
        row = summary.get_result_dict()
        key = "context_latency" if mode == "static_ctx" else "tpot"
        return float(row[key]), summary

    def mixed(self, chunk: int, batch: int, kv_len: int) -> tuple[float, dict[str, str]]:
        """Latency (ms) of one step of ``chunk`` prefill tokens plus ``batch`` decodes at ``kv_len``."""
        from aiconfigurator.sdk.config import RuntimeConfig
        from aiconfigurator.sdk.step_estimate import MixedStepInput

        step = self.session.run_mixed(
            RuntimeConfig(batch_size=batch, isl=kv_len, osl=1),
            MixedStepInput(context_tokens=chunk, num_decode_requests=batch),
        )
        return float(step.latency_ms), {str(k): str(v) for k, v in step.per_op_source.items()}


def estimate_tables(est: StepEstimator, grids: ProfileGrids) -> StepTables:
    """Every grid point, from the database's step estimates (see the module docstring)."""
    t = StepTables()
    for length in sorted(set(grids.prompt_lens)):
        ms, _ = est.static("static_ctx", 1, length, 1)
        if ms is None:
            t.omitted.append(f"prefill/{length}: out of GPU memory")
            continue
        t.prefill[length] = ms
        t.samples[f"prefill/{length}"] = [ms]
    kv_lens = sorted({*grids.kv_lens, grids.interference_kv_len})
    steps: dict[tuple[int, int], float | None] = {}
    for kv in kv_lens:
        for batch in sorted({*grids.batch_sizes, *grids.decode_batches}):
            steps[(kv, batch)], _ = est.static("static_gen", batch, kv, 2)
    for kv in sorted(set(grids.kv_lens)):
        for batch in sorted(set(grids.batch_sizes)):
            ms_or_none = steps[(kv, batch)]
            if ms_or_none is None:
                t.omitted.append(f"decode/{kv}x{batch}: out of GPU memory")
                continue
            t.decode[(kv, batch)] = ms_or_none
            t.samples[f"decode/{kv}x{batch}"] = [ms_or_none]
    kv = grids.interference_kv_len
    for chunk in sorted(set(grids.chunk_sizes)):
        for batch in sorted(set(grids.decode_batches)):
            base = steps[(kv, batch)]
            if base is None:
                t.omitted.append(f"mixed/{chunk}x{batch}: decodes out of GPU memory")
                continue
            mixed_ms, sources = est.mixed(chunk, batch, kv)
            t.op_sources = t.op_sources or sources
            t.mixed[(chunk, batch)] = mixed_ms
            t.baseline[(chunk, batch)] = base
            t.samples[f"mixed/{chunk}x{batch}"] = [mixed_ms]
            t.samples[f"baseline/{chunk}x{batch}"] = [base]
    for prefix in sorted(set(grids.prefix_lens)):
        for chunk in sorted(set(grids.chunk_sizes)):
            ms, _ = est.static("static_ctx", 1, prefix + chunk, 1, prefix=prefix)
            if ms is None:
                t.omitted.append(f"chunk_prefix/{prefix}x{chunk}: out of GPU memory")
                continue
            t.chunk_prefix[(prefix, chunk)] = ms
            t.samples[f"chunk_prefix/{prefix}x{chunk}"] = [ms]
    for name, table in (("T_prefill", t.prefill), ("T_decode", t.decode), ("T_interference", t.mixed)):
        if not table:
            raise UnsupportedSource(
                f"{name}: every grid point is out of GPU memory for {est.where} ({len(t.omitted)} points "
                f"left out, e.g. {t.omitted[0]}); a larger --tp or smaller grid values may fit"
            )
    return t
