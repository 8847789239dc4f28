"""Exposition text as each engine publishes it (metric names and labels of the engines' own
collectors), with the totals a pod's reading should give."""

from __future__ import annotations

MODEL = "Qwen/Qwen3-8B"


def _vllm_cache_config(engine: str, num_gpu_blocks: str) -> str:
    return (
        f'vllm:cache_config_info{{block_size="16",cache_dtype="auto",calculate_kv_scales="False",'
        f'cpu_offload_gb="0",enable_prefix_caching="True",engine="{engine}",gpu_memory_utilization="0.9",'
        f'is_attention_free="False",num_cpu_blocks="None",num_gpu_blocks="{num_gpu_blocks}",'
        f'num_gpu_blocks_override="None",prefix_caching_hash_algo="sha256",sliding_window="None",'
        f'swap_space="4",swap_space_bytes="4294967296"}} 1.0\n'
    )


def vllm_text(
    running: tuple[float, ...] = (7.0, 5.0),
    waiting: tuple[float, ...] = (2.0, 1.0),
    kv_usage: tuple[float, ...] = (0.25, 0.125),
    num_gpu_blocks: str = "8192",
    prompt_tokens: tuple[float, float] = (123456.0, 65432.0),
    cached_tokens: tuple[float, ...] | None = None,
) -> str:
    """A two-engine (data-parallel) vLLM V1 pod: one series per engine, labelled engine and model_name
    (``prompt_tokens``: each engine's prompt-token counter; ``cached_tokens``: its cached-prompt-token
    counter, absent as in releases before it when None)."""
    cached = ""
    if cached_tokens is not None:
        cached = (
            "# HELP vllm:prompt_tokens_cached_total Number of cached prompt tokens (local + external).\n"
            + "# TYPE vllm:prompt_tokens_cached_total counter\n"
            + "".join(
                f'vllm:prompt_tokens_cached_total{{engine="{i}",model_name="{MODEL}"}} {v!r}\n'
                for i, v in enumerate(cached_tokens)
            )
        )

    def gauge(name: str, doc: str, values: tuple[float, ...]) -> str:
        lines = [f"# HELP {name} {doc}", f"# TYPE {name} gauge"]
        lines += [f'{name}{{engine="{i}",model_name="{MODEL}"}} {v!r}' for i, v in enumerate(values)]
        return "\n".join(lines) + "\n"

    return (
        gauge("vllm:num_requests_running", "Number of requests in model execution batches.", running)
        + gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", waiting)
        + gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", kv_usage)
        + "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig\n"
        + "# TYPE vllm:cache_config_info gauge\n"
        + "".join(_vllm_cache_config(str(i), num_gpu_blocks) for i in range(len(running)))
        + "# HELP vllm:prompt_tokens_total Number of prefill tokens processed.\n"
        + "# TYPE vllm:prompt_tokens_total counter\n"
        + "".join(
            f'vllm:prompt_tokens_total{{engine="{i}",model_name="{MODEL}"}} {v!r}\n'
            for i, v in enumerate(prompt_tokens)
        )
        + cached
        + "# HELP vllm:generation_tokens_total Number of generation tokens processed.\n"
        + "# TYPE vllm:generation_tokens_total counter\n"
        + f'vllm:generation_tokens_total{{engine="0",model_name="{MODEL}"}} 98765.0\n'
        + "# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.\n"
        + "# TYPE vllm:time_to_first_token_seconds histogram\n"
        + f'vllm:time_to_first_token_seconds_bucket{{engine="0",le="0.1",model_name="{MODEL}"}} 3.0\n'
        + f'vllm:time_to_first_token_seconds_bucket{{engine="0",le="+Inf",model_name="{MODEL}"}} 5.0\n'
        + f'vllm:time_to_first_token_seconds_count{{engine="0",model_name="{MODEL}"}} 5.0\n'
        + f'vllm:time_to_first_token_seconds_sum{{engine="0",model_name="{MODEL}"}} 0.9\n'
    )


# vllm_text(): 7 + 5 running, 2 + 1 waiting, KV (0.25 + 0.125) x 8192 blocks x 16 tokens.
VLLM_RUNNING = 12
VLLM_WAITING = 3
VLLM_KV_TOKENS = 49152


def sglang_text(
    running: float = 9.0,
    queue: float = 4.0,
    used_tokens: str = "30000.0",
    transfer: float = 2.0,
    prealloc: float = 1.0,
    prompt_tokens: float = 8128902.0,
) -> str:
    """An SGLang scheduler's gauges (SchedulerMetricsCollector), labelled as SGLang labels them, and
    the tokenizer manager's prompt-token counter (TokenizerMetricsCollector, model_name only)."""
    labels = f'engine_type="unified",model_name="{MODEL}",pp_rank="0",tp_rank="0"'
    rows = (
        ("sglang:num_running_reqs", "The number of running requests.", f"{running!r}"),
        ("sglang:num_used_tokens", "The number of used tokens.", used_tokens),
        ("sglang:token_usage", "The token usage.", "0.15"),
        ("sglang:max_total_num_tokens", "Maximum total number of tokens in the KV cache pool.", "200000.0"),
        ("sglang:num_queue_reqs", "The number of requests in the waiting queue.", f"{queue!r}"),
        (
            "sglang:num_prefill_prealloc_queue_reqs",
            "The number of requests in the prefill prealloc queue.",
            "0.0",
        ),
        (
            "sglang:num_decode_prealloc_queue_reqs",
            "The number of requests in the decode prealloc queue.",
            f"{prealloc!r}",
        ),
        (
            "sglang:num_decode_transfer_queue_reqs",
            "The number of requests in the decode transfer queue.",
            f"{transfer!r}",
        ),
        ("sglang:kv_transfer_speed_gb_s", "The transfer speed of the KV cache in GB/s.", "21.5"),
        ("sglang:gen_throughput", "The generation throughput (token/s).", "1830.2"),
    )
    gauges = "".join(f"# HELP {n} {doc}\n# TYPE {n} gauge\n{n}{{{labels}}} {v}\n" for n, doc, v in rows)
    return (
        gauges
        + "# HELP sglang:prompt_tokens_total Number of prefill tokens processed.\n"
        + "# TYPE sglang:prompt_tokens_total counter\n"
        + f'sglang:prompt_tokens_total{{model_name="{MODEL}"}} {prompt_tokens!r}\n'
        + f'sglang:prompt_tokens_created{{model_name="{MODEL}"}} 1.7645e+09\n'
        + "# HELP sglang:generation_tokens_total Number of generation tokens processed.\n"
        + "# TYPE sglang:generation_tokens_total counter\n"
        + f'sglang:generation_tokens_total{{model_name="{MODEL}"}} 7557572.0\n'
    )


def trtllm_text(running: float = 6.0, waiting: float = 3.0, used_blocks: float = 300.0) -> str:
    """trtllm-serve's iteration gauges (tensorrt_llm/metrics/collector.py), labelled as it labels them."""
    labels = f'engine_type="trtllm",model_name="{MODEL}"'
    rows = (
        ("trtllm_num_requests_running", "Number of active requests", running),
        ("trtllm_num_requests_waiting", "Number of queued requests", waiting),
        ("trtllm_kv_cache_utilization", "KV cache utilization", 0.3),
        ("trtllm_kv_cache_max_blocks", "Maximum number of KV cache blocks", 1000.0),
        ("trtllm_kv_cache_used_blocks", "Number of used KV cache blocks", used_blocks),
        ("trtllm_kv_cache_tokens_per_block", "Number of tokens per KV cache block", 32.0),
        ("trtllm_num_generation_requests", "Number of generation (decode) requests", 5.0),
    )
    return "".join(f"# HELP {n} {doc}\n# TYPE {n} gauge\n{n}{{{labels}}} {v!r}\n" for n, doc, v in rows)


# Some releases (and the Dynamo pass-through of 1.1) publish request histograms only.
TRTLLM_HISTOGRAMS_ONLY = (
    "# HELP trtllm_request_success_total Count of successfully processed requests.\n"
    "# TYPE trtllm_request_success_total counter\n"
    "trtllm_request_success_total"
    f'{{engine_type="trtllm",finished_reason="stop",model_name="{MODEL}"}} 150.0\n'
)
