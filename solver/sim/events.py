"""The discrete-event loop: arrivals, engine steps, prefills and KV transfers in time order.

Events live in one ``heapq`` of ``(time_ms, seq, kind, gpu, request)``; ``seq`` breaks ties in
insertion order, so a run is a pure function of its inputs (no randomness inside). Arrivals
are read from the sorted workload instead of the heap; an arrival at the same instant as a
queued event is handled after it.

Engines (decode and mixed GPUs, ``solver.sim.engine``) run continuous batching; a request
finishing its prefill in a step joins the decode batch after it, one arriving by KV transfer
during a step joins for the next one. A GPU admits at most ``max_num_seqs`` running requests;
the rest wait FIFO. Routing and the gateway's view: ``solver.sim.fleet``.

Prefill GPUs take prompts one at a time (batch size 1, as Dynamo's prefill engines) from one
FIFO queue shared by the pool. When a prefill ends, its KV cache goes over the link into the
decode GPU chosen at arrival; transfers into one GPU run one after another, each taking
``prompt_len * bytes_per_token / bandwidth``.

Run with ``python -m bench.bench_sim`` to time 100,000 requests.
"""

from __future__ import annotations

from collections import deque
from heapq import heappop, heappush

import numpy as np

from solver.errors import InvalidSimConfig
from solver.routing.types import DISAGGREGATED
from solver.sim.engine import EngineGpu
from solver.sim.fleet import FleetConfig
from solver.sim.latency import StepLatency
from solver.sim.policies import Policy, RouteView
from solver.sim.records import SimRecords
from solver.sim.workload import Workload

_STEP_END, _PREFILL_END, _TRANSFER_END = 0, 1, 2


class ClusterSimulation:
    """One run of one policy over one workload on one fleet."""

    def __init__(
        self, fleet: FleetConfig, latency: StepLatency, policy: Policy, *, use_runs: bool = True
    ) -> None:
        self.fleet = fleet
        self.latency = latency
        self.policy = policy
        # False: one event per engine step (slower; the reference the runs are tested against).
        self.use_runs = use_runs

    def run(self, workload: Workload, predicted_output_len: np.ndarray) -> SimRecords:
        """Simulate every request of ``workload`` to completion and return the records."""
        n = workload.num_requests
        if len(predicted_output_len) != n:
            raise InvalidSimConfig("one output-length prediction per request is needed")
        state = _RunState(
            self.fleet, self.latency, self.policy, workload, predicted_output_len, self.use_runs
        )
        state.run()
        return state.records(self.policy.name)


class _RunState:
    """The mutable state of one run (kept apart so ``ClusterSimulation`` can be reused)."""

    def __init__(
        self,
        fleet: FleetConfig,
        latency: StepLatency,
        policy: Policy,
        workload: Workload,
        predicted: np.ndarray,
        use_runs: bool,
    ) -> None:
        n = workload.num_requests
        self.fleet = fleet
        self.lat = latency
        self.policy = policy
        self.arrival_ms: list[float] = (workload.arrival_s * 1000.0).tolist()
        self.prompt: list[int] = workload.prompt_len.tolist()
        self.output: list[int] = workload.output_len.tolist()
        self.predicted: list[int] = np.asarray(predicted, dtype=np.int64).tolist()
        self.first_token = [float("nan")] * n
        self.finish = [float("nan")] * n
        self.is_disagg = [False] * n
        self.was_asked = [False] * n
        self.view_load = [0] * n
        self.view_batch = [0] * n
        self.view_queue = [0] * n
        self.tokens = [0] * n
        self.finish_count = [0] * n
        self.dest = [0] * n  # engine index serving the request's decode
        self.total_tokens = 0
        self.num_prefill_forwards = 0
        self.heap: list[tuple[float, int, int, int, int]] = []
        self.seq = 0
        self.engines = [
            EngineGpu(i, latency, fleet.chunk_size, self.prompt, self.output, use_runs)
            for i in range(fleet.num_engines)
        ]
        if fleet.topology == "conditional":
            self.colloc_pool = self.engines
            self.decode_pool = self.engines
        else:
            self.colloc_pool = self.engines[: fleet.num_mixed]
            self.decode_pool = self.engines[fleet.num_mixed :]
        self.prefill_free = list(range(fleet.num_prefill))  # a heap of idle prefill GPU indices
        self.prefill_queue: deque[int] = deque()
        self.ask_policy = fleet.can_collocate and fleet.can_disaggregate

    # --- the loop ---------------------------------------------------------------------------
    def run(self) -> None:
        heap = self.heap
        arrivals = self.arrival_ms
        n = len(arrivals)
        i = 0
        engines = self.engines
        while True:
            if heap and (i >= n or heap[0][0] <= arrivals[i]):
                t, _, kind, g, rid = heappop(heap)
                if kind == _STEP_END:
                    if rid == engines[g].version:  # else: a run cut short, re-queued
                        self._end_step(engines[g], t)
                elif kind == _PREFILL_END:
                    self._end_prefill(g, rid, t)
                else:
                    self._end_transfer(engines[g], rid, t)
            elif i < n:
                self._arrive(i, arrivals[i])
                i += 1
            else:
                break

    def _push(self, t: float, kind: int, g: int, rid: int) -> None:
        self.seq += 1
        heappush(self.heap, (t, self.seq, kind, g, rid))

    # --- routing ----------------------------------------------------------------------------
    @staticmethod
    def _least_loaded(pool: list[EngineGpu]) -> EngineGpu | None:
        best = None
        for gpu in pool:
            if best is None or gpu.num_assigned < best.num_assigned:
                best = gpu
        return best

    def _arrive(self, rid: int, t: float) -> None:
        colloc = self._least_loaded(self.colloc_pool)
        target = colloc if self.fleet.topology == "conditional" else self._least_loaded(self.decode_pool)
        load = colloc.num_decoding if colloc is not None else 0
        batch = target.num_decoding if target is not None else 0
        depth = len(self.prefill_queue)
        self.view_load[rid], self.view_batch[rid], self.view_queue[rid] = load, batch, depth
        if self.ask_policy:
            self.was_asked[rid] = True
            view = RouteView(self.prompt[rid], self.predicted[rid], load, batch, depth, self.fleet.chunk_size)
            disagg = self.policy.decide(view) == DISAGGREGATED
        else:
            disagg = not self.fleet.can_collocate
        if disagg and target is not None:
            self.is_disagg[rid] = True
            target.num_assigned += 1
            self.dest[rid] = target.index
            self.prefill_queue.append(rid)
            self._start_prefills(t)
        elif colloc is not None:
            colloc.num_assigned += 1
            self.dest[rid] = colloc.index
            self._admit(colloc, rid, True, t)

    # --- engines ----------------------------------------------------------------------------
    def _admit(self, gpu: EngineGpu, rid: int, needs_prefill: bool, t: float) -> None:
        if gpu.num_running >= self.fleet.max_num_seqs:
            gpu.waiting.append((rid, needs_prefill))
            return
        if gpu.run_ends is not None:
            self._push(gpu.cut_run(t), _STEP_END, gpu.index, gpu.version)
        if needs_prefill:
            gpu.add_prefill(rid)
        else:
            gpu.join_decode(rid)
        if not gpu.is_busy:
            self._start_step(gpu, t)

    def _start_step(self, gpu: EngineGpu, t: float) -> None:
        end = gpu.start(t)
        if end is not None:
            self._push(end, _STEP_END, gpu.index, gpu.version)

    def _end_step(self, gpu: EngineGpu, t: float) -> None:
        produced, finished, prefilled = gpu.end_step()
        self.total_tokens += produced
        for rid, tokens in finished:
            self._finish(gpu, rid, t, tokens)
        for rid in prefilled:
            self.first_token[rid] = t
            self.total_tokens += 1
            if self.output[rid] == 1:
                self._finish(gpu, rid, t, 1)
            else:
                gpu.join_decode(rid)
        # Still marked busy while the waiting line is admitted, so the next step is composed
        # once, after every admission.
        self._admit_waiting(gpu, t)
        gpu.is_busy = False
        self._start_step(gpu, t)

    def _admit_waiting(self, gpu: EngineGpu, t: float) -> None:
        waiting = gpu.waiting
        while waiting and gpu.num_running < self.fleet.max_num_seqs:
            rid, needs_prefill = waiting.popleft()
            self._admit(gpu, rid, needs_prefill, t)

    def _finish(self, gpu: EngineGpu, rid: int, t: float, tokens: int) -> None:
        self.finish[rid] = t
        self.finish_count[rid] += 1
        self.tokens[rid] = tokens
        gpu.num_assigned -= 1

    # --- prefill pool and transfers ---------------------------------------------------------
    def _start_prefills(self, t: float) -> None:
        free = self.prefill_free
        queue = self.prefill_queue
        while free and queue:
            g = heappop(free)
            rid = queue.popleft()
            self.num_prefill_forwards += 1
            self._push(t + self.lat.prefill_ms(self.prompt[rid]), _PREFILL_END, g, rid)

    def _end_prefill(self, g: int, rid: int, t: float) -> None:
        heappush(self.prefill_free, g)
        gpu = self.engines[self.dest[rid]]
        start = t if t > gpu.link_free_ms else gpu.link_free_ms
        gpu.link_free_ms = start + self.lat.transfer_ms(self.prompt[rid])
        self._push(gpu.link_free_ms, _TRANSFER_END, gpu.index, rid)
        self._start_prefills(t)

    def _end_transfer(self, gpu: EngineGpu, rid: int, t: float) -> None:
        self.first_token[rid] = t
        self.total_tokens += 1
        if self.output[rid] == 1:
            self._finish(gpu, rid, t, 1)
        else:
            self._admit(gpu, rid, False, t)

    # --- results ----------------------------------------------------------------------------
    def records(self, policy_name: str) -> SimRecords:
        f64, i64 = np.float64, np.int64
        return SimRecords(
            policy=policy_name,
            arrival_ms=np.asarray(self.arrival_ms, dtype=f64),
            first_token_ms=np.asarray(self.first_token, dtype=f64),
            finish_ms=np.asarray(self.finish, dtype=f64),
            prompt_len=np.asarray(self.prompt, dtype=i64),
            output_len=np.asarray(self.output, dtype=i64),
            predicted_output_len=np.asarray(self.predicted, dtype=i64),
            is_disaggregated=np.asarray(self.is_disagg, dtype=np.bool_),
            was_policy_asked=np.asarray(self.was_asked, dtype=np.bool_),
            system_load=np.asarray(self.view_load, dtype=i64),
            decode_batch_size=np.asarray(self.view_batch, dtype=i64),
            prefill_queue_depth=np.asarray(self.view_queue, dtype=i64),
            engine_index=np.asarray(self.dest, dtype=i64),
            tokens_generated=np.asarray(self.tokens, dtype=i64),
            finish_count=np.asarray(self.finish_count, dtype=i64),
            total_tokens_generated=self.total_tokens,
            num_engine_steps=sum(gpu.step_count for gpu in self.engines),
            num_prefill_forwards=self.num_prefill_forwards,
        )
