"""The /route edge of auto-fill: a parsed request naming engine targets -> the model's inputs.

``RequestFiller.inputs`` checks the named ids against the fleet (a 422 naming the field and the
id otherwise), fills each load field the caller did not send from a fresh reading
(``app.engines.autofill.fill``) and says where every load field came from. Values the caller
sends always win. It reads the scraper's current snapshot once per call: no lock, no await.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, Protocol

from pydantic import ValidationError
from pydantic_core import PydanticCustomError

from app.engines.autofill import (
    ASSUMED,
    ASSUMED_DECODE_BATCH_SIZE,
    ASSUMED_SYSTEM_LOAD,
    CALLER,
    ENGINE_FIELDS,
    FleetSnapshot,
    Targets,
    fill,
    target_errors,
)
from app.schemas import MAX_GPUS, MAX_LOAD, MAX_TOKENS, RouteRequest
from pdroute_core.routing import RouteInputs

# The request schema's upper bound of each field a scrape can fill.
CAPS = {
    **dict.fromkeys(ENGINE_FIELDS, MAX_TOKENS),
    **dict.fromkeys(
        ("system_load", "decode_batch_size", "prefill_queue_requests", "prefill_running_requests"), MAX_LOAD
    ),
    "prefill_pool_gpus": MAX_GPUS,
}
_ASSUMED_VALUES = {"system_load": ASSUMED_SYSTEM_LOAD, "decode_batch_size": ASSUMED_DECODE_BATCH_SIZE}

Sources = dict[str, dict[str, Any]]


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

    def inputs(
        self,
        req: RouteRequest,
        base: RouteInputs,
        snapshot: FleetSnapshot | None,
        now: float,
        loc: tuple[str | int, ...] = (),
    ) -> tuple[RouteInputs, Sources]:
        """``base`` (the request's inputs, defaults applied) with the missing load fields filled."""
        targets = Targets(req.decode_target, req.colloc_target, req.prefill_target)
        errors = target_errors(snapshot.fleet if snapshot is not None else None, targets)
        if errors:
            raise ValidationError.from_exception_data(
                "RouteRequest",
                [
                    {
                        "type": PydanticCustomError("unknown_endpoint", why),
                        "loc": (*loc, field),
                        "input": value,
                    }
                    for field, value, why in errors
                ],
            )
        scraped = fill(snapshot, targets, now, self.stale_s, CAPS) if snapshot is not None else {}
        values: dict[str, int] = {}
        sources: Sources = {}
        for field in ENGINE_FIELDS:
            if getattr(req, field) is not None:
                sources[field] = CALLER
                continue
            got = scraped.get(field)
            if got is not None:
                values[field] = got[0]
                sources[field] = got[1]
            else:
                sources[field] = ASSUMED
                if field in _ASSUMED_VALUES:
                    values[field] = _ASSUMED_VALUES[field]
        return dataclasses.replace(base, **values), sources
