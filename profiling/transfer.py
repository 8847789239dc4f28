"""KV-cache transfer bandwidth between the prefill GPU and the decode GPU.

The path measured is the one a disaggregated deployment would use on this machine:

- peer access between ``src_gpu`` and ``dst_gpu`` (``has_peer_access``): a direct ``dst.copy_(src)``
  (NVLink, or PCIe peer-to-peer); labelled ``nvlink`` when it beats PCIe 5.0 x16, else ``pcie-p2p``;
- no peer access: the relay ``src -> pinned host buffer -> dst`` (``pinned-relay``);
- one GPU: the relay ``GPU -> pinned host -> the same GPU`` (``pinned-relay-single-gpu``);
- no GPU: a host ``memcpy`` (``cpu-memcpy (no GPU)``), only so CPU runs produce a complete profile.

Bandwidth is ``bytes / median time`` in GB/s (1 GB = 1e9 bytes, as ``CostModelParams`` uses).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from profiling.errors import DeviceUnavailable, ProfilingError
from profiling.timing import Timing, time_host_synced

# PCIe 5.0 x16 moves at most ~63 GB/s each way; a peer copy faster than this is NVLink.
PCIE5_X16_GBPS = 64.0


@dataclass(frozen=True)
class TransferMeasurement:
    """A measured KV path."""

    bandwidth_gbps: float  # num_bytes / median time
    transfer_path: str  # label recorded in the profile
    detail: str  # what exactly was copied where
    num_bytes: int  # bytes per copy
    timing: Timing  # samples of whole copies (ms)


def has_peer_access(src_gpu: int, dst_gpu: int) -> bool:
    """True when two distinct visible GPUs can read each other's memory directly."""
    if src_gpu == dst_gpu or not torch.cuda.is_available():
        return False
    if max(src_gpu, dst_gpu) >= torch.cuda.device_count():
        return False
    return bool(torch.cuda.can_device_access_peer(src_gpu, dst_gpu))


def measure_kv_bandwidth(
    num_bytes: int, src_gpu: int, dst_gpu: int, *, use_cuda: bool, warmup: int, repeats: int
) -> TransferMeasurement:
    """Time copies of ``num_bytes`` over the path described in the module docstring."""
    if not use_cuda:
        host_src = torch.ones(num_bytes, dtype=torch.uint8)
        host_dst = torch.empty_like(host_src)
        timing = time_host_synced(
            lambda: host_dst.copy_(host_src), warmup=warmup, repeats=repeats, sync=lambda: None
        )
        return measurement(num_bytes, timing, "cpu-memcpy (no GPU)", "host memcpy between two CPU buffers")
    count = torch.cuda.device_count()
    if src_gpu >= count:
        raise DeviceUnavailable(f"source GPU {src_gpu} requested but only {count} visible")
    single = dst_gpu == src_gpu or count == 1
    if not single and dst_gpu >= count:
        raise DeviceUnavailable(f"destination GPU {dst_gpu} requested but only {count} visible")
    dst_index = src_gpu if single else dst_gpu
    src = torch.ones(num_bytes, dtype=torch.uint8, device=f"cuda:{src_gpu}")
    dst = torch.empty(num_bytes, dtype=torch.uint8, device=f"cuda:{dst_index}")

    def sync() -> None:
        torch.cuda.synchronize(src_gpu)
        torch.cuda.synchronize(dst_index)

    if not single and has_peer_access(src_gpu, dst_gpu):
        timing = time_host_synced(lambda: dst.copy_(src), warmup=warmup, repeats=repeats, sync=sync)
        gbps = num_bytes / (timing.median_ms * 1e6)
        label = "nvlink" if gbps > PCIE5_X16_GBPS else "pcie-p2p"
        return measurement(num_bytes, timing, label, f"peer copy cuda:{src_gpu} -> cuda:{dst_gpu}")
    pinned = torch.empty(num_bytes, dtype=torch.uint8, pin_memory=True)

    def relay() -> None:
        pinned.copy_(src, non_blocking=True)
        torch.cuda.synchronize(src_gpu)  # the host buffer must be complete before it is sent on
        dst.copy_(pinned, non_blocking=True)

    timing = time_host_synced(relay, warmup=warmup, repeats=repeats, sync=sync)
    if single:
        detail = f"single GPU: cuda:{src_gpu} -> pinned host -> cuda:{src_gpu}"
        return measurement(num_bytes, timing, "pinned-relay-single-gpu", detail)
    detail = f"no peer access: cuda:{src_gpu} -> pinned host -> cuda:{dst_gpu}"
    return measurement(num_bytes, timing, "pinned-relay", detail)


def measurement(num_bytes: int, timing: Timing, label: str, detail: str) -> TransferMeasurement:
    if timing.median_ms <= 0:
        raise ProfilingError(f"copy of {num_bytes} bytes too fast to time ({timing.median_ms} ms)")
    return TransferMeasurement(num_bytes / (timing.median_ms * 1e6), label, detail, num_bytes, timing)
