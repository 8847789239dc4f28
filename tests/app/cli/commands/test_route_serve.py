"""``pdroute route`` and ``pdroute serve``: answers, and one-line errors with non-zero exits."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.cli.main import main
from pdroute_core.params import params_from_dict
from pdroute_core.routing import QueueAwareModel, RouteInputs
from pdroute_core.routing.design import AnalyticalCostModel
from solver.params import load_params
from tests.app.conftest import ServeProcess
from tests.factories import TEST_PARAMS, write_params

pytestmark = pytest.mark.slow  # serves in child processes: left out of the fast loop

MODEL = AnalyticalCostModel(params_from_dict(TEST_PARAMS))


def test_route_prints_the_decision(params_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["route", "--prompt-len", "1024", "--output-len", "200", "--system-load", "8"]
    assert main([*args, "--params", str(params_file), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    expected = MODEL.explain(1024, 200, 8)
    assert out["decision"] == expected.decision
    assert out["t_collocated_ms"] == expected.t_collocated_ms
    assert out["params_id"] == MODEL.params.params_id
    assert main([*args, "--params", str(params_file)]) == 0
    table = capsys.readouterr().out
    assert expected.decision in table and "interference_ms" in table and "break-even load" in table


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--prompt-len", "0", "--output-len", "1", "--system-load", "0"], "--prompt-len: must be >= 1"),
        (["--prompt-len", "5", "--output-len", "1", "--system-load", "-2"], "--system-load: must be >= 0"),
        (
            ["--prompt-len", "5", "--output-len", "1", "--system-load", "0", "--params", "/nonexistent.json"],
            "/nonexistent.json: file not found",
        ),
    ],
)
def test_route_errors_are_one_line(extra: list[str], needle: str) -> None:
    r = subprocess.run([sys.executable, "-m", "app", "route", *extra], capture_output=True, text=True)
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0, r.stderr
    assert needle in r.stderr and "Traceback" not in r.stderr


def test_route_takes_the_optional_inputs_and_the_model(
    queue_aware_params_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = {
        "prefill_queue_requests": 4,
        "prefill_pool_gpus": 2,
        "cached_prompt_tokens": 64,
        "ttft_slo_ms": 900.0,
        "prefill_running_tokens": 9000,
    }
    flags = [f"--{k.replace('_', '-')}={v}" for k, v in state.items()]
    base = ["route", "--prompt-len", "1024", "--output-len", "200", "--system-load", "8"]
    assert main([*base, *flags, "--params", str(queue_aware_params_file), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    model = QueueAwareModel(load_params(queue_aware_params_file))
    inputs = RouteInputs(1024, 200, 8, prefill_queue_requests=4, prefill_pool_gpus=2)
    inputs = dataclasses.replace(inputs, cached_prompt_tokens=64, ttft_slo_ms=900.0)
    inputs = dataclasses.replace(inputs, prefill_running_tokens=9000)
    b = model.decide(inputs)
    assert out["model"] == "queue-aware" and out["decision"] == b.decision and out["reason"] == b.reason
    assert out["breakdown"]["prefill_wait_ms"] == b.prefill_wait_ms
    assert out["assumed"] == list(b.assumed) and "prefill_queue_requests" not in out["assumed"]
    assert main([*base, "--params", str(queue_aware_params_file), "--decision-model", "design"]) == 0
    table = capsys.readouterr().out
    assert "design" in table and "interference_ms" in table


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--prefill-pool-gpus", "0"], "--prefill-pool-gpus: must be >= 1, got 0"),
        (["--cached-prompt-tokens", "6"], "--cached-prompt-tokens: Value error, must be <= prompt_len (5)"),
        (["--ttft-slo-ms", "0"], "--ttft-slo-ms: must be > 0"),
        (["--prefill-running-tokens", "-1"], "--prefill-running-tokens: must be >= 0, got -1"),
        (["--tpot-slo-ms", "inf"], "--tpot-slo-ms"),
        (["--prompt-len", "99999999999"], "--prompt-len: must be <= 16777216"),
        (["--harm-weight", "-1"], "--harm-weight: must be a finite number >= 0"),
        (["--slo-margin", "1"], "--slo-margin: must be in [0, 1)"),
        (["--model", "queue-aware"], "no queue_aware forms"),
    ],
)
def test_route_new_argument_errors_are_one_line(params_file: Path, extra: list[str], needle: str) -> None:
    base = ["--prompt-len", "5", "--output-len", "1", "--system-load", "0", "--params", str(params_file)]
    r = subprocess.run([sys.executable, "-m", "app", "route", *base, *extra], capture_output=True, text=True)
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0, r.stderr
    assert needle in r.stderr and "Traceback" not in r.stderr


def test_serve_refuses_params_without_the_chosen_models_forms(params_file: Path) -> None:
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "app",
            "serve",
            "--params",
            str(params_file),
            "--port",
            "1",
            "--model",
            "queue-aware",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0 and "no queue_aware forms" in r.stderr, r.stderr


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (None, "file not found"),
        ("", "not valid JSON"),
        ("[1, 2]", "expected a JSON object"),
        ('{"schema_version": 1}', "alpha: missing"),
        ('{"schema_version": 3}', "schema_version: unsupported version 3"),
        ('{"schema_version": 2, "alpha": 1}', "queue_aware: missing"),
        (json.dumps({**TEST_PARAMS, "beta": "fast"}), "beta: expected a number"),
        (json.dumps({**TEST_PARAMS, "gamma": -1}), "gamma: must be > 0"),
        (json.dumps({**TEST_PARAMS, "bandwidth_GBps": 0}), "bandwidth_GBps: must be > 0"),
        (json.dumps({**TEST_PARAMS}).replace("0.05", "Infinity"), "non-finite"),
        (json.dumps({**TEST_PARAMS, "bytes_per_token": 1.5}), "bytes_per_token: must be an integer"),
    ],
)
def test_serve_refuses_bad_params_with_one_line(tmp_path: Path, content: str | None, needle: str) -> None:
    path = tmp_path / "params.json"
    if content is not None:
        path.write_text(content)
    r = subprocess.run(
        [sys.executable, "-m", "app", "serve", "--params", str(path), "--port", "1"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert str(path) in lines[0] and needle in lines[0]


def test_serve_refuses_a_bad_engines_file_with_one_line(tmp_path: Path) -> None:
    engines = tmp_path / "engines.yaml"
    engines.write_text("pools:\n  decode:\n    - {id: d0, url: 'http://h:1/metrics', kind: tgi}\n")
    r = subprocess.run(
        [sys.executable, "-m", "app", "serve", "--port", "1"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PDROUTE_ENGINES_FILE": str(engines)},
    )
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert str(engines) in lines[0] and "pools.decode.0.kind" in lines[0]


def test_serve_with_two_workers(serve_process: Callable[..., ServeProcess], tmp_path: Path) -> None:
    path = write_params(tmp_path / "params.json")
    proc = serve_process("--params", str(path), "--workers", "2")
    proc.wait_ready(timeout=30)
    r = httpx.post(f"{proc.url}/route", json={"prompt_len": 100, "system_load": 3})
    assert r.status_code == 200
    assert r.json()["params_id"] == MODEL.params.params_id


def test_sighup_with_workers_and_a_bad_file_keeps_serving(
    serve_process: Callable[..., ServeProcess], tmp_path: Path
) -> None:
    # uvicorn's supervisor restarts every worker on SIGHUP: they must come back on the last
    # good params, not crash-loop on the bad file.
    path = write_params(tmp_path / "params.json")
    proc = serve_process("--params", str(path), "--workers", "2", env={"PDROUTE_WATCH_PARAMS": "false"})
    proc.wait_ready(timeout=30)
    good = httpx.get(f"{proc.url}/params").json()["params_id"]
    write_params(path, alpha=-1)
    before = worker_pids(proc.proc.pid)
    assert len(before) == 2
    proc.signal(signal.SIGHUP)
    # The supervisor replaces its workers one at a time, each once its replacement is ready:
    # wait until both old ones are gone, so that every answer below comes from a restarted one.
    deadline = time.monotonic() + 60
    while worker_pids(proc.proc.pid) & before:
        assert time.monotonic() < deadline, "the supervisor did not restart its workers"
        assert proc.proc.poll() is None, proc.output()
        time.sleep(0.05)
    deadline = time.monotonic() + 30
    answers: list[dict[str, Any]] = []
    while time.monotonic() < deadline and len(answers) < 20:
        try:
            r = httpx.get(f"{proc.url}/params", timeout=2)
            answers.append(r.json())
        except httpx.TransportError:
            time.sleep(0.1)
    assert len(answers) == 20
    assert all(a["params_id"] == good for a in answers)
    assert all(a["last_reload_error"] and "alpha: must be > 0" in a["last_reload_error"] for a in answers)
    route = httpx.post(f"{proc.url}/route", json={"prompt_len": 100, "system_load": 3})
    assert route.status_code == 200 and route.json()["params_id"] == good
    metrics = httpx.get(f"{proc.url}/metrics").text
    assert 'pdroute_params_reloads_total{outcome="failure",trigger="startup"} 1.0' in metrics


def worker_pids(pid: int) -> set[int]:
    """The live worker processes of the supervisor ``pid`` (not its resource tracker)."""
    workers: set[int] = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(FileNotFoundError):
            for child in (task / "children").read_text().split():
                with contextlib.suppress(FileNotFoundError):
                    if b"spawn_main" in Path(f"/proc/{child}/cmdline").read_bytes():
                        workers.add(int(child))
    return workers


@pytest.mark.parametrize(
    ("make", "needle"),
    [
        (lambda p: p.mkdir(), "is a directory"),
        (lambda p: os.mkfifo(p), "not a regular file"),  # must not wait for a writer
        (lambda p: p.write_text(json.dumps({**TEST_PARAMS, "alpha": 10**400})), "alpha|int too large"),
        (
            lambda p: p.write_text('{"metadata": ' + "[" * 100_000 + "]" * 100_000 + "}"),
            "deep|not valid JSON",
        ),
    ],
    ids=["directory", "fifo", "huge-integer", "deep-nesting"],
)
@pytest.mark.parametrize("command", ["serve", "route", "plot"])
def test_unusual_params_files_are_one_line_errors(
    tmp_path: Path, make: Callable[[Path], Any], needle: str, command: str
) -> None:
    path = tmp_path / "params.json"
    make(path)
    args = {
        "serve": ["--params", str(path), "--port", "1"],
        "route": ["--params", str(path), "--prompt-len", "5", "--output-len", "1", "--system-load", "0"],
        "plot": [str(path), "-o", str(tmp_path / "plots")],
    }[command]
    r = subprocess.run(
        [sys.executable, "-m", "app", command, *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert str(path) in lines[0] and re.search(needle, lines[0]), lines[0]
