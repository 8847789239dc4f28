"""What NVIDIA aiconfigurator's database can estimate, and resolving a request against it.

``resolve_source`` turns (model, system, backend, version) into a ``ResolvedSource`` or raises
``UnsupportedSource`` with one line that lists what the database does support at the level
where the request failed (systems, then backends and versions, then models). Nothing here
touches the network: models are taken from aiconfigurator's bundled Hugging Face configs or
from a local directory holding a ``config.json``.

Only dense grouped-query-attention models are accepted (``DENSE_GQA_ARCHITECTURES``): for
them the KV cache per token is ``layers x kv_heads x head_dim x 2 x dtype bytes``, the form
``bytes_per_token`` assumes. MLA, hybrid (linear attention) and MoE models need another KV
formula and are refused rather than mis-sized.
"""

from __future__ import annotations

import functools
import importlib.metadata
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from solver.errors import UnsupportedSource

DENSE_GQA_ARCHITECTURES = frozenset({"LlamaForCausalLM", "Qwen3ForCausalLM"})
DATABASE_MODE = "SILICON"  # measured kernels only; no speed-of-light or empirical filling


@dataclass(frozen=True)
class ResolvedSource:
    """A request the database can serve, with everything the profile records about it."""

    model: str  # Hugging Face id as aiconfigurator spells it, or a local directory
    architecture: str  # e.g. "Qwen3ForCausalLM"
    model_info: Mapping[str, Any]  # aiconfigurator's parsed config (layers, n_kv, d, ...)
    system: str  # e.g. "h100_sxm"
    backend: str  # "vllm", "sglang" or "trtllm"
    backend_version: str  # e.g. "0.24.0"
    version_slot: str | None  # "current", "previous" or "next" when the version is a slot
    system_spec: Mapping[str, Any] = field(default_factory=dict)  # the system's YAML spec
    aiconfigurator_version: str = "unknown"
    aiconfigurator_core_version: str = "unknown"  # the wheel that carries the database


def _require_aiconfigurator() -> None:
    try:
        import aiconfigurator.sdk  # noqa: F401
    except ImportError:
        raise UnsupportedSource(
            "the aiconfigurator source needs its optional dependency: pip install 'pdroute[aiconfigurator]'"
        ) from None


@functools.cache
def _scan_databases() -> tuple[tuple[str, tuple[tuple[str, tuple[str, ...]], ...]], ...]:
    # aiconfigurator parses ~170 YAML files per scan (about 1 s); the installed data cannot
    # change while this process runs, so one scan serves every call.
    from aiconfigurator.sdk import perf_database

    raw = perf_database.get_supported_databases()
    return tuple(
        (str(system), tuple((str(b), tuple(map(str, v))) for b, v in sorted(backends.items()) if v))
        for system, backends in sorted(raw.items())
    )


def supported_databases() -> dict[str, dict[str, list[str]]]:
    """{system: {backend: [versions]}} of the databases shipped with aiconfigurator."""
    _require_aiconfigurator()
    return {system: {b: list(v) for b, v in backends} for system, backends in _scan_databases()}


def _version_slots(system: str, backend: str) -> dict[str, str]:
    from aiconfigurator.sdk import perf_database

    slots = perf_database.get_version_slots(system, backend) or {}
    return {str(name): str(v) for name, v in slots.items() if v}


def _describe_versions(system: str, backend: str, versions: list[str]) -> str:
    by_version = {v: name for name, v in _version_slots(system, backend).items()}
    return ", ".join(f"{v} ({by_version[v]})" if v in by_version else v for v in versions)


def _resolve_version(system: str, backend: str, requested: str | None, versions: list[str]) -> str:
    slots = _version_slots(system, backend)
    if requested is None:
        if "current" in slots:
            return slots["current"]
        from aiconfigurator.sdk import perf_database

        latest = perf_database.get_latest_database_version(system, backend)
        if latest is not None:
            return str(latest)
        requested = "latest"
    elif requested in slots:
        return slots[requested]
    elif requested in versions:
        return requested
    raise UnsupportedSource(
        f"aiconfigurator has no {backend} {requested} data for {system}; versions there: "
        f"{_describe_versions(system, backend, versions)}"
    )


def supported_models(system: str, backend: str, version: str) -> list[str]:
    """Bundled models the support matrix passes on this database, limited to dense GQA ones."""
    _require_aiconfigurator()
    from aiconfigurator.sdk import common

    found = {
        row["HuggingFaceID"]
        for row in common.get_support_matrix()
        if row["System"] == system
        and row["Backend"] == backend
        and row["Version"] == version
        and row["Mode"] == "agg"
        and row["Architecture"] in DENSE_GQA_ARCHITECTURES
        and row.get("Status") == "PASS"
        and row.get("Source", "silicon") == "silicon"  # passed on collected data, not formulas
    }
    return sorted(found, key=str.lower)


def _model_info(model: str, supported: list[str]) -> tuple[str, dict[str, Any]]:
    from aiconfigurator.sdk import common
    from aiconfigurator.sdk.utils import get_model_config_from_model_path

    bundled = {name.lower(): name for name in common.DefaultHFModels}
    if os.path.isdir(model):
        name = model
    elif model.lower() in bundled:
        name = bundled[model.lower()]
    else:
        name = ""
    if name and (name in supported or os.path.isdir(name)):
        info = dict(get_model_config_from_model_path(name))
        if info.get("architecture") in DENSE_GQA_ARCHITECTURES:
            return name, info
    raise UnsupportedSource(
        f"model {model!r} is not available from aiconfigurator here (offline, dense GQA models only); "
        f"supported: {', '.join(supported)}"
    )


def resolve_source(*, model: str, system: str, backend: str, backend_version: str | None) -> ResolvedSource:
    """Check the request against the shipped databases; raise ``UnsupportedSource`` (one line)."""
    databases = supported_databases()
    if system not in databases:
        raise UnsupportedSource(
            f"aiconfigurator has no performance data for system {system!r}; systems with data: "
            f"{', '.join(databases)}"
        )
    backends = databases[system]
    if backend not in backends:
        listing = "; ".join(f"{b} {_describe_versions(system, b, v)}" for b, v in backends.items())
        raise UnsupportedSource(
            f"aiconfigurator has no {backend!r} data for {system}; backends there: {listing}"
        )
    version = _resolve_version(system, backend, backend_version, backends[backend])
    supported = supported_models(system, backend, version)
    if not supported:
        others = [v for v in backends[backend] if v != version and supported_models(system, backend, v)]
        raise UnsupportedSource(
            f"aiconfigurator's support matrix passes no dense GQA model on {system} with {backend} "
            f"{version}; versions with supported models: {', '.join(others) if others else 'none'}"
        )
    name, info = _model_info(model, supported)
    if os.path.isdir(name):
        from aiconfigurator.sdk import common

        support = common.check_support(name, system, backend, version, architecture=info["architecture"])
        if not support.agg_supported:
            raise UnsupportedSource(
                f"aiconfigurator's support matrix does not pass {info['architecture']} on {system} with "
                f"{backend} {version}; supported: {', '.join(supported)}"
            )
    from aiconfigurator.sdk import perf_database

    slot = next((s for s, v in _version_slots(system, backend).items() if v == version), None)
    return ResolvedSource(
        model=name,
        architecture=str(info["architecture"]),
        model_info={k: v for k, v in info.items() if k != "raw_config"},
        system=system,
        backend=backend,
        backend_version=version,
        version_slot=slot,
        system_spec=dict(perf_database.load_system_spec(system)),
        aiconfigurator_version=importlib.metadata.version("aiconfigurator"),
        aiconfigurator_core_version=importlib.metadata.version("aiconfigurator-core"),
    )
