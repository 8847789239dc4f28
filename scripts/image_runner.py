"""Start containers of an image the way a container engine would, without one (for
``scripts/image_check.py``).

Each container is the image's own root filesystem (a buildah working container), mounted
read-only, started with the image's entrypoint, command, environment, user and working directory
under ``unshare`` (its own mount and PID namespaces, so the service is PID 1 as under a container
engine) and ``chroot``, on the host's network, with a tmpfs on ``/tmp`` and the volumes asked for.
Needs root.
"""

from __future__ import annotations

import json
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Runs inside the new namespaces: the mounts a container engine would make, then the image's
# command as its user. Arguments: rootfs mount point, image root, uid:gid, then a triple for each
# volume (host path, path inside, ro or rw), then "--" and the command.
RUNNER = r"""
set -eu
rt=$1 root=$2 user=$3
shift 3
mount --bind "$root" "$rt"
mount -o remount,bind,ro,nosuid,nodev "$rt"
mount -t proc -o nosuid,nodev,noexec proc "$rt/proc"
mount -t tmpfs -o nosuid,nodev,mode=1777,size=64m tmpfs "$rt/tmp"
mount -t tmpfs -o nosuid,noexec,mode=755,size=64k tmpfs "$rt/dev"
for d in null zero full random urandom; do : > "$rt/dev/$d"; mount --bind "/dev/$d" "$rt/dev/$d"; done
while [ "$1" != -- ]; do
  mount --bind "$1" "$rt$2"
  if [ "$3" = ro ]; then mount -o remount,bind,ro "$rt$2"; fi
  shift 3
done
shift
exec chroot --userspec="$user" "$rt" "$@"
"""


@dataclass(frozen=True)
class Volume:
    """A host directory bind-mounted into the container, as ``-v host:inside[:ro]``."""

    host: Path
    inside: str
    writable: bool = False


class CheckFailed(Exception):
    """One check did not hold; the message is the line printed."""


@dataclass(frozen=True)
class ImageConfig:
    """What ``docker run`` would take from the image."""

    entrypoint: list[str]
    cmd: list[str]
    env: dict[str, str]
    user: str
    workdir: str
    healthcheck: list[str]  # the command after HEALTHCHECK's "CMD"; [] without an exec-form one

    @classmethod
    def of(cls, inspect: dict[str, Any]) -> ImageConfig:
        oci = inspect["OCIv1"]["config"]
        health = (inspect.get("Docker", {}).get("config", {}) or {}).get("Healthcheck") or {}
        test = health.get("Test") or []
        env = dict(item.split("=", 1) for item in oci.get("Env", []))
        return cls(
            oci["Entrypoint"],
            oci.get("Cmd") or [],
            env,
            oci["User"],
            oci["WorkingDir"],
            test[1:] if test[:1] == ["CMD"] else [],
        )


@dataclass
class Container:
    """One running copy of the image."""

    name: str
    port: int
    proc: subprocess.Popen[bytes]
    log: Path
    started: float  # time.monotonic() when started
    config: ImageConfig
    env: dict[str, str]  # the container's environment: the image's plus what ``start`` set
    pid: int = 0  # the service's host PID (PID 1 in its namespace)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def exec(self, argv: list[str], *, as_image_user: bool) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` inside the running container, as ``docker exec`` would."""
        enter = ["nsenter", "-t", str(self.pid), "-m", "-p", "-r", "-w"]
        if as_image_user:
            uid, gid = self.config.user.split(":")
            enter += ["-S", uid, "-G", gid]
        env = [f"{k}={v}" for k, v in self.env.items()]
        return subprocess.run(
            [*enter, "/usr/bin/env", "-i", *env, *argv], capture_output=True, text=True, timeout=60
        )

    def log_tail(self) -> str:
        return last_line(self.log.read_text(errors="replace"))


class Runner:
    """Creates, starts and removes containers of one image with a given buildah command."""

    def __init__(self, buildah: list[str], image: str, work: Path) -> None:
        self.buildah = buildah
        self.image = image
        self.work = work
        inspect = json.loads(self._buildah("inspect", "--type", "image", image))
        self.config = ImageConfig.of(inspect)
        self.running: list[Container] = []
        self.made: list[str] = []  # buildah working containers, removed by ``stop_all``

    def _buildah(self, *args: str) -> str:
        out = subprocess.run([*self.buildah, *args], capture_output=True, text=True, timeout=300)
        if out.returncode != 0:
            raise CheckFailed(f"buildah {args[0]} failed: {out.stderr.strip().splitlines()[-1:]}")
        return out.stdout.strip()

    def start(
        self, name: str, env: dict[str, str], volumes: list[Volume], command: list[str] | None = None
    ) -> Container:
        """Start a container; ``command`` replaces the image's entrypoint and command."""
        ctr = self._buildah("from", "--pull=never", "--name", f"pdroute-check-{name}", self.image)
        self.made.append(ctr)
        root = Path(self._buildah("mount", ctr))
        for v in volumes:  # the mount points, as an engine makes them in the writable layer
            (root / v.inside.lstrip("/")).mkdir(parents=True, exist_ok=True)
        rt = self.work / f"rootfs-{name}"
        rt.mkdir()
        port = free_port()
        full_env = {**self.config.env, "PDROUTE_PORT": str(port), **env}
        argv = [
            "unshare", "--mount", "--pid", "--fork", "--kill-child",
            "sh", "-c", RUNNER, "runner", str(rt), str(root), self.config.user,
            *[x for v in volumes for x in (str(v.host), v.inside, "rw" if v.writable else "ro")], "--",
            "/usr/bin/env", "-i", "-C", self.config.workdir,
            *[f"{k}={v}" for k, v in full_env.items()],
            *(command or [*self.config.entrypoint, *self.config.cmd]),
        ]  # fmt: skip
        log = self.work / f"{name}.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
        c = Container(name, port, proc, log, time.monotonic(), self.config, full_env)
        self.running.append(c)
        c.pid = _child_of(proc)
        return c

    def stop_all(self) -> None:
        """Kill what still runs and remove every working container made."""
        for c in self.running:
            if c.proc.poll() is None:
                c.proc.kill()  # --kill-child takes the service down with it
                c.proc.wait(timeout=30)
        for ctr in self.made:
            subprocess.run([*self.buildah, "rm", ctr], capture_output=True, timeout=300)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _child_of(proc: subprocess.Popen[bytes]) -> int:
    """The PID unshare forked (it becomes the service: each step execs the next)."""
    deadline = time.monotonic() + 30
    children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children")
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise CheckFailed(f"the container exited at once (status {proc.returncode})")
        pids = children.read_text().split() if children.exists() else []
        if pids:
            return int(pids[0])
        time.sleep(0.05)
    raise CheckFailed("unshare started no child within 30 s")


def last_line(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[-1] if lines else "(no output)"


def wait_exit(c: Container, timeout_s: float) -> int:
    try:
        return c.proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise CheckFailed(f"{c.name}: still running after {timeout_s:g} s: {c.log_tail()}") from None
