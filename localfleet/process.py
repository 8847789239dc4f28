"""Child processes in their own process group, stopped by group (no process is ever left behind).

An engine is a vLLM API server plus the engine-core process it spawns: both sit in the group
the server leads (``start_new_session``), so one ``killpg`` reaches them all.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any


def spawn(argv: Sequence[str], env: Mapping[str, str], log_path: Path) -> subprocess.Popen[bytes]:
    """Start ``argv`` as the leader of a new process group, stdout and stderr to ``log_path``."""
    log: IO[Any] = log_path.open("ab")
    try:
        return subprocess.Popen(
            list(argv),
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    finally:
        log.close()  # the child holds its own copy


def group_alive(pgid: int) -> bool:
    """Whether group ``pgid`` has a live (not zombie) member, read from /proc."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # exited while being read
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


def stop_group(pgid: int, *, proc: subprocess.Popen[bytes] | None = None, grace_s: float = 15.0) -> None:
    """SIGTERM the group, wait up to ``grace_s`` for every member to exit, then SIGKILL it.

    ``proc`` (the leader, when this process started it) is reaped so that it leaves no zombie.
    """
    _signal(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while group_alive(pgid) and time.monotonic() < deadline:
        if proc is not None:
            proc.poll()
        time.sleep(0.1)
    if group_alive(pgid):
        _signal(pgid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while group_alive(pgid) and time.monotonic() < deadline:
            time.sleep(0.05)
    if proc is not None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=10)


def _signal(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, sig)
