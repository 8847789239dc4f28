"""Errors of the profiling job; all are ``PdrouteError``s, so the CLI prints them as one line."""

from __future__ import annotations

from pdroute_core.errors import PdrouteError


class ProfilingError(PdrouteError):
    """A profile could not be produced (bad options, nothing measurable, unusable device)."""


class InvalidModelConfig(ProfilingError):
    """An architecture preset or a Hugging Face ``config.json`` is unknown, missing or malformed."""


class DeviceUnavailable(ProfilingError):
    """The requested device (CUDA, a GPU index) is not present on this machine."""


class CheckpointError(ProfilingError):
    """A safetensors checkpoint directory is missing, incomplete or does not match the model."""


def first_line(exc: BaseException, limit: int = 200) -> str:
    """The first line of ``exc``'s message (or its type's name), for a one-line report."""
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:limit]
