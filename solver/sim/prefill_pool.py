"""The prefill pool: its workers, their queues and the placement of each prompt.

Each worker runs one prompt per forward pass (batch size 1, unchunked). Three disciplines
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

    def __init__(self, num_workers: int, discipline: str, prompt: list[int]) -> None:
        self.discipline = discipline
        self.prompt = prompt  # every request's prompt length (shared, read-only)
        self.is_shared = discipline == "shared"
        num_queues = 1 if self.is_shared else num_workers
        self.queues: list[deque[int]] = [deque() for _ in range(max(num_queues, 1))]
        self.free: list[int] = list(range(num_workers))  # a heap of idle worker indices (shared)
        self.is_busy = [False] * num_workers
        self.load_tokens = [0] * num_workers  # per worker: prompt tokens queued there and running
        self.next_worker = 0  # round-robin's next pick
        self.num_queued = 0
        self.queued_tokens = 0
        self.num_running = 0
        self.running_tokens = 0

    def place(self, rid: int) -> int | None:
        """Queue request ``rid``; the worker it is placed on (None: the shared queue)."""
        tokens = self.prompt[rid]
        self.num_queued += 1
        self.queued_tokens += tokens
        if self.is_shared:
            self.queues[0].append(rid)
            return None
        if self.discipline == "round-robin":
            worker = self.next_worker
            self.next_worker = (worker + 1) % len(self.is_busy)
        else:
            loads = self.load_tokens
            worker = min(range(len(loads)), key=loads.__getitem__)
        self.load_tokens[worker] += tokens
        self.queues[worker].append(rid)
        return worker

    def take_startable(self) -> list[tuple[int, int]]:
        """``(worker, request)`` pairs to start now: each idle worker with a queued prompt."""
        started: list[tuple[int, int]] = []
        if self.is_shared:
            queue, free = self.queues[0], self.free
            while free and queue:
                started.append((heappop(free), queue.popleft()))
        else:
            for worker, queue in enumerate(self.queues):
                if queue and not self.is_busy[worker]:
                    started.append((worker, queue.popleft()))
        for worker, rid in started:
            tokens = self.prompt[rid]
            self.is_busy[worker] = True
            self.num_queued -= 1
            self.queued_tokens -= tokens
            self.num_running += 1
            self.running_tokens += tokens
            if self.is_shared:
                self.load_tokens[worker] += tokens
        return started

    def finish(self, worker: int, rid: int) -> None:
        """Worker ``worker`` ends request ``rid``'s prefill and is free."""
        tokens = self.prompt[rid]
        self.is_busy[worker] = False
        self.num_running -= 1
        self.running_tokens -= tokens
        self.load_tokens[worker] -= tokens
        if self.is_shared:
            heappush(self.free, worker)
