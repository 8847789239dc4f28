"""The /route edge of auto-fill: a parsed request naming engine targets -> the model's inputs.

``RequestFiller.inputs`` checks the named ids against the fleet (a 422 naming the field and the
id otherwise), fills each load field the caller did not send from a fresh reading
(``app.engines.autofill.fill``) and says where every load field came from. Values the caller
sends always win. It reads the scraper's current snapshot once per call: no lock, no await.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from pydantic import ValidationError
from pydantic_core import PydanticCustomError

from app.engines.autofill import (
    ASSUMED,
    CALLER,
    ENGINE_FIELDS,
    FleetSnapshot,
    Targets,
    cached_fill,
    target_errors,
)
from app.schemas.route import RouteRequest
from pdroute_core.bounds import MAX_GPUS, MAX_LOAD, MAX_TOKENS, MAX_TOKENS_PER_S
from pdroute_core.routing.types import OPTIONAL_RATE_INPUTS

# The request schema's upper bound of each field a scrape can fill.
CAPS: dict[str, float] = {
    **dict.fromkeys(ENGINE_FIELDS, MAX_TOKENS),
    **dict.fromkeys(OPTIONAL_RATE_INPUTS, MAX_TOKENS_PER_S),
    **dict.fromkeys(
        ("system_load", "decode_batch_size", "prefill_queue_requests", "prefill_running_requests"), MAX_LOAD
    ),
    "prefill_pool_gpus": MAX_GPUS,
}

Sources = dict[str, dict[str, Any]]
_ALL_ASSUMED: Sources = dict.fromkeys(ENGINE_FIELDS, ASSUMED)  # in ENGINE_FIELDS order
_ENGINE_SET = frozenset(ENGINE_FIELDS)


class SnapshotSource(Protocol):
    @property
    def snapshot(self) -> FleetSnapshot: ...


class RequestFiller:
    """Fills requests from ``source.snapshot`` (None: no engines configured, targets refused)."""

    def __init__(self, source: SnapshotSource | None, monotonic: Callable[[], float], stale_s: float) -> None:
        self.source = source
        self.monotonic = monotonic
        self.stale_s = stale_s

    def current(self) -> tuple[FleetSnapshot | None, float]:
        """The snapshot and the time to judge its readings by, read once per request or batch."""
        return (self.source.snapshot if self.source is not None else None), self.monotonic()

    def fill(
        self,
        req: RouteRequest,
        snapshot: FleetSnapshot | None,
        now: float,
        loc: tuple[str | int, ...] = (),
    ) -> tuple[dict[str, float], Sources]:
        """The load fields to fill (the caller's values win) and where every load field came from.

        Fields neither sent nor scraped are left to ``route_inputs``'s assumptions. The values
        dict may be the memoised one: read it, never change it.
        """
        targets = Targets(req.decode_target, req.colloc_target, req.prefill_target)
        filled = snapshot.fill_cache.get(targets) if snapshot is not None else None
        if filled is None or not filled.is_valid_at(now):
            # Checked on a miss only: a cached fill exists only for targets this fleet serves.
            errors = target_errors(snapshot.fleet if snapshot is not None else None, targets)
            if errors or snapshot is None:  # no snapshot: no engines, and errors says so
                raise _refusal(errors, loc)
            filled = cached_fill(snapshot, targets, now, self.stale_s, CAPS)
        sources: Sources = {**_ALL_ASSUMED, **filled.sources(now)}
        sent = [name for name in req.model_fields_set & _ENGINE_SET if getattr(req, name) is not None]
        if not sent:
            return filled.values, sources
        sources.update(dict.fromkeys(sent, CALLER))
        return {k: v for k, v in filled.values.items() if k not in sent}, sources


def _refusal(errors: list[tuple[str, str, str]], loc: tuple[str | int, ...]) -> ValidationError:
    """The 422 of targets the fleet cannot serve: each names its field and the id."""
    return ValidationError.from_exception_data(
        "RouteRequest",
        [
            {"type": PydanticCustomError("unknown_endpoint", why), "loc": (*loc, field), "input": value}
            for field, value, why in errors
        ],
    )
