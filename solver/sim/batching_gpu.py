"""A simulated GPU running continuous-batching steps: its batch, prefill queue and step times.

(The profiler's model runner, which runs real forwards on a real GPU, is ``profiling.engine``.)

Each step runs every decode in flight plus up to ``chunk_size`` prefill tokens taken FIFO from
the prompts admitted here (a step may finish one prompt and start the next). Step times come
from ``StepLatency`` (see ``solver.sim.latency`` for the rules).

Decodes are tracked without touching every request each step: ``step_count`` counts the steps
started; a request that joins the decode batch when ``step_count == s0`` produces one token in
each of steps ``s0+1, s0+2, ...`` and its context during step ``s`` is ``prompt_len + s - s0``.
So the batch's total context is ``kv_offset_sum + b * s`` with ``kv_offset_sum = sum(prompt_len
- s0)``, and a request with ``n`` output tokens (one from the prefill) leaves after step
``s0 + n - 1``, kept in ``finish_heap``.

Decode-only stretches with an unchanged batch (until its next finish) are one *run*: the end
time of each of its steps is computed up front, in the same floating-point operations as one
step at a time, and the event loop sees one event. An admission during a run cuts it after the
step in flight (``version`` tells the loop which event is live), so results are bit-identical
to one event per step.

Gateway figures kept as counters (updated on routing, chunk scheduling and finishes, never by
scanning): ``pending_prefill_tokens`` (prompt tokens routed here for local prefill and not yet
carried by a started step) and, through ``kv_offset_sum``, ``context_tokens(t)``.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import deque
from heapq import heappop, heappush

import numpy as np

from solver.sim.latency import StepLatency

# Runs shorter than this stay single steps (below it a run saves less than it costs); longer
# ones are split to bound their arrays. Up to PY_RUN_STEPS, a run is summed in Python, beyond
# it with numpy (whose per-call cost dominates short runs).
MIN_RUN_STEPS = 8
MAX_RUN_STEPS = 4096
PY_RUN_STEPS = 16
# The window over which a GPU's recent prefill rate is measured for the gateway's view (ms): long
# enough to hold several prompts' chunks at moderate load, short enough to follow load changes
# within a request's decode (a few seconds).
PREFILL_RATE_WINDOW_MS = 2000.0


class BatchingGpu:
    """Live state of one decode or mixed GPU (times in ms, lengths in tokens)."""

    __slots__ = (
        "chunk_size",
        "finish_heap",
        "index",
        "is_busy",
        "kv_offset_sum",
        "latency",
        "link_free_ms",
        "num_assigned",
        "num_decoding",
        "output",
        "pending_prefill_tokens",
        "prefill_log",
        "prefill_log_tokens",
        "prefill_queue",
        "prompt",
        "run_ends",
        "run_start",
        "run_steps",
        "step_batch",
        "step_count",
        "step_prefilled",
        "use_runs",
        "version",
        "waiting",
    )

    def __init__(
        self,
        index: int,
        latency: StepLatency,
        chunk_size: int,
        prompt: list[int],
        output: list[int],
        use_runs: bool = True,
    ) -> None:
        self.index = index
        self.latency = latency
        self.chunk_size = chunk_size
        self.prompt = prompt  # every request's prompt length (shared, read-only)
        self.output = output  # every request's output length (shared, read-only)
        self.use_runs = use_runs
        self.step_count = 0  # engine steps started so far
        self.num_decoding = 0  # sequences in the decode batch
        self.kv_offset_sum = 0  # sum over the decode batch of (prompt_len - join step)
        self.finish_heap: list[tuple[int, int, int]] = []  # (last step, request id, join step)
        self.prefill_queue: deque[list[int]] = deque()  # [request id, tokens done, prompt_len]
        self.waiting: deque[tuple[int, bool]] = deque()  # (request id, needs local prefill)
        self.num_assigned = 0  # requests routed here and not finished
        # Prompt tokens routed here for local prefill, not yet in a started step (the caller
        # adds a prompt when it routes it here; ``start`` takes each chunk off).
        self.pending_prefill_tokens = 0
        # Prefill chunks started here, (start time ms, tokens), for ``prefill_tokens_per_s``.
        self.prefill_log: deque[tuple[float, int]] = deque()
        self.prefill_log_tokens = 0  # tokens held in prefill_log
        self.link_free_ms = 0.0  # when the KV link into this GPU is next free
        self.is_busy = False  # a step (or run) is in flight
        self.step_batch = 0  # decodes in the step in flight
        self.step_prefilled: list[int] = []  # requests whose prefill ends with the step in flight
        self.run_steps = 1  # steps covered by the event in flight
        self.run_start = 0  # step_count before the run in flight
        self.run_ends: list[float] | None = None  # end time of each step of a run in flight
        self.version = 0  # the step-end event carrying this version is the live one

    @property
    def num_running(self) -> int:
        """Requests holding a batch slot: decoding, prefilling, or finishing a prefill now."""
        return self.num_decoding + len(self.prefill_queue) + len(self.step_prefilled)

    def context_tokens(self, t: float) -> int:
        """KV tokens the running decodes read in the step in flight at ``t`` (in the next step
        when idle): ``sum(prompt_len + s - s0)`` over the batch, ``s`` that step's number."""
        s = self.step_count
        ends = self.run_ends
        if ends is not None:  # a run in flight: which of its steps is running at t
            s = self.run_start + min(bisect_right(ends, t), len(ends) - 1) + 1
        return self.kv_offset_sum + self.num_decoding * s

    def prefill_tokens_per_s(self, t: float, window_ms: float) -> float:
        """Prompt tokens per second prefilled here in the steps started in ``(t - window_ms, t]``:
        the past only, as a gateway counting what it routed or a scrape of an engine's counter
        sees it. Entries older than the window are dropped (``t`` never decreases)."""
        log = self.prefill_log
        horizon = t - window_ms
        while log and log[0][0] <= horizon:
            self.prefill_log_tokens -= log.popleft()[1]
        return self.prefill_log_tokens * 1000.0 / window_ms

    def add_prefill(self, rid: int) -> None:
        """Queue request ``rid``'s prompt for chunked prefill here."""
        self.prefill_queue.append([rid, 0, self.prompt[rid]])

    def join_decode(self, rid: int) -> None:
        """Request ``rid`` (first token out) joins the batch from the next step started."""
        s = self.step_count
        self.num_decoding += 1
        self.kv_offset_sum += self.prompt[rid] - s
        heappush(self.finish_heap, (s + self.output[rid] - 1, rid, s))

    def start(self, t: float) -> float | None:
        """Start the next step (or run) at ``t``; its end time, or None when there is no work."""
        b = self.num_decoding
        queue = self.prefill_queue
        if b == 0 and not queue:
            return None
        self.step_batch = b
        self.is_busy = True
        if not queue and self.use_runs:
            steps = self.finish_heap[0][0] - self.step_count
            if steps >= MIN_RUN_STEPS:
                return self._start_run(t, b, min(steps, MAX_RUN_STEPS))
        self.step_count += 1
        lat = self.latency
        budget = self.chunk_size
        chunk = 0
        alone_ms = 0.0
        done_now: list[int] = []
        while queue and budget > 0:
            entry = queue[0]
            rid, done, length = entry
            take = length - done if length - done < budget else budget
            if b == 0:
                alone_ms += lat.prefill_chunk_ms(done, take)
            budget -= take
            chunk += take
            if done + take == length:
                queue.popleft()
                done_now.append(rid)
            else:
                entry[1] = done + take
        if b:
            dur = lat.decode_fn(b)(self.kv_offset_sum / b + self.step_count)
            if chunk:
                dur += lat.interference_ms(chunk, b)
        else:
            dur = alone_ms
        self.pending_prefill_tokens -= chunk
        if chunk:
            self.prefill_log.append((t, chunk))
            self.prefill_log_tokens += chunk
        self.step_prefilled = done_now
        self.run_steps = 1
        return t + dur

    def _start_run(self, t: float, b: int, steps: int) -> float:
        """``steps`` decode-only steps; end times accumulated left to right, like single steps."""
        s = self.step_count
        offset = self.kv_offset_sum / b
        fn = self.latency.decode_fn(b)
        if steps <= PY_RUN_STEPS:
            ends: list[float] = []
            for step in range(s + 1, s + steps + 1):
                t = t + fn(offset + step)
                ends.append(t)
        else:
            kv = offset + np.arange(s + 1, s + steps + 1, dtype=np.float64)
            # cumsum adds in order, so each end has the bits of t + d1 + d2 + ... step by step.
            ends = np.concatenate(([t], fn.many(kv))).cumsum()[1:].tolist()
        self.run_start = s
        self.step_count = s + steps
        self.run_steps = steps
        self.run_ends = ends
        return ends[-1]

    def cut_run(self, t: float) -> float:
        """End the run in flight after its step in flight at ``t``; the new end time."""
        ends = self.run_ends
        if ends is None:
            raise RuntimeError("no run in flight")  # a caller bug, never a user error
        in_flight = min(bisect_right(ends, t), len(ends) - 1)
        self.step_count = self.run_start + in_flight + 1
        self.run_steps = in_flight + 1
        self.run_ends = None
        self.version += 1
        return ends[in_flight]

    def end_step(self) -> tuple[int, list[tuple[int, int]], list[int]]:
        """Close the step (or run) in flight: ``(decode tokens produced, [(request, tokens
        generated)] of the requests that finished, requests whose prefill ended)``.

        The caller emits the prefilled requests' first token and finishes them or calls
        ``join_decode`` before admitting anything else (they no longer count as running).
        """
        s = self.step_count
        produced = self.step_batch * self.run_steps
        self.run_ends = None
        finished: list[tuple[int, int]] = []
        heap = self.finish_heap
        while heap and heap[0][0] <= s:
            _, rid, joined = heappop(heap)
            self.num_decoding -= 1
            self.kv_offset_sum -= self.prompt[rid] - joined
            finished.append((rid, 1 + s - joined))
        prefilled = self.step_prefilled
        self.step_prefilled = []
        self.step_batch = 0
        return produced, finished, prefilled
