"""`specmesh bench-load` without a stack: the interleaved schedule, the configuration's checks and
the report's marking of interleaved rates."""

import pytest

from specmesh.benchmark.load import LoadConfig, Outcome, Policy, interleaved_order, summarise
from specmesh.benchmark.load_report import markdown

POLICIES = [Policy(name) for name in ("none", "fixed:4", "fixed:16", "adaptive")]


def test_interleaving_runs_every_request_under_every_policy_in_rotating_order():
    order = interleaved_order(10, POLICIES)
    assert sorted((i, p.name) for i, p in order) == sorted((i, p.name) for i in range(10) for p in POLICIES)
    assert [i for i, _ in order] == sorted(i for i, _ in order)  # request by request
    firsts = [order[4 * i][1].name for i in range(8)]
    assert all(firsts.count(p.name) == 2 for p in POLICIES)  # each policy goes first as often


def test_interleaved_rates_must_be_among_the_rates():
    with pytest.raises(ValueError, match="--interleaved-rates"):
        LoadConfig(rates=(0.5, 1.0), interleaved_rates=(0.1,))
    config = LoadConfig(rates=(0.1, 1.0), interleaved_rates=(0.1,))
    assert config.command().endswith("--interleaved-rates 0.1")


def test_the_report_marks_interleaved_rates():
    summary = summarise([Outcome(arrival_s=10.0 * i, ttft_s=0.1, latency_s=2.0, tokens=40, mean_budget=0.0,
                                 predicted_accepted=0.0, observed_accepted=0.0) for i in range(3)])
    assert summary["goodput_tok_s"] == pytest.approx(120 / 22.0)  # the rate's timeline, not the time it ran
    runs = [{"rate": rate, "policy": p.name, "interleaved": rate == 0.1, "summary": summary}
            for rate in (0.1, 1.0) for p in POLICIES]
    config = {**LoadConfig(rates=(0.1, 1.0), interleaved_rates=(0.1,)).__dict__, "command": "specmesh bench-load"}
    text = markdown({"config": config, "machine": "test", "runs": runs})
    assert "| 0.1\\* | none |" in text and "| 1 | none |" in text and "interleaved: the policies took turns" in text
    assert "| 0.1\\* | 1.00 (bar" in text
