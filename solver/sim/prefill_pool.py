"""The prefill pool: its workers, their queues and the placement of each prompt.

Each worker runs one prompt per forward pass (batch size 1, unchunked), or with a token budget
(``batch_tokens`` > 0, ``FleetConfig.prefill_batch_tokens``) the queue's head prompts in one
pass while they fit it: vLLM's scheduler on a prefill engine without chunked prefill schedules
every waiting prompt that fits the step's budget, first come first served, and stops at the
first that does not (the first always goes). A pass ends for all its prompts at once, and the
worker is free when it does. Three disciplines
(``solver.sim.fleet``): ``shared`` keeps one FIFO queue for the pool and a worker that comes
free takes its head (lowest-index free worker first); ``round-robin`` and ``least-loaded`` place
each prompt on one worker when it arrives (the next in turn; the fewest prompt tokens queued and
running there, ties to the lowest index) and each worker serves its own FIFO queue. A placed
prompt never moves, so with per-worker queues a prompt can wait behind a long one while another
worker is idle: the cost of picking a worker per request, which a shared queue does not pay.

Counters for the gateway's view are kept as prompts move (``num_queued``, ``queued_tokens``,
``num_running``, ``running_tokens``: the pool's totals).
"""

from __future__ import annotations

from collections import deque
from heapq import heappop, heappush


class PrefillPool:
    """Queues and busy flags of ``num_workers`` prefill GPUs (lengths in tokens)."""

    def __init__(self, num_workers: int, discipline: str, prompt: list[int], batch_tokens: int = 0) -> None:
        self.discipline = discipline
        self.prompt = prompt  # every request's prompt length (shared, read-only)
        self.batch_tokens = batch_tokens  # a pass's token budget (0: one prompt per pass)
        self.in_pass = [0] * num_workers  # prompts in the pass running on each worker
        self.is_shared = discipline == "shared"
        num_queues = 1 if self.is_shared else num_workers
        self.queues: list[deque[int]] = [deque() for _ in range(max(num_queues, 1))]
        self.free: list[int] = list(range(num_workers))  # a heap of idle worker indices (shared)
        self.is_busy = [False] * num_workers
        self.load_tokens = [0] * num_workers  # per worker: prompt tokens queued there and running
        self.next_rr = 0  # round-robin's next pick
        self.num_queued = 0
        self.queued_tokens = 0
        self.num_running = 0
        self.running_tokens = 0

    def next_worker(self) -> int | None:
        """The worker ``place`` would put the next prompt on (None: the shared queue)."""
        if self.is_shared:
            return None
        if self.discipline == "round-robin":
            return self.next_rr
        loads = self.load_tokens
        return min(range(len(loads)), key=loads.__getitem__)

    def place(self, rid: int) -> int | None:
        """Queue request ``rid``; the worker it is placed on (None: the shared queue)."""
        tokens = self.prompt[rid]
        self.num_queued += 1
        self.queued_tokens += tokens
        worker = self.next_worker()
        if worker is None:
            self.queues[0].append(rid)
            return None
        if self.discipline == "round-robin":
            self.next_rr = (worker + 1) % len(self.is_busy)
        self.load_tokens[worker] += tokens
        self.queues[worker].append(rid)
        return worker

    def take_startable(self) -> list[tuple[int, int]]:
        """``(worker, request)`` pairs to start now: each idle worker with a queued prompt takes
        a pass of them (one, or the head prompts that fit ``batch_tokens``), its pairs adjacent."""
        started: list[tuple[int, int]] = []
        if self.is_shared:
            queue, free = self.queues[0], self.free
            while free and queue:
                worker = heappop(free)
                started.extend((worker, rid) for rid in self._take_pass(queue))
        else:
            for worker, queue in enumerate(self.queues):
                if queue and not self.is_busy[worker]:
                    started.extend((worker, rid) for rid in self._take_pass(queue))
        for worker, rid in started:
            tokens = self.prompt[rid]
            self.is_busy[worker] = True
            self.in_pass[worker] += 1
            self.num_queued -= 1
            self.queued_tokens -= tokens
            self.num_running += 1
            self.running_tokens += tokens
            if self.is_shared:
                self.load_tokens[worker] += tokens
        return started

    def _take_pass(self, queue: deque[int]) -> list[int]:
        """The prompts of the next pass from ``queue``: its head, then those after it that fit."""
        rids = [queue.popleft()]
        budget = self.batch_tokens
        if budget:
            prompt = self.prompt
            total = prompt[rids[0]]
            while queue and total + prompt[queue[0]] <= budget:
                total += prompt[queue[0]]
                rids.append(queue.popleft())
        return rids

    def finish(self, worker: int, rid: int) -> None:
        """Worker ``worker`` ends request ``rid``'s prefill; free once its whole pass has ended."""
        tokens = self.prompt[rid]
        self.num_running -= 1
        self.running_tokens -= tokens
        self.load_tokens[worker] -= tokens
        self.in_pass[worker] -= 1
        if self.in_pass[worker]:
            return
        self.is_busy[worker] = False
        if self.is_shared:
            heappush(self.free, worker)
