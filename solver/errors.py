"""The small vocabulary of domain errors the core raises; ``app.http.errors`` maps them to HTTP.

Their base ``PdrouteError`` and ``InvalidParams`` belong to the model core: import them from
``pdroute_core.errors``, where they are defined (every error is imported from its own module).
"""

from pdroute_core.errors import PdrouteError


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
