"""`specmesh bench --target distributed`: the distributed stack against the in-process engine.

Two measurements, each side by side in one run on the same prompts:
- batch 1: every prompt through the in-process engine and through client -> orchestrator ->
  verifier <-> drafter (separate processes, Redis), interleaved prompt by prompt, same drafter
  and budget; tokens/s of each and their ratio, and whether the outputs are identical;
- continuous batching: the same prompts sent one at a time, then all at once (concurrently);
  total tokens/s of each and their ratio.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path

from tqdm import tqdm

from specmesh.benchmark.harness import machine_info
from specmesh.client import Client
from specmesh.datasets import chat_token_ids, load_prompts
from specmesh.engine import Engine
from specmesh.stack import LocalStack, StackConfig


@dataclass(frozen=True)
class DistributedBenchConfig:
    datasets: tuple[str, ...] = ("mtbench", "humaneval")
    prompts: int = 4  # per dataset
    max_new_tokens: int = 128
    dtype: str = "bfloat16"
    drafter: str = "recycling"
    budget: int = 4
    concurrency: int = 8
    threads: int = 0
    model: str = "default"
    out_dir: str = "bench/results"
    name: str = ""


def run_distributed_benchmark(config: DistributedBenchConfig) -> dict:
    engine = Engine.from_pretrained(config.model, drafter=config.drafter, dtype=config.dtype, threads=config.threads,
                                    budget=config.budget)
    prompts = [chat_token_ids(engine.tokenizer, p.text) for d in config.datasets for p in load_prompts(d, config.prompts)]
    stack_config = StackConfig(verifiers=1, drafters=1, drafter=config.drafter, budget=config.budget, model=config.model,
                               dtype=config.dtype, port=0, verifier_port=0, drafter_port=0, threads=config.threads,
                               redis_prefix=f"bench-{uuid.uuid4().hex[:8]}", slots=max(8, config.concurrency))
    with LocalStack(stack_config) as stack, Client(stack.address, timeout=3600) as client:
        ask = dict(max_new_tokens=config.max_new_tokens, drafter=config.drafter, budget=config.budget)
        engine.generate(prompts[0][:16], max_new_tokens=8)  # warm both paths up
        client.generate(token_ids=prompts[0][:16], max_new_tokens=8, **{k: v for k, v in ask.items() if k != "max_new_tokens"})
        batch1 = _batch_one(engine, client, prompts, ask, config.max_new_tokens)
        batching = {
            f"{config.drafter}@{config.budget}": _batching(client, prompts[: config.concurrency], ask),
            "none": _batching(client, prompts[: config.concurrency], ask | {"drafter": "none", "budget": 0}),
        }
    results = {"config": asdict(config), "machine": machine_info(), "batch_1": batch1, "continuous_batching": batching}
    _write(results, Path(config.out_dir), config.name or f"distributed-{config.dtype}")
    return results


def _batch_one(engine: Engine, client: Client, prompts, ask: dict, max_new_tokens: int) -> dict:
    totals = {"in_process": [0, 0.0], "distributed": [0, 0.0]}
    identical = 0
    for ids in tqdm(prompts, desc="batch 1: in-process vs distributed"):
        started = time.perf_counter()
        local = engine.generate(ids, max_new_tokens=max_new_tokens).token_ids
        totals["in_process"][0] += len(local)
        totals["in_process"][1] += time.perf_counter() - started
        started = time.perf_counter()
        remote = client.generate(token_ids=ids, **ask).token_ids
        totals["distributed"][0] += len(remote)
        totals["distributed"][1] += time.perf_counter() - started
        identical += local == remote
    rates = {name: tokens / seconds for name, (tokens, seconds) in totals.items()}
    return {"tokens_per_s": {k: round(v, 2) for k, v in rates.items()},
            "ratio": round(rates["distributed"] / rates["in_process"], 3),
            "identical_outputs": f"{identical}/{len(prompts)}"}


def _batching(client: Client, prompts, ask: dict) -> dict:
    started = time.perf_counter()
    sequential = sum(len(client.generate(token_ids=ids, **ask).token_ids) for ids in tqdm(prompts, desc="one at a time"))
    sequential_s = time.perf_counter() - started
    counts = [0] * len(prompts)

    def run(i: int) -> None:
        counts[i] = len(client.generate(token_ids=prompts[i], **ask).token_ids)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(prompts))]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    concurrent_s = time.perf_counter() - started
    one, many = sequential / sequential_s, sum(counts) / concurrent_s
    return {"requests": len(prompts), "tokens_per_s": {"one_at_a_time": round(one, 2), "concurrent": round(many, 2)},
            "ratio": round(many / one, 3)}


def _write(results: dict, out_dir: Path, stem: str) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"{stem}.json").write_text(json.dumps(results, indent=1))
    c, b1 = results["config"], results["batch_1"]
    command = (f"specmesh bench --target distributed --dtype {c['dtype']} --prompts {c['prompts']} "
               f"--max-new-tokens {c['max_new_tokens']} --budgets {c['budget']} --drafter {c['drafter']} "
               f"--concurrency {c['concurrency']}")
    m = results["machine"]
    text = (
        f"# Benchmark: {stem}\n\nCommand: `{command}`\n\nMachine: {m['cpu']}, {m['threads']} torch threads, "
        f"torch {m['torch']}. One verifier, one drafter, the orchestrator and Redis as separate processes on the "
        f"same machine; drafter `{c['drafter']}`, budget {c['budget']}.\n\n"
        f"| measurement | tok/s | ratio |\n|---|---|---|\n"
        f"| in-process engine, batch 1 | {b1['tokens_per_s']['in_process']} | 1.00× |\n"
        f"| distributed stack, batch 1 | {b1['tokens_per_s']['distributed']} | {b1['ratio']:.2f}× "
        f"(outputs identical: {b1['identical_outputs']}) |\n"
    )
    for method, cb in results["continuous_batching"].items():
        text += (
            f"| distributed `{method}`, {cb['requests']} requests one at a time | {cb['tokens_per_s']['one_at_a_time']} | 1.00× |\n"
            f"| distributed `{method}`, {cb['requests']} requests at once | {cb['tokens_per_s']['concurrent']} | {cb['ratio']:.2f}× |\n"
        )
    (out_dir / f"{stem}.md").write_text(text)
