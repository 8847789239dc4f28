"""The accepted range of every ``/route`` input: one home for the limits that the service's
request schema (``app.schemas``) and the gateway client (``pdroute_client``) both enforce.

Upper bounds are far beyond any real request and low enough that the arithmetic stays exact
(token counts stay well inside a double's 2^53 integers). ``ROUTE_FIELDS`` states each field's
type and range in one table the client checks locally; the schema builds its pydantic fields
from the same constants (``tests/pdroute_core/test_bounds.py`` checks the two agree).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

MAX_PROMPT_LEN = 16_777_216  # 16M tokens
MAX_OUTPUT_LEN = 16_777_216
MAX_LOAD = 1_000_000
MAX_CHUNK = 16_777_216
MAX_TOKENS = 2**44  # token totals over many requests (queues, contexts): ~1.8e13
MAX_GPUS = 100_000
MAX_SLO_MS = 86_400_000.0  # a day
MAX_TOKENS_PER_S = 1e9  # a GPU's prefill rate (tokens/s): a thousand times any GPU's
MAX_REQUEST_ID_LEN = 256
MAX_BATCH_ITEMS = 100_000  # hard cap; the service's settings.max_batch_requests sets the served limit

DEFAULT_DECODE_BATCH_SIZE = 1  # decode_batch_size when a request omits it
DEFAULT_CHUNK_SIZE = 256  # chunk_size when a request omits it


@dataclass(frozen=True)
class FieldBound:
    """One numeric input: its type, lower bound (inclusive unless ``exclusive_min``) and upper bound."""

    kind: Literal["int", "float"]
    minimum: float
    maximum: float
    exclusive_min: bool = False  # True: the value must be > minimum (the SLOs)
    required: bool = False  # True: a request must give it (no default)

    def problem(self, value: object) -> str | None:
        """Why ``value`` is not accepted (as the service's schema would refuse it), or ``None``.

        Types are strict as in the schema: a bool is not a number, a float is not an integer;
        a float field takes an integer. Floats must be finite.
        """
        if isinstance(value, bool) or not isinstance(value, int | float):
            wanted = "an integer" if self.kind == "int" else "a number"
            return f"expected {wanted}, got {type(value).__name__}"
        if self.kind == "int" and not isinstance(value, int):
            return f"expected an integer, got {value!r}"
        if not math.isfinite(value):
            return f"must be finite, got {value!r}"
        if self.exclusive_min and not value > self.minimum:
            return f"must be > {self.minimum:g}, got {value!r}"
        if not self.exclusive_min and value < self.minimum:
            return f"must be >= {self.minimum:g}, got {value!r}"
        if value > self.maximum:
            return f"must be <= {self.maximum:g}, got {value!r}"
        return None


# Every numeric field of a /route request, in the request's field order.
ROUTE_FIELDS: dict[str, FieldBound] = {
    "prompt_len": FieldBound("int", 1, MAX_PROMPT_LEN, required=True),
    "predicted_output_len": FieldBound("int", 1, MAX_OUTPUT_LEN),
    # The service also takes a request without it that names an engine target to fill it from
    # (app.engines); the client names none, so for the client it is required.
    "system_load": FieldBound("int", 0, MAX_LOAD, required=True),
    "decode_batch_size": FieldBound("int", 0, MAX_LOAD),
    "chunk_size": FieldBound("int", 1, MAX_CHUNK),
    "prefill_queue_requests": FieldBound("int", 0, MAX_LOAD),
    "prefill_queue_tokens": FieldBound("int", 0, MAX_TOKENS),
    "prefill_running_requests": FieldBound("int", 0, MAX_LOAD),
    "prefill_pool_gpus": FieldBound("int", 1, MAX_GPUS),
    "pending_prefill_tokens": FieldBound("int", 0, MAX_TOKENS),
    "decode_pending_prefill_tokens": FieldBound("int", 0, MAX_TOKENS),
    "colloc_context_tokens": FieldBound("int", 0, MAX_TOKENS),
    "decode_context_tokens": FieldBound("int", 0, MAX_TOKENS),
    "cached_prompt_tokens": FieldBound("int", 0, MAX_PROMPT_LEN),  # and at most prompt_len
    "ttft_slo_ms": FieldBound("float", 0, MAX_SLO_MS, exclusive_min=True),
    "tpot_slo_ms": FieldBound("float", 0, MAX_SLO_MS, exclusive_min=True),
    "colloc_prefill_tokens_per_s": FieldBound("float", 0, MAX_TOKENS_PER_S),
    "decode_prefill_tokens_per_s": FieldBound("float", 0, MAX_TOKENS_PER_S),
    "prefill_running_tokens": FieldBound("int", 0, MAX_TOKENS),
}
