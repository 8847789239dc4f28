"""Read the image's hash locks (requirements/*.txt, written by ``uv pip compile``) and say where
they disagree with pyproject.toml.

The image is Python 3.11 on Linux: a lock entry counts when its marker holds there.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from importlib import metadata

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

# uv's annotation of what pyproject.toml asks for directly.
DIRECT = "pdroute (pyproject.toml)"
IMAGE_ENV: dict[str, str] = {
    "python_version": "3.11",
    "python_full_version": "3.11.2",
    "implementation_name": "cpython",
    "implementation_version": "3.11.2",
    "platform_machine": "x86_64",
    "platform_release": "",
    "platform_version": "",
    "platform_python_implementation": "CPython",
    "sys_platform": "linux",
    "platform_system": "Linux",
    "os_name": "posix",
}


@dataclass(frozen=True)
class Entry:
    """One pinned line of a lock: ``name==version ; marker`` with its hashes and uv's ``# via``."""

    name: str  # canonical
    requirement: Requirement
    hashes: tuple[str, ...]
    via: tuple[str, ...]

    @property
    def pinned(self) -> Version | None:
        specs = list(self.requirement.specifier)
        if len(specs) == 1 and specs[0].operator == "==" and "*" not in specs[0].version:
            return Version(specs[0].version)
        return None

    def applies(self) -> bool:
        marker = self.requirement.marker
        return marker is None or marker.evaluate(IMAGE_ENV)


def parse_lock(text: str) -> list[Entry]:
    """The entries of a ``--generate-hashes`` requirements file."""
    blocks: list[tuple[list[str], list[str]]] = []  # (requirement lines, comment lines)
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped:
            continue
        if not line[0].isspace() and not stripped.startswith("#"):
            blocks.append(([stripped], []))
        elif blocks and stripped.startswith("#"):
            blocks[-1][1].append(stripped.lstrip("#").strip())
        elif blocks:
            blocks[-1][0].append(stripped)
    entries = []
    for req_lines, comments in blocks:
        words = " ".join(part.rstrip("\\").strip() for part in req_lines).split(" --hash=")
        requirement = Requirement(words[0].strip())
        via = [c.removeprefix("via").strip() for c in comments]
        entries.append(
            Entry(
                canonicalize_name(requirement.name),
                requirement,
                tuple(h.strip() for h in words[1:]),
                tuple(v for v in via if v),
            )
        )
    return entries


def _extra_requirements(name: str, extra: str) -> list[Requirement]:
    """What ``name[extra]`` adds, from the installed distribution's metadata."""
    out = []
    for raw in metadata.requires(name) or []:
        req = Requirement(raw)
        marker = req.marker
        if marker is not None and "extra" in str(marker) and marker.evaluate({**IMAGE_ENV, "extra": extra}):
            out.append(req)
    return out


def disagreements(
    dependencies: Iterable[str],
    lock_text: str,
    *,
    direct_annotated: bool,
    extra_requirements: Callable[[str, str], list[Requirement]] = _extra_requirements,
) -> list[str]:
    """Each way the lock fails ``dependencies`` (PEP 508 strings), one line each; [] when it agrees.

    ``direct_annotated``: the lock marks pyproject's own dependencies (uv's ``# via`` annotation),
    so a dependency dropped from pyproject.toml but still locked as direct is found too.
    """
    problems: list[str] = []
    entries = parse_lock(lock_text)
    for e in entries:
        if e.pinned is None:
            problems.append(f"{e.requirement}: not pinned to one version with ==")
        if not e.hashes or not all(h.startswith("sha256:") for h in e.hashes):
            problems.append(f"{e.requirement}: no sha256 hash")
    locked: dict[str, Entry] = {}
    for e in entries:
        if e.applies():
            if e.name in locked:
                problems.append(f"{e.name}: locked twice for Python 3.11 on Linux")
            locked[e.name] = e
    wanted = [Requirement(d) for d in dependencies]
    for req in wanted:
        if req.marker is not None and not req.marker.evaluate(IMAGE_ENV):
            continue
        name = canonicalize_name(req.name)
        entry = locked.get(name)
        if entry is None:
            problems.append(f"{req}: in pyproject.toml, not in the lock")
            continue
        version = entry.pinned
        if version is not None and not req.specifier.contains(version, prereleases=True):
            problems.append(f"{req}: the lock pins {name}=={version}")
        for extra in sorted(req.extras):
            for sub in extra_requirements(req.name, extra):
                if canonicalize_name(sub.name) not in locked:
                    problems.append(f"{req}: {sub.name} (from the [{extra}] extra) is not in the lock")
    if direct_annotated:
        names = {canonicalize_name(r.name) for r in wanted}
        for e in entries:
            if DIRECT in e.via and e.name not in names:
                problems.append(f"{e.name}: locked as a dependency of pyproject.toml, which no longer has it")
    return problems
