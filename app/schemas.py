"""Request and response models of the routing API. Field names are a contract with gateways."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

# Upper bounds: far beyond any real request, low enough that the arithmetic stays exact.
MAX_PROMPT_LEN = 16_777_216  # 16M tokens
MAX_OUTPUT_LEN = 16_777_216
MAX_LOAD = 1_000_000
MAX_CHUNK = 16_777_216
MAX_REQUEST_ID_LEN = 256
MAX_BATCH_ITEMS = 100_000  # hard cap; settings.max_batch_requests sets the served limit


class _Strict(BaseModel):
    # strict: a float or a numeric string is not an integer; extra fields are refused so a
    # misspelt field name is reported instead of silently ignored.
    model_config = ConfigDict(strict=True, extra="forbid")


class RouteRequest(_Strict):
    prompt_len: Annotated[int, Field(ge=1, le=MAX_PROMPT_LEN, description="prompt tokens")]
    predicted_output_len: Annotated[
        int | None,
        Field(ge=1, le=MAX_OUTPUT_LEN, description="predicted output tokens; settings default if omitted"),
    ] = None
    system_load: Annotated[
        int, Field(ge=0, le=MAX_LOAD, description="decodes running where the request would collocate")
    ]
    decode_batch_size: Annotated[
        int, Field(ge=0, le=MAX_LOAD, description="decode batch of the target decode GPU")
    ] = 1
    chunk_size: Annotated[int, Field(ge=1, le=MAX_CHUNK, description="prefill chunk size")] = 256
    request_id: Annotated[str | None, Field(max_length=MAX_REQUEST_ID_LEN)] = None


class Breakdown(BaseModel):
    prefill_ms: float
    transfer_ms: float
    interference_ms: float
    decode_collocated_ms: float
    decode_disaggregated_ms: float


class RouteResponse(BaseModel):
    decision: Literal["collocated", "disaggregated"]
    t_collocated_ms: float
    t_disaggregated_ms: float
    breakdown: Breakdown
    params_id: str
    request_id: str | None = None


class RouteBatchRequest(_Strict):
    requests: Annotated[list[RouteRequest], Field(min_length=1, max_length=MAX_BATCH_ITEMS)]


class RouteBatchResponse(BaseModel):
    results: list[RouteResponse]
    params_id: str


class ParamsResponse(BaseModel):
    params_id: str
    path: str
    loaded_at: float
    loaded_at_iso: str
    break_even_load: float
    transfer_rate_ms_per_token: float
    params: dict[str, object]
    last_reload_error: str | None


class ErrorResponse(BaseModel):
    """Every 4xx body: ``error`` is one line naming the field and the reason."""

    error: str
    detail: Any = None


class ReloadResponse(BaseModel):
    status: Literal["reloaded", "unchanged"]
    params_id: str
    previous_params_id: str
