"""Service settings, read once from the environment (prefix ``PDROUTE_``) and injected."""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any, Literal

from pydantic import AliasChoices, Field, SecretStr, ValidationError, ValidationInfo, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from pdroute_core.errors import PdrouteError
from pdroute_core.output_defaults import OutputLenDefaults, parse_table
from pdroute_core.request_defaults import RouteDefaults
from pdroute_core.routing.objective import DEFAULT_OBJECTIVE
from pdroute_core.routing.queue_aware import (
    DEFAULT_HARM_WEIGHT,
    DEFAULT_SLO_MARGIN,
    FIRST_TOKEN_DECODE,
    FirstToken,
)


def embedded_params_path() -> Path:
    """The default params shipped inside the package (Qwen3-8B on H100 SXM, vLLM, NVLink)."""
    return Path(str(resources.files("solver") / "data" / "params" / "default.json"))


def _default_target_ms(metric: str) -> Any:
    """The field of a service-wide ``metric`` target (ms, at most a day); unset: no target."""
    return Field(
        default=None,
        gt=0,
        le=86_400_000,
        allow_inf_nan=False,
        description=f"{metric} target (ms) applied to a /route request that gives none; none when unset",
    )


class InvalidSettings(PdrouteError):
    """A setting the service cannot start with (one line naming the environment variable)."""

    @classmethod
    def of(cls, exc: ValidationError) -> InvalidSettings:
        """The first error of ``Settings``' validation, as ``PDROUTE_<NAME>: why``."""
        e = exc.errors(include_url=False)[0]
        name = "_".join(str(part) for part in e["loc"]).upper()
        name = name if name.startswith("PDROUTE_") else "PDROUTE_" + name  # an alias is named in full
        for field in Settings.model_fields.values():  # a variable with other names: say them all
            alias = field.validation_alias
            if isinstance(alias, AliasChoices) and alias.choices[0] == name:
                name += " (or " + ", ".join(str(choice) for choice in alias.choices[1:]) + ")"
        why = e["msg"].removeprefix("Value error, ")
        if why.startswith(name + ": "):  # the validator's own line names the bad item
            return cls(why)
        return cls(f"{name}: {why} (got {e.get('input')!r})")


class Settings(BaseSettings):
    """Everything an operator can set; each field is also ``PDROUTE_<NAME>`` in the environment."""

    # populate_by_name: a field with other environment names (``decision_model``) is still
    # passed by its own name in code (``Settings(decision_model="design")``).
    model_config = SettingsConfigDict(env_prefix="PDROUTE_", extra="ignore", populate_by_name=True)

    params_path: Path | None = Field(
        default=None, description="params.json to serve; the embedded default when unset"
    )
    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=1, le=65535)
    workers: int = Field(default=1, ge=1, le=64)
    log_level: str = "info"
    default_output_len: int = Field(
        default=200, ge=1, le=1_048_576, description="predicted_output_len when a request omits it"
    )
    default_output_len_by_prompt: str = Field(
        default="",
        description="predicted_output_len by prompt length when a request omits it: min_prompt_len:tokens "
        "items, e.g. 1024:340,2048:80 (the largest bound <= prompt_len wins; shorter prompts get "
        "default_output_len); off when empty",
    )
    admin_token: SecretStr | None = Field(
        default=None, description="bearer token for POST /admin/reload; the endpoint is off when unset"
    )
    max_batch_requests: int = Field(default=4096, ge=1, le=100_000, description="items per /route/batch")
    max_body_bytes: int = Field(default=2_097_152, ge=1024, description="largest request body accepted")
    last_good_params_path: Path | None = Field(
        default=None,
        description="where workers keep a copy of the last valid params (set by pdroute serve --workers N)",
    )
    decision_model: Literal["auto", "design", "queue-aware"] = Field(
        default="auto",
        # PDROUTE_MODEL, the variable's first name, is still read; PDROUTE_DECISION_MODEL wins.
        validation_alias=AliasChoices("PDROUTE_DECISION_MODEL", "PDROUTE_MODEL"),
        description="decision model serving /route: auto is queue-aware when the params carry its "
        "forms (schema_version 2), else design; params lacking the chosen model's forms are refused",
    )
    harm_weight: float = Field(
        default=DEFAULT_HARM_WEIGHT,
        ge=0,
        le=1000,
        allow_inf_nan=False,
        description="queue-aware: weight w of the harm to other requests in e2e + w * harm",
    )
    slo_margin: float = Field(
        default=DEFAULT_SLO_MARGIN,
        ge=0,
        lt=1,
        allow_inf_nan=False,
        description="queue-aware: a path meets a target when predicted within (1 - margin) of it",
    )
    objective: Literal["latency", "goodput"] = Field(
        default=DEFAULT_OBJECTIVE,
        description="queue-aware: what /route optimises when no path meets a request's targets: "
        "goodput (the most requests within their targets) or latency; a request may override it "
        "(docs/api.md)",
    )
    first_token: FirstToken = Field(
        default=FIRST_TOKEN_DECODE,
        description="queue-aware: where the gateway's client reads a disaggregated request's first "
        "token: decode-engine (the decode engine streams every token, as vLLM's P/D proxy and "
        "Dynamo do) or prefill-engine (the gateway streams the prefill engine's token first)",
    )
    default_ttft_slo_ms: float | None = _default_target_ms("TTFT")
    default_tpot_slo_ms: float | None = _default_target_ms("TPOT")
    watch_params: bool = Field(default=True, description="reload when the params file changes on disk")
    watch_interval_s: float = Field(default=2.0, gt=0, le=3600)
    max_concurrent_grids: int = Field(
        default=2,
        ge=1,
        le=64,
        description="POST /plan/grid computations at once; beyond it 429 with Retry-After",
    )
    engines_file: Path | None = Field(
        default=None,
        description="YAML/JSON fleet of engine /metrics endpoints that fill /route inputs; off when unset",
    )
    scrape_interval_s: float = Field(
        default=0.25, gt=0, le=60, allow_inf_nan=False, description="seconds between engine scrape rounds"
    )
    scrape_timeout_s: float = Field(
        default=0.5, gt=0, le=60, allow_inf_nan=False, description="per-endpoint scrape timeout (seconds)"
    )
    scrape_jitter: float = Field(
        default=0.1, ge=0, lt=1, allow_inf_nan=False, description="scrape interval jitter, fraction each way"
    )
    scrape_concurrency: int = Field(default=32, ge=1, le=1024, description="engine scrapes in flight at once")
    engines_stale_s: float = Field(
        default=2.0,
        gt=0,
        le=3600,
        allow_inf_nan=False,
        description="an engine reading older than this (seconds) is never used: its fields count as missing",
    )

    calibration_enabled: bool = Field(
        default=False,
        description="recalibrate the queue-aware model online from POST /feedback (docs/calibration.md)",
    )
    calibration_lower: float = Field(
        default=0.5, gt=0, le=1, allow_inf_nan=False, description="least correction"
    )
    calibration_upper: float = Field(
        default=2.0, ge=1, le=100, allow_inf_nan=False, description="largest correction"
    )
    calibration_forgetting: float = Field(
        default=0.002,
        ge=0,
        lt=1,
        allow_inf_nan=False,
        description="weight lost per later observation of a term",
    )
    calibration_min_observations: int = Field(
        default=50, ge=1, le=1_000_000, description="observations a term needs before its correction leaves 1"
    )
    calibration_lru_size: int = Field(
        default=100_000,
        ge=1,
        le=10_000_000,
        description="recent /route decisions kept for feedback by request_id",
    )
    calibration_refresh_every: int = Field(
        default=50, ge=1, le=1_000_000, description="feedbacks between swaps of the calibrated model"
    )
    calibration_refresh_seconds: float = Field(
        default=10.0, gt=0, le=86_400, allow_inf_nan=False, description="or seconds since the last swap"
    )
    max_feedback_items: int = Field(default=4096, ge=1, le=100_000, description="items per /feedback/batch")
    output_len_learning: Literal["off", "correct"] = Field(
        default="off",
        description="correct: learn per prompt bucket how the output lengths reported by POST /feedback"
        " (output_tokens) relate to the predicted ones, and correct predicted_output_len before deciding"
        " (docs/calibration.md); needs calibration_enabled",
    )
    output_len_window: int = Field(
        default=512, ge=1, le=1_000_000, description="finished requests kept per prompt bucket (the latest)"
    )
    output_len_min_observations: int = Field(
        default=50,
        ge=1,
        le=1_000_000,
        description="finished requests a prompt bucket needs before its correction leaves 1 (<= the window)",
    )
    output_len_max_ratio: float = Field(
        default=8.0,
        gt=1,
        le=1000,
        allow_inf_nan=False,
        description="the output-length correction is clipped to [1 / this, this]",
    )

    @field_validator("default_output_len_by_prompt")
    @classmethod
    def _table_parses(cls, value: str) -> str:
        parse_table(value, 1)  # InvalidOutputTable (a ValueError): one line naming the bad item
        return value

    @field_validator("output_len_learning")
    @classmethod
    def _learning_has_feedback(cls, value: str, info: ValidationInfo) -> str:
        if value != "off" and not info.data.get("calibration_enabled", False):
            raise ValueError(
                "PDROUTE_OUTPUT_LEN_LEARNING: correct learns from POST /feedback, which needs"
                " PDROUTE_CALIBRATION_ENABLED=true"
            )
        return value

    @field_validator("output_len_min_observations")
    @classmethod
    def _min_within_window(cls, value: int, info: ValidationInfo) -> int:
        window = info.data.get("output_len_window")
        if window is not None and value > window:
            raise ValueError(
                f"PDROUTE_OUTPUT_LEN_MIN_OBSERVATIONS: expected at most PDROUTE_OUTPUT_LEN_WINDOW ({window}),"
                f" got {value}"
            )
        return value

    def output_len_defaults(self) -> OutputLenDefaults:
        """The default output length by prompt length (only ``default_output_len`` when the table is off)."""
        return parse_table(self.default_output_len_by_prompt, self.default_output_len)

    def route_defaults(self) -> RouteDefaults:
        """What ``/route`` assumes for a request's missing fields."""
        table = self.output_len_defaults()
        return RouteDefaults(
            self.default_output_len,
            self.default_ttft_slo_ms,
            self.default_tpot_slo_ms,
            table if table.by_prompt else None,
        )

    def resolved_params_path(self) -> Path:
        return self.params_path if self.params_path is not None else embedded_params_path()
