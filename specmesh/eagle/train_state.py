"""Resumable training state without pickle: the optimizer's tensors in safetensors, its
hyper-parameters and the loop position in JSON."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

STATE = "train-state.safetensors"
META = "train-state.json"


def save_state(directory: Path, optimizer: torch.optim.Optimizer, position: dict) -> None:
    state = optimizer.state_dict()
    tensors = {
        f"{index}.{name}": value.contiguous()
        for index, entries in state["state"].items()
        for name, value in entries.items()
        if isinstance(value, torch.Tensor)
    }
    save_file(tensors, str(directory / STATE))
    meta = {"param_groups": state["param_groups"], "position": position}
    (directory / META).write_text(json.dumps(meta))


def load_state(directory: Path, optimizer: torch.optim.Optimizer) -> dict | None:
    """Restores the optimizer and returns the saved loop position (None when starting fresh)."""
    if not (directory / META).exists():
        return None
    meta = json.loads((directory / META).read_text())
    state: dict[int, dict] = {}
    for key, value in load_file(str(directory / STATE)).items():
        index, name = key.split(".", 1)
        state.setdefault(int(index), {})[name] = value
    optimizer.load_state_dict({"state": state, "param_groups": meta["param_groups"]})
    return meta["position"]
