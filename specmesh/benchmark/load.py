"""`specmesh bench-load`: goodput and latency under load, per speculation policy (SmartSpec's
evaluation, papers.md §22).

Glossary:
- workload: ShareGPT first turns (held-out side, never used to train the EAGLE head): the user
  message is the prompt, the length of the assistant's reply (capped) is max_new_tokens.
- arrivals: a Poisson process at each request rate; every policy at a rate gets the same
  arrival times and requests, one policy after the other.
- interleaved rate: one where the policies take turns request by request instead (each request
  alone, recorded at its arrival on the rate's timeline). For light load, where requests seldom
  overlap: a policy's block at 0.1 req/s lasts ~100 s, and a VM's speed drifts by ±30% over
  minutes, more than the policies differ.
- policy: how requests ask to speculate: `none` (no drafter), `fixed:N` (budget N every step),
  `adaptive` (the orchestrator's goodput controller picks each step's budget, 0 included).
- goodput: generated tokens per second over the run; TTFT: arrival to first token; TPOT: time
  per output token after the first; latency: arrival to last token.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from dataclasses import asdict, dataclass, replace

import numpy as np
from tqdm import tqdm

from specmesh.benchmark.machine import code_version, cpu_name
from specmesh.client import AsyncClient
from specmesh.eagle.sharegpt import SHAREGPT, Split, chat_messages, read_records
from specmesh.goodput import ADAPTIVE
from specmesh.wheels import wheel_file


@dataclass(frozen=True)
class LoadRequest:
    prompt: str
    max_new_tokens: int


@dataclass(frozen=True)
class Policy:
    name: str  # "none", "fixed:N", "adaptive"

    def request_fields(self) -> dict:
        if self.name == "none":
            return {"drafter": "none"}
        if self.name == "adaptive":
            return {"budget": ADAPTIVE}
        return {"budget": int(self.name.removeprefix("fixed:"))}

    @classmethod
    def parse(cls, name: str) -> "Policy":
        if name not in ("none", "adaptive") and not (name.startswith("fixed:") and name[6:].isdigit()):
            raise ValueError(f"a policy is none, fixed:N or adaptive, got {name!r}")
        return cls(name)


@dataclass(frozen=True)
class Outcome:
    arrival_s: float  # from the start of the run
    ttft_s: float
    latency_s: float
    tokens: int
    mean_budget: float
    predicted_accepted: float
    observed_accepted: float
    error: str = ""
    block: int = 0  # which of the policy's blocks at this rate (--repeats) it ran in


def sharegpt_workload(codec, count: int, max_output: int, max_prompt: int = 384, seed: int = 0) -> list[LoadRequest]:
    """`count` first turns from the held-out side of ShareGPT, shuffled with `seed`."""
    split, requests = Split(), []
    for i, record in enumerate(read_records(wheel_file(*SHAREGPT).read_text(encoding="utf-8"))):
        if i % split.holdout_every:
            continue
        messages = chat_messages(record)
        if len(messages) < 2 or len(codec.encode(messages[0]["content"])) > max_prompt:
            continue
        reply = len(codec.encode(messages[1]["content"]))
        requests.append(LoadRequest(messages[0]["content"], max(8, min(reply, max_output))))
        if len(requests) >= 4 * count:
            break
    random.Random(seed).shuffle(requests)
    return requests[:count]


def poisson_arrivals(rate: float, count: int, seed: int) -> list[float]:
    gaps = np.random.default_rng(seed).exponential(1.0 / rate, size=count)
    return list(np.cumsum(gaps) - gaps[0])


async def run_policy(address: str, requests: list[LoadRequest], arrivals: list[float], policy: Policy,
                     label: str) -> list[Outcome]:
    async with AsyncClient(address) as client:
        progress = tqdm(total=len(requests), desc=label, leave=False)
        started = time.perf_counter()

        async def one(request: LoadRequest, arrival: float) -> Outcome:
            await asyncio.sleep(max(0.0, arrival - (time.perf_counter() - started)))
            outcome = await _timed(client, request, policy, started)
            progress.update()
            return outcome

        outcomes = await asyncio.gather(*(one(r, a) for r, a in zip(requests, arrivals)))
        progress.close()
    return list(outcomes)


async def _timed(client: AsyncClient, request: LoadRequest, policy: Policy, started: float) -> Outcome:
    sent = time.perf_counter()
    first, tokens, stats = None, 0, None
    try:
        async for chunk in client.generate_stream(prompt=request.prompt, chat=True, max_new_tokens=request.max_new_tokens,
                                                  **policy.request_fields()):
            if chunk.token_ids and first is None:
                first = time.perf_counter()
            tokens += len(chunk.token_ids)
            stats = chunk.stats or stats
    except Exception as error:  # recorded and counted against the policy, never hidden
        return Outcome(sent - started, 0.0, time.perf_counter() - sent, tokens, 0.0, 0.0, 0.0, str(error))
    done = time.perf_counter()
    return Outcome(sent - started, (first or done) - sent, done - sent, tokens, stats.mean_budget,
                   stats.predicted_accepted, stats.observed_accepted)


def summarise(outcomes: list[Outcome]) -> dict:
    """Goodput: the tokens of all blocks over the sum of their spans (first arrival to last
    finish); latencies over every request."""
    ok = [o for o in outcomes if not o.error]
    span = sum(_span([o for o in ok if o.block == block]) for block in {o.block for o in ok})
    tpot = [(o.latency_s - o.ttft_s) / (o.tokens - 1) for o in ok if o.tokens > 1]
    speculating = [o for o in ok if o.mean_budget > 0]
    return {
        "requests": len(outcomes), "errors": len(outcomes) - len(ok), "tokens": sum(o.tokens for o in ok),
        "goodput_tok_s": sum(o.tokens for o in ok) / span if span > 0 else 0.0,
        **_percentiles("ttft_s", [o.ttft_s for o in ok]), **_percentiles("tpot_s", tpot),
        **_percentiles("latency_s", [o.latency_s for o in ok]),
        "mean_latency_s": float(np.mean([o.latency_s for o in ok])) if ok else 0.0,
        "mean_budget": float(np.mean([o.mean_budget for o in ok])) if ok else 0.0,
        "predicted_accepted": float(np.mean([o.predicted_accepted for o in speculating])) if speculating else 0.0,
        "observed_accepted": float(np.mean([o.observed_accepted for o in speculating])) if speculating else 0.0,
    }


def _span(outcomes: list[Outcome]) -> float:
    return max(o.arrival_s + o.latency_s for o in outcomes) - min(o.arrival_s for o in outcomes)


def _percentiles(name: str, values: list[float]) -> dict:
    if not values:
        return {f"{name}_p50": 0.0, f"{name}_p99": 0.0}
    return {f"{name}_p50": float(np.percentile(values, 50)), f"{name}_p99": float(np.percentile(values, 99))}


def rotated(policies: list[Policy], by: int) -> list[Policy]:
    return policies[by % len(policies):] + policies[: by % len(policies)]


def interleaved_order(count: int, policies: list[Policy], offset: int = 0) -> list[tuple[int, Policy]]:
    """(request index, policy): request by request, every policy in turn, the order rotating by
    one each request (starting `offset` places on), so that each policy goes first as often as
    the others."""
    return [(i, policy) for i in range(count) for policy in rotated(policies, i + offset)]


async def run_interleaved(address: str, requests: list[LoadRequest], arrivals: list[float], policies: list[Policy],
                          before_run, label: str, repeats: int = 1) -> dict[str, list[Outcome]]:
    """Every request under every policy in turn (interleaved_order), each by itself, recorded as
    if it arrived at its arrival on the rate's timeline; `repeats` rounds of that (blocks), the
    order starting one place further each round; one client (one channel) for them all, as a
    policy's block has."""
    outcomes: dict[str, list[Outcome]] = {policy.name: [] for policy in policies}
    order = [(block, i, policy) for block in range(repeats) for i, policy in interleaved_order(len(requests), policies, block)]
    async with AsyncClient(address) as client:
        for block, i, policy in tqdm(order, desc=label, leave=False):
            before_run()
            outcome = await _timed(client, requests[i], policy, time.perf_counter() - arrivals[i])
            outcomes[policy.name].append(replace(outcome, block=block))
    return outcomes


def run_sweep(address: str, requests: list[LoadRequest], rates: list[float], policies: list[Policy], seed: int,
              before_run=lambda: None, interleaved_rates: tuple[float, ...] = (), repeats: int = 1) -> dict:
    """Every policy at every rate, each run after `before_run()`; `repeats` blocks per policy, the
    policy order rotating by one each round (at an interleaved rate, rounds of every request under
    every policy in turn); returns {"runs":
    [{rate, policy, interleaved, summary, outcomes}]}."""
    runs = []
    for rate in rates:
        arrivals = poisson_arrivals(rate, len(requests), seed)
        interleaved = rate in interleaved_rates
        if interleaved:
            by_policy = asyncio.run(run_interleaved(address, requests, arrivals, policies, before_run,
                                                    f"{rate:g} req/s interleaved", repeats))
        else:
            by_policy = {policy.name: [] for policy in policies}
            for block in range(repeats):
                for policy in rotated(policies, block):
                    before_run()
                    label = f"{rate:g} req/s {policy.name}" + (f" ({block + 1}/{repeats})" if repeats > 1 else "")
                    outcomes = asyncio.run(run_policy(address, requests, arrivals, policy, label))
                    by_policy[policy.name] += [replace(o, block=block) for o in outcomes]
        for policy in policies:
            outcomes = by_policy[policy.name]
            runs.append({"rate": rate, "policy": policy.name, "interleaved": interleaved, "summary": summarise(outcomes),
                         "outcomes": [asdict(o) for o in outcomes]})
            print(f"  {rate:g} req/s {policy.name:<10} goodput {runs[-1]['summary']['goodput_tok_s']:.1f} tok/s, "
                  f"mean latency {runs[-1]['summary']['mean_latency_s']:.2f} s", flush=True)
    return {"runs": runs}


WARM_UP = 12  # requests (not among the measured ones) that warm the drafters' table before the sweep


@dataclass(frozen=True)
class LoadConfig:
    rates: tuple[float, ...] = (0.1, 0.4, 1.2)
    interleaved_rates: tuple[float, ...] = ()  # of `rates`: the policies take turns request by request
    repeats: int = 1  # blocks per policy, the order rotating (at an interleaved rate: rounds of its turns)
    policies: tuple[str, ...] = ("none", "fixed:4", "fixed:15", "adaptive")
    requests: int = 10  # per rate and policy
    max_output: int = 128
    drafter: str = "recycling"
    dtype: str = "bfloat16"
    address: str = ""  # "" = start a local stack (1 verifier, 1 drafter)
    slots: int = 16
    seed: int = 0
    out_dir: str = "bench/results"
    name: str = ""

    def __post_init__(self) -> None:
        if not self.rates or any(r <= 0 for r in self.rates):
            raise ValueError("--rates must be positive request rates")
        if not set(self.interleaved_rates) <= set(self.rates):
            raise ValueError("--interleaved-rates must be among --rates")
        for policy in self.policies:
            Policy.parse(policy)
        if self.requests < 1:
            raise ValueError("--requests must be >= 1")
        if self.repeats < 1:
            raise ValueError("--repeats must be >= 1")

    def command(self) -> str:
        return (f"specmesh bench-load --rates {_listed(self.rates)} --policies {','.join(self.policies)} "
                f"--requests {self.requests} --max-output {self.max_output} --drafter {self.drafter} --dtype {self.dtype}"
                + (f" --interleaved-rates {_listed(self.interleaved_rates)}" if self.interleaved_rates else "")
                + (f" --repeats {self.repeats}" if self.repeats > 1 else ""))


def _listed(rates: tuple[float, ...]) -> str:
    return ",".join(f"{r:g}" for r in rates)


def run_load_benchmark(config: LoadConfig) -> list:
    from pathlib import Path

    from specmesh.benchmark.load_report import write_load_results
    from specmesh.paths import default_model_dir
    from specmesh.stack import LocalStack, StackConfig
    from specmesh.text import TextCodec

    sample = sharegpt_workload(TextCodec.from_dir(default_model_dir()), config.requests + WARM_UP, config.max_output,
                               seed=config.seed)
    warm_up, requests = sample[:WARM_UP], sample[WARM_UP:]
    stack = None
    if not config.address:
        stack = LocalStack(StackConfig(drafter=config.drafter, dtype=config.dtype, slots=config.slots, port=0, http_port=0,
                                       verifier_port=0, drafter_port=0, redis_prefix=f"bench-load-{os.getpid()}")).start()
    address = config.address or stack.address
    print(f"warming up the drafters' shared table with {len(warm_up)} other requests ...", flush=True)
    asyncio.run(run_policy(address, warm_up, [0.0] * len(warm_up), Policy("fixed:8"), "warm-up"))
    warm_table = _snapshot_table(stack) if stack is not None else {}

    def before_run() -> None:
        if stack is not None:
            _restore_table(stack, warm_table)

    try:
        results = run_sweep(address, requests, list(config.rates), [Policy.parse(p) for p in config.policies],
                            config.seed, before_run, config.interleaved_rates, config.repeats)
    finally:
        if stack is not None:
            stack.stop()
            stack.forget()
    results["config"] = {**asdict(config), "command": config.command()}
    results["machine"] = _machine()
    stem = config.name or f"load-{config.drafter}-{config.dtype}"
    return write_load_results(results, Path(config.out_dir), stem)


def _table_keys(stack) -> tuple:
    import redis

    client = redis.Redis.from_url(stack.redis_url)
    return client, list(client.scan_iter(f"{stack.config.redis_prefix}:recycling:*"))


def _snapshot_table(stack) -> dict:
    client, keys = _table_keys(stack)
    return {key: client.dump(key) for key in keys}


def _restore_table(stack, snapshot: dict) -> None:
    """Restart the drafters on the warmed-up token-recycling table: otherwise a policy run would
    draft from the rows of the same requests' earlier runs, and later policies would look better."""
    for drafter in stack.by_name("drafter"):
        drafter.kill()
    client, keys = _table_keys(stack)
    for key in keys:
        client.delete(key)
    for key, value in snapshot.items():
        client.restore(key, 0, value, replace=True)
    for drafter in stack.by_name("drafter"):
        stack.restart(drafter)


def _machine() -> str:
    return f"{cpu_name()}, {os.cpu_count()} cores, code {code_version()}"
