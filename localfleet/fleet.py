"""A fleet of local engines: started together, healthy together, stopped together.

``Fleet.start`` writes the model folders, wipes the fleet's shared KV folder (under /dev/shm,
one per run: vLLM's ``ExampleConnector`` never cleans it), launches every engine and waits for
all of them; a failure stops the ones already started. ``stop`` (also on ``with`` exit and at
interpreter exit) stops every process group and removes the KV folder. The fleet's state
(``fleet.json`` in its run folder) lets another process (the CLI's ``down``) stop it by PID.
"""

from __future__ import annotations

import atexit
import json
import shutil
import socket
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from localfleet.engine import Engine, EngineSpec, start
from localfleet.models import write_model
from localfleet.process import stop_group
from localfleet.venv import engines_python

STATE_FILE = "fleet.json"
SHM = Path("/dev/shm")
POOL_OF_ROLE = {"collocated": "mixed", "prefill": "prefill", "decode": "decode"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _kv_dir_for(run_dir: Path) -> Path:
    base = SHM if SHM.is_dir() else run_dir
    return base / f"pdroute-localfleet-kv-{run_dir.name}"


@dataclass
class Fleet:
    """Running engines by name, the run folder and the shared KV folder."""

    run_dir: Path
    kv_dir: Path
    engines: dict[str, Engine] = field(default_factory=dict)
    start_s: float = 0.0  # wall time from launch to every engine healthy

    @classmethod
    def start(
        cls,
        specs: Sequence[EngineSpec],
        *,
        run_dir: Path | None = None,
        python: Path | None = None,
        start_timeout_s: float = 300.0,
        stop_at_exit: bool = True,
    ) -> Fleet:
        """Start every engine of ``specs`` and wait until all are healthy (``EngineStartError``).

        ``stop_at_exit``: stop them when this interpreter exits (off for the CLI's ``up``).
        """
        names = [s.name for s in specs]
        if not specs or len(set(names)) != len(names):
            raise ValueError(f"engine names must be given and unique, got {names}")
        python = python or engines_python()
        run_dir = run_dir or Path(tempfile.mkdtemp(prefix="pdroute-localfleet-"))
        run_dir.mkdir(parents=True, exist_ok=True)
        fleet = cls(run_dir, _kv_dir_for(run_dir))
        fleet.wipe_kv()
        if stop_at_exit:
            atexit.register(fleet.stop)
        began = time.monotonic()
        try:
            for spec in specs:
                model_dir = write_model(spec.model, run_dir / "models")
                log = run_dir / f"{spec.name}.log"
                fleet.engines[spec.name] = start(spec, python, model_dir, free_port(), fleet.kv_dir, log)
            fleet.save_state()
            for engine in fleet.engines.values():
                engine.wait_ready(max(1.0, start_timeout_s - (time.monotonic() - began)))
        except BaseException:
            fleet.stop()
            raise
        fleet.start_s = time.monotonic() - began
        return fleet

    def __getitem__(self, name: str) -> Engine:
        return self.engines[name]

    def __iter__(self) -> Iterator[Engine]:
        return iter(self.engines.values())

    def __enter__(self) -> Fleet:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def by_role(self, role: str) -> list[Engine]:
        return [e for e in self.engines.values() if e.spec.role == role]

    def wipe_kv(self) -> None:
        """Empty the shared KV folder (between runs: stale files would be loaded as a prefix)."""
        shutil.rmtree(self.kv_dir, ignore_errors=True)
        self.kv_dir.mkdir(parents=True)

    def stop(self) -> None:
        """Stop every engine's process group and remove the KV folder; safe to call twice."""
        for engine in self.engines.values():
            engine.stop()
        shutil.rmtree(self.kv_dir, ignore_errors=True)
        (self.run_dir / STATE_FILE).unlink(missing_ok=True)
        atexit.unregister(self.stop)

    def engines_file(self, path: Path) -> Path:
        """Write a pdroute engines file naming these engines (collocated ones in pool ``mixed``)."""
        pools: dict[str, list[dict[str, str]]] = {"prefill": [], "decode": [], "mixed": []}
        for e in self.engines.values():
            pools[POOL_OF_ROLE[e.spec.role]].append({"id": e.spec.name, "url": e.metrics_url, "kind": "vllm"})
        path.write_text(json.dumps({"pools": pools}, indent=1) + "\n")
        return path

    def state(self) -> dict[str, Any]:
        return {
            "run_dir": str(self.run_dir),
            "kv_dir": str(self.kv_dir),
            "engines": [
                {
                    "name": e.spec.name,
                    "role": e.spec.role,
                    "model": e.spec.model.name,
                    "core": e.spec.core,
                    "url": e.url,
                    "pid": e.pid,
                    "log": str(e.log_path),
                }
                for e in self.engines.values()
            ],
        }

    def save_state(self) -> None:
        (self.run_dir / STATE_FILE).write_text(json.dumps(self.state(), indent=1) + "\n")


def load_state(run_dir: Path) -> dict[str, Any] | None:
    """The state a running fleet left in ``run_dir`` (None when there is none)."""
    try:
        data: dict[str, Any] = json.loads((run_dir / STATE_FILE).read_text())
    except (OSError, ValueError):
        return None
    return data


def stop_state(run_dir: Path) -> list[str]:
    """Stop the fleet recorded in ``run_dir`` by its PIDs; the names of the engines stopped."""
    data = load_state(run_dir)
    if data is None:
        return []
    names = []
    for e in data["engines"]:
        stop_group(int(e["pid"]))
        names.append(str(e["name"]))
    shutil.rmtree(data["kv_dir"], ignore_errors=True)
    (run_dir / STATE_FILE).unlink(missing_ok=True)
    return names
