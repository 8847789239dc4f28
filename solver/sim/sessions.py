"""Sessions: multi-turn conversations and agent loops, whose prompts repeat their context.

A session is a sequence of turns. Turn ``k``'s prompt is the session's whole context so far
(the shared system prompt if it has one, every earlier prompt's new tokens and every earlier
output) followed by ``new`` tokens (the user's message, or a tool's result in an agent loop);
its output is ``output`` tokens. So turn ``k + 1`` repeats turn ``k``'s prompt and output as
its prefix, and sessions that open with the same system prompt share its blocks: what a
prefix cache reuses. Every request carries its block-hash chain (``solver.sim.block_hashes``)
over synthetic token ids: private tokens drawn per session, a system prompt's drawn once.

Parameters (``SessionShape``; token counts are means of log-normal draws with log-space
``sigma``, rounded, at least 1):

- ``sessions``: sessions in the workload; they start as a Poisson process of ``rate``
  sessions per second (``session_workload``'s argument, the load of a sweep);
- ``turns``: mean turns per session (``1 + Poisson(turns - 1)``); a session also ends before a
  turn whose prompt plus output would pass ``max_context`` tokens (the first turn is clipped
  to fit instead);
- ``think_s``: mean think time between a turn's reply and the next prompt (exponential);
- ``first``: new tokens of the first prompt; ``new``: of every later one; ``output``: per turn;
- ``system_share``: share of sessions opening with a shared system prompt of ``system_len``
  tokens, one of ``systems`` distinct ones (picked uniformly);
- ``loop``: ``closed`` (the default) or ``open`` arrivals, below;
- ``reply_s_per_token``: the nominal time per output token that stands in for a turn's reply
  in the open-loop schedule.

Arrivals. Closed loop (``loop=closed``): turn ``k + 1`` arrives ``think`` seconds after turn
``k`` finishes in the simulation (``Workload.links``, ``solver.sim.turn_links``), as a client
waiting for the answer sends it; a slower fleet so delays its own later turns. The workload's
``arrival_s`` for those turns is the open-loop estimate below, which orders the requests and
gives the nominal rate. Open loop (``loop=open``): turn ``k + 1`` arrives ``think +
reply_s_per_token * output_k`` seconds after turn ``k`` arrived, a fixed schedule whatever the
fleet does; a slow fleet then sees a turn arrive before its previous one finished, and that
turn finds less of its prefix cached than a waiting client's would.

Determinism: the same shape and seed give the same sessions at every rate; only the session
start times are divided by ``rate`` (common random numbers across a sweep's loads). The rate
of a closed-loop workload is its sessions' start rate; the requests' rate follows from how
fast the fleet answers.

Spec strings (``parse_session_spec``, the CLI's ``--sessions``): ``SHAPE[:KEY=VALUE,...]`` with
SHAPE ``chat`` or ``agent`` (the defaults in ``SHAPE_DEFAULTS``) and KEY any parameter above,
e.g. ``chat:turns=8,think_s=20,new=120,output=200,system_share=0.9,system_len=400``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from solver.errors import InvalidTrace
from solver.sim.block_hashes import DEFAULT_BLOCK_SIZE, BlockHashes, chain_hashes
from solver.sim.turn_links import TurnLinks
from solver.sim.workload import MAX_TOKENS_PER_REQUEST, Workload

IntArray = npt.NDArray[np.int64]
LOOPS = ("closed", "open")
TOKEN_ID_LIMIT = 1 << 31  # synthetic token ids are drawn in [0, this)


@dataclass(frozen=True)
class SessionShape:
    """How sessions look (module docstring; token counts are means)."""

    kind: str = "chat"  # a label: chat or agent
    sessions: int = 200
    turns: float = 6.0
    think_s: float = 20.0
    first: float = 200.0
    new: float = 100.0
    output: float = 200.0
    system_share: float = 0.9
    system_len: int = 400
    systems: int = 1
    max_context: int = 2048
    sigma: float = 0.5
    reply_s_per_token: float = 0.02
    block_size: int = DEFAULT_BLOCK_SIZE
    loop: str = "closed"

    def __post_init__(self) -> None:
        for name in ("sessions", "systems", "block_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidTrace(f"sessions: {name} must be an integer >= 1, got {value!r}")
        if not self.turns >= 1:
            raise InvalidTrace(f"sessions: turns must be >= 1, got {self.turns!r}")
        for name in ("first", "new", "output"):
            if not getattr(self, name) >= 1:
                raise InvalidTrace(f"sessions: {name} must be >= 1 token, got {getattr(self, name)!r}")
        for name in ("think_s", "reply_s_per_token"):
            value = getattr(self, name)
            if not (value >= 0 and np.isfinite(value)):
                raise InvalidTrace(f"sessions: {name} must be a finite number >= 0, got {value!r}")
        if not 0 <= self.system_share <= 1:
            raise InvalidTrace(f"sessions: system_share must be in [0, 1], got {self.system_share!r}")
        if not 0 <= self.system_len <= MAX_TOKENS_PER_REQUEST:
            raise InvalidTrace(f"sessions: system_len must be in [0, {MAX_TOKENS_PER_REQUEST:,}]")
        if not self.system_len + 2 <= self.max_context <= MAX_TOKENS_PER_REQUEST:
            raise InvalidTrace(
                f"sessions: max_context must be in [system_len + 2, {MAX_TOKENS_PER_REQUEST:,}], "
                f"got {self.max_context!r}"
            )
        if self.loop not in LOOPS:
            raise InvalidTrace(f"sessions: loop must be closed or open, got {self.loop!r}")
        if not self.sigma > 0:
            raise InvalidTrace(f"sessions: sigma must be > 0, got {self.sigma!r}")

    def label(self) -> str:
        return (
            f"{self.kind}(sessions={self.sessions}, turns={self.turns:g}, think_s={self.think_s:g}, "
            f"new={self.new:g}, output={self.output:g}, system={self.system_share:g}x{self.system_len}, "
            f"{self.loop} loop)"
        )


# Conversations: a few turns minutes apart, short messages, long answers, a common system
# prompt. Agent loops: many turns a tool call apart, tool results as the new tokens, short
# outputs (the next call), one shared preamble of instructions and tool definitions.
SHAPE_DEFAULTS: dict[str, SessionShape] = {
    "chat": SessionShape(),
    "agent": SessionShape(
        kind="agent",
        turns=12.0,
        think_s=1.0,
        first=300.0,
        new=150.0,
        output=60.0,
        system_share=1.0,
        system_len=800,
    ),
}


def parse_session_spec(spec: str) -> SessionShape:
    """``chat`` | ``agent``, optionally ``:KEY=VALUE,...`` over the shape's defaults."""
    kind, _, rest = spec.partition(":")
    kind = kind.strip()
    if kind not in SHAPE_DEFAULTS:
        raise InvalidTrace(f"session spec {spec!r}: expected chat or agent, then :KEY=VALUE,... (optional)")
    base = SHAPE_DEFAULTS[kind]
    fields = {f.name: f for f in dataclasses.fields(SessionShape) if f.name != "kind"}
    changes: dict[str, int | float | str] = {}
    for item in (s.strip() for s in rest.split(",") if s.strip()):
        key, eq, value = item.partition("=")
        key = key.strip()
        if not eq or key not in fields:
            raise InvalidTrace(
                f"session spec {spec!r}: {item!r} is not KEY=VALUE with KEY one of {', '.join(fields)}"
            )
        if isinstance(getattr(base, key), str):
            changes[key] = value.strip()
            continue
        is_int = isinstance(getattr(base, key), int)
        try:
            changes[key] = int(value) if is_int else float(value)
        except ValueError:
            kind_name = "an integer" if is_int else "a number"
            raise InvalidTrace(f"session spec {spec!r}: {key} must be {kind_name}, got {value!r}") from None
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]  # keys checked above


def _lognormal(rng: np.random.Generator, mean: float, sigma: float, n: int) -> IntArray:
    draw = rng.lognormal(np.log(mean) - sigma**2 / 2, sigma, n)
    return np.maximum(np.rint(np.minimum(draw, MAX_TOKENS_PER_REQUEST)), 1).astype(np.int64)


def session_workload(shape: SessionShape, rate: float, seed: int = 0) -> Workload:
    """``shape.sessions`` sessions starting at ``rate`` sessions/s, with block hashes."""
    if not (rate > 0 and np.isfinite(rate)):
        raise InvalidTrace(f"rate must be a finite number > 0 sessions/s, got {rate!r}")
    if seed < 0:
        raise InvalidTrace(f"seed must be an integer >= 0, got {seed}")
    rng = np.random.default_rng(seed)
    n_s = shape.sessions
    starts = np.concatenate(([0.0], np.cumsum(rng.exponential(1.0, n_s - 1)))) / rate
    turns = 1 + rng.poisson(shape.turns - 1, n_s)
    has_system = rng.random(n_s) < shape.system_share
    system_of = rng.integers(0, shape.systems, n_s)
    system_tokens = [rng.integers(0, TOKEN_ID_LIMIT, shape.system_len) for _ in range(shape.systems)]
    arrival: list[float] = []
    prompt: list[int] = []
    output: list[int] = []
    chains: list[IntArray] = []
    links: list[tuple[int, int, float]] = []  # (follow-up, previous, think s), in generation order
    bs = shape.block_size
    for s in range(n_s):
        k_max = int(turns[s])
        new = _lognormal(rng, shape.new, shape.sigma, k_max)
        new[0] = _lognormal(rng, shape.first, shape.sigma, 1)[0]
        out = _lognormal(rng, shape.output, shape.sigma, k_max)
        think = rng.exponential(shape.think_s, k_max)
        system = system_tokens[int(system_of[s])] if has_system[s] else np.empty(0, np.int64)
        context = len(system)
        # The first turn always exists: clipped to fit max_context (prompt >= 1, output >= 1).
        new[0] = max(1, min(int(new[0]), shape.max_context - 1 - context))
        out[0] = max(1, min(int(out[0]), shape.max_context - context - int(new[0])))
        lengths: list[tuple[int, int]] = []
        t = float(starts[s])
        for k in range(k_max):
            p = context + int(new[k])
            if k and p + int(out[k]) > shape.max_context:
                break
            lengths.append((p, int(out[k])))
            if k:
                links.append((len(arrival), len(arrival) - 1, float(think[k - 1])))
            arrival.append(t)
            t += float(think[k]) + shape.reply_s_per_token * int(out[k])
            context = p + int(out[k])
        private = rng.integers(0, TOKEN_ID_LIMIT, context - len(system))
        chain = chain_hashes(np.concatenate((system, private)), bs)
        for p, o in lengths:
            prompt.append(p)
            output.append(o)
            chains.append(chain[: (p + o) // bs])
    order = np.argsort(np.asarray(arrival), kind="stable")
    arrival_s = np.asarray(arrival)[order]
    blocks = BlockHashes.from_chains([chains[i] for i in order], bs)
    turn_links = None
    if shape.loop == "closed":
        rank = np.empty(len(order), dtype=np.int64)
        rank[order] = np.arange(len(order))  # generation index -> index in arrival order
        follow_up = np.array([f for f, _, _ in links], dtype=np.int64)
        previous = np.array([p for _, p, _ in links], dtype=np.int64)
        think_s = np.array([s for _, _, s in links], dtype=np.float64)
        turn_links = TurnLinks(rank[follow_up], rank[previous], think_s)
    return Workload(
        arrival_s - arrival_s[0],
        np.asarray(prompt, dtype=np.int64)[order],
        np.asarray(output, dtype=np.int64)[order],
        source=f"sessions {shape.label()} at {rate:g}/s, seed={seed}",
        blocks=blocks,
        links=turn_links,
    )
