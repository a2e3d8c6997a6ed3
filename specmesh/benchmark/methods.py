"""The generation methods a benchmark compares, each a function prompt ids -> (tokens, steps).

HF baselines run the same checkpoint through transformers; specmesh methods share one model
runner and differ only in the drafter and its budget. Each drafter starts cold at the start of
a run (a fresh token-recycling table) and keeps its state across the run's prompts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from specmesh.engine import Engine

Generate = Callable[[list[int]], tuple[list[int], int | None]]  # -> (new tokens, verification steps)


@dataclass(frozen=True)
class Method:
    name: str
    generate: Generate
    baseline: bool = False


def hf_methods(model, max_new_tokens: int) -> list[Method]:
    def run(extra: dict) -> Generate:
        def generate(ids: list[int]) -> tuple[list[int], None]:
            inputs = torch.tensor([ids])
            with torch.inference_mode():
                out = model.generate(
                    inputs, attention_mask=torch.ones_like(inputs), max_new_tokens=max_new_tokens,
                    do_sample=False, pad_token_id=model.generation_config.eos_token_id, **extra,
                )
            return out[0, len(ids) :].tolist(), None

        return generate

    return [
        Method("hf-greedy", run({}), baseline=True),
        Method("hf-prompt-lookup", run({"prompt_lookup_num_tokens": 10})),
    ]


def drafter_specs(drafters: tuple[str, ...], budgets: tuple[int, ...]) -> list[tuple[str, int]]:
    """`none`, then each drafter at each budget."""
    return [("none", 0)] + [(d, b) for d in drafters for b in budgets]


def method_name(drafter: str, budget: int) -> str:
    return drafter if drafter == "none" else f"{drafter}@{budget}"


def specmesh_methods(template: Engine, drafters: tuple[str, ...], budgets: tuple[int, ...], max_new_tokens: int) -> list[Method]:
    """The in-process engine with each drafter and budget, all on the template's runner."""
    return [
        Method(method_name(d, b), _engine_generate(template.with_drafter(d, b), max_new_tokens))
        for d, b in drafter_specs(drafters, budgets)
    ]


def _engine_generate(engine: Engine, max_new_tokens: int) -> Generate:
    def generate(ids: list[int]) -> tuple[list[int], int]:
        result = engine.generate(ids, max_new_tokens=max_new_tokens)
        return result.token_ids, result.stats.num_steps

    return generate
