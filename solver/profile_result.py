"""``ProfileResult``: the measured tables a profile source produces, and their JSON form.

Both sources (the torch profiler in ``profiling/`` and the aiconfigurator database source)
produce this one shape; ``solver.fit`` fits it and ``solver.sim`` replays its tables. This
module is torch-free: the ``.pt`` reader lives in ``profiling`` and converts to the same dict.

JSON form (``schema_version`` 1)::

    {
      "schema_version": 1,
      "T_prefill": [{"prompt_len": 64, "ms": 3.1}, ...],
      "T_decode": [{"kv_len": 128, "batch": 1, "ms": 7.0}, ...],
      "T_interference": [{"chunk": 64, "decode_batch": 4, "ms": 0.9}, ...],
      "T_chunk_prefix": [{"prefix_len": 2048, "chunk": 512, "ms": 13.8}, ...],   (optional)
      "kv_capacity_tokens": 400000,                                              (optional)
      "p2p_bandwidth_GBps": 300.0,
      "bytes_per_token": 147456,
      "model_config": {...}, "device": {...}, "transfer_path": "nvlink",
      "versions": {...}, "grids": {...}, "samples": {...}, "provenance": {...}
    }

``T_decode`` keys are ``(kv_len, batch)``; ``T_interference`` keys are ``(chunk_size,
decode_batch)``. ``samples`` maps a point's name (``"prefill/64"``, ``"decode/128x4"``,
``"mixed/256x8"``, ``"baseline/256x8"``, ``"chunk_prefix/2048x512"`` for prefix 2048 and chunk
512) to the list of raw timed samples (ms).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from solver.errors import InvalidProfile

PROFILE_SCHEMA_VERSION = 1


@dataclass(frozen=True)
class ProfileGrids:
    """The measurement grids (the design's defaults); every profile source honours them."""

    prompt_lens: tuple[int, ...] = (64, 128, 256, 512, 1024, 2048)  # prefill points
    kv_lens: tuple[int, ...] = (128, 512, 1024, 2048)  # decode: context length of each sequence
    batch_sizes: tuple[int, ...] = (1, 4, 8, 16, 32)  # decode: number of sequences
    chunk_sizes: tuple[int, ...] = (64, 128, 256, 512)  # interference: prefill tokens in the step
    decode_batches: tuple[int, ...] = (4, 8, 16)  # interference: decodes sharing the step
    interference_kv_len: int = 512  # interference: context length of those decodes
    warmup: int = 3  # untimed runs per point
    repeats: int = 10  # timed runs per point (the median is kept)
    # T_chunk_prefix: prefix lengths already in the KV cache, each measured for every chunk in
    # chunk_sizes (a pass of `chunk` new tokens over `prefix_len` cached ones); empty: not measured.
    prefix_lens: tuple[int, ...] = ()

    def to_json_dict(self) -> dict[str, Any]:
        """The grids as JSON; ``prefix_lens`` only when set, so grids without it (every profile
        made before it existed) write back byte for byte."""
        out: dict[str, Any] = {
            "prompt_lens": list(self.prompt_lens),
            "kv_lens": list(self.kv_lens),
            "batch_sizes": list(self.batch_sizes),
            "chunk_sizes": list(self.chunk_sizes),
            "decode_batches": list(self.decode_batches),
            "interference_kv_len": self.interference_kv_len,
            "warmup": self.warmup,
            "repeats": self.repeats,
        }
        if self.prefix_lens:
            out["prefix_lens"] = list(self.prefix_lens)
        return out


# A grid small enough for a CPU run of the tiny preset in seconds.
QUICK_GRIDS = ProfileGrids(
    prompt_lens=(16, 32, 64, 128),
    kv_lens=(32, 128),
    batch_sizes=(1, 2, 4, 8),
    # On a loaded CPU a ~1 ms step is stalled by the scheduler for ~10 ms in about half of its
    # runs, which no median survives. A 1024-token chunk adds ~25 ms to the tiny preset's step,
    # so the fitted gamma (a slope weighted by chunk size) stays positive however the stalls
    # fall; chunks of at most 64 tokens (~0.5 ms) gave a non-positive gamma in 4 to 10 of 40
    # profiles on a loaded 2-core machine, this grid in none of 40 (docs/profiling.md).
    chunk_sizes=(64, 256, 1024),
    decode_batches=(2, 4),
    interference_kv_len=64,
    warmup=1,
    repeats=9,
)

# The long-context grid (``pdroute profile --grid long``): the design's grids carried to 32,768
# tokens, for GPUs. Prefill and decode double from 2,048 to 32,768; T_chunk_prefix covers every
# chunk size over prefixes up to 32,256, so the longest pass (32,256 + 512) ends at 32,768, the
# same context as the longest prompt. Decode batches stay the design's: 32 sequences at 32,768
# tokens already hold ~150 GB of KV cache in a real engine (the profiler shares one block table,
# so it measures them, but no 80 GB GPU serves them).
LONG_GRIDS = ProfileGrids(
    prompt_lens=(64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768),
    kv_lens=(128, 512, 1024, 2048, 4096, 8192, 16384, 32768),
    prefix_lens=(512, 2048, 8192, 16384, 32256),
)


@dataclass(frozen=True)
class ProfileResult:
    """Measured latencies of one model on one hardware and KV path (all times in ms)."""

    T_prefill: Mapping[int, float]  # prompt_len -> ms of one prefill forward
    T_decode: Mapping[tuple[int, int], float]  # (kv_len, batch) -> ms of one decode step
    T_interference: Mapping[tuple[int, int], float]  # (chunk, decode_batch) -> t_mixed - t_decode
    p2p_bandwidth_GBps: float  # GB/s of the KV path (measured, or a stated spec figure)
    bytes_per_token: int  # KV-cache bytes per token
    model_config: Mapping[str, Any] = field(default_factory=dict)  # architecture actually run
    device: Mapping[str, Any] = field(default_factory=dict)  # names of the GPUs / system
    transfer_path: str = "unknown"  # "nvlink", "pcie-p2p", "pinned-relay", "network", ...
    versions: Mapping[str, Any] = field(default_factory=dict)  # torch, CUDA, database versions
    grids: Mapping[str, Any] = field(default_factory=dict)  # the grids requested
    samples: Mapping[str, list[float]] = field(default_factory=dict)  # raw samples per point
    provenance: Mapping[str, Any] = field(default_factory=dict)  # source and how it was made
    # Mixed-step and pure-decode latencies behind T_interference, when recorded (the simulator
    # uses them as step times): (chunk, decode_batch) -> ms.
    T_mixed: Mapping[tuple[int, int], float] = field(default_factory=dict)
    T_baseline: Mapping[tuple[int, int], float] = field(default_factory=dict)
    interference_kv_len: int = 512  # kv_len of the decodes in the interference measurement
    # (prefix_len, chunk) -> ms of one pass of ``chunk`` new tokens over a cached prefix.
    T_chunk_prefix: Mapping[tuple[int, int], float] = field(default_factory=dict)
    kv_capacity_tokens: int | None = None  # KV-cache tokens one engine instance holds

    def to_json_dict(self) -> dict[str, Any]:
        """The JSON form (see the module docstring); keys sorted for a stable file. The optional
        ``T_chunk_prefix`` and ``kv_capacity_tokens`` are written only when known, so a profile
        made without them reads and writes back byte for byte."""
        out = self._required_json_dict()
        if self.T_chunk_prefix:
            out["T_chunk_prefix"] = [
                {"prefix_len": k[0], "chunk": k[1], "ms": v} for k, v in sorted(self.T_chunk_prefix.items())
            ]
        if self.kv_capacity_tokens is not None:
            out["kv_capacity_tokens"] = self.kv_capacity_tokens
        return out

    def _required_json_dict(self) -> dict[str, Any]:
        return {
            "schema_version": PROFILE_SCHEMA_VERSION,
            "T_prefill": [{"prompt_len": k, "ms": v} for k, v in sorted(self.T_prefill.items())],
            "T_decode": [{"kv_len": k[0], "batch": k[1], "ms": v} for k, v in sorted(self.T_decode.items())],
            "T_interference": [
                {"chunk": k[0], "decode_batch": k[1], "ms": v} for k, v in sorted(self.T_interference.items())
            ],
            "T_mixed": [
                {"chunk": k[0], "decode_batch": k[1], "ms": v} for k, v in sorted(self.T_mixed.items())
            ],
            "T_baseline": [
                {"chunk": k[0], "decode_batch": k[1], "ms": v} for k, v in sorted(self.T_baseline.items())
            ],
            "interference_kv_len": self.interference_kv_len,
            "p2p_bandwidth_GBps": self.p2p_bandwidth_GBps,
            "bytes_per_token": self.bytes_per_token,
            "model_config": dict(self.model_config),
            "device": dict(self.device),
            "transfer_path": self.transfer_path,
            "versions": dict(self.versions),
            "grids": dict(self.grids),
            "samples": {k: list(v) for k, v in self.samples.items()},
            "provenance": dict(self.provenance),
        }


def _number(value: Any, where: str, *, allow_negative: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidProfile(f"{where}: expected a number, got {value!r}")
    f = float(value)
    if not math.isfinite(f):
        raise InvalidProfile(f"{where}: must be finite, got {value!r}")
    if not allow_negative and f <= 0:
        raise InvalidProfile(f"{where}: must be > 0, got {value!r}")
    return f


def _int_key(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidProfile(f"{where}: expected a positive integer, got {value!r}")
    return value


def _table(
    data: Mapping[str, Any], name: str, keys: tuple[str, ...], *, required: bool, allow_negative: bool
) -> dict[Any, float]:
    rows = data.get(name)
    if rows is None:
        if required:
            raise InvalidProfile(f"{name}: missing")
        return {}
    if not isinstance(rows, list):
        raise InvalidProfile(f"{name}: expected a list of rows")
    if required and not rows:
        raise InvalidProfile(f"{name}: empty")
    out: dict[Any, float] = {}
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            raise InvalidProfile(f"{name}[{i}]: expected an object")
        for key in (*keys, "ms"):
            if key not in row:
                raise InvalidProfile(f"{name}[{i}].{key}: missing")
        ks = tuple(_int_key(row[k], f"{name}[{i}].{k}") for k in keys)
        ms = _number(row["ms"], f"{name}[{i}].ms", allow_negative=allow_negative)
        out[ks[0] if len(ks) == 1 else ks] = ms
    return out


def profile_from_json_dict(data: Any) -> ProfileResult:
    """Validate the JSON form and build a ``ProfileResult``; raise ``InvalidProfile``."""
    if not isinstance(data, dict):
        raise InvalidProfile(f"expected a JSON object, got {type(data).__name__}")
    version = data.get("schema_version")
    if version != PROFILE_SCHEMA_VERSION:
        raise InvalidProfile(
            f"schema_version: unsupported version {version!r} (this pdroute reads {PROFILE_SCHEMA_VERSION})"
        )
    bpt = data.get("bytes_per_token")
    if isinstance(bpt, bool) or not isinstance(bpt, int) or bpt < 1:
        raise InvalidProfile(f"bytes_per_token: expected a positive integer, got {bpt!r}")
    if "p2p_bandwidth_GBps" not in data:
        raise InvalidProfile("p2p_bandwidth_GBps: missing")
    dicts = {}
    for key in ("model_config", "device", "versions", "grids", "samples", "provenance"):
        value = data.get(key, {})
        if not isinstance(value, dict):
            raise InvalidProfile(f"{key}: expected an object")
        dicts[key] = value
    kv = data.get("interference_kv_len", 512)
    capacity = data.get("kv_capacity_tokens")
    if capacity is not None:
        capacity = _int_key(capacity, "kv_capacity_tokens")
    return ProfileResult(
        T_prefill=_table(data, "T_prefill", ("prompt_len",), required=True, allow_negative=False),
        T_decode=_table(data, "T_decode", ("kv_len", "batch"), required=True, allow_negative=False),
        # Interference is a difference of two timings: small negatives are measurement noise.
        T_interference=_table(
            data, "T_interference", ("chunk", "decode_batch"), required=True, allow_negative=True
        ),
        T_mixed=_table(data, "T_mixed", ("chunk", "decode_batch"), required=False, allow_negative=False),
        T_baseline=_table(
            data, "T_baseline", ("chunk", "decode_batch"), required=False, allow_negative=False
        ),
        interference_kv_len=_int_key(kv, "interference_kv_len"),
        T_chunk_prefix=_table(
            data, "T_chunk_prefix", ("prefix_len", "chunk"), required=False, allow_negative=False
        ),
        kv_capacity_tokens=capacity,
        p2p_bandwidth_GBps=_number(data["p2p_bandwidth_GBps"], "p2p_bandwidth_GBps"),
        bytes_per_token=bpt,
        transfer_path=str(data.get("transfer_path", "unknown")),
        **dicts,
    )
