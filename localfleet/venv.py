"""Where the engines' Python is: the venv ``scripts/setup.sh engines`` builds.

``PDROUTE_ENGINES_VENV`` names it; the default is ``.venv-engines`` at the repo root. The
harness never imports vllm itself: it runs that venv's python as child processes.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ENV_VAR = "PDROUTE_ENGINES_VENV"
REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_VENV = REPO_ROOT / ".venv-engines"


class EnginesUnavailable(RuntimeError):
    """The engines' venv is missing or cannot import vllm (message: one line, with the fix)."""


def engines_venv(environ: dict[str, str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    value = env.get(ENV_VAR)
    return Path(value) if value else DEFAULT_VENV


def engines_python(environ: dict[str, str] | None = None, *, check: bool = True) -> Path:
    """The venv's python; with ``check``, ``EnginesUnavailable`` unless it imports vllm."""
    venv = engines_venv(environ)
    python = venv / "bin" / "python"
    if not python.is_file():
        raise EnginesUnavailable(
            f"no engines venv at {venv} (run scripts/setup.sh engines, or set {ENV_VAR})"
        )
    if check:
        done = subprocess.run(
            [str(python), "-c", "import vllm; print(vllm.__version__)"],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["no output"])[-1]
            raise EnginesUnavailable(f"{python} cannot import vllm: {last} (run scripts/setup.sh engines)")
    return python
