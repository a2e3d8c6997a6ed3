"""The goodput controller (orchestrator/controller.py) fed simulated steps: it must converge to
no speculation for a drafter that is never accepted, to the largest justified budget for a
perfect one, probe again after a while, and its recorded decisions must replay."""

import itertools

from orchestrator.controller import (
    PROBE_BACKOFF_LIMIT, PROBE_BUDGET, PROBE_EVERY, PROBE_SHARE, PROBE_STEPS, BudgetController, StepReport, replay,
)
from specmesh.acceptance import Observation
from specmesh.goodput import LADDER, StepCost, StepShape

TRUE = StepCost(fixed=0.03, per_sequence=0.001, per_tree_token=0.0004, per_kv_token=2e-6, per_speculating=0.003)
PROFILE = ([StepShape(b, b * r, b * 200, 0, served=0) for b in (1, 2, 4) for r in (1, 9, 33)], [])


def controller(cost: StepCost = TRUE) -> BudgetController:
    shapes = PROFILE[0]
    control = BudgetController()
    control.add_verifier("v", (shapes, [cost.seconds(s) for s in shapes]))
    return control


def run(control: BudgetController, request_id: str, steps: int, accept, probs=lambda budget: (),
        cost: StepCost = TRUE, first_forward: int = 0) -> list[int]:
    """Steps of one request alone on verifier "v" (forwards numbered from `first_forward`);
    `accept(budget)` = accepted tokens. Returns the budgets used."""
    budget, used, decisions = control.requests[request_id].budget, [], []
    for step in range(steps):
        used.append(budget)
        shape = StepShape(1, 1 + budget, 200 + step, int(budget > 0))
        report = StepReport(Observation(budget, budget, accept(budget), probs(budget)), 200 + step, first_forward + step, 1,
                            shape, cost.seconds(shape))
        decision = control.observe(request_id, report)
        if decision is not None:
            decisions.append(decision)
        budget = control.requests[request_id].budget
    return used


def test_a_never_accepted_drafter_is_switched_off_within_a_few_steps():
    control = controller()
    assert control.join("r", "v", "recycling", -1, 200) > 0
    used = run(control, "r", 8, accept=lambda budget: 0)
    assert used[5:] == [0, 0, 0]


def test_a_perfect_drafter_gets_the_largest_budget():
    control = controller()
    control.join("r", "v", "eagle", -1, 200)
    used = run(control, "r", 6, accept=lambda budget: budget, probs=lambda budget: (1.0,) * budget)
    assert used[-3:] == [LADDER[-1]] * 3


def test_a_request_held_at_zero_probes_again():
    control = controller()
    control.join("r", "v", "recycling", -1, 200)
    used = run(control, "r", 4 + 3 * PROBE_EVERY, accept=lambda budget: 0)
    runs = "".join("p" if b else "." for b in used[4:]).split(".")
    probes = [len(r) for r in runs if r]
    assert probes in ([PROBE_STEPS] * 2, [PROBE_STEPS] * 3)  # a few forwards each time, then off again


def probed_forwards(batch: int, forwards: int) -> list[int]:
    """The forwards (after the first 10) at which `batch` adaptive requests that never get a
    draft token accepted speculated anyway: the probes."""
    control = controller()
    ids = [f"r{i}" for i in range(batch)]
    for request_id in ids:
        control.join(request_id, "v", "recycling", -1, 200)
    probed = []
    for forward in range(forwards):
        budgets = [control.requests[r].budget for r in ids]
        shape = StepShape(batch, sum(1 + b for b in budgets), batch * 200, sum(b > 0 for b in budgets))
        if forward >= 10 and any(budgets):
            probed.append(forward)
        for request_id, budget in zip(ids, budgets):
            report = StepReport(Observation(budget, budget, 0, ()), 200, forward, batch, shape, TRUE.seconds(shape))
            control.observe(request_id, report)
    return probed


def test_probes_in_a_full_batch_are_rarer():
    """A probe in a batch of 12 costs 12 drafter round trips and 48 tree rows: it waits until it
    costs at most PROBE_SHARE of the plain time since the last one (alone: after PROBE_EVERY)."""
    alone, full = probed_forwards(1, 200), probed_forwards(12, 200)
    assert alone[0] - 10 <= PROBE_EVERY
    assert len(alone) >= 3 * PROBE_STEPS
    assert 0 < len(full) <= len(alone) / 2
    extra = PROBE_STEPS * (TRUE.seconds(StepShape(12, 12 * (1 + PROBE_BUDGET), 2400, 12)) - TRUE.seconds(StepShape(12, 12, 2400)))
    assert full[0] - 10 >= extra / PROBE_SHARE / TRUE.seconds(StepShape(12, 12, 2400)) * 0.8


def probe_gaps(probed: list[int]) -> list[int]:
    starts = probed[::PROBE_STEPS]
    assert probed == [start + i for start in starts for i in range(PROBE_STEPS)]  # PROBE_STEPS forwards each
    return [b - a for a, b in zip(starts, starts[1:])]


def test_probes_that_find_nothing_back_off_to_a_floor():
    """At saturation speculation may never pay: each probe since the last speculating decision
    may cost half the share of the one before, down to PROBE_SHARE / PROBE_BACKOFF_LIMIT, so the
    gaps between probes double, then stay."""
    gaps = probe_gaps(probed_forwards(1, 600))
    halvings = PROBE_BACKOFF_LIMIT.bit_length() - 1
    for shorter, longer in zip(gaps[:halvings - 1], gaps[1:halvings]):
        assert 1.7 * shorter <= longer <= 2.3 * shorter
    assert len(gaps) > halvings + 1 and len(set(gaps[halvings - 1:])) == 1


def test_a_probe_that_finds_a_good_drafter_resets_the_backoff():
    """Held at 0 through backed-off probes, a request whose text turns predictable is found by
    the next probe and speculates on; when it turns unpredictable again, it is probed again as
    soon as at first."""
    control = controller()
    control.join("r", "v", "recycling", -1, 200)
    backed_off = run(control, "r", 300, accept=lambda budget: 0)
    assert backed_off[-100:].count(0) > 90
    steps = itertools.count()
    used = run(control, "r", 400, accept=lambda budget: budget if next(steps) < 100 else 0)
    found = next(i for i, b in enumerate(used) if b > 0)
    assert found < 100 and all(used[found:100])
    stopped = next(i for i in range(100, 400) if used[i] == 0)
    again = next(i for i in range(stopped, 400) if used[i] > 0)
    assert again - stopped <= PROBE_EVERY + PROBE_STEPS


def test_a_fixed_request_keeps_its_budget():
    control = controller()
    assert control.join("r", "v", "recycling", 4, 200) == 4
    assert set(run(control, "r", 5, accept=lambda budget: 0)) == {4}


def test_fixed_requests_teach_the_cost_model_between_adaptive_ones():
    """A verifier serving only fixed budgets has nothing to decide, but its forwards still refit
    the cost model, and adaptive requests before and after are steered alike."""
    control = controller()
    control.join("early", "v", "recycling", -1, 200)
    early = run(control, "early", PROBE_EVERY, accept=lambda budget: 0)
    assert early[0] > 0 and not any(early[2:])
    control.leave("early")
    control.join("fixed", "v", "recycling", 0, 200)
    samples = len(control.costs["v"].recent)
    run(control, "fixed", 5, accept=lambda budget: 0, first_forward=100)
    assert len(control.costs["v"].recent) == samples + 5
    control.leave("fixed")
    control.join("late", "v", "recycling", -1, 200)
    late = run(control, "late", PROBE_EVERY, accept=lambda budget: 0, first_forward=200)
    assert late[:2] == early[:2] and not any(late[2:])


def test_decisions_replay_to_the_same_budgets():
    control = controller()
    for request_id in ("a", "b"):
        control.join(request_id, "v", "recycling", -1, 200)
    decisions = []
    for step in range(12):
        for request_id in ("a", "b"):
            budget = control.requests[request_id].budget
            shape = StepShape(2, 2 + budget, 400, int(budget > 0))
            accepted = 0
            decision = control.observe(request_id, StepReport(Observation(budget, budget, accepted), 200, step, 2, shape, TRUE.seconds(shape)))
            if decision is not None:
                decisions.append(decision)
    assert decisions
    for decision in decisions:
        assert replay(decision.to_json()) == list(decision.budgets)
    assert control.requests["a"].budget == control.requests["b"].budget == 0


def test_auto_tries_every_method_then_keeps_the_best():
    control = controller()
    chosen = []
    for index in range(10):
        method = control.choose_method(["ngram", "none", "recycling"])
        chosen.append(method)
        request_id = f"r{index}"
        control.join(request_id, "v", method, 8, 200)
        run(control, request_id, 6, accept=lambda budget, m=method: 3 if m == "ngram" else 0)
        control.leave(request_id)
    assert sorted(chosen[:6]) == ["ngram"] * 3 + ["recycling"] * 3
    assert chosen[6:] == ["ngram"] * 4
    assert control.choose_method(["none"]) == "none"


def test_two_unlucky_steps_do_not_switch_a_good_drafter_off():
    """A drafter that gets 1 token accepted per step nearly doubles goodput here; two steps with
    nothing accepted (recycling has such runs) must not turn it off."""
    control = controller()
    control.join("r", "v", "recycling", -1, 200)
    unlucky = iter([1] * 12 + [0, 0] + [1] * 10)
    used = run(control, "r", 24, accept=lambda budget: next(unlucky) * (budget > 0))
    assert all(b > 0 for b in used[1:])


def test_a_forward_is_one_cost_sample_whatever_its_batch():
    """A forward of 16 requests is one measurement (their mean cycle), so a busy period cannot
    crowd the warm-up profile and the lightly loaded forwards out of the fit window."""
    control = controller()
    for i in range(16):
        control.join(f"r{i}", "v", "recycling", 0, 200)
    shape = StepShape(16, 16, 16 * 200)
    for forward in range(2):
        for i in range(16):
            cycle = 0.0 if forward == 0 else 0.05 + 0.01 * (i % 2)
            control.observe(f"r{i}", StepReport(Observation(0, 0, 0, ()), 200, forward, 16, shape, cycle))
    samples = list(control.costs["v"].recent)
    assert len(samples) == 1
    assert samples[0][0] == shape and abs(samples[0][1] - 0.055) < 1e-9


def test_a_hybrid_drafter_settles_on_the_budget_its_step_costs_justify():
    """Hybrid (EAGLE head) in process on the Zen 4 VM: a step costs 18.9 ms + 1.95 ms a row + 6 ms
    when speculating, and accepts 0.93 / 1.40 / 1.72 / 2.20 tokens at budgets 2 / 4 / 8 / 15, so
    budget 4 has the best goodput (69 tokens/s; 8: 64, 15: 56, none: 48). With the recycling-class
    prior shape the controller read budget 8's acceptance as 1.6x budget 4's and sat at 8 (before
    that, at 0 until a probe)."""
    cost = StepCost(fixed=0.0189, per_sequence=0.0, per_tree_token=0.00195, per_kv_token=0.0, per_speculating=0.00605)
    means = {1: 0.6, 2: 0.93, 4: 1.40, 8: 1.72, 15: 2.20, 31: 2.5, 63: 2.7}
    draws = itertools.cycle([0, 1, 2, 3, 0, 1, 2, 0, 1, 4])  # mean 1.4, bursty like real acceptance
    control = controller(cost)
    control.join("r", "v", "hybrid", -1, 200)
    used = run(control, "r", 60, accept=lambda budget: next(draws) * means.get(budget, 0) / 1.4, cost=cost)
    assert used[0] > 0
    assert used[10:].count(4) >= 0.9 * len(used[10:])


def test_steps_of_a_forward_that_arrive_in_different_coalesced_events_are_gathered():
    """With coalescing each request's steps come a few at a time, at its own time: the steps of
    forwards 0-5 of request a, then those of b. Each forward still yields one cost sample, the
    batch's shape and the mean of its two cycles, once both of its steps are in."""
    control = controller()
    control.join("a", "v", "recycling", 4, 200)
    control.join("b", "v", "recycling", 4, 200)
    shape = StepShape(2, 10, 400, 2)
    for request_id, cycle in (("a", 0.05), ("b", 0.07)):
        for forward in range(6):
            control.observe(request_id, StepReport(Observation(4, 4, 1, ()), 200, forward, 2, shape, cycle))
    samples = list(control.costs["v"].recent)
    assert [s for s, _ in samples] == [shape] * 6
    assert all(abs(seconds - 0.06) < 1e-12 for _, seconds in samples)
