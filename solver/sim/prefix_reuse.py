"""The fleet's prefix caches over one workload: which prompt tokens each GPU need not compute.

Every engine GPU (decode or mixed) and every prefill GPU holds a ``PrefixCache`` of the same
capacity (``FleetConfig.prefix_cache_tokens`` in tokens, floored to whole blocks), when the
workload carries block hashes (``Workload.blocks``); otherwise the simulator has no caches and
runs exactly as without this module.

The rules (``solver.sim.events`` applies them; ``h`` is a hit in tokens, whole blocks):

- A hit never covers the whole prompt: at least its last token is computed (its logits make
  the first output token), so ``h <= block_size * ((L - 1) // block_size)``, as in vLLM.
- Routing: the gateway looks up the request on the decode target (the GPU that would decode
  it); that hit is the view's ``cached_prompt_tokens``, what a KV-aware gateway knows. Where the
  collocation GPU is another GPU (``pools``: a mixed GPU), it looks the request up there too:
  ``colloc_cached_prompt_tokens``. And on the prefill GPU it would be placed on, where the
  prefill queue places prompts at arrival (``round-robin``, ``least-loaded``; not ``shared``):
  ``prefill_cached_prompt_tokens`` (a match that touches nothing; the pass looks it up again
  when it starts).
- Collocated: the request prefills ``L - h`` tokens on its collocation GPU, ``h`` its hit there
  (the decode target's hit in the conditional topology, where the two are one GPU), looked up
  at routing; the chunked prefill starts at token ``h`` and attends over the cached prefix.
- Disaggregated: the prefill GPU prefills ``L - h_p`` tokens, ``h_p`` its own hit, looked up
  when the pass starts (one pass of ``L - h_p`` tokens over an ``h_p``-token prefix:
  ``StepLatency.chunk_pass_ms``); the transfer moves ``L - h_d`` tokens of KV, ``h_d`` the
  decode target's hit at routing (the decode GPU already holds the rest).
- Insertion: a GPU holds a prompt's full blocks once it has them: a prefill GPU when its pass
  ends, an engine when the step finishing the prefill ends or when the KV transfer ends; an
  engine also holds the output's full blocks when the request finishes there (a following turn
  of a conversation reuses them).
- A lookup on the GPU that will serve the request touches its blocks (they become the newest);
  scoring the candidates for prefix affinity only reads (``match``). Blocks are not pinned
  between a lookup and their use: a block evicted in between is still counted as hit (the
  time between is one prefill's wait, short against the cache's turnover).

Choice of the decode GPU (``FleetConfig.decode_choice``): ``least-loaded`` (the default, the
simulator's rule without caches) or ``prefix-affinity``: the GPU with the smallest cost
``(L - h_g) + pending_prefill_tokens_g + context_tokens_g`` in tokens (the prompt tokens it would
compute for this request, the prefill work it has queued and its running decodes' KV), ties to
the lowest index: NVIDIA Dynamo's KV router cost (prefill blocks to compute plus active decode
blocks, overlap weight 1), counted in tokens. Without caches ``prefix-affinity`` is least-loaded.
"""

from __future__ import annotations

from solver.sim.block_hashes import BlockHashes
from solver.sim.prefix_cache import PrefixCache


class PrefixReuse:
    """Per-GPU caches and each request's chain (hits in tokens; ``g`` an engine index, ``w``
    a prefill worker index)."""

    __slots__ = ("block_size", "engines", "flat", "max_hit_blocks", "offsets", "prefill", "prompt_blocks")

    def __init__(
        self,
        blocks: BlockHashes,
        prompt: list[int],
        num_engines: int,
        num_prefill: int,
        capacity_tokens: int,
    ) -> None:
        bs = blocks.block_size
        self.block_size = bs
        capacity_blocks = capacity_tokens // bs
        self.engines = [PrefixCache(capacity_blocks) for _ in range(num_engines)]
        self.prefill = [PrefixCache(capacity_blocks) for _ in range(num_prefill)]
        self.flat: list[int] = blocks.hashes.tolist()
        self.offsets: list[int] = blocks.offsets.tolist()
        self.max_hit_blocks = [(p - 1) // bs for p in prompt]
        self.prompt_blocks = [p // bs for p in prompt]

    def _chain(self, rid: int) -> list[int]:
        return self.flat[self.offsets[rid] : self.offsets[rid + 1]]

    def engine_match(self, g: int, rid: int) -> int:
        """Request ``rid``'s hit on engine ``g`` (tokens), touching nothing."""
        return self.engines[g].match(self._chain(rid), self.max_hit_blocks[rid]) * self.block_size

    def engine_lookup(self, g: int, rid: int) -> int:
        """Request ``rid``'s hit on engine ``g`` (tokens); the blocks become the newest there."""
        return self.engines[g].lookup(self._chain(rid), self.max_hit_blocks[rid]) * self.block_size

    def prefill_match(self, w: int, rid: int) -> int:
        """Request ``rid``'s hit on prefill worker ``w`` (tokens), touching nothing."""
        return self.prefill[w].match(self._chain(rid), self.max_hit_blocks[rid]) * self.block_size

    def prefill_lookup(self, w: int, rid: int) -> int:
        """Request ``rid``'s hit on prefill worker ``w`` (tokens), touching the blocks."""
        return self.prefill[w].lookup(self._chain(rid), self.max_hit_blocks[rid]) * self.block_size

    def prompt_on_engine(self, g: int, rid: int) -> None:
        """Engine ``g`` holds the prompt's blocks (prefilled there, or its KV arrived)."""
        self.engines[g].insert(self._chain(rid)[: self.prompt_blocks[rid]])

    def prompt_on_prefill(self, w: int, rid: int) -> None:
        """Prefill worker ``w`` has computed the prompt's blocks."""
        self.prefill[w].insert(self._chain(rid)[: self.prompt_blocks[rid]])

    def finished_on_engine(self, g: int, rid: int) -> None:
        """Request ``rid`` finished on engine ``g``: its prompt's and output's blocks are there."""
        self.engines[g].insert(self._chain(rid))
