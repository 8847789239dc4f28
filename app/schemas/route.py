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
from app.http.route_codec import breakdown_terms

# The fields' bounds and docs live in the model core so that the gateway client enforces the same ones.
from pdroute_core.bounds import DEFAULT_CHUNK_SIZE, MAX_BATCH_ITEMS, MAX_REQUEST_ID_LEN
from pdroute_core.route_fields import CHOICES, FIELDS, PREFIX_HIT_INPUTS
from pdroute_core.routing import QueueAwareBreakdown, RouteBreakdown
from pdroute_core.routing.queue_aware import FIRST_TOKEN_DECODE, FirstToken


class StrictModel(BaseModel):
    """A request body: strict types, no unknown fields (the base of every request schema)."""

    # strict: a float or a numeric string is not an integer; extra fields are refused so a
    # misspelt field name is reported instead of silently ignored.
    model_config = ConfigDict(strict=True, extra="forbid")


def route_field(name: str) -> Any:
    """The pydantic constraints and description of the input ``name``, from its row of
    ``pdroute_core.route_fields`` (a test checks every input of ``RouteRequest`` has its row)."""
    f = FIELDS[name]
    finite = False if f.kind == "float" else None  # a float must be finite (an int always is)
    if f.exclusive_min:
        return Field(gt=f.minimum, le=f.maximum, description=f.doc, allow_inf_nan=finite)
    return Field(ge=f.minimum, le=f.maximum, description=f.doc, allow_inf_nan=finite)


def route_choice(name: str) -> Any:
    """The description of the setting override ``name`` (``pdroute_core.route_fields.CHOICES``)."""
    return Field(description=CHOICES[name].doc)


class RouteRequest(StrictModel):
    """One request as the gateway sees it: the inputs of ``pdroute_core.route_fields`` in its
    order (the design's first; a missing optional one takes the decision model's stated default
    and, when the table says so, is listed in the answer's ``assumed``), then the engine targets."""

    prompt_len: Annotated[int, route_field("prompt_len")]
    predicted_output_len: Annotated[int | None, route_field("predicted_output_len")] = None
    system_load: Annotated[int | None, route_field("system_load")] = None
    decode_batch_size: Annotated[int | None, route_field("decode_batch_size")] = None
    chunk_size: Annotated[int, route_field("chunk_size")] = DEFAULT_CHUNK_SIZE
    request_id: Annotated[str | None, Field(max_length=MAX_REQUEST_ID_LEN)] = None
    prefill_queue_requests: Annotated[int | None, route_field("prefill_queue_requests")] = None
    prefill_queue_tokens: Annotated[int | None, route_field("prefill_queue_tokens")] = None
    prefill_running_requests: Annotated[int | None, route_field("prefill_running_requests")] = None
    prefill_pool_gpus: Annotated[int | None, route_field("prefill_pool_gpus")] = None
    pending_prefill_tokens: Annotated[int | None, route_field("pending_prefill_tokens")] = None
    decode_pending_prefill_tokens: Annotated[int | None, route_field("decode_pending_prefill_tokens")] = None
    colloc_context_tokens: Annotated[int | None, route_field("colloc_context_tokens")] = None
    decode_context_tokens: Annotated[int | None, route_field("decode_context_tokens")] = None
    cached_prompt_tokens: Annotated[int | None, route_field("cached_prompt_tokens")] = None
    ttft_slo_ms: Annotated[float | None, route_field("ttft_slo_ms")] = None
    tpot_slo_ms: Annotated[float | None, route_field("tpot_slo_ms")] = None
    colloc_prefill_tokens_per_s: Annotated[float | None, route_field("colloc_prefill_tokens_per_s")] = None
    decode_prefill_tokens_per_s: Annotated[float | None, route_field("decode_prefill_tokens_per_s")] = None
    prefill_running_tokens: Annotated[int | None, route_field("prefill_running_tokens")] = None
    prefill_running_elapsed_ms: Annotated[float | None, route_field("prefill_running_elapsed_ms")] = None
    colloc_tpot_slack_ms: Annotated[float | None, route_field("colloc_tpot_slack_ms")] = None
    colloc_tpot_slack2_ms: Annotated[float | None, route_field("colloc_tpot_slack2_ms")] = None
    colloc_feasible_routes: Annotated[int | None, route_field("colloc_feasible_routes")] = None
    decode_feasible_routes: Annotated[int | None, route_field("decode_feasible_routes")] = None
    colloc_cached_prompt_tokens: Annotated[int | None, route_field("colloc_cached_prompt_tokens")] = None
    prefill_cached_prompt_tokens: Annotated[int | None, route_field("prefill_cached_prompt_tokens")] = None
    pending_prefill_prefix_tokens: Annotated[float | None, route_field("pending_prefill_prefix_tokens")] = (
        None
    )
    pending_prefill_requests: Annotated[int | None, route_field("pending_prefill_requests")] = None
    prefill_arrival_tokens_per_s: Annotated[float | None, route_field("prefill_arrival_tokens_per_s")] = None
    prefill_step_tokens: Annotated[int | None, route_field("prefill_step_tokens")] = None
    colloc_arrivals_per_s: Annotated[float | None, route_field("colloc_arrivals_per_s")] = None
    objective: Annotated[Literal["latency", "goodput"] | None, route_choice("objective")] = None

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

    @field_validator(*PREFIX_HIT_INPUTS)
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
    predicted_lateness_ms: float | None = Field(
        default=None,
        description="queue-aware: how far the chosen path's TTFT is predicted past the TTFT target "
        "(ms; 0 when on time or without a target)",
    )
    admission: Literal["admit", "defer", "shed"] | None = Field(
        default=None,
        description="queue-aware: admit (meets the targets), defer (misses them by no more than the "
        "model's error: send it elsewhere if possible, else admit), shed (misses them by more: "
        "serving it takes capacity from requests that can still make theirs)",
    )
    objective: Literal["latency", "goodput"] | None = Field(
        default=None, description="queue-aware: the objective the decision optimised"
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


class RouteBatchRequest(StrictModel):
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
    objective: Literal["latency", "goodput"] = Field(
        default="latency", description="queue-aware: the objective when a request names none"
    )
    first_token: FirstToken = Field(
        default=FIRST_TOKEN_DECODE,
        description="queue-aware: where the clients read a disaggregated request's first token",
    )
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
    """Every 4xx and 5xx body (``app.http.error_body``): ``error`` is one line naming the field and why."""

    error: str
    detail: Any = None
    request_id: str = Field(description="the X-Request-ID sent (or the body's request_id), else a new one")


class ReloadResponse(BaseModel):
    status: Literal["reloaded", "unchanged"]
    params_id: str
    previous_params_id: str
