"""What the sync and async clients share: the choice of tier, the breaker, the metrics, and the
params cache. Everything here is non-blocking; the clients own the I/O.

A call goes to the remote tier when the breaker allows it; its outcome (``Cause.OK`` or why it
failed) is recorded; a failed or skipped call is answered by the local tier when params are
cached, else by the static fallback. Nothing here raises for a failure of the service.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import httpx
from prometheus_client import CollectorRegistry

from pdroute_client.answer import LOCAL, STATIC, Answer, BadAnswer, Cause, parse_remote, parse_remote_batch
from pdroute_client.breaker import BreakerConfig, CircuitBreaker
from pdroute_client.errors import InvalidArgument
from pdroute_client.metrics import ClientMetrics
from pdroute_client.query import RouteQuery
from pdroute_client.served import ServedParams
from pdroute_client.static import StaticFallback
from pdroute_core.bounds import MAX_BATCH_ITEMS

log = logging.getLogger("pdroute_client")

QueryLike = RouteQuery | Mapping[str, Any]


def as_query(query: QueryLike, where: str = "") -> RouteQuery:
    """A ``RouteQuery`` from a query or a dict of ``/route`` fields; ``InvalidArgument`` if invalid."""
    if isinstance(query, RouteQuery):
        return query
    if isinstance(query, Mapping):
        return RouteQuery.from_mapping(query, where=where)
    raise InvalidArgument(
        where.rstrip(".") or "query", f"expected a RouteQuery or a mapping, got {type(query).__name__}"
    )


def as_queries(queries: Sequence[QueryLike]) -> list[RouteQuery]:
    if isinstance(queries, str | bytes | Mapping) or not isinstance(queries, Sequence):
        raise InvalidArgument("requests", "expected a sequence of queries")
    if not 1 <= len(queries) <= MAX_BATCH_ITEMS:
        raise InvalidArgument("requests", f"expected 1 to {MAX_BATCH_ITEMS} queries, got {len(queries)}")
    return [as_query(q, f"requests[{i}].") for i, q in enumerate(queries)]


def check_deadline(deadline_s: float) -> float:
    if isinstance(deadline_s, bool) or not isinstance(deadline_s, int | float) or not 0 < deadline_s <= 60:
        raise InvalidArgument("deadline_s", f"expected seconds in (0, 60], got {deadline_s!r}")
    return float(deadline_s)


def cause_of(exc: BaseException) -> str:
    """The failure cause of an exception raised by a remote call."""
    if isinstance(exc, httpx.TimeoutException | TimeoutError):
        return Cause.TIMEOUT
    if isinstance(exc, httpx.TransportError):
        return Cause.UNREACHABLE
    if isinstance(exc, BadAnswer | ValueError):  # ValueError: the body is not JSON
        return Cause.BAD_ANSWER
    return Cause.SERVER_ERROR


class Tiers:
    """The tier logic of one client (see the module docstring)."""

    def __init__(
        self,
        fallback: StaticFallback,
        breaker: BreakerConfig | None,
        registry: CollectorRegistry | None,
        clock: Callable[[], float],
        on_new_params_id: Callable[[], None],
    ) -> None:
        self.fallback = fallback
        self.metrics = ClientMetrics(registry)
        self.breaker = CircuitBreaker(breaker, clock=clock, on_change=self.metrics.breaker_changed)
        self.served: ServedParams | None = None  # replaced whole, never mutated: safe across threads
        self._on_new_params_id = on_new_params_id

    # The remote tier ------------------------------------------------------------------------

    def remote_answer(self, response: httpx.Response) -> Answer:
        """Parse one ``/route`` response (raises for a non-200 or a bad body)."""
        if response.status_code != 200:
            raise _StatusError(response.status_code)
        answer = parse_remote(json.loads(response.content))
        self._watch_params_id(answer.params_id)
        return answer

    def remote_answers(self, response: httpx.Response, count: int) -> list[Answer]:
        if response.status_code != 200:
            raise _StatusError(response.status_code)
        answers = parse_remote_batch(json.loads(response.content), count)
        if answers:
            self._watch_params_id(answers[0].params_id)
        return answers

    def record_remote(self, cause: str, started: float) -> None:
        """The outcome of a call the breaker allowed (``Cause.OK`` or why it failed)."""
        self.breaker.record(cause == Cause.OK)
        self.metrics.remote_seconds.labels(cause).observe(time.perf_counter() - started)

    def _watch_params_id(self, params_id: str | None) -> None:
        served = self.served
        if served is not None and params_id is not None and params_id != served.params_id:
            self._on_new_params_id()  # the service moved on: refresh now, not at the next tick

    # The local and static tiers -------------------------------------------------------------

    def fallback_answer(self, query: RouteQuery, cause: str) -> Answer:
        """The local tier's answer, else the static fallback's."""
        served = self.served
        if served is None:
            return self._static(query, Cause.NO_PARAMS, cause)
        try:
            return _with_cause(served.decide(query, f"{LOCAL}: {cause}"), cause)
        except Exception as exc:  # fail open: a request the local model refuses goes static
            log.warning("local tier could not decide (%s: %s); static fallback", type(exc).__name__, exc)
            return self._static(query, Cause.LOCAL_ERROR, cause)

    def fallback_answers(self, queries: Sequence[RouteQuery], cause: str) -> list[Answer]:
        served = self.served
        if served is None:
            return [self._static(q, Cause.NO_PARAMS, cause) for q in queries]
        try:
            answers = served.decide_many(queries, f"{LOCAL}: {cause}")
        except Exception:
            return [self.fallback_answer(q, cause) for q in queries]  # one by one: the rest still decide
        return [_with_cause(a, cause) for a in answers]

    def _static(self, query: RouteQuery, static_cause: str, remote_cause: str) -> Answer:
        decision, reason = self.fallback.decide(query)
        return Answer(
            decision=decision,
            reason=reason,
            tier=STATIC,
            why=f"{STATIC}: {static_cause}",
            request_id=query.request_id,
            remote_cause=remote_cause,
        )

    def done(self, answers: Sequence[Answer], started: float) -> None:
        """Count the answers of one call and time it."""
        elapsed = time.perf_counter() - started
        for a in answers:
            cause = a.why.split(": ", 1)[1] if ": " in a.why else Cause.OK
            self.metrics.answers.labels(a.tier, cause).inc()
        if answers:
            self.metrics.answer_seconds.labels(answers[0].tier).observe(elapsed)

    # The params cache -----------------------------------------------------------------------

    def params_response(self, response: httpx.Response) -> None:
        """Take one ``GET /params`` response: 304 keeps the cache, 200 replaces it."""
        if response.status_code == 304 and self.served is not None:
            self.metrics.refreshes.labels("not_modified").inc()
            return
        if response.status_code != 200:
            raise _StatusError(response.status_code)
        served = ServedParams.from_body(json.loads(response.content), response.headers.get("etag"))
        self.served = served
        self.metrics.refreshes.labels("updated").inc()
        self.metrics.params_loaded(served.params_id, served.model.name)

    def params_failed(self, exc: BaseException) -> None:
        self.metrics.refreshes.labels("failed").inc()
        log.warning("GET /params failed (%s: %s); keeping the cached params", type(exc).__name__, exc)

    def params_headers(self) -> dict[str, str]:
        served = self.served
        return {"If-None-Match": served.etag} if served is not None and served.etag else {}


class _StatusError(Exception):
    def __init__(self, status: int) -> None:
        super().__init__(f"HTTP {status}")


def _with_cause(answer: Answer, cause: str) -> Answer:
    return dataclasses.replace(answer, remote_cause=cause)
