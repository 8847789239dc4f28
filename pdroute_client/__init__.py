"""pdroute's gateway client: a fail-open decision call with remote, local and static tiers.

    from pdroute_client import Client, RouteQuery
    with Client("http://pdroute:8000") as client:
        answer = client.route(RouteQuery(prompt_len=4096, system_load=12))
        answer.decision, answer.tier, answer.why   # "disaggregated", "remote", "remote"

See docs/integration.md. The client imports only ``pdroute_core`` of pdroute, and ships with
it alone in the ``pdroute-client`` distribution.
"""

from pdroute_client.answer import LOCAL, REMOTE, STATIC, TIERS, Answer, Cause, Tier
from pdroute_client.async_client import AsyncClient
from pdroute_client.breaker import BreakerConfig, CircuitBreaker
from pdroute_client.errors import InvalidArgument
from pdroute_client.metrics import ClientMetrics
from pdroute_client.query import RouteQuery
from pdroute_client.served import ServedParams
from pdroute_client.static import StaticFallback
from pdroute_client.sync_client import Client

__all__ = [
    "LOCAL",
    "REMOTE",
    "STATIC",
    "TIERS",
    "Answer",
    "AsyncClient",
    "BreakerConfig",
    "Cause",
    "CircuitBreaker",
    "Client",
    "ClientMetrics",
    "InvalidArgument",
    "RouteQuery",
    "ServedParams",
    "StaticFallback",
    "Tier",
]
