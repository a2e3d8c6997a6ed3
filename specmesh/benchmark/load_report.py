"""`specmesh bench-load` results: JSON, a markdown table with the bar checks, and a PNG plot."""

from __future__ import annotations

import json
from pathlib import Path

BAR_GOODPUT = 0.95  # adaptive goodput >= this x the best fixed policy, at every rate
BAR_LATENCY = 0.6  # adaptive mean latency <= this x no speculation's, at the lowest rate
INTERLEAVED_NOTE = ("\\* interleaved: the policies took turns request by request, the order rotating, each request alone "
                    "and recorded at its arrival on the rate's timeline.")


def write_load_results(results: dict, out_dir: Path, stem: str) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / f"{stem}.json", out_dir / f"{stem}.md", out_dir / f"{stem}.png"]
    paths[0].write_text(json.dumps(results, indent=1))
    paths[1].write_text(markdown(results))
    plot(results, paths[2])
    return paths


def markdown(results: dict) -> str:
    config = results["config"]
    lines = [
        f"# Load benchmark: {config['drafter']}, {config['dtype']}\n",
        f"Command: `{config['command']}`\n",
        f"Machine: {results['machine']}. {config['requests']} ShareGPT requests per rate and policy "
        f"(held-out first turns, max {config['max_output']} new tokens), Poisson arrivals, the same "
        f"arrivals and requests for every policy at a rate{_repeats(config)}. Latencies in seconds; goodput in "
        "generated tokens/s.\n",
        "| rate req/s | policy | goodput | TTFT p50 | TTFT p99 | TPOT p50 | TPOT p99 | latency p50 | latency p99 "
        "| mean latency | mean budget | accepted/step predicted | observed | errors |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for run in results["runs"]:
        s = run["summary"]
        lines.append(
            f"| {rate_label(run)} | {run['policy']} | {s['goodput_tok_s']:.1f} | {s['ttft_s_p50']:.2f} | {s['ttft_s_p99']:.2f} "
            f"| {s['tpot_s_p50'] * 1000:.0f} ms | {s['tpot_s_p99'] * 1000:.0f} ms | {s['latency_s_p50']:.2f} "
            f"| {s['latency_s_p99']:.2f} | {s['mean_latency_s']:.2f} | {s['mean_budget']:.1f} "
            f"| {s['predicted_accepted']:.2f} | {s['observed_accepted']:.2f} | {s['errors']} |"
        )
    if any(run.get("interleaved") for run in results["runs"]):
        lines.append(f"\n{INTERLEAVED_NOTE}")
    return "\n".join(lines) + "\n\n" + bar_checks(results["runs"])


def _repeats(config: dict) -> str:
    repeats = config.get("repeats", 1)
    if repeats == 1:
        return ""
    return (f", run {repeats} times per policy (the policy order rotating each round; at an interleaved rate, "
            f"{repeats} rounds of its turns; goodput over all blocks, latencies over all requests)")


def rate_label(run: dict) -> str:
    return f"{run['rate']:g}" + ("\\*" if run.get("interleaved") else "")


def bar_checks(runs: list[dict]) -> str:
    """The issue's bars, from the runs: adaptive vs the best fixed policy and vs none."""
    by_rate: dict[float, dict[str, dict]] = {}
    labels = {run["rate"]: rate_label(run) for run in runs}
    for run in runs:
        by_rate.setdefault(run["rate"], {})[run["policy"]] = run["summary"]
    lines = ["## Bars\n", "| rate req/s | adaptive / best fixed goodput | adaptive / none goodput | adaptive / none mean latency |",
             "|---|---|---|---|"]
    for rate, policies in sorted(by_rate.items()):
        adaptive, plain = policies.get("adaptive"), policies.get("none")
        fixed = [s["goodput_tok_s"] for p, s in policies.items() if p.startswith("fixed:")]
        if adaptive is None or plain is None or not fixed:
            continue
        lines.append(f"| {labels[rate]} | {adaptive['goodput_tok_s'] / max(fixed):.2f} (bar ≥ {BAR_GOODPUT}) "
                     f"| {adaptive['goodput_tok_s'] / plain['goodput_tok_s']:.2f} (bar ≥ 1) "
                     f"| {adaptive['mean_latency_s'] / plain['mean_latency_s']:.2f} (bar ≤ {BAR_LATENCY} at the lowest rate) |")
    return "\n".join(lines) + "\n"


def plot(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    for policy in dict.fromkeys(run["policy"] for run in results["runs"]):
        runs = [r for r in results["runs"] if r["policy"] == policy]
        rates = [r["rate"] for r in runs]
        for axis, key in zip(axes, ("goodput_tok_s", "latency_s_p50", "latency_s_p99")):
            axis.plot(rates, [r["summary"][key] for r in runs], marker="o", label=policy)
    for axis, title in zip(axes, ("goodput (tokens/s)", "end-to-end latency p50 (s)", "end-to-end latency p99 (s)")):
        axis.set_xlabel("request rate (req/s)")
        axis.set_title(title)
        axis.grid(alpha=0.3)
    axes[0].legend()
    figure.suptitle(f"specmesh bench-load: {results['config']['drafter']}, {results['config']['dtype']}")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
