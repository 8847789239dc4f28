"""``ServedParams`` reads the table of default output lengths from ``/params`` strictly; a body
without it (an older service) means no table; the local tier applies it as ``/route`` does."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from app.routes.route import RouteDefaults, route_inputs
from app.schemas import RouteRequest
from pdroute_client import RouteQuery, ServedParams
from pdroute_core.errors import InvalidParams
from pdroute_core.output_defaults import OutputLenDefaults

DOC: dict[str, Any] = json.loads(
    (Path(__file__).resolve().parents[2] / "conformance" / "vectors-v1.json").read_text()
)
SERVICE = next(s for s in DOC["services"] if s["default_output_len_by_prompt"])


def body(**changes: Any) -> dict[str, Any]:
    p = DOC["params"][SERVICE["params"]]
    out = {**SERVICE, "params_id": p["params_id"], "params": p["document"], **changes}
    return {k: v for k, v in out.items() if v is not ...}


def test_the_table_is_read_and_applied() -> None:
    sp = ServedParams.from_body(body())
    assert (
        sp.output_table is not None and sp.output_table.to_json() == SERVICE["default_output_len_by_prompt"]
    )
    table = sp.output_table
    defaults = RouteDefaults(sp.default_output_len, None, None, table)
    for prompt_len in (1, 1023, 1024, 2048, 5000, 8192, 100_000):
        query = RouteQuery(prompt_len=prompt_len, system_load=3)
        got = query.inputs(sp.output_len, None, None)
        assert got.predicted_output_len == table.for_prompt(prompt_len)
        req = RouteRequest.model_validate({"prompt_len": prompt_len, "system_load": 3})
        assert got == route_inputs(req, defaults)
        told = RouteQuery(prompt_len=prompt_len, system_load=3, predicted_output_len=7)
        assert told.inputs(sp.output_len, None, None).predicted_output_len == 7


@pytest.mark.parametrize("value", [..., []])
def test_absent_or_empty_means_no_table(value: Any) -> None:
    sp = ServedParams.from_body(body(default_output_len_by_prompt=value))
    assert sp.output_table is None and sp.output_len == sp.default_output_len
    assert RouteQuery(prompt_len=5000, system_load=3).inputs(
        sp.output_len, None, None
    ).predicted_output_len == (sp.default_output_len)


@pytest.mark.parametrize(
    ("value", "needle"),
    [
        ("1024:340", "expected a list"),
        ([[1024, "340"]], "default_output_len_by_prompt[0]: expected [min_prompt_len, tokens] integers"),
        ([[1024, 0]], "default_output_len_by_prompt[0]: tokens must be in"),
        ([[-1, 5]], "min_prompt_len must be in"),
        ([[8, 1], [8, 2]], "min_prompt_len 8 given twice"),
    ],
)
def test_a_bad_table_is_refused(value: Any, needle: str) -> None:
    with pytest.raises(InvalidParams) as info:
        ServedParams.from_body(body(default_output_len_by_prompt=value))
    assert str(info.value).startswith("/params default_output_len_by_prompt") and needle in str(info.value)


def test_inputs_takes_an_output_table_or_a_length() -> None:
    query = RouteQuery(prompt_len=3000, system_load=1)
    assert query.inputs(OutputLenDefaults(50, ((2048, 80),)), None, None).predicted_output_len == 80
    assert query.inputs(OutputLenDefaults(50, ((4096, 80),)), None, None).predicted_output_len == 50
    assert query.inputs(77, None, None).predicted_output_len == 77
