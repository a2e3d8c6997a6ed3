"""Shared fixtures: tiny random Hugging Face models built in the test, and the default model."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

torch.set_num_threads(int(os.environ.get("SPECMESH_THREADS", "2")))

TINY_DEFAULTS = dict(
    vocab_size=32, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
    num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
    initializer_range=0.25, tie_word_embeddings=False,
)


def build_tiny_model(path: Path, model_type: str = "llama", seed: int = 0, **overrides) -> Path:
    """A random HF checkpoint (safetensors + a word-level tokenizer) in `path`."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import AutoConfig, AutoModelForCausalLM, PreTrainedTokenizerFast

    settings = {**TINY_DEFAULTS, **overrides}
    settings.setdefault("eos_token_id", None)
    config = AutoConfig.for_model(model_type, **settings)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config).eval()
    model.save_pretrained(path)
    vocab = {f"t{i}": i for i in range(settings["vocab_size"])}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="t0"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="t0").save_pretrained(path)
    return path


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
