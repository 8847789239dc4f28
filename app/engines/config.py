"""The fleet's engines: which metric endpoints to scrape, in which pool, of which kind.

The file (``PDROUTE_ENGINES_FILE``, YAML or JSON: JSON is YAML) holds pools of endpoints::

    pools:
      prefill: [{id: p0, url: "http://10.0.0.1:8000/metrics", kind: vllm}]
      decode:  [{id: d0, url: "http://10.0.0.2:8000/metrics", kind: vllm}]
      mixed:   []          # GPUs doing both prefill and decode (collocation candidates)

``kind`` is ``vllm``, ``sglang``, ``trtllm`` or ``custom`` (then ``metrics`` names, per signal,
the metric to read and an optional label filter). Validation is strict (unknown keys, duplicate
ids, bad URLs refused) and a bad file raises ``InvalidEngines`` with one line naming the place.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal
from urllib.parse import urlsplit

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from app.engines.custom import CustomSpec
from app.engines.sample import SIGNALS
from pdroute_core.errors import PdrouteError

PoolName = Literal["prefill", "decode", "mixed"]
POOL_NAMES: tuple[PoolName, ...] = ("prefill", "decode", "mixed")
EngineKind = Literal["vllm", "sglang", "trtllm", "custom"]
MAX_ENDPOINTS = 4096
ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$"


class InvalidEngines(PdrouteError):
    """The engines file is unusable (unreadable, not YAML/JSON, or not a valid fleet)."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class CustomMetric(_Strict):
    """Where a ``custom`` endpoint publishes one signal: a metric name and an optional label filter."""

    name: Annotated[str, Field(min_length=1, max_length=256, pattern=r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")]
    labels: dict[str, str] = Field(default_factory=dict, description="only series with these labels")
    scale: Annotated[float, Field(gt=0, allow_inf_nan=False)] = 1.0  # multiplies the summed value


class EndpointConfig(_Strict):
    id: Annotated[str, Field(pattern=ID_PATTERN, description="the name a /route request uses")]
    url: Annotated[str, Field(min_length=8, max_length=2048, description="the Prometheus /metrics URL")]
    kind: EngineKind
    metrics: dict[str, CustomMetric] | None = Field(
        default=None, description="custom kind only: signal name -> where it is published"
    )

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"must be an http:// or https:// URL with a host, got {value!r}")
        return value

    @model_validator(mode="after")
    def _custom_metrics(self) -> EndpointConfig:
        if self.kind == "custom":
            if not self.metrics:
                raise ValueError(f"endpoint {self.id}: kind custom needs `metrics` (signal -> metric)")
            unknown = sorted(set(self.metrics) - set(SIGNALS))
            if unknown:
                raise ValueError(f"endpoint {self.id}: unknown signal(s) {unknown}; known: {list(SIGNALS)}")
        elif self.metrics is not None:
            raise ValueError(f"endpoint {self.id}: `metrics` is for kind custom only")
        return self


class PoolsConfig(_Strict):
    prefill: list[EndpointConfig] = Field(default_factory=list)
    decode: list[EndpointConfig] = Field(default_factory=list)
    mixed: list[EndpointConfig] = Field(default_factory=list)


class EnginesFile(_Strict):
    pools: PoolsConfig

    @model_validator(mode="after")
    def _unique_ids(self) -> EnginesFile:
        seen: set[str] = set()
        total = 0
        for pool in POOL_NAMES:
            for endpoint in getattr(self.pools, pool):
                total += 1
                if endpoint.id in seen:
                    raise ValueError(f"endpoint id {endpoint.id!r} appears twice")
                seen.add(endpoint.id)
        if total == 0:
            raise ValueError("no endpoints: name at least one under pools.prefill, .decode or .mixed")
        if total > MAX_ENDPOINTS:
            raise ValueError(f"{total} endpoints is over the limit of {MAX_ENDPOINTS}")
        return self


@dataclass(frozen=True)
class Endpoint:
    """One engine's metrics endpoint, as the scraper and the request path use it."""

    id: str
    url: str
    kind: EngineKind
    pool: PoolName
    custom: CustomSpec = ()  # (signal, metric, label filter, scale) for kind custom


@dataclass(frozen=True)
class Fleet:
    """Every endpoint by id, and each pool's ids in file order."""

    endpoints: dict[str, Endpoint]
    pools: dict[PoolName, tuple[str, ...]]

    def in_pool(self, endpoint_id: str, *pools: PoolName) -> bool:
        endpoint = self.endpoints.get(endpoint_id)
        return endpoint is not None and endpoint.pool in pools


def fleet_from(data: object, where: str = "engines") -> Fleet:
    """The fleet of a parsed YAML/JSON document; ``InvalidEngines`` naming the first bad place."""
    try:
        parsed = EnginesFile.model_validate(data)
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        loc = ".".join(str(p) for p in err["loc"]) or "top level"
        more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        raise InvalidEngines(f"{where}: {loc}: {err['msg']}{more}") from None
    endpoints: dict[str, Endpoint] = {}
    pools: dict[PoolName, tuple[str, ...]] = {}
    for pool in POOL_NAMES:
        members: list[EndpointConfig] = getattr(parsed.pools, pool)
        for e in members:
            custom = tuple(
                (signal, m.name, tuple(sorted(m.labels.items())), m.scale)
                for signal, m in sorted((e.metrics or {}).items())
            )
            endpoints[e.id] = Endpoint(e.id, e.url, e.kind, pool, custom)
        pools[pool] = tuple(e.id for e in members)
    return Fleet(endpoints, pools)


def load_fleet(path: Path) -> Fleet:
    """Read and validate the engines file; ``InvalidEngines`` with one line on any problem."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise InvalidEngines(f"{path}: cannot read: {exc}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise InvalidEngines(f"{path}: not valid YAML or JSON: {first}") from None
    return fleet_from(data, str(path))
