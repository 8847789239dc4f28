"""Closed-loop turns: a request released by the finish of another, after a think time.

A conversation's next prompt is sent when the client has read the previous answer and thought:
its arrival is not a fixed time but ``finish(previous) + think``. ``TurnLinks`` names, for each
such follow-up request, its previous turn and the think time; the event loop
(``solver.sim.events``) then ignores the follow-up's ``Workload.arrival_s`` (an open-loop
estimate, kept for ordering and the workload's nominal rate) and lets it arrive when its
previous turn finishes (or, when the gateway dropped that turn, ``think_s`` after it arrived).
Requests that follow nothing arrive at their ``arrival_s`` as always. Rescaling a workload
(``Workload.at_rate``, ``scaled``) therefore moves the first turns only: think times are the
clients', not the load's.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from solver.errors import InvalidTrace

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True, eq=False)
class TurnLinks:
    """Follow-up requests, each with the earlier request whose finish releases it."""

    follow_up: IntArray  # request ids released by a finish, distinct
    previous: IntArray  # the request each waits for (a lower id; each at most once)
    think_s: FloatArray  # seconds from that finish to the follow-up's arrival (>= 0)

    def __post_init__(self) -> None:
        k = len(self.follow_up)
        if len(self.previous) != k or len(self.think_s) != k:
            raise InvalidTrace("turn links: follow_up, previous and think_s differ in length")
        if k and (np.any(self.previous < 0) or np.any(self.previous >= self.follow_up)):
            raise InvalidTrace("turn links: a follow-up must come after the request it waits for")
        if len(np.unique(self.follow_up)) != k or len(np.unique(self.previous)) != k:
            raise InvalidTrace("turn links: each request follows, and is followed by, at most one")
        if not np.all(np.isfinite(self.think_s)) or np.any(self.think_s < 0):
            raise InvalidTrace("turn links: think times must be finite and >= 0 s")

    def head(self, num_requests: int) -> TurnLinks:
        """The links among the first ``num_requests`` requests."""
        keep = self.follow_up < num_requests
        return TurnLinks(self.follow_up[keep], self.previous[keep], self.think_s[keep])
