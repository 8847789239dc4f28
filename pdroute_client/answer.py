"""``Answer``: one decision and which tier produced it, and the parsing of a service answer.

Tiers, best first: ``remote`` (the service's ``/route``), ``local`` (the same model code,
``pdroute_core``, on params cached from ``GET /params``), ``static`` (the configured fallback).
``why`` says which tier and why it was used: ``remote``, ``local: service timeout``,
``static: no params yet``, ... (``tier: cause`` with the causes of ``Cause``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from pdroute_core.routing import COLLOCATED, DISAGGREGATED, Decision
from pdroute_core.routing.objective import ADMISSIONS, OBJECTIVES

Tier = Literal["remote", "local", "static"]
REMOTE: Tier = "remote"
LOCAL: Tier = "local"
STATIC: Tier = "static"
TIERS: tuple[Tier, ...] = (REMOTE, LOCAL, STATIC)


class Cause:
    """Why the remote tier did not answer (a bounded set: a metric label)."""

    OK = "ok"  # the remote tier answered
    TIMEOUT = "service timeout"  # no answer within the deadline
    UNREACHABLE = "service unreachable"  # connection refused or reset, DNS, ...
    SERVER_ERROR = "service error"  # a 5xx, or any status but 200
    BAD_ANSWER = "bad answer"  # a 200 whose body is not a decision
    BREAKER_OPEN = "breaker open"  # the breaker let no call through
    NO_PARAMS = "no params yet"  # static: the local tier has no params (none fetched yet)
    LOCAL_ERROR = "local model error"  # static: the local model refused the request

    ALL = (OK, TIMEOUT, UNREACHABLE, SERVER_ERROR, BAD_ANSWER, BREAKER_OPEN, NO_PARAMS, LOCAL_ERROR)


@dataclass(frozen=True)
class Answer:
    """One decision. Latencies are the model's predictions (ms); the static tier predicts none."""

    decision: Decision
    reason: str  # the model's reason code (the static fallback's own for the static tier)
    tier: Tier
    why: str  # "remote", or "<tier>: <cause>"
    model: str | None = None  # the decision model that decided (None: static)
    params_id: str | None = None
    t_collocated_ms: float | None = None
    t_disaggregated_ms: float | None = None
    meets_slo: bool | None = None  # queue-aware only
    # queue-aware only: the chosen path's TTFT past the TTFT target (ms, 0 on time), admit /
    # defer / shed (docs/api.md), and the objective the decision optimised.
    predicted_lateness_ms: float | None = None
    admission: str | None = None
    objective: str | None = None
    assumed: tuple[str, ...] = ()
    breakdown: Mapping[str, Any] = field(default_factory=dict)  # the model's own terms
    request_id: str | None = None
    remote_cause: str | None = None  # why the remote tier did not answer (None: it did)


class BadAnswer(Exception):
    """A service answer that is not a decision (the client then answers from another tier)."""


def _float(body: Mapping[str, Any], name: str) -> float:
    value = body.get(name)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise BadAnswer(f"{name}: not a finite number")
    return float(value)


def parse_remote(body: Any) -> Answer:
    """An ``Answer`` from one ``/route`` answer (a parsed JSON value); raise ``BadAnswer``."""
    if not isinstance(body, dict):
        raise BadAnswer("not a JSON object")
    decision = body.get("decision")
    if decision not in (COLLOCATED, DISAGGREGATED):
        raise BadAnswer("decision: not collocated or disaggregated")
    reason, model, params_id = body.get("reason"), body.get("model"), body.get("params_id")
    if not isinstance(reason, str) or not isinstance(model, str) or not isinstance(params_id, str):
        raise BadAnswer("reason, model, params_id: not strings")
    assumed = body.get("assumed", [])
    breakdown = body.get("breakdown", {})
    meets_slo = body.get("meets_slo")
    request_id = body.get("request_id")
    if not (isinstance(assumed, list) and all(isinstance(a, str) for a in assumed)):
        raise BadAnswer("assumed: not a list of strings")
    if not isinstance(breakdown, dict) or not (meets_slo is None or isinstance(meets_slo, bool)):
        raise BadAnswer("breakdown or meets_slo: wrong type")
    if not (request_id is None or isinstance(request_id, str)):
        raise BadAnswer("request_id: not a string")
    lateness = body.get("predicted_lateness_ms")
    if lateness is not None:
        lateness = _float(body, "predicted_lateness_ms")
    admission, objective = body.get("admission"), body.get("objective")
    if admission not in (None, *ADMISSIONS) or objective not in (None, *OBJECTIVES):
        raise BadAnswer("admission or objective: not one of the known values")
    return Answer(
        decision=COLLOCATED if decision == COLLOCATED else DISAGGREGATED,
        reason=reason,
        tier=REMOTE,
        why=REMOTE,
        model=model,
        params_id=params_id,
        t_collocated_ms=_float(body, "t_collocated_ms"),
        t_disaggregated_ms=_float(body, "t_disaggregated_ms"),
        meets_slo=meets_slo,
        predicted_lateness_ms=lateness,
        admission=admission,
        objective=objective,
        assumed=tuple(assumed),
        breakdown=breakdown,
        request_id=request_id,
    )


def parse_remote_batch(body: Any, count: int) -> list[Answer]:
    """The answers of one ``/route/batch`` answer, which must hold ``count`` results."""
    if not isinstance(body, dict) or not isinstance(body.get("results"), list):
        raise BadAnswer("results: missing")
    results = body["results"]
    if len(results) != count:
        raise BadAnswer(f"results: {len(results)} answers for {count} requests")
    return [parse_remote(r) for r in results]
