"""The discrete-event loop: arrivals, engine steps, prefills and KV transfers in time order.

Events live in one ``heapq`` of ``(time_ms, seq, kind, gpu, request)``; ``seq`` breaks ties in
insertion order, so a run is a pure function of its inputs (no randomness inside). Arrivals
are read from the sorted workload instead of the heap; an arrival at the same instant as a
queued event is handled after it.

Engines (decode and mixed GPUs, ``solver.sim.batching_gpu``) run continuous batching as vLLM's
v1 scheduler does; a request finishing its prefill in a step joins the decode batch after it,
one arriving by KV transfer is admitted at the engine's next step boundary, seen at the one
after and makes its first token in the decode step that follows. A GPU admits at most
``max_num_seqs`` running requests; the rest wait FIFO. Local prompts and transferred requests
share one waiting line, in arrival order, as in vLLM's scheduler, which takes its waiting
queue in order while a step's token budget lasts (``while token_budget > 0``), after the running
requests (a running prefill's chunk takes what the decodes leave): a transfer is admitted only
once every prompt that reached the GPU before it has started and a step has budget left beside
the last one's final chunk (``BatchingGpu.takes_transfer``); prompts that reach the GPU after a
waiting transfer wait behind it. Routing and the gateway's view: ``solver.sim.fleet``.

Prefill GPUs take prompts one at a time (batch size 1, as Dynamo's prefill engines), queued as
``FleetConfig.prefill_queue`` says (``solver.sim.prefill_pool``). When a prefill ends, its KV
cache goes over the link into the decode GPU chosen at arrival; transfers into one GPU run one
after another, each taking ``prompt_len * bytes_per_token / bandwidth``.

A disaggregated request's first token is read from the decode engine (``first_token =
"decode-engine"``) or from the prefill engine when its pass ends (``"prefill-engine"``, a proxy
streaming that token; a one-token output then finishes there and never reaches a decode GPU).

The gateway's view (``RouteView``) is read from counters kept up to date as work moves (the
prefill pool's queued and running prompt tokens here, each engine's pending prefill tokens
and decode context in ``solver.sim.batching_gpu``), so building it costs the same at any load.

Closed-loop turns (``Workload.links``, ``solver.sim.turn_links``): a follow-up request is not
read from the sorted arrivals but pushed as an event when its previous turn finishes (or is
shed), think time later; its recorded arrival is that time.

Prefix caches (``FleetConfig.prefix_cache_tokens``, when the workload carries block hashes):
each GPU skips the prompt tokens it holds, a transfer moves only what the decode GPU lacks, and
the view reports the decode target's hit; the rules are in ``solver.sim.prefix_reuse``. Without
caches nothing of it runs.

A policy's answer may say that no path meets the SLO (``is_infeasible``) and what to do with
it (``admission``). With ``shed=True`` the gateway drops the request when the answer says
``shed`` (an answer without ``admission``: when it is infeasible): it never enters the fleet,
has no first token nor finish (NaN in the records) and counts as an SLO miss.

KV capacity (``FleetConfig.kv_capacity_tokens``): each engine GPU's blocks are kept by
``solver.sim.kv_pool`` (vLLM's v1 rules: per-step allocation, recompute preemption of the
request admitted last, a transferred request admitted only when blocks for its whole KV are
free, waiting FCFS). A preempted request's first token stays the one it had; the tokens it
re-prefills count once more in ``num_recomputed_tokens``, never twice in the tokens generated.

Before a run, ``solver.sim.extrapolation`` refuses a workload or fleet that would read a table
beyond the profile's measured ranges, unless ``FleetConfig.allow_extrapolation``.

Run with ``python -m bench.bench_sim`` to time 100,000 requests.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from heapq import heappop, heappush

import numpy as np

from pdroute_core.routing.types import DISAGGREGATED
from solver.errors import InvalidSimConfig
from solver.sim.batching_gpu import PREFILL_RATE_WINDOW_MS, BatchingGpu
from solver.sim.calibrating import LearningPolicy
from solver.sim.extrapolation import range_problems, refusal
from solver.sim.fleet import FleetConfig
from solver.sim.kv_pool import KvPool
from solver.sim.latency import StepLatency
from solver.sim.policies import Policy, RouteView
from solver.sim.prefill_pool import PrefillPool
from solver.sim.prefix_reuse import PrefixReuse
from solver.sim.records import SimRecords, view_columns
from solver.sim.report import SloLimits
from solver.sim.workload import Workload

_STEP_END, _PREFILL_END, _TRANSFER_END, _ARRIVAL = 0, 1, 2, 3


def check_run(
    latency: StepLatency, prompt: Sequence[int], output: Sequence[int], fleet: FleetConfig
) -> int | None:
    """Refuse (``InvalidSimConfig``) a run beyond the profile's measured ranges unless the fleet
    allows it, or with a request whose context no engine GPU's KV capacity holds; the KV
    capacity in force (tokens per engine GPU, None: unlimited). Callers may check before a run
    (the CLI does); every run checks again."""
    capacity = fleet.kv_capacity_in_force(latency.kv_capacity_tokens)
    if not fleet.allow_extrapolation:
        problems = range_problems(latency, prompt, output, fleet, capacity)
        if problems:
            raise InvalidSimConfig(refusal(problems))
    if capacity is not None and prompt:
        longest = max(p + o - 1 for p, o in zip(prompt, output, strict=True))
        usable = capacity // fleet.block_size * fleet.block_size
        if longest > usable:
            raise InvalidSimConfig(
                f"kv_capacity_tokens: a request's context of {longest:,} tokens does not fit the {usable:,} "
                f"tokens ({capacity // fleet.block_size:,} blocks of {fleet.block_size}) one engine GPU "
                "holds; raise the capacity or shorten the requests"
            )
    return capacity


class ClusterSimulation:
    """One run of one policy over one workload on one fleet."""

    def __init__(
        self,
        fleet: FleetConfig,
        latency: StepLatency,
        policy: Policy,
        *,
        use_runs: bool = True,
        slo: SloLimits | None = None,
        shed: bool = False,
    ) -> None:
        self.fleet = fleet
        self.latency = latency
        self.policy = policy
        # False: one event per engine step (slower; the reference the runs are tested against).
        self.use_runs = use_runs
        self.slo = slo or SloLimits()  # shown to the policy in every view
        self.shed = shed  # drop the requests the policy answers infeasible

    def run(self, workload: Workload, predicted_output_len: np.ndarray) -> SimRecords:
        """Simulate every request of ``workload`` to completion and return the records."""
        n = workload.num_requests
        if len(predicted_output_len) != n:
            raise InvalidSimConfig("one output-length prediction per request is needed")
        state = self.prepare(workload, predicted_output_len)
        state.run()
        return state.records(self.policy.name)

    def prepare(self, workload: Workload, predicted_output_len: np.ndarray) -> RunState:
        """The state of a run not yet started (``run`` calls its ``run()``; tests inspect it)."""
        return RunState(self, workload, predicted_output_len)


class RunState:
    """The mutable state of one run (kept apart so ``ClusterSimulation`` can be reused)."""

    def __init__(self, sim: ClusterSimulation, workload: Workload, predicted: np.ndarray) -> None:
        n = workload.num_requests
        fleet = sim.fleet
        latency = sim.latency
        use_runs = sim.use_runs
        self.fleet = fleet
        self.lat = latency
        self.policy = sim.policy
        self.ttft_slo_ms = sim.slo.ttft_ms
        self.tpot_slo_ms = sim.slo.tpot_ms
        self.shed = sim.shed
        self.arrival_ms: list[float] = (workload.arrival_s * 1000.0).tolist()
        # Closed-loop turns: previous request -> (follow-up, think ms); the sorted arrivals
        # then hold only the requests that follow nothing (``open_ids``, in arrival order).
        self.follow_up: dict[int, tuple[int, float]] = {}
        self.open_ids: list[int] | None = None
        links = workload.links
        if links is not None:
            think_ms = (links.think_s * 1000.0).tolist()
            pairs = zip(links.follow_up.tolist(), links.previous.tolist(), think_ms, strict=True)
            for nxt, prev, ms in pairs:
                self.follow_up[prev] = (nxt, ms)
            released = set(links.follow_up.tolist())
            self.open_ids = [r for r in range(n) if r not in released]
        self.prompt: list[int] = workload.prompt_len.tolist()
        self.output: list[int] = workload.output_len.tolist()
        self.predicted: list[int] = np.asarray(predicted, dtype=np.int64).tolist()
        self.first_token = [float("nan")] * n
        self.finish = [float("nan")] * n
        self.prefill_start = [float("nan")] * n  # when a prefill GPU started the request's pass
        self.is_disagg = [False] * n
        self.was_asked = [False] * n
        self.views: list[RouteView] = []  # what the gateway saw, per arrival
        nan = float("nan")
        self.predicted_ttft = [nan] * n  # the policy's predictions (NaN: none)
        self.predicted_e2e = [nan] * n
        self.is_infeasible = [False] * n
        self.is_shed = [False] * n
        self.tokens = [0] * n
        self.finish_count = [0] * n
        self.dest = [0] * n  # engine index serving the request's decode
        self.total_tokens = 0
        self.num_prefill_forwards = 0
        self.num_extrapolated_forwards = 0  # prefill-pool passes beyond the measured prompt grid
        self.first_from_prefill = fleet.first_token == "prefill-engine"
        self.heap: list[tuple[float, int, int, int, int]] = []
        self.seq = 0
        self.kv_capacity_tokens = check_run(latency, self.prompt, self.output, fleet)
        self.engines = [
            BatchingGpu(
                i,
                latency,
                fleet.max_num_batched_tokens,
                self.prompt,
                self.output,
                use_runs,
                self._kv_pool(),
                counts_beyond=fleet.allow_extrapolation,
            )
            for i in range(fleet.num_engines)
        ]
        # Per engine: the requests routed there over the last PREFILL_RATE_WINDOW_MS, oldest
        # first (``_feasible_routes``).
        self.routed_recently: list[deque[int]] = [deque() for _ in range(fleet.num_engines)]
        # The requests routed to the prefill pool over the last PREFILL_RATE_WINDOW_MS, oldest
        # first, and their prompt tokens (``_pool_arrival_rate``; kept where the pool batches).
        self.pool_routed: deque[int] = deque()
        self.pool_routed_tokens = 0
        if fleet.topology == "conditional":
            self.colloc_pool = self.engines
            self.decode_pool = self.engines
        else:
            self.colloc_pool = self.engines[: fleet.num_mixed]
            self.decode_pool = self.engines[fleet.num_mixed :]
        self.pool = PrefillPool(
            fleet.num_prefill, fleet.prefill_queue_discipline, self.prompt, fleet.prefill_batch_tokens
        )
        self.ask_policy = fleet.can_collocate and fleet.can_disaggregate
        capacity = fleet.prefix_cache_capacity(latency.kv_capacity_tokens)
        self.reuse: PrefixReuse | None = None
        if workload.blocks is not None and capacity is not None:
            num_engines = len(self.engines)
            self.reuse = PrefixReuse(workload.blocks, self.prompt, num_engines, fleet.num_prefill, capacity)
        self.is_affine = self.reuse is not None and fleet.decode_choice == "prefix-affinity"
        self.cached = [0] * n  # the decode target's hit at routing (the view's cached_prompt_tokens)
        self.skipped = [0] * n  # prompt tokens the prefill did not compute (a hit where it ran)
        # A policy that learns from finished requests (solver.sim.calibrating) is told ids and outcomes.
        self.learner = sim.policy if isinstance(sim.policy, LearningPolicy) else None

    def _kv_pool(self) -> KvPool | None:
        cap = self.kv_capacity_tokens
        return None if cap is None else KvPool(cap, self.fleet.block_size)

    # --- the loop ---------------------------------------------------------------------------
    def run(self) -> None:
        heap = self.heap
        ids = self.open_ids
        arrivals = self.arrival_ms if ids is None else [self.arrival_ms[r] for r in ids]
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
                elif kind == _TRANSFER_END:
                    self._end_transfer(engines[g], rid, t)
                else:
                    self._arrive(rid, t)
            elif i < n:
                self._arrive(i if ids is None else ids[i], arrivals[i])
                i += 1
            else:
                break

    def _push(self, t: float, kind: int, g: int, rid: int) -> None:
        self.seq += 1
        heappush(self.heap, (t, self.seq, kind, g, rid))

    # --- routing ----------------------------------------------------------------------------
    @staticmethod
    def _least_loaded(pool: list[BatchingGpu]) -> BatchingGpu | None:
        best = None
        for gpu in pool:
            if best is None or gpu.num_assigned < best.num_assigned:
                best = gpu
        return best

    def _affine(self, pool: list[BatchingGpu], rid: int, t: float) -> BatchingGpu | None:
        """The GPU of ``pool`` with the least prefix-affinity cost (``solver.sim.prefix_reuse``)."""
        reuse = self.reuse
        if reuse is None:
            return self._least_loaded(pool)
        prompt = self.prompt[rid]
        best = None
        best_cost = 0
        for gpu in pool:
            uncached = prompt - reuse.engine_match(gpu.index, rid)
            cost = uncached + gpu.pending_prefill_tokens + gpu.context_tokens(t)
            if best is None or cost < best_cost:
                best, best_cost = gpu, cost
        return best

    def _feasible_routes(self, gpu: BatchingGpu, t: float) -> int | None:
        """Requests routed to ``gpu`` (to prefill or to decode there) over the last
        ``PREFILL_RATE_WINDOW_MS`` that the policy answered would make their targets, or whose
        first token came within the TTFT target: what a gateway knows of its own answers and
        the tokens it streamed. None without a TTFT target."""
        slo = self.ttft_slo_ms
        if slo == math.inf:
            return None
        routed = self.routed_recently[gpu.index]
        horizon = t - PREFILL_RATE_WINDOW_MS
        while routed and self.arrival_ms[routed[0]] <= horizon:
            routed.popleft()
        infeasible, first, arrival = self.is_infeasible, self.first_token, self.arrival_ms
        return sum(1 for rid in routed if not infeasible[rid] or first[rid] - arrival[rid] <= slo)

    def _pool_arrival_rate(self, t: float) -> float | None:
        """Prompt tokens per second routed to the prefill pool over the last
        ``PREFILL_RATE_WINDOW_MS`` (what a gateway counts of its own routes), where the pool's
        GPUs put several prompts in a step; None where each runs one prompt a pass."""
        if not self.fleet.prefill_batch_tokens:
            return None
        routed, horizon = self.pool_routed, t - PREFILL_RATE_WINDOW_MS
        while routed and self.arrival_ms[routed[0]] <= horizon:
            self.pool_routed_tokens -= self.prompt[routed.popleft()]
        return self.pool_routed_tokens * 1000.0 / PREFILL_RATE_WINDOW_MS

    def _arrive(self, rid: int, t: float) -> None:
        conditional = self.fleet.topology == "conditional"
        if self.is_affine:
            colloc = self._affine(self.colloc_pool, rid, t)
            target = colloc if conditional else self._affine(self.decode_pool, rid, t)
        else:
            colloc = self._least_loaded(self.colloc_pool)
            target = colloc if conditional else self._least_loaded(self.decode_pool)
        reuse = self.reuse
        cached = 0
        colloc_cached = None  # reported only where the collocation GPU is not the decode target
        if reuse is not None and target is not None:
            cached = reuse.engine_match(target.index, rid)
            self.cached[rid] = cached
        if reuse is not None and colloc is not None and colloc is not target:
            colloc_cached = reuse.engine_match(colloc.index, rid)
        prefill_cached = None  # the hit on the prefill GPU it would be placed on, where known
        if reuse is not None and self.fleet.num_prefill > 0:
            worker = self.pool.next_worker()
            if worker is not None:
                prefill_cached = reuse.prefill_match(worker, rid)
        load = colloc_kv = pending = waiting = pending_prompts = 0
        rate = target_rate = pending_prefix = 0.0
        if colloc is not None:
            load = colloc.num_decoding
            colloc_kv = colloc.context_tokens(t)
            pending = colloc.pending_prefill_tokens
            if pending:
                pending_prefix = colloc.pending_prefix_tokens()
                pending_prompts = colloc.pending_prefill_requests()
            waiting = len(colloc.waiting)
            rate = colloc.prefill_tokens_per_s(t, PREFILL_RATE_WINDOW_MS)
        if target is colloc:
            batch, target_kv, target_pending, target_rate = load, colloc_kv, pending, rate
        elif target is not None:
            batch, target_kv = target.num_decoding, target.context_tokens(t)
            target_pending = target.pending_prefill_tokens
            target_rate = target.prefill_tokens_per_s(t, PREFILL_RATE_WINDOW_MS)
        else:
            batch = target_kv = target_pending = 0
        num_prefill = self.fleet.num_prefill
        pool = self.pool
        view = RouteView(
            self.prompt[rid],
            self.predicted[rid],
            load,
            batch,
            pool.num_queued,
            self.fleet.max_num_batched_tokens,
            colloc_kv,
            pending,
            waiting,
            target_kv,
            target_pending,
            pool.queued_tokens,
            pool.num_running,
            pool.running_tokens,
            num_prefill,
            self.ttft_slo_ms,
            self.tpot_slo_ms,
            rate,
            target_rate,
            cached,
            None,
            None,
            None if colloc is None else self._feasible_routes(colloc, t),
            None if target is None else self._feasible_routes(target, t),
            colloc_cached,
            prefill_cached,
            pending_prefix,
            pending_prompts,
            self._pool_arrival_rate(t),
            self.fleet.prefill_batch_tokens or None,
        )
        self.views.append(view)
        if self.ask_policy:
            self.was_asked[rid] = True
            learner = self.learner
            answer = self.policy.decide(view) if learner is None else learner.decide_for(rid, view)
            if answer.predicted_ttft_ms is not None:
                self.predicted_ttft[rid] = answer.predicted_ttft_ms
            if answer.predicted_e2e_ms is not None:
                self.predicted_e2e[rid] = answer.predicted_e2e_ms
            if answer.is_infeasible:
                self.is_infeasible[rid] = True
                if self.shed and answer.is_shed:  # the gateway drops it: it never enters the fleet
                    self.is_shed[rid] = True
                    if self.follow_up:
                        self._release(rid, t)
                    return
            disagg = answer.decision == DISAGGREGATED
        else:
            disagg = not self.fleet.can_collocate
        dest = target if disagg and target is not None else colloc
        if dest is not None and self.ttft_slo_ms != math.inf:  # read only with a TTFT target
            self.routed_recently[dest.index].append(rid)
        if disagg and target is not None:
            self.is_disagg[rid] = True
            if reuse is not None:
                reuse.engine_lookup(target.index, rid)  # the decode GPU will use these blocks
            target.num_assigned += 1
            self.dest[rid] = target.index
            self.pool.place(rid)
            if self.fleet.prefill_batch_tokens:
                self.pool_routed.append(rid)
                self.pool_routed_tokens += self.prompt[rid]
            self._start_prefills(t)
        elif colloc is not None:
            colloc.num_assigned += 1
            if reuse is not None:
                self.skipped[rid] = reuse.engine_lookup(colloc.index, rid)
            colloc.pending_prefill_tokens += self.prompt[rid] - self.skipped[rid]
            self.dest[rid] = colloc.index
            self._admit(colloc, rid, True, t)

    # --- engines ----------------------------------------------------------------------------
    def _admit(
        self, gpu: BatchingGpu, rid: int, needs_prefill: bool, t: float, is_head: bool = False
    ) -> None:
        """Admit ``rid`` to ``gpu``, or queue it in the waiting line (``is_head``: it is the
        line's head, already checked by ``_admit_waiting``)."""
        if not is_head and (
            gpu.num_running >= self.fleet.max_num_seqs
            or gpu.waiting
            or not (needs_prefill or gpu.takes_transfer())
            or (gpu.kv is not None and not (needs_prefill or gpu.can_take_remote(rid, t)))
        ):  # no slot, someone waits ahead, prompts ahead of a transfer, or its KV has no blocks
            gpu.waiting.append((rid, needs_prefill))
            return
        if gpu.run_ends is not None:
            self._push(gpu.cut_run(t), _STEP_END, gpu.index, gpu.version)
        if needs_prefill:
            gpu.add_prefill(rid, self.skipped[rid])
        else:
            gpu.add_remote(rid)
        if not gpu.is_busy:
            self._start_step(gpu, t)

    def _start_step(self, gpu: BatchingGpu, t: float) -> None:
        end = gpu.start(t)
        if end is not None:
            self._push(end, _STEP_END, gpu.index, gpu.version)

    def _end_step(self, gpu: BatchingGpu, t: float) -> None:
        produced, finished, prefilled, first = gpu.end_step()
        self.total_tokens += produced
        if not self.first_from_prefill:
            for rid in first:
                self.first_token[rid] = t
        reuse = self.reuse
        for rid, tokens in finished:
            if reuse is not None:
                reuse.finished_on_engine(gpu.index, rid)
            self._finish(gpu, rid, t, tokens)
        first_token = self.first_token
        resumed = gpu.resumed  # empty unless KV capacity preempted something
        for rid in prefilled:
            if first_token[rid] != first_token[rid]:  # NaN: a re-prefill keeps the first token
                first_token[rid] = t
            self.total_tokens += 1
            if reuse is not None:
                reuse.prompt_on_engine(gpu.index, rid)
            if self.output[rid] - resumed.get(rid, 0) == 1:
                self._finish(gpu, rid, t, gpu.finish_prefilled(rid) + 1)
            else:
                gpu.join_decode(rid)
        # Still marked busy while the waiting line is admitted, so the next step is composed
        # once, after every admission.
        self._admit_waiting(gpu, t)
        gpu.boundary()
        gpu.is_busy = False
        self._start_step(gpu, t)

    def _admit_waiting(self, gpu: BatchingGpu, t: float) -> None:
        waiting = gpu.waiting
        while waiting and gpu.num_running < self.fleet.max_num_seqs:
            rid, needs_prefill = waiting[0]
            if not (needs_prefill or (gpu.takes_transfer() and gpu.can_take_remote(rid, t))):
                break  # FCFS: the head waits for the prompts ahead and for blocks, everyone behind it
            waiting.popleft()
            self._admit(gpu, rid, needs_prefill, t, is_head=True)

    def _finish(self, gpu: BatchingGpu, rid: int, t: float, tokens: int) -> None:
        self.finish[rid] = t
        self.finish_count[rid] += 1
        self.tokens[rid] = tokens
        gpu.num_assigned -= 1
        if self.follow_up:
            self._release(rid, t)
        if self.learner is not None:
            start, first, out = self.arrival_ms[rid], self.first_token[rid], self.output[rid]
            tpot = (t - first) / (out - 1) if out > 1 else None
            self.learner.observe(rid, first - start, tpot, t - start, out)

    def _release(self, rid: int, t: float) -> None:
        """Request ``rid`` is done (finished or shed): its follow-up turn arrives think time later."""
        nxt = self.follow_up.get(rid)
        if nxt is not None:
            rid_next, think_ms = nxt
            self.arrival_ms[rid_next] = t + think_ms
            self._push(t + think_ms, _ARRIVAL, 0, rid_next)

    # --- prefill pool and transfers ---------------------------------------------------------
    def _start_prefills(self, t: float) -> None:
        started = self.pool.take_startable()
        k = 0
        while k < len(started):  # one pass per worker: its prompts are adjacent
            g = started[k][0]
            end = k + 1
            while end < len(started) and started[end][0] == g:
                end += 1
            self._start_pass(g, [rid for _, rid in started[k:end]], t)
            k = end

    def _start_pass(self, g: int, rids: list[int], t: float) -> None:
        """Prefill GPU ``g`` starts one pass over ``rids``' prompts at ``t``; they all end with it.
        Each prompt costs its own pass (of the rest over a cached prefix on a hit); a pass of
        several pays the pass's fixed cost once (``StepLatency.pass_fixed_ms``)."""
        lat = self.lat
        reuse = self.reuse
        self.num_prefill_forwards += 1
        pass_ms = 0.0
        for i, rid in enumerate(rids):
            prompt = self.prompt[rid]
            self.prefill_start[rid] = t
            if lat.is_extrapolated(prompt):  # only when allowed: the range check refuses it otherwise
                self.num_extrapolated_forwards += 1
            hit = 0 if reuse is None else reuse.prefill_lookup(g, rid)
            if hit:  # the rest over the cached prefix
                self.skipped[rid] = hit
                ms = lat.chunk_pass_ms(hit, prompt - hit)
            else:
                ms = lat.prefill_ms(prompt)
            pass_ms = ms if i == 0 else pass_ms + max(0.0, ms - lat.pass_fixed_ms)
        for rid in rids:
            self._push(t + pass_ms, _PREFILL_END, g, rid)

    def _end_prefill(self, g: int, rid: int, t: float) -> None:
        self.pool.finish(g, rid)
        if self.reuse is not None:
            self.reuse.prompt_on_prefill(g, rid)
        gpu = self.engines[self.dest[rid]]
        if self.first_from_prefill:
            self.first_token[rid] = t
            if self.output[rid] == 1:  # the proxy has the whole answer: no transfer
                self.total_tokens += 1
                self._finish(gpu, rid, t, 1)
                self._start_prefills(t)
                return
        start = t if t > gpu.link_free_ms else gpu.link_free_ms
        gpu.link_free_ms = start + self.lat.transfer_ms(self.prompt[rid] - self.cached[rid])
        self._push(gpu.link_free_ms, _TRANSFER_END, gpu.index, rid)
        self._start_prefills(t)

    def _end_transfer(self, gpu: BatchingGpu, rid: int, t: float) -> None:
        if self.reuse is not None:
            self.reuse.prompt_on_engine(gpu.index, rid)
        self._admit(gpu, rid, False, t)

    # --- results ----------------------------------------------------------------------------
    def records(self, policy_name: str) -> SimRecords:
        f64, i64 = np.float64, np.int64
        engines = self.engines
        pools = [gpu.kv for gpu in engines if gpu.kv is not None]
        for gpu in engines:
            for rid in gpu.lost_hits:  # given up as its blocks were not free (BatchingGpu.add_prefill)
                self.skipped[rid] = 0
        return SimRecords(
            policy=policy_name,
            arrival_ms=np.asarray(self.arrival_ms, dtype=f64),
            first_token_ms=np.asarray(self.first_token, dtype=f64),
            finish_ms=np.asarray(self.finish, dtype=f64),
            prefill_start_ms=np.asarray(self.prefill_start, dtype=f64),
            prompt_len=np.asarray(self.prompt, dtype=i64),
            output_len=np.asarray(self.output, dtype=i64),
            predicted_output_len=np.asarray(self.predicted, dtype=i64),
            is_disaggregated=np.asarray(self.is_disagg, dtype=np.bool_),
            was_policy_asked=np.asarray(self.was_asked, dtype=np.bool_),
            **view_columns(self.views),
            predicted_ttft_ms=np.asarray(self.predicted_ttft, dtype=f64),
            predicted_e2e_ms=np.asarray(self.predicted_e2e, dtype=f64),
            is_infeasible=np.asarray(self.is_infeasible, dtype=np.bool_),
            is_shed=np.asarray(self.is_shed, dtype=np.bool_),
            engine_index=np.asarray(self.dest, dtype=i64),
            tokens_generated=np.asarray(self.tokens, dtype=i64),
            finish_count=np.asarray(self.finish_count, dtype=i64),
            total_tokens_generated=self.total_tokens,
            num_engine_steps=sum(gpu.step_count for gpu in self.engines),
            num_prefill_forwards=self.num_prefill_forwards,
            num_extrapolated_steps=self.num_extrapolated_forwards
            + sum(gpu.num_extrapolated_steps for gpu in self.engines),
            cached_prompt_tokens=None if self.reuse is None else np.asarray(self.cached, dtype=i64),
            prefix_hit_tokens=None if self.reuse is None else np.asarray(self.skipped, dtype=i64),
            extrapolated={
                "T_prefill": self.num_extrapolated_forwards + sum(gpu.num_extrapolated for gpu in engines),
                "T_decode": sum(gpu.num_extrapolated_decode for gpu in engines),
                "T_interference": sum(gpu.num_extrapolated_interference for gpu in engines),
                "T_chunk_prefix": sum(gpu.num_extrapolated_chunk_prefix for gpu in engines),
            },
            allow_extrapolation=self.fleet.allow_extrapolation,
            kv_capacity_tokens=self.kv_capacity_tokens,
            num_preemptions=sum(kv.num_preemptions for kv in pools),
            num_recomputed_tokens=sum(kv.num_recomputed_tokens for kv in pools),
        )
