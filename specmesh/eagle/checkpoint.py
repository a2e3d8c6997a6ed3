"""EAGLE head checkpoints: `model.safetensors` (the head's own weights, fp32) + `config.json`
(the head's shape and the target it was trained for). The target's embedding and LM head are
never stored; they come from the target checkpoint (target_io.py)."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from specmesh.eagle.head import EagleHead
from specmesh.model.identity import model_id

SHIPPED = Path(__file__).parent / "weights"


def save_head(head: EagleHead, directory: Path, target: Path, extra: dict | None = None) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    state = {name: (t.float() if t.is_floating_point() else t).detach().contiguous() for name, t in head.state_dict().items()}
    save_file(state, str(directory / "model.safetensors"))
    config = {**head.config_dict, "target_name": target.name, "target_id": model_id(target), **(extra or {})}
    (directory / "config.json").write_text(json.dumps(config, indent=2) + "\n")


def load_head(directory: Path, dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu") -> EagleHead:
    config = json.loads((directory / "config.json").read_text())
    head = EagleHead(config)
    state = load_file(str(directory / "model.safetensors"))
    head.draft_vocab = state.setdefault("draft_vocab", head.draft_vocab)
    head.load_state_dict(state)
    return head.to(device=device, dtype=dtype).eval().requires_grad_(False)


def shipped_head_dir(target: Path) -> Path | None:
    """The head shipped with specmesh for this target (same checkpoint name and shape), if any."""
    shape = json.loads((target / "config.json").read_text())
    for config_path in sorted(SHIPPED.glob("*/config.json")):
        config = json.loads(config_path.read_text())
        if config.get("target_name") == target.name and all(
            config[k] == shape.get(k) for k in ("vocab_size", "hidden_size", "num_attention_heads")
        ):
            return config_path.parent
    return None
