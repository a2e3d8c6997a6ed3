"""Tiny random Hugging Face checkpoints for tests (any Llama-family architecture)."""

from __future__ import annotations

from pathlib import Path

import torch

TINY_DEFAULTS = dict(
    vocab_size=32, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
    num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
    initializer_range=0.25, tie_word_embeddings=False,
)


CHAT_TEMPLATE = "{% for m in messages %}{{ m['role'] }} {{ m['content'] }} {% endfor %}"


def build_tiny_model(path: Path, model_type: str = "llama", seed: int = 0, words: list[str] | None = None,
                     **overrides) -> Path:
    """A random HF checkpoint (safetensors + a word-level tokenizer with a plain chat template)
    in `path`. Token i is the word `t{i}`, or `words[i]` when given (unknown words are token 0)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import AutoConfig, AutoModelForCausalLM, PreTrainedTokenizerFast

    settings = {**TINY_DEFAULTS, **overrides}
    settings.setdefault("eos_token_id", None)
    config = AutoConfig.for_model(model_type, **settings)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config).eval()
    model.save_pretrained(path)
    names = words or [f"t{i}" for i in range(settings["vocab_size"])]
    vocab = {word: i for i, word in enumerate(names[: settings["vocab_size"]])}
    backend = Tokenizer(models.WordLevel(vocab, unk_token=names[0]))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, unk_token=names[0])
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(path)
    return path


def random_eagle_head(target: Path, directory: Path, seed: int = 0) -> Path:
    """An untrained EAGLE head for `target`, saved as a checkpoint (drafts are poor, verification
    must stay exact all the same)."""
    import json

    from specmesh.eagle.checkpoint import save_head
    from specmesh.eagle.head import EagleHead, head_config_dict

    torch.manual_seed(seed)
    head = EagleHead(head_config_dict(json.loads((target / "config.json").read_text())))
    save_head(head, directory, target)
    return directory
