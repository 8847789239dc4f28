"""The simulated fleet's configuration (the engines' live state is in ``solver.sim.batching_gpu``).

Two topologies:

- ``conditional`` (NVIDIA Dynamo / SGLang conditional disaggregation): ``num_prefill`` prefill
  GPUs and ``num_decode`` decode GPUs. The gateway picks the least-loaded decode GPU; the policy
  then chooses local prefill on it (collocated, chunked prefill between its decodes) or a prefill
  GPU plus a KV transfer to it (disaggregated). ``system_load`` and ``decode_batch_size`` are
  both that GPU's running decodes.
- ``pools`` (the design document's view): ``num_mixed`` GPUs serve requests collocated, beside a
  pool of ``num_prefill`` prefill GPUs and ``num_decode`` decode GPUs. ``system_load`` is the
  running decodes of the least-loaded mixed GPU, ``decode_batch_size`` those of the
  least-loaded decode GPU.

"Least-loaded" counts the requests assigned to a GPU and not finished (running, waiting,
or still in prefill or transfer towards it); ties go to the lowest index. When only one path
exists (no prefill GPUs, or no mixed GPUs), every request takes it and the policy is not asked.
"""

from __future__ import annotations

from dataclasses import dataclass

from solver.errors import InvalidSimConfig

TOPOLOGIES = ("conditional", "pools")


@dataclass(frozen=True)
class FleetConfig:
    """Sizes and engine limits of the simulated fleet."""

    topology: str = "conditional"  # "conditional" or "pools" (module docstring)
    num_prefill: int = 2  # dedicated prefill GPUs (one prompt per forward, FIFO from one queue)
    num_decode: int = 6  # decode GPUs (conditional: they also prefill locally)
    num_mixed: int = 0  # pools only: GPUs serving collocated requests
    chunk_size: int = 512  # prefill tokens per engine step on decode / mixed GPUs
    max_num_seqs: int = 256  # requests running (prefilling or decoding) per decode / mixed GPU

    def __post_init__(self) -> None:
        if self.topology not in TOPOLOGIES:
            raise InvalidSimConfig(f"topology: unknown {self.topology!r} (one of {', '.join(TOPOLOGIES)})")
        for name in ("num_prefill", "num_decode", "num_mixed"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise InvalidSimConfig(f"{name}: expected an integer >= 0, got {value!r}")
        for name in ("chunk_size", "max_num_seqs"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidSimConfig(f"{name}: expected an integer >= 1, got {value!r}")
        if self.topology == "conditional":
            if self.num_decode < 1:
                raise InvalidSimConfig("conditional topology needs at least one decode GPU")
            if self.num_mixed:
                raise InvalidSimConfig("mixed GPUs belong to the pools topology")
        elif self.num_mixed < 1 and not (self.num_prefill and self.num_decode):
            raise InvalidSimConfig("pools topology needs mixed GPUs, or prefill and decode GPUs")

    @property
    def can_collocate(self) -> bool:
        return self.topology == "conditional" or self.num_mixed > 0

    @property
    def can_disaggregate(self) -> bool:
        return self.num_prefill > 0 and self.num_decode > 0

    @property
    def num_engines(self) -> int:
        """GPUs that run engine steps (decode and mixed GPUs)."""
        return self.num_decode + self.num_mixed

    @property
    def num_gpus(self) -> int:
        return self.num_prefill + self.num_engines

    def describe(self) -> str:
        if self.topology == "conditional":
            return f"conditional: {self.num_prefill} prefill + {self.num_decode} decode GPUs"
        return f"pools: {self.num_mixed} mixed + {self.num_prefill} prefill + {self.num_decode} decode GPUs"
