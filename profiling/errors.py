"""Errors of the profiling job; all are ``PdrouteError``s, so the CLI prints them as one line."""

from __future__ import annotations

from solver.errors import PdrouteError


class ProfilingError(PdrouteError):
    """A profile could not be produced (bad options, nothing measurable, unusable device)."""


class InvalidModelConfig(ProfilingError):
    """An architecture preset or a Hugging Face ``config.json`` is unknown, missing or malformed."""


class DeviceUnavailable(ProfilingError):
    """The requested device (CUDA, a GPU index) is not present on this machine."""


class CheckpointError(ProfilingError):
    """A safetensors checkpoint directory is missing, incomplete or does not match the model."""
