"""The last tier: a fixed rule that needs neither the service nor its params.

``StaticFallback()`` always collocates (the safe default of a collocated-first fleet);
``StaticFallback(disaggregate_from_prompt_len=N)`` disaggregates prompts of N tokens or more
(long prompts are the ones whose prefill hurts the decodes they would share a GPU with).
"""

from __future__ import annotations

from dataclasses import dataclass

from pdroute_client.query import RouteQuery
from pdroute_core.routing import COLLOCATED, DISAGGREGATED, Decision

REASON_ALWAYS = "static_collocated"
REASON_SHORT = "static_short_prompt"
REASON_LONG = "static_long_prompt"


@dataclass(frozen=True)
class StaticFallback:
    """Collocate, or (with a threshold) disaggregate prompts of at least that many tokens."""

    disaggregate_from_prompt_len: int | None = None  # None: always collocated

    def __post_init__(self) -> None:
        n = self.disaggregate_from_prompt_len
        if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
            raise ValueError(f"disaggregate_from_prompt_len: expected an integer >= 1, got {n!r}")

    def decide(self, query: RouteQuery) -> tuple[Decision, str]:
        """The decision and its reason code for ``query``."""
        n = self.disaggregate_from_prompt_len
        if n is None:
            return COLLOCATED, REASON_ALWAYS
        if query.prompt_len >= n:
            return DISAGGREGATED, REASON_LONG
        return COLLOCATED, REASON_SHORT
