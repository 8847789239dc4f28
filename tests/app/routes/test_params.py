"""``GET /params``: a strong ETag, 304 on If-None-Match, and what a client needs to decide."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from app.routes.params import etag_of, matches
from tests.app.conftest import LiveServer
from tests.factories import TEST_QUEUE_AWARE, write_params


def test_etag_and_304_over_http(live_server: LiveServer) -> None:
    with live_server.client() as client:
        first = client.get("/params")
        etag = first.headers["etag"]
        assert first.status_code == 200 and etag.startswith('"') and not etag.startswith("W/")
        assert etag == etag_of(first.content)  # strong: the tag of these very bytes
        again = client.get("/params", headers={"If-None-Match": etag})
        assert again.status_code == 304 and again.content == b"" and again.headers["etag"] == etag
        for header in (f'"x", {etag}', f"W/{etag}", "*"):
            assert client.get("/params", headers={"If-None-Match": header}).status_code == 304
        other = client.get("/params", headers={"If-None-Match": '"0000"'})
        assert other.status_code == 200 and other.content == first.content


def test_the_body_carries_what_the_service_applies(make_server: Any, queue_aware_params_file: Path) -> None:
    server = make_server(
        params_path=queue_aware_params_file,
        watch_params=False,
        harm_weight=0.5,
        slo_margin=0.2,
        default_output_len=99,
        default_ttft_slo_ms=800.0,
    )
    body = httpx.get(f"{server.url}/params").json()
    assert body["model"] == "queue-aware"
    assert (body["harm_weight"], body["slo_margin"], body["default_output_len"]) == (0.5, 0.2, 99)
    assert (body["default_ttft_slo_ms"], body["default_tpot_slo_ms"]) == (800.0, None)


@pytest.mark.parametrize(
    "settings",
    [
        {"harm_weight": 1.0},
        {"slo_margin": 0.3},
        {"default_output_len": 7},
        {"default_tpot_slo_ms": 30.0},
        {"default_output_len_by_prompt": "1024:40"},
    ],
)
def test_a_setting_that_changes_decisions_changes_the_etag(
    make_server: Any, queue_aware_params_file: Path, settings: dict[str, Any]
) -> None:
    base = make_server(params_path=queue_aware_params_file, watch_params=False, clock=lambda: 5.0)
    changed = make_server(
        params_path=queue_aware_params_file, watch_params=False, clock=lambda: 5.0, **settings
    )
    tag = httpx.get(f"{base.url}/params").headers["etag"]
    assert httpx.get(f"{changed.url}/params").headers["etag"] != tag
    assert httpx.get(f"{changed.url}/params", headers={"If-None-Match": tag}).status_code == 200


def test_a_reload_changes_the_etag(make_server: Any, tmp_path: Path) -> None:
    path = write_params(tmp_path / "p.json", schema_version=2, queue_aware=TEST_QUEUE_AWARE)
    server = make_server(params_path=path, watch_params=False, admin_token="tok")
    with server.client() as client:
        tag = client.get("/params").headers["etag"]
        write_params(path, schema_version=2, queue_aware=TEST_QUEUE_AWARE, beta=21.0)
        assert client.post("/admin/reload", headers={"Authorization": "Bearer tok"}).status_code == 200
        after = client.get("/params", headers={"If-None-Match": tag})
        assert after.status_code == 200 and after.headers["etag"] != tag
        assert after.json()["params"]["beta"] == 21.0


@pytest.mark.parametrize(
    ("header", "expected"),
    [(None, False), ('"a"', True), ('"b"', False), ('W/"a"', True), (' "b" , "a" ', True), ("*", True)],
)
def test_matches(header: str | None, expected: bool) -> None:
    assert matches(header, '"a"') is expected
