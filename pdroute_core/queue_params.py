"""``QueueAwareParams``: the fitted step-time forms of the queue-aware decision model.

Stored in ``params.json`` (schema version 2) under the key ``"queue_aware"``; the model's
formulas are in ``pdroute_core.routing.queue_aware`` and the fit in ``solver.fit_queue``. Every form
is fitted from the same profile tables as the design's six parameters (times in ms)::

    prefill on a prefill GPU:   T_P(u) = prefill_floor_ms
                                         + prefill_ms_per_token * max(0, u - prefill_knee_tokens)
                                         + prefill_ms_per_token_sq * u^2
    decode step:                s(B, K) = decode_base_ms + decode_ms_per_seq * B
                                          + decode_ms_per_context_token * K
    chunk cost added to a step: f(c, B) = c * (chunk_ms_per_token + chunk_ms_per_token_sq * c
                                               + chunk_ms_per_token_seq * B)
    the chunk over its prompt:  f(c, B) + chunk_ms_per_token_prefix * c * p

with ``u`` prompt tokens, ``B`` running decodes, ``K`` their total context tokens, ``c``
prefill tokens in the step and ``p`` tokens of the same prompt before them (cached or
prefilled earlier). The last two are attention: a causal pass over a u-token prompt scores
``u^2 / 2`` token pairs, a c-token chunk over a p-token prefix ``c * p`` more. They are optional
in a file (``OPTIONAL_QUEUE_PARAM_NAMES``, default 0, written only when non-zero), so every
params file written before them loads, answers and writes back bit for bit as before.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from pdroute_core.errors import InvalidParams

# Same plausibility bound as the design's parameters (solver.params): no answer can overflow.
QUEUE_PARAM_MAX = 1e9
QUEUE_PARAM_NAMES = (
    "prefill_floor_ms",
    "prefill_ms_per_token",
    "prefill_knee_tokens",
    "decode_base_ms",
    "decode_ms_per_seq",
    "decode_ms_per_context_token",
    "chunk_ms_per_token",
    "chunk_ms_per_token_sq",
    "chunk_ms_per_token_seq",
)
# Optional in a file, 0 when absent (the forms before them): attention over the prompt so far.
OPTIONAL_QUEUE_PARAM_NAMES = (
    "prefill_ms_per_token_sq",
    "chunk_ms_per_token_prefix",
)
ALL_QUEUE_PARAM_NAMES = (*QUEUE_PARAM_NAMES, *OPTIONAL_QUEUE_PARAM_NAMES)
# A prompt token always costs something: this must be > 0, the others >= 0.
_POSITIVE = ("prefill_ms_per_token",)


@dataclass(frozen=True)
class QueueAwareParams:
    """The queue-aware model's step-time forms (module docstring); all finite and >= 0."""

    prefill_floor_ms: float  # a prefill of up to prefill_knee_tokens tokens
    prefill_ms_per_token: float  # each prompt token beyond the knee
    prefill_knee_tokens: float  # prompt length where the prefill stops being fixed-cost
    decode_base_ms: float  # a decode step's fixed cost
    decode_ms_per_seq: float  # per running sequence in the step
    decode_ms_per_context_token: float  # per KV token read by the step
    chunk_ms_per_token: float  # chunk cost per prefill token added to a step
    chunk_ms_per_token_sq: float  # its growth with the chunk (attention over the chunk)
    chunk_ms_per_token_seq: float  # its growth with the decode batch sharing the step
    prefill_ms_per_token_sq: float = 0.0  # attention of a prefill: per squared prompt token
    chunk_ms_per_token_prefix: float = 0.0  # a chunk's attention over its prefix: per token pair

    def __post_init__(self) -> None:
        for name in ALL_QUEUE_PARAM_NAMES:
            value = getattr(self, name)
            where = f"queue_aware.{name}"
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise InvalidParams(f"{where}: expected a number, got {json.dumps(value)[:40]}")
            if isinstance(value, int) and abs(value) > 2**63:
                raise InvalidParams(f"{where}: {str(value)[:20]}... is out of range")
            if not math.isfinite(value):
                raise InvalidParams(f"{where}: must be finite, got {value!r}")
            if value < 0 or (name in _POSITIVE and value == 0):
                bound = "> 0" if name in _POSITIVE else ">= 0"
                raise InvalidParams(f"{where}: must be {bound}, got {value!r}")
            if value > QUEUE_PARAM_MAX:
                raise InvalidParams(f"{where}: {value!r} is above the plausible bound {QUEUE_PARAM_MAX:g}")

    def to_dict(self) -> dict[str, float]:
        """The ``"queue_aware"`` object; an optional term only when non-zero (module docstring)."""
        return {k: float(v) for k, v in asdict(self).items() if k in QUEUE_PARAM_NAMES or v != 0.0}


def queue_params_from_dict(data: Any) -> QueueAwareParams:
    """Validate the ``"queue_aware"`` object of a params file (raises ``InvalidParams``)."""
    if not isinstance(data, Mapping):
        raise InvalidParams(f"queue_aware: expected an object, got {type(data).__name__}")
    unknown = sorted(set(data) - set(ALL_QUEUE_PARAM_NAMES))
    if unknown:
        raise InvalidParams(f"queue_aware.{unknown[0]}: unknown parameter")
    for name in QUEUE_PARAM_NAMES:
        if name not in data:
            raise InvalidParams(f"queue_aware.{name}: missing")
    # The values themselves are checked in one place: QueueAwareParams.__post_init__.
    return QueueAwareParams(**{name: data[name] for name in ALL_QUEUE_PARAM_NAMES if name in data})
