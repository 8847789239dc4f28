"""Run the built service image as an operator would, and check it (``scripts/image.sh`` calls this).

Each container is the image's own root filesystem (a buildah working container), mounted
read-only, started with the image's entrypoint, command, environment, user and working directory
under ``unshare`` (its own mount and PID namespaces, so the service is PID 1 as under a container
engine) and ``chroot``, on the host's network, with a tmpfs on ``/tmp`` and, where the check needs
one, a params directory bind-mounted read-only at ``/etc/pdroute/params``.

Usage: ``python -m scripts.image_check --image NAME --work DIR -- BUILDAH...`` (as root). Prints
the figures it measured as one ``key=value`` line on stdout; any failure is one line on stderr and
exit status 1.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from bench.bench_route import parse_wrk
from solver.errors import InvalidParams
from solver.params import load_params

ROOT = Path(__file__).resolve().parents[1]
PARAMS_MOUNT = "/etc/pdroute/params"
IMAGE_USER = "10001:10001"  # the Dockerfile's USER; the Kubernetes manifests' runAsUser and runAsGroup
# A request whose answer differs between the two params files the check uses.
ROUTE_BODY = {"prompt_len": 2048, "predicted_output_len": 200, "system_load": 48, "decode_batch_size": 8}

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
    import socket

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


def wait_ready(c: Container, timeout_s: float = 120) -> float:
    """Seconds from start until ``/readyz`` answers 200."""
    deadline = c.started + timeout_s
    while time.monotonic() < deadline:
        if c.proc.poll() is not None:
            raise CheckFailed(f"{c.name}: the service exited ({c.proc.returncode}): {c.log_tail()}")
        try:
            if httpx.get(c.url + "/readyz", timeout=2).status_code == 200:
                return time.monotonic() - c.started
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise CheckFailed(f"{c.name}: /readyz not 200 within {timeout_s:g} s: {c.log_tail()}")


def metric(text: str, name: str, **labels: str) -> float:
    """The value of one sample of ``/metrics`` (0 when absent), parsed by prometheus_client."""
    total = 0.0
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                total += s.value
    return total


def last_line(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[-1] if lines else "(no output)"


def expect(ok: bool, message: str) -> None:
    if not ok:
        raise CheckFailed(message)


def proc_status(pid: int, key: str) -> list[str]:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return line.split()[1:]
    raise CheckFailed(f"/proc/{pid}/status has no {key}")


def rss_mib(pid: int) -> float:
    kib = proc_status(pid, "VmRSS")[0]
    return int(kib) / 1024


def local_route(params: Path) -> dict[str, Any]:
    """What ``/route`` must answer for ``ROUTE_BODY`` with these params: ``pdroute route`` here."""
    b = ROUTE_BODY
    out = subprocess.run(
        [sys.executable, "-m", "app", "route", "--params", str(params), "--json",
         "--prompt-len", str(b["prompt_len"]), "--output-len", str(b["predicted_output_len"]),
         "--system-load", str(b["system_load"]), "--decode-batch-size", str(b["decode_batch_size"])],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    answer: dict[str, Any] = json.loads(out.stdout)
    return answer


def check_route(c: Container, params: Path) -> str:
    """One ``/route`` answer equal to the local decision; returns the decision."""
    got = httpx.post(c.url + "/route", json=ROUTE_BODY, timeout=10)
    expect(got.status_code == 200, f"{c.name}: /route answered {got.status_code}: {got.text[:200]}")
    answer, want = got.json(), local_route(params)
    for key in ("decision", "reason", "model", "params_id", "t_collocated_ms", "t_disaggregated_ms"):
        expect(
            answer.get(key) == want.get(key), f"{c.name}: /route {key} {answer.get(key)!r} != {want[key]!r}"
        )
    return str(answer["decision"])


def served_id(c: Container) -> dict[str, Any]:
    got = httpx.get(c.url + "/params", timeout=10)
    expect(got.status_code == 200, f"{c.name}: /params answered {got.status_code}")
    body: dict[str, Any] = got.json()
    return body


def stop(c: Container, timeout_s: float = 30) -> float:
    """SIGTERM to the service, as ``docker stop`` sends; it must exit 0. Returns seconds taken."""
    t0 = time.monotonic()
    os.kill(c.pid, signal.SIGTERM)
    try:
        code = c.proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise CheckFailed(f"{c.name}: still running {timeout_s:g} s after SIGTERM") from None
    log = c.log.read_text(errors="replace")
    expect(code == 0, f"{c.name}: exit status {code} after SIGTERM: {c.log_tail()}")
    expect("Traceback" not in log, f"{c.name}: a traceback in its log: {c.log}")
    return time.monotonic() - t0


def write_atomically(path: Path, text: str) -> None:
    """Replace ``path`` by renaming a new file over it, as ``pdroute fit`` and editors do."""
    tmp = path.with_name(path.name + ".new")
    tmp.write_text(text)
    tmp.chmod(0o644)
    tmp.replace(path)


def under_load(c: Container, seconds: float) -> tuple[float, float]:
    """``wrk`` on ``POST /route`` for ``seconds``: (req/s, peak RSS in MiB sampled every 0.1 s)."""
    with tempfile.NamedTemporaryFile("w", suffix=".lua", dir=c.log.parent, delete=False) as f:
        f.write(f'wrk.method = "POST"\nwrk.body = {json.dumps(json.dumps(ROUTE_BODY))}\n')
        f.write('wrk.headers["Content-Type"] = "application/json"\n')
    peak = [rss_mib(c.pid)]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.1):
            peak.append(rss_mib(c.pid))

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        out = subprocess.run(
            ["wrk", "-t1", "-c8", f"-d{seconds:g}s", "--latency", "-s", f.name, c.url + "/route"],
            capture_output=True, text=True, timeout=seconds + 60,
        )  # fmt: skip
    finally:
        done.set()
        sampler.join()
    result = parse_wrk(out.stdout)
    expect(result.errors == 0, f"{c.name}: {result.errors} errors under wrk")
    return result.rps, max(peak)


def run_checks(runner: Runner, work: Path, load_s: float) -> dict[str, str]:
    figures: dict[str, str] = {}
    user = runner.config.user
    expect(user == IMAGE_USER, f"the image runs as {user!r}, not {IMAGE_USER}")
    expect(bool(runner.config.healthcheck), "the image has no exec-form HEALTHCHECK")
    good = ROOT / "solver/data/params/qwen3-8b_h200_sxm_vllm_nvlink.json"
    good_id = load_params(good).params_id
    embedded_id = load_params(ROOT / "solver/data/params/default.json").params_id
    expect(good_id != embedded_id, "the check needs params that differ from the embedded default")

    # 1. A params file mounted read-only and served; /route, /metrics, the health check, the
    #    read-only root, the user; a bad file written over it keeps the served params; SIGTERM.
    mounted = work / "params"
    mounted.mkdir()
    shutil.copy(good, mounted / "params.json")
    env = {"PDROUTE_PARAMS_PATH": f"{PARAMS_MOUNT}/params.json"}
    c = runner.start("mounted", env, [Volume(mounted, PARAMS_MOUNT)])
    figures["ready_s"] = f"{wait_ready(c):.2f}"
    uid, gid = user.split(":")
    expect(proc_status(c.pid, "Uid") == [uid] * 4, f"mounted: uids {proc_status(c.pid, 'Uid')}, not {uid}")
    expect(proc_status(c.pid, "Gid") == [gid] * 4, f"mounted: gids {proc_status(c.pid, 'Gid')}, not {gid}")
    write = c.exec(["/usr/bin/touch", "/etc/probe"], as_image_user=False)  # as root: only ro stops it
    expect(write.returncode != 0 and "Read-only file system" in write.stderr, "mounted: the root is writable")
    served = served_id(c)
    expect(
        served["params_id"] == good_id, f"mounted: serves {served['params_id']}, not the mounted {good_id}"
    )
    decision = check_route(c, good)
    metrics = httpx.get(c.url + "/metrics", timeout=10).text
    expect(
        metric(metrics, "pdroute_route_decisions_total", decision=decision) == 1, "mounted: decision count"
    )
    expect(metric(metrics, "pdroute_params_info", params_id=good_id) == 1, "mounted: pdroute_params_info")
    health = c.exec(runner.config.healthcheck, as_image_user=True)
    expect(health.returncode == 0, f"mounted: HEALTHCHECK failed: {last_line(health.stderr)}")
    figures["rss_idle_mib"] = f"{rss_mib(c.pid):.1f}"
    if load_s > 0:
        rps, peak = under_load(c, load_s)
        figures["load_rps"], figures["rss_load_mib"] = f"{rps:.0f}", f"{peak:.1f}"
    write_atomically(mounted / "params.json", '{"schema_version": 2, "not": "params"')
    deadline = time.monotonic() + 60
    while metric(httpx.get(c.url + "/metrics", timeout=10).text, "pdroute_params_reloads_total",
                 trigger="watch", outcome="failure") < 1:  # fmt: skip
        expect(time.monotonic() < deadline, "mounted: the bad params file was not refused within 60 s")
        time.sleep(0.5)
    after = served_id(c)
    expect(after["params_id"] == good_id, f"mounted: a bad file replaced the params ({after['params_id']})")
    expect(bool(after["last_reload_error"]), "mounted: /params shows no reload error")
    check_route(c, good)
    figures["stop_s"] = f"{stop(c):.2f}"

    # 2. No params file: the embedded default.
    c = runner.start("embedded", {}, [])
    wait_ready(c)
    expect(served_id(c)["params_id"] == embedded_id, "embedded: not the embedded default params")
    check_route(c, ROOT / "solver/data/params/default.json")
    stop(c)

    # 3. A bad file at start: one clear line and a non-zero exit, as outside the image.
    bad = work / "bad"
    bad.mkdir()
    (bad / "params.json").write_text("{not json")
    c = runner.start("bad", env, [Volume(bad, PARAMS_MOUNT)])
    try:
        code = c.proc.wait(timeout=120)
    except subprocess.TimeoutExpired:
        raise CheckFailed("bad: still running 120 s after start with a bad params file") from None
    log = c.log.read_text(errors="replace")
    expect(code != 0, "bad: exit status 0 with a bad params file")
    expect("params.json" in c.log_tail() and "Traceback" not in log, f"bad: unclear refusal: {c.log_tail()}")
    return figures


def wait_exit(c: Container, timeout_s: float) -> int:
    try:
        return c.proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise CheckFailed(f"{c.name}: still running after {timeout_s:g} s: {c.log_tail()}") from None


def run_profiler_checks(runner: Runner, work: Path) -> dict[str, str]:
    """``pdroute profile --help``, then the entry point (profile, fit) on a tiny model on the CPU,
    as uid 10001 on a read-only root, writing into a mounted ``/work``."""
    c = runner.start("help", {}, [], ["pdroute", "profile", "--help"])
    code = wait_exit(c, 300)
    expect(
        code == 0 and "usage: pdroute profile" in c.log.read_text(), f"help: status {code}: {c.log_tail()}"
    )
    out = work / "out"
    out.mkdir()
    expect(runner.config.user == IMAGE_USER, f"the image runs as {runner.config.user!r}, not {IMAGE_USER}")
    uid, gid = (int(x) for x in runner.config.user.split(":"))
    os.chown(out, uid, gid)
    args = "--model tiny --device cpu --quick --no-progress --src-gpu 0 --dst-gpu 0"
    c = runner.start("profile", {"PDROUTE_PROFILE_ARGS": args}, [Volume(out, "/work", writable=True)])
    code = wait_exit(c, 1200)
    expect(code == 0, f"profile: exit status {code}: {c.log_tail()}")
    params = load_params(out / "params.json")  # raises InvalidParams on a bad file
    expect("params.json" in c.log_tail(), f"profile: {c.log_tail()}")
    return {"profile_s": f"{time.monotonic() - c.started:.1f}", "params_id": params.params_id}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--image", required=True)
    p.add_argument("--work", type=Path, required=True, help="an empty scratch directory")
    p.add_argument("--load-s", type=float, default=10, help="seconds of wrk load (0: none)")
    p.add_argument("--target", choices=("service", "profiler"), default="service")
    p.add_argument("buildah", nargs="+", help="the buildah command with its storage options")
    args = p.parse_args(argv)
    if args.target == "service" and args.load_s > 0 and shutil.which("wrk") is None:
        print("image_check: wrk not installed (scripts/system-deps.sh); use --load-s 0", file=sys.stderr)
        return 1
    runner: Runner | None = None
    try:
        runner = Runner(args.buildah, args.image, args.work)
        if args.target == "service":
            figures = run_checks(runner, args.work, args.load_s)
        else:
            figures = run_profiler_checks(runner, args.work)
    except (CheckFailed, InvalidParams, httpx.HTTPError, subprocess.SubprocessError, OSError) as exc:
        print(f"image_check: {exc}", file=sys.stderr)
        return 1
    finally:
        if runner is not None:
            runner.stop_all()
    print(" ".join(f"{k}={v}" for k, v in figures.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
