"""Fixtures shared by every test package: params files (from ``tests.factories``) and child processes."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.factories import TEST_QUEUE_AWARE, write_params


def stop_process(proc: subprocess.Popen[Any]) -> None:
    """SIGTERM a child process, then SIGKILL it if it has not exited within 10 s."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture
def params_file(tmp_path: Path) -> Path:
    return write_params(tmp_path / "params.json")


@pytest.fixture
def queue_aware_params_file(tmp_path: Path) -> Path:
    """A schema-2 params file: the test params with the queue-aware model's forms."""
    return write_params(tmp_path / "params-v2.json", schema_version=2, queue_aware=TEST_QUEUE_AWARE)
