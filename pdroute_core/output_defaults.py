"""``OutputLenDefaults``: the output length assumed for a request that gives none, by prompt length.

An operator sets a table of ``min_prompt_len:tokens`` items (``PDROUTE_DEFAULT_OUTPUT_LEN_BY_PROMPT``,
e.g. ``"1024:340,2048:80"``): a request whose prompt has at least ``min_prompt_len`` tokens (the
largest such bound) is assumed to ask for ``tokens`` output tokens; a prompt shorter than every
bound gets the plain ``default`` (``PDROUTE_DEFAULT_OUTPUT_LEN``). The simulator showed the
queue-aware model decides much better on such per-bucket means than on one fleet-wide mean
(docs/simulation.md, "With a per-bucket mean"); ``solver.sim.prediction.bucket_means`` computes
one from a trace.

The service (``app.routes.route``) and the gateway client's local tier (``pdroute_client``) both
apply this one class, so both assume the same length for the same request.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

from pdroute_core.bounds import MAX_OUTPUT_LEN, MAX_PROMPT_LEN
from pdroute_core.errors import PdrouteError

SETTING = "PDROUTE_DEFAULT_OUTPUT_LEN_BY_PROMPT"


class InvalidOutputTable(PdrouteError, ValueError):
    """A table of default output lengths that cannot be used (the message names the bad item).

    A ``ValueError`` too, so a pydantic validator reports its message as the field's error.
    """


@dataclass(frozen=True)
class OutputLenDefaults:
    """The default output length (tokens) of a request, by its prompt length (tokens).

    ``by_prompt`` holds ``(min_prompt_len, tokens)`` pairs sorted by ``min_prompt_len``, each
    bound distinct; empty means every request gets ``default``.
    """

    default: int
    by_prompt: tuple[tuple[int, int], ...] = ()
    _bounds: tuple[int, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        bounds = tuple(b for b, _ in self.by_prompt)
        if any(a >= b for a, b in pairwise(bounds)):
            raise InvalidOutputTable(f"{SETTING}: bounds must be sorted and distinct, got {list(bounds)}")
        object.__setattr__(self, "_bounds", bounds)

    def for_prompt(self, prompt_len: int) -> int:
        """The output length assumed for a prompt of ``prompt_len`` tokens: the entry with the
        largest ``min_prompt_len <= prompt_len``, else ``default``."""
        i = bisect_right(self._bounds, prompt_len)
        return self.by_prompt[i - 1][1] if i else self.default

    def to_json(self) -> list[list[int]]:
        """The table as ``/params`` carries it: ``[[min_prompt_len, tokens], ...]`` (empty when off)."""
        return [[b, t] for b, t in self.by_prompt]

    @classmethod
    def from_json(
        cls, default: int, value: Any, where: str = "default_output_len_by_prompt"
    ) -> OutputLenDefaults:
        """The table of a ``to_json`` value; raise ``InvalidOutputTable`` naming ``where`` otherwise."""
        if not isinstance(value, list):
            raise InvalidOutputTable(f"{where}: expected a list of [min_prompt_len, tokens] pairs")
        pairs = []
        for i, item in enumerate(value):
            if (
                not isinstance(item, list)
                or len(item) != 2
                or any(isinstance(v, bool) or not isinstance(v, int) for v in item)
            ):
                raise InvalidOutputTable(
                    f"{where}[{i}]: expected [min_prompt_len, tokens] integers, got {item!r}"
                )
            pairs.append(_checked(item[0], item[1], f"{where}[{i}]"))
        return cls(default, _sorted_distinct(pairs, where))


def _checked(bound: int, tokens: int, where: str) -> tuple[int, int]:
    if not 0 <= bound <= MAX_PROMPT_LEN:
        raise InvalidOutputTable(f"{where}: min_prompt_len must be in [0, {MAX_PROMPT_LEN}], got {bound}")
    if not 1 <= tokens <= MAX_OUTPUT_LEN:
        raise InvalidOutputTable(f"{where}: tokens must be in [1, {MAX_OUTPUT_LEN}], got {tokens}")
    return bound, tokens


def _sorted_distinct(pairs: list[tuple[int, int]], where: str) -> tuple[tuple[int, int], ...]:
    ordered = sorted(pairs)
    for (a, _), (b, _) in pairwise(ordered):
        if a == b:
            raise InvalidOutputTable(f"{where}: min_prompt_len {a} given twice")
    return tuple(ordered)


def parse_table(text: str, default: int) -> OutputLenDefaults:
    """The table of the setting's text, ``"1024:340,2048:80"`` (items in any order; blank: off).

    Raises ``InvalidOutputTable`` (one line naming the setting and the bad item) for an item that
    is not ``int:int``, a negative bound, tokens outside ``[1, MAX_OUTPUT_LEN]`` or a bound given twice.
    """
    if not text.strip():
        return OutputLenDefaults(default)
    pairs = []
    for item in text.split(","):
        item = item.strip()
        bound_text, colon, tokens_text = item.partition(":")
        try:
            if not colon:
                raise ValueError
            bound, tokens = int(bound_text), int(tokens_text)
        except ValueError:
            raise InvalidOutputTable(
                f"{SETTING}: item {item!r} is not min_prompt_len:tokens (two integers)"
            ) from None
        pairs.append(_checked(bound, tokens, f"{SETTING}: item {item!r}"))
    return OutputLenDefaults(default, _sorted_distinct(pairs, SETTING))


def format_table(table: OutputLenDefaults) -> str:
    """The setting's text of ``table`` (``parse_table`` reads it back)."""
    return ",".join(f"{b}:{t}" for b, t in table.by_prompt)
