"""`specmesh bench --target distributed`: the same drafters through a local stack of services
(client -> orchestrator -> verifier <-> drafter as separate processes, Redis), side by side in
one run with HF `generate` and the in-process engine: as whole answers (`Client.generate`) and
streamed (`Client.generate_stream`, a message per step event); then continuous batching: the same
prompts sent one at a time and all at once, total tokens/s of each and their ratio. With several
stream intervals, one stack per interval streams beside the others, prompt by prompt; whole
answers go through the first."""

from __future__ import annotations

import threading
import time
import uuid
from contextlib import ExitStack

from tqdm import tqdm

from specmesh.benchmark.methods import Generate, Method, drafter_specs, method_name
from specmesh.benchmark.report import WHOLE, split_stack_run, streamed_prefix
from specmesh.client import Client
from specmesh.datasets import chat_token_ids, load_prompts
from specmesh.stack import LocalStack, StackConfig


def run_through_stack(methods: list[Method], config, tokenizer, drafters: tuple[str, ...]) -> tuple[list[dict], dict]:
    """The methods, and each drafter through one stack per stream interval, prompt by prompt;
    the continuous-batching measurement on the first stack."""
    from specmesh.benchmark.harness import run_methods

    with ExitStack() as running:
        clients = []
        for interval in config.stream_intervals:
            stack = LocalStack(_stack_config(config, interval))
            running.callback(stack.forget)  # once it has stopped
            running.enter_context(stack)
            clients.append(running.enter_context(Client(stack.address, timeout=3600)))
        specs = drafter_specs(drafters, config.budgets)
        remote = [Method(WHOLE + method_name(d, b), _remote(clients[0], d, b, config.max_new_tokens, whole=True))
                  for d, b in specs]
        remote += [Method(streamed_prefix(interval) + method_name(d, b), _remote(client, d, b, config.max_new_tokens, whole=False))
                   for interval, client in zip(config.stream_intervals, clients) for d, b in specs]
        records = run_methods(paired(methods, remote), config, tokenizer)
        prompts = [chat_token_ids(tokenizer, p.text) for d in config.datasets for p in load_prompts(d, config.prompts)]
        batched = [(drafters[0], config.budgets[0])] if drafters else []
        batching = {method_name(d, b): _batching(clients[0], prompts[: config.concurrency], d, b, config.max_new_tokens)
                    for d, b in batched + [("none", 0)]}
    return records, {"continuous_batching": batching}


def paired(methods: list[Method], remote: list[Method]) -> list[Method]:
    """Each in-process method followed at once by its runs through the stacks, so that a stack ÷
    in-process ratio compares runs a second or two apart, not a block of runs apart: a 2-core VM's
    speed drifts over seconds to minutes (the same code's EAGLE ratio on MT-Bench was 0.80x in one
    run and 0.98x in the next with the in-process methods in one block and the stack's in another)."""
    through: dict[str, list[Method]] = {}
    for method in remote:
        through.setdefault(split_stack_run(method.name)[1], []).append(method)
    return [m for local in methods for m in (local, *through.pop(local.name, ()))] + [m for rest in through.values() for m in rest]


def _stack_config(config, stream_interval_ms: int) -> StackConfig:
    return StackConfig(verifiers=1, drafters=1, budget=config.budgets[0], model=config.model, dtype=config.dtype, port=0,
                       http_port=0, verifier_port=0, drafter_port=0, threads=config.threads,
                       redis_prefix=f"bench-{uuid.uuid4().hex[:8]}", slots=max(8, config.concurrency),
                       stream_interval_ms=stream_interval_ms)


def _remote(client: Client, drafter: str, budget: int, max_new_tokens: int, whole: bool) -> Generate:
    """Through the stack: the whole answer in one message (what Client.generate asks for), or a
    message per step event."""
    def generate(ids: list[int]) -> tuple[list[int], int]:
        chunks = list(client.generate_stream(token_ids=ids, max_new_tokens=max_new_tokens, drafter=drafter, budget=budget,
                                             whole=whole))
        return [t for c in chunks for t in c.token_ids], chunks[-1].stats.steps

    return generate


def _batching(client: Client, prompts, drafter: str, budget: int, max_new_tokens: int) -> dict:
    ask = dict(max_new_tokens=max_new_tokens, drafter=drafter, budget=budget)
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
