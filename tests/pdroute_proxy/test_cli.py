"""``pdroute proxy``: a bad setting or file is one line and exit 2, never a traceback; it serves."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.app.conftest import free_port
from tests.conftest import stop_process
from tests.pdroute_proxy.conftest import engines_file
from tests.pdroute_proxy.fake_engine import FakeEngine


def run_cli(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if not k.startswith("PDROUTE_")}
    return subprocess.run(
        [sys.executable, "-m", "app", "proxy", *args],
        env={**full, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    ("args", "env", "expected"),
    [
        ((), {}, "PDROUTE_ENGINES_FILE"),
        (("--engines", "/nonexistent/engines.yaml"), {}, "cannot read"),
        (("--engines", "{bad}"), {"PDROUTE_KV_BLOCK_SIZE": "0"}, "PDROUTE_KV_BLOCK_SIZE"),
        (("--engines", "{good}"), {"PDROUTE_WORKERS": "2"}, "one process"),
        (("--engines", "{bad}"), {}, "pools"),
    ],
)
def test_bad_settings_are_one_line(
    tmp_path: Path, args: tuple[str, ...], env: dict[str, str], expected: str
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("pools: {prefill: [{id: p0}]}\n")
    good = tmp_path / "good.json"
    good.write_text(
        '{"pools": {"decode": [{"id": "d0", "url": "http://127.0.0.1:9/metrics", "kind": "vllm"}]}}'
    )
    args = tuple(a.format(bad=bad, good=good) for a in args)
    result = run_cli(*args, **env)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("pdroute proxy: error:") and expected in lines[0], (
        result.stderr
    )


def test_it_serves(tmp_path: Path) -> None:
    decode = FakeEngine("d0").start()
    port = free_port()
    path = engines_file(tmp_path / "engines.json", [], [decode])
    full = {k: v for k, v in os.environ.items() if not k.startswith("PDROUTE_")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "app", "proxy", "--engines", str(path), "--port", str(port)],
        env={**full, "PDROUTE_WATCH_PARAMS": "false"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                r = httpx.post(
                    f"http://127.0.0.1:{port}/v1/completions",
                    json={"prompt": [1, 2], "max_tokens": 2},
                    timeout=5,
                )
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline and proc.poll() is None
                time.sleep(0.2)
        assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 2
    finally:
        stop_process(proc)
        decode.stop()
