"""A ``custom`` endpoint: the operator names, per signal, the metric (and label filter) to read.

Each configured signal is the sum of the matching series times its ``scale``. ``kv_used_tokens``
may also come as ``kv_usage_fraction`` x ``kv_capacity_tokens``. ``prompt_tokens_total`` names a
counter of prompt tokens prefilled: its rate between readings fills the prefill-rate inputs.
Signals not configured stay missing.
"""

from __future__ import annotations

from app.engines.sample import EngineSample, Reader

CustomSpec = tuple[tuple[str, str, tuple[tuple[str, str], ...], float], ...]  # signal, metric, labels, scale


def read(reader: Reader, spec: CustomSpec) -> EngineSample:
    values: dict[str, float | None] = {}
    for signal, metric, labels, scale in spec:
        total = reader.total(metric, dict(labels))
        values[signal] = None if total is None else total * scale
    used = values.get("kv_used_tokens")
    if used is None:
        fraction = values.get("kv_usage_fraction")
        capacity = values.get("kv_capacity_tokens")
        if fraction is not None and capacity is not None:
            if fraction > 1.0:
                reader.problems.append(f"kv_usage_fraction above 1: {fraction}")
            else:
                used = fraction * capacity
    return reader.sample(
        running=values.get("running"),
        waiting=values.get("waiting"),
        decode_incoming=values.get("decode_incoming"),
        kv_used_tokens=used,
        pending_prefill_tokens=values.get("pending_prefill_tokens"),
        queue_prompt_tokens=values.get("queue_prompt_tokens"),
        kv_transfer_gbps=values.get("kv_transfer_gbps"),
        prompt_tokens_total=values.get("prompt_tokens_total"),
    )
