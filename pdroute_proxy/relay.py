"""Serving one completion on the fleet: decide, prefill, decode, and fall back on every failure.

``Relay.serve(job)`` yields ``Piece``s (new tokens, in order) and ends with the ``Served``
record in ``job.served``; before its first token it may yield ``ACCEPTED``, once, when a decode
engine has answered 200 to its stream (the client's answer is then a 200 too, so its headers
can go out while the engine prefills; a failure after that is reported in the stream, not as
an HTTP status). Disaggregated: the prefill engine answers ``max_tokens: 1`` and that
first token is yielded at once; then the decode engine continues (``handoff``). A prefill
engine that is down, slow or failing means the request is prefilled on its decode engine
instead; a decode engine that fails before its first token means the next engine by load;
one that dies mid-answer means the next engine resumes from the prompt plus the tokens
already sent. Only when no engine can serve anything is ``NoEngine`` raised (a 503); with
``PDROUTE_ADMISSION_CONTROL=shed`` a request the served model advises to shed is refused
before any engine is called (``Shed``, a 503 with Retry-After). A client
that goes away cancels the generator, which closes the upstream requests (vLLM aborts them).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from app.engines.config import Fleet
from pdroute_core.routing import COLLOCATED, DISAGGREGATED, Decision
from pdroute_core.routing.objective import ADMIT, SHED
from pdroute_proxy.decision import Choice, Decider
from pdroute_proxy.errors import NoEngine, Shed, UpstreamRejected
from pdroute_proxy.handoff import Handoff, decode_request, prefill_request
from pdroute_proxy.http1 import EngineClient
from pdroute_proxy.ledger import Ledger
from pdroute_proxy.metrics import ProxyMetrics
from pdroute_proxy.settings import ProxySettings
from pdroute_proxy.upstream import OPENED, Event, UpstreamError, api_base, post_json, stream, timeouts


@dataclass
class Job:
    """One client completion: token ids in, up to ``max_tokens`` out; ``body`` the rest of the
    client's fields, passed through (sampling, ``ignore_eos``, ...)."""

    prompt: list[int]
    max_tokens: int
    body: dict[str, Any]
    served: Served | None = None


@dataclass(frozen=True)
class Piece:
    token_ids: tuple[int, ...]
    text: str
    finish_reason: str | None


# Yielded (at most once, before any token) when the first engine has accepted the request: no
# tokens, so a consumer that only joins the pieces may ignore what it is.
ACCEPTED = Piece((), "", None)


@dataclass
class Served:
    """How a request was served and what it measured (monotonic s)."""

    choice: Choice
    path: Decision
    arrived_at: float
    fallbacks: list[str] = field(default_factory=list)
    engines: list[str] = field(default_factory=list)
    token_times: list[float] = field(default_factory=list)  # when each token was yielded
    finish_reason: str | None = None
    usage_prompt_tokens: int | None = None
    told_output_len: int = 0  # the output length the decision was told before any correction
    is_accepted: bool = False  # ACCEPTED or a token was yielded: the answer is a 200


class Relay:
    def __init__(
        self,
        settings: ProxySettings,
        fleet: Callable[[], Fleet],
        decider: Decider,
        ledger: Ledger,
        metrics: ProxyMetrics,
        client: Callable[[], EngineClient],
        monotonic: Callable[[], float],
    ) -> None:
        self.settings = settings
        self.fleet = fleet
        self.decider = decider
        self.ledger = ledger
        self.metrics = metrics
        self.client = client
        self.monotonic = monotonic
        self.decode_timeout = timeouts(settings.read_timeout_s, settings.connect_timeout_s)
        self.prefill_timeout = timeouts(settings.prefill_timeout_s, settings.connect_timeout_s)

    def decode_ids(self) -> tuple[str, ...]:
        fleet = self.fleet()
        return (*fleet.pools.get("decode", ()), *fleet.pools.get("mixed", ()))

    def _failed(self, engine_id: str, exc: UpstreamError) -> None:
        self.metrics.upstream_errors.labels(engine=engine_id, kind=exc.cause).inc()
        if exc.cause == "connect":
            self.ledger.mark_down(engine_id, self.monotonic())

    def _fallback(self, served: Served, cause: str) -> None:
        served.fallbacks.append(cause)
        self.metrics.fallbacks.labels(cause=cause).inc()

    async def serve(self, job: Job) -> AsyncGenerator[Piece, None]:
        """The request's tokens in order (see the module docstring); ``job.served`` says how."""
        self.metrics.in_flight.inc()
        try:
            async for piece in self._serve(job):
                yield piece
        finally:
            self.metrics.in_flight.dec()

    async def _serve(self, job: Job) -> AsyncGenerator[Piece, None]:
        arrived = self.monotonic()
        decode_ids = self.decode_ids()
        if not decode_ids:
            raise NoEngine("the engines file names no decode or mixed engine")
        prefill_ids = self.fleet().pools.get("prefill", ())
        decode_id = self.ledger.by_load(decode_ids, arrived)[0]
        is_exact = bool(job.body.get("ignore_eos"))
        told, predicted = self.decider.predicted_output_len(len(job.prompt), job.max_tokens, is_exact)
        choice = self.decider.decide(len(job.prompt), predicted, decode_id, prefill_ids)
        self.metrics.decisions.labels(
            path=choice.path, reason=choice.reason, decided_by=choice.decided_by
        ).inc()
        served = job.served = Served(choice, choice.path, arrived, told_output_len=told)
        if choice.admission is not None:
            self.metrics.admissions.labels(admission=choice.admission).inc()
            if choice.admission == SHED and self.settings.admission_control == "shed":
                raise Shed(choice.predicted_lateness_ms)  # in GET /decisions, served by no path
        self.ledger.count_arrival(decode_id, arrived)  # the model's colloc_arrivals_per_s read them
        if self.settings.default_ttft_slo_ms is not None:  # the model's *_feasible_routes read them
            self.ledger.route(decode_id, arrived, choice.admission == ADMIT, served.token_times)
        generated: list[int] = []
        handoff: Handoff | None = None
        if choice.path == DISAGGREGATED:
            handoff = await self._prefill(job, served, prefill_ids, decode_id)
            if handoff is None:
                served.path = COLLOCATED
            else:
                generated.extend(handoff.token_ids)
                served.is_accepted = True
                served.token_times.append(self.monotonic())
                yield Piece(handoff.token_ids, handoff.text, handoff.finish_reason)
                if handoff.finish_reason == "stop" or job.max_tokens <= len(generated):
                    served.finish_reason = handoff.finish_reason or "length"
                    return
        async for piece in self._decode(job, served, decode_id, generated, handoff):
            yield piece

    async def _prefill(
        self, job: Job, served: Served, prefill_ids: tuple[str, ...], decode_id: str
    ) -> Handoff | None:
        """The prefill engine's first token and hand-off, or None (counted) to collocate."""
        now = self.monotonic()
        order = self.ledger.by_load(prefill_ids, now)
        if not order or self.ledger.is_down(order[0], now):
            self._fallback(served, "no_prefill_engine" if not order else "prefill_down")
            return None
        prefill_id = order[0]
        endpoint = self.fleet().endpoints[prefill_id]
        ticket = self.ledger.prefill_ticket(
            prefill_id, len(job.prompt), decode_id, served.choice.inputs.predicted_output_len
        )
        served.engines.append(prefill_id)
        try:
            async with asyncio.timeout(self.settings.prefill_timeout_s):
                answer = await post_json(
                    self.client(),
                    f"{api_base(endpoint.url)}/v1/completions",
                    prefill_request(job.prompt, job.body, self.settings.kv_connector),
                    self.prefill_timeout,
                )
            handoff = Handoff.of(answer)
        except TimeoutError:
            self._failed(prefill_id, UpstreamError("timeout", "prefill deadline"))
            self._fallback(served, "prefill_timeout")
            return None
        except UpstreamError as exc:
            self._failed(prefill_id, exc)
            cause = {"connect": "prefill_down", "timeout": "prefill_timeout", "http_4xx": "prefill_rejected"}
            self._fallback(served, cause.get(exc.cause, "prefill_error"))
            return None
        finally:
            ticket.close()
        self.ledger.mark_up(prefill_id)
        return handoff

    async def _decode(
        self, job: Job, served: Served, first_id: str, generated: list[int], handoff: Handoff | None
    ) -> AsyncIterator[Piece]:
        tried: list[str] = []
        for attempt in range(self.settings.max_retries + 1):
            now = self.monotonic()
            if attempt == 0:
                engine_id = first_id
            else:
                order = self.ledger.by_load(self.decode_ids(), now)
                fresh = [e for e in order if e not in tried]
                engine_id = (fresh or order)[0]
            tried.append(engine_id)
            use_kv = handoff is not None and attempt == 0
            body, skip = decode_request(job, generated, handoff if use_kv else None, self.settings)
            endpoint = self.fleet().endpoints.get(engine_id)
            if endpoint is None:
                continue
            ticket = self.ledger.decode_ticket(
                engine_id,
                1 if use_kv else len(body["prompt"]),
                served.choice.inputs.predicted_output_len,
                served.token_times[0] if served.token_times else math.nan,
                len(generated),
            )
            served.engines.append(engine_id)
            got_any = False
            try:
                url = api_base(endpoint.url)
                announce = not served.is_accepted
                events = stream(self.client(), url, body, self.decode_timeout, announce=announce)
                async for event in events:
                    if event is OPENED:
                        served.is_accepted = True
                        yield ACCEPTED
                        continue
                    piece = self._piece(event, skip)
                    skip = max(0, skip - len(event.token_ids))
                    usage = event.raw.get("usage")
                    if isinstance(usage, dict) and isinstance(usage.get("prompt_tokens"), int):
                        served.usage_prompt_tokens = usage["prompt_tokens"]
                    if piece is None:
                        continue
                    now = self.monotonic()
                    generated.extend(piece.token_ids)
                    served.token_times.extend([now] * max(1, len(piece.token_ids)))
                    if piece.finish_reason is not None:
                        served.finish_reason = piece.finish_reason
                    yield piece  # the ledger's accounting after it: off the token's way out
                    if not got_any:
                        got_any = True
                        ticket.first_token(now)
                    ticket.progress(served.token_times[0], len(served.token_times), now)
                self.ledger.mark_up(engine_id)
                return
            except UpstreamError as exc:
                self._failed(engine_id, exc)
                if exc.cause == "http_4xx" and not generated:
                    raise UpstreamRejected(exc.status or 400, exc.body) from None
                if got_any:
                    cause = "decode_lost"
                elif use_kv and exc.cause in ("http_5xx", "closed", "protocol"):
                    cause = "kv_handoff"
                else:
                    cause = {"connect": "decode_down", "timeout": "decode_timeout"}.get(
                        exc.cause, "decode_error"
                    )
                self._fallback(served, cause)
                if served.finish_reason is not None or len(generated) >= job.max_tokens:
                    return  # the answer was complete: only its end was lost
            finally:
                ticket.close()
        if not generated:
            raise NoEngine(f"no engine could serve the request (tried {', '.join(tried)})")
        raise UpstreamError(
            "closed", f"the answer was cut short after {len(generated)} tokens; engines tried: {tried}"
        )

    @staticmethod
    def _piece(event: Event, skip: int) -> Piece | None:
        """The event's tokens less the ``skip`` first (a decode engine repeating the first token)."""
        ids = event.token_ids
        if not ids and event.finish_reason is None:
            return None if not event.text else Piece((), event.text, None)
        if skip:
            dropped = min(skip, len(ids))
            ids = ids[dropped:]
            if not ids and event.finish_reason is None:
                return None
            return Piece(ids, "" if dropped else event.text, event.finish_reason)
        return Piece(ids, event.text, event.finish_reason)
