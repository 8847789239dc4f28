"""Request and response models of the capacity planner (``POST /plan``, ``POST /plan/grid``).

Every input is bounded so that one request cannot occupy the service: a value out of bounds is
answered 422 naming the field. The limits:

* ``machines`` 1..1000 (a split needs >= 2; 1 is answered 422 "no feasible x");
* ``prompt_len``/``output_len`` 1..1,048,576 tokens; grids up to 32 prompt x 32 output lengths;
* inline curve sets: 2..256 points per series, 64 assumptions, names up to 128 characters;
  point coordinates up to 1e12 (checked with the set, ``solver.plan.curvesets.MAX_COORDINATE``);
* ``memory_gb``/``weights_gb`` in (0, 1,000,000].
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

MAX_PLAN_MACHINES = 1000
MAX_PLAN_LEN = 1_048_576  # tokens
MAX_GRID_SIDE = 32
MAX_POINTS_PER_SERIES = 256
MAX_ASSUMPTIONS = 64
MAX_NAME_LEN = 128
MAX_TEXT_LEN = 2000
MAX_GB = 1_000_000.0
MAX_BATCH = 1e9

ThroughputFitName = Literal["piecewise", "quadratic"]
Point = Annotated[list[float], Field(min_length=2, max_length=2, description="[batch, value]")]


class StrictModel(BaseModel):
    # strict: a numeric string is not a number; extra fields are refused so that a misspelt
    # field is reported instead of silently ignored.
    model_config = ConfigDict(strict=True, extra="forbid")


class SeriesSpec(StrictModel):
    label: Annotated[str, Field(max_length=MAX_TEXT_LEN)] = ""
    provenance: Annotated[str, Field(max_length=MAX_TEXT_LEN)] | dict[str, Any] = ""
    points: Annotated[list[Point], Field(min_length=2, max_length=MAX_POINTS_PER_SERIES)]


class PhaseSpec(StrictModel):
    batch_unit: Literal["tokens", "requests"]
    max_batch: Annotated[float | None, Field(gt=0, le=MAX_BATCH, description="search-domain bound")] = None
    capacity: SeriesSpec
    throughput: SeriesSpec


class PrefillSpec(PhaseSpec):
    batch_unit: Literal["tokens"] = "tokens"


class DecodeSpec(PhaseSpec):
    batch_unit: Literal["requests"] = "requests"


class CurveSetSpec(StrictModel):
    """An inline curve set: the same fields as a curve-set JSON file (docs/planning.md)."""

    schema_version: Literal[1] = 1
    name: Annotated[str, Field(min_length=1, max_length=MAX_NAME_LEN)]
    model: Annotated[str, Field(max_length=MAX_TEXT_LEN)] = "unknown"
    hardware: Annotated[str, Field(max_length=MAX_TEXT_LEN)] = "unknown"
    memory_gb: Annotated[float, Field(gt=0, le=MAX_GB)]
    weights_gb: Annotated[float, Field(gt=0, le=MAX_GB)]
    provenance: dict[str, Any] = Field(default_factory=dict)
    assumptions: Annotated[
        list[Annotated[str, Field(max_length=MAX_TEXT_LEN)]], Field(max_length=MAX_ASSUMPTIONS)
    ] = Field(default_factory=list)
    prefill: PrefillSpec
    decode: DecodeSpec


CurvesField = Annotated[
    Annotated[str, Field(min_length=1, max_length=MAX_NAME_LEN)] | CurveSetSpec,
    Field(description="a built-in curve-set name, or an inline curve set"),
]
Machines = Annotated[int, Field(ge=1, le=MAX_PLAN_MACHINES, description="X, machines in the fleet")]
Length = Annotated[int, Field(ge=1, le=MAX_PLAN_LEN)]
GigaBytes = Annotated[float | None, Field(gt=0, le=MAX_GB)]


class PlanRequest(StrictModel):
    curves: CurvesField | None = None
    profile: Annotated[
        str | None,
        Field(
            min_length=1,
            max_length=MAX_NAME_LEN,
            description="a shipped profile's name: curves derived from it for this workload",
        ),
    ] = None
    machines: Machines
    prompt_len: Annotated[Length, Field(description="L_p, prompt tokens")]
    output_len: Annotated[Length, Field(description="L_d, output tokens")]
    memory_gb: Annotated[GigaBytes, Field(description="C per machine; the set's figure if omitted")] = None
    weights_gb: Annotated[GigaBytes, Field(description="C_w per machine; the set's figure if omitted")] = None
    throughput_fit: ThroughputFitName = "piecewise"
    all_candidates: Annotated[bool, Field(description="every candidate instead of the summary")] = False

    @model_validator(mode="after")
    def _one_source(self) -> PlanRequest:
        if (self.curves is None) == (self.profile is None):
            raise ValueError("curves, profile: give exactly one of them")
        return self


class PlanGridRequest(StrictModel):
    curves: CurvesField
    machines: Machines
    prompt_lens: Annotated[list[Length], Field(min_length=1, max_length=MAX_GRID_SIDE)]
    output_lens: Annotated[list[Length], Field(min_length=1, max_length=MAX_GRID_SIDE)]
    memory_gb: GigaBytes = None
    weights_gb: GigaBytes = None
    throughput_fit: ThroughputFitName = "piecewise"


class CapacityInverseOut(BaseModel):
    batch: float
    is_exact: bool
    boundary: Literal["upper"] | None
    fit_root: float | None
    domain: list[float]


class LimitsOut(BaseModel):
    prefill_tokens: CapacityInverseOut
    decode_requests: CapacityInverseOut


class BaselineOut(BaseModel):
    concurrency: float
    prefill_batch_tokens: float
    prefill_time_share: float
    prefill_tokens_per_s: float
    decode_tokens_per_s: float
    rate_rps: float
    memory_gb: float
    capacity: CapacityInverseOut


class CandidateOut(BaseModel):
    policy: Literal["CUF-P", "CUF-D", "TUF-P", "TUF-D"]
    decode_machines: int
    prefill_machines: int
    prefill_batch_tokens: float
    prefill_concurrency: float
    decode_batch: float
    prefill_memory_gb: float
    decode_memory_gb: float
    prefill_capacity_util: float
    decode_capacity_util: float
    prefill_time_util: float
    decode_time_util: float
    concurrency_residual: float
    rate_residual: float
    prefill_tokens_per_s: float
    decode_tokens_per_s: float
    rate_rps: float
    x_continuous: float | None


class ReferenceOut(BaseModel):
    decode_machines: int
    prefill_machines: int
    prefill_batch_tokens: float
    decode_batch: float
    prefill_tokens_per_s: float
    decode_tokens_per_s: float
    rate_rps: float
    num_points_searched: int
    gap_rps: float
    gap_fraction: float
    speedup: float


class CufBalancedOut(BaseModel):
    decode_machines: int
    x_real: float
    rate_rps: float | None


class TufRootOut(BaseModel):
    policy: Literal["TUF-P", "TUF-D"]
    x_continuous: float


class RecommendationOut(BaseModel):
    action: Literal["co-located", "split"]
    source: Literal["baseline", "pick", "reference"]
    policy: str
    decode_machines: int
    prefill_machines: int
    prefill_batch_tokens: float
    decode_batch: float
    rate_rps: float
    speedup: float
    pick_to_reference: float
    reason: str


class PlanResponse(BaseModel):
    curves: str
    machines: int
    prompt_len: int
    output_len: int
    memory_gb: float
    weights_gb: float
    throughput_fit: ThroughputFitName
    limits: LimitsOut
    baseline: BaselineOut
    best: CandidateOut
    speedup: float
    s_p: float
    s_d: float
    reference_optimum: ReferenceOut
    cuf_balanced: CufBalancedOut
    tuf_roots: list[TufRootOut]
    num_candidates: int
    candidates: list[CandidateOut]
    fits: dict[str, Any]
    notes: list[str]
    recommendation: RecommendationOut
    assumptions: list[str] = Field(default_factory=list, description="how curves from a profile were derived")


class PlanGridResponse(BaseModel):
    curves: str
    throughput_fit: ThroughputFitName
    machines: int
    prompt_lens: list[int]
    output_lens: list[int]
    s_p: list[list[float | None]]
    s_d: list[list[float | None]]
    speedup: list[list[float | None]]
    reference_speedup: list[list[float | None]]
    policy: list[list[str | None]]
    infeasible: list[list[str | None]]
    recommendation: list[list[str | None]]
    recommended_speedup: list[list[float | None]]
