"""One engine GPU's KV cache in blocks, and the scheduling rules it imposes (vLLM's v1 scheduler).

vLLM keeps the KV cache in fixed-size blocks of ``block_size`` tokens (16 by default); a request
holds ``ceil(tokens / block_size)`` blocks for the tokens whose KV is cached. Its v1 scheduler
(``vllm/v1/core/sched/scheduler.py``, ``Scheduler.schedule``; blocks from
``KVCacheManager.allocate_slots``, which returns no blocks when fewer are free than the step
needs) allocates per step, for the tokens it schedules in that step. The rules this simulator
follows, as that scheduler does them:

- Running requests first, in the order they were admitted. Each needs blocks for the tokens of
  this step (a decode: one more block when its context crosses a block boundary; a continued
  prefill: the blocks its chunk reaches). When the free blocks do not cover a request, the
  running request admitted last is preempted (FCFS ``running.pop()``), again until it fits or
  the request itself was the one preempted. Recompute mode: the victim's blocks are freed, its
  computed tokens reset to 0, and it is put at the front of the waiting queue
  (``prepend_request``); readmitted, it prefills its prompt plus the tokens generated so far
  (its token list), and the last pass of that prefill samples its next token.
- Waiting requests only in a step that preempted nothing (``if not preempted_reqs``), in FCFS
  order: the head is scheduled only when blocks for the tokens it computes in this step (its
  first chunk) are free; otherwise it and everyone behind it wait (the loop breaks).
- Local prompts and transferred requests wait in that one queue in arrival order; the loop
  runs while the step's token budget lasts, so a request behind a prompt that takes the rest
  of the budget waits for a later step (``solver.sim.events``: ``BatchingGpu.takes_transfer``).
- A request whose KV comes from a prefill engine (a KV connector, status
  ``WAITING_FOR_REMOTE_KVS``) is allocated blocks for its whole transferred KV when it is
  admitted, and waits in the waiting queue until they are free; while its KV loads it is not
  running, so it is never a preemption victim before it joins the batch.

The simulator's composition of a step (``solver.sim.batching_gpu``: every decode first, then
the prefill queue FIFO) stands for vLLM's running-then-waiting order; the prompt at the head of
the prefill queue with tokens done is the running prefill, those behind it with none done are
the waiting ones. The victim order is the admission order itself (``admitted``), a request
counting as admitted when its first chunk is scheduled or, arriving by transfer, when it joins
the decode batch. Where the simulator departs from vLLM: a remote request's blocks are checked
and taken when its transfer ends (vLLM: at the next schedule call, a step later at most), and a
step left with no work by a preemption goes on to the waiting queue at once (vLLM runs it as an
empty step first). A preempted transferred request is recomputed on its decode GPU.

Cost. Nothing scans the batch per step. A decoding request with context ``T_s = o + s`` in step
``s`` (``o = prompt - join step``, ``solver.sim.batching_gpu``) needs a new block in step ``s``
exactly when ``T_s - 1`` is a multiple of ``block_size``, that is when ``s = 1 - o (mod
block_size)``; ``phase[r]`` counts the batch's requests with residue ``r``, so a step's decode
blocks are one lookup and a decode run's are ``b`` per ``block_size`` steps plus a partial sum
(``run_need``, ``run_fit``: at most ``block_size`` additions). A preemption (rare) costs a sort
of the running requests. A transferred request's blocks are taken at admission; when its first
step would by that rule allocate one more (``prompt - 1`` a multiple of ``block_size``), it is
``credit``-ed against that step.
"""

from __future__ import annotations

from heapq import heapify
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from solver.sim.batching_gpu import BatchingGpu


class KvPool:
    """Blocks of one engine GPU (counts in blocks unless named ``tokens``)."""

    __slots__ = (
        "admitted",
        "block_size",
        "credit",
        "next_seq",
        "num_blocks",
        "num_free",
        "num_preemptions",
        "num_recomputed_tokens",
        "phase",
    )

    def __init__(self, capacity_tokens: int, block_size: int) -> None:
        self.block_size = block_size
        self.num_blocks = capacity_tokens // block_size  # a partial block is never usable
        self.num_free = self.num_blocks
        # Decoding requests by the residue (mod block_size) of the steps that need a new block.
        self.phase = [0] * block_size
        self.credit = 0  # blocks already taken for the next step (transferred requests' first)
        self.admitted: dict[int, int] = {}  # running request -> its admission number
        self.next_seq = 0
        self.num_preemptions = 0
        # Tokens whose KV a preemption discarded, computed again when the victim re-prefills.
        self.num_recomputed_tokens = 0

    def blocks(self, tokens: int) -> int:
        """Blocks holding ``tokens`` tokens."""
        return -(-tokens // self.block_size)

    def admit(self, rid: int) -> None:
        """``rid`` becomes running: the last in the admission order (the first victim)."""
        self.admitted[rid] = self.next_seq
        self.next_seq += 1

    def join(self, offset: int) -> None:
        """A request with context ``offset + s`` in step ``s`` joins the decode batch."""
        self.phase[(1 - offset) % self.block_size] += 1

    def leave(self, offset: int) -> None:
        """A request of the decode batch leaves it (finished or preempted)."""
        self.phase[(1 - offset) % self.block_size] -= 1

    def step_need(self, step: int) -> int:
        """New blocks the decode batch needs in step ``step``."""
        return self.phase[step % self.block_size] - self.credit

    def run_need(self, s0: int, steps: int, batch: int) -> int:
        """New blocks the decode batch (``batch`` requests) needs over steps ``s0+1..s0+steps``:
        each request one per ``block_size`` steps, plus the partial cycle's residues."""
        size = self.block_size
        cycles, rest = divmod(steps, size)
        if not rest:
            return cycles * batch
        phase = self.phase
        start = (s0 + 1) % size
        end = start + rest
        if end <= size:
            return cycles * batch + sum(phase[start:end])
        return cycles * batch + sum(phase[start:]) + sum(phase[: end - size])

    def run_fit(self, s0: int, steps: int, batch: int) -> int:
        """The most decode-only steps from ``s0+1``, at most ``steps``, whose blocks are free."""
        size = self.block_size
        free = self.num_free
        if batch * (-(-steps // size)) <= free:
            return steps
        cycles = min(free // batch, steps // size)
        k, used = cycles * size, cycles * batch
        phase = self.phase
        while k < steps:
            n = phase[(s0 + k + 1) % size]
            if used + n > free:
                break
            used += n
            k += 1
        return k


def head_blocks(gpu: BatchingGpu, kv: KvPool) -> int:
    """Blocks the running prefill (the queue's head, when it has tokens done) needs this step."""
    queue = gpu.prefill_queue
    if not queue or not queue[0][1]:
        return 0
    _, done, length = queue[0]
    room = gpu.budget - gpu.num_decoding
    if room <= 0:
        return 0
    take = length - done if length - done < room else room
    return kv.blocks(done + take) - kv.blocks(done)


def make_room(gpu: BatchingGpu) -> tuple[int, bool]:
    """Before the next step of ``gpu``, when its blocks are not free (``BatchingGpu.start``
    checks that first): preempt (recompute) the running requests admitted last until they are.
    Returns the new blocks its decodes need and whether prompts not yet started may start in
    it (not after a preemption, unless nothing else runs)."""
    kv = gpu.kv
    if kv is None:
        raise RuntimeError("make_room needs a KV pool")  # a caller bug, never a user error
    step = gpu.step_count + 1
    need = kv.step_need(step)
    heap = gpu.finish_heap
    queue = gpu.prefill_queue
    by_rid = {entry[1]: entry for entry in heap}
    running = list(by_rid)
    if queue and queue[0][1]:
        running.append(queue[0][0])
    admitted = kv.admitted
    running.sort(key=admitted.__getitem__)
    preempted = False
    while need + head_blocks(gpu, kv) > kv.num_free and running:
        rid = running.pop()
        entry = by_rid.get(rid)
        if entry is None:
            _preempt_prefill(gpu, kv)
        else:
            heap.remove(entry)
            heapify(heap)
            _preempt_decode(gpu, kv, entry, step)
        del admitted[rid]
        kv.num_preemptions += 1
        preempted = True
        need = kv.step_need(step)
    may_start = not preempted or (gpu.num_decoding == 0 and not (queue and queue[0][1]))
    return need, may_start


def _preempt_prefill(gpu: BatchingGpu, kv: KvPool) -> None:
    """The running prefill at the queue's head gives its blocks back and starts over there."""
    entry = gpu.prefill_queue[0]
    done = entry[1]
    kv.num_free += kv.blocks(done)
    kv.num_recomputed_tokens += done
    gpu.pending_prefill_tokens += done
    entry[1] = 0


def _preempt_decode(gpu: BatchingGpu, kv: KvPool, entry: tuple[int, int, int], step: int) -> None:
    """A decoding request (``entry`` of the finish heap, already removed from it) gives its
    blocks back and waits at the front of the prompts not started, to re-prefill its prompt
    plus the tokens it had generated."""
    _, rid, joined = entry
    before = gpu.resumed.get(rid, 0)
    length = gpu.prompt[rid] + before
    offset = length - joined
    gpu.num_decoding -= 1
    gpu.kv_offset_sum -= offset
    kv.leave(offset)
    if joined == step:  # transferred, before its first step: its blocks were taken at admission
        held = kv.blocks(length)
        if (length - 1) % kv.block_size == 0:
            kv.credit -= 1
        gpu.first_pending.remove(rid)
    else:
        held = kv.blocks(offset + step - 1)
    kv.num_free += held
    kv.num_recomputed_tokens += offset + step - 1
    made = before + step - joined
    if made:
        gpu.resumed[rid] = made
    redo = gpu.prompt[rid] + made
    gpu.pending_prefill_tokens += redo
    queue = gpu.prefill_queue
    queue.insert(1 if queue and queue[0][1] else 0, [rid, 0, redo])
