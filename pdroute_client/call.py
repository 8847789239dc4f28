"""One decision call without its I/O: what the sync and async clients share around the send.

A client opens a ``RemoteCall`` (``single`` or ``batch``: the arguments checked, the clock
started, the breaker asked), sends ``body()`` to ``path`` within ``deadline_s`` when
``is_allowed``, and hands ``finish`` the outcome: the response, the exception the transport
raised, or ``None`` when it sent nothing (the breaker refused the call). ``finish`` records the
outcome, answers from the service, else locally, else statically, and counts the answers; it
never raises for a failure of the service.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from pdroute_client.answer import Answer, Cause
from pdroute_client.query import RouteQuery
from pdroute_client.tiers import QueryLike, Tiers, as_queries, as_query, cause_of, check_deadline


@dataclass(frozen=True)
class RemoteCall:
    """One ``/route`` or ``/route/batch`` call of a client."""

    tiers: Tiers
    queries: list[RouteQuery]
    is_batch: bool
    deadline_s: float
    started: float  # time.perf_counter() when the call began (s)
    is_allowed: bool  # the breaker lets the call reach the service

    @classmethod
    def single(
        cls, tiers: Tiers, query: QueryLike, deadline_s: float | None, default_deadline_s: float
    ) -> RemoteCall:
        """A ``POST /route`` call; ``InvalidArgument`` for a query or deadline the service would refuse."""
        q = as_query(query)
        return cls._open(tiers, [q], False, deadline_s, default_deadline_s)

    @classmethod
    def batch(
        cls, tiers: Tiers, queries: Sequence[QueryLike], deadline_s: float | None, default_deadline_s: float
    ) -> RemoteCall:
        """A ``POST /route/batch`` call; ``InvalidArgument`` as ``single``."""
        return cls._open(tiers, as_queries(queries), True, deadline_s, default_deadline_s)

    @classmethod
    def _open(
        cls,
        tiers: Tiers,
        queries: list[RouteQuery],
        is_batch: bool,
        deadline_s: float | None,
        default_deadline_s: float,
    ) -> RemoteCall:
        deadline = default_deadline_s if deadline_s is None else check_deadline(deadline_s)
        started = time.perf_counter()
        return cls(tiers, queries, is_batch, deadline, started, tiers.breaker.allow())

    @property
    def path(self) -> str:
        return "/route/batch" if self.is_batch else "/route"

    def body(self) -> dict[str, Any]:
        """The JSON body of the request."""
        if self.is_batch:
            return {"requests": [q.body() for q in self.queries]}
        return self.queries[0].body()

    def remaining_s(self) -> float:
        """The time left of ``deadline_s`` since the call began (negative once it has passed)."""
        return self.deadline_s - (time.perf_counter() - self.started)

    def finish(self, outcome: httpx.Response | Exception | None) -> list[Answer]:
        """The answers, one per query in order, from the outcome of the send (``None``: not sent)."""
        tiers = self.tiers
        if outcome is None:
            answers = self._fallback(Cause.BREAKER_OPEN)
        else:
            if isinstance(outcome, httpx.Response):
                try:
                    answers = self._parse(outcome)
                    cause = Cause.OK
                except Exception as exc:  # never raise for the service: any failure falls back
                    cause = cause_of(exc)
            else:
                cause = cause_of(outcome)
            tiers.record_remote(cause, self.started)
            if cause != Cause.OK:
                answers = self._fallback(cause)
        tiers.done(answers, self.started)
        return answers

    def _parse(self, response: httpx.Response) -> list[Answer]:
        if self.is_batch:
            return self.tiers.remote_answers(response, len(self.queries))
        return [self.tiers.remote_answer(response)]

    def _fallback(self, cause: str) -> list[Answer]:
        if self.is_batch:
            return self.tiers.fallback_answers(self.queries, cause)
        return [self.tiers.fallback_answer(self.queries[0], cause)]
