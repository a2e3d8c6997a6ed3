"""Tiny random Hugging Face checkpoints for tests (any Llama-family architecture)."""

from __future__ import annotations

from pathlib import Path

import torch

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
