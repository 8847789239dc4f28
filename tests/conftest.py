"""Fixtures shared by every test package: params files and live servers on loopback."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest

# A hand-made parameter set for tests (not a profile of any real GPU): the design's RTX 4090
# figures for gamma, bandwidth and batch_thresh, with round alpha and beta.
TEST_PARAMS: dict[str, Any] = {
    "schema_version": 1,
    "alpha": 0.05,
    "beta": 20.0,
    "batch_thresh": 16,
    "gamma": 0.0869,
    "bandwidth_GBps": 12.9,
    "bytes_per_token": 147456,
    "metadata": {
        "model": "test-model",
        "hardware": "test-gpu",
        "transfer_path": "pinned-relay",
        "source": "tests",
        "created_at": "2026-01-01T00:00:00+00:00",
    },
}


# Step-time forms of the queue-aware model for tests (round values of the order a fit of the
# embedded H100 profile gives; not a profile of any real GPU). With them a file is schema 2.
TEST_QUEUE_AWARE: dict[str, float] = {
    "prefill_floor_ms": 9.0,
    "prefill_ms_per_token": 0.02,
    "prefill_knee_tokens": 344.0,
    "decode_base_ms": 6.5,
    "decode_ms_per_seq": 0.013,
    "decode_ms_per_context_token": 4.4e-05,
    "chunk_ms_per_token": 0.008,
    "chunk_ms_per_token_sq": 1.2e-05,
    "chunk_ms_per_token_seq": 1.7e-05,
}


def stop_process(proc: subprocess.Popen[Any]) -> None:
    """SIGTERM a child process, then SIGKILL it if it has not exited within 10 s."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def write_params(path: Path, **overrides: Any) -> Path:
    """Write a params file: TEST_PARAMS with ``overrides`` applied to the top level."""
    data = {**TEST_PARAMS, **overrides}
    path.write_text(json.dumps(data))
    return path


@pytest.fixture
def params_file(tmp_path: Path) -> Path:
    return write_params(tmp_path / "params.json")


@pytest.fixture
def queue_aware_params_file(tmp_path: Path) -> Path:
    """A schema-2 params file: the test params with the queue-aware model's forms."""
    return write_params(tmp_path / "params-v2.json", schema_version=2, queue_aware=TEST_QUEUE_AWARE)
