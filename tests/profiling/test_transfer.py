"""KV bandwidth paths: the CPU fallback here; the GPU paths in ``test_cuda``."""

from __future__ import annotations

import pytest
import torch

from profiling import transfer
from profiling.errors import ProfilingError
from profiling.timing import Timing


def test_cpu_only_measures_a_labelled_host_memcpy() -> None:
    m = transfer.measure_kv_bandwidth(1 << 20, 0, 1, use_cuda=False, warmup=1, repeats=3)
    assert m.transfer_path == "cpu-memcpy (no GPU)"
    assert len(m.timing.samples_ms) == 3 and m.num_bytes == 1 << 20
    assert m.bandwidth_gbps == pytest.approx((1 << 20) / (m.timing.median_ms * 1e6))


def test_no_peer_access_without_two_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert not transfer.has_peer_access(0, 1)
    assert not transfer.has_peer_access(0, 0)


def test_an_untimeable_copy_is_an_error() -> None:
    with pytest.raises(ProfilingError, match="too fast"):
        transfer.measurement(10, Timing(0.0, (0.0,)), "x", "y")
