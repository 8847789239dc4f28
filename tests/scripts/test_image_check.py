"""scripts/image_check.py and scripts/image_runner.py, the parts that need no image: the image
config read, the metric reader, the runner's mounts (on this machine's own root, in a private
mount namespace), and scripts/image.sh's argument check. scripts/image.sh runs the whole."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from scripts.image_check import expect, metric
from scripts.image_runner import RUNNER, CheckFailed, ImageConfig, last_line

ROOT = Path(__file__).resolve().parents[2]

INSPECT = {
    "OCIv1": {
        "config": {
            "Env": ["PATH=/opt/venv/bin:/usr/bin", "PDROUTE_PORT=8000", "A=b=c"],
            "Entrypoint": ["pdroute"],
            "Cmd": ["serve", "--host", "0.0.0.0"],
            "User": "10001:10001",
            "WorkingDir": "/tmp",
        }
    },
    "Docker": {"config": {"Healthcheck": {"Test": ["CMD", "python", "-c", "pass"]}}},
}


def test_image_config_reads_what_docker_run_uses() -> None:
    config = ImageConfig.of(INSPECT)
    assert config.entrypoint == ["pdroute"] and config.cmd == ["serve", "--host", "0.0.0.0"]
    assert config.env == {"PATH": "/opt/venv/bin:/usr/bin", "PDROUTE_PORT": "8000", "A": "b=c"}
    assert (config.user, config.workdir) == ("10001:10001", "/tmp")
    assert config.healthcheck == ["python", "-c", "pass"]


def test_a_shell_form_or_missing_healthcheck_reads_as_none() -> None:
    shell = {**INSPECT, "Docker": {"config": {"Healthcheck": {"Test": ["CMD-SHELL", "true"]}}}}
    assert ImageConfig.of(shell).healthcheck == []
    assert ImageConfig.of({"OCIv1": INSPECT["OCIv1"]}).healthcheck == []


def test_metric_sums_the_matching_samples() -> None:
    text = (
        "# TYPE pdroute_route_decisions_total counter\n"
        'pdroute_route_decisions_total{decision="collocated"} 2.0\n'
        'pdroute_route_decisions_total{decision="disaggregated"} 5.0\n'
    )
    assert metric(text, "pdroute_route_decisions_total", decision="disaggregated") == 5
    assert metric(text, "pdroute_route_decisions_total") == 7
    assert metric(text, "pdroute_route_decisions_total", decision="other") == 0


def test_expect_and_last_line() -> None:
    expect(True, "unused")
    with pytest.raises(CheckFailed, match=r"^it broke$"):
        expect(False, "it broke")
    assert last_line("a\nb\n\n") == "b" and last_line("") == "(no output)"


needs_root = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None, reason="the runner needs root and unshare"
)


@needs_root
def test_runner_gives_a_read_only_root_a_tmpfs_and_the_volumes(tmp_path: Path) -> None:
    """The runner on this machine's own root: read-only, the user set, /tmp and a rw volume
    writable, a ro volume not; nothing of it is seen outside its mount namespace."""
    rt, rw, ro = tmp_path / "rt", tmp_path / "rw", tmp_path / "ro"
    for d in (rt, rw, ro):
        d.mkdir()
    os.chown(rw, 65534, 65534)
    probe = (
        "id -u; id -g; touch /tmp/ok && echo tmp-ok; touch /probe 2>/dev/null || echo root-ro; "
        "touch /mnt/ok && echo rw-ok; touch /srv/no 2>/dev/null || echo ro-ro"
    )
    out = subprocess.run(
        ["unshare", "--mount", "--pid", "--fork", "--kill-child", "sh", "-c", RUNNER, "runner",
         str(rt), "/", "65534:65534", str(rw), "/mnt", "rw", str(ro), "/srv", "ro", "--",
         "/usr/bin/env", "-i", "PATH=/usr/bin:/bin", "sh", "-c", probe],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["65534", "65534", "tmp-ok", "root-ro", "rw-ok", "ro-ro"]
    assert (rw / "ok").exists() and not (ro / "no").exists()
    assert not os.path.ismount(rt) and not list(rt.iterdir())


def test_image_sh_refuses_an_unknown_target() -> None:
    out = subprocess.run(
        ["bash", str(ROOT / "scripts/image.sh"), "nonsense"], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 1
    assert out.stderr == "image.sh: unknown target 'nonsense' (service or profiler)\n"
