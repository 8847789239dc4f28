"""The model runner: builds the model and its paged KV cache on one device and runs steps.

All device work of the profiler goes through ``ModelRunner``: weight creation (random, seeded)
or loading (a local safetensors directory), step preparation (``prepare``), the forward
(``forward``) and, on CUDA, capturing a prepared step as a CUDA graph (``capture``) so that
timings measure the GPU work rather than Python's kernel-launch overhead (serving engines
replay decode steps from CUDA graphs for the same reason).

Run a forward by hand::

    from profiling.engine import ModelRunner
    from profiling.models import PRESETS
    runner = ModelRunner(PRESETS["tiny"], kv_capacity_tokens=256)
    logits = runner.forward(runner.prepare_prompt(list(range(10))))
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from profiling.attention import BACKENDS, FLASH_BLOCK_SIZE, load_flash_attn
from profiling.batch import ForwardBatch, SequenceChunk, prepare_batch
from profiling.errors import CheckpointError, DeviceUnavailable, ProfilingError, first_line
from profiling.kv_cache import BlockAllocator, PagedKVCache, blocks_needed
from profiling.layers import CausalLM, Rotary
from profiling.models import ModelConfig

DTYPES = {
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float16": torch.float16,
    "fp16": torch.float16,
    "half": torch.float16,
    "float32": torch.float32,
    "fp32": torch.float32,
}
INIT_STD = 0.02  # std of the random weights (the usual initialiser scale; keeps activations finite)


def resolve_device(name: str | None) -> torch.device:
    """``None``/``"auto"`` -> CUDA when present else CPU; ``"cuda"``/``"cuda:N"`` checked to exist."""
    if name in (None, "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise DeviceUnavailable(f"unknown device {name!r} (use cpu, cuda or cuda:N)") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise DeviceUnavailable(
                f"CUDA was requested but is not available (torch {torch.__version__}, "
                f"CUDA build {torch.version.cuda or 'none'}); use --device cpu"
            )
        count = torch.cuda.device_count()
        if device.index is not None and device.index >= count:
            raise DeviceUnavailable(f"GPU {device.index} requested but only {count} visible")
    elif device.type != "cpu":
        raise DeviceUnavailable(f"device type {device.type!r} is not supported (cpu or cuda)")
    return device


def resolve_dtype(name: str | None, device: torch.device) -> torch.dtype:
    """``None``/``"auto"`` -> bfloat16 on CUDA, float32 on the CPU; else one of ``DTYPES``."""
    if name in (None, "auto"):
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    if name not in DTYPES:
        raise ProfilingError(f"unknown dtype {name!r} (one of: auto, {', '.join(DTYPES)})")
    return DTYPES[name]


def build_model(
    config: ModelConfig, device: torch.device, dtype: torch.dtype, *, seed: int, checkpoint: str | Path | None
) -> CausalLM:
    """The model on ``device``: seeded random weights, or those of a safetensors checkpoint.

    Built on the meta device and materialised in place, so an 8B model never exists in
    float32 nor on the host.
    """
    with torch.device("meta"):
        model = CausalLM(config)
    model = model.to(dtype=dtype).to_empty(device=device)
    model.tie_weights()
    model.requires_grad_(False)
    generator = torch.Generator(device=device).manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("norm.weight"):
                param.fill_(1.0)
            elif name.endswith(".bias"):
                param.zero_()
            else:
                param.normal_(0.0, INIT_STD, generator=generator)
    if checkpoint is not None:
        load_checkpoint(model, Path(checkpoint))
    return model.eval()


def load_checkpoint(model: CausalLM, directory: Path) -> None:
    """Copy every parameter from ``directory/*.safetensors`` (HF names); refuse a partial match."""
    if not directory.is_dir():
        raise CheckpointError(
            f"{directory}: not a directory (give the folder holding the *.safetensors files)"
        )
    files = sorted(directory.glob("*.safetensors"))
    if not files:
        raise CheckpointError(f"{directory}: no *.safetensors files found")
    params = dict(model.named_parameters())  # tied weights appear once, under the embedding
    loaded: set[str] = set()
    with torch.no_grad():
        for file in files:
            loaded |= _load_file(file, params)
    missing = sorted(set(params) - loaded)
    if missing:
        raise CheckpointError(
            f"{directory}: {len(missing)} tensors missing from the checkpoint (first: {missing[0]})"
        )


def _load_file(file: Path, params: dict[str, torch.nn.Parameter]) -> set[str]:
    """Copy the tensors of one safetensors file into ``params``; return the names copied."""
    from safetensors import SafetensorError, safe_open

    loaded = set()
    try:
        with safe_open(str(file), framework="pt", device="cpu") as f:
            for key in f.keys():  # noqa: SIM118 (safe_open is not a mapping)
                if key not in params:
                    continue
                tensor = f.get_tensor(key)
                if tuple(tensor.shape) != tuple(params[key].shape):
                    raise CheckpointError(
                        f"{file.name}: {key} has shape {tuple(tensor.shape)}, "
                        f"the model expects {tuple(params[key].shape)}"
                    )
                params[key].copy_(tensor)
                loaded.add(key)
    except (SafetensorError, OSError) as exc:
        raise CheckpointError(f"{file}: not a readable safetensors file ({first_line(exc)})") from None
    return loaded


class ModelRunner:
    """One model, its rotary tables and its paged KV cache on one device."""

    def __init__(
        self,
        config: ModelConfig,
        *,
        kv_capacity_tokens: int,
        device: str | None = "cpu",
        dtype: str | None = None,
        block_size: int | None = None,
        seed: int = 0,
        checkpoint: str | Path | None = None,
        attention: str = "auto",
    ) -> None:
        if attention not in BACKENDS:
            raise ProfilingError(f"unknown attention backend {attention!r} (one of {', '.join(BACKENDS)})")
        self.config = config
        self.device = resolve_device(device)
        self.dtype = resolve_dtype(dtype, self.device)
        usable = self.device.type == "cuda" and self.dtype in (torch.float16, torch.bfloat16)
        flash = load_flash_attn() if attention != "sdpa" and usable else None
        if attention == "flash-attn" and flash is None:
            raise ProfilingError(
                "attention backend flash-attn needs CUDA, 16-bit dtype and the flash_attn package"
            )
        self.flash_attn = flash
        self.attention_backend = "flash-attn" if flash is not None else "sdpa"
        self.block_size = block_size or (FLASH_BLOCK_SIZE if flash is not None else 16)
        if flash is not None and self.block_size % FLASH_BLOCK_SIZE:
            raise ProfilingError(f"flash-attn paged KV needs a block size divisible by {FLASH_BLOCK_SIZE}")
        num_blocks = blocks_needed(kv_capacity_tokens, self.block_size)
        self.model = build_model(config, self.device, self.dtype, seed=seed, checkpoint=checkpoint)
        self.rotary = Rotary(config, num_blocks * self.block_size, self.device, self.dtype)
        self.cache = PagedKVCache(config, num_blocks, self.block_size, self.device, self.dtype)
        self.allocator = BlockAllocator(num_blocks, self.block_size)

    @property
    def dtype_bytes(self) -> int:
        return torch.empty((), dtype=self.dtype).element_size()

    def prepare(
        self, prefills: Sequence[SequenceChunk], decodes: Sequence[SequenceChunk] = ()
    ) -> ForwardBatch:
        """Device metadata for a step of ``prefills`` then ``decodes`` (see ``profiling.batch``)."""
        return prepare_batch(
            prefills,
            decodes,
            block_size=self.block_size,
            num_queries_per_kv=self.config.num_queries_per_kv,
            device=self.device,
        )

    def prepare_prompt(self, token_ids: Sequence[int]) -> ForwardBatch:
        """A single fresh prompt in newly allocated blocks (a convenience for scripts and tests)."""
        table = tuple(self.allocator.allocate(len(token_ids)))
        return self.prepare([SequenceChunk(tuple(token_ids), 0, table)])

    def forward(self, batch: ForwardBatch) -> torch.Tensor:
        """Logits ``[num_sequences, vocab]``; writes the step's K/V into the cache."""
        with torch.inference_mode():
            return self.model(batch, self.cache, self.rotary, self.flash_attn)  # type: ignore[no-any-return]

    def capture(self, batch: ForwardBatch) -> Callable[[], torch.Tensor]:
        """A replayable step: a CUDA graph of ``forward(batch)`` on CUDA, the eager call on the CPU.

        The graph reuses the batch's tensors and the cache, so a replay does the same GPU work
        as the eager forward (same kernels, same shapes) without per-kernel launch overhead.
        """
        if self.device.type != "cuda":
            return lambda: self.forward(batch)
        side = torch.cuda.Stream(self.device)  # type: ignore[no-untyped-call]
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):  # warm-up outside capture: cuBLAS handles, kernel choice
            self.forward(batch)
        torch.cuda.current_stream(self.device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = self.forward(batch)

        def replay() -> torch.Tensor:
            graph.replay()
            return out

        return replay

    def synchronize(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
