"""The service's import path stays light: no torch, no aiconfigurator, no matplotlib."""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = ("torch", "aiconfigurator", "matplotlib", "profiling")


def test_service_imports_no_heavy_dependency() -> None:
    code = (
        "import json, sys\n"
        "from app.main import create_app\n"
        "from app.cli.main import build_parser\n"
        "create_app()\n"
        "build_parser()\n"
        f"print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []
