"""The proxy's settings: the service's (params, model, engines file, learners) plus its own.

Read once from the environment (prefix ``PDROUTE_``) and injected. The proxy's own fields say
which policy decides, how the KV hand-off is spoken, and how long an upstream may take.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from app.settings import Settings

PolicyName = Literal["pdroute", "collocated", "disaggregated", "threshold", "threshold-queue"]
POLICY_NAMES: tuple[PolicyName, ...] = (
    "pdroute",
    "collocated",
    "disaggregated",
    "threshold",
    "threshold-queue",
)
KvConnector = Literal["example", "nixl"]
AdmissionControl = Literal["off", "shed"]


class ProxySettings(Settings):
    """Everything ``Settings`` holds, and the proxy's own fields (``PDROUTE_<NAME>``)."""

    port: int = Field(default=8100, ge=1, le=65535)
    policy: PolicyName = Field(
        default="pdroute",
        description="who decides: pdroute's served model, or a static rule (collocated, disaggregated,"
        " threshold: llm-d's prompt threshold, threshold-queue: Dynamo's prompt and prefill-queue rule)",
    )
    threshold_tokens: int = Field(
        default=1000,
        ge=0,
        le=10_000_000,
        description="threshold rules: disaggregate prompts longer than this",
    )
    max_queue_depth: int = Field(
        default=2, ge=0, le=1_000_000, description="threshold-queue: ... and fewer requests than this wait"
    )
    kv_connector: KvConnector = Field(
        default="example",
        description="how the decode engine finds the KV: example (vLLM's ExampleConnector, shared storage:"
        " the decode request is prompt + first token) or nixl (NixlConnector: kv_transfer_params round trip)",
    )
    kv_block_size: int = Field(
        default=16,
        ge=1,
        le=4096,
        description="example connector: the engines' --block-size; a prompt of a multiple of it is sent bare",
    )
    chunk_size: int = Field(
        default=256, ge=1, le=1_048_576, description="prefill tokens per engine step on a decode engine"
    )
    prefill_step_tokens: int | None = Field(
        default=None,
        ge=1,
        le=16_777_216,
        description="the prefill engines' token budget per step (their --max-num-batched-tokens): with it "
        "the model adds the prompts that arrive before a prompt's prefill step starts and share it "
        "(vLLM puts every waiting prompt that fits in a step); unset: one prompt a step",
    )
    arrival_window_s: float = Field(
        default=30.0,
        ge=0,
        le=3600,
        allow_inf_nan=False,
        description="the window over which the proxy counts the requests it sends each decode engine "
        "(colloc_arrivals_per_s: the decodes that will join it during a long prefill there), the prompt "
        "tokens each decode engine prefilled (colloc_prefill_tokens_per_s: the share of its next seconds "
        "later prompts take) and the prompt tokens it sends the prefill engines "
        "(prefill_arrival_tokens_per_s: the prompts that will share a step): at least as long as the "
        "longest prefill; 0: the first not reported (the model's two-second routes stand for it), the "
        "others over two seconds",
    )
    prefill_timeout_s: float = Field(
        default=30.0, gt=0, le=3600, allow_inf_nan=False, description="longest wait for a prefill answer"
    )
    connect_timeout_s: float = Field(
        default=1.0, gt=0, le=60, allow_inf_nan=False, description="upstream connect timeout"
    )
    read_timeout_s: float = Field(
        default=60.0,
        gt=0,
        le=3600,
        allow_inf_nan=False,
        description="longest silence of a decode stream (its first token included) before failing over",
    )
    down_s: float = Field(
        default=2.0,
        gt=0,
        le=3600,
        allow_inf_nan=False,
        description="an engine that refused a connection is tried last for this long (seconds)",
    )
    max_retries: int = Field(default=3, ge=0, le=64, description="decode engines tried after the first")
    admission_control: AdmissionControl = Field(
        default="off",
        description="what the proxy does with the served model's admission advice: off (serve every"
        " request; the advice is counted), shed (answer 503 with Retry-After to a request the model"
        " says to shed: it cannot make its targets, and serving it costs requests that still can)",
    )
