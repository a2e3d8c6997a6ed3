"""The EAGLE training objective (papers.md §1, §4) on a padded batch of conversations.

For every position j with a successor: the head reads (f_j + noise, t_{j+1}) and predicts
f̂_{j+1}; the loss is SmoothL1(f̂_{j+1}, f_{j+1}) + ce_weight · CE(p_{j+1}, q_{j+1}), where
p = softmax(LM_head(f)) is the target's distribution and q = softmax(LM_head(f̂)) the draft's.
HASS's top-k loss (§4) adds topk_weight · −Σ_{x ∈ top-k(p)} p(x) log q(x).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from specmesh.eagle.head import EagleHead
from specmesh.eagle.target_io import TargetIO


@dataclass(frozen=True)
class Batch:
    token_ids: torch.Tensor  # [B, T] int64, right-padded
    features: torch.Tensor  # [B, T, hidden] fp32
    valid: torch.Tensor  # [B, T] bool, real tokens

    @classmethod
    def pad(cls, conversations: list[tuple[torch.Tensor, torch.Tensor]]) -> "Batch":
        """The conversations right-padded into one batch, on the device their features are on."""
        longest = max(len(ids) for ids, _ in conversations)
        hidden, device = conversations[0][1].shape[-1], conversations[0][1].device
        ids = torch.zeros(len(conversations), longest, dtype=torch.long, device=device)
        feats = torch.zeros(len(conversations), longest, hidden, device=device)
        valid = torch.zeros(len(conversations), longest, dtype=torch.bool, device=device)
        for b, (t, f) in enumerate(conversations):
            ids[b, : len(t)], feats[b, : len(t)], valid[b, : len(t)] = t, f.float(), True
        return cls(ids, feats, valid)


@dataclass(frozen=True)
class Weights:
    ce: float = 0.1
    topk: float = 0.0  # HASS top-k loss; 0 = plain EAGLE
    topk_k: int = 10
    noise: float = 0.2  # uniform feature noise U(-noise/2, noise/2)


def head_pass(head: EagleHead, io: TargetIO, features: torch.Tensor, next_ids: torch.Tensor) -> torch.Tensor:
    """f̂ [B, T, hidden] for inputs (features[:, j], next_ids[:, j]), causal over T."""
    positions = torch.arange(features.shape[1], device=features.device).expand(features.shape[0], -1)
    predicted, _ = head(features, io.embed(next_ids), positions)
    return predicted


def batch_loss(head: EagleHead, io: TargetIO, batch: Batch, weights: Weights) -> tuple[torch.Tensor, dict]:
    inputs = batch.features[:, :-1]
    if weights.noise:
        inputs = inputs + (torch.rand_like(inputs) - 0.5) * weights.noise
    predicted = head_pass(head, io, inputs, batch.token_ids[:, 1:])
    keep = batch.valid[:, 1:]
    target = batch.features[:, 1:][keep]
    predicted = predicted[keep].float()
    feature_loss = F.smooth_l1_loss(predicted, target)
    with torch.no_grad():
        p = torch.softmax(io.logits(target).float(), dim=-1)
    log_q = torch.log_softmax(io.logits(predicted).float(), dim=-1)
    ce = -(p * log_q).sum(-1).mean()
    loss = feature_loss + weights.ce * ce
    if weights.topk:
        top_p, top_ids = p.topk(weights.topk_k, dim=-1)
        loss = loss + weights.topk * -(top_p * log_q.gather(-1, top_ids)).sum(-1).mean()
    agree = (log_q.argmax(-1) == p.argmax(-1)).float().mean()
    return loss, {"loss": loss.item(), "feature": feature_loss.item(), "ce": ce.item(), "acc": agree.item()}


@torch.no_grad()
def acceptance(head: EagleHead, io: TargetIO, batch: Batch) -> tuple[int, int, int]:
    """Greedy agreement with the target on held-out data: (positions, first drafted token right,
    first and second right). Step 1 reads the target's feature f_j; step 2 reads the head's own
    f̂_{j+1} (approximation: in one causal pass every earlier position reads f̂ too)."""
    ids, valid = batch.token_ids, batch.valid
    chosen = io.logits(batch.features).argmax(-1)  # [B, T] the target's token after each position
    first = head_pass(head, io, batch.features[:, :-1], ids[:, 1:])  # [B, T-1] f̂_{j+1}
    ok1 = (io.logits(first).argmax(-1) == chosen[:, 1:]) & valid[:, 1:]  # [B, T-1]
    second = head_pass(head, io, first[:, :-1], ids[:, 2:])  # [B, T-2] f̂_{j+2} from f̂_{j+1}
    ok2 = ok1[:, :-1] & (io.logits(second).argmax(-1) == chosen[:, 2:]) & valid[:, 2:]
    return int(valid[:, 1:].sum()), int(ok1.sum()), int(ok2.sum())
