"""The ``pdroute-client`` wheel (clients/python/pyproject.toml) holds pdroute_client and
pdroute_core and nothing else, and works installed apart from the service's packages.

The build runs on a copy of the three paths it reads, so the source tree stays clean. The
install is offline: ``pip install --no-deps --target DIR`` into a fresh venv's reach, then a
``python -I`` subprocess whose sys.path is DIR plus this environment's site-packages (for
httpx, numpy, prometheus-client; ``-I`` skips .pth files, so the editable pdroute is not seen).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import sysconfig
import venv
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PIP = (sys.executable, "-m", "pip", "--quiet", "--no-input", "--disable-pip-version-check")
pytestmark = pytest.mark.slow  # builds and installs a wheel: left out of the fast loop


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    src = tmp_path_factory.mktemp("src")
    (src / "clients" / "python").mkdir(parents=True)
    shutil.copy(ROOT / "clients" / "python" / "pyproject.toml", src / "clients" / "python")
    ignore = shutil.ignore_patterns("__pycache__")
    for package in ("pdroute_client", "pdroute_core"):
        shutil.copytree(ROOT / package, src / package, ignore=ignore)
    out = src / "dist"
    subprocess.run(
        [
            *PIP,
            "wheel",
            "--no-build-isolation",
            "--no-deps",
            "--no-index",
            str(src / "clients" / "python"),
            "-w",
            str(out),
        ],
        check=True,
        capture_output=True,
    )
    (built,) = out.glob("pdroute_client-*.whl")
    return built


def test_the_wheel_holds_exactly_the_two_packages(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        top = {n.split("/")[0] for n in names if ".dist-info/" not in n}
        info = next(n for n in names if n.endswith(".dist-info/METADATA"))
        metadata = Parser().parsestr(z.read(info).decode())
    assert top == {"pdroute_client", "pdroute_core"}
    assert "pdroute_core/routing/queue_aware.py" in names and "pdroute_client/py.typed" in names
    assert metadata["Name"] == "pdroute-client"
    requires = {r.split(">")[0].split("=")[0].strip() for r in metadata.get_all("Requires-Dist") or []}
    assert requires == {"httpx", "numpy", "prometheus-client", "sniffio"}


def test_it_installs_and_decides_without_the_service_packages(wheel: Path, tmp_path: Path) -> None:
    env = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(env)
    target = tmp_path / "site"
    subprocess.run(
        [*PIP, "install", "--no-deps", "--no-index", "--target", str(target), str(wheel)],
        check=True,
        capture_output=True,
    )
    assert {p.name for p in target.iterdir() if not p.name.endswith(".dist-info")} == {
        "pdroute_client",
        "pdroute_core",
    }
    vectors = ROOT / "conformance" / "vectors-v1.json"
    program = f"""
import importlib.util, json, sys
sys.path[:0] = [{str(target)!r}, {sysconfig.get_paths()["purelib"]!r}]
import pdroute_client
from pdroute_client import Client, RouteQuery, ServedParams

assert pdroute_client.__file__.startswith({str(target)!r}), pdroute_client.__file__
missing = [m for m in ("app", "solver", "profiling") if importlib.util.find_spec(m) is not None]
doc = json.load(open({str(vectors)!r}))
s = doc["services"][-1]
p = doc["params"][s["params"]]
served = ServedParams.from_body({{**s, "params_id": p["params_id"], "params": p["document"]}})
v = next(v for v in doc["vectors"] if v["service"] == s["id"])
local = served.decide(RouteQuery.from_mapping(v["request"]), "local: test")
with Client("http://127.0.0.1:9", start=False) as client:
    static = client.route(RouteQuery(prompt_len=10, system_load=0))
print(json.dumps({{"missing": missing, "local": [local.decision, local.reason],
                  "expected": [v["expected"]["decision"], v["expected"]["reason"]], "static": static.tier}}))
"""
    python = env / ("Scripts/python.exe" if sys.platform == "win32" else "bin/python")
    done = subprocess.run([str(python), "-I", "-c", program], capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["missing"] == []  # app, solver, profiling: not importable
    assert result["local"] == result["expected"]
    assert result["static"] == "static"
