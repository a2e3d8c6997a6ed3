"""Shared fixtures: tiny random Hugging Face models built in the test, and the default model."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
from tiny_models import build_tiny_model

torch.set_num_threads(int(os.environ.get("SPECMESH_THREADS", "2")))


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny-llama"))


@pytest.fixture(scope="session")
def tiny_hf_model(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()


@pytest.fixture(scope="session")
def default_model_dir() -> Path:
    """The SmolLM2 checkpoint; `make test` fetches it first (`specmesh fetch-model`)."""
    from specmesh.model.fetch import fetch_default_model

    return fetch_default_model()


def hf_config(path: Path) -> dict:
    return json.loads((path / "config.json").read_text())
