"""``RouteQuery``: one ``/route`` request, checked locally with the service's own bounds.

The bounds come from ``pdroute_core.route_fields``, the table the service's request schema is
built from, so a query this module accepts is one the service accepts (types strict as the schema's:
a bool or a float is not an integer). A field left ``None`` is not sent, and the service (or
the client's local tier) applies its default, as ``/route`` documents.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pdroute_client.errors import InvalidArgument
from pdroute_core.bounds import MAX_REQUEST_ID_LEN
from pdroute_core.output_defaults import OutputLenDefaults
from pdroute_core.output_learning import OutputLenSnapshot
from pdroute_core.request_defaults import RouteDefaults, route_inputs
from pdroute_core.route_fields import PREFIX_HIT_INPUTS, ROUTE_CHOICES, ROUTE_FIELDS
from pdroute_core.routing import RouteInputs


@dataclass(frozen=True, slots=True)
class RouteQuery:
    """One request as a gateway reports it (token counts, ms); see ``app.schemas.RouteRequest``.

    Raises ``InvalidArgument`` (naming the field) on construction when a value is out of bounds.
    """

    prompt_len: int
    system_load: int
    predicted_output_len: int | None = None  # the service's default (by prompt length) when None
    decode_batch_size: int | None = None  # 1 when None
    chunk_size: int | None = None  # 256 when None
    prefill_queue_requests: int | None = None
    prefill_queue_tokens: int | None = None
    prefill_running_requests: int | None = None
    prefill_pool_gpus: int | None = None
    pending_prefill_tokens: int | None = None
    decode_pending_prefill_tokens: int | None = None
    colloc_context_tokens: int | None = None
    decode_context_tokens: int | None = None
    cached_prompt_tokens: int | None = None
    ttft_slo_ms: float | None = None  # the service's default_ttft_slo_ms when None
    tpot_slo_ms: float | None = None  # the service's default_tpot_slo_ms when None
    colloc_prefill_tokens_per_s: float | None = None  # recent prefill rate of the collocation GPU
    decode_prefill_tokens_per_s: float | None = None  # the same on the decode GPU
    prefill_running_tokens: int | None = None  # prompt tokens of the prefills running on the pool
    prefill_running_elapsed_ms: float | None = None  # how long they have been running, on average
    colloc_tpot_slack_ms: float | None = None  # the least TPOT slack of the collocation GPU's decodes
    colloc_tpot_slack2_ms: float | None = None  # the second least
    colloc_feasible_routes: int | None = None  # requests sent to the collocation GPU lately, expected in time
    decode_feasible_routes: int | None = None  # the same for the decode GPU
    colloc_cached_prompt_tokens: int | None = None  # prompt tokens in the collocation GPU's prefix cache
    prefill_cached_prompt_tokens: int | None = None  # prompt tokens in the prefill GPU's prefix cache
    pending_prefill_prefix_tokens: float | None = None  # mean prefix under the pending prompt tokens there
    pending_prefill_requests: int | None = None  # prompts pending prefill on the collocation GPU
    prefill_arrival_tokens_per_s: float | None = None  # prompt tokens/s sent to the prefill pool lately
    prefill_step_tokens: int | None = None  # the prefill engines' token budget per step
    colloc_arrivals_per_s: float | None = None  # requests/s sent to the collocation GPU over a long window
    objective: str | None = None  # latency or goodput; the service's setting when None
    request_id: str | None = None

    def __post_init__(self) -> None:
        check(self)

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], *, where: str = "") -> RouteQuery:
        """A query from a dict of ``/route`` body fields; unknown names are refused."""
        unknown = sorted(set(data) - _FIELD_NAMES)
        if unknown:
            raise InvalidArgument(where + unknown[0], "unknown field (misspelt?)")
        for name in ("prompt_len", "system_load"):
            if data.get(name) is None:
                raise InvalidArgument(where + name, "required")
        try:
            return cls(**data)
        except InvalidArgument as exc:
            raise InvalidArgument(where + exc.field, exc.problem) from None

    def body(self) -> dict[str, Any]:
        """The ``/route`` JSON body: the fields given (``None`` left out for the service's defaults)."""
        return {name: value for name in _FIELD_ORDER if (value := getattr(self, name)) is not None}

    def inputs(
        self,
        default_output_len: int | OutputLenDefaults,
        default_ttft_slo_ms: float | None,
        default_tpot_slo_ms: float | None,
        output_learning: OutputLenSnapshot | None = None,
    ) -> RouteInputs:
        """The model's inputs with the service's defaults applied (``pdroute_core.request_defaults``,
        as the service applies them).

        ``default_output_len``: one length for every request, or the service's table by prompt length.
        ``output_learning``: the service's output-length snapshot in force, which corrects the told
        length (sent or default) as ``app.routes.route.corrected_inputs`` does; None: no correction.
        """
        if isinstance(default_output_len, int):
            defaults = RouteDefaults(default_output_len, default_ttft_slo_ms, default_tpot_slo_ms)
        else:
            table = default_output_len
            defaults = RouteDefaults(table.default, default_ttft_slo_ms, default_tpot_slo_ms, table)
        inputs = route_inputs(self, defaults)
        if output_learning is None:
            return inputs
        corrected = output_learning.corrected(self.prompt_len, inputs.predicted_output_len)
        return dataclasses.replace(inputs, predicted_output_len=corrected)


_FIELD_ORDER = tuple(f.name for f in dataclasses.fields(RouteQuery))
_FIELD_NAMES = frozenset(_FIELD_ORDER)


def check(query: RouteQuery) -> None:
    """Raise ``InvalidArgument`` for the first field the service's schema would refuse."""
    for bound in ROUTE_FIELDS:
        name = bound.name
        value = getattr(query, name)
        if value is None:
            if bound.required:
                raise InvalidArgument(name, "required")
            continue
        problem = bound.problem(value)
        if problem is not None:
            raise InvalidArgument(name, problem)
    for choice in ROUTE_CHOICES:
        value = getattr(query, choice.name)
        if value is not None and (problem := choice.problem(value)) is not None:
            raise InvalidArgument(choice.name, problem)
    for name in PREFIX_HIT_INPUTS:
        cached = getattr(query, name)
        if cached is not None and cached > query.prompt_len:
            raise InvalidArgument(name, f"must be <= prompt_len ({query.prompt_len}), got {cached}")
    rid = query.request_id
    if rid is not None:
        if not isinstance(rid, str):
            raise InvalidArgument("request_id", f"expected a string, got {type(rid).__name__}")
        if len(rid) > MAX_REQUEST_ID_LEN:
            raise InvalidArgument("request_id", f"at most {MAX_REQUEST_ID_LEN} characters, got {len(rid)}")
