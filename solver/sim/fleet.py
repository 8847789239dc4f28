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

Engine settings follow vLLM's v1 scheduler: ``max_num_batched_tokens`` is one step's token
budget, shared by its decode tokens (one per running decode, scheduled first) and its prefill
chunk (the rest, FCFS over the prompts); as vLLM requires, it is at least ``max_num_seqs``.

Prefill pool queueing (``prefill_queue``): ``shared`` (one FIFO queue, a free worker takes its
head: the optimistic case), ``round-robin`` (each request placed on the next worker in turn, one
FIFO queue per worker: NVIDIA Dynamo's default router mode) or ``least-loaded`` (placed on the
worker with the fewest prompt tokens queued and running, ties to the lowest index: the llm-d
scheduler's queue scorer). ``None`` takes the topology's default (``DEFAULT_PREFILL_QUEUE``).

First token of a disaggregated request (``first_token``): ``decode-engine`` (a client reading
the decode engine, as vLLM's disaggregation proxy and Dynamo stream it: admitted at the decode
engine's next step boundary after the KV transfer and the prompts queued there before it, KV
seen at the one after, the first token at the end of its first decode step) or
``prefill-engine`` (a proxy that streams the prefill engine's token: out when the prefill pass
ends; the decode engine's timeline is unchanged).

Prefix caches (``prefix_cache_tokens``, rules in ``solver.sim.prefix_reuse``): every engine and
prefill GPU caches KV blocks up to that many tokens when the workload carries block hashes.
``"profile"`` (the default) takes the profile's ``kv_capacity_tokens`` (no caches when the
profile does not give it), an integer >= 0 is the capacity itself, None turns them off. The
decode GPU is chosen by ``decode_choice``: ``least-loaded`` (above) or ``prefix-affinity``.
KV cache (``kv_capacity_tokens``, ``block_size``): each decode / mixed GPU holds that many KV
tokens in blocks of ``block_size`` (vLLM's default 16), scheduled as ``solver.sim.kv_pool``
says. ``"profile"`` (the default) takes the profile's ``kv_capacity_tokens`` and, when the
profile has none, no limit; ``None`` is no limit (every admission fits, nothing is preempted:
the simulator as it was before KV capacity, bit for bit).

A prefill GPU runs one prompt per forward pass, or with ``prefill_batch_tokens`` > 0 the queue's
head prompts in one pass while they fit that many tokens (vLLM on a prefill engine without
chunked prefill, as the local fleet's: ``solver.sim.prefill_pool``); 0 (the default) is one
prompt per pass, as the tables of docs/simulation.md were measured.

``allow_extrapolation``: run even when the workload or fleet would read a table beyond its
measured range (``solver.sim.extrapolation``); otherwise such a run is refused up front.
"""

from __future__ import annotations

from dataclasses import dataclass

from pdroute_core.routing.queue_aware import FIRST_TOKEN_SOURCES as QUEUE_AWARE_FIRST_TOKEN_SOURCES
from solver.errors import InvalidSimConfig

TOPOLOGIES = ("conditional", "pools")
PREFILL_QUEUES = ("shared", "round-robin", "least-loaded")
DEFAULT_PREFILL_QUEUE = {"conditional": "round-robin", "pools": "least-loaded"}
# Where a client reads a disaggregated request's first token: the decision model's own choices.
FIRST_TOKEN_SOURCES = QUEUE_AWARE_FIRST_TOKEN_SOURCES
PROFILE_CAPACITY = "profile"  # kv_capacity_tokens, prefix_cache_tokens: the profile's kv_capacity_tokens
DECODE_CHOICES = ("least-loaded", "prefix-affinity")


@dataclass(frozen=True)
class FleetConfig:
    """Sizes and engine limits of the simulated fleet."""

    topology: str = "conditional"  # "conditional" or "pools" (module docstring)
    num_prefill: int = 2  # dedicated prefill GPUs (one prompt per forward pass unless prefill_batch_tokens)
    num_decode: int = 6  # decode GPUs (conditional: they also prefill locally)
    num_mixed: int = 0  # pools only: GPUs serving collocated requests
    # Tokens per engine step on decode / mixed GPUs, decode tokens included (vLLM's setting).
    max_num_batched_tokens: int = 512
    max_num_seqs: int = 256  # requests running (prefilling or decoding) per decode / mixed GPU
    prefill_queue: str | None = None  # shared | round-robin | least-loaded; None: the topology's
    first_token: str = "decode-engine"  # where a disaggregated request's first token is read
    # Prefix-cache capacity per GPU (tokens): "profile" (its kv_capacity_tokens), N, or None (off).
    prefix_cache_tokens: int | str | None = PROFILE_CAPACITY
    decode_choice: str = "least-loaded"  # least-loaded | prefix-affinity (solver.sim.prefix_reuse)
    # KV tokens per engine GPU: an integer, "profile" (the profile's, unlimited when it has none)
    # or None (unlimited).
    kv_capacity_tokens: int | str | None = PROFILE_CAPACITY
    block_size: int = 16  # KV tokens per block (vLLM's default)
    allow_extrapolation: bool = False  # run beyond the profile's measured ranges (counted)
    prefill_batch_tokens: int = 0  # a prefill GPU's token budget per pass (0: one prompt a pass)

    def __post_init__(self) -> None:
        if self.topology not in TOPOLOGIES:
            raise InvalidSimConfig(f"topology: unknown {self.topology!r} (one of {', '.join(TOPOLOGIES)})")
        for name in ("num_prefill", "num_decode", "num_mixed", "prefill_batch_tokens"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise InvalidSimConfig(f"{name}: expected an integer >= 0, got {value!r}")
        for name in ("max_num_batched_tokens", "max_num_seqs"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidSimConfig(f"{name}: expected an integer >= 1, got {value!r}")
        if self.max_num_batched_tokens < self.max_num_seqs:
            raise InvalidSimConfig(
                f"max_num_batched_tokens: {self.max_num_batched_tokens} is below max_num_seqs "
                f"{self.max_num_seqs} (a step must fit one token per running request, as vLLM requires)"
            )
        if self.prefill_queue is not None and self.prefill_queue not in PREFILL_QUEUES:
            raise InvalidSimConfig(
                f"prefill_queue: unknown {self.prefill_queue!r} (one of {', '.join(PREFILL_QUEUES)})"
            )
        if self.first_token not in FIRST_TOKEN_SOURCES:
            raise InvalidSimConfig(
                f"first_token: unknown {self.first_token!r} (one of {', '.join(FIRST_TOKEN_SOURCES)})"
            )
        cache = self.prefix_cache_tokens
        if (
            cache is not None
            and cache != PROFILE_CAPACITY
            and (isinstance(cache, bool) or not isinstance(cache, int) or cache < 0)
        ):
            raise InvalidSimConfig(
                f"prefix_cache_tokens: expected an integer >= 0, {PROFILE_CAPACITY!r} or None, got {cache!r}"
            )
        if self.decode_choice not in DECODE_CHOICES:
            raise InvalidSimConfig(
                f"decode_choice: unknown {self.decode_choice!r} (one of {', '.join(DECODE_CHOICES)})"
            )
        cap = self.kv_capacity_tokens
        if (
            cap is not None
            and cap != PROFILE_CAPACITY
            and (isinstance(cap, bool) or not isinstance(cap, int) or cap < 1)
        ):
            raise InvalidSimConfig(
                f"kv_capacity_tokens: expected an integer >= 1, {PROFILE_CAPACITY!r} or None, got {cap!r}"
            )
        bs = self.block_size
        if isinstance(bs, bool) or not isinstance(bs, int) or bs < 1:
            raise InvalidSimConfig(f"block_size: expected an integer >= 1, got {bs!r}")
        if isinstance(cap, int) and cap < bs:
            raise InvalidSimConfig(f"kv_capacity_tokens: {cap} holds no block of {bs} tokens")
        if not isinstance(self.allow_extrapolation, bool):
            raise InvalidSimConfig(
                f"allow_extrapolation: expected true or false, got {self.allow_extrapolation!r}"
            )
        if self.topology == "conditional":
            if self.num_decode < 1:
                raise InvalidSimConfig("conditional topology needs at least one decode GPU")
            if self.num_mixed:
                raise InvalidSimConfig("mixed GPUs belong to the pools topology")
        elif self.num_mixed < 1 and not (self.num_prefill and self.num_decode):
            raise InvalidSimConfig("pools topology needs mixed GPUs, or prefill and decode GPUs")

    @property
    def prefill_queue_discipline(self) -> str:
        """The prefill pool's queueing in force (the setting, or the topology's default)."""
        return self.prefill_queue if self.prefill_queue is not None else DEFAULT_PREFILL_QUEUE[self.topology]

    def prefix_cache_capacity(self, profile_kv_capacity_tokens: int | None) -> int | None:
        """The prefix-cache capacity in force (tokens per GPU), given the profile's KV capacity;
        None: no caches."""
        cache = self.prefix_cache_tokens
        if cache == PROFILE_CAPACITY:
            return profile_kv_capacity_tokens
        return cache if isinstance(cache, int) else None

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

    def kv_capacity_in_force(self, profile_capacity: int | None) -> int | None:
        """The KV tokens per engine GPU this fleet runs with (None: unlimited)."""
        cap = self.kv_capacity_tokens
        if cap == PROFILE_CAPACITY:
            return profile_capacity
        return cap if isinstance(cap, int) else None

    def describe(self) -> str:
        if self.topology == "conditional":
            return f"conditional: {self.num_prefill} prefill + {self.num_decode} decode GPUs"
        return f"pools: {self.num_mixed} mixed + {self.num_prefill} prefill + {self.num_decode} decode GPUs"

    def describe_engines(self) -> str:
        """The engines' scheduling settings, for a run's header line."""
        return (
            f"budget {self.max_num_batched_tokens} tokens/step, "
            f"prefill queue {self.prefill_queue_discipline}, first token from the {self.first_token}"
        )
