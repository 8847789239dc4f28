"""Decision models by name: the one place that turns a params set and a name into a model.

``design`` is the design document's analytical model (``pdroute_core.routing.design``); it serves
any params file. ``queue-aware`` (``pdroute_core.routing.queue_aware``) needs params of schema
version 2, which carry its fitted forms. ``default_model_name`` picks the queue-aware model
when the params carry it, so a version-1 file keeps serving the design's model.
"""

from __future__ import annotations

from pdroute_core.errors import InvalidParams
from pdroute_core.params import CostModelParams
from pdroute_core.routing import design, queue_aware
from pdroute_core.routing.objective import LATENCY
from pdroute_core.routing.types import DecisionModel

MODEL_NAMES = (design.NAME, queue_aware.NAME)
AUTO = "auto"


def default_model_name(params: CostModelParams) -> str:
    """``queue-aware`` when ``params`` carry its forms, else ``design``."""
    return queue_aware.NAME if params.queue_aware is not None else design.NAME


def build_model(
    name: str,
    params: CostModelParams,
    *,
    harm_weight: float = queue_aware.DEFAULT_HARM_WEIGHT,
    slo_margin: float = queue_aware.DEFAULT_SLO_MARGIN,
    objective: str = LATENCY,
    first_token: str = queue_aware.FIRST_TOKEN_DECODE,
) -> DecisionModel:
    """The model called ``name`` (or ``auto``: ``default_model_name``) on ``params``.

    ``objective`` (``pdroute_core.routing.objective``) and ``first_token`` (where the client reads
    a disaggregated request's first token) apply to the queue-aware model; the design's model
    has neither and ignores them.

    Raises ``InvalidParams`` when the name is unknown or the params lack the model's forms.
    """
    if name == AUTO:
        name = default_model_name(params)
    if name == design.NAME:
        return design.AnalyticalCostModel(params)
    if name == queue_aware.NAME:
        if params.queue_aware is None:
            raise InvalidParams(
                "model queue-aware: these params have no queue_aware forms (schema_version 1); "
                "refit them with `pdroute fit` or serve the design model"
            )
        return queue_aware.QueueAwareModel(
            params,
            harm_weight=harm_weight,
            slo_margin=slo_margin,
            objective=objective,
            first_token=first_token,
        )
    raise InvalidParams(f"model {name!r}: unknown (one of {', '.join((AUTO, *MODEL_NAMES))})")


def all_reasons() -> tuple[str, ...]:
    """Every reason code any model can give (the bounded label set of the decision counter)."""
    return tuple(dict.fromkeys((*design.REASONS, *queue_aware.REASONS)))
