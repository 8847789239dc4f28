"""Request and response models of the routing API. Field names are a contract with gateways."""

from __future__ import annotations

from typing import Annotated, Any, Literal, get_type_hints

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    create_model,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from app.engines.config import ID_PATTERN as ENDPOINT_ID_PATTERN
from app.route_codec import breakdown_terms

# The limits live in the model core so that the gateway client enforces the same ones.
from pdroute_core.bounds import (
    DEFAULT_CHUNK_SIZE,
    MAX_BATCH_ITEMS,
    MAX_CHUNK,
    MAX_GPUS,
    MAX_LOAD,
    MAX_OUTPUT_LEN,
    MAX_PROMPT_LEN,
    MAX_REQUEST_ID_LEN,
    MAX_SLO_MS,
    MAX_TOKENS,
    MAX_TOKENS_PER_S,
)
from pdroute_core.routing import QueueAwareBreakdown, RouteBreakdown


class _Strict(BaseModel):
    # strict: a float or a numeric string is not an integer; extra fields are refused so a
    # misspelt field name is reported instead of silently ignored.
    model_config = ConfigDict(strict=True, extra="forbid")


class RouteRequest(_Strict):
    """One request as the gateway sees it. The design's fields first; the rest are optional
    state a gateway may report (``pdroute_core.routing.types.OPTIONAL_INPUTS``): a missing one takes
    the decision model's stated default and is listed in the answer's ``assumed``."""

    prompt_len: Annotated[int, Field(ge=1, le=MAX_PROMPT_LEN, description="prompt tokens")]
    predicted_output_len: Annotated[
        int | None,
        Field(ge=1, le=MAX_OUTPUT_LEN, description="predicted output tokens; settings default if omitted"),
    ] = None
    system_load: Annotated[
        int | None,
        Field(
            ge=0,
            le=MAX_LOAD,
            description="decodes running where the request would collocate; required unless "
            "decode_target or colloc_target is named (then filled from the engine's metrics)",
        ),
    ] = None
    decode_batch_size: Annotated[
        int | None,
        Field(
            ge=0,
            le=MAX_LOAD,
            description="decode batch of the target decode GPU; filled from decode_target's metrics "
            "when named, else 1 when omitted",
        ),
    ] = None
    chunk_size: Annotated[int, Field(ge=1, le=MAX_CHUNK, description="prefill chunk size")] = (
        DEFAULT_CHUNK_SIZE
    )
    request_id: Annotated[str | None, Field(max_length=MAX_REQUEST_ID_LEN)] = None
    prefill_queue_requests: Annotated[
        int | None,
        Field(ge=0, le=MAX_LOAD, description="requests waiting (not started) for the prefill pool"),
    ] = None
    prefill_queue_tokens: Annotated[
        int | None, Field(ge=0, le=MAX_TOKENS, description="prompt tokens of those waiting requests")
    ] = None
    prefill_running_requests: Annotated[
        int | None, Field(ge=0, le=MAX_LOAD, description="prefills in progress on the prefill pool")
    ] = None
    prefill_pool_gpus: Annotated[
        int | None, Field(ge=1, le=MAX_GPUS, description="prefill GPUs sharing that queue")
    ] = None
    pending_prefill_tokens: Annotated[
        int | None,
        Field(
            ge=0,
            le=MAX_TOKENS,
            description="prompt tokens admitted to the collocation GPU and not yet prefilled",
        ),
    ] = None
    decode_pending_prefill_tokens: Annotated[
        int | None,
        Field(
            ge=0,
            le=MAX_TOKENS,
            description="prompt tokens admitted to the target decode GPU for local prefill, not yet "
            "prefilled (the same as pending_prefill_tokens when both are one GPU)",
        ),
    ] = None
    colloc_context_tokens: Annotated[
        int | None,
        Field(ge=0, le=MAX_TOKENS, description="KV tokens of the decodes running on the collocation GPU"),
    ] = None
    decode_context_tokens: Annotated[
        int | None,
        Field(ge=0, le=MAX_TOKENS, description="KV tokens of the decodes running on the target decode GPU"),
    ] = None
    cached_prompt_tokens: Annotated[
        int | None,
        Field(
            ge=0,
            le=MAX_PROMPT_LEN,
            description="prompt tokens already in the decode GPU's prefix cache (at most prompt_len)",
        ),
    ] = None
    ttft_slo_ms: Annotated[
        float | None,
        Field(
            gt=0,
            le=MAX_SLO_MS,
            allow_inf_nan=False,
            description="time-to-first-token target in ms; PDROUTE_DEFAULT_TTFT_SLO_MS if omitted",
        ),
    ] = None
    tpot_slo_ms: Annotated[
        float | None,
        Field(
            gt=0,
            le=MAX_SLO_MS,
            allow_inf_nan=False,
            description="time-per-output-token target in ms; PDROUTE_DEFAULT_TPOT_SLO_MS if omitted",
        ),
    ] = None
    colloc_prefill_tokens_per_s: Annotated[
        float | None,
        Field(
            ge=0,
            le=MAX_TOKENS_PER_S,
            allow_inf_nan=False,
            description="prompt tokens per second prefilled on the collocation GPU over the last second "
            "or two (what the gateway routed there, or the rate of vllm:prompt_tokens_total); the "
            "queue-aware model stretches the predicted decode step by the time these chunks take. "
            "If omitted, no later prefill is predicted (not listed in assumed); auto-filled from "
            "the engine's prompt-token counter when a target is named",
        ),
    ] = None
    decode_prefill_tokens_per_s: Annotated[
        float | None,
        Field(
            ge=0,
            le=MAX_TOKENS_PER_S,
            allow_inf_nan=False,
            description="the same on the target decode GPU (its local prefills; equal to "
            "colloc_prefill_tokens_per_s when both are one GPU)",
        ),
    ] = None
    prefill_running_tokens: Annotated[
        int | None,
        Field(
            ge=0,
            le=MAX_TOKENS,
            description="prompt tokens of the prefills in progress on the prefill pool (what the "
            "gateway sent there that has not finished prefilling); the queue-aware model waits for "
            "the first of them to finish. If omitted, they are taken to be as long as the queued "
            "ones (not listed in assumed)",
        ),
    ] = None

    decode_target: Annotated[
        str | None,
        Field(
            pattern=ENDPOINT_ID_PATTERN,
            description="id of the decode GPU's engine (engines file, pool decode or mixed): its "
            "latest metrics fill the load fields not sent",
        ),
    ] = None
    colloc_target: Annotated[
        str | None,
        Field(
            pattern=ENDPOINT_ID_PATTERN,
            description="id of the engine where the request would collocate (default: decode_target "
            "when it is in pool mixed)",
        ),
    ] = None
    prefill_target: Annotated[
        str | None,
        Field(
            pattern=ENDPOINT_ID_PATTERN,
            description="id of the prefill engine it would be sent to (default: the whole prefill pool)",
        ),
    ] = None

    @model_validator(mode="after")
    def _load_or_target(self) -> RouteRequest:
        if self.system_load is None and self.decode_target is None and self.colloc_target is None:
            raise PydanticCustomError(
                "missing",
                "system_load: Field required (or name decode_target / colloc_target to fill it "
                "from engine metrics)",
            )
        return self

    @property
    def names_target(self) -> bool:
        """The request names an engine target: its missing load fields come from engine metrics."""
        return not (self.decode_target is None and self.colloc_target is None and self.prefill_target is None)

    @field_validator("cached_prompt_tokens")
    @classmethod
    def _cached_within_prompt(cls, value: int | None, info: ValidationInfo) -> int | None:
        prompt_len = info.data.get("prompt_len")
        if value is not None and prompt_len is not None and value > prompt_len:
            raise ValueError(f"must be <= prompt_len ({prompt_len}), got {value}")
        return value


def _terms_model(breakdown_type: type[Any]) -> type[BaseModel]:
    """The OpenAPI model of a breakdown's terms, derived from its dataclass fields."""
    hints = get_type_hints(breakdown_type)
    fields: dict[str, Any] = {name: (hints[name], ...) for name in breakdown_terms(breakdown_type)}
    model: type[BaseModel] = create_model(f"{breakdown_type.__name__}Terms", **fields)
    return model


DesignTerms = _terms_model(RouteBreakdown)
QueueAwareTerms = _terms_model(QueueAwareBreakdown)


class InputSource(BaseModel):
    """Where one input of the decision came from."""

    source: Literal["caller", "scrape", "assumed"] = Field(
        description="caller: sent in the request; scrape: an engine's metrics; assumed: the model's default"
    )
    endpoint: str | None = Field(
        default=None, description="scrape: the endpoint id, or pool:prefill for a sum over the prefill pool"
    )
    age_ms: float | None = Field(
        default=None, description="scrape: age of the reading (ms; the oldest in a pool)"
    )


class RouteResponse(BaseModel):
    """One decision. ``breakdown`` holds the deciding model's own terms (ms unless named)."""

    decision: Literal["collocated", "disaggregated"]
    reason: str = Field(description="why, as a short code (a bounded set per model)")
    model: str = Field(description="the decision model that decided: design or queue-aware")
    t_collocated_ms: float
    t_disaggregated_ms: float
    assumed: list[str] = Field(description="optional inputs not reported, taken at the model's defaults")
    meets_slo: bool | None = Field(
        default=None, description="queue-aware: the chosen path is predicted to meet the targets"
    )
    # Models built at import by create_model: mypy cannot see them as types.
    breakdown: DesignTerms | QueueAwareTerms  # type: ignore[valid-type]
    params_id: str
    request_id: str | None = None
    input_sources: dict[str, InputSource] | None = Field(
        default=None,
        description="present when the request named an engine target: where each load input came "
        "from (system_load, decode_batch_size and the queue/context fields)",
    )


class RouteBatchRequest(_Strict):
    requests: Annotated[list[RouteRequest], Field(min_length=1, max_length=MAX_BATCH_ITEMS)]


class RouteBatchResponse(BaseModel):
    results: list[RouteResponse]
    params_id: str


class ParamsResponse(BaseModel):
    params_id: str
    model: str = Field(description="the decision model deciding with these params")
    path: str
    loaded_at: float
    loaded_at_iso: str
    break_even_load: float
    transfer_rate_ms_per_token: float
    params: dict[str, object]
    last_reload_error: str | None
    # What the service applies before deciding, so that a client deciding locally on these
    # params (pdroute_client) gives the service's answer.
    harm_weight: float = Field(description="queue-aware: weight of the harm to other requests")
    slo_margin: float = Field(description="queue-aware: a target is met within (1 - margin) of it")
    default_output_len: int = Field(description="predicted_output_len when a request omits it")
    default_output_len_by_prompt: list[list[int]] = Field(
        default_factory=list,
        description="[min_prompt_len, tokens] pairs, sorted: a request that omits predicted_output_len "
        "gets the tokens of the largest min_prompt_len <= prompt_len, else default_output_len; "
        "empty when PDROUTE_DEFAULT_OUTPUT_LEN_BY_PROMPT is off",
    )
    default_ttft_slo_ms: float | None = Field(description="ttft_slo_ms when a request omits it")
    default_tpot_slo_ms: float | None = Field(description="tpot_slo_ms when a request omits it")
    calibration: dict[str, object] | None = Field(
        default=None,
        description="online calibration: corrections, counts, recent error (docs/calibration.md)",
    )
    output_len_learning: dict[str, object] | None = Field(
        default=None,
        description="PDROUTE_OUTPUT_LEN_LEARNING: the mode and, when correct, the snapshot in force per"
        " prompt bucket (min_prompt_len, observations, mean_output_tokens, ratio, and the sums in force"
        " observed_tokens and told_tokens, null below min_observations; docs/calibration.md)",
    )


class ErrorResponse(BaseModel):
    """Every 4xx and 5xx body (``app.error_body``): ``error`` is one line naming the field and why."""

    error: str
    detail: Any = None
    request_id: str = Field(description="the X-Request-ID sent (or the body's request_id), else a new one")


class ReloadResponse(BaseModel):
    status: Literal["reloaded", "unchanged"]
    params_id: str
    previous_params_id: str
