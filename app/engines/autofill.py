"""Filling a /route request's load inputs from the latest engine scrape (pure: no I/O, no clock).

The scraper publishes a ``FleetSnapshot`` (the fleet and the latest reading of each endpoint);
``fill`` reads it for one request's targets at a time ``now`` (monotonic seconds, passed in).
A reading older than ``stale_s`` is never used: its fields count as missing.

What feeds what (the table in ``docs/integration.md``):

- decode target (pool ``decode`` or ``mixed``): ``decode_batch_size`` = running + incoming (a
  disaggregated decode server's transfer/prealloc queues: they join the batch before this
  request's KV does), ``decode_context_tokens`` = KV tokens in use,
  ``decode_pending_prefill_tokens`` = its pending prefill tokens where published.
- collocation GPU (``colloc_target``, else the decode target when it is in ``mixed``):
  ``system_load`` = running, ``colloc_context_tokens`` = KV tokens in use,
  ``pending_prefill_tokens`` where published.
- prefill rates: ``colloc_prefill_tokens_per_s`` = the collocation GPU's
  ``prefill_tokens_per_s``, ``decode_prefill_tokens_per_s`` = the decode target's: the rate of
  the engine's prompt-token counter between its last two readings (``with_rate``, computed
  when a reading is stored, not per request).
- prefill (``prefill_target``, else every fresh endpoint of pool ``prefill``):
  ``prefill_queue_requests`` = sum of waiting, ``prefill_running_requests`` = sum of running,
  ``prefill_pool_gpus`` = number of fresh endpoints, ``prefill_queue_tokens`` only when every one
  of them publishes its waiting prompt tokens.

Counts are rounded to whole numbers, rates (tokens/s) kept as measured; all are capped at the
request schema's limits.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from app.engines.config import Fleet, PoolName
from app.engines.sample import EngineSample
from pdroute_core.routing.types import OPTIONAL_LOAD_INPUTS, OPTIONAL_RATE_INPUTS

# The load inputs a scrape can fill, in the order the answer lists their sources.
ENGINE_FIELDS = ("system_load", "decode_batch_size", *OPTIONAL_LOAD_INPUTS, *OPTIONAL_RATE_INPUTS)
_RATES = frozenset(OPTIONAL_RATE_INPUTS)
CALLER: dict[str, Any] = {"source": "caller"}
ASSUMED: dict[str, Any] = {"source": "assumed"}


@dataclass(frozen=True, slots=True)
class Reading:
    """One endpoint's sample, the monotonic time (s) it was taken and its prefill rate.

    ``prefill_tokens_per_s`` is set by ``with_rate`` when the reading is stored (None: unknown).
    """

    sample: EngineSample
    taken_at: float
    prefill_tokens_per_s: float | None = None


def with_rate(reading: Reading, previous: Reading | None, stale_s: float) -> Reading:
    """``reading`` with its prefill rate: (counter now - counter before) / (time between the two
    readings), in prompt tokens per second, from the ``prompt_tokens_total`` counter.

    Unknown (None) on the first reading, when either reading lacks the counter, when the counter
    went down (the engine restarted), or when the previous reading was already stale (older than
    ``stale_s``) when this one was taken; this reading's own staleness is judged at fill time.
    """
    if previous is None:
        return reading
    now_count = reading.sample.prompt_tokens_total
    before = previous.sample.prompt_tokens_total
    elapsed = reading.taken_at - previous.taken_at
    if now_count is None or before is None or now_count < before or not 0.0 < elapsed <= stale_s:
        return reading
    return dataclasses.replace(reading, prefill_tokens_per_s=(now_count - before) / elapsed)


@dataclass(frozen=True)
class FleetSnapshot:
    """The fleet and each endpoint's latest good reading; replaced whole, never mutated.

    ``fill_cache`` memoises ``cached_fill``'s answers for this snapshot (written on the event
    loop thread only; it never changes what the snapshot says).
    """

    fleet: Fleet
    readings: Mapping[str, Reading]
    fill_cache: dict[Targets, Filled] = dataclasses.field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class Targets:
    decode: str | None = None
    colloc: str | None = None
    prefill: str | None = None


def target_errors(fleet: Fleet | None, targets: Targets) -> list[tuple[str, str, str]]:
    """(field, id, why) for each named target the fleet cannot serve; empty when all are good."""
    errors = []
    checks: tuple[tuple[str, str | None, tuple[PoolName, ...]], ...] = (
        ("decode_target", targets.decode, ("decode", "mixed")),
        ("colloc_target", targets.colloc, ("decode", "mixed")),
        ("prefill_target", targets.prefill, ("prefill", "mixed")),
    )
    for field, endpoint_id, pools in checks:
        if endpoint_id is None:
            continue
        if fleet is None:
            errors.append((field, endpoint_id, "no engines are configured (PDROUTE_ENGINES_FILE)"))
        elif endpoint_id not in fleet.endpoints:
            errors.append((field, endpoint_id, f"unknown endpoint {endpoint_id!r}"))
        elif not fleet.in_pool(endpoint_id, *pools):
            pool = fleet.endpoints[endpoint_id].pool
            wanted = " or ".join(pools)
            errors.append((field, endpoint_id, f"endpoint {endpoint_id!r} is in pool {pool}, not {wanted}"))
    return errors


def _count(value: float, cap: int) -> int:
    return min(int(value + 0.5), cap)


def _value(field: str, value: float, cap: float) -> float:
    """A rate as measured, anything else rounded to a whole count; capped at ``cap``."""
    return min(value, cap) if field in _RATES else _count(value, int(cap))


Group = tuple[tuple[str, ...], str, float]  # the fields one reading (or pool) gave, its name, taken_at


@dataclass(frozen=True, slots=True)
class Filled:
    """What a snapshot gives one set of targets: values, where from, and until when it holds."""

    values: dict[str, float]  # field -> value: counts whole, rates tokens/s; capped
    groups: tuple[Group, ...]
    computed_at: float  # monotonic s
    valid_until: float  # monotonic s: after it a reading used here has gone stale

    def sources(self, now: float) -> dict[str, dict[str, Any]]:
        """field -> ``{"source": "scrape", "endpoint": <id or "pool:prefill">, "age_ms": <ms>}``."""
        out: dict[str, dict[str, Any]] = {}
        for fields, endpoint, taken_at in self.groups:
            age_ms = round(max(now - taken_at, 0.0) * 1e3, 1)
            source = {"source": "scrape", "endpoint": endpoint, "age_ms": age_ms}
            out.update(dict.fromkeys(fields, source))  # one dict shared by the group: only serialised
        return out

    def is_valid_at(self, now: float) -> bool:
        return self.computed_at <= now <= self.valid_until


def fill(
    snapshot: FleetSnapshot, targets: Targets, now: float, stale_s: float, caps: Mapping[str, float]
) -> Filled:
    """The engine fields fresh readings give ``targets`` at ``now`` (readings older than
    ``stale_s`` are ignored). Fields the scrape cannot give (stale, unpublished, no target) are absent.
    """
    readings = snapshot.readings
    values: dict[str, float] = {}
    groups: list[Group] = []
    oldest_used = math.inf

    def fresh(endpoint_id: str | None) -> Reading | None:
        if endpoint_id is None:
            return None
        reading = readings.get(endpoint_id)
        if reading is None or now - reading.taken_at > stale_s:
            return None
        return reading

    def put(name: str, taken_at: float, **found: float | None) -> None:
        nonlocal oldest_used
        fields = tuple(field for field, value in found.items() if value is not None)
        for field in fields:
            values[field] = _value(field, found[field] or 0.0, caps[field])
        if fields:
            groups.append((fields, name, taken_at))
            oldest_used = min(oldest_used, taken_at)

    decode = fresh(targets.decode)
    if decode is not None and targets.decode is not None:
        s = decode.sample
        put(
            targets.decode,
            decode.taken_at,
            decode_batch_size=None if s.running is None else s.running + (s.decode_incoming or 0.0),
            decode_context_tokens=s.kv_used_tokens,
            decode_pending_prefill_tokens=s.pending_prefill_tokens,
            decode_prefill_tokens_per_s=decode.prefill_tokens_per_s,
        )

    colloc_id = targets.colloc
    if colloc_id is None and targets.decode is not None and snapshot.fleet.in_pool(targets.decode, "mixed"):
        colloc_id = targets.decode
    colloc = fresh(colloc_id)
    if colloc is not None and colloc_id is not None:
        s = colloc.sample
        put(
            colloc_id,
            colloc.taken_at,
            system_load=s.running,
            colloc_context_tokens=s.kv_used_tokens,
            pending_prefill_tokens=s.pending_prefill_tokens,
            colloc_prefill_tokens_per_s=colloc.prefill_tokens_per_s,
        )

    if targets.prefill is not None:
        ids: tuple[str, ...] = (targets.prefill,)
        name = targets.prefill
    else:
        ids = snapshot.fleet.pools.get("prefill", ())
        name = "pool:prefill"
    pool = [r for r in (fresh(i) for i in ids) if r is not None]
    if pool:
        put(
            name,
            min(r.taken_at for r in pool),
            prefill_queue_requests=_pool_sum([r.sample.waiting for r in pool]),
            prefill_running_requests=_pool_sum([r.sample.running for r in pool]),
            prefill_queue_tokens=_pool_sum([r.sample.queue_prompt_tokens for r in pool]),
            prefill_pool_gpus=float(len(pool)),
        )
    return Filled(values, tuple(groups), now, oldest_used + stale_s)


def _pool_sum(values: list[float | None]) -> float | None:
    """The pool's total when every fresh endpoint publishes the signal, else None (never a part)."""
    total = 0.0
    for v in values:
        if v is None:
            return None
        total += v
    return total


MAX_CACHED_TARGETS = 4096


def cached_fill(
    snapshot: FleetSnapshot, targets: Targets, now: float, stale_s: float, caps: Mapping[str, float]
) -> Filled:
    """``fill``, memoised on the snapshot per targets while every reading it used stays fresh.

    A reading stale when computed stays stale (the clock only moves forward), and one fresh
    stays fresh until ``valid_until``: between the two the answer cannot change.
    """
    cache = snapshot.fill_cache
    hit = cache.get(targets)
    if hit is not None and hit.is_valid_at(now):
        return hit
    filled = fill(snapshot, targets, now, stale_s, caps)
    if len(cache) >= MAX_CACHED_TARGETS:
        cache.clear()
    cache[targets] = filled
    return filled
