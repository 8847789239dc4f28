"""``/route`` with engine-metrics auto-fill on, under ``wrk``, against bare and against no auto-fill.

    .venv/bin/python -m bench.bench_route --autofill [--seconds 5] [--connections 64] [--rounds 2]

Three servers, one after the other in each round, under the same uvicorn settings: the bare
ASGI app; pdroute (queue-aware) with the caller sending every load field; and pdroute with
``PDROUTE_ENGINES_FILE`` naming a few loopback engine endpoints (vLLM and SGLang exposition
text served by ``EngineStub`` threads of this process, scraped every 250 ms) and a request
naming only ``decode_target``. It prints req/s and the ratios auto-fill/bare (bar >= 0.35, the
service's own ``/route`` bar in ``bench.bench_route``: auto-fill must not take it below) and
auto-fill/no-auto-fill, and checks that the answers really came from the scrape.
"""

from __future__ import annotations

import json
import tempfile
import threading
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from bench.bench_route import QA_BODY, WrkResult, fmt_result, free_port, measure, start_server

AUTOFILL_BODY: dict[str, object] = {
    "prompt_len": 1024,
    "predicted_output_len": 200,
    "decode_target": "m0",
    "ttft_slo_ms": 1000.0,
    "tpot_slo_ms": 50.0,
}
BAR = 0.35  # bench.bench_route's BARS
VLLM_TEXT = (
    "# TYPE vllm:num_requests_running gauge\n"
    'vllm:num_requests_running{engine="0",model_name="m"} 12.0\n'
    "# TYPE vllm:num_requests_waiting gauge\n"
    'vllm:num_requests_waiting{engine="0",model_name="m"} 1.0\n'
    "# TYPE vllm:kv_cache_usage_perc gauge\n"
    'vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.2\n'
    "# TYPE vllm:cache_config_info gauge\n"
    'vllm:cache_config_info{block_size="16",engine="0",num_gpu_blocks="10000"} 1.0\n'
)
SGLANG_TEXT = (
    "# TYPE sglang:num_running_reqs gauge\n"
    'sglang:num_running_reqs{model_name="m"} 2.0\n'
    "# TYPE sglang:num_queue_reqs gauge\n"
    'sglang:num_queue_reqs{model_name="m"} 3.0\n'
    "# TYPE sglang:num_used_tokens gauge\n"
    'sglang:num_used_tokens{model_name="m"} 6000.0\n'
)


class EngineStub:
    """A loopback HTTP server answering every GET with fixed exposition text (a thread)."""

    def __init__(self, text: str) -> None:
        body = text.encode()

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as the engines' own servers

            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("content-type", "text/plain; version=0.0.4")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/metrics"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _check_scraped(engines_file: Path, env: dict[str, str], body: bytes) -> None:
    """Start the auto-fill server once and see an answer whose load fields came from the scrape."""
    port = free_port()
    proc = start_server(["--factory", "app.main:create_app_from_env"], port, env, body)
    try:
        for _ in range(200):
            req = urllib.request.Request(f"http://127.0.0.1:{port}/route", data=body, method="POST")
            with urllib.request.urlopen(req, timeout=5) as r:
                answer = json.loads(r.read())
            if answer["input_sources"]["system_load"]["source"] == "scrape":
                return
            threading.Event().wait(0.05)
        raise SystemExit(f"auto-fill server never answered from the scrape: {answer}")
    finally:
        proc.terminate()
        proc.wait()


def autofill_bench(params: str, connections: int, seconds: float, rounds: int, num_prefill: int = 4) -> bool:
    """Print the auto-fill figures; True when auto-fill/bare meets the bar."""
    stubs = [EngineStub(VLLM_TEXT)] + [EngineStub(SGLANG_TEXT) for _ in range(num_prefill)]
    fleet = {
        "pools": {
            "mixed": [{"id": "m0", "url": stubs[0].url, "kind": "vllm"}],
            "prefill": [{"id": f"p{i}", "url": s.url, "kind": "sglang"} for i, s in enumerate(stubs[1:])],
        }
    }
    env = {
        "PDROUTE_PARAMS_PATH": params,
        "PDROUTE_WATCH_PARAMS": "false",
        "PDROUTE_DECISION_MODEL": "queue-aware",
    }
    results: dict[str, list[tuple[WrkResult, WrkResult]]] = {"bare": [], "no-fill": [], "autofill": []}
    with tempfile.TemporaryDirectory() as tmp:
        engines_file = Path(tmp) / "engines.json"
        engines_file.write_text(json.dumps(fleet))
        fill_env = {**env, "PDROUTE_ENGINES_FILE": str(engines_file)}
        bodies = {name: json.dumps(b).encode() for name, b in (("qa", QA_BODY), ("fill", AUTOFILL_BODY))}
        scripts = {}
        for name, raw in bodies.items():
            script = Path(tmp) / f"{name}.lua"
            script.write_text(
                f'wrk.method = "POST"\nwrk.body = {json.dumps(raw.decode())}\n'
                'wrk.headers["Content-Type"] = "application/json"\n'
            )
            scripts[name] = script
        try:
            _check_scraped(engines_file, fill_env, bodies["fill"])
            factory = ["--factory", "app.main:create_app_from_env"]
            for _ in range(rounds):
                results["bare"].append(
                    measure(["bench.bare_app:app"], env, bodies["qa"], scripts["qa"], connections, seconds)
                )
                results["no-fill"].append(
                    measure(factory, env, bodies["qa"], scripts["qa"], connections, seconds)
                )
                results["autofill"].append(
                    measure(factory, fill_env, bodies["fill"], scripts["fill"], connections, seconds)
                )
        finally:
            for stub in stubs:
                stub.stop()
    print(
        f"POST /route, queue-aware, auto-fill from {len(stubs)} loopback engines scraped every 250 ms:"
        f" wrk -t1, {rounds} x {seconds:g} s per server and load, one worker"
    )
    for i in range(rounds):
        print(f" round {i + 1}, {connections} connections")
        for name, runs in results.items():
            print(fmt_result(name, runs[i][0]))
    total = {name: sum(r.requests for r, _ in runs) for name, runs in results.items()}
    errors = sum(r.errors + one.errors for r, one in results["autofill"])
    vs_bare = total["autofill"] / total["bare"]
    vs_nofill = total["autofill"] / total["no-fill"]
    ok = vs_bare >= BAR and errors == 0
    print(
        f" ratio autofill/bare = {vs_bare:.2f} (bar >= {BAR:.2f}); autofill/no-fill = {vs_nofill:.2f};"
        f" no-fill/bare = {total['no-fill'] / total['bare']:.2f}; {errors} errors"
        f" -> {'met' if ok else 'NOT met'}"
    )
    return ok
