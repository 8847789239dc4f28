"""``PDROUTE_DEFAULT_OUTPUT_LEN_BY_PROMPT`` end to end: /route applies the table to a request
without predicted_output_len, /params carries it, and a bad value stops startup in one line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import ValidationError

from app.schemas.route import RouteRequest
from app.settings import InvalidSettings, Settings
from pdroute_core.request_defaults import route_inputs

TABLE = "1024:340,2048:80,8192:40"
EXPECTED = {1: 200, 1023: 200, 1024: 340, 2047: 340, 2048: 80, 8191: 80, 8192: 40, 100_000: 40}


def _without_ids(answer: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in answer.items() if k != "request_id"}


def test_a_request_without_output_len_gets_its_bucket_s_value(
    make_server: Any, queue_aware_params_file: Path
) -> None:
    server = make_server(
        params_path=queue_aware_params_file, watch_params=False, default_output_len_by_prompt=TABLE
    )
    with server.client() as client:
        for prompt_len, tokens in EXPECTED.items():
            bare = {"prompt_len": prompt_len, "system_load": 16, "pending_prefill_tokens": 4 * prompt_len}
            implicit = client.post("/route", json=bare)
            explicit = client.post("/route", json={**bare, "predicted_output_len": tokens})
            assert implicit.status_code == explicit.status_code == 200
            assert _without_ids(implicit.json()) == _without_ids(explicit.json()), prompt_len
        batch = client.post("/route/batch", json={"requests": [{"prompt_len": 4096, "system_load": 16}]})
        told = client.post("/route", json={"prompt_len": 4096, "system_load": 16, "predicted_output_len": 80})
        other = client.post(
            "/route", json={"prompt_len": 4096, "system_load": 16, "predicted_output_len": 200}
        )
        assert batch.json()["results"][0]["breakdown"] == told.json()["breakdown"]
        assert told.json()["breakdown"] != other.json()["breakdown"]  # the length does move the terms


def test_params_carries_the_table(make_server: Any, queue_aware_params_file: Path) -> None:
    on = make_server(
        params_path=queue_aware_params_file, watch_params=False, default_output_len_by_prompt=TABLE
    )
    off = make_server(params_path=queue_aware_params_file, watch_params=False)
    body = httpx.get(f"{on.url}/params").json()
    assert body["default_output_len_by_prompt"] == [[1024, 340], [2048, 80], [8192, 40]]
    assert body["default_output_len"] == 200
    assert httpx.get(f"{off.url}/params").json()["default_output_len_by_prompt"] == []


def test_with_the_table_off_route_inputs_use_the_one_default() -> None:
    defaults = Settings(default_output_len=123).route_defaults()
    assert defaults.output_table is None
    for prompt_len in (1, 2048, 10**6):
        req = RouteRequest.model_validate({"prompt_len": prompt_len, "system_load": 1})
        assert route_inputs(req, defaults).predicted_output_len == 123


def test_the_table_sets_route_inputs() -> None:
    defaults = Settings(default_output_len_by_prompt=TABLE).route_defaults()
    for prompt_len, tokens in EXPECTED.items():
        req = RouteRequest.model_validate({"prompt_len": prompt_len, "system_load": 1})
        assert route_inputs(req, defaults).predicted_output_len == tokens
        sent = RouteRequest.model_validate(
            {"prompt_len": prompt_len, "system_load": 1, "predicted_output_len": 9}
        )
        assert route_inputs(sent, defaults).predicted_output_len == 9  # the request's own value wins


def test_a_bad_setting_names_the_variable_and_the_item() -> None:
    with pytest.raises(ValidationError) as info:
        Settings(default_output_len_by_prompt="1024:340,2048:0")
    message = str(InvalidSettings.of(info.value))
    assert (
        message
        == "PDROUTE_DEFAULT_OUTPUT_LEN_BY_PROMPT: item '2048:0': tokens must be in [1, 16777216], got 0"
    )


@pytest.mark.parametrize(
    ("env", "needle"),
    [
        (
            {"PDROUTE_DEFAULT_OUTPUT_LEN_BY_PROMPT": "1024=340"},
            "PDROUTE_DEFAULT_OUTPUT_LEN_BY_PROMPT: item '1024=340'",
        ),
        ({"PDROUTE_DEFAULT_OUTPUT_LEN_BY_PROMPT": "8:1,8:2"}, "min_prompt_len 8 given twice"),
        ({"PDROUTE_PORT": "abc"}, "PDROUTE_PORT: Input should be a valid integer"),
    ],
)
def test_serve_refuses_a_bad_setting_with_one_line(env: dict[str, str], needle: str) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "app", "serve"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **env},
    )
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("pdroute serve: error: ") and needle in lines[0], r.stderr
