"""Model loading: resolve a model name, pick a runner, set threads and device.

`model` is "default" (SmolLM2-135M-Instruct, fetched on first use) or a local Hugging Face
checkpoint directory. Llama-family checkpoints in safetensors run on our own implementation
with batched tree attention; anything else falls back to transformers (hf_runner.py).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import torch

from specmesh.model.config import ModelConfig
from specmesh.model.kernels import native_bf16_flags

DTYPES = {"bfloat16": torch.bfloat16, "float32": torch.float32, "float16": torch.float16}


@dataclass(frozen=True)
class RunnerConfig:
    model: str = "default"
    dtype: str = "auto"  # "auto" = bfloat16 where the hardware computes it natively, else float32
    device: str = ""  # "" = $SPECMESH_DEVICE, else cuda when available, else cpu
    threads: int = 0  # torch CPU threads; 0 = $SPECMESH_THREADS or every core
    num_slots: int = 8  # sequences that can be in flight at once
    max_context: int = 2048  # prompt + generated tokens per sequence
    max_forward_tokens: int = 256  # largest prefill chunk or draft tree (root included)

    def __post_init__(self) -> None:
        if self.dtype != "auto" and self.dtype not in DTYPES:
            raise ValueError(f"dtype must be 'auto' or one of {sorted(DTYPES)}, got {self.dtype!r}")
        for name in ("num_slots", "max_context", "max_forward_tokens"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")

    def torch_dtype(self) -> torch.dtype:
        if self.dtype != "auto":
            return DTYPES[self.dtype]
        return torch.bfloat16 if native_bfloat16(self.resolved_device()) else torch.float32

    def resolved_device(self) -> torch.device:
        name = self.device or os.environ.get("SPECMESH_DEVICE") or ("cuda" if torch.cuda.is_available() else "cpu")
        return torch.device(name)


def native_bfloat16(device: torch.device) -> bool:
    """CUDA, or a CPU with AMX or AVX-512 BF16; elsewhere bf16 matmuls are emulated and slow."""
    return device.type == "cuda" or bool(native_bf16_flags())


def resolve_model_path(model: str) -> Path:
    if model in ("", "default"):
        from specmesh.model.fetch import fetch_default_model

        return fetch_default_model()
    path = Path(model).expanduser()
    if not (path / "config.json").exists():
        raise ValueError(f"model must be 'default' or a Hugging Face checkpoint directory, got {model!r}")
    return path


def set_threads(threads: int) -> None:
    threads = threads or int(os.environ.get("SPECMESH_THREADS", 0)) or os.cpu_count() or 1
    torch.set_num_threads(threads)


def load_runner(config: RunnerConfig):
    """A ModelRunner (Llama family) or an HFRunner (anything else), plus the model's config."""
    set_threads(config.threads)
    path = resolve_model_path(config.model)
    model_config = ModelConfig.from_dir(path)
    device = config.resolved_device()
    max_len = config.max_context + config.max_forward_tokens
    if model_config.is_llama_family and list(path.glob("*.safetensors")):
        from specmesh.model.kv_cache import KVCache
        from specmesh.model.runner import ModelRunner
        from specmesh.model.weights import load_llama

        model = load_llama(path, model_config, config.torch_dtype(), device, max_len)
        cache = KVCache(
            model_config.num_layers, config.num_slots, model_config.num_kv_heads, max_len,
            model_config.head_dim, config.torch_dtype(), device,
        )
        return ModelRunner(model, cache), model_config, path
    from transformers import AutoModelForCausalLM

    from specmesh.model.hf_runner import HFRunner

    hf_model = AutoModelForCausalLM.from_pretrained(path, dtype=config.torch_dtype()).to(device)
    return HFRunner(hf_model, config.num_slots, max_len), model_config, path


def load_tokenizer(path: Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path)
