"""One vLLM CPU engine: its launch spec, its command line, and the running handle.

Every engine gets an explicit KV size (vLLM's default takes 90 % of RAM, and a second engine
then fails), one core (``VLLM_CPU_OMP_THREADS_BIND`` plus ``taskset``), loopback only, dummy
weights and no tokenizer. Roles:

- ``collocated``: a plain engine, prefill and decode on one core.
- ``prefill`` / ``decode``: ``ExampleConnector`` (as ``CompleteSavesConnector``, which takes a
  prompt for saved only once all its layers are: engine_side/localfleet_kv.py) with ``kv_role``
  ``kv_both`` and a shared folder (the fleet's, under /dev/shm). The prefill engine runs with
  ``--no-enable-chunked-prefill`` (with chunking the connector saves only the first chunk's KV)
  and a token budget that holds a whole prompt.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import httpx

from localfleet.models import ModelShape
from localfleet.process import group_alive, spawn, stop_group

Role = Literal["collocated", "prefill", "decode"]
ROLES: tuple[Role, ...] = ("collocated", "prefill", "decode")
API_SERVER = "vllm.entrypoints.openai.api_server"  # `vllm serve` fails: the dist is vllm-cpu
BLOCK_SIZE = 32  # tokens per KV block
PREFILL_BUDGET_TOKENS = 4096  # a prefill engine's token budget (one step per prompt)
ENGINE_SIDE = Path(__file__).resolve().parent / "engine_side"  # on the engines' PYTHONPATH
CONNECTOR_MODULE = "localfleet_kv"  # engine_side/localfleet_kv.py


def default_dtype(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """bfloat16 where the CPU has native bf16 (AVX-512 BF16 or AMX), float32 elsewhere.

    On an AVX2-only CPU vLLM's bfloat16 decode GEMMs take a slow path: a decode step of the
    heavy model took over a minute on a loaded 2-core AMD EPYC, against a third of a second
    in float32.
    """
    try:
        flags = set(cpuinfo.read_text().split())
    except OSError:
        return "bfloat16"
    return "bfloat16" if flags & {"avx512_bf16", "amx_bf16"} else "float32"


class EngineStartError(RuntimeError):
    """An engine exited or did not become healthy in time; the message ends with its log's tail."""


@dataclass(frozen=True)
class EngineSpec:
    """How to launch one engine."""

    name: str  # id in the fleet (and the engines file)
    model: ModelShape
    core: int  # the CPU core it is pinned to
    role: Role = "collocated"
    kv_cache_bytes: int = 256 * 2**20  # the KV pool, bytes
    max_num_batched_tokens: int | None = None  # token budget per step [vLLM's default; prefill: 4096]
    max_num_seqs: int | None = None  # running requests at most [vLLM's default]
    enable_prefix_caching: bool = True
    dtype: str | None = None  # None: default_dtype() of this CPU
    extra_args: tuple[str, ...] = ()  # more `vllm serve` flags
    env: tuple[tuple[str, str], ...] = field(default=())  # more environment variables

    @property
    def resolved_dtype(self) -> str:
        return self.dtype or default_dtype()

    @property
    def token_budget(self) -> int | None:
        """``--max-num-batched-tokens`` (None: vLLM's default); a prefill engine's holds a whole
        prompt (it runs without chunked prefill), so every waiting prompt that fits goes in a step."""
        if self.role == "prefill":
            budget = self.max_num_batched_tokens or 0
            return max(budget, PREFILL_BUDGET_TOKENS, self.model.max_position_embeddings)
        return self.max_num_batched_tokens

    @property
    def kv_bytes_per_token(self) -> int:
        """KV-cache bytes per token of this engine (its KV cache takes the model's dtype)."""
        return self.model.kv_bytes_per_token_of(4 if self.resolved_dtype == "float32" else 2)

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"role must be one of {ROLES}, got {self.role!r}")
        if self.core < 0 or self.kv_cache_bytes < 1:
            raise ValueError("core must be >= 0 and kv_cache_bytes >= 1")


def command(spec: EngineSpec, python: Path, model_dir: Path, port: int, kv_dir: Path | None) -> list[str]:
    """The engine's argv (``taskset`` first, so that every thread it starts stays on its core)."""
    argv = [
        "taskset", "-c", str(spec.core),
        str(python), "-m", API_SERVER,
        "--model", str(model_dir),
        "--served-model-name", spec.model.name,
        "--host", "127.0.0.1", "--port", str(port),
        "--load-format", "dummy", "--skip-tokenizer-init", "--enforce-eager",
        "--dtype", spec.resolved_dtype, "--block-size", str(BLOCK_SIZE),
        "--kv-cache-memory-bytes", str(spec.kv_cache_bytes),
        "--max-model-len", str(spec.model.max_position_embeddings),
    ]  # fmt: skip
    budget = spec.token_budget
    if spec.role != "collocated":
        if kv_dir is None:
            raise ValueError(f"engine {spec.name}: role {spec.role} needs the fleet's shared KV folder")
        connector = {
            "kv_connector": "CompleteSavesConnector",  # ExampleConnector, safe when a saver dies
            "kv_connector_module_path": CONNECTOR_MODULE,
            "kv_role": "kv_both",
            "kv_connector_extra_config": {"shared_storage_path": str(kv_dir)},
        }
        argv += ["--kv-transfer-config", json.dumps(connector)]
    if spec.role == "prefill":
        argv.append("--no-enable-chunked-prefill")
    if budget is not None:
        argv += ["--max-num-batched-tokens", str(budget)]
    if spec.max_num_seqs is not None:
        argv += ["--max-num-seqs", str(spec.max_num_seqs)]
    if not spec.enable_prefix_caching:
        argv.append("--no-enable-prefix-caching")
    return [*argv, *spec.extra_args]


def environment(spec: EngineSpec, base: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ if base is None else base)
    env.update(
        VLLM_CPU_OMP_THREADS_BIND=str(spec.core),
        OMP_NUM_THREADS="1",
        VLLM_NO_USAGE_STATS="1",
        DO_NOT_TRACK="1",
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        PYTHONUNBUFFERED="1",
    )
    env.pop("VIRTUAL_ENV", None)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ENGINE_SIDE), env.get("PYTHONPATH")) if p)
    env.update(dict(spec.env))
    return env


@dataclass
class Engine:
    """A started engine: its URL, its process group and its log."""

    spec: EngineSpec
    port: int
    pid: int  # leader of the process group (pgid == pid)
    log_path: Path
    proc: subprocess.Popen[bytes] | None = None  # None when attached from a state file

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def metrics_url(self) -> str:
        return f"{self.url}/metrics"

    def is_running(self) -> bool:
        """Whether any process of the engine's group is alive."""
        if self.proc is not None:
            self.proc.poll()  # reap an exited leader
        return group_alive(self.pid)

    def is_healthy(self, timeout_s: float = 2.0) -> bool:
        try:
            return httpx.get(f"{self.url}/health", timeout=timeout_s).status_code == 200
        except httpx.HTTPError:
            return False

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def wait_ready(self, timeout_s: float) -> None:
        """Poll ``/health`` until 200; ``EngineStartError`` (with the log tail) on exit or timeout."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise EngineStartError(
                    f"engine {self.spec.name} exited with code {self.proc.returncode} during start-up "
                    f"(log {self.log_path}):\n{self.log_tail()}"
                )
            if self.is_healthy():
                return
            time.sleep(0.5)
        raise EngineStartError(
            f"engine {self.spec.name} not healthy on {self.url} after {timeout_s:.0f} s "
            f"(log {self.log_path}):\n{self.log_tail()}"
        )

    def stop(self, grace_s: float = 15.0) -> None:
        """Stop the engine's whole process group (SIGTERM, then SIGKILL after ``grace_s``)."""
        stop_group(self.pid, proc=self.proc, grace_s=grace_s)


def start(
    spec: EngineSpec, python: Path, model_dir: Path, port: int, kv_dir: Path | None, log_path: Path
) -> Engine:
    """Launch the engine (not waiting for health: ``Engine.wait_ready``)."""
    argv = command(spec, python, model_dir, port, kv_dir)
    log_path.write_text(" ".join(argv) + "\n")
    proc = spawn(argv, environment(spec), log_path)
    return Engine(spec, port, proc.pid, log_path, proc)
