"""``CompleteSavesConnector``: vLLM's ``ExampleConnector`` whose saved prompts count once whole.

Loaded inside the engines (``kv_connector_module_path``), never by pdroute: this file is on the
engines' ``PYTHONPATH`` and imports vllm and torch from their venv.

``ExampleConnector`` writes a prompt's KV one file per layer into a folder named after the
prompt's tokens and takes the folder's existence for a saved prompt. A prefill engine killed
between two layers leaves a folder with some of them; the next engine given that prompt then
fails to load a missing layer, and vLLM's engine core dies of it. This connector writes a
marker once every KV layer of the step is saved, and takes only a marked folder for a saved
prompt: an unmarked one is saved again by the next engine that computes the prompt.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
from vllm.distributed.kv_transfer.kv_connector.v1.example_connector import (
    ExampleConnector,
    ExampleConnectorMetadata,
    align_to_block_size,
)
from vllm.forward_context import get_forward_context

MARKER = "complete"  # file in a prompt's folder once all its layers are saved


# vllm is not installed where mypy runs (the engines have their own venv): its base class is Any.
class CompleteSavesConnector(ExampleConnector):  # type: ignore[misc]
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._saved_layers: set[str] = set()  # layers whose stores of this step all returned

    def save_kv_layer(self, layer_name: str, kv_layer: Any, attn_metadata: Any, **kwargs: Any) -> None:
        super().save_kv_layer(layer_name, kv_layer, attn_metadata, **kwargs)
        self._saved_layers.add(layer_name)  # not reached when the save is interrupted

    def wait_for_save(self) -> None:
        # vLLM calls this in a ``finally``: also when the step was interrupted (SIGTERM) between
        # two layers. Mark the step's prompts only when every KV layer of the model was saved.
        super().wait_for_save()
        saved, self._saved_layers = self._saved_layers, set()
        try:
            layers = get_forward_context().no_compile_layers
        except AssertionError:  # no forward context: nothing to vouch for
            return
        expected = {name for name, layer in layers.items() if getattr(layer, "kv_cache", None) is not None}
        if not expected or not expected <= saved:
            return
        metadata = self._get_connector_metadata()
        assert isinstance(metadata, ExampleConnectorMetadata)
        for request in metadata.requests:
            if request.is_store:
                folder = self._generate_foldername_debug(request.token_ids, request.mm_hashes, True)
                Path(folder, MARKER).touch()

    def _found_match_for_prompt(self, prompt_token_ids: list[int], mm_hashes: list[str]) -> bool:
        num_tokens = align_to_block_size(len(prompt_token_ids) - 1, self._block_size)
        folder = self._generate_foldername_debug(torch.tensor(prompt_token_ids)[:num_tokens], mm_hashes)
        return os.path.exists(os.path.join(folder, MARKER))
