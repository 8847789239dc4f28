"""The small vocabulary of domain errors the core raises; ``app.errors`` maps them to HTTP.

``PdrouteError`` and ``InvalidParams`` belong to the model core (``pdroute_core.errors``) and are
named here too, so the rest of the solver has one place to import its errors from.
"""

from pdroute_core.errors import InvalidParams, PdrouteError

__all__ = [
    "FitError",
    "InfeasiblePlan",
    "InvalidCurves",
    "InvalidParams",
    "InvalidProfile",
    "InvalidSimConfig",
    "InvalidTrace",
    "PdrouteError",
    "UnsupportedSource",
]


class InvalidProfile(PdrouteError):
    """A profile (``ProfileResult``) file or mapping is unusable."""


class FitError(PdrouteError):
    """A profile holds too little or too inconsistent data to fit the cost model."""


class InfeasiblePlan(PdrouteError):
    """The capacity planner has no feasible answer for the given inputs."""


class InvalidCurves(PdrouteError):
    """A curve set for the capacity planner is malformed."""


class UnsupportedSource(PdrouteError):
    """A profile source cannot serve the request (model, system, backend or version it lacks)."""


class InvalidTrace(PdrouteError):
    """A request trace (CSV file or generator settings) is unusable."""


class InvalidSimConfig(PdrouteError):
    """A simulator setting (fleet, policy, prediction, SLO) is unusable."""
