"""Routing decisions: what a decision model is, the two models, and the registry by name."""

from pdroute_core.routing.design import AnalyticalCostModel, RouteBatch, RouteBreakdown
from pdroute_core.routing.queue_aware import QueueAwareModel
from pdroute_core.routing.queue_aware_breakdown import QueueAwareBatch, QueueAwareBreakdown
from pdroute_core.routing.registry import AUTO, MODEL_NAMES, all_reasons, build_model, default_model_name
from pdroute_core.routing.types import (
    COLLOCATED,
    DISAGGREGATED,
    OPTIONAL_INPUTS,
    OPTIONAL_RATE_INPUTS,
    UNLISTED_INPUTS,
    Decision,
    DecisionModel,
    RouteColumns,
    RouteInputs,
    term_names,
)

__all__ = [
    "AUTO",
    "COLLOCATED",
    "DISAGGREGATED",
    "MODEL_NAMES",
    "OPTIONAL_INPUTS",
    "OPTIONAL_RATE_INPUTS",
    "UNLISTED_INPUTS",
    "AnalyticalCostModel",
    "Decision",
    "DecisionModel",
    "QueueAwareBatch",
    "QueueAwareBreakdown",
    "QueueAwareModel",
    "RouteBatch",
    "RouteBreakdown",
    "RouteColumns",
    "RouteInputs",
    "all_reasons",
    "build_model",
    "default_model_name",
    "term_names",
]
