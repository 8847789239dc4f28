"""The gateway's view as a decision model's request: ``RouteView`` -> ``RouteInputs``.

A policy wrapping a ``pdroute_core.routing`` model passes ``route_inputs(view)`` to its ``decide``.
The view's fields carry ``RouteInputs``' names (``pdroute_core.route_fields``), and every
optional input is reported (the simulator knows them all), so the model assumes nothing. The
view differs in two ways, each mapped here: a run without an SLO has infinite targets (no
target: ``None``), and a fleet without prefill GPUs has ``prefill_pool_gpus`` 0 (at least 1
here: without prefill GPUs no policy is asked). The view's ``colloc_num_waiting`` is the
simulator's own (recorded, not an input). ``cached_prompt_tokens`` is the decode target's
prefix-cache hit (``solver.sim.prefix_reuse``; 0 without caches), passed as it is: the model
transfers ``L - h`` disaggregated, and prefills ``L - h`` collocated where the collocation GPU is
the decode target; in ``pools`` the mixed GPU's own hit, ``colloc_cached_prompt_tokens``, sets
what it prefills. ``prefill_cached_prompt_tokens``, the hit on the prefill GPU the request would
be placed on (None where that is not known at arrival), sets what the pool prefills.

The prefill rates are each GPU's prompt tokens in the steps started over the last
``PREFILL_RATE_WINDOW_MS`` (``BatchingGpu.prefill_tokens_per_s``): the past only.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from pdroute_core.request_defaults import RouteDefaults
from pdroute_core.request_defaults import route_inputs as request_route_inputs
from pdroute_core.routing.types import RouteInputs

if TYPE_CHECKING:  # policies.py builds its model policies on route_inputs
    from solver.sim.policies import RouteView

# Every input is in the view: no service default applies (the output length is the predictor's).
_NO_DEFAULTS = RouteDefaults(output_len=1, ttft_slo_ms=None, tpot_slo_ms=None)


def _target(ms: float) -> float | None:
    return ms if math.isfinite(ms) else None


def route_inputs(view: RouteView) -> RouteInputs:
    """The request and fleet state of ``view`` in a decision model's terms (module docstring)."""
    fixed = {
        "prefill_pool_gpus": max(view.prefill_pool_gpus, 1),
        "ttft_slo_ms": _target(view.ttft_slo_ms),
        "tpot_slo_ms": _target(view.tpot_slo_ms),
    }
    return request_route_inputs(view, _NO_DEFAULTS, fixed)
