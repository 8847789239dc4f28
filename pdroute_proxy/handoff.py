"""The KV hand-off between a prefill and a decode engine, as vLLM's connectors speak it (pure).

- ``example`` (vLLM's ExampleConnector, shared storage, ``kv_role: kv_both`` on both engines):
  the prefill engine answers ``max_tokens: 1`` and saves the prompt's KV; the decode engine is
  then sent the prompt plus that first token and loads the KV it finds. When the prompt is a
  whole number of KV blocks the decode engine is sent the bare prompt instead (with the first
  token appended it looks for a block file that was never written and fails); it then
  recomputes the first token, which the proxy drops: the client already has the prefill
  engine's.
- ``nixl`` (NixlConnector, GPU to GPU): the prefill request carries
  ``kv_transfer_params: {do_remote_decode: true}``, its answer carries the parameters under
  which the decode engine pulls the blocks; the decode request is the original prompt with
  those parameters, and its first token (recomputed) is dropped likewise.

A request resumed on another engine (``handoff`` None) is the prompt plus every token already
sent, for the tokens still owed, prefilled there from scratch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pdroute_proxy.upstream import UpstreamError

if TYPE_CHECKING:
    from pdroute_proxy.relay import Job
    from pdroute_proxy.settings import KvConnector, ProxySettings

NIXL_PREFILL_PARAMS: dict[str, Any] = {
    "do_remote_decode": True,
    "do_remote_prefill": False,
    "remote_engine_id": None,
    "remote_block_ids": None,
    "remote_host": None,
    "remote_port": None,
}
# Fields of the client's request never sent upstream as given (the proxy sets them per call).
OWN_FIELDS = frozenset(
    ("prompt", "max_tokens", "stream", "stream_options", "return_token_ids", "kv_transfer_params", "n")
)


@dataclass(frozen=True)
class Handoff:
    """The prefill engine's answer: its first token, and the connector's parameters (nixl)."""

    token_ids: tuple[int, ...]
    text: str
    finish_reason: str | None
    kv_transfer_params: dict[str, Any] | None

    @classmethod
    def of(cls, answer: dict[str, Any]) -> Handoff:
        """Read a non-streamed completion answer; ``UpstreamError`` (protocol) if it is not one."""
        choices = answer.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise UpstreamError("protocol", "a prefill answer without choices")
        choice = choices[0]
        ids = choice.get("token_ids")
        if not isinstance(ids, list) or len(ids) != 1 or not isinstance(ids[0], int):
            raise UpstreamError(
                "protocol", "a prefill answer without exactly one token id (return_token_ids)"
            )
        params = answer.get("kv_transfer_params")
        text = choice.get("text")
        return cls(
            (ids[0],),
            text if isinstance(text, str) else "",
            choice.get("finish_reason"),
            params if isinstance(params, dict) else None,
        )


def passthrough(body: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in body.items() if k not in OWN_FIELDS}


def prefill_request(prompt: list[int], body: dict[str, Any], connector: KvConnector) -> dict[str, Any]:
    """The prefill engine's request: the prompt, one token, the token id returned."""
    request = {
        **passthrough(body),
        "prompt": prompt,
        "max_tokens": 1,
        "stream": False,
        "return_token_ids": True,
    }
    if connector == "nixl":
        request["kv_transfer_params"] = dict(NIXL_PREFILL_PARAMS)
    return request


def decode_request(
    job: Job, generated: list[int], handoff: Handoff | None, settings: ProxySettings
) -> tuple[dict[str, Any], int]:
    """The decode engine's request and how many of its first tokens to drop (already sent)."""
    base = passthrough(job.body)
    if handoff is None:
        prompt = [*job.prompt, *generated]
        return {**base, "prompt": prompt, "max_tokens": job.max_tokens - len(generated)}, 0
    if settings.kv_connector == "nixl":
        params = handoff.kv_transfer_params
        if params is None:
            raise UpstreamError("protocol", "the prefill answer carried no kv_transfer_params")
        return {**base, "prompt": job.prompt, "max_tokens": job.max_tokens, "kv_transfer_params": params}, 1
    if len(job.prompt) % settings.kv_block_size == 0:
        return {**base, "prompt": job.prompt, "max_tokens": job.max_tokens}, 1
    prompt = [*job.prompt, *generated]
    return {**base, "prompt": prompt, "max_tokens": job.max_tokens - len(generated)}, 0
