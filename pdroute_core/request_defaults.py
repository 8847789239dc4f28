"""The one resolution of a ``/route`` request's missing fields into a decision model's ``RouteInputs``.

The service (``app.routes.route``), the gateway client's local tier (``pdroute_client``) and the
simulator (``solver.sim.inputs``) all call ``route_inputs``, so the same request gets the same
inputs everywhere. A request's field left out (``None``) takes, in this order: a value filled
from engine metrics (the service, when the request names an engine target), the service's own
default (the output length by prompt length, the SLO targets of its settings: ``RouteDefaults``),
else the design input's default of ``pdroute_core.route_fields`` (``decode_batch_size`` 1,
``chunk_size`` 256, and ``system_load`` 0: an idle collocation GPU, for a request that names an
engine target whose metrics are not fresh). An optional input still missing stays ``None``:
the decision model assumes its default and lists it in ``assumed`` (``pdroute_core.routing.resolve``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pdroute_core.output_defaults import OutputLenDefaults
from pdroute_core.records import from_fields
from pdroute_core.route_fields import DESIGN_INPUTS, FIELD_NAMES, FIELDS
from pdroute_core.routing.types import RouteInputs

# The design inputs with a default of their own (the others are always given).
_DESIGN_DEFAULTS = tuple(
    (n, int(d)) for n in DESIGN_INPUTS if isinstance(d := FIELDS[n].default, int | float)
)


@dataclass(frozen=True)
class RouteDefaults:
    """What a service assumes for a request's missing fields (from its settings)."""

    output_len: int  # predicted_output_len when a request omits it (and the table is off)
    ttft_slo_ms: float | None  # PDROUTE_DEFAULT_TTFT_SLO_MS
    tpot_slo_ms: float | None  # PDROUTE_DEFAULT_TPOT_SLO_MS
    # PDROUTE_DEFAULT_OUTPUT_LEN_BY_PROMPT: None when off (then output_len).
    output_table: OutputLenDefaults | None = None


def route_inputs(
    request: object, defaults: RouteDefaults, filled: Mapping[str, Any] | None = None
) -> RouteInputs:
    """The model's inputs for one ``request`` (an object with an attribute for every input of
    ``ROUTE_FIELDS``, ``None`` for one not sent; its other attributes are ignored: a parsed
    ``RouteRequest``, a client's ``RouteQuery``, the simulator's view), the defaults applied.

    ``filled`` replaces the request's values by name: the service's load fields filled from
    engine metrics (``app.engines.request_fill``, only those the request did not send), or the
    simulator's view mapped to the model's terms (``solver.sim.inputs``).
    """
    values: dict[str, Any] = {name: getattr(request, name) for name in FIELD_NAMES}
    if filled:
        values.update(filled)
    if values["predicted_output_len"] is None:
        table = defaults.output_table
        values["predicted_output_len"] = (
            defaults.output_len if table is None else table.for_prompt(values["prompt_len"])
        )
    for name, default in _DESIGN_DEFAULTS:
        if values[name] is None:
            values[name] = default
    if values["ttft_slo_ms"] is None:
        values["ttft_slo_ms"] = defaults.ttft_slo_ms
    if values["tpot_slo_ms"] is None:
        values["tpot_slo_ms"] = defaults.tpot_slo_ms
    return from_fields(RouteInputs, values)
