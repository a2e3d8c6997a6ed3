"""`specmesh demo` (what `make run` shows): a few prompts through plain decoding and through
speculation, side by side. By default through the distributed stack (a local stack of processes
on free ports, driven with the client SDK); `--local` uses the in-process engine instead."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

DEMO_PROMPTS = (
    "Write a Python function that checks whether a string is a palindrome.",
    "Explain in three sentences why the sky is blue.",
    "List five tips for writing clear technical documentation.",
)


@dataclass(frozen=True)
class DemoConfig:
    drafter: str = "hybrid"
    budget: int = 8
    max_new_tokens: int = 96
    model: str = "default"
    dtype: str = "auto"
    device: str = ""
    threads: int = 0


@dataclass(frozen=True)
class Outcome:
    text: str
    tokens: int
    seconds: float
    tokens_per_step: float


Generate = Callable[[str, str, int], Outcome]  # (prompt, drafter, budget) -> outcome


def run_demo(config: DemoConfig, local: bool = False) -> None:
    (_demo_local if local else _demo_distributed)(config)


def _compare(config: DemoConfig, generate: Generate) -> None:
    totals = {"none": [0, 0.0], config.drafter: [0, 0.0]}
    for prompt in DEMO_PROMPTS:
        print(f"\n>>> {prompt}", flush=True)
        for drafter, budget in (("none", 0), (config.drafter, config.budget)):
            outcome = generate(prompt, drafter, budget)
            totals[drafter][0] += outcome.tokens
            totals[drafter][1] += outcome.seconds
        print(outcome.text)
        print(f"[{outcome.tokens_per_step:.2f} tokens/step with {config.drafter}]", flush=True)
    rates = {name: count / max(seconds, 1e-9) for name, (count, seconds) in totals.items()}
    print(f"\nplain decoding: {rates['none']:.1f} tok/s; {config.drafter} (budget {config.budget}): "
          f"{rates[config.drafter]:.1f} tok/s ({rates[config.drafter] / rates['none']:.2f}x)")


def _demo_local(config: DemoConfig) -> None:
    from specmesh import Engine
    from specmesh.datasets import chat_token_ids

    engine = Engine.from_pretrained(model=config.model, drafter=config.drafter, dtype=config.dtype,
                                    device=config.device, threads=config.threads, budget=config.budget)
    plain = engine.with_drafter("none", 0)

    def generate(prompt: str, drafter: str, budget: int) -> Outcome:
        result = (plain if drafter == "none" else engine).generate(
            chat_token_ids(engine.tokenizer, prompt), max_new_tokens=config.max_new_tokens)
        stats = result.stats
        return Outcome(result.text, len(result.token_ids), stats.total_s, stats.mean_tokens_per_step)

    _compare(config, generate)


def _demo_distributed(config: DemoConfig) -> None:
    from specmesh.client import Client
    from specmesh.model.fetch import fetch_default_model
    from specmesh.stack import LocalStack, StackConfig

    if config.model == "default":
        fetch_default_model()
    stack = LocalStack(StackConfig(drafter=config.drafter, budget=config.budget, model=config.model,
                                   dtype=config.dtype, threads=config.threads, port=0, http_port=0,
                                   verifier_port=0, drafter_port=0))
    print("starting a local stack (Redis, orchestrator, verifier, drafter) ...", flush=True)
    try:
        stack.start()
        print(f"up: orchestrator at {stack.address}, Redis {stack.redis_url}, logs in {stack.log_dir}", flush=True)
        with Client(stack.address) as client:
            def generate(prompt: str, drafter: str, budget: int) -> Outcome:
                result = client.generate(prompt=prompt, chat=True, max_new_tokens=config.max_new_tokens,
                                         drafter=drafter, budget=budget)
                stats = result.stats
                return Outcome(result.text, len(result.token_ids), stats.total_ms / 1000, stats.mean_tokens_per_step)

            _compare(config, generate)
    finally:
        stack.stop()
