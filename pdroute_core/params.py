"""``CostModelParams``: the fitted parameters of the decision models, their metadata, and the
params format (``params_from_dict``, ``parse_params``, ``to_dict``). Reading and writing the file
is ``solver.params``'s job; this module does no I/O, so the gateway client can share it.

File format (schema version 1)::

    {
      "schema_version": 1,
      "alpha": 0.05,            # ms per prompt token (prefill)
      "beta": 7.1,              # ms per decode step while memory-bound
      "batch_thresh": 64.0,     # decode batch where decode turns compute-bound
      "gamma": 0.02,            # ms of interference per prefill token at full load
      "bandwidth_GBps": 300.0,  # GPU-to-GPU bandwidth of the KV-cache path
      "bytes_per_token": 147456,# KV-cache bytes per token
      "metadata": {"model": ..., "hardware": ..., "transfer_path": ..., "source": ...,
                   "created_at": ..., "fit_quality": {...}, ...}
    }

Validation is complete before a ``CostModelParams`` exists: a bad file never half-loads. The
structure (version, keys, metadata) is checked by ``params_from_dict``, the values once, by
``CostModelParams.__post_init__``.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pdroute_core.errors import InvalidParams
from pdroute_core.queue_params import QueueAwareParams, queue_params_from_dict

# Version 1: the design's six parameters. Version 2 adds the queue-aware model's forms under
# "queue_aware" (pdroute_core.queue_params). A file is written with the lowest version that holds it,
# so a params set without the second model keeps its version-1 bytes and params_id.
SCHEMA_VERSION = 1
SCHEMA_VERSION_QUEUE_AWARE = 2
SUPPORTED_SCHEMA_VERSIONS = (SCHEMA_VERSION, SCHEMA_VERSION_QUEUE_AWARE)
# Every parameter must lie in [PARAM_MIN, PARAM_MAX]: wide enough for any real GPU and model,
# narrow enough that no predicted latency overflows a double for any request the API accepts
# (prompts and outputs up to 2^24 tokens, loads up to 10^6), so answers are always finite JSON.
PARAM_MIN = 1e-9
PARAM_MAX = 1e9
PARAM_NAMES = ("alpha", "beta", "batch_thresh", "gamma", "bandwidth_GBps", "bytes_per_token")


@dataclass(frozen=True)
class ParamsMetadata:
    """Where a set of parameters comes from. Free-form extras live in ``extra``."""

    model: str = "unknown"  # e.g. "Qwen/Qwen3-8B"
    hardware: str = "unknown"  # e.g. "h100_sxm" or "NVIDIA H200"
    transfer_path: str = "unknown"  # e.g. "nvlink", "pcie-p2p", "pinned-relay", "network"
    source: str = "unknown"  # e.g. "torch-profiler", "aiconfigurator"
    created_at: str = "unknown"  # ISO 8601, UTC
    fit_quality: Mapping[str, Any] = field(default_factory=dict)  # R^2 and warnings per parameter
    extra: Mapping[str, Any] = field(default_factory=dict)  # provenance beyond the fixed keys


@dataclass(frozen=True)
class CostModelParams:
    """The analytical cost model's parameters (see ``pdroute_core.routing.design`` for the formulas)."""

    alpha: float  # ms per prompt token: t_prefill(L) = alpha * L
    beta: float  # ms per decode step in the memory-bound regime
    batch_thresh: float  # decode batch where decode turns compute-bound
    gamma: float  # ms of interference per prefill token (at load >= batch_thresh)
    bandwidth_GBps: float  # GB/s of the KV-cache path between prefill and decode GPUs
    bytes_per_token: int  # KV-cache bytes per token (layers x kv heads x head dim x 2 x dtype bytes)
    metadata: ParamsMetadata = field(default_factory=ParamsMetadata)
    queue_aware: QueueAwareParams | None = None  # the second model's forms (schema version 2)

    @property
    def schema_version(self) -> int:
        """1 for the design's parameters alone, 2 when the queue-aware forms are present."""
        return SCHEMA_VERSION if self.queue_aware is None else SCHEMA_VERSION_QUEUE_AWARE

    def __post_init__(self) -> None:
        """The one validation of the six values, whether built by ``params_from_dict`` or in code.

        Numbers are normalised (floats, an integral ``bytes_per_token``) so that a file writing
        ``16`` or ``16.0`` gives the same parameters and the same ``params_id``.
        """
        for name in PARAM_NAMES:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise InvalidParams(f"{name}: expected a number, got {_show(value)}")
            if isinstance(value, int) and abs(value) > 2**63:
                raise InvalidParams(f"{name}: {str(value)[:20]}... is out of range")
            if not math.isfinite(value):
                raise InvalidParams(f"{name}: must be finite, got {value!r}")
            if value <= 0:
                raise InvalidParams(f"{name}: must be > 0, got {value!r}")
            if not PARAM_MIN <= value <= PARAM_MAX:
                raise InvalidParams(
                    f"{name}: {value!r} is outside the plausible range [{PARAM_MIN:g}, {PARAM_MAX:g}]"
                )
        if self.bytes_per_token != int(self.bytes_per_token):
            raise InvalidParams(f"bytes_per_token: must be an integer, got {self.bytes_per_token!r}")
        for name in PARAM_NAMES[:-1]:
            object.__setattr__(self, name, float(getattr(self, name)))
        object.__setattr__(self, "bytes_per_token", int(self.bytes_per_token))

    @property
    def transfer_rate_ms_per_token(self) -> float:
        """KV transfer cost in ms per prompt token: bytes_per_token / (bandwidth_GBps * 1e6)."""
        return self.bytes_per_token / (self.bandwidth_GBps * 1e6)

    @property
    def break_even_load(self) -> float:
        """The system_load above which interference outweighs the transfer (design, section 4).

        Disaggregation wins on the two terms linear in L when
        ``gamma * L * load / batch_thresh > transfer_rate * L``, i.e.
        ``load > batch_thresh * transfer_rate / gamma``. Interference stops growing at
        ``batch_thresh``, so a break-even at or above ``batch_thresh`` means the transfer is
        never paid back by interference alone.
        """
        return self.batch_thresh * self.transfer_rate_ms_per_token / self.gamma

    def to_dict(self) -> dict[str, Any]:
        """The JSON form written to ``params.json``."""
        meta = self.metadata
        out: dict[str, Any] = {
            "schema_version": self.schema_version,
            "alpha": self.alpha,
            "beta": self.beta,
            "batch_thresh": self.batch_thresh,
            "gamma": self.gamma,
            "bandwidth_GBps": self.bandwidth_GBps,
            "bytes_per_token": int(self.bytes_per_token),
            "metadata": {
                "model": meta.model,
                "hardware": meta.hardware,
                "transfer_path": meta.transfer_path,
                "source": meta.source,
                "created_at": meta.created_at,
                "fit_quality": dict(meta.fit_quality),
                **dict(meta.extra),
            },
        }
        if self.queue_aware is not None:
            out["queue_aware"] = self.queue_aware.to_dict()
        return out

    @property
    def params_id(self) -> str:
        """A content hash of the parameters and metadata (12 hex digits of sha256)."""
        canonical = json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()[:12]


_FIXED_META = ("model", "hardware", "transfer_path", "source", "created_at")


def params_from_dict(data: Any) -> CostModelParams:
    """Validate a parsed JSON document and build ``CostModelParams``; raise ``InvalidParams``."""
    if not isinstance(data, dict):
        raise InvalidParams(f"expected a JSON object, got {type(data).__name__}")
    version = data.get("schema_version")
    if version is None:
        raise InvalidParams("schema_version: missing")
    if isinstance(version, bool) or not isinstance(version, int) or version not in SUPPORTED_SCHEMA_VERSIONS:
        raise InvalidParams(
            f"schema_version: unsupported version {version!r} (this pdroute reads "
            f"{', '.join(map(str, SUPPORTED_SCHEMA_VERSIONS))})"
        )
    queue_aware = None
    if version == SCHEMA_VERSION_QUEUE_AWARE:
        if "queue_aware" not in data:
            raise InvalidParams("queue_aware: missing (required by schema_version 2)")
        queue_aware = queue_params_from_dict(data["queue_aware"])
    elif "queue_aware" in data:
        raise InvalidParams("queue_aware: needs schema_version 2")
    missing = next((name for name in PARAM_NAMES if name not in data), None)
    if missing is not None:
        raise InvalidParams(f"{missing}: missing")
    raw_meta = data.get("metadata", {})
    if not isinstance(raw_meta, dict):
        raise InvalidParams(f"metadata: expected an object, got {type(raw_meta).__name__}")
    for key in _FIXED_META:
        if key in raw_meta and not isinstance(raw_meta[key], str):
            raise InvalidParams(f"metadata.{key}: expected a string")
    _check_finite(raw_meta, "metadata")
    fit_quality = raw_meta.get("fit_quality", {})
    if not isinstance(fit_quality, dict):
        raise InvalidParams("metadata.fit_quality: expected an object")
    extra = {k: v for k, v in raw_meta.items() if k not in (*_FIXED_META, "fit_quality")}
    meta = ParamsMetadata(
        fit_quality=fit_quality,
        extra=extra,
        **{k: raw_meta[k] for k in _FIXED_META if k in raw_meta},
    )
    # The values themselves are checked in one place: CostModelParams.__post_init__.
    return CostModelParams(
        **{name: data[name] for name in PARAM_NAMES}, metadata=meta, queue_aware=queue_aware
    )


def _show(value: Any) -> str:
    """A short JSON-like rendering of a bad value for an error line."""
    try:
        return json.dumps(value)[:40]
    except (TypeError, ValueError):
        return type(value).__name__


def _check_finite(node: Any, where: str) -> None:
    """Refuse inf/NaN anywhere (``1e999`` parses as inf): they would make ``/params`` invalid JSON."""
    if isinstance(node, float) and not math.isfinite(node):
        raise InvalidParams(f"{where}: non-finite number {node!r} is not allowed")
    if isinstance(node, dict):
        for key, value in node.items():
            _check_finite(value, f"{where}.{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            _check_finite(value, f"{where}[{i}]")


def _reject_constant(token: str) -> float:
    raise InvalidParams(f"non-finite number {token} is not allowed")


def parse_params(text: str | bytes) -> CostModelParams:
    """Parse and validate the text of a params file."""
    try:
        data = json.loads(text, parse_constant=_reject_constant)
    except InvalidParams:
        raise
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidParams(f"not valid JSON: {exc}") from exc
    except RecursionError:
        raise InvalidParams("not valid params JSON: nested too deeply") from None
    try:
        return params_from_dict(data)
    except RecursionError:
        raise InvalidParams("metadata: nested too deeply") from None
    except (OverflowError, ValueError) as exc:  # e.g. an integer too large for a float
        raise InvalidParams(f"invalid value: {exc}") from None
