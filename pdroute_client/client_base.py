"""``ClientBase``: what ``Client`` and ``AsyncClient`` hold alike, and the views on it.

Both check their deadlines, keep their refresh schedule and own one ``Tiers``; they differ only
in their transport (``httpx.Client`` or ``httpx.AsyncClient``) and in how they wait.
"""

from __future__ import annotations

import httpx
from prometheus_client import CollectorRegistry

from pdroute_client.breaker import CircuitBreaker, State
from pdroute_client.served import ServedParams
from pdroute_client.tiers import Tiers, check_deadline


class ClientBase:
    """The deadlines (s), the params refresh schedule (s) and the tiers of one client."""

    _tiers: Tiers  # set by the subclass, once its wake-up hook exists

    def __init__(
        self, deadline_s: float, batch_deadline_s: float, refresh_interval_s: float, refresh_timeout_s: float
    ) -> None:
        self.deadline_s = check_deadline(deadline_s)
        self.batch_deadline_s = check_deadline(batch_deadline_s)
        self.refresh_interval_s = refresh_interval_s
        self.refresh_timeout_s = refresh_timeout_s

    @property
    def params(self) -> ServedParams | None:
        """The params the local tier decides with (``None`` before the first fetch succeeds)."""
        return self._tiers.served

    @property
    def breaker_state(self) -> State:
        return self._tiers.breaker.state

    @property
    def breaker(self) -> CircuitBreaker:
        """The breaker in front of the service (a benchmark holds it open to time the local tier)."""
        return self._tiers.breaker

    @property
    def metrics_registry(self) -> CollectorRegistry:
        return self._tiers.metrics.registry


def pool_limits(max_connections: int) -> httpx.Limits:
    """A pool of ``max_connections`` connections, all kept alive."""
    return httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections)
