"""The queue-aware model's reason codes, shared by its scalar and its vectorised evaluation.

A decision's reason names the component that favoured the chosen path most
(``pdroute_core.routing.queue_aware``, whose docstring holds the formulas).
"""

from __future__ import annotations

from pdroute_core.routing.types import COLLOCATED, DISAGGREGATED, Decision

REASON_SLO_ONLY = "slo_only_feasible"  # only the chosen path meets the targets
REASON_SLO_NONE = "slo_none_feasible"  # neither does: sent where it misses its targets by less
REASON_PREFILL_QUEUE = "prefill_queue"  # collocated: the prefill pool's wait
REASON_LOCAL_BACKLOG = "local_backlog"  # disaggregated: prompts already pending on the GPU
REASON_LOCAL_FASTER = "local_prefill_faster"  # collocated: chunks cost less than prefill + transfer
REASON_REMOTE_FASTER = "remote_prefill_faster"  # disaggregated: prefill + transfer cost less than chunks
REASON_DECODE = "decode_faster"  # the decode phase differs most (different GPUs)
REASON_HARM = "less_harm"  # the harm to other requests decided
REASONS = (
    REASON_SLO_ONLY,
    REASON_SLO_NONE,
    REASON_PREFILL_QUEUE,
    REASON_LOCAL_BACKLOG,
    REASON_LOCAL_FASTER,
    REASON_REMOTE_FASTER,
    REASON_DECODE,
    REASON_HARM,
)
# Index of the component favouring the chosen path most -> reason, per chosen path. The
# components, in order: the wait ahead, this prompt's prefill, the decode phase, the harm.
COMPONENT_REASON: dict[Decision, tuple[str, str, str, str]] = {
    COLLOCATED: (REASON_PREFILL_QUEUE, REASON_LOCAL_FASTER, REASON_DECODE, REASON_HARM),
    DISAGGREGATED: (REASON_LOCAL_BACKLOG, REASON_REMOTE_FASTER, REASON_DECODE, REASON_HARM),
}
