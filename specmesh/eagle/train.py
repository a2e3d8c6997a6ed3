"""`specmesh train-eagle`: features of the target over ShareGPT, then the EAGLE head trained on
them (papers.md §1; optional HASS top-k loss, §4). Resumable: features are cached in chunks and
the head, optimizer and loop position are saved at every evaluation.

Layout of the output directory: features/{train,heldout}/ (and the token ids of those
conversations, conversations-{train,heldout}.safetensors), head/ (the checkpoint), train-state.*,
log.jsonl (one line per evaluation: step, losses, held-out acceptance). On an accelerator the
features are kept in its memory for the whole run.
"""

from __future__ import annotations

import json
import math
import os
import random
import time
from dataclasses import asdict, dataclass, field, replace
from functools import lru_cache
from pathlib import Path

import torch
from tqdm import tqdm

from specmesh.benchmark.machine import cpu_name
from specmesh.eagle.card import write_model_card
from specmesh.eagle.checkpoint import load_head, save_head
from specmesh.eagle.features import FeatureChunk, chunk_paths, extract_features
from specmesh.eagle.head import EagleHead, head_config_dict
from specmesh.eagle.objective import Batch, Weights, acceptance, batch_loss
from specmesh.eagle.sharegpt import Split, conversations, tokenized
from specmesh.eagle.target_io import TargetIO
from specmesh.eagle.train_state import load_state, save_state
from specmesh.model.loading import RunnerConfig, load_runner, load_tokenizer, resolve_model_path, set_threads


@dataclass(frozen=True)
class TrainConfig:
    out: str
    model: str = "default"
    conversations: int = 1500  # training conversations (features extracted once)
    heldout: int = 48
    max_length: int = 512
    epochs: float = 4.0
    batch_size: int = 4
    lr: float = 5e-4
    warmup_steps: int = 50
    grad_clip: float = 0.5
    weights: Weights = field(default_factory=Weights)
    eval_every: int = 100
    draft_vocab: int = 8192  # the most frequent training tokens the head may draft; 0 = all
    dtype: str = "bfloat16"  # compute dtype (autocast); the head's own weights stay fp32
    device: str = "cpu"
    threads: int = 0
    seed: int = 0
    feature_batch: int = 0  # conversations per target forward while extracting; 0 = 1 on a CPU, 16 elsewhere

    def __post_init__(self) -> None:
        if self.conversations < self.batch_size or self.heldout < 1 or self.epochs <= 0:
            raise ValueError("need conversations >= batch_size, heldout >= 1 and epochs > 0")
        if self.feature_batch < 0:
            raise ValueError("feature_batch must be >= 0")

    @property
    def extraction_batch(self) -> int:
        return self.feature_batch or (1 if torch.device(self.device).type == "cpu" else 16)


def prepare_features(config: TrainConfig, target: Path) -> tuple[Path, Path]:
    """Extract (or resume extracting) the training and held-out features."""
    out = Path(config.out) / "features"
    wanted = {"train": config.conversations, "heldout": config.heldout}
    if all(_count(out / name) >= n for name, n in wanted.items()):
        return out / "train", out / "heldout"
    tokenizer, split = load_tokenizer(target), Split(max_length=config.max_length)
    token_ids = {
        name: tokenized(Path(config.out) / f"conversations-{name}.safetensors",
                        lambda held_out=name == "heldout", limit=total: conversations(tokenizer, split, held_out, limit),
                        split, total)
        for name, total in wanted.items()
    }
    batch = config.extraction_batch
    runner_config = RunnerConfig(str(target), config.dtype, config.device, config.threads, num_slots=batch,
                                 max_context=config.max_length, max_forward_tokens=config.max_length)
    runner, _, _ = load_runner(runner_config)
    for name, total in wanted.items():
        extract_features(runner, iter(token_ids[name]), out / name, total, chunk_size=64, batch=batch)
    return out / "train", out / "heldout"


def _count(directory: Path) -> int:
    return sum(FeatureChunk.count(p) for p in chunk_paths(directory)) if directory.exists() else 0


def load_conversations(directory: Path, limit: int, device: str = "cpu") -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(token ids, features) of the first `limit` conversations, on `device`."""
    found = []
    for path in tqdm(chunk_paths(directory), desc=f"load {directory.name} features", unit="chunk", leave=False):
        chunk = FeatureChunk.load(path)
        chunk = FeatureChunk(chunk.token_ids.to(device), chunk.offsets, chunk.features.to(device))
        found += [chunk.conversation(i) for i in range(len(chunk))]
    return found[:limit]


def learning_rate(config: TrainConfig, step: int, total: int) -> float:
    """Linear warm-up, then cosine decay to a tenth."""
    if step < config.warmup_steps:
        return config.lr * (step + 1) / config.warmup_steps
    progress = (step - config.warmup_steps) / max(total - config.warmup_steps, 1)
    return config.lr * (0.1 + 0.45 * (1 + math.cos(math.pi * min(progress, 1.0))))


def evaluate(head: EagleHead, io: TargetIO, heldout, batch_size: int, autocast) -> dict:
    head.eval()
    positions = first = both = 0
    for start in range(0, len(heldout), batch_size):
        with autocast():
            n, a, b = acceptance(head, io, Batch.pad(heldout[start : start + batch_size]))
        positions, first, both = positions + n, first + a, both + b
    head.train()
    return {"heldout_acc1": first / positions, "heldout_acc2": both / max(first, 1)}


def train_eagle(config: TrainConfig) -> Path:
    """Runs (or resumes) training; returns the head's checkpoint directory."""
    set_threads(config.threads)
    target = resolve_model_path(config.model)
    out = Path(config.out)
    train_dir, heldout_dir = prepare_features(config, target)
    train = load_conversations(train_dir, config.conversations, config.device)
    config = replace(config, conversations=min(config.conversations, len(train)))  # the data set may hold fewer
    heldout = load_conversations(heldout_dir, config.heldout, config.device)
    compute = torch.bfloat16 if config.dtype == "bfloat16" else torch.float32
    io = TargetIO.from_checkpoint(target, compute, config.device)
    head_dir = out / "head"
    head = (load_head(head_dir, device=config.device) if (head_dir / "config.json").exists()
            else _new_head(target, config)).requires_grad_(True).train()
    if config.draft_vocab and not head.draft_vocab.numel():
        head.draft_vocab = frequent_tokens(train, config.draft_vocab, io.embedding.shape[0]).to(config.device)
    optimizer = torch.optim.AdamW(head.parameters(), lr=config.lr, betas=(0.9, 0.95), weight_decay=0.0)
    position = load_state(out, optimizer) or {"step": 0, "seconds": 0.0}
    steps_per_epoch = len(train) // config.batch_size
    total = math.ceil(config.epochs * steps_per_epoch)
    autocast = lambda: torch.autocast(torch.device(config.device).type, dtype=compute, enabled=compute != torch.float32)
    started, window = time.perf_counter() - position["seconds"], []
    bar = tqdm(range(position["step"], total), initial=position["step"], total=total, desc="train-eagle")
    for step in bar:
        batch = _batch(train, step, steps_per_epoch, config)
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(config, step, total)
        with autocast():
            loss, logged = batch_loss(head, io, batch, config.weights)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(head.parameters(), config.grad_clip)
        optimizer.step()
        window.append(logged)
        bar.set_postfix(loss=f"{logged['loss']:.3f}", acc=f"{logged['acc']:.3f}")
        if (step + 1) % config.eval_every == 0 or step + 1 == total:
            record = {"step": step + 1, "epoch": (step + 1) / steps_per_epoch, "seconds": time.perf_counter() - started,
                      **{k: sum(w[k] for w in window) / len(window) for k in window[0]},
                      **evaluate(head, io, heldout, config.batch_size, autocast)}
            window = []
            _checkpoint(out, head, optimizer, target, config, record)
            bar.write(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in record.items()}))
    if position["step"] >= total:  # nothing left to train: still write what changed (the draft vocabulary)
        save_head(head, head_dir, target, json.loads((head_dir / "config.json").read_text()) if head_dir.exists() else None)
    tokens = torch.cat([ids for ids, _ in train])
    coverage = torch.isin(tokens, head.draft_vocab.to(tokens.device)).float().mean().item() if head.draft_vocab.numel() else 1.0
    write_model_card(out, head_dir, len(tokens), len(head.draft_vocab), coverage)
    return head_dir


def frequent_tokens(train, size: int, vocab_size: int) -> torch.Tensor:
    """The `size` most frequent token ids of the training conversations, ascending."""
    counts = torch.bincount(torch.cat([ids for ids, _ in train]), minlength=vocab_size)
    return counts.topk(min(size, vocab_size)).indices.sort().values


def _new_head(target: Path, config: TrainConfig) -> EagleHead:
    torch.manual_seed(config.seed)
    return EagleHead(head_config_dict(json.loads((target / "config.json").read_text()))).to(config.device)


def _batch(train, step: int, steps_per_epoch: int, config: TrainConfig) -> Batch:
    """The step's conversations: a fresh seeded permutation every epoch."""
    epoch, index = divmod(step, steps_per_epoch)
    order = _epoch_order(config.seed, epoch, len(train))
    chosen = order[index * config.batch_size : (index + 1) * config.batch_size]
    return Batch.pad([train[i] for i in chosen])


@lru_cache(maxsize=2)
def _epoch_order(seed: int, epoch: int, size: int) -> list[int]:
    order = list(range(size))
    random.Random(seed * 1_000_003 + epoch).shuffle(order)
    return order


def _checkpoint(out: Path, head: EagleHead, optimizer, target: Path, config: TrainConfig, record: dict) -> None:
    training = {k: v for k, v in asdict(config).items() if k not in ("out", "device", "threads", "feature_batch")}
    save_head(head, out / "head", target, {"training": training, "hardware": hardware(config.device), "last_eval": record})
    save_state(out, optimizer, {"step": record["step"], "seconds": record["seconds"]})
    with open(out / "log.jsonl", "a") as log:
        log.write(json.dumps(record) + "\n")


def hardware(device: str) -> str:
    """What the head was trained on, for its model card: the GPU's name, or the CPU's cores and model."""
    if torch.device(device).type == "cuda":
        return torch.cuda.get_device_name(torch.device(device))
    return f"a {os.cpu_count()}-core CPU ({cpu_name()})"
