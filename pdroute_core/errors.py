"""The errors of the pure model core.

``solver.errors`` extends them and ``app.http.errors`` maps them to HTTP.
"""


class PdrouteError(Exception):
    """Base class of every error pdroute raises on purpose."""


class InvalidParams(PdrouteError):
    """A params file or params mapping is unusable (missing, malformed, out of range)."""
