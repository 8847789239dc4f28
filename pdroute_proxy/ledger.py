"""The proxy's own accounting of what it has sent each engine (event-loop only, no lock).

No engine publishes the prompt tokens it has been sent and not yet prefilled, nor a prefill
pool's queue in tokens; a gateway knows both because it sent them. ``Ledger`` keeps per engine:
requests in flight, requests past their first token (decoding), prompt tokens not yet
prefilled, the prompt tokens it prefilled over the ledger's ``window_s`` (counted at each
request's first token: its whole prompt collocated, the one new token after a KV hand-off),
and on prefill engines the prompts in flight in send order: the oldest on each engine counts as
running, the rest as queued (vLLM's scheduler is first come, first served), the running one
since it became the oldest (sent to an idle engine, or its predecessor answered), and the prompt
tokens sent there over ``window_s`` (the pool's arrival rate: where a prefill
engine puts several prompts in a step, those that arrive before a prompt's step starts share it). It also
remembers engines that refused a connection, to try them last for ``down_s``.

On decode engines it follows each request's tokens (its first token's time, the tokens so far,
its predicted output length) and the engine's last ``PACE_GAPS`` gaps between tokens, whose
median is its pace (a stall is a rare long gap; the median is the step). From them,
``tpot_slacks_ms``: the least TPOT slack of the requests there still within their target (and
the second least: whether a delay would make two of them late), the
delay the first of them to go late can still take (``tpot_slo * (O - 1)`` less the time since
its first token and its remaining steps at the engine's pace): what a prefill beside them may
cost. A request still waiting for its first token there counts too, with its whole budget left
(a prompt sent after it is prefilled after it, beside its first steps), and so does one on its
way there from a prefill engine, with the time until its prefill ends added where the model's
prefill time is known (a delay that ends before its KV arrives costs it nothing).

It also counts, per decode engine, the requests sent there over the last ``RATE_WINDOW_S`` that
the model expected to make their targets or whose first token came within the TTFT target
(``feasible_routes``): under goodput, an engine with none serves nobody in time, and a request
that cannot make its own costs nobody there.
And it counts every request sent to each decode engine over a longer window
(``arrival_rate``, the proxy's ``arrival_window_s``), and reads over the same window the prompt
tokens sent to the prefill engines and those each decode engine prefilled (``prefill_rate``):
two seconds hold no arrival a third of the time at half a request a second, so they say little
of the decodes that will join during a prompt's seven-second prefill there, of the prompts that
will share a prefill step seconds away, or of the share of a decode engine's next seconds that
later prompts will take (one 1,128-token prompt in two seconds read as 564 tokens/s, a decode
engine prefilling twice its capacity, and a predicted TPOT of 7.6 s where 59 ms was measured;
over the run the rate was 84 tokens/s).

The prefill rate is the proxy's own because the engine's counter cannot give it: vLLM's
``prompt_tokens_total`` counts every prompt token of every request, the ones a KV connector
loaded (and prefix-cache hits) too, so on a decode engine that takes hand-offs it counts prompts
that were never prefilled there.
"""

from __future__ import annotations

import heapq
import itertools
import math
import statistics
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from pdroute_core.route_fields import RECENT_WINDOW_MS

RATE_WINDOW_S = RECENT_WINDOW_MS / 1000.0  # the window of the rates and routes the model reads
PACE_GAPS = 64  # gaps between tokens a decode engine's pace is the median of


class TokenWindow:
    """Tokens counted over the last ``window_s`` (``RATE_WINDOW_S`` unless told), as a rate
    (older counts dropped)."""

    __slots__ = ("counts", "total", "window_s")

    def __init__(self, window_s: float = RATE_WINDOW_S) -> None:
        self.counts: deque[tuple[float, int]] = deque()  # (monotonic s, tokens), oldest first
        self.total = 0  # the sum of ``counts``' tokens (kept, not summed per request)
        self.window_s = window_s

    def add(self, now: float, tokens: int) -> None:
        self.counts.append((now, tokens))
        self.total += tokens

    def __len__(self) -> int:
        return len(self.counts)

    def per_s(self, now: float, since: float = -math.inf) -> float:
        """Tokens per second over the last ``window_s`` before ``now`` (monotonic s); counted
        only since ``since``, over the time since then (at least ``RATE_WINDOW_S``)."""
        counts, window_s = self.counts, self.window_s
        while counts and counts[0][0] < now - window_s:
            self.total -= counts.popleft()[1]
        return self.total / max(RATE_WINDOW_S, min(window_s, now - since))


@dataclass
class EngineLoad:
    """What the proxy has in flight on one engine (counts; tokens)."""

    in_flight: int = 0
    decoding: int = 0
    pending_prefill_tokens: int = 0
    pending_prefill_sq: int = 0  # the sum of the squares of those prompts' tokens
    pending_prefill_requests: int = 0  # the requests those tokens are, their first token not back
    prefills: OrderedDict[int, int] = field(default_factory=OrderedDict)  # key -> prompt tokens
    running_since: float = math.nan  # monotonic s: when the oldest of ``prefills`` became the oldest
    down_until: float = -math.inf  # monotonic s
    # prompt tokens prefilled here (over the ledger's window)
    prefilled: TokenWindow = field(default_factory=TokenWindow)
    # a prefill engine's: prompt tokens sent here (over the ledger's window)
    sent: TokenWindow = field(default_factory=TokenWindow)
    tickets: dict[int, Ticket] = field(default_factory=dict)  # the requests in flight here, by id
    incoming: dict[int, PrefillTicket] = field(default_factory=dict)  # prefilling elsewhere for here
    gaps: deque[float] = field(default_factory=lambda: deque(maxlen=PACE_GAPS))  # s per token, newest last
    routes: deque[Route] = field(default_factory=deque)  # requests sent here lately, oldest first
    # requests sent here, one each (over the ledger's window)
    arrivals: TokenWindow = field(default_factory=TokenWindow)

    def pending_prefix_tokens(self) -> float:
        """The mean prefix under the prompt tokens pending prefill here (``pending_prefill_prefix_tokens``):
        each prompt is pending whole until its first token, its L tokens at L / 2 on average,
        weighted by L. 0.0 with nothing pending."""
        pending = self.pending_prefill_tokens
        return self.pending_prefill_sq / (2.0 * pending) if pending > 0 else 0.0

    def add_pending(self, prompt_tokens: int, sign: int) -> None:
        """One prompt of ``prompt_tokens`` starts (``sign`` 1) or stops (-1) pending prefill here."""
        self.pending_prefill_tokens += sign * prompt_tokens
        self.pending_prefill_sq += sign * prompt_tokens * prompt_tokens
        self.pending_prefill_requests += sign

    def count_prefilled(self, now: float, tokens: int) -> None:
        """``tokens`` prompt tokens were prefilled here at ``now`` (monotonic s)."""
        self.prefilled.add(now, tokens)


@dataclass(frozen=True)
class Route:
    """One request sent to a decode engine: when, whether the model expected it in time, and
    its tokens' times (the relay's list, filled as they come)."""

    sent_at: float  # monotonic s
    expected_in_time: bool
    token_times: list[float]


@dataclass(frozen=True)
class PoolView:
    """The prefill pool as the proxy's own accounting sees it."""

    queue_requests: int
    queue_tokens: int
    running_requests: int
    running_tokens: int
    running_elapsed_ms: float | None  # how long the running ones have run, on average (None: none runs)
    num_engines: int  # prefill engines not marked down
    arrival_tokens_per_s: float = 0.0  # prompt tokens per second sent to the pool lately


class Ticket:
    """One request's stay on one engine; ``first_token`` moves it from prefilling to decoding,
    ``progress`` follows its tokens there."""

    def __init__(
        self,
        load: EngineLoad,
        prompt_tokens: int,
        output_len: int = 0,
        first_at: float = math.nan,
        num_tokens: int = 0,
    ) -> None:
        self.load = load
        self.prompt_tokens = prompt_tokens
        self.output_len = output_len  # predicted (0: unknown)
        self.is_decoding = False
        self.is_closed = False
        self.first_at = first_at  # monotonic s: the request's first token, on any engine (NaN: none yet)
        self.last_at = math.nan  # monotonic s: its last token here
        self.num_tokens = num_tokens  # the request's tokens so far
        load.in_flight += 1
        load.add_pending(prompt_tokens, 1)
        load.tickets[id(self)] = self

    def first_token(self, now: float) -> None:
        """Its prompt is prefilled (counted in the engine's prefill rate at ``now``, monotonic s)."""
        if not self.is_decoding and not self.is_closed:
            self.is_decoding = True
            self.load.add_pending(self.prompt_tokens, -1)
            self.load.decoding += 1
            self.load.count_prefilled(now, self.prompt_tokens)

    def progress(self, first_at: float, num_tokens: int, now: float) -> None:
        """The request has ``num_tokens`` tokens at ``now``, its first at ``first_at`` (monotonic
        s); the gap since its previous token here goes into the engine's pace."""
        if not math.isnan(self.last_at) and num_tokens > self.num_tokens:
            gap = (now - self.last_at) / (num_tokens - self.num_tokens)
            self.load.gaps.extend([gap] * min(num_tokens - self.num_tokens, PACE_GAPS))
        self.first_at, self.last_at, self.num_tokens = first_at, now, num_tokens

    def close(self) -> None:
        if self.is_closed:
            return
        self.is_closed = True
        self.load.in_flight -= 1
        del self.load.tickets[id(self)]
        if self.is_decoding:
            self.load.decoding -= 1
        else:
            self.load.add_pending(self.prompt_tokens, -1)


class PrefillTicket:
    """One prompt in flight on a prefill engine (queued, then running, until answered)."""

    _keys = itertools.count()

    def __init__(
        self,
        load: EngineLoad,
        prompt_tokens: int,
        clock: Callable[[], float],
        decode: EngineLoad | None = None,
        output_len: int = 0,
    ) -> None:
        self.load = load
        self.clock = clock
        self.key = next(self._keys)
        self.decode = decode  # the engine it decodes on next, where it counts as incoming
        self.output_len = output_len
        if decode is not None:
            decode.incoming[self.key] = self
        load.in_flight += 1
        now = clock()
        if not load.prefills:
            load.running_since = now  # an idle engine starts it at once
        load.prefills[self.key] = prompt_tokens
        load.sent.add(now, prompt_tokens)

    def left_s(self, now: float, prefill_ms: Callable[[float], float]) -> float:
        """The time until its prefill ends (s), with ``prefill_ms`` of a prompt's tokens: the
        rest of the running prompt on its engine, then each prompt ahead of it and its own."""
        load, ms = self.load, 0.0
        if self.key not in load.prefills:
            return 0.0  # answered: its KV is on its way
        for i, (key, tokens) in enumerate(load.prefills.items()):
            if i == 0:
                ms = max(0.0, prefill_ms(tokens) - 1000.0 * (now - load.running_since))
            else:
                ms += prefill_ms(tokens)
            if key == self.key:
                break
        return ms / 1000.0

    def close(self) -> None:
        if self.decode is not None:
            self.decode.incoming.pop(self.key, None)
        prefills = self.load.prefills
        was_running = bool(prefills) and next(iter(prefills)) == self.key
        if prefills.pop(self.key, None) is not None:
            self.load.in_flight -= 1
            if was_running:  # the next one starts now
                self.load.running_since = self.clock() if prefills else math.nan


class Ledger:
    """Every engine's ``EngineLoad`` by endpoint id (entries appear as ids are first used)."""

    def __init__(
        self, down_s: float, clock: Callable[[], float] = time.monotonic, window_s: float = RATE_WINDOW_S
    ) -> None:
        self.down_s = down_s
        self.clock = clock  # monotonic s, the clock of every ``now`` passed here
        self.window_s = window_s  # of the arrival rates (requests per decode engine, tokens to the pool)
        self.engines: dict[str, EngineLoad] = {}
        self.first_arrival = math.inf  # monotonic s: the first request counted by ``count_arrival``

    def load(self, engine_id: str) -> EngineLoad:
        found = self.engines.get(engine_id)
        if found is None:
            window = self.window_s
            found = self.engines[engine_id] = EngineLoad(
                prefilled=TokenWindow(window), sent=TokenWindow(window), arrivals=TokenWindow(window)
            )
        return found

    def is_down(self, engine_id: str, now: float) -> bool:
        return self.load(engine_id).down_until > now

    def mark_down(self, engine_id: str, now: float) -> None:
        self.load(engine_id).down_until = now + self.down_s

    def mark_up(self, engine_id: str) -> None:
        self.load(engine_id).down_until = -math.inf

    def by_load(self, ids: Iterable[str], now: float) -> list[str]:
        """``ids`` least loaded first: engines not marked down, then by requests in flight,
        prompt tokens not yet prefilled and the given order; engines marked down come last
        (soonest back first), so that a fleet that has come back is found without waiting."""
        order = {engine_id: i for i, engine_id in enumerate(ids)}

        def key(engine_id: str) -> tuple[bool, float, int, int, int]:
            load = self.load(engine_id)
            is_down = load.down_until > now
            return (
                is_down,
                load.down_until if is_down else 0.0,
                load.in_flight,
                load.pending_prefill_tokens,
                order[engine_id],
            )

        return sorted(order, key=key)

    def decode_ticket(
        self,
        engine_id: str,
        prompt_tokens: int,
        output_len: int = 0,
        first_at: float = math.nan,
        num_tokens: int = 0,
    ) -> Ticket:
        """A request sent to ``engine_id``: ``prompt_tokens`` to prefill there, ``output_len``
        predicted; a hand-off or a resumed answer has its ``num_tokens`` already, the first at
        ``first_at`` (monotonic s)."""
        return Ticket(self.load(engine_id), prompt_tokens, output_len, first_at, num_tokens)

    def tpot_slacks_ms(
        self,
        engine_id: str,
        now: float,
        tpot_slo_ms: float,
        prefill_ms: Callable[[float], float] | None = None,
    ) -> tuple[float | None, float | None]:
        """The least and the second least TPOT slack (ms) of the requests on ``engine_id`` that
        are still within ``tpot_slo_ms`` (module docstring); None where fewer are, or no pace is
        known yet. With ``prefill_ms`` (the model's prefill time of a prompt's tokens), a request
        on its way from a prefill engine has the time until its prefill ends on top of its budget:
        a delay here that ends before it arrives costs it nothing."""
        load = self.load(engine_id)
        if not load.gaps:
            return None, None
        pace = statistics.median(load.gaps)
        target = tpot_slo_ms / 1000.0
        slacks: list[float] = []
        for incoming in load.incoming.values():  # their whole budgets
            out = incoming.output_len
            budget = (target - pace) * (out - 1)
            if out < 2 or budget < 0.0:
                continue
            if prefill_ms is not None:
                budget += incoming.left_s(now, prefill_ms)
            slacks.append(budget)
        for ticket in load.tickets.values():
            out = max(ticket.output_len, ticket.num_tokens)
            if out < 2:
                continue  # no TPOT
            if math.isnan(ticket.first_at):  # its first token to come: its whole budget left
                slack = (target - pace) * (out - 1)
            else:
                slack = target * (out - 1) - (now - ticket.first_at) - (out - ticket.num_tokens) * pace
            if slack >= 0.0:  # below 0: late already, lost under goodput
                slacks.append(slack)
        least = heapq.nsmallest(2, slacks)
        return (
            1000.0 * least[0] if least else None,
            1000.0 * least[1] if len(least) > 1 else None,
        )

    def route(self, engine_id: str, now: float, expected_in_time: bool, token_times: list[float]) -> None:
        """A request is sent to ``engine_id`` at ``now``; ``token_times`` is its tokens' times
        (monotonic s), filled as they come (the first tells whether it came in time). Only the
        last ``RATE_WINDOW_S`` is kept."""
        routes = self._recent_routes(engine_id, now)
        routes.append(Route(now, expected_in_time, token_times))

    def count_arrival(self, engine_id: str, now: float) -> None:
        """A request is sent to ``engine_id`` (to prefill or to decode there) at ``now``."""
        self.load(engine_id).arrivals.add(now, 1)
        self.first_arrival = min(self.first_arrival, now)

    def arrival_rate(self, engine_id: str, now: float) -> float:
        """Requests per second sent to ``engine_id`` over the last ``window_s`` (older ones
        dropped): the model's ``colloc_arrivals_per_s``. Until the proxy has counted for
        ``window_s``, over the time since its first request (at least ``RATE_WINDOW_S``)."""
        return self.load(engine_id).arrivals.per_s(now, self.first_arrival)

    def prefill_rate(self, engine_id: str, now: float) -> float:
        """Prompt tokens per second ``engine_id`` prefilled over the last ``window_s`` (older
        ones dropped): the model's ``colloc_prefill_tokens_per_s``. Until the proxy has counted
        for ``window_s``, over the time since its first request (at least ``RATE_WINDOW_S``)."""
        return self.load(engine_id).prefilled.per_s(now, self.first_arrival)

    def _recent_routes(self, engine_id: str, now: float) -> deque[Route]:
        routes = self.load(engine_id).routes
        while routes and routes[0].sent_at <= now - RATE_WINDOW_S:
            routes.popleft()
        return routes

    def feasible_routes(self, engine_id: str, now: float, ttft_slo_ms: float) -> int:
        """Requests sent to ``engine_id`` over the last ``RATE_WINDOW_S`` (older ones dropped)
        that the model expected in time or whose first token came within ``ttft_slo_ms``: the
        model's ``*_feasible_routes``."""
        routes = self._recent_routes(engine_id, now)
        target = ttft_slo_ms / 1000.0
        return sum(
            1
            for r in routes
            if r.expected_in_time or (r.token_times and r.token_times[0] - r.sent_at <= target)
        )

    def prefill_ticket(
        self, engine_id: str, prompt_tokens: int, decode_id: str | None = None, output_len: int = 0
    ) -> PrefillTicket:
        """A prompt sent to prefill engine ``engine_id``, to decode next on ``decode_id``
        (``output_len`` tokens predicted; it counts in that engine's TPOT slack meanwhile)."""
        decode = None if decode_id is None else self.load(decode_id)
        return PrefillTicket(self.load(engine_id), prompt_tokens, self.clock, decode, output_len)

    def pool_view(self, prefill_ids: Iterable[str], now: float) -> PoolView:
        """The prefill pool: on each engine the oldest prompt runs (since ``running_since``) and
        the rest wait; the prompt tokens sent there over the last ``window_s`` as a rate."""
        queue_requests = queue_tokens = running_requests = running_tokens = num_engines = 0
        elapsed_s = arrivals = 0.0
        for engine_id in prefill_ids:
            load = self.load(engine_id)
            arrivals += load.sent.per_s(now, self.first_arrival)
            if load.down_until <= now:
                num_engines += 1
            for i, tokens in enumerate(load.prefills.values()):
                if i == 0:
                    running_requests += 1
                    running_tokens += tokens
                    elapsed_s += max(0.0, now - load.running_since)
                else:
                    queue_requests += 1
                    queue_tokens += tokens
        elapsed_ms = 1000.0 * elapsed_s / running_requests if running_requests else None
        return PoolView(
            queue_requests, queue_tokens, running_requests, running_tokens, elapsed_ms, num_engines, arrivals
        )
