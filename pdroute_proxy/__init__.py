"""pdroute proxy: an OpenAI-compatible front of a vLLM prefill/decode fleet that decides, per
request, whether the prompt is prefilled on its decode engine (collocated) or on a prefill
engine whose KV cache the decode engine then loads (disaggregated).

Flow: client -> ``app`` (pydantic at the edge) -> ``router`` (decode engine by the proxy's own
in-flight accounting, then the decision in-process: ``decision``) -> ``relay`` (the upstream
calls, every failure falling back) -> tokens. ``observe`` feeds what each request measured to
the online learners. Run it with ``pdroute proxy`` (docs/proxy.md).
"""
