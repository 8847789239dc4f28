"""A discrete-event simulator of a P/D GPU fleet that scores routing policies.

Step times come from a ``ProfileResult``'s measured tables (``latency``; a run that would read
them beyond their measured ranges is refused unless allowed, ``extrapolation``), each engine's
KV cache in blocks with vLLM's preemption (``kv_pool``), requests from a trace
or a generator (``workload``, ``trace``), decisions from small policy objects (``policies``)
told a predicted output length (``prediction``), and the loop itself is in ``events``.
Prefix reuse: a workload's block-hash chains (``block_hashes``), each GPU's cache
(``prefix_cache``) and the rules of what a hit saves (``prefix_reuse``); ``sessions`` generates
multi-turn conversations and agent loops, closed-loop through ``turn_links``; ``hashed_trace``
reads traces with block hash ids (the Mooncake form).
``sweep`` is the library entry point; ``hindsight`` the hindsight-tuned static baseline;
``report`` turns runs into metrics and tables, ``accuracy`` scores the policies' latency
predictions; ``solver.plots.sim`` draws them (matplotlib, imported only there).
"""

from solver.sim.accuracy import PredictionError
from solver.sim.events import ClusterSimulation
from solver.sim.fleet import FleetConfig
from solver.sim.hindsight import BestStatic, pick_best
from solver.sim.latency import StepLatency
from solver.sim.policies import (
    BEST_STATIC,
    POLICY_NAMES,
    SWEEP_NAMES,
    AlwaysCollocated,
    AlwaysDisaggregated,
    ModelPolicy,
    Policy,
    PolicyAnswer,
    PromptAndQueueThreshold,
    PromptThreshold,
    RouteView,
    make_policy,
    parse_policy_names,
)
from solver.sim.prediction import OutputPrediction, parse_prediction
from solver.sim.records import SimRecords, littles_law
from solver.sim.report import LatencyStats, PolicyMetrics, SloLimits, format_markdown, format_table, summarize
from solver.sim.sweep import SweepEntry, SweepResult, make_policies, run_sweep, simulate
from solver.sim.trace import read_trace, write_trace
from solver.sim.workload import LengthDistribution, Workload, parse_length_spec, poisson_workload

__all__ = [
    "BEST_STATIC",
    "POLICY_NAMES",
    "SWEEP_NAMES",
    "AlwaysCollocated",
    "AlwaysDisaggregated",
    "BestStatic",
    "ClusterSimulation",
    "FleetConfig",
    "LatencyStats",
    "LengthDistribution",
    "ModelPolicy",
    "OutputPrediction",
    "Policy",
    "PolicyAnswer",
    "PolicyMetrics",
    "PredictionError",
    "PromptAndQueueThreshold",
    "PromptThreshold",
    "RouteView",
    "SimRecords",
    "SloLimits",
    "StepLatency",
    "SweepEntry",
    "SweepResult",
    "Workload",
    "format_markdown",
    "format_table",
    "littles_law",
    "make_policies",
    "make_policy",
    "parse_length_spec",
    "parse_policy_names",
    "parse_prediction",
    "pick_best",
    "poisson_workload",
    "read_trace",
    "run_sweep",
    "simulate",
    "summarize",
    "write_trace",
]
