"""What a decision model is: the request it decides, the answer it gives, and its interface.

A decision model takes one request's ``RouteInputs`` (or many, as ``RouteColumns``) and
returns a breakdown: the decision, the predicted end-to-end latency of both paths, a short
reason code, the optional inputs it had to assume, and every term that produced the answer.
Two implementations live beside this module: ``design`` (the design document's analytical
model) and ``queue_aware`` (queue-, harm- and SLO-aware). ``registry`` builds one by name.

Breakdowns are frozen dataclasses whose leading fields are the ones every model shares
(``HEAD_FIELDS``); the remaining fields are the model's own terms. The HTTP edge derives its
response encoder from the dataclass fields, so a term added to a breakdown reaches the answer
without another list to keep in step.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import Any, Literal, Protocol

import numpy as np
import numpy.typing as npt

from pdroute_core.route_fields import (
    COLUMN_INPUTS,
    DESIGN_INPUTS,
    OPTIONAL_INPUTS,
    OPTIONAL_LOAD_INPUTS,
    OPTIONAL_RATE_INPUTS,
    UNLISTED_INPUTS,
)

Decision = Literal["collocated", "disaggregated"]
COLLOCATED: Decision = "collocated"
DISAGGREGATED: Decision = "disaggregated"

FloatArray = npt.NDArray[np.float64]

# Fields every breakdown starts with, in this order; the rest are the model's own terms.
HEAD_FIELDS = ("decision", "reason", "t_collocated_ms", "t_disaggregated_ms", "assumed")

# The name tuples of the request's fields, derived from their one table (pdroute_core.route_fields).
__all__ = [
    "COLUMN_INPUTS",
    "DESIGN_INPUTS",
    "OPTIONAL_INPUTS",
    "OPTIONAL_LOAD_INPUTS",
    "OPTIONAL_RATE_INPUTS",
    "UNLISTED_INPUTS",
]


@dataclass(frozen=True)
class RouteInputs:
    """One request as the gateway reports it (token counts, ms). ``None`` means "not reported".

    The fields of ``pdroute_core.route_fields.ROUTE_FIELDS``, in order (a test compares them);
    each one's doc and default are there."""

    prompt_len: int  # tokens in the prompt
    predicted_output_len: int  # tokens the gateway expects the request to generate
    system_load: int  # decodes running on the GPU where the request would be collocated
    decode_batch_size: int = 1  # decodes running on the decode GPU it would be sent to
    chunk_size: int = 256  # prefill tokens per engine step on the collocation GPU
    prefill_queue_requests: int | None = None  # requests waiting (not started) for the prefill pool
    prefill_queue_tokens: int | None = None  # their prompt tokens
    prefill_running_requests: int | None = None  # prefills in progress on the pool
    prefill_pool_gpus: int | None = None  # prefill GPUs sharing that queue
    pending_prefill_tokens: int | None = None  # prompt tokens on the collocation GPU not yet prefilled
    decode_pending_prefill_tokens: int | None = None  # the same on the decode GPU (its local prefills)
    colloc_context_tokens: int | None = None  # KV tokens of the decodes running on the collocation GPU
    decode_context_tokens: int | None = None  # KV tokens of the decodes running on the decode GPU
    cached_prompt_tokens: int | None = None  # prompt tokens already in the decode GPU's prefix cache
    ttft_slo_ms: float | None = None  # time-to-first-token target
    tpot_slo_ms: float | None = None  # time-per-output-token target
    # Prompt tokens per second prefilled recently on the collocation GPU / the decode GPU (the
    # last second or two, as a gateway counts what it routed or a scrape of a counter sees it).
    colloc_prefill_tokens_per_s: float | None = None
    decode_prefill_tokens_per_s: float | None = None
    prefill_running_tokens: int | None = None  # prompt tokens of the prefills in progress on the pool
    prefill_running_elapsed_ms: float | None = None  # how long they have been running, on average
    colloc_tpot_slack_ms: float | None = None  # the least TPOT slack of the collocation GPU's decodes
    colloc_tpot_slack2_ms: float | None = None  # the second least
    colloc_feasible_routes: int | None = None  # requests sent to the collocation GPU lately, expected in time
    decode_feasible_routes: int | None = None  # the same for the decode GPU
    colloc_cached_prompt_tokens: int | None = None  # prompt tokens in the collocation GPU's prefix cache
    prefill_cached_prompt_tokens: int | None = None  # prompt tokens in the prefill GPU's prefix cache
    pending_prefill_prefix_tokens: float | None = None  # mean prefix under the pending prompt tokens there
    pending_prefill_requests: int | None = None  # prompts pending prefill on the collocation GPU
    prefill_arrival_tokens_per_s: float | None = None  # prompt tokens/s sent to the prefill pool lately
    prefill_step_tokens: int | None = None  # the prefill engines' token budget per step
    colloc_arrivals_per_s: float | None = None  # requests/s sent to the collocation GPU over a long window

    def missing(self) -> tuple[str, ...]:
        """The optional inputs this request did not report, in ``OPTIONAL_INPUTS`` order (the
        inputs of ``UNLISTED_INPUTS`` are never listed: see there)."""
        fields = self.__dict__
        return tuple([name for name in OPTIONAL_INPUTS if fields[name] is None])


_column_values = attrgetter(*DESIGN_INPUTS, *COLUMN_INPUTS)


@dataclass(frozen=True)
class RouteColumns:
    """Many requests as float64 columns; an optional input that was not reported is NaN."""

    prompt_len: FloatArray
    predicted_output_len: FloatArray
    system_load: FloatArray
    decode_batch_size: FloatArray
    chunk_size: FloatArray
    optional: dict[str, FloatArray]  # every name of COLUMN_INPUTS

    @property
    def num_requests(self) -> int:
        return int(self.prompt_len.shape[0])

    @classmethod
    def from_inputs(cls, rows: Sequence[RouteInputs]) -> RouteColumns:
        """Columns of ``rows`` (``None`` becomes NaN)."""
        names = (*DESIGN_INPUTS, *COLUMN_INPUTS)
        # One tuple per row in one C call each; numpy reads None as NaN in a float array.
        table = np.array([_column_values(r) for r in rows], dtype=np.float64).reshape(len(rows), len(names))
        col = {name: np.ascontiguousarray(table[:, j]) for j, name in enumerate(names)}
        return cls(
            prompt_len=col["prompt_len"],
            predicted_output_len=col["predicted_output_len"],
            system_load=col["system_load"],
            decode_batch_size=col["decode_batch_size"],
            chunk_size=col["chunk_size"],
            optional={name: col[name] for name in COLUMN_INPUTS},
        )

    @classmethod
    def design_only(
        cls,
        prompt_len: npt.ArrayLike,
        predicted_output_len: npt.ArrayLike,
        system_load: npt.ArrayLike,
        decode_batch_size: npt.ArrayLike = 1,
        chunk_size: npt.ArrayLike = 256,
    ) -> RouteColumns:
        """Columns from the design's five inputs (broadcast); every optional input missing."""
        arrays = np.broadcast_arrays(
            *(
                np.asarray(v, dtype=np.float64)
                for v in (prompt_len, predicted_output_len, system_load, decode_batch_size, chunk_size)
            )
        )
        L, out, load, dbs, chunk = (np.array(a, dtype=np.float64).ravel() for a in arrays)
        # One array per optional column: a caller may fill any of them in place.
        return cls(L, out, load, dbs, chunk, {name: np.full(L.shape, math.nan) for name in COLUMN_INPUTS})


class Breakdown(Protocol):
    """One decision with its terms; a frozen dataclass starting with ``HEAD_FIELDS``, without
    ``__slots__`` (built by ``pdroute_core.frozen.from_fields``; the service's answer encoder
    reads its ``__dict__``)."""

    @property
    def decision(self) -> Decision: ...

    @property
    def reason(self) -> str: ...

    @property
    def t_collocated_ms(self) -> float: ...

    @property
    def t_disaggregated_ms(self) -> float: ...

    @property
    def assumed(self) -> tuple[str, ...]: ...

    @property
    def meets_slo(self) -> bool: ...

    @property
    def chosen_ttft_ms(self) -> float: ...

    @property
    def chosen_e2e_ms(self) -> float: ...


class BreakdownBatch(Protocol):
    """Many decisions; ``rows()`` gives one ``Breakdown`` per request, equal to ``decide``'s."""

    @property
    def is_disaggregated(self) -> npt.NDArray[np.bool_]: ...

    def rows(self) -> list[Any]: ...


class DecisionModel(Protocol):
    """Decides collocated or disaggregated for one request or many (bit-identical answers)."""

    @property
    def name(self) -> str: ...

    @property
    def reasons(self) -> tuple[str, ...]:
        """Every reason code ``decide`` can return (a bounded set: a metric label)."""
        ...

    def decide(self, inputs: RouteInputs) -> Breakdown: ...

    def decide_many(self, columns: RouteColumns) -> BreakdownBatch: ...


def term_names(breakdown_type: type[Any]) -> tuple[str, ...]:
    """The model's own terms of a breakdown dataclass: every field after ``HEAD_FIELDS``."""
    names = tuple(f.name for f in dataclasses.fields(breakdown_type))
    if names[: len(HEAD_FIELDS)] != HEAD_FIELDS:
        raise TypeError(f"{breakdown_type.__name__} must start with the fields {HEAD_FIELDS}")
    return names[len(HEAD_FIELDS) :]
