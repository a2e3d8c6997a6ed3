"""`specmesh bench-load` without a stack: the interleaved schedule, the configuration's checks and
the report's marking of interleaved rates, goodput over repeated blocks."""

import pytest

from specmesh.benchmark.load import LoadConfig, Outcome, Policy, interleaved_order, rotated, summarise
from specmesh.benchmark.load_report import markdown

POLICIES = [Policy(name) for name in ("none", "fixed:4", "fixed:16", "adaptive")]


def test_interleaving_runs_every_request_under_every_policy_in_rotating_order():
    order = interleaved_order(10, POLICIES)
    assert sorted((i, p.name) for i, p in order) == sorted((i, p.name) for i in range(10) for p in POLICIES)
    assert [i for i, _ in order] == sorted(i for i, _ in order)  # request by request
    firsts = [order[4 * i][1].name for i in range(8)]
    assert all(firsts.count(p.name) == 2 for p in POLICIES)  # each policy goes first as often
    rounds = [interleaved_order(10, POLICIES, offset) for offset in range(4)]
    assert len({tuple(p.name for _, p in order[:4]) for order in rounds}) == 4  # a request's turns rotate by round


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
    config = {**LoadConfig(rates=(0.1, 1.0), interleaved_rates=(0.1,), repeats=3).__dict__, "command": "specmesh bench-load"}
    text = markdown({"config": config, "machine": "test", "runs": runs})
    assert "| 0.1\\* | none |" in text and "| 1 | none |" in text and "interleaved: the policies took turns" in text
    assert "| 0.1\\* | 1.00 (bar" in text
    assert "run 3 times per policy" in text and "at an interleaved rate, 3 rounds of its turns" in text


def test_goodput_over_repeated_blocks_is_their_tokens_over_their_spans():
    def block(index: int, latency_s: float) -> list[Outcome]:
        return [Outcome(arrival_s=0.5 * i, ttft_s=0.1, latency_s=latency_s, tokens=30, mean_budget=0.0,
                        predicted_accepted=0.0, observed_accepted=0.0, block=index) for i in range(4)]

    summary = summarise(block(0, 2.0) + block(1, 4.0))  # spans 3.5 s and 5.5 s, on their own timelines
    assert summary["goodput_tok_s"] == pytest.approx(240 / 9.0)
    assert summary["mean_latency_s"] == pytest.approx(3.0)


def test_repeated_blocks_rotate_the_policy_order():
    firsts = [rotated(POLICIES, block)[0].name for block in range(8)]
    assert all(firsts.count(p.name) == 2 for p in POLICIES)
    assert all(sorted(p.name for p in rotated(POLICIES, block)) == sorted(p.name for p in POLICIES) for block in range(8))
    with pytest.raises(ValueError, match="--repeats"):
        LoadConfig(repeats=0)
    assert LoadConfig(rates=(3.0,), repeats=3).command().endswith("--repeats 3")
