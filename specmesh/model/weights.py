"""Hugging Face safetensors checkpoints -> our fused Llama layout."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import torch
from safetensors import safe_open

from specmesh.model.config import ModelConfig
from specmesh.model.llama import LlamaModel
from specmesh.model.rope import RotaryTables

_FUSED = {
    "self_attn.qkv_proj": ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"),
    "mlp.gate_up_proj": ("mlp.gate_proj", "mlp.up_proj"),
}
_RENAMED = {
    "input_layernorm.weight": "input_layernorm",
    "post_attention_layernorm.weight": "post_attention_layernorm",
}


def checkpoint_files(path: Path) -> list[Path]:
    index = path / "model.safetensors.index.json"
    if index.exists():
        shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        return [path / shard for shard in shards]
    files = sorted(path.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no *.safetensors checkpoint in {path}")
    return files


def read_tensors(path: Path) -> Iterator[tuple[str, torch.Tensor]]:
    for file in checkpoint_files(path):
        with safe_open(str(file), framework="pt") as f:
            for name in f.keys():
                yield name, f.get_tensor(name)


def convert_state_dict(hf: dict[str, torch.Tensor], config: ModelConfig) -> dict[str, torch.Tensor]:
    """Rename HF keys and concatenate q/k/v and gate/up for every layer."""
    # a tied checkpoint may store the shared matrix under either name
    embed = hf.get("model.embed_tokens.weight", hf.get("lm_head.weight"))
    head = embed if config.tie_word_embeddings else hf.get("lm_head.weight", embed)
    ours = {"embed_tokens.weight": embed, "lm_head.weight": head, "norm": hf["model.norm.weight"]}
    for i in range(config.num_layers):
        src, dst = f"model.layers.{i}.", f"layers.{i}."
        for fused, parts in _FUSED.items():
            for kind in ("weight", "bias"):
                pieces = [hf.get(f"{src}{part}.{kind}") for part in parts]
                if all(p is not None for p in pieces):
                    ours[f"{dst}{fused}.{kind}"] = torch.cat(pieces, dim=0)
        ours[f"{dst}self_attn.o_proj.weight"] = hf[f"{src}self_attn.o_proj.weight"]
        ours[f"{dst}mlp.down_proj.weight"] = hf[f"{src}mlp.down_proj.weight"]
        for name, new in _RENAMED.items():
            ours[dst + new] = hf[src + name]
    return ours


def load_llama(path: Path, config: ModelConfig, dtype: torch.dtype, device: torch.device, max_positions: int) -> LlamaModel:
    rotary = RotaryTables(config, max_positions, device)
    with torch.device("meta"):
        model = LlamaModel(config, rotary)
    hf = dict(read_tensors(path))
    state = {k: v.to(device=device, dtype=dtype) for k, v in convert_state_dict(hf, config).items()}
    model.load_state_dict(state, strict=True, assign=True)
    if config.tie_word_embeddings:
        model.lm_head.weight = model.embed_tokens.weight
    return model.eval()
