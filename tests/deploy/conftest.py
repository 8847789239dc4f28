"""Shared pieces of the deployment tests: repository paths, external tools, rendered manifests.

External tools (kubectl, promtool, prometheus) are looked up on PATH; a test that needs one
that is absent skips and names it. scripts/system-deps.sh installs promtool and prometheus.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

# Live-server fixtures, shared with tests/app (imported so that pytest sees them here too).
from tests.app.conftest import make_server, serve_process

__all__ = ["make_server", "serve_process"]

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
KUBERNETES = DEPLOY / "kubernetes"
PROMETHEUS = DEPLOY / "prometheus"
RULES_FILE = PROMETHEUS / "rules" / "pdroute.rules.yaml"
RULES_TESTS = PROMETHEUS / "tests" / "pdroute.rules.test.yaml"
DASHBOARD = DEPLOY / "grafana" / "pdroute-dashboard.json"
KUSTOMIZATIONS = (
    "kubernetes/base",
    "kubernetes/overlays/dev",
    "kubernetes/overlays/production",
    "kubernetes/reprofile",
    "prometheus",
    "grafana",
)


def require_tool(name: str) -> str:
    """The tool's path, or skip the test saying which tool is missing."""
    path = shutil.which(name)
    if path is None:
        hint = " (scripts/system-deps.sh installs it as root)" if name in ("promtool", "prometheus") else ""
        pytest.skip(f"{name} is not installed{hint}")
    return path


def render(kustomization: str) -> list[dict[str, Any]]:
    """``kubectl kustomize deploy/<kustomization>`` (or an absolute path) as a list of objects."""
    kubectl = require_tool("kubectl")
    out = subprocess.run(
        [kubectl, "kustomize", str(DEPLOY / kustomization)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, f"kubectl kustomize {kustomization} failed: {out.stderr}"
    return [doc for doc in yaml.safe_load_all(out.stdout) if doc]


def compose(where: Path, resources: tuple[str, ...], components: tuple[str, ...]) -> str:
    """An overlay in ``where`` of deploy/ ``resources`` plus deploy/ ``components``; its path for ``render``.

    kustomize takes relative paths only, so each is written relative to ``where``.
    """
    where.mkdir(parents=True, exist_ok=True)

    def rel(paths: tuple[str, ...]) -> list[str]:
        return [os.path.relpath(DEPLOY / p, where) for p in paths]

    doc = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": rel(resources),
        "components": rel(components),
    }
    (where / "kustomization.yaml").write_text(yaml.safe_dump(doc))
    return str(where)  # absolute: DEPLOY / it is itself


def find(objects: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    """The one object of ``kind`` (and ``name``) among ``objects``."""
    matches = [o for o in objects if o["kind"] == kind and name in (None, o["metadata"]["name"])]
    assert len(matches) == 1, f"expected one {kind} {name or ''}, found {len(matches)}"
    return matches[0]


def load_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text())
