"""A discrete-event simulator of a P/D GPU fleet that scores routing policies.

Step times come from a ``ProfileResult``'s measured tables (``latency``), requests from a trace
or a generator (``workload``, ``trace``), decisions from small policy objects (``policies``),
and the loop itself is in ``events``. ``sweep`` is the library entry point; ``report`` turns
runs into metrics and tables; ``solver.plots.sim`` draws them (matplotlib, imported only there).
"""

from solver.sim.events import ClusterSimulation
from solver.sim.fleet import FleetConfig
from solver.sim.latency import StepLatency
from solver.sim.policies import (
    POLICY_NAMES,
    AlwaysCollocated,
    AlwaysDisaggregated,
    CostModelPolicy,
    OutputPrediction,
    Policy,
    PromptAndQueueThreshold,
    PromptThreshold,
    RouteView,
    make_policy,
    parse_policy_names,
    parse_prediction,
)
from solver.sim.records import SimRecords, littles_law
from solver.sim.report import LatencyStats, PolicyMetrics, SloLimits, format_markdown, format_table, summarize
from solver.sim.sweep import SweepResult, run_sweep, simulate
from solver.sim.trace import read_trace, write_trace
from solver.sim.workload import LengthDistribution, Workload, parse_length_spec, poisson_workload

__all__ = [
    "POLICY_NAMES",
    "AlwaysCollocated",
    "AlwaysDisaggregated",
    "ClusterSimulation",
    "CostModelPolicy",
    "FleetConfig",
    "LatencyStats",
    "LengthDistribution",
    "OutputPrediction",
    "Policy",
    "PolicyMetrics",
    "PromptAndQueueThreshold",
    "PromptThreshold",
    "RouteView",
    "SimRecords",
    "SloLimits",
    "StepLatency",
    "SweepResult",
    "Workload",
    "format_markdown",
    "format_table",
    "littles_law",
    "make_policy",
    "parse_length_spec",
    "parse_policy_names",
    "parse_prediction",
    "poisson_workload",
    "read_trace",
    "run_sweep",
    "simulate",
    "summarize",
    "write_trace",
]
