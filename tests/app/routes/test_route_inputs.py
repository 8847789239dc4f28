"""``route_inputs`` on the service's parsed request, as the dataclass constructor makes the inputs."""

from __future__ import annotations

import dataclasses
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from app.engines.autofill import ENGINE_FIELDS
from app.schemas.route import RouteRequest
from pdroute_core.request_defaults import RouteDefaults, route_inputs
from pdroute_core.route_fields import FIELD_NAMES as INPUT_FIELDS
from pdroute_core.routing import RouteInputs

OPTIONAL_COUNTS = (
    "decode_batch_size",
    "prefill_queue_requests",
    "prefill_queue_tokens",
    "prefill_running_requests",
    "pending_prefill_tokens",
    "decode_pending_prefill_tokens",
    "colloc_context_tokens",
    "decode_context_tokens",
)
BODIES = st.fixed_dictionaries(
    {"prompt_len": st.integers(1, 100_000)},
    optional={
        "predicted_output_len": st.integers(1, 8_192),
        "system_load": st.integers(0, 512),
        "chunk_size": st.integers(1, 8_192),
        "prefill_pool_gpus": st.integers(1, 64),
        "cached_prompt_tokens": st.integers(0, 1),
        "ttft_slo_ms": st.floats(1.0, 1e5),
        "tpot_slo_ms": st.floats(1.0, 1e3),
        "colloc_prefill_tokens_per_s": st.floats(0.0, 1e6),
        "request_id": st.text(max_size=8),
        "decode_target": st.just("d0"),
        **{name: st.integers(0, 512) for name in OPTIONAL_COUNTS},
    },
)
FILLS = st.dictionaries(st.sampled_from(ENGINE_FIELDS), st.integers(0, 512))


def _expected(req: RouteRequest, defaults: RouteDefaults, filled: dict[str, Any]) -> RouteInputs:
    """The inputs written out field by field through the constructor."""
    return RouteInputs(
        prompt_len=req.prompt_len,
        predicted_output_len=filled.get(
            "predicted_output_len", req.predicted_output_len or defaults.output_len
        ),
        system_load=filled.get("system_load", 0 if req.system_load is None else req.system_load),
        decode_batch_size=filled.get(
            "decode_batch_size",
            1 if req.decode_batch_size is None else req.decode_batch_size,
        ),
        chunk_size=req.chunk_size,
        **{
            name: filled.get(name, getattr(req, name))
            for name in INPUT_FIELDS[5:]
            if name not in ("ttft_slo_ms", "tpot_slo_ms")
        },
        ttft_slo_ms=defaults.ttft_slo_ms if req.ttft_slo_ms is None else req.ttft_slo_ms,
        tpot_slo_ms=defaults.tpot_slo_ms if req.tpot_slo_ms is None else req.tpot_slo_ms,
    )


def test_every_field_a_scrape_fills_is_an_input() -> None:
    assert set(ENGINE_FIELDS) <= set(INPUT_FIELDS)
    assert tuple(f.name for f in dataclasses.fields(RouteInputs)) == INPUT_FIELDS
    assert set(INPUT_FIELDS) <= set(RouteRequest.model_fields)


@settings(max_examples=300, deadline=None)
@given(BODIES, st.sampled_from([None, 400.0]), st.sampled_from([None, 30.0]), FILLS)
def test_inputs_equal_the_constructors(
    body: dict[str, Any], ttft: float | None, tpot: float | None, filled: dict[str, Any]
) -> None:
    if "system_load" not in body and "decode_target" not in body:
        body["system_load"] = 3
    req = RouteRequest.model_validate(body)
    defaults = RouteDefaults(77, ttft, tpot)
    got = route_inputs(req, defaults, filled)
    assert got == _expected(req, defaults, filled)
    assert tuple(vars(got)) == INPUT_FIELDS
    assert route_inputs(req, defaults) == _expected(req, defaults, {})
