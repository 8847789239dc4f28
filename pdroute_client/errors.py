"""The one exception the client raises: an argument the service would refuse (a 422)."""

from __future__ import annotations


class InvalidArgument(ValueError):
    """A request argument outside the service's bounds; ``field`` names it (``requests[3].prompt_len``
    in a batch). Raised before any I/O: the service is never asked about a request it would refuse."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field = field
        self.problem = problem
