"""The conformance vectors: requests and the answers the service gives them, for ports to replay.

``build_vectors()`` decides a fixed set of requests exactly as ``POST /route`` does (the same
request schema, the same defaults, the same model built by the same registry) for several
service configurations: both decision models on each shipped params file, and configurations
with a harm weight, an SLO margin, default SLOs and a table of default output lengths set.
Nothing random, nothing from the clock:
the file it writes (``conformance/vectors-v1.json``, by ``pdroute conformance``) is the same
byte for byte on every run, and a test checks the shipped one is current.

Besides the shipped params files, ``TEST_PARAMS`` are params for the vectors alone, kept beside
them in ``conformance/params/``: ``qwen3-8b_h100_sxm_vllm_nvlink_32k`` is Qwen3-8B on H100 SXM
(vLLM 0.24.0, NVLink) profiled to 32k-token prompts, so its forms carry the attention terms
(``prefill_ms_per_token_sq``, ``chunk_ms_per_token_prefix``, derived); it is made by::

    pdroute profile --source aiconfigurator --model Qwen/Qwen3-8B --system h100_sxm --backend vllm \
        --backend-version 0.24.0 --transfer nvlink --tp 1 \
        --prompt-lens 64,128,256,512,1024,2048,4096,8192,16384,32768 \
        --kv-lens 128,512,1024,2048,4096,8192,16384,32768 --batch-sizes 1,4,8,16,32,64,128,256 \
        --decode-batches 4,8,16,32,64,128,256 -o long.json
    pdroute fit long.json -o conformance/params/qwen3-8b_h100_sxm_vllm_nvlink_32k.json

Under those params the requests include ``LONG_CONTEXT`` (prompts of 16k to 32k tokens) too.

Which requests: a few written by hand (the bare minimum, each optional input missing), then,
from a fixed grid of candidates, the first to give each (reason, decision, meets_slo) not yet
seen under that configuration, so every reason each model can give is exercised. Under a
configuration with an output table, requests at each bucket's edges, without and with
predicted_output_len.

Floats are written as Python's ``repr`` (the shortest text that reads back as the same double):
a Python reader gets the exact values; a port compares decisions and reasons exactly and
latencies within a relative 1e-9 (docs/integration.md).
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.http.route_codec import encoder_for
from app.routes.route import decide
from app.schemas.route import RouteRequest
from app.settings import embedded_params_path
from pdroute_core.output_defaults import OutputLenDefaults, parse_table
from pdroute_core.params import CostModelParams
from pdroute_core.request_defaults import RouteDefaults
from pdroute_core.routing import build_model
from pdroute_core.routing.objective import GOODPUT, LATENCY
from pdroute_core.routing.queue_aware import DEFAULT_HARM_WEIGHT, DEFAULT_SLO_MARGIN
from solver.params import load_params

FORMAT = "pdroute-conformance"
VERSION = 1
SHIPPED_PARAMS = (
    "default",
    "qwen3-8b_h200_sxm_vllm_nvlink",
    "qwen3-8b_h100_sxm_vllm_network",
    "qwen3-32b_h100_sxm_vllm_tp2_nvlink",
)
# Params for the vectors alone (the module docstring), beside the vectors in conformance/params/.
TEST_PARAMS = ("qwen3-8b_h100_sxm_vllm_nvlink_32k",)
TEST_PARAMS_DIR = Path(__file__).resolve().parents[2] / "conformance" / "params"
TOLERANCE = {
    "decision": "exact",
    "reason": "exact",
    "meets_slo": "exact",
    "assumed": "exact",
    "admission": "exact",
    "objective": "exact",
    "latency_ms": {
        "relative": 1e-9,
        "note": "t_*_ms, predicted_lateness_ms and breakdown terms; exact in Python (repr floats)",
    },
}


@dataclass(frozen=True)
class ServiceConfig:
    """One service configuration: what ``/params`` reports besides the params document."""

    params: str  # a name of SHIPPED_PARAMS
    model: str
    harm_weight: float = DEFAULT_HARM_WEIGHT
    slo_margin: float = DEFAULT_SLO_MARGIN
    default_output_len: int = 200
    default_ttft_slo_ms: float | None = None
    default_tpot_slo_ms: float | None = None
    output_len_by_prompt: str = ""  # PDROUTE_DEFAULT_OUTPUT_LEN_BY_PROMPT
    objective: str = LATENCY  # PDROUTE_OBJECTIVE

    @property
    def id(self) -> str:
        if self.output_len_by_prompt:
            return f"{self.params}/{self.model}+output-table"
        if self.objective != LATENCY:
            return f"{self.params}/{self.model}+{self.objective}"
        extra = "" if self == ServiceConfig(self.params, self.model) else "+settings"
        return f"{self.params}/{self.model}{extra}"

    @property
    def output_table(self) -> OutputLenDefaults:
        return parse_table(self.output_len_by_prompt, self.default_output_len)

    def settings(self) -> dict[str, Any]:
        """The service settings (``app.settings.Settings`` fields) of this configuration."""
        return {
            "decision_model": self.model,
            "harm_weight": self.harm_weight,
            "slo_margin": self.slo_margin,
            "default_output_len": self.default_output_len,
            "default_ttft_slo_ms": self.default_ttft_slo_ms,
            "default_tpot_slo_ms": self.default_tpot_slo_ms,
            "default_output_len_by_prompt": self.output_len_by_prompt,
            "objective": self.objective,
        }

    def reported(self) -> dict[str, Any]:
        """The settings as ``GET /params`` reports them (the output table as its pairs)."""
        settings = {k: v for k, v in self.settings().items() if k != "decision_model"}
        return {"model": self.model, **settings, "default_output_len_by_prompt": self.output_table.to_json()}


CONFIGS = (
    *(ServiceConfig(name, model) for name in SHIPPED_PARAMS for model in ("design", "queue-aware")),
    ServiceConfig("default", "design", default_output_len=64),
    ServiceConfig(
        "default",
        "queue-aware",
        harm_weight=1.0,
        slo_margin=0.2,
        default_output_len=64,
        default_ttft_slo_ms=500.0,
        default_tpot_slo_ms=40.0,
    ),
    ServiceConfig("default", "queue-aware", output_len_by_prompt="1024:340,2048:80,8192:40"),
    *(
        ServiceConfig(
            name, "queue-aware", objective=GOODPUT, default_ttft_slo_ms=1000.0, default_tpot_slo_ms=50.0
        )
        for name in SHIPPED_PARAMS
    ),
    # The attention terms: the long-context params, plain and under targets a long prompt can meet.
    *(ServiceConfig(name, "queue-aware") for name in TEST_PARAMS),
    *(
        ServiceConfig(
            name, "queue-aware", objective=GOODPUT, default_ttft_slo_ms=8000.0, default_tpot_slo_ms=50.0
        )
        for name in TEST_PARAMS
    ),
)

# A long prompt no path serves in time, 40 prompts queued on a 2-GPU pool past its TTFT target.
_LATE_POOL: dict[str, Any] = {
    "prompt_len": 8192,
    "system_load": 64,
    "decode_batch_size": 64,
    "chunk_size": 512,
    "prefill_queue_requests": 40,
    "prefill_pool_gpus": 2,
    "ttft_slo_ms": 200.0,
    "tpot_slo_ms": 50.0,
}

# Written by hand: the bare minimum (every optional input missing), then one input at a time.
HAND_PICKED: tuple[dict[str, Any], ...] = (
    {"prompt_len": 1, "system_load": 0},
    {"prompt_len": 2048, "system_load": 16},
    {"prompt_len": 2048, "system_load": 16, "predicted_output_len": 1},
    {"prompt_len": 2048, "system_load": 16, "decode_batch_size": 0, "chunk_size": 512},
    {"prompt_len": 2048, "system_load": 16, "prefill_queue_requests": 0},
    {"prompt_len": 2048, "system_load": 16, "cached_prompt_tokens": 2048},
    # Mixed GPUs beside a decode pool: the prompt cached on one GPU and not the other.
    {"prompt_len": 2048, "system_load": 16, "cached_prompt_tokens": 0, "colloc_cached_prompt_tokens": 2000},
    {"prompt_len": 2048, "system_load": 16, "cached_prompt_tokens": 2000, "colloc_cached_prompt_tokens": 0},
    # The prefill GPU it would go to holds most of the prompt, behind a busy pool.
    {
        "prompt_len": 8192,
        "system_load": 16,
        "prefill_queue_requests": 2,
        "prefill_pool_gpus": 2,
        "prefill_cached_prompt_tokens": 8000,
    },
    # Long prompts pending on the collocation GPU: their chunks' attention over their own prompts.
    {"prompt_len": 8192, "system_load": 8, "pending_prefill_tokens": 40_000},
    {
        "prompt_len": 8192,
        "system_load": 8,
        "pending_prefill_tokens": 40_000,
        "pending_prefill_prefix_tokens": 12_000.5,
    },
    # No path in time, four prompts pending on the collocation GPU: under goodput they stand for
    # the prompts that would queue behind this one there.
    {
        "prompt_len": 4096,
        "system_load": 2,
        "decode_batch_size": 2,
        "pending_prefill_tokens": 6000,
        "decode_pending_prefill_tokens": 6000,
        "pending_prefill_requests": 4,
        "prefill_queue_requests": 4,
        "prefill_pool_gpus": 2,
        "ttft_slo_ms": 300.0,
        "tpot_slo_ms": 50.0,
    },
    # An idle decode GPU: under goodput its collocation spares decodes only where at least one
    # will come during its prefill (the gateway's routes in time over two seconds as a rate).
    *(
        {
            "prompt_len": 3000,
            "predicted_output_len": 3,
            "system_load": 0,
            "decode_batch_size": 0,
            "prefill_queue_requests": 1,
            "prefill_pool_gpus": 1,
            "ttft_slo_ms": 4000.0,
            "tpot_slo_ms": 20.0,
            "colloc_feasible_routes": routes,
        }
        for routes in (0, 2, 40)
    ),
    # Only collocation serves it in time on an idle GPU: under goodput not taken where decodes are
    # expected during its prefill (the gateway's rate over a long window) that its chunks would
    # make late.
    *(
        {
            "prompt_len": 4000,
            "predicted_output_len": 5,
            "system_load": 0,
            "decode_batch_size": 0,
            "prefill_queue_requests": 40,
            "prefill_pool_gpus": 1,
            "ttft_slo_ms": 2000.0,
            "tpot_slo_ms": 10.0,
            "colloc_feasible_routes": 0,
            "colloc_arrivals_per_s": rate,
        }
        for rate in (0.5, 50.0)
    ),
    # A busy prefill pool whose engines put every waiting prompt that fits in a step: the prompts
    # that arrive before this one's step starts share it.
    {
        "prompt_len": 300,
        "system_load": 4,
        "prefill_queue_requests": 1,
        "prefill_queue_tokens": 2000,
        "prefill_running_requests": 1,
        "prefill_running_tokens": 2048,
        "prefill_pool_gpus": 1,
        "prefill_arrival_tokens_per_s": 1500.0,
        "prefill_step_tokens": 4096,
    },
    # A decode with little TPOT slack, running beside a short prompt or on its way there: under
    # goodput the prompt is sent to the prefill pool to spare it, unless the decodes beside it
    # (running, and coming during its prefill) are fewer than one and that pool batches its steps
    # and the room in its next step, filled by later prompts, could take the prompt past its TTFT
    # target.
    *(
        {
            "prompt_len": 333,
            "predicted_output_len": 12,
            "system_load": load,
            "decode_batch_size": load,
            "colloc_tpot_slack_ms": 5.0,
            "prefill_queue_requests": 1,
            "prefill_queue_tokens": 725,
            "prefill_running_requests": 1,
            "prefill_pool_gpus": 1,
            "prefill_arrival_tokens_per_s": 300.0,
            "prefill_step_tokens": step,
            "ttft_slo_ms": 1000.0,
            "tpot_slo_ms": 50.0,
        }
        for step, load in ((None, 1), (16_384, 1), (32_768, 0))
    ),
    {"prompt_len": 2048, "system_load": 16, "ttft_slo_ms": 1e6, "tpot_slo_ms": 1e6},
    {"prompt_len": 2048, "system_load": 16, "tpot_slo_ms": 0.001},
    {"prompt_len": 16_777_216, "system_load": 1_000_000, "predicted_output_len": 16_777_216},
    # A busy prefill pool whose running prefills report their prompt tokens (the residual wait).
    {
        "prompt_len": 2048,
        "system_load": 16,
        "prefill_queue_requests": 4,
        "prefill_running_requests": 2,
        "prefill_pool_gpus": 2,
        "prefill_running_tokens": 30_000,
    },
    # ... and how long they have run (the rest of each, not half of it).
    {
        "prompt_len": 2048,
        "system_load": 16,
        "prefill_queue_requests": 4,
        "prefill_running_requests": 2,
        "prefill_pool_gpus": 2,
        "prefill_running_tokens": 30_000,
        "prefill_running_elapsed_ms": 120.5,
    },
    # A decode beside the collocation with 5 ms of TPOT slack left: under goodput the chunks'
    # delay would make it late, so it is disaggregated (less_harm); latency does not read it.
    {
        "prompt_len": 2048,
        "system_load": 16,
        "ttft_slo_ms": 5000.0,
        "tpot_slo_ms": 200.0,
        "colloc_tpot_slack_ms": 5.0,
    },
    # ... unless the prompts already pending beside it take it past 0.9 of its slack by themselves
    # and this short prompt's own chunks would not: that decode is late, or a coin flip, whatever
    # this request does, and the answer is the one without the slack.
    {
        "prompt_len": 64,
        "system_load": 16,
        "ttft_slo_ms": 5000.0,
        "tpot_slo_ms": 200.0,
        "colloc_tpot_slack_ms": 2.0,
        "pending_prefill_tokens": 256,
    },
    # A 1,024-token prompt with 3 output tokens beside 16 decodes under a 15 ms TPOT target, one
    # request a second arriving there: spread over its own 2 steps its chunks look like a stall
    # of every decode's step (less_harm, as without the slack); with their least slack reported,
    # 2 s takes the whole delay (decided as under latency: collocated on the default profile) and
    # 5 ms does not (less_harm).
    *(
        {
            "prompt_len": 1024,
            "predicted_output_len": 3,
            "system_load": 16,
            "ttft_slo_ms": 5000.0,
            "tpot_slo_ms": 15.0,
            "colloc_arrivals_per_s": 1.0,
            **({} if slack is None else {"colloc_tpot_slack_ms": slack}),
        }
        for slack in (None, 2000.0, 5.0)
    ),
    # Only collocation serves this prompt in time (the pool 40 deep), a decode beside it with
    # 11.6 ms of slack: its chunks' 12.2 ms on the default profile pass it, but not were they 10 %
    # shorter: that decode only probably late, collocated. The 32B's 26.9 ms pass it surely, but
    # its pool is past the target even were it 10 % shorter, the request surely lost there, and
    # over 199 steps the chunks leave the other decodes in time: one for one, collocated. Over 3
    # steps under a 20 ms TPOT target the 16 decodes go late too: no path meets the targets.
    # With the second least slack reported the decodes surely late are counted, not estimated:
    # 12 ms, two (refused); 1,000 ms, one (collocated).
    *(
        {
            "prompt_len": 1024,
            "predicted_output_len": out,
            "system_load": 16,
            "prefill_queue_requests": 40,
            "prefill_queue_tokens": 160_000,
            "prefill_running_requests": 4,
            "prefill_pool_gpus": 2,
            "ttft_slo_ms": 2000.0,
            "tpot_slo_ms": tpot,
            "colloc_tpot_slack_ms": 11.6,
            **({} if second is None else {"colloc_tpot_slack2_ms": second}),
        }
        for out, tpot, second in ((200, 200.0, None), (4, 20.0, None), (200, 200.0, 12.0), (4, 20.0, 1000.0))
    ),
    # The 32B's pool 18 deep, within 1.1x of the TTFT target: the request only probably lost
    # there, the decode surely late beside it: no path meets the targets.
    {
        "prompt_len": 1024,
        "system_load": 16,
        "prefill_queue_requests": 18,
        "prefill_queue_tokens": 72_000,
        "prefill_running_requests": 4,
        "prefill_pool_gpus": 2,
        "ttft_slo_ms": 2000.0,
        "tpot_slo_ms": 200.0,
        "colloc_tpot_slack_ms": 11.6,
    },
    # No path meets the targets and the pool's wait is past the TTFT target. Under goodput the
    # collocation GPU, sent no request expected in time lately, serves nobody in time: the
    # request costs nobody there (collocated); with neither GPU serving anyone in time it goes
    # where it is predicted later. Latency reads neither count.
    {**_LATE_POOL, "colloc_feasible_routes": 0},
    {**_LATE_POOL, "colloc_feasible_routes": 0, "decode_feasible_routes": 0},
    # The decode GPU has no prompts of its own to prefill (beside mixed GPUs): the pool feeds it
    # alone, so under goodput its queue counts although late, as under latency.
    {**_LATE_POOL, "decode_pending_prefill_tokens": 0},
    # No path meets a tight TTFT target: it goes where it uses less of the others' targets. Four
    # prompts queued behind it on the pool would each lose much of their 150 ms TTFT target, its
    # chunks little of 64 decodes' 30 ms TPOT target: collocated (in milliseconds of harm, the
    # pool's would look smaller).
    {
        "prompt_len": 4096,
        "system_load": 64,
        "decode_batch_size": 64,
        "chunk_size": 512,
        "prefill_queue_requests": 4,
        "prefill_pool_gpus": 2,
        "ttft_slo_ms": 150.0,
        "tpot_slo_ms": 30.0,
    },
    # A local backlog sends the request away, to a decode GPU with prompts pending (its TPOT share).
    {
        "prompt_len": 2048,
        "system_load": 64,
        "pending_prefill_tokens": 60_000,
        "decode_batch_size": 8,
        "decode_pending_prefill_tokens": 30_000,
    },
)


# Long prompts, where the attention terms weigh: idle and busy GPUs, a backlog, a prefix hit, a
# busy prefill pool, and targets only one path meets.
LONG_CONTEXT: tuple[dict[str, Any], ...] = (
    {"prompt_len": 32768, "system_load": 0},
    {"prompt_len": 16384, "system_load": 0, "chunk_size": 2048, "pending_prefill_tokens": 0},
    {"prompt_len": 32768, "system_load": 32, "chunk_size": 512, "pending_prefill_tokens": 1000},
    {"prompt_len": 24000, "system_load": 16, "cached_prompt_tokens": 16000, "prefill_queue_requests": 0},
    {
        "prompt_len": 32768,
        "system_load": 64,
        "decode_batch_size": 8,
        "decode_context_tokens": 200_000,
        "chunk_size": 2048,
        "prefill_queue_requests": 2,
        "prefill_queue_tokens": 50_000,
        "prefill_pool_gpus": 2,
        "prefill_running_requests": 2,
        "prefill_running_tokens": 60_000,
    },
    {"prompt_len": 32768, "system_load": 8, "ttft_slo_ms": 1500.0, "tpot_slo_ms": 30.0},
    {
        "prompt_len": 32768,
        "system_load": 64,
        "predicted_output_len": 16,
        "ttft_slo_ms": 10.0,
        "tpot_slo_ms": 30.0,
    },
)


def params_path(name: str) -> Path:
    """The file of a params name of the vectors: a shipped one, or one of ``TEST_PARAMS``."""
    if name in TEST_PARAMS:
        return TEST_PARAMS_DIR / f"{name}.json"
    return embedded_params_path().with_name(f"{name}.json")


def _table_requests(config: ServiceConfig) -> list[dict[str, Any]]:
    """With an output table: each bucket's edges without predicted_output_len, then the same
    requests sending the table's value (the same answers)."""
    table = config.output_table
    if not table.by_prompt:
        return []
    lens = sorted({n for bound, _ in table.by_prompt for n in (bound - 1, bound)} | {1, 65_536})
    bare = [{"prompt_len": n, "system_load": 16, "pending_prefill_tokens": 4 * n} for n in lens]
    told = [{**r, "predicted_output_len": table.for_prompt(r["prompt_len"])} for r in bare]
    return bare + told


def _candidates() -> list[dict[str, Any]]:
    """A fixed grid of requests over the inputs that move the decision (1296 of them)."""
    queues: tuple[dict[str, Any], ...] = (
        {},
        {"prefill_queue_requests": 0, "prefill_running_requests": 0, "prefill_pool_gpus": 1},
        {
            "prefill_queue_requests": 40,
            "prefill_queue_tokens": 160_000,
            "prefill_running_requests": 4,
            "prefill_pool_gpus": 2,
        },
    )
    backlogs: tuple[dict[str, Any], ...] = (
        {},
        {"pending_prefill_tokens": 0, "decode_pending_prefill_tokens": 0},
        {"pending_prefill_tokens": 60_000, "colloc_context_tokens": 400_000},
    )
    slos: tuple[dict[str, Any], ...] = (
        {},
        {"ttft_slo_ms": 300.0, "tpot_slo_ms": 25.0},
        {"ttft_slo_ms": 20_000.0, "tpot_slo_ms": 200.0},
        {"ttft_slo_ms": 5.0, "tpot_slo_ms": 1.0},
    )
    out = []
    for prompt_len, load, batch, queue, backlog, cached, slo in itertools.product(
        (64, 1024, 8192), (0, 8, 64), (None, 48), queues, backlogs, (False, True), slos
    ):
        req: dict[str, Any] = {"prompt_len": prompt_len, "system_load": load, "predicted_output_len": 256}
        if batch is not None:
            req["decode_batch_size"] = batch
            req["decode_context_tokens"] = batch * 3000
        if cached:
            req["cached_prompt_tokens"] = prompt_len // 2
        out.append({**req, **queue, **backlog, **slo})
    return out


def _params(name: str) -> CostModelParams:
    return load_params(params_path(name))


def _expected(config: ServiceConfig, params: CostModelParams, requests: list[dict[str, Any]]) -> list[Any]:
    model = build_model(
        config.model,
        params,
        harm_weight=config.harm_weight,
        slo_margin=config.slo_margin,
        objective=config.objective,
    )
    table = config.output_table
    defaults = RouteDefaults(
        config.default_output_len,
        config.default_ttft_slo_ms,
        config.default_tpot_slo_ms,
        table if table.by_prompt else None,
    )
    answers = []
    for body in requests:
        _, b = decide(model, RouteRequest.model_validate(body), defaults)
        answer = encoder_for(type(b)).to_dict(b, model.name, params.params_id, None)
        answers.append({k: v for k, v in answer.items() if k not in ("params_id", "request_id", "model")})
    return answers


def _key(config: ServiceConfig, answer: dict[str, Any]) -> tuple[Any, ...]:
    """What a vector adds: a (reason, decision, meets_slo) not seen yet; under an objective other
    than latency, the admission too (latency's choices as before, the vectors' ids kept)."""
    key = (answer["reason"], answer["decision"], answer.get("meets_slo"))
    return key if config.objective == LATENCY else (*key, answer.get("admission"))


def build_vectors() -> dict[str, Any]:
    """The whole conformance document (see the module docstring)."""
    params = {name: _params(name) for name in (*SHIPPED_PARAMS, *TEST_PARAMS)}
    candidates = _candidates()
    vectors = []
    for config in CONFIGS:
        p = params[config.params]
        long = LONG_CONTEXT if config.params in TEST_PARAMS else ()
        chosen = [*HAND_PICKED, *long, *_table_requests(config)]
        answers = _expected(config, p, chosen)
        seen = {_key(config, a) for a in answers}
        for body, answer in zip(candidates, _expected(config, p, candidates), strict=True):
            if _key(config, answer) not in seen:
                seen.add(_key(config, answer))
                chosen.append(body)
                answers.append(answer)
        for i, (body, answer) in enumerate(zip(chosen, answers, strict=True)):
            vectors.append(
                {"id": f"{config.id}/{i}", "service": config.id, "request": body, "expected": answer}
            )
    return {
        "format": FORMAT,
        "version": VERSION,
        "about": "Requests and the answers POST /route gives them under each service configuration. "
        "A service configuration is what GET /params reports: the params document (under params), "
        "the model, harm_weight, slo_margin and the defaults applied to missing fields.",
        "tolerance": TOLERANCE,
        "params": {name: {"params_id": p.params_id, "document": p.to_dict()} for name, p in params.items()},
        "services": [{"id": c.id, "params": c.params, **c.reported()} for c in CONFIGS],
        "vectors": vectors,
    }


def dumps(document: dict[str, Any]) -> str:
    """The file's text: one-space indent, keys in insertion order, a final newline."""
    return json.dumps(document, indent=1, ensure_ascii=True) + "\n"


def write_vectors(path: Path) -> int:
    """Write the document to ``path``; the number of vectors written."""
    document = build_vectors()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(dumps(document))
    return len(document["vectors"])
