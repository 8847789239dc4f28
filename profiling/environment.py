"""What a profile records about where it ran: device names, library versions, the time."""

from __future__ import annotations

import datetime as dt
import platform
from importlib import metadata
from pathlib import Path
from types import ModuleType
from typing import Any

import torch


def utc_now() -> str:
    """ISO 8601 UTC timestamp, seconds precision."""
    return dt.datetime.now(dt.UTC).replace(microsecond=0).isoformat()


def _cpu_name() -> str:
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text(errors="replace").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine() or "cpu"


def describe_device(device: torch.device, dst_gpu: int) -> dict[str, Any]:
    """``name`` (what the fit and plots show as the hardware) and the details behind it."""
    if device.type != "cuda":
        return {"kind": "cpu", "name": _cpu_name(), "threads": torch.get_num_threads()}
    src = device.index if device.index is not None else torch.cuda.current_device()
    count = torch.cuda.device_count()
    name = torch.cuda.get_device_name(src)
    major, minor = torch.cuda.get_device_capability(src)
    return {
        "kind": "cuda",
        "name": name,
        "src": f"cuda:{src} {name}",
        "dst": f"cuda:{dst_gpu} {torch.cuda.get_device_name(dst_gpu)}" if dst_gpu < count else None,
        "count": count,
        "capability": f"{major}.{minor}",
        "memory_gb": round(torch.cuda.get_device_properties(src).total_memory / 1e9, 1),
    }


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def describe_versions(flash_attn: ModuleType | None) -> dict[str, Any]:
    """Versions that change the measured latencies."""
    return {
        "pdroute": _version("pdroute"),
        "python": platform.python_version(),
        "torch": str(torch.__version__),  # TorchVersion is a str subclass torch.load refuses
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version()  # type: ignore[no-untyped-call]
        if torch.cuda.is_available()
        else None,
        "flash_attn": getattr(flash_attn, "__version__", None) if flash_attn is not None else None,
    }
