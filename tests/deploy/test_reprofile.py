"""deploy/profiler/reprofile.sh, the profiler image's entry point: profile, then fit, then publish.

``pdroute profile`` is replaced by a stand-in that logs its arguments and writes a shipped
JSON profile (measuring needs GPUs and minutes); ``pdroute fit`` and the publisher are real,
the latter talking to the stand-in API server of fake_kube_api.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.cli.commands.profile import check_source_options
from app.cli.main import build_parser
from profiling.models import PRESETS
from solver.params import load_params
from tests.deploy.conftest import DEPLOY, KUBERNETES, ROOT, load_yaml
from tests.deploy.fake_kube_api import CONFIGMAP, NAMESPACE, TOKEN, FakeApi

SCRIPT = DEPLOY / "profiler" / "reprofile.sh"
PROFILE = ROOT / "solver" / "data" / "profiles" / "default.json"
STUB = """#!/bin/sh
echo "$*" >> "$STUB_LOG"
case "$1" in
  profile)
    [ -n "${STUB_PROFILE_FAILS:-}" ] && { echo "pdroute profile: error: CUDA out of memory" >&2; exit 2; }
    while [ $# -gt 0 ]; do [ "$1" = "-o" ] && cp "$STUB_PROFILE" "$2"; shift; done ;;
  fit) exec "$REAL_PDROUTE" "$@" ;;
esac
"""


@pytest.fixture
def api() -> Iterator[FakeApi]:
    fake = FakeApi()
    yield fake
    fake.close()


def run_script(tmp_path: Path, **env: str) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    stub = bin_dir / "pdroute"
    stub.write_text(STUB)
    stub.chmod(0o755)
    # A wrapper, not a symlink: the virtualenv is found from the interpreter's own path.
    python = bin_dir / "python"
    python.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    python.chmod(0o755)
    log = tmp_path / "calls.log"
    full_env = {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "HOME": str(tmp_path),
        "STUB_LOG": str(log),
        "STUB_PROFILE": str(PROFILE),
        "REAL_PDROUTE": str(Path(sys.executable).parent / "pdroute"),
        "PDROUTE_OUT_DIR": str(tmp_path / "out"),
        "PDROUTE_PROFILE_FILE": "profile.json",
        **env,
    }
    out = subprocess.run(["/bin/sh", str(SCRIPT)], env=full_env, capture_output=True, text=True, timeout=120)
    calls = log.read_text().splitlines() if log.exists() else []
    return out, calls


def test_profiles_fits_and_publishes(tmp_path: Path, api: FakeApi) -> None:
    sa = tmp_path / "sa"
    sa.mkdir()
    (sa / "token").write_text(TOKEN)
    (sa / "namespace").write_text(NAMESPACE)
    out, calls = run_script(
        tmp_path,
        PDROUTE_PUBLISH_CONFIGMAP=CONFIGMAP,
        PDROUTE_PUBLISH_ARGS=f"--api-url {api.url} --service-account-dir {sa}",
    )
    assert out.returncode == 0, out.stdout + out.stderr
    work = tmp_path / "out"
    # The default profile arguments measure the P2P path between two GPUs.
    assert calls == [
        f"profile --model qwen3-8b --src-gpu 0 --dst-gpu 1 -o {work}/profile.json",
        f"fit {work}/profile.json -o {work}/params.json",
    ]
    params = load_params(work / "params.json")
    assert (work / "params.fit_report.json").exists()
    assert f"published {params.params_id}" in out.stdout
    assert api.configmap["data"]["params.json"] == (work / "params.json").read_text()
    assert json.loads(api.configmap["data"]["params.json"])["metadata"]["source"] == "aiconfigurator"


def test_arguments_are_passed_through(tmp_path: Path) -> None:
    out, calls = run_script(
        tmp_path,
        PDROUTE_PROFILE_ARGS="--model qwen3-0.6b --src-gpu 0 --dst-gpu 0",
        PDROUTE_FIT_ARGS="--hardware my-gpu",
    )
    assert out.returncode == 0, out.stderr
    work = tmp_path / "out"
    assert calls[0] == f"profile --model qwen3-0.6b --src-gpu 0 --dst-gpu 0 -o {work}/profile.json"
    assert calls[1] == f"fit {work}/profile.json -o {work}/params.json --hardware my-gpu"
    assert load_params(work / "params.json").metadata.hardware == "my-gpu"
    assert "set PDROUTE_PUBLISH_CONFIGMAP to publish it" in out.stdout


def test_a_failed_profile_stops_before_fit_and_publish(tmp_path: Path, api: FakeApi) -> None:
    out, calls = run_script(
        tmp_path,
        STUB_PROFILE_FAILS="1",
        PDROUTE_PUBLISH_CONFIGMAP=CONFIGMAP,
        PDROUTE_PUBLISH_ARGS=f"--api-url {api.url}",
    )
    assert out.returncode != 0
    assert "CUDA out of memory" in out.stderr
    assert [c.split()[0] for c in calls] == ["profile"]
    assert not (tmp_path / "out" / "params.json").exists()
    assert api.requests == []


def _profile_args_in_use() -> dict[str, str]:
    """Every ``pdroute profile`` argument list the image, the Job and the docs tell operators to use."""
    (container,) = load_yaml(KUBERNETES / "reprofile" / "job.yaml")["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    script_default = re.search(r"\$\{PDROUTE_PROFILE_ARGS:-(.*?)\}", SCRIPT.read_text())
    docs = (ROOT / "docs" / "deploy.md").read_text()
    one_gpu = re.findall(r'PDROUTE_PROFILE_ARGS="(.*?)"', docs)
    assert script_default and one_gpu
    return {
        "job.yaml": env["PDROUTE_PROFILE_ARGS"],
        "reprofile.sh": script_default.group(1),
        "docs": one_gpu[0],
    }


def _parse(argv: list[str]) -> argparse.Namespace:
    try:
        return build_parser().parse_args(argv)
    except SystemExit:
        pytest.fail(f"pdroute {shlex.join(argv)}: not accepted by the command line")


@pytest.mark.parametrize("where", ["job.yaml", "reprofile.sh", "docs"])
def test_profile_arguments_are_real_cli_arguments(where: str) -> None:
    # The tests above replace `pdroute profile` with a stand-in; check its arguments here
    # against the real parser, as reprofile.sh calls it.
    args = _parse(["profile", *shlex.split(_profile_args_in_use()[where]), "-o", "/work/profile_data.pt"])
    check_source_options(args)  # resolves the source as `pdroute profile` does before it runs
    assert args.source == "torch" and args.model in PRESETS
    two_gpus = args.src_gpu != args.dst_gpu
    # The Job claims two GPUs so that the P2P path is measured; the docs' variant is the one-GPU relay.
    assert two_gpus == (where != "docs")


def test_documented_commands_are_real_cli_arguments() -> None:
    blocks = re.findall(r"^```bash\n(.*?)^```", (ROOT / "docs" / "deploy.md").read_text(), re.M | re.S)
    lines = [line for block in blocks for line in block.splitlines() if line.startswith("pdroute ")]
    commands = [shlex.split(line)[1:] for line in lines]
    assert {c[0] for c in commands} >= {"profile", "fit"}
    for argv in commands:
        _parse(argv)
    _parse(["fit", "/work/profile_data.pt", "-o", "/work/params.json", "--hardware", "h100"])


def test_a_wrong_argument_is_caught() -> None:
    with pytest.raises(pytest.fail.Exception):
        _parse(["profile", "--src-gpus", "0", "-o", "x.pt"])
