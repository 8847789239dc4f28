"""`pdroute profile --engine-url`: one-line errors (engine down, not OpenAI-compatible, no metrics).

The engine itself is profiled in tests/real_engines/test_live_profile.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.responses import PlainTextResponse

from app.cli.main import main
from app.main import create_app
from app.settings import Settings
from tests.app.conftest import free_port, start_server
from tests.factories import write_params


def _profile(tmp_path: Path, url: str, *more: str) -> list[str]:
    return ["profile", "--engine-url", url, "--no-progress", "-o", str(tmp_path / "p.json"), *more]


def _one_line_error(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    return err


def test_an_engine_that_is_down(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    assert main(_profile(tmp_path, url, "--bandwidth-gbps", "1")) == 2
    assert "down or unreachable" in _one_line_error(capsys)
    assert not (tmp_path / "p.json").exists()


def test_a_server_that_is_not_openai_compatible(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    settings = Settings(params_path=write_params(tmp_path / "params.json"), watch_params=False)
    server = start_server(create_app(settings))  # pdroute's own service: no /v1/models
    try:
        assert main(_profile(tmp_path, server.url, "--bandwidth-gbps", "1")) == 2
    finally:
        server.stop()
    assert "not an OpenAI-compatible engine" in _one_line_error(capsys)


def test_an_engine_without_metrics(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    app = FastAPI()

    @app.get("/v1/models")
    def models() -> dict[str, object]:
        return {"object": "list", "data": [{"id": "m", "max_model_len": 4096}]}

    @app.get("/metrics")
    def metrics() -> PlainTextResponse:
        return PlainTextResponse("", status_code=404)

    server = start_server(app)
    try:
        assert main(_profile(tmp_path, server.url, "--bandwidth-gbps", "1")) == 2
    finally:
        server.stop()
    assert "no metrics" in _one_line_error(capsys)


@pytest.mark.parametrize(
    ("more", "message"),
    [
        ((), "needs --handoff-url"),
        (("--bandwidth-gbps", "1", "--handoff-url", "http://127.0.0.1:1"), "not both"),
        (("--bandwidth-gbps", "1", "--model", "tiny"), "--model"),
        (("--bandwidth-gbps", "1", "--system", "h100_sxm"), "--system"),
    ],
)
def test_options_the_live_source_refuses(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], more: tuple[str, ...], message: str
) -> None:
    assert main(_profile(tmp_path, "http://127.0.0.1:1", *more)) == 2
    assert message in _one_line_error(capsys)


def test_live_options_are_refused_by_the_other_sources(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [
        "profile",
        "--source",
        "aiconfigurator",
        "--handoff-url",
        "http://x:1",
        "-o",
        str(tmp_path / "p.json"),
    ]
    assert main(argv) == 2
    assert "--handoff-url" in _one_line_error(capsys)
