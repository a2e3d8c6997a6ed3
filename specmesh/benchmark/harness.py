"""`specmesh bench`: every method on the same prompts, interleaved prompt by prompt so that
drift on a shared machine hits all methods alike; ratios are taken within the run.

Targets: `engine` compares HF `generate` (greedy, prompt lookup) with the in-process engine's
drafters at each budget; `distributed` adds the same drafters through a local stack of services
(client -> orchestrator -> verifier <-> drafter), and measures continuous batching there."""

from __future__ import annotations

import platform
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from tqdm import tqdm

from specmesh.benchmark.machine import code_version, cpu_name
from specmesh.benchmark.methods import Method, hf_methods, specmesh_methods
from specmesh.benchmark.report import summarise, write_results
from specmesh.datasets import DATASETS, chat_token_ids, load_prompts
from specmesh.drafting import DRAFTERS
from specmesh.engine import Engine
from specmesh.model.loading import DTYPES, resolve_model_path


@dataclass(frozen=True)
class BenchConfig:
    target: str = "engine"  # "engine" or "distributed"
    drafters: tuple[str, ...] = ("ngram", "recycling", "eagle", "hybrid")  # eagle/hybrid need a head
    concurrency: int = 8  # distributed: requests sent at once for the continuous-batching measurement
    stream_intervals: tuple[int, ...] = (0,)  # distributed: one stack per orchestrator --stream-interval-ms
    datasets: tuple[str, ...] = ("mtbench", "humaneval")
    prompts: int = 8
    max_new_tokens: int = 128
    dtype: str = "bfloat16"
    budgets: tuple[int, ...] = (4, 8, 16)
    threads: int = 0
    model: str = "default"
    out_dir: str = "bench/results"
    name: str = ""

    def __post_init__(self) -> None:
        if self.prompts <= 0 or self.max_new_tokens <= 0:
            raise ValueError("prompts and max_new_tokens must be > 0")
        if any(b <= 0 for b in self.budgets):
            raise ValueError("budgets must be > 0 (the 'none' method covers budget 0)")
        if not self.stream_intervals or any(i < 0 for i in self.stream_intervals):
            raise ValueError("stream intervals must be >= 0 ms")
        if self.target not in ("engine", "distributed"):
            raise ValueError(f"target must be 'engine' or 'distributed', got {self.target!r}")
        for field_name, given, known in (("drafters", self.drafters, DRAFTERS), ("datasets", self.datasets, DATASETS)):
            unknown = [name for name in given if name not in known]
            if unknown or not given:  # before any model loads
                raise ValueError(f"{field_name} must be among {', '.join(known)}, got {unknown[0] if unknown else 'none'!r}")


def run_benchmark(config: BenchConfig) -> dict:
    from transformers import AutoModelForCausalLM

    template = Engine.from_pretrained(config.model, drafter="none", dtype=config.dtype, threads=config.threads, budget=0)
    hf = AutoModelForCausalLM.from_pretrained(resolve_model_path(config.model), dtype=DTYPES[config.dtype]).eval()
    drafters = tuple(d for d in config.drafters if d not in ("eagle", "hybrid") or template.draft_target.has_eagle_head())
    methods = hf_methods(hf, config.max_new_tokens) + specmesh_methods(template, drafters, config.budgets, config.max_new_tokens)
    extra: dict = {}
    if config.target == "engine":
        records = run_methods(methods, config, template.tokenizer)
    else:
        from specmesh.benchmark.distributed import run_through_stack

        records, extra = run_through_stack(methods, config, template.tokenizer, drafters)
    results = {"config": asdict(config), "machine": machine_info(), "summary": summarise(records), **extra, "runs": records}
    write_results(results, Path(config.out_dir), config.name or f"{config.target}-{config.dtype}")
    return results


def run_methods(methods: list[Method], config: BenchConfig, tokenizer) -> list[dict]:
    """Every method on every prompt, interleaved prompt by prompt, in the reverse order on every
    other prompt (so that no method always runs right after the same one, or always first after
    an idle stack); one record per run."""
    records = []
    _warm_up(methods, chat_token_ids(tokenizer, "Hello!"))
    for dataset in config.datasets:
        prompts = load_prompts(dataset, config.prompts)
        bar = tqdm(total=len(prompts) * len(methods), desc=f"bench {dataset}", unit="run")
        for i, prompt in enumerate(prompts):
            ids = chat_token_ids(tokenizer, prompt.text)
            for method in methods if i % 2 == 0 else methods[::-1]:
                bar.set_postfix_str(method.name)
                started = time.perf_counter()
                tokens, steps = method.generate(ids)
                seconds = time.perf_counter() - started
                records.append({"dataset": dataset, "prompt": prompt.id, "method": method.name,
                                "tokens": tokens, "seconds": seconds, "steps": steps})
                bar.update()
        bar.close()
    return records


def _warm_up(methods: list[Method], ids: list[int]) -> None:
    """One short run per method, so no method pays for first-call setup inside the timing.

    Runs on a throwaway prompt; drafters that learn (recycling) see it, as they would any prompt.
    """
    for method in methods:
        method.generate(ids)


def machine_info() -> dict:
    return {
        "cpu": cpu_name(),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "code": code_version(),
    }


