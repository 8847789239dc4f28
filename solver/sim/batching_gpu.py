"""A simulated GPU running continuous-batching steps: its batch, prefill queue and step times.

(The profiler's model runner, which runs real forwards on a real GPU, is ``profiling.engine``.)

Scheduling follows vLLM's v1 scheduler. Each step is one forward pass with a token budget,
``max_num_batched_tokens``, shared by decode and prefill tokens: every running decode takes one
token first, and the rest of the budget (``budget - b`` with ``b`` decodes) is the prefill chunk,
taken FIFO from the prompts admitted here (a step may finish one prompt and start the next).
Step times come from ``StepLatency`` (see ``solver.sim.latency`` for the rules): a decode-only
step ``T_decode``, a mixed step one fused pass (``T_decode + T_interference``), a prefill-only
step one pass over its chunk (``T_prefill``), each plus the attention of a continued prompt's
chunk over its prefix.

A disaggregated request reaches this GPU when its KV transfer ends (``add_remote``): it is
admitted at the next step boundary (the end of the step in flight, at once when idle) once the
prompts queued here before it have started (``takes_transfer``; until then it waits in the
waiting line, and the prompts after it behind it), the KV
is seen at the boundary after that (at once when the GPU would otherwise idle: vLLM's engine
loop polls without work), and it joins the decode batch there; its first token is out at the
end of that first decode step, which counts it as a decode token. While such requests are in
these stages no decode run is formed, so each boundary is a real step end.

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

KV capacity (``kv``, a ``solver.sim.kv_pool.KvPool``; None: unlimited, and every line of this
module runs as it did before KV capacity): blocks are taken per step for the tokens it computes
and freed when a request finishes or is preempted, by the rules and at the cost stated in
``solver.sim.kv_pool``. A preempted request re-prefills its prompt plus the ``resumed[rid]``
tokens it had generated; it then behaves as a request with that longer prompt and that many
fewer output tokens.

Extrapolation counters (``num_extrapolated*``): the steps whose lookups went beyond each table's
measured range (``solver.sim.latency``), counted as the step is composed; for a decode run the
number of its steps beyond is found from the first one, in constant time. Only a run allowed
to extrapolate compares (``counts_beyond``): any other was checked up front to stay inside.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import deque
from heapq import heappop, heappush

import numpy as np

from pdroute_core.route_fields import RECENT_WINDOW_MS
from solver.sim.extrapolation import decode_steps_beyond
from solver.sim.kv_pool import KvPool, head_blocks, make_room
from solver.sim.latency import StepLatency

# Runs shorter than this stay single steps (below it a run saves less than it costs); longer
# ones are split to bound their arrays. Up to PY_RUN_STEPS, a run is summed in Python, beyond
# it with numpy (whose per-call cost dominates short runs).
MIN_RUN_STEPS = 8
MAX_RUN_STEPS = 4096
PY_RUN_STEPS = 16
# The window over which a GPU's recent prefill rate is measured for the gateway's view (ms).
PREFILL_RATE_WINDOW_MS = RECENT_WINDOW_MS


class BatchingGpu:
    """Live state of one decode or mixed GPU (times in ms, lengths in tokens)."""

    __slots__ = (
        "budget",
        "counts_beyond",
        "finish_heap",
        "first_pending",
        "hits",
        "index",
        "is_busy",
        "kv",
        "kv_arrived",
        "kv_loading",
        "kv_offset_sum",
        "latency",
        "link_free_ms",
        "lost_hits",
        "num_assigned",
        "num_decoding",
        "num_extrapolated",
        "num_extrapolated_chunk_prefix",
        "num_extrapolated_decode",
        "num_extrapolated_interference",
        "num_extrapolated_steps",
        "output",
        "pending_prefill_tokens",
        "prefill_log",
        "prefill_log_tokens",
        "prefill_queue",
        "prompt",
        "resumed",
        "run_ends",
        "run_start",
        "run_steps",
        "step_batch",
        "step_count",
        "step_first",
        "step_prefilled",
        "use_runs",
        "version",
        "waiting",
    )

    def __init__(
        self,
        index: int,
        latency: StepLatency,
        max_num_batched_tokens: int,
        prompt: list[int],
        output: list[int],
        use_runs: bool = True,
        kv: KvPool | None = None,
        counts_beyond: bool = True,
    ) -> None:
        self.index = index
        self.latency = latency
        self.budget = max_num_batched_tokens  # tokens per step, decodes' and prefill's together
        self.prompt = prompt  # every request's prompt length (shared, read-only)
        self.output = output  # every request's output length (shared, read-only)
        self.use_runs = use_runs
        self.step_count = 0  # engine steps started so far
        self.num_decoding = 0  # sequences in the decode batch
        self.kv_offset_sum = 0  # sum over the decode batch of (prompt_len - join step)
        self.finish_heap: list[tuple[int, int, int]] = []  # (last step, request id, join step)
        self.prefill_queue: deque[list[int]] = deque()  # [request id, tokens done, prompt_len]
        self.waiting: deque[tuple[int, bool]] = deque()  # (request id, needs local prefill)
        # Disaggregated requests: KV arrived during the step in flight (admitted at its end),
        # admitted and loading (seen at the next boundary), joined with the first token due at
        # the end of the next step, and the requests whose first token the step in flight makes.
        self.kv_arrived: list[int] = []
        self.kv_loading: list[int] = []
        self.first_pending: list[int] = []
        self.step_first: list[int] = []
        self.num_extrapolated = 0  # steps with a prefill lookup beyond the measured prompt grid
        self.num_extrapolated_decode = 0  # steps with a decode lookup beyond T_decode
        self.num_extrapolated_interference = 0  # steps with an interference lookup beyond
        self.num_extrapolated_chunk_prefix = 0  # steps with a chunk-prefix lookup beyond
        self.num_extrapolated_steps = 0  # steps with any lookup beyond a table
        # Whether steps are checked against the tables' ranges: a run refused beyond them (not
        # allowed to extrapolate) has none to count, so it skips the comparisons.
        self.counts_beyond = counts_beyond
        self.kv = kv  # the KV blocks (None: unlimited capacity)
        self.resumed: dict[int, int] = {}  # preempted request -> tokens it had generated
        self.num_assigned = 0  # requests routed here and not finished
        # Prompt tokens routed here for local prefill, not yet in a started step (the caller
        # adds a prompt when it routes it here; ``start`` takes each chunk off).
        self.pending_prefill_tokens = 0
        self.hits: dict[int, int] = {}  # queued prompt -> its prefix-cache hit (tokens), until scheduled
        self.lost_hits: list[int] = []  # prompts whose hit was given up (its blocks were not free)
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
        return (
            self.num_decoding
            + len(self.prefill_queue)
            + len(self.step_prefilled)
            + len(self.kv_arrived)
            + len(self.kv_loading)
        )

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

    def pending_prefix_tokens(self) -> float:
        """The mean prefix (tokens) that the prompt tokens pending prefill here attend over: each
        queued prompt's r tokens left after its first d (computed, or cached and taken when it is
        scheduled) sit at d + r / 2 on average, and a prompt waiting for a batch slot has all of
        its tokens left; weighted by r. 0.0 with nothing pending."""
        pairs = 0.0
        tokens = 0
        hits = self.hits
        for rid, done, length in self.prefill_queue:
            if not done and hits:
                done = hits.get(rid, 0)
            left = length - done
            pairs += left * (done + 0.5 * left)
            tokens += left
        for rid, needs_prefill in self.waiting:
            if needs_prefill:
                left = self.prompt[rid]
                pairs += left * (0.5 * left)
                tokens += left
        return pairs / tokens if tokens else 0.0

    def pending_prefill_requests(self) -> int:
        """Prompts pending prefill here: the chunked-prefill queue and those waiting for a slot."""
        return len(self.prefill_queue) + sum(1 for _, needs_prefill in self.waiting if needs_prefill)

    def add_prefill(self, rid: int, cached_tokens: int = 0) -> None:
        """Queue request ``rid``'s prompt for chunked prefill here, from token ``cached_tokens``
        (the prefix found in this GPU's prefix cache: its chunks attend over it, never compute it).

        The hit is taken when the prompt's first chunk is scheduled (``start``). With KV capacity
        the cached prefix's blocks become the request's then, as vLLM takes the cached blocks a
        request hits when it schedules it (a cached block no request holds counts as free here,
        as in vLLM's free queue); when they are not free the hit is given up (``lost_hits``) and
        the whole prompt is computed."""
        if cached_tokens:
            self.hits[rid] = cached_tokens
        self.prefill_queue.append([rid, 0, self.prompt[rid]])

    def join_decode(self, rid: int, *, first_here: bool = False) -> None:
        """Request ``rid`` joins the batch from the next step started: its first token already
        out (a local prefill), or, with ``first_here``, made by that step (a disaggregated
        request, whose last prompt token the step computes as a decode token).

        ``j`` is the step whose end saw the request's first token: it then makes one token per
        step from ``j + 1`` and its context in step ``s`` is ``prompt_len + s - j``."""
        j = self.step_count + 1 if first_here else self.step_count
        kv = self.kv
        if kv is None:
            self.num_decoding += 1
            self.kv_offset_sum += self.prompt[rid] - j
            heappush(self.finish_heap, (j + self.output[rid] - 1, rid, j))
        else:  # a resumed request decodes as one whose prompt holds the tokens it had made
            before = self.resumed.get(rid, 0)
            length = self.prompt[rid] + before
            self.num_decoding += 1
            self.kv_offset_sum += length - j
            heappush(self.finish_heap, (j + self.output[rid] - before - 1, rid, j))
            kv.join(length - j)
            if first_here:
                kv.admit(rid)
                if (length - 1) % kv.block_size == 0:
                    kv.credit += 1  # its first step's block was taken at admission
        if first_here:
            self.first_pending.append(rid)

    def takes_transfer(self) -> bool:
        """Whether a request arriving by KV transfer may be admitted now: no prompt queued here
        has yet to start, and the running one (if any) leaves budget beside its final chunk in
        the next step (vLLM admits waiting requests in order while a step's budget lasts)."""
        queue = self.prefill_queue
        if not queue:
            return True
        if len(queue) > 1:
            return False
        _, done, length = queue[0]
        return done > 0 and length - done < self.budget - self.num_decoding

    def can_take_remote(self, rid: int, t: float) -> bool:
        """Whether blocks for request ``rid``'s whole transferred KV are free at ``t``."""
        kv = self.kv
        if kv is None:
            return True
        free = kv.num_free
        ends = self.run_ends
        if ends is not None:  # a run took its blocks up front: those of its steps not yet started
            started = min(bisect_right(ends, t), len(ends) - 1) + 1
            free += kv.run_need(self.run_start + started, len(ends) - started, self.step_batch)
        return kv.blocks(self.prompt[rid]) <= free

    def finish_prefilled(self, rid: int) -> int:
        """Request ``rid`` ends with the prefill that just finished (its last token): free its
        blocks; the tokens it had generated before that prefill (0 unless it was preempted)."""
        before = self.resumed.pop(rid, 0)
        kv = self.kv
        if kv is not None:
            kv.num_free += kv.blocks(self.prompt[rid] + before)
            kv.admitted.pop(rid, None)
        return before

    def add_remote(self, rid: int) -> None:
        """Request ``rid``'s KV has arrived: admitted at the next step boundary (now when idle)."""
        kv = self.kv
        if kv is not None:  # blocks for the whole transferred KV, checked by can_take_remote
            kv.num_free -= kv.blocks(self.prompt[rid])
        if self.is_busy:
            self.kv_arrived.append(rid)
        else:
            self.kv_loading.append(rid)
            self.boundary()

    def boundary(self) -> None:
        """At a step boundary (or an idle GPU's admission): the loading requests join the batch;
        those admitted at this boundary (``kv_arrived``) start loading. With no other work they
        are seen at once (an idle engine's loop polls the KV without running a step)."""
        if not (self.kv_loading or self.kv_arrived):
            return
        for rid in self.kv_loading:
            self.join_decode(rid, first_here=True)
        self.kv_loading = self.kv_arrived
        self.kv_arrived = []
        if self.kv_loading and self.num_decoding == 0 and not self.prefill_queue:
            loading, self.kv_loading = self.kv_loading, []
            for rid in loading:
                self.join_decode(rid, first_here=True)

    def start(self, t: float) -> float | None:
        """Start the next step (or run) at ``t``; its end time, or None when there is no work."""
        b = self.num_decoding
        queue = self.prefill_queue
        if b == 0 and not queue:
            return None
        kv = self.kv
        need = 0
        may_start = True  # whether prompts not yet started may start in this step
        if kv is not None:  # the step's blocks, preempting when they are not free
            need = kv.phase[(self.step_count + 1) % kv.block_size] - kv.credit
            if need > kv.num_free or (queue and queue[0][1] and need + head_blocks(self, kv) > kv.num_free):
                need, may_start = make_room(self)
                b = self.num_decoding
        self.step_batch = b
        self.is_busy = True
        self.step_first = self.first_pending
        self.first_pending = []
        if not queue and self.use_runs and not self.step_first and not self.kv_loading:
            steps = self.finish_heap[0][0] - self.step_count
            if steps >= MIN_RUN_STEPS:
                steps = min(steps, MAX_RUN_STEPS)
                if kv is not None:  # as many steps as the free blocks carry, taken up front
                    steps = kv.run_fit(self.step_count, steps, b)
                    if steps >= MIN_RUN_STEPS:
                        kv.num_free -= kv.run_need(self.step_count, steps, b)
                        return self._start_run(t, b, steps)
                else:
                    return self._start_run(t, b, steps)
        self.step_count += 1
        if kv is not None:
            kv.num_free -= need
            kv.credit = 0
        lat = self.latency
        has_table = lat.has_chunk_prefix
        prefix_beyond = False
        budget = self.budget - b  # decode tokens first, the rest for prefill
        chunk = 0
        prefix_ms = 0.0
        reach = 0  # the furthest prompt position a prefill lookup of this step reads
        done_now: list[int] = []
        hits = self.hits
        while queue and budget > 0:
            entry = queue[0]
            rid, done, length = entry
            if not done and hits and rid in hits:  # a prefix-cache hit, taken as it is scheduled
                if kv is not None:
                    if not may_start:
                        break
                    held = -(-hits[rid] // kv.block_size)
                    if held <= kv.num_free:
                        kv.num_free -= held
                        kv.admit(rid)
                    else:  # its blocks are gone: computed from the start after all
                        self.pending_prefill_tokens += hits[rid]
                        self.lost_hits.append(rid)
                        hits[rid] = 0
                done = entry[1] = hits.pop(rid)
            take = length - done if length - done < budget else budget
            if kv is not None:  # blocks for the tokens this chunk computes (kv_pool's rules)
                if not done and not may_start:
                    break
                size = kv.block_size  # blocks(done + take) - blocks(done), inline
                grow = (done + take + size - 1) // size - (done + size - 1) // size
                if grow > kv.num_free:
                    break
                kv.num_free -= grow
                if not done:
                    kv.admit(rid)
            if done:
                prefix_ms += lat.prefix_attention_ms(done, take)
                if has_table:
                    if lat.is_chunk_prefix_extrapolated(done, take):
                        prefix_beyond = True
                elif done + take > reach:
                    reach = done + take
            budget -= take
            chunk += take
            if done + take == length:
                queue.popleft()
                done_now.append(rid)
            else:
                entry[1] = done + take
        if kv is not None and not b and not chunk:
            return self._no_step(t)
        context = 0.0
        if b:
            context = self.kv_offset_sum / b + self.step_count
            dur = lat.decode_fn(b)(context)
            if chunk:
                dur += lat.interference_ms(chunk, b) + prefix_ms
        else:
            dur = lat.prefill_ms(chunk) + prefix_ms
            if chunk > reach:
                reach = chunk
        # Only a run allowed beyond the tables can go there (``solver.sim.extrapolation``).
        if self.counts_beyond and (
            prefix_beyond
            or (chunk and reach > lat.max_prompt_len)
            or (b and (context > lat.max_decode_kv or b > lat.max_decode_batch))
            or (b and chunk and (chunk > lat.max_chunk or b > lat.max_interference_batch))
        ):
            self._count_beyond(prefix_beyond, reach, chunk, b, context)
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
        lat = self.latency
        if self.counts_beyond and (b > lat.max_decode_batch or offset + (s + steps) > lat.max_decode_kv):
            beyond = decode_steps_beyond(self.latency, s + 1, s + steps, offset, b)
            self.num_extrapolated_decode += beyond
            self.num_extrapolated_steps += beyond
        return ends[-1]

    def _count_beyond(self, prefix_beyond: bool, reach: int, chunk: int, b: int, context: float) -> None:
        """Count a step with a lookup beyond a table, per table (``solver.sim.latency``)."""
        lat = self.latency
        self.num_extrapolated_steps += 1
        if prefix_beyond:
            self.num_extrapolated_chunk_prefix += 1
        if chunk and lat.is_extrapolated(reach):
            self.num_extrapolated += 1
        if b and lat.is_decode_extrapolated(context, b):
            self.num_extrapolated_decode += 1
        if b and chunk and lat.is_interference_extrapolated(chunk, b):
            self.num_extrapolated_interference += 1

    def _no_step(self, t: float) -> float | None:
        """Nothing can run (the queued prompt's blocks are not free): undo the step. Requests
        whose KV is loading hold blocks and are seen at once (an idle engine polls the KV)."""
        self.step_count -= 1
        self.is_busy = False
        self.step_batch = 0
        self.first_pending = self.step_first + self.first_pending
        self.step_first = []
        if not self.kv_loading:
            return None
        loading, self.kv_loading = self.kv_loading, []
        for rid in loading:
            self.join_decode(rid, first_here=True)
        return self.start(t)

    def cut_run(self, t: float) -> float:
        """End the run in flight after its step in flight at ``t``; the new end time."""
        ends = self.run_ends
        if ends is None:
            raise RuntimeError("no run in flight")  # a caller bug, never a user error
        in_flight = min(bisect_right(ends, t), len(ends) - 1)
        b = self.step_batch
        kv = self.kv
        if kv is not None:  # give back the blocks of the steps that will not run
            kv.num_free += kv.run_need(self.run_start + in_flight + 1, len(ends) - in_flight - 1, b)
        offset = self.kv_offset_sum / b
        last = self.run_start + len(ends)
        if self.counts_beyond and (
            b > self.latency.max_decode_batch or offset + last > self.latency.max_decode_kv
        ):
            beyond = decode_steps_beyond(self.latency, self.run_start + in_flight + 2, last, offset, b)
            self.num_extrapolated_decode -= beyond
            self.num_extrapolated_steps -= beyond
        self.step_count = self.run_start + in_flight + 1
        self.run_steps = in_flight + 1
        self.run_ends = None
        self.version += 1
        return ends[in_flight]

    def end_step(self) -> tuple[int, list[tuple[int, int]], list[int], list[int]]:
        """Close the step (or run) in flight: ``(decode tokens produced, [(request, tokens
        generated)] of the requests that finished, requests whose prefill ended, disaggregated
        requests whose first token the step made)``.

        The caller emits the prefilled requests' first token and finishes them or calls
        ``join_decode`` before admitting anything else (they no longer count as running), admits
        its waiting line, then calls ``boundary`` and starts the next step.
        """
        s = self.step_count
        produced = self.step_batch * self.run_steps
        self.run_ends = None
        finished: list[tuple[int, int]] = []
        heap = self.finish_heap
        kv = self.kv
        if kv is None:
            while heap and heap[0][0] <= s:
                _, rid, joined = heappop(heap)
                self.num_decoding -= 1
                self.kv_offset_sum -= self.prompt[rid] - joined
                finished.append((rid, 1 + s - joined))
        else:  # the same, for resumed requests' longer prompts, and their blocks freed
            resumed = self.resumed
            while heap and heap[0][0] <= s:
                last, rid, joined = heappop(heap)
                before = resumed.pop(rid, 0)
                offset = self.prompt[rid] + before - joined
                self.num_decoding -= 1
                self.kv_offset_sum -= offset
                kv.leave(offset)
                kv.num_free += kv.blocks(offset + last)
                kv.admitted.pop(rid, None)
                finished.append((rid, before + 1 + s - joined))
        prefilled = self.step_prefilled
        self.step_prefilled = []
        self.step_batch = 0
        first = self.step_first
        self.step_first = []
        return produced, finished, prefilled, first
