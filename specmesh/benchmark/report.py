"""Benchmark summaries: tokens/s, ratio to HF greedy, tokens per step, identical outputs.

Glossary:
- ratio interval: how far a stack ÷ in-process ratio moves with the prompts drawn: the 5th and
  95th percentiles of the ratio over RESAMPLES draws of the run's prompts with replacement, each
  prompt keeping its pair of runs (a percentile bootstrap; single runs vary by ±15% on 2-core VMs).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np

BASELINE = "hf-greedy"
PLAIN = "none"  # specmesh without speculation: the lossless reference in any dtype
WHOLE = "distributed "  # method-name prefix of whole answers through the service stack ...
RESAMPLES = 2000


def streamed_prefix(stream_interval_ms: int) -> str:
    """... and of streamed ones, through a stack with that stream interval."""
    return "streamed " if not stream_interval_ms else f"streamed[{stream_interval_ms}ms] "


def split_stack_run(method: str) -> tuple[str, str] | None:
    """(how the answer came, the in-process method) of a run through a stack, else None."""
    match = re.fullmatch(r"(distributed|streamed(?:\[(\d+)ms\])?) (.+)", method)
    if match is None:
        return None
    if match[1] == WHOLE.strip():
        return "whole answer", match[3]
    return (f"streamed, {match[2]} ms interval" if match[2] else "streamed, every step"), match[3]


def summarise(records: list[dict]) -> list[dict]:
    """One row per (dataset, method), in the order methods first ran."""
    rows = []
    for dataset in dict.fromkeys(r["dataset"] for r in records):
        runs = [r for r in records if r["dataset"] == dataset]
        reference = {r["prompt"]: r["tokens"] for r in runs if r["method"] == BASELINE}
        plain = {r["prompt"]: r["tokens"] for r in runs if r["method"] == PLAIN}
        baseline_tps = _tokens_per_second([r for r in runs if r["method"] == BASELINE])
        for method in dict.fromkeys(r["method"] for r in runs):
            mine = [r for r in runs if r["method"] == method]
            tps = _tokens_per_second(mine)
            steps = [r["steps"] for r in mine if r["steps"] is not None]
            rows.append({
                "dataset": dataset,
                "method": method,
                "tokens": sum(len(r["tokens"]) for r in mine),
                "seconds": round(sum(r["seconds"] for r in mine), 3),
                "tokens_per_s": round(tps, 2),
                "ratio_vs_hf_greedy": round(tps / baseline_tps, 3) if baseline_tps else None,
                # the first token comes from the prefill, every later one from a verification step
                "tokens_per_step": round(sum(len(r["tokens"]) - 1 for r in mine) / sum(steps), 3) if steps and sum(steps) else None,
                "identical_to_hf_greedy": _share_identical(mine, reference),
                "identical_to_none": _share_identical(mine, plain) if plain else None,
            })
    return rows


def _share_identical(runs: list[dict], reference: dict) -> float:
    return round(sum(r["tokens"] == reference.get(r["prompt"]) for r in runs) / len(runs), 3)


def _tokens_per_second(runs: list[dict]) -> float:
    seconds = sum(r["seconds"] for r in runs)
    return sum(len(r["tokens"]) for r in runs) / seconds if seconds else 0.0


def markdown_table(rows: list[dict]) -> str:
    header = (
        "| dataset | method | tok/s | × HF greedy | tokens/step | identical to HF greedy | identical to `none` |\n"
        "|---|---|---|---|---|---|---|\n"
    )
    lines = [
        f"| {r['dataset']} | {r['method']} | {r['tokens_per_s']:.1f} | {r['ratio_vs_hf_greedy']:.2f}× | "
        f"{_optional(r['tokens_per_step'])} | {r['identical_to_hf_greedy']:.0%} | "
        f"{'' if r.get('identical_to_none') is None else format(r['identical_to_none'], '.0%')} |"
        for r in rows
    ]
    return header + "\n".join(lines) + "\n"


def _optional(value: float | None) -> str:
    return "" if value is None else f"{value:.2f}"


def write_results(results: dict, out_dir: Path, stem: str) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"{stem}.json").write_text(json.dumps(results, indent=1))
    config, machine = results["config"], results["machine"]
    command = (
        f"specmesh bench --target {config['target']} --dtype {config['dtype']} --prompts {config['prompts']} "
        f"--max-new-tokens {config['max_new_tokens']} --budgets {','.join(map(str, config['budgets']))} "
        f"--drafters {','.join(config['drafters'])} --datasets {','.join(config['datasets'])}"
        + (f" --stream-intervals {','.join(map(str, config['stream_intervals']))}"
           if list(config.get("stream_intervals", [0])) != [0] else "")  # a tuple before the JSON round trip
    )
    text = (
        f"# Benchmark: {stem}\n\nCommand: `{command}`\n\n"
        f"Machine: {machine['cpu']}, {machine['threads']} torch threads, torch {machine['torch']}.\n"
        f"Code: {machine.get('code', 'not recorded')}.\n"
        f"Tokens/step: accepted draft tokens plus the bonus token, per verification step. "
        f"`none` is specmesh without speculation: speculative outputs must equal it (lossless); "
        f"they equal HF greedy only where the arithmetic is the same (fp32). "
        f"`distributed …` rows ran through the service stack (separate processes, gRPC, Redis) as whole answers "
        f"(`Client.generate`: the verifier holds steps up to 100 ms, the orchestrator commits each event and "
        f"sends the tokens at the end); `streamed …` rows through the same stack with `Client.generate_stream` "
        f"(an event, a Redis commit and a message to the client every step), `streamed[N ms] …` through a "
        f"stack whose verifiers coalesce the steps of up to N ms into one event (`--stream-interval-ms`).\n\n"
        + markdown_table(results["summary"]) + _distributed_sections(results)
    )
    (out_dir / f"{stem}.md").write_text(text)


def _distributed_sections(results: dict) -> str:
    rows = {(r["dataset"], r["method"]): r for r in results["summary"]}
    pairs = [(dataset, *split, row) for (dataset, method), row in rows.items() if (split := split_stack_run(method))]
    pairs = [(d, label, m, remote, rows[(d, m)]) for d, label, m, remote in pairs if (d, m) in rows]
    text = ""
    if pairs:
        runs = results.get("runs", [])
        text += ("\n## Distributed vs in-process (same drafter and budget)\n\n"
                 "| dataset | method | answer | ratio | 90% interval over prompts |\n|---|---|---|---|---|\n")
        text += "".join(f"| {d} | {m} | {label} | {remote['tokens_per_s'] / local['tokens_per_s']:.2f}× | "
                        f"{_interval(runs, d, remote['method'], m)} |\n" for d, label, m, remote, local in pairs)
    batching = results.get("continuous_batching", {})
    if batching:
        text += ("\n## Continuous batching through the stack\n\n"
                 "| method | requests | one at a time, tok/s | all at once, tok/s | ratio |\n|---|---|---|---|---|\n")
        text += "".join(f"| {m} | {b['requests']} | {b['tokens_per_s']['one_at_a_time']} | "
                        f"{b['tokens_per_s']['concurrent']} | {b['ratio']:.2f}× |\n" for m, b in batching.items())
    return text


def _interval(runs: list[dict], dataset: str, remote: str, local: str) -> str:
    """The ratio interval of `remote` ÷ `local` on `dataset` ("" without per-prompt runs)."""
    mine = {(r["method"], r["prompt"]): r for r in runs if r["dataset"] == dataset and r["method"] in (remote, local)}
    prompts = [p for m, p in mine if m == remote and (local, p) in mine]
    if len(prompts) < 2:
        return ""
    pairs = [(mine[(remote, p)], mine[(local, p)]) for p in prompts]
    tokens = np.array([[len(r["tokens"]), len(l["tokens"])] for r, l in pairs], dtype=float).T  # [2 (remote, local), prompts]
    seconds = np.array([[r["seconds"], l["seconds"]] for r, l in pairs]).T
    draws = np.random.default_rng(0).integers(0, len(prompts), (RESAMPLES, len(prompts)))
    rates = tokens[:, draws].sum(-1) / seconds[:, draws].sum(-1)  # [2, RESAMPLES]
    low, high = np.percentile(rates[0] / rates[1], [5, 95])
    return f"{low:.2f}–{high:.2f}×"
