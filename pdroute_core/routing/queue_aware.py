"""The queue-, harm- and SLO-aware decision model.

It predicts, for both paths, the request's own TTFT, TPOT and end-to-end latency and the
harm the path does to other requests, then decides on ``own e2e + w * harm`` under the
request's TTFT/TPOT targets. Step-time forms (``pdroute_core.queue_params``, fitted from the profile
by ``solver.fit_queue``)::

    T_P(u)  = prefill_floor + prefill_per_token * max(0, u - knee) + prefill_per_token_sq * u^2
    s(B, K) = decode_base + decode_per_seq * B + decode_per_ctx * K     a decode step
    f(c, B) = c * (chunk_per_token + chunk_per_token_sq * c + chunk_per_token_seq * B)
    e       = chunk_per_token_prefix: a c-token chunk over a p-token prefix adds e * c * p

``T_P`` is a prefill of u tokens; its last term and ``e`` are attention (a causal pass over u
tokens scores u^2 / 2 token pairs, a chunk over a prefix c * p more), both 0 in a params file
that predates them, where every answer keeps its bits.

Inputs (``RouteInputs``): L prompt, O predicted output, B / K decodes and their context on the
collocation GPU, B' / K' on the decode GPU, c chunk, P prompt tokens pending prefill on the
collocation GPU (P' on the decode GPU), R / R' the prompt tokens per second prefilled there
recently (``prefill_share``: the stretch of a decode step by later prompts' chunks), h the
prompt tokens in the collocation GPU's prefix cache (``colloc_cached_prompt_tokens``; where it is
the decode GPU, or not reported, ``cached_prompt_tokens``) and h' in the decode GPU's
(``cached_prompt_tokens``: only the rest is transferred), h_p in the prefix cache of the prefill
GPU it would be placed on (``prefill_cached_prompt_tokens``; not reported, 0: that GPU prefills
the rest in one pass over the cached prefix), the prefill pool's q waiting requests holding Q
tokens, r running prefills holding Y prompt tokens (``prefill_running_tokens``) and G GPUs.

The engines schedule as vLLM's v1 scheduler: c (``chunk_size``) is a step's token budget,
``max_num_batched_tokens``, shared by its decode tokens (one per running decode, first) and its
prefill chunk, so beside B decodes a step carries ``c_B = max(1, c - B)`` prompt tokens.

Collocated (the prompt is prefilled in chunks between the running decodes, after P)::

    u = L - h;  c_B = max(1, c - B);  n = ceil((P + u) / c_B);  rest = P + u - (n - 1) * c_B
    TTFT_c = n * s(B, K) + (n - 1) * f(c_B, B) + f(rest, B) + A + A_P   if B > 0   (a chunk costs a step)
           = (n - 1) * T_P(c) + T_P(rest) + A + A_P                     if B = 0   (a pass per chunk)
    A      = e * sum_k s_k * p_k = e * (h * u + (u^2 - sum_k s_k^2) / 2)     (exact)
    A_P    = e * P * max(0, X - c_B / 2)                X: pending_prefill_prefix_tokens (0: A_P = 0)
    TPOT_c = min(s / (1 - rho), s + f)                 s = s(B + 1, K + L + O/2), f = f(c_(B+1), B + 1)
    rho    = max(0, min(R * f / c_(B+1) / 1000, f / (s + f)))   R: recent prefill rate (tokens/s)
    harm_c = B * u * f(c_B, B) / c_B  +  B * A  +  B * (O - 1) * (decode_per_seq + decode_per_ctx * (L + O/2))

``A`` is what this prompt's chunks add by attending over the prompt before them: its u tokens
enter the stream of c_B-token steps after the P pending ones, in pieces s_k (the first fills what
its step has left, then whole steps, then the rest), piece k over p_k = h + the pieces before it.
The pending prompts' own chunks attend over their prompts too: ``A_P``, from the mean prefix X
under their P tokens where the gateway reports it (a prompt with r tokens left after its first d
attends over about ``r (d + r / 2 - c_B / 2)`` pairs in c_B-token chunks; not reported, A_P is
not modelled). The later prompts' in ``rho`` is not modelled.

The P tokens pending here are queued ahead of this prompt (FCFS chunked prefill): they are all
prefilled before its first token, so none of its decode steps carries their chunks (later
prompts stay in ``rho``). The first harm term is what the running decodes wait for this
prompt's chunks: every chunk step is longer by f (and its piece of A) for each of them. The
second is the slower decode step they share once this request decodes beside them.

Disaggregated (a prefill GPU, then the KV cache over the link)::

    t = T_P(Q / q) if q > 0 else T_P(L)                        mean prefill ahead
    t_run = T_P(Y / r) if Y is reported and r > 0 else t       the prefills in progress
    W = t_run / (G + 1) [if r >= G]  +  q * t / G               wait for a prefill GPU
      (2 * max(0, t_run - E) / (G + 1) for the first term when E is reported)
      + J  where r >= G: J = prefill_per_token * min(lam / G * first / 1000, S - (L - h_p) - Q / G)
      if that room is > 0 (lam prefill_arrival_tokens_per_s, S prefill_step_tokens: the prompts
      that arrive before its step starts and share it; either not reported, J = 0)
    F_d = s(B' + 1, K' + L) + 1.5 * s(B', K') + min(1.5 f(c_B', B'), f(P', B')) [if P' > 0]
          (all but the first term only if B' > 0 or P' > 0)
          + max(0, A(P' + R' * T_land / 1000) - T_land)   T_land = W + T_own + transfer
    A(P) = ceil(max(0, P - c_B') / c_B') * (s(B', K') + f(c_B', B'))   (B' = 0: * T_P(c_B'))
    T_own  = T_P(L - h_p) + e * h_p * (L - h_p)   (T_P(L) when h_p = 0)   its own prefill
    TTFT_d = W + T_own + (L - h') * bytes_per_token / bandwidth + F_d
    P_left = max(0, P' - c_d * TTFT_d / (s' + f'))    s' = s(B' + 1, K' + L + O/2), f' = f(c_d, B' + 1)
    TPOT_d = min((s' + min(1, P_left / D / c_d) * f') / (1 - rho'), s' + f')   D = max(1, O - 1)
    c_d = c_(B' + 1): the chunk beside the request and the B' decodes

With ``first_token = "decode-engine"`` (the default: a client reading the decode engine, as
vLLM's own P/D proxy and Dynamo stream it) the first token is the decode engine's: the engine
admits the request at its next step boundary (half a step away on average), sees the KV at the
boundary after (one step of its B' decodes, with a chunk when prompts are pending there: 1.5
chunks, or all its P' pending tokens when fewer, ``min(1.5 f(c_B', B'), f(P', B'))``), and its
first decode step, with the request in it, makes the token: ``F_d``. An idle decode GPU starts
at once. The KV joins the engine's one waiting line behind the prompts there before it lands:
the P' tokens pending now and those coming at the decode GPU's prefill rate R'
(``decode_prefill_tokens_per_s``) until then. vLLM's scheduler takes that line in order while a
step's token budget lasts, and a running prefill's chunk takes what the decodes leave, so the
request is admitted once those prompts have started, after the chunk steps of all but the last
step's worth, ``A``; what of it remains when the KV lands adds to ``F_d``. With
``"prefill-engine"`` (a proxy that streams the prefill engine's token first, as ``pdroute
proxy`` does) the client's first token is the prefill's, ``TTFT_d = W + T_own``, and the
transfer and ``F_d`` come before its second: the TPOT it sees is ``TPOT_d + (transfer + F_d) /
(O - 1)``; the decode engine's timeline, and so ``E2E_d``, are the same.
    harm_d = q * T_own / G  +  B' * (O - 1) * (decode_per_seq + decode_per_ctx * (L + O/2))

``T_P`` of the queue's mean prompt stands for the mean of their prefills; with an attention term
(convex in u) it is at most that mean, by ``prefill_per_token_sq`` times the prompts' variance.

When every prefill GPU is busy, the first frees after about ``t_run / (G + 1)`` (the least of G
residual service times), then the queue drains G at a time. Running prefills are size-biased
(a long prompt is more likely the one in progress), so their own mean length predicts the
residual better than the queue's; without Y the wait is the form with ``t``, bit for bit.
A running prefill is taken to be half done; a gateway that knows how long they have run on
average (``prefill_running_elapsed_ms``, E: the proxy does, it sends each engine its prompts in
order) gives each ``t_run - E`` left, and the least of G residuals spread evenly up to twice
that is ``2 (t_run - E) / (G + 1)``: ``t_run / (G + 1)`` again at ``E = t_run / 2``. With one
prefill GPU it is the running prefill's own rest. Without E, the form before it, bit for bit.
The request reaches the decode GPU after TTFT_d, by when that GPU has run about
``TTFT_d / (s' + f')`` steps, each prefilling c of its P' pending tokens; the P_left / c
chunk steps left fall among the request's D decode steps (with later arrivals at rate R',
``T = (D s' + f' P_left / c) / (1 - rho')``, capped at ``s' + f'`` a step). The first harm
term prices the requests that will queue behind this prefill: as many as wait now, each
``T_own / G`` later.

Harm is priced by how close its victims run to their targets: the running decodes' share by
``min(1, TPOT / tpot_slo)`` of the GPU they share, the queued prefills' share by
``min(1, TTFT_d / ttft_slo)``; without a target the factor is 1 (plain total latency).

Decision: with ``J = E2E + w * harm``, a path is feasible when its predicted TTFT and TPOT
stay within ``(1 - slo_margin)`` of the request's targets (the margin absorbs the prediction's
own error: without it, queues settle right at the target and half their requests miss it).
One feasible path wins; with both, the smaller ``J``, unless the two differ by at most
``slo_margin`` of the smaller: a difference within the model's own error is no evidence, and
the lower predicted TTFT wins (ties collocate). The simulator showed the cost otherwise moving
requests for e2e gains under 1 % at the price of the TTFT tail. With neither, the
request cannot make its targets, ``meets_slo`` is false (the gateway may shed it), and it goes
where it uses less of the other requests' target budgets (ties collocate)::

    D = max(1, O - 1);  slower = decode_per_seq + decode_per_ctx * (L + O/2)
    budget_c = B * (u * f(c_B, B) / (c_B D) + A / D + slower) / tpot_slo
    budget_d = q * T_own / (G * ttft_slo) + B' * slower / tpot_slo

Its chunks delay each running decode by ``u f / c + A`` in all, spread over its remaining steps
(this request's ``D`` standing for theirs, as in ``harm``), and its joining slows their every
step by ``slower``: a share of their TPOT target. Each prefill that queues behind it on the pool
starts ``T_own / G`` later: a share of its TTFT target. Its own target is lost either way.
(Comparing the harms in milliseconds instead, the earlier rule, weighed a delay spread thin
over many decodes' steps against a TTFT delay of whole requests, and under a tight TTFT target
sent long prompts to the pool until 30 waited; comparing the paths' own lateness instead lost
most of the goodput past capacity: docs/decision-model.md.) The reason code names the component
that favoured the chosen path most (see ``REASONS``).

The ``objective`` (``pdroute_core.routing.objective``) changes two cases. Under ``latency``
(the constructor's default: the model as before objectives, bit for bit) nothing changes: every
victim counts. Under ``goodput``:

- when both paths meet the targets, a collocation that would make the decodes beside it late
  is not taken: when their predicted TPOT with its chunks' delay spread over their steps,
  ``TPOT_c + (u f(c_B, B) / c_B + A) / D`` (this request's D standing for theirs, as in the
  budgets), is past the feasible share of the target, the request is disaggregated (reason
  ``less_harm``). Its own targets hold either way; theirs only one way. The decodes beside it
  are the B running now (while their least slack S below is not reported: where it is, S judges
  them, since this request's D steps stand badly for theirs: a 103-token prompt with 3 output
  tokens looked like a 200 ms stall of every step of a decode with 2.6 s of slack, and waited
  2.4 s on a busy prefill engine instead of 0.3 s collocated, docs/proxy.md) and those that
  join while its chunks run: at ``B = 0`` the test holds
  where at least one decode is expected to join during its prefill there, ``arrivals >= 1``
  over ``own`` (``objective.arrivals``: the gateway's rate of requests to that GPU over a long
  window, ``colloc_arrivals_per_s``, or its routes in time over two seconds as a rate; neither
  reported: some are taken to come, as before). A quiet two seconds said nothing of the next
  four (a 1,126-token prompt collocated on an idle decode engine, 3.6 s of prefill, stalled the
  hand-offs that came), and any route in two seconds said too much of a 0.3 s prefill (78-token
  prompts went to a busy prefill engine and waited 5-11 s for their first token; both on the
  real engines of docs/proxy.md). When the gateway
  reports the least TPOT slack of the decodes beside it that are still in time
  (``colloc_tpot_slack_ms``, S: a proxy that streams their tokens knows how much delay each can
  still take), the collocation is also not taken when all its chunks' delay, ``u f / c_B + A``,
  after the P pending tokens' ``P f / c_B``, is more than S: the first of them to go late
  would; unless the pending tokens' chunks alone are more than the feasible share of S
  (``(1 - slo_margin) S``) and this request's own are not: that decode is late, or a coin flip,
  whatever this request does, and the spread test decides (a 103-token prompt, 1.9 s
  collocated, was sent behind a 1,905-token prompt on the prefill engine, 9.4-13.6 s, for a
  decode that the 356 tokens pending beside it took to 0.92-1.22 of its slack: docs/proxy.md).
  (Spread over this request's D steps the same delay says nothing of a short decode that has
  already waited through one stall; S does. Not reported, S is unknown and the test is the one
  before it, bit for bit).
  Past S, a collocation that alone serves the request in time is weighed against the decodes
  it would make late. Where the delay would pass S even were it the margin shorter (``(1 -
  slo_margin) (u f / c_B + A + P f / c_B) > S``) that decode is surely late; refused, this
  request is surely lost where the other path is past its targets even were it the margin
  shorter (``(1 - slo_margin) late_d > 1``). One for one is no trade and it is collocated,
  unless two or more decodes go late: where the gateway reports the second least slack S2
  (``colloc_tpot_slack2_ms``), the delay passes it too even the margin shorter; where not, the
  spread test above says the other decodes beside it go late and they are at least two
  (``B >= 2``; it judges them by this request's steps, where theirs may be many more).
  Refused (the other path may still serve it, or the decodes late outnumber it), no path meets
  the targets and the budgets below decide (reason ``slo_none_feasible``; S not reported:
  taken, as before). Within the margin the decode is only probably late: collocated (on the
  real engines 103- to 341-token prompts refused for decodes 2-10 % past their slack, and a
  108-token prompt refused for one decode with 158 ms of slack, its chunks 435 ms, waited
  10-30 s on the prefill engine, docs/proxy.md). Nor
  where at least one decode is expected to join during its prefill and the spread test above
  says its chunks would make them late (the first to arrive waits through nearly all of them;
  no slack exists yet for a request not yet sent): a 1,905-token prompt only the decode engine
  prefilled in time held it for 7 s while four or five requests arrived (docs/proxy.md);
- when neither does, only the victims predicted still on time count: ``budget_c`` when the
  collocation GPU's steps are within the TPOT target, the pool's share when the pool's wait and
  the decode engine's first steps (``TTFT_d - T_own - transfer``) are within the TTFT target,
  the decode GPU's share when its steps are. A GPU's steps are on time when ``s`` (with the
  pending chunks of its own prompts, ``TpotTerms.pending``) is, later prompts' share ``rho``
  aside: a GPU late only because prompts keep being chunked on it is not lost, it recovers as
  soon as they go elsewhere. (Testing its full TPOT instead counted its decodes as lost exactly
  when collocations had made it late, so one more collocation cost nothing: in a fleet whose
  decode engine is also its collocation engine every request then collocated and the engine
  never recovered, docs/proxy.md.) A GPU counts only while it serves someone in time: when the
  gateway reports that none of the requests it sent it over the last two seconds was expected
  in time or had its first token in time (``colloc_feasible_routes`` or
  ``decode_feasible_routes`` 0; not reported, it does), its share is 0. And when the budgets
  then tie with the pool's wait past the target (no resource with victims still in time), the
  request goes where it is predicted later: to the resource further from recovering, so that
  the other recovers first. Without that, a pool pushed past the target by a burst took every
  late request from then on and never recovered, while GPUs serving only late requests still
  counted their decodes (docs/decision-model.md). The collocation GPU's budget also counts the
  decodes that will join it while this prompt's chunks hold it, as the pool's queue stands for
  the prompts that will queue behind it there: the gateway's recent routes in time to that GPU
  (``colloc_feasible_routes``, over ``RECENT_WINDOW_MS``) as a rate over its prefill there,
  ``col.own``, each delayed by half its chunks' delay on average,
  ``+ arrivals * 0.5 * (u f / c_B + A) / (D tpot_slo)`` (not reported: none; on a fleet whose
  every request decodes on that GPU, collocating hopeless long prompts on it for the decodes
  running now alone stalled the next arrivals for seconds: docs/proxy.md). When they tie with the pool and the
  collocation GPU's steps both on time (typically nobody to harm on either side: a prompt
  whose own prefill is past the TTFT target, at light load), it is prefilled on the pool: its
  chunks would hold for its whole prefill the GPU every request decodes on, and a prefill GPU
  only queues prefills (on real engines, collocating such prompts stalled the next arrivals'
  decodes for seconds: docs/proxy.md). Other ties collocate;

Every answer also says how late the chosen path is predicted to be (``predicted_lateness_ms``)
and what a gateway should do with it (``admission``).

Defaults chosen in the simulator (docs/decision-model.md): ``w = 0`` (at the usual targets
any harm weight only moves latency into the tail; with a tight TPOT target ``w = 1`` keeps
more goodput) and ``slo_margin = 0.1``.

Defaults for inputs not reported (listed in the answer's ``assumed``): no prefill queue
(q = 0, Q = q * L, r = G if q > 0 else 0, G = 1), nothing pending locally (P = 0), running
decodes with this prompt's context (K = B * L, K' = B' * L), no prefix hit (h' = 0; h = h'), no
targets, no recent prefill (R = R' = 0: not listed, the answer is the one before the rates
existed, bit for bit); no running prefill length (Y) or time (E: not listed either, the wait
is the one before they existed, bit for bit). ``decide`` and ``decide_many`` evaluate the same operations
in the same order on IEEE doubles, so their answers agree bit for bit (a property test checks
it): each path's terms are computed once per representation, ``collocated`` / ``disaggregated``
on one request's floats and ``collocated_many`` / ``disaggregated_many`` on columns, beside
each other here; online calibration (``pdroute_core.calibration_terms``) splits a prediction
into terms by calling the same functions. The defaults are applied once, by
``pdroute_core.routing.resolve`` from the table of ``pdroute_core.route_fields``; the forms
are in ``queue_aware_forms``, the answers in ``queue_aware_breakdown``, the reason codes in
``queue_aware_reasons``.
"""

from __future__ import annotations

import math
from typing import Any, Generic, Literal, NamedTuple, TypeVar

import numpy as np

from pdroute_core.frozen import from_fields
from pdroute_core.params import CostModelParams
from pdroute_core.routing import objective as obj
from pdroute_core.routing.queue_aware_breakdown import (
    FLOAT_TERMS,
    QueueAwareBatch,
    QueueAwareBreakdown,
)
from pdroute_core.routing.queue_aware_forms import QueueAwareForms, TpotTerms
from pdroute_core.routing.queue_aware_reasons import (
    COMPONENT_REASON,
    REASON_HARM,
    REASON_SLO_NONE,
    REASON_SLO_ONLY,
)
from pdroute_core.routing.queue_aware_reasons import (
    REASONS as REASONS,  # re-exported: the model's reason set
)
from pdroute_core.routing.resolve import Resolved, resolve, resolve_columns
from pdroute_core.routing.types import COLLOCATED, DISAGGREGATED, FloatArray, RouteColumns, RouteInputs

NAME = "queue-aware"
DEFAULT_HARM_WEIGHT = 0.0
DEFAULT_SLO_MARGIN = 0.1
# Where a client reads a disaggregated request's first token (module docstring).
FirstToken = Literal["decode-engine", "prefill-engine"]
FIRST_TOKEN_DECODE: FirstToken = "decode-engine"
FIRST_TOKEN_PREFILL: FirstToken = "prefill-engine"
FIRST_TOKEN_SOURCES: tuple[FirstToken, ...] = (FIRST_TOKEN_DECODE, FIRST_TOKEN_PREFILL)


def parse_first_token(value: str) -> FirstToken:
    """``value`` as a first-token source; ``ValueError`` naming the accepted ones otherwise."""
    for source in FIRST_TOKEN_SOURCES:
        if value == source:
            return source
    raise ValueError(f"first_token: expected one of {', '.join(FIRST_TOKEN_SOURCES)}, got {value!r}")


V = TypeVar("V", float, FloatArray)

# The reason index of the component ``k`` favouring each path (``decide_many``).
_COMPONENT_INDEX = {path: [REASONS.index(r) for r in reasons] for path, reasons in COMPONENT_REASON.items()}


def _step_room(v: Resolved[float]) -> float:
    """The prompt tokens later arrivals can add to this prompt's step on a busy batching prefill
    engine before it starts: ``S - (L - h_p) - Q / G``; 0.0 where the pool is not busy, no prompt
    arrives there, the step size is not reported (NaN) or nothing is left."""
    q, G = v.prefill_queue_requests, v.prefill_pool_gpus
    if not (v.prefill_running_requests >= G and v.prefill_arrival_tokens_per_s > 0.0):
        return 0.0
    L = v.prompt_len
    rest = L - min(v.prefill_cached_prompt_tokens, L - 1.0)
    room = v.prefill_step_tokens - rest - (v.prefill_queue_tokens / G if q > 0.0 else 0.0)
    return room if room > 0.0 else 0.0


def _step_room_many(v: Resolved[FloatArray]) -> FloatArray:
    """``_step_room`` of each request."""
    q, G = v.prefill_queue_requests, v.prefill_pool_gpus
    L = v.prompt_len
    rest = L - np.minimum(v.prefill_cached_prompt_tokens, L - 1.0)
    with np.errstate(invalid="ignore", divide="ignore"):  # NaN (not reported), q = 0: not taken
        room = v.prefill_step_tokens - rest - np.where(q > 0.0, v.prefill_queue_tokens / G, 0.0)
        busy = (v.prefill_running_requests >= G) & (v.prefill_arrival_tokens_per_s > 0.0) & (room > 0.0)
    return np.where(busy, room, 0.0)


class Collocated(NamedTuple, Generic[V]):
    """The collocated path's terms (ms; module docstring)."""

    u: V  # prompt tokens to prefill here (L - h)
    chunk_tokens: V  # c_B = max(1, c - B): the prefill tokens a step carries beside B decodes
    chunk: V  # f(c_B, B): a full chunk's addition to a step of the running decodes
    steps_ms: V  # in_flight + n * s(B, K) with decodes running, else 0
    chunks_ms: V  # (n - 1) * f(c_B, B) + f(rest, B) + the prefix terms with decodes running, else 0
    ttft: V
    backlog: V  # the share spent on the prompts pending ahead
    own: V  # the share spent on this prompt
    n: V  # chunk steps
    tpot: TpotTerms[V]
    e2e: V
    prefix_ms: V  # what this prompt's chunks add by attending over the prompt before them
    ahead_ms: V  # what the pending prompts' chunks add by attending over theirs (0: not reported)


class Disaggregated(NamedTuple, Generic[V]):
    """The disaggregated path's terms (ms; module docstring)."""

    raw_wait: V  # the wait for a prefill GPU before the calibration's factor
    wait: V
    prefill: V  # T_own: T_P(L), or the rest over the prefill GPU's cached prefix
    transfer: V
    remote: V  # prefill + transfer
    first_steps: V  # the decode engine's steps to the first token: boundaries and its first step
    # The decode GPU's pending prompts before its first token: those ahead of it in the engine's
    # line beyond its arrival, and the chunks its boundary steps carry.
    first_chunks: V
    ttft: V  # the first token the client reads (``first_token``)
    tpot: TpotTerms[V]  # the decode engine's steps
    e2e: V
    seen_tpot: V  # the TPOT the client sees: ``tpot.tpot``, and the gap to the decode engine's token
    queued: V  # TTFT less the request's own prefill and transfer: the wait (and first steps)


def _pressure(predicted_ms: float, target_ms: float) -> float:
    """How close a request runs to its target, at most 1; 1 without a target."""
    return 1.0 if target_ms == math.inf else min(1.0, predicted_ms / target_ms)


def _pressure_many(predicted_ms: FloatArray, target_ms: FloatArray) -> FloatArray:
    """``_pressure`` of each element."""
    return np.where(target_ms == math.inf, 1.0, np.minimum(1.0, predicted_ms / target_ms))


def _fields(
    head: tuple[Any, ...], col: Collocated[V], dis: Disaggregated[V], harm: tuple[V, V], cost: tuple[V, V]
) -> dict[str, Any]:
    """A breakdown's fields in ``BREAKDOWN_FIELDS`` order, the one map of names to terms: ``head``
    (decision, reason, assumed, meets_slo, harm_weight, objective, predicted_lateness_ms,
    admission) and the float terms from both paths, their harms and costs. ``decide`` builds its
    answer from it in one step (from_fields); ``decide_many`` takes its ``FLOAT_TERMS``."""
    decision, reason, assumed, meets, w, objective, lateness, admission = head
    return {
        "decision": decision,
        "reason": reason,
        "t_collocated_ms": col.e2e,
        "t_disaggregated_ms": dis.e2e,
        "assumed": assumed,
        "meets_slo": meets,
        "ttft_collocated_ms": col.ttft,
        "ttft_disaggregated_ms": dis.ttft,
        "tpot_collocated_ms": col.tpot.tpot,
        "tpot_disaggregated_ms": dis.seen_tpot,
        "local_backlog_ms": col.backlog,
        "local_prefill_ms": col.own,
        "chunk_steps": col.n,
        "prefill_wait_ms": dis.wait,
        "prefill_ms": dis.prefill,
        "transfer_ms": dis.transfer,
        "harm_collocated_ms": harm[0],
        "harm_disaggregated_ms": harm[1],
        "harm_weight": w,
        "cost_collocated_ms": cost[0],
        "cost_disaggregated_ms": cost[1],
        "objective": objective,
        "predicted_lateness_ms": lateness,
        "admission": admission,
    }


_NO_HEAD = (None,) * 8  # decide_many's: its head is per column, kept apart


class QueueAwareModel:
    """The queue-, harm- and SLO-aware model (module docstring) on fitted ``QueueAwareParams``."""

    name = NAME
    reasons = REASONS

    def __init__(
        self,
        params: CostModelParams,
        harm_weight: float = DEFAULT_HARM_WEIGHT,
        slo_margin: float = DEFAULT_SLO_MARGIN,
        queue_wait_scale: float = 1.0,
        objective: str = obj.LATENCY,
        first_token: str = FIRST_TOKEN_DECODE,
    ) -> None:
        if params.queue_aware is None:
            raise ValueError("these params carry no queue-aware forms (schema version 1)")
        if not (math.isfinite(harm_weight) and harm_weight >= 0):
            raise ValueError(f"harm_weight: expected a finite number >= 0, got {harm_weight!r}")
        if not (math.isfinite(slo_margin) and 0 <= slo_margin < 1):
            raise ValueError(f"slo_margin: expected a number in [0, 1), got {slo_margin!r}")
        if not (math.isfinite(queue_wait_scale) and queue_wait_scale > 0):
            raise ValueError(f"queue_wait_scale: expected a finite number > 0, got {queue_wait_scale!r}")
        self.first_token = parse_first_token(first_token)
        self.is_prefill_token = self.first_token == FIRST_TOKEN_PREFILL
        self.objective = obj.parse_objective(objective)
        self.is_goodput = self.objective == obj.GOODPUT
        self.params = params
        self.forms = QueueAwareForms(params)
        # The online calibration's factor on the prefill wait (pdroute_core.calibration); x * 1.0 == x
        # exactly, so at the default every answer keeps its bits.
        self.queue_wait_scale = float(queue_wait_scale)
        self.harm_weight = float(harm_weight)
        self.slo_margin = float(slo_margin)
        self.feasible = 1.0 - self.slo_margin  # the largest lateness that counts as meeting a target
        self._variants: dict[str, QueueAwareModel] = {}  # with_objective's, by objective

    def with_objective(self, objective: str) -> QueueAwareModel:
        """This model deciding for ``objective`` (itself when it already does); built once per
        objective and kept, so a per-request override costs a dict look-up."""
        if objective == self.objective:
            return self
        variant = self._variants.get(objective)
        if variant is None:
            variant = QueueAwareModel(
                self.params,
                harm_weight=self.harm_weight,
                slo_margin=self.slo_margin,
                queue_wait_scale=self.queue_wait_scale,
                objective=objective,
                first_token=self.first_token,
            )
            self._variants[objective] = variant
        return variant

    # --- the paths, for one request and for columns ---------------------------------------------
    def collocated(self, v: Resolved[float]) -> Collocated[float]:
        """The collocated path: the prompt prefilled in chunks after the P tokens pending here."""
        fm = self.forms
        L, out, B, c, P = (
            v.prompt_len,
            v.predicted_output_len,
            v.system_load,
            v.chunk_size,
            v.pending_prefill_tokens,
        )
        u = L - min(v.colloc_cached_prompt_tokens, L - 1.0)
        total = P + u
        cb = max(1.0, c - B)  # the step's budget less its decode tokens
        n = math.ceil(total / cb)
        rest = total - (n - 1.0) * cb
        chunk = fm.chunk_ms(cb, B)
        # Its chunks attend over the prompt before them (the cached tokens, its earlier chunks).
        prefix = fm.prefix_ms(P, u, cb, L - u)
        # The pending prompts' chunks attend over their own prompts (0.0: not reported).
        ahead = fm.pending_prefix_ms(P, v.pending_prefill_prefix_tokens, cb)
        if B > 0.0:
            step = fm.step_ms(B, v.colloc_context_tokens)
            in_flight = 0.5 * step
            steps_ms = in_flight + n * step
            last = fm.chunk_ms(rest, B)
            chunks_ms = (n - 1.0) * chunk + last + prefix + ahead
            base = steps_ms + (n - 1.0) * chunk + last  # (each chunk costs a whole step)
        else:
            in_flight = steps_ms = chunks_ms = 0.0
            base = (n - 1.0) * fm.prefill_ms(cb) + fm.prefill_ms(rest)  # one pass per chunk
        ttft = base + prefix + ahead
        backlog = in_flight + (base - in_flight) * (P / total) + ahead
        # The prompts pending here are prefilled before this one (FCFS chunks): none of its decode steps.
        context = v.colloc_context_tokens + L + 0.5 * out
        tpot = fm.tpot(B + 1.0, context, 0.0, max(1.0, c - B - 1.0), v.colloc_prefill_tokens_per_s)
        e2e = ttft + (out - 1.0) * tpot.tpot
        return Collocated(
            u,
            cb,
            chunk,
            steps_ms,
            chunks_ms,
            ttft,
            backlog,
            ttft - backlog,
            float(n),
            tpot,
            e2e,
            prefix,
            ahead,
        )

    def collocated_many(self, v: Resolved[FloatArray]) -> Collocated[FloatArray]:
        """``collocated`` of each request."""
        fm = self.forms
        L, out, B, c, P = (
            v.prompt_len,
            v.predicted_output_len,
            v.system_load,
            v.chunk_size,
            v.pending_prefill_tokens,
        )
        u = L - np.minimum(v.colloc_cached_prompt_tokens, L - 1.0)
        total = P + u
        cb = np.maximum(1.0, c - B)
        n = np.ceil(total / cb)
        rest = total - (n - 1.0) * cb
        chunk = fm.chunk_ms(cb, B)
        prefix = fm.prefix_ms_many(P, u, cb, L - u)
        ahead = fm.pending_prefix_ms_many(P, v.pending_prefill_prefix_tokens, cb)
        busy = B > 0.0
        step = fm.step_ms(B, v.colloc_context_tokens)
        in_flight = np.where(busy, 0.5 * step, 0.0)
        steps_ms = np.where(busy, in_flight + n * step, 0.0)
        last = fm.chunk_ms(rest, B)
        chunks_ms = np.where(busy, (n - 1.0) * chunk + last + prefix + ahead, 0.0)
        idle = (n - 1.0) * fm.prefill_ms_many(cb) + fm.prefill_ms_many(rest)
        base = np.where(busy, steps_ms + (n - 1.0) * chunk + last, idle)
        ttft = base + prefix + ahead
        backlog = in_flight + (base - in_flight) * (P / total) + ahead
        context = v.colloc_context_tokens + L + 0.5 * out
        c_next = np.maximum(1.0, c - B - 1.0)
        tpot = fm.tpot_many(B + 1.0, context, np.zeros_like(L), c_next, v.colloc_prefill_tokens_per_s)
        e2e = ttft + (out - 1.0) * tpot.tpot
        return Collocated(
            u, cb, chunk, steps_ms, chunks_ms, ttft, backlog, ttft - backlog, n, tpot, e2e, prefix, ahead
        )

    def disaggregated(self, v: Resolved[float]) -> Disaggregated[float]:
        """The disaggregated path: a wait for the prefill pool, the prefill, the transfer, and
        decode steps among the decode GPU's own pending chunks (what TTFT_d has not drained)."""
        fm = self.forms
        L, out, c, q, G, r = (
            v.prompt_len, v.predicted_output_len, v.chunk_size,
            v.prefill_queue_requests, v.prefill_pool_gpus, v.prefill_running_requests,
        )  # fmt: skip
        t_full = fm.prefill_ms(L)
        hp = min(v.prefill_cached_prompt_tokens, L - 1.0)
        t_prefill = t_full  # the rest of the prompt over the prefill GPU's cached prefix, on a hit
        if hp > 0.0:
            t_prefill = fm.prefill_ms(L - hp) + fm.prefix_ms(0.0, L - hp, L - hp, hp)
        t_ahead = fm.prefill_ms(v.prefill_queue_tokens / q) if q > 0.0 else t_full
        t_run = t_ahead  # the prefill in progress: its own length when reported
        Y = v.prefill_running_tokens
        if not math.isnan(Y) and r > 0.0:  # NaN: not reported
            t_run = fm.prefill_ms(Y / r)
        first = t_run / (G + 1.0)  # the least of G residuals, each half done on average
        E = v.prefill_running_elapsed_ms
        if not math.isnan(E):  # how long they have run: each has t_run - E left on average
            first = 2.0 * max(0.0, t_run - E) / (G + 1.0)
        raw_wait = (first if r >= G else 0.0) + q * t_ahead / G
        room = _step_room(v)
        if room > 0.0:  # the prompts that arrive before its step starts, while they fit
            lam = v.prefill_arrival_tokens_per_s
            raw_wait += fm.prefill_ms_per_token * min(lam / G * first / 1000.0, room)
        wait = raw_wait * self.queue_wait_scale
        transfer = (L - min(v.cached_prompt_tokens, L - 1.0)) * fm.transfer_ms_per_token
        remote = t_prefill + transfer
        Bd, Kd, Pd = v.decode_batch_size, v.decode_context_tokens, v.decode_pending_prefill_tokens
        # The decode engine admits it at its next step boundary (half a step away), sees the KV
        # at the one after, and its first decode step makes the first token; idle, at once.
        first_steps = fm.step_ms(Bd + 1.0, Kd + L)
        first_chunks = 0.0
        if Bd > 0.0 or Pd > 0.0:
            first_steps += 1.5 * fm.step_ms(Bd, Kd)
            if Pd > 0.0:  # 1.5 chunks, or every pending token when fewer are pending
                first_chunks = min(1.5 * fm.chunk_ms(max(1.0, c - Bd), Bd), fm.chunk_ms(Pd, Bd))
        # It waits in the engine's line behind the prompts there before its KV lands, pending now
        # or coming at the decode GPU's prefill rate (vLLM takes the line in order while a step's
        # budget lasts): what starting them takes beyond its arrival.
        ahead = Pd + v.decode_prefill_tokens_per_s * (wait + remote) / 1000.0
        if ahead > 0.0:
            first_chunks += max(0.0, fm.start_all_ms(ahead, Bd, Kd, c) - (wait + remote))
        ttft = wait + remote + first_steps + first_chunks
        batch, context = Bd + 1.0, Kd + L + 0.5 * out
        # The decode GPU prefills c_d = c - B' - 1 of its pending tokens per step while this request
        # waits for TTFT_d; what is left falls among its D = max(1, O - 1) decode steps.
        cd = max(1.0, c - batch)
        step, chunk = fm.step_ms(batch, context), fm.chunk_ms(cd, batch)
        left = max(0.0, Pd - cd * ttft / (step + chunk))
        tpot = fm.tpot(batch, context, left / max(1.0, out - 1.0), cd, v.decode_prefill_tokens_per_s)
        e2e = ttft + (out - 1.0) * tpot.tpot
        seen_tpot, queued = tpot.tpot, ttft - remote
        if self.is_prefill_token:  # the prefill engine's token first; the decode engine's next
            gap = transfer + first_steps + first_chunks
            ttft, queued = wait + t_prefill, wait
            if out > 1.0:
                seen_tpot = tpot.tpot + gap / (out - 1.0)
        return Disaggregated(
            raw_wait, wait, t_prefill, transfer, remote, first_steps, first_chunks, ttft, tpot, e2e,
            seen_tpot, queued,
        )  # fmt: skip

    def disaggregated_many(self, v: Resolved[FloatArray]) -> Disaggregated[FloatArray]:
        """``disaggregated`` of each request."""
        fm = self.forms
        L, out, c, q, G, r = (
            v.prompt_len, v.predicted_output_len, v.chunk_size,
            v.prefill_queue_requests, v.prefill_pool_gpus, v.prefill_running_requests,
        )  # fmt: skip
        t_full = fm.prefill_ms_many(L)
        hp = np.minimum(v.prefill_cached_prompt_tokens, L - 1.0)
        rest = L - hp
        t_prefill = np.where(
            hp > 0.0, fm.prefill_ms_many(rest) + fm.prefix_ms_many(np.zeros_like(L), rest, rest, hp), t_full
        )
        Y = v.prefill_running_tokens
        with np.errstate(divide="ignore", invalid="ignore"):  # q = 0, r = 0: not taken
            t_ahead = np.where(q > 0.0, fm.prefill_ms_many(v.prefill_queue_tokens / q), t_full)
            t_run = np.where(~np.isnan(Y) & (r > 0.0), fm.prefill_ms_many(Y / r), t_ahead)
        E = v.prefill_running_elapsed_ms
        first = np.where(np.isnan(E), t_run / (G + 1.0), 2.0 * np.maximum(0.0, t_run - E) / (G + 1.0))
        room, lam = _step_room_many(v), v.prefill_arrival_tokens_per_s
        with np.errstate(invalid="ignore"):  # NaN (not reported): not taken
            join = np.where(
                room > 0.0, fm.prefill_ms_per_token * np.minimum(lam / G * first / 1000.0, room), 0.0
            )
        raw_wait = np.where(r >= G, first, 0.0) + q * t_ahead / G + join
        wait = raw_wait * self.queue_wait_scale
        transfer = (L - np.minimum(v.cached_prompt_tokens, L - 1.0)) * fm.transfer_ms_per_token
        remote = t_prefill + transfer
        Bd, Kd, Pd = v.decode_batch_size, v.decode_context_tokens, v.decode_pending_prefill_tokens
        busy, pending = (Bd > 0.0) | (Pd > 0.0), Pd > 0.0
        first_steps = fm.step_ms(Bd + 1.0, Kd + L) + np.where(busy, 1.5 * fm.step_ms(Bd, Kd), 0.0)
        first_chunks = np.where(
            busy & pending,
            np.minimum(1.5 * fm.chunk_ms(np.maximum(1.0, c - Bd), Bd), fm.chunk_ms(Pd, Bd)),
            0.0,
        )
        ahead = Pd + v.decode_prefill_tokens_per_s * (wait + remote) / 1000.0
        held = np.maximum(0.0, fm.start_all_ms_many(ahead, Bd, Kd, c) - (wait + remote))
        first_chunks = first_chunks + np.where(ahead > 0.0, held, 0.0)  # decide: behind the line
        ttft = wait + remote + first_steps + first_chunks
        batch, context = Bd + 1.0, Kd + L + 0.5 * out
        cd = np.maximum(1.0, c - batch)
        step, chunk = fm.step_ms(batch, context), fm.chunk_ms(cd, batch)
        left = np.maximum(0.0, Pd - cd * ttft / (step + chunk))
        tpot = fm.tpot_many(
            batch, context, left / np.maximum(1.0, out - 1.0), cd, v.decode_prefill_tokens_per_s
        )
        e2e = ttft + (out - 1.0) * tpot.tpot
        seen_tpot, queued = tpot.tpot, ttft - remote
        if self.is_prefill_token:
            gap = transfer + first_steps + first_chunks
            ttft, queued = wait + t_prefill, wait
            with np.errstate(divide="ignore", invalid="ignore"):  # out = 1: not taken
                seen_tpot = np.where(out > 1.0, tpot.tpot + gap / (out - 1.0), tpot.tpot)
        return Disaggregated(
            raw_wait, wait, t_prefill, transfer, remote, first_steps, first_chunks, ttft, tpot, e2e,
            seen_tpot, queued,
        )  # fmt: skip

    # --- one request --------------------------------------------------------------------------
    def decide(self, x: RouteInputs) -> QueueAwareBreakdown:
        """The decision with every term (module docstring)."""
        v = resolve(x)
        col, dis = self.collocated(v), self.disaggregated(v)
        L, out, B, Bd = v.prompt_len, v.predicted_output_len, v.system_load, v.decode_batch_size
        q, G = v.prefill_queue_requests, v.prefill_pool_gpus
        ttft_slo, tpot_slo = v.ttft_slo_ms, v.tpot_slo_ms
        w = self.harm_weight
        tpot_c, tpot_d = col.tpot.tpot, dis.seen_tpot
        slower = self.forms.decode_ms_per_seq + self.forms.decode_ms_per_context_token * (L + 0.5 * out)
        join = (out - 1.0) * slower  # a running decode's slower steps once this one joins
        # Harm is priced by how close its victims run to their targets (1 without a target).
        # Its chunk steps are longer for each running decode: by f per chunk and the prefix term.
        harm_c = _pressure(tpot_c, tpot_slo) * (
            B * col.u * col.chunk / col.chunk_tokens + B * col.prefix_ms + B * join
        )
        queue_harm = q * dis.prefill / G
        harm_d = _pressure(dis.ttft, ttft_slo) * queue_harm + _pressure(tpot_d, tpot_slo) * (Bd * join)
        cost_c = col.e2e + w * harm_c
        cost_d = dis.e2e + w * harm_d
        late_c = max(col.ttft / ttft_slo, tpot_c / tpot_slo)
        late_d = max(dis.ttft / ttft_slo, tpot_d / tpot_slo)
        ok_c, ok_d = late_c <= self.feasible, late_d <= self.feasible
        # The delay its chunks add to each running decode's every remaining step (D standing for theirs).
        D = max(1.0, out - 1.0)
        chunks = col.u * col.chunk / (col.chunk_tokens * D) + col.prefix_ms / D
        # Under goodput: its chunks' whole delay after the pending prompts' chunks past the least
        # slack of the decodes beside it (NaN: unknown); unless the pending chunks alone take it
        # past the feasible share of that slack and its own alone would not: that decode is late,
        # or a coin flip, whatever this request does.
        ahead = col.chunk * v.pending_prefill_tokens / col.chunk_tokens + col.ahead_ms
        own, slack = chunks * D, v.colloc_tpot_slack_ms
        doomed = ahead > self.feasible * slack >= own
        past_slack = self.is_goodput and own + ahead > slack and not doomed
        # The decodes expected to join the GPU while its chunks hold it (at the gateway's rate),
        # whether at least one is (NaN: neither rate nor routes reported), and whether its chunks'
        # delay, spread over this request's steps, would make a decode beside it late.
        coming = obj.arrivals(v.colloc_feasible_routes, col.own, v.colloc_arrivals_per_s)
        joining = obj.joins(coming, v.colloc_feasible_routes, v.colloc_arrivals_per_s)
        late_beside = self.is_goodput and (tpot_c + chunks) / tpot_slo > self.feasible
        # Past the slack even were the delay the margin shorter: that decode is surely late.
        surely = past_slack and self.feasible * (own + ahead) > slack
        # Only collocation serves it in time. Taken, the least-slack decode is surely late; refused,
        # this request is lost where the other path is past its targets even were it the margin
        # shorter (surely too): one for one is no trade, unless two or more decodes go late (past
        # the second least slack too where reported, NaN: not; else the spread test's count of the
        # running ones). Coming decodes it would make late: refused.
        lost_d = self.feasible * late_d > 1.0
        slack2 = v.colloc_tpot_slack2_ms
        many = self.feasible * (own + ahead) > slack2 if slack2 == slack2 else late_beside and B >= 2.0
        if ok_c and not ok_d and ((surely and (many or not lost_d)) or (late_beside and joining == 1.0)):
            ok_c = False
        # Decodes beside it for the spread test: the B running while their slack is unknown (known,
        # the slack test judges them: spread over this request's steps, a short request's chunks
        # look like a stall of every step they share), or at least one that will join (unknown:
        # some will).
        beside = (B > 0.0 and slack != slack) or joining != 0.0
        # A batching prefill engine's step can fill with prompts that arrive after this one: the
        # room left in it is the worst case of its wait there (NaN: not reported, none). That risk,
        # to this one request, outweighs the decodes beside it (running, and coming during its
        # prefill there) only while they are fewer than one.
        risky_d = (
            self.is_goodput
            and B + coming < 1.0
            and (dis.ttft + self.forms.prefill_ms_per_token * _step_room(v)) / ttft_slo > self.feasible
        )
        if ok_c and ok_d and ((late_beside and beside) or past_slack) and not risky_d:
            # Under goodput a collocation that would make the decodes beside it late loses, unless
            # they are fewer than one and the prefill engine's step could fill with later prompts
            # past the TTFT target.
            is_disagg, reason, meets = True, REASON_HARM, True
        elif ok_c and ok_d:
            # Costs within the model's own error of each other are equal: the lower TTFT wins.
            if abs(cost_d - cost_c) <= self.slo_margin * min(cost_c, cost_d):
                is_disagg = dis.ttft < col.ttft
            else:
                is_disagg = cost_d < cost_c
            diffs = (
                (
                    col.backlog - dis.wait,
                    col.own - dis.remote,
                    (out - 1.0) * (tpot_c - tpot_d),
                    w * (harm_c - harm_d),
                )
                if is_disagg
                else (
                    dis.wait - col.backlog,
                    dis.remote - col.own,
                    (out - 1.0) * (tpot_d - tpot_c),
                    w * (harm_d - harm_c),
                )
            )
            best = 0  # the first of the largest
            for k in range(1, 4):
                if diffs[k] > diffs[best]:
                    best = k
            reason = COMPONENT_REASON[DISAGGREGATED if is_disagg else COLLOCATED][best]
            meets = True
        elif ok_c or ok_d:
            is_disagg, reason, meets = ok_d, REASON_SLO_ONLY, True
        else:
            # Others' target budgets this request would use: each running decode's TPOT target
            # (the chunks' delay over D steps and the slower shared step), each prefill queued
            # behind it on the pool its TTFT target (the module docstring).
            budget_c = B * (chunks + slower) / tpot_slo
            budget_d = q * dis.prefill / (G * ttft_slo) + Bd * slower / tpot_slo
            if self.is_goodput:  # only the victims still on time (pdroute_core.routing.objective)
                # A GPU's decodes are on time when its steps are, later prompts' chunks aside.
                # A GPU the gateway sent no request expected in time lately serves nobody in time.
                pool_on_time = obj.on_time(dis.queued, ttft_slo)
                if x.decode_pending_prefill_tokens == 0:  # reported: the pool is its only source
                    pool_on_time = 1.0
                colloc_on_time = obj.on_time(col.tpot.step + col.tpot.pending, tpot_slo)
                budget_c = colloc_on_time * obj.serves(v.colloc_feasible_routes) * budget_c
                budget_d = pool_on_time * (q * dis.prefill / (G * ttft_slo)) + obj.on_time(
                    dis.tpot.step + dis.tpot.pending, tpot_slo
                ) * obj.serves(v.decode_feasible_routes) * (Bd * slower / tpot_slo)
                # The prompts pending here, while on time, stand for those that will queue behind
                # this one, as the pool's queue does there, where the decode GPU has local prefill
                # work (0 when not reported).
                budget_c += obj.prefills_locally(v.decode_pending_prefill_tokens) * (
                    obj.on_time(col.backlog, ttft_slo)
                    * obj.serves(v.colloc_feasible_routes)
                    * (v.pending_prefill_requests * col.own / ttft_slo)
                )
                # The decodes that will join the collocation GPU while its chunks hold it (at the
                # gateway's rate, ``coming``), each delayed by half its chunks on average.
                budget_c += colloc_on_time * (coming * (0.5 * chunks / tpot_slo))
            is_disagg, reason, meets = budget_d < budget_c, REASON_SLO_NONE, False
            if self.is_goodput and budget_d == budget_c and pool_on_time == 0.0:
                # Neither with victims in time, the pool late: where it is later, the resource
                # further from recovering (the other recovers first); else ties collocate.
                is_disagg = dis.ttft > col.ttft
            elif self.is_goodput and budget_d == budget_c and colloc_on_time == 1.0:
                # No victim either way now, both on time: prefill it where only prefills wait.
                # Its chunks would hold the GPU every request decodes on for its whole prefill.
                is_disagg = True
        ttft, ratio = (dis.ttft, late_d) if is_disagg else (col.ttft, late_c)
        head = (
            DISAGGREGATED if is_disagg else COLLOCATED,
            reason,
            x.missing(),
            meets,
            w,
            self.objective,
            obj.lateness_ms(ttft, ttft_slo),
            obj.admission(meets, ratio, self.slo_margin),
        )
        # The fields in order, in one dict (from_fields: a tenth of the constructor's cost).
        return from_fields(QueueAwareBreakdown, _fields(head, col, dis, (harm_c, harm_d), (cost_c, cost_d)))

    # --- many requests ------------------------------------------------------------------------
    def decide_many(self, cols: RouteColumns) -> QueueAwareBatch:
        """``decide`` for every request of ``cols``, vectorised: the same operations, the same bits."""
        v = resolve_columns(cols)
        col, dis = self.collocated_many(v), self.disaggregated_many(v)
        L, out, B, Bd = v.prompt_len, v.predicted_output_len, v.system_load, v.decode_batch_size
        q, G = v.prefill_queue_requests, v.prefill_pool_gpus
        ttft_slo, tpot_slo = v.ttft_slo_ms, v.tpot_slo_ms
        w = self.harm_weight
        tpot_c, tpot_d = col.tpot.tpot, dis.seen_tpot
        slower = self.forms.decode_ms_per_seq + self.forms.decode_ms_per_context_token * (L + 0.5 * out)
        join = (out - 1.0) * slower
        harm_c = _pressure_many(tpot_c, tpot_slo) * (
            B * col.u * col.chunk / col.chunk_tokens + B * col.prefix_ms + B * join
        )
        queue_harm = q * dis.prefill / G
        harm_d = _pressure_many(dis.ttft, ttft_slo) * queue_harm + _pressure_many(tpot_d, tpot_slo) * (
            Bd * join
        )
        cost_c = col.e2e + w * harm_c
        cost_d = dis.e2e + w * harm_d
        late_c = np.maximum(col.ttft / ttft_slo, tpot_c / tpot_slo)
        late_d = np.maximum(dis.ttft / ttft_slo, tpot_d / tpot_slo)
        ok_c, ok_d = late_c <= self.feasible, late_d <= self.feasible
        close = np.abs(cost_d - cost_c) <= self.slo_margin * np.minimum(cost_c, cost_d)
        by_cost = np.where(close, dis.ttft < col.ttft, cost_d < cost_c)
        D = np.maximum(1.0, out - 1.0)
        chunks = col.u * col.chunk / (col.chunk_tokens * D) + col.prefix_ms / D
        budget_c = B * (chunks + slower) / tpot_slo
        budget_d = q * dis.prefill / (G * ttft_slo) + Bd * slower / tpot_slo
        spares = np.zeros(L.shape, dtype=bool)  # goodput: collocation would make its decodes late
        sink = np.zeros(L.shape, dtype=bool)  # goodput: budgets tie with the pool late
        spare_gpu = np.zeros(L.shape, dtype=bool)  # goodput: they tie, both on time
        later = dis.ttft > col.ttft
        if self.is_goodput:
            pool_on_time = obj.on_time_many(dis.queued, ttft_slo)
            pool_on_time = np.where(cols.optional["decode_pending_prefill_tokens"] == 0.0, 1.0, pool_on_time)
            colloc_on_time = obj.on_time_many(col.tpot.step + col.tpot.pending, tpot_slo)
            budget_c = colloc_on_time * obj.serves_many(v.colloc_feasible_routes) * budget_c
            budget_d = pool_on_time * (q * dis.prefill / (G * ttft_slo)) + obj.on_time_many(
                dis.tpot.step + dis.tpot.pending, tpot_slo
            ) * obj.serves_many(v.decode_feasible_routes) * (Bd * slower / tpot_slo)
            budget_c = budget_c + obj.prefills_locally_many(v.decode_pending_prefill_tokens) * (
                obj.on_time_many(col.backlog, ttft_slo)
                * obj.serves_many(v.colloc_feasible_routes)
                * (v.pending_prefill_requests * col.own / ttft_slo)
            )
            coming = obj.arrivals_many(v.colloc_feasible_routes, col.own, v.colloc_arrivals_per_s)
            budget_c = budget_c + colloc_on_time * (coming * (0.5 * chunks / tpot_slo))
            tie = budget_d == budget_c  # decide's tie rules
            sink = tie & (pool_on_time == 0.0)
            spare_gpu = tie & (pool_on_time != 0.0) & (colloc_on_time == 1.0)
            ahead = col.chunk * v.pending_prefill_tokens / col.chunk_tokens + col.ahead_ms
            own, slack = chunks * D, v.colloc_tpot_slack_ms
            doomed = (ahead > self.feasible * slack) & (self.feasible * slack >= own)  # decide's
            past_slack = (own + ahead > slack) & ~doomed
            joining = obj.joins_many(coming, v.colloc_feasible_routes, v.colloc_arrivals_per_s)
            late_beside = (tpot_c + chunks) / tpot_slo > self.feasible
            # decide: only collocation, at a running decode's target for a request the other path
            # may serve, or at more targets than its own
            surely = past_slack & (self.feasible * (own + ahead) > slack)
            lost_d = self.feasible * late_d > 1.0
            slack2 = v.colloc_tpot_slack2_ms  # decide's count of the decodes surely late
            many = np.where(
                np.isnan(slack2), late_beside & (B >= 2.0), self.feasible * (own + ahead) > slack2
            )
            ok_c = ok_c & (ok_d | ~((surely & (many | ~lost_d)) | (late_beside & (joining == 1.0))))
            beside = ((B > 0.0) & np.isnan(slack)) | (joining != 0.0)  # decide's
            risky_d = (B + coming < 1.0) & (
                (dis.ttft + self.forms.prefill_ms_per_token * _step_room_many(v)) / ttft_slo > self.feasible
            )
            spares = ((late_beside & beside) | past_slack) & ~risky_d
        both, meets = ok_c & ok_d, ok_c | ok_d
        spared = both & spares
        by_cost = by_cost | spared
        by_budget = np.where(sink, later, spare_gpu | (budget_d < budget_c))
        is_disagg = np.where(both, by_cost, np.where(meets, ok_d, by_budget))
        # The component favouring the chosen path most, the first of the largest (decide's loop).
        diffs = (
            np.where(by_cost, col.backlog - dis.wait, dis.wait - col.backlog),
            np.where(by_cost, col.own - dis.remote, dis.remote - col.own),
            np.where(by_cost, (out - 1.0) * (tpot_c - tpot_d), (out - 1.0) * (tpot_d - tpot_c)),
            np.where(by_cost, w * (harm_c - harm_d), w * (harm_d - harm_c)),
        )
        best, top = np.zeros(L.shape, dtype=np.int64), diffs[0]
        for k in range(1, 4):
            better = diffs[k] > top
            best, top = np.where(better, k, best), np.where(better, diffs[k], top)
        component = np.where(
            by_cost,
            np.take(_COMPONENT_INDEX[DISAGGREGATED], best),
            np.take(_COMPONENT_INDEX[COLLOCATED], best),
        )
        component = np.where(spared, REASONS.index(REASON_HARM), component)
        outside = np.where(meets, REASONS.index(REASON_SLO_ONLY), REASONS.index(REASON_SLO_NONE))
        terms = _fields(_NO_HEAD, col, dis, (harm_c, harm_d), (cost_c, cost_d))
        terms["predicted_lateness_ms"] = obj.lateness_ms_many(
            np.where(is_disagg, dis.ttft, col.ttft), ttft_slo
        )
        ratio = np.where(is_disagg, late_d, late_c)
        return QueueAwareBatch(
            is_disaggregated=is_disagg,
            meets_slo=meets,
            reason_index=np.where(both, component, outside).astype(np.int64),
            optional=cols.optional,
            harm_weight=w,
            terms={name: np.asarray(terms[name], dtype=np.float64) for name in FLOAT_TERMS},
            objective=self.objective,
            admission_index=obj.admission_index_many(meets, ratio, self.slo_margin),
        )
