"""The goodput controller (SmartSpec, papers.md §22): the budget of the requests on a verifier,
chosen to maximise the predicted goodput of that verifier's whole batch; one budget for all its
adaptive requests (specmesh/goodput.py `choose_budgets` says why).

Glossary:
- adaptive request: one that asked for no budget of its own (or -1); the controller picks its
  budget every step, 0 (no speculation) included. A fixed request keeps its budget but counts
  in its batch's step time.
- inputs: per verifier a step-cost model (seeded by the verifier's warm-up profile, refitted
  from every cycle the orchestrator sees), per drafter method an acceptance curve, per request
  an acceptance model (specmesh/acceptance.py).
- decision: new budgets for one verifier's requests, made once per forward, after all its steps
  arrived (they come in each request's step events, several steps to an event when the
  verifier coalesces them, so the steps of recent forwards are gathered side by side).
  Recorded with its inputs, so `replay(decision)` reproduces it.
- cost sample: one per forward (its shape and its requests' mean cycle), not one per request in
  it: a forward of 16 requests counted 16 times would crowd the warm-up profile and the lightly
  loaded forwards out of the fit.
- method choice (`drafter="auto"`): a new request gets the deployed drafter method whose
  trees are expected to be accepted most (its acceptance curve at PROBE_BUDGET), after every
  method has had METHOD_TRIALS requests to show it.
- probe: a verifier whose adaptive requests were all held at budget 0 for PROBE_EVERY forwards
  speculates for PROBE_STEPS forwards at PROBE_BUDGET, all of them together (a batch that mixes
  budgets is slow), so their acceptance estimates can recover when their text gets predictable
  (one step says little: recycling at ~0.5 accepted tokens a step accepts none in most steps).
  A probe waits until its extra step time (by the cost model) is at most PROBE_SHARE of the plain
  time since the last one: in a full batch a probe costs every request's drafter round trip and
  tree rows (measured: 10 EAGLE requests probing every 20 forwards ran at 0.90x no speculation).
  Each probe after the last speculating decision may cost half the share of the one before
  (down to PROBE_SHARE / 8): at saturation, where speculation does not pay, every probe that
  finds nothing is PROBE_SHARE of the time lost.
  PROBE_BUDGET is the budget that competes with 0 under load, so that the probes' cycles are
  the speculating ones the cost model's factor for that batch size is measured on
  (specmesh/goodput.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from specmesh.acceptance import AcceptanceModel, MethodCurve, Observation
from specmesh.goodput import (
    ADAPTIVE, LADDER, Option, Outlook, StepCost, StepCostModel, StepShape, batch_seconds, choose_budgets, nearest_option,
)

OPEN_FORWARDS = 64  # forwards per verifier whose step events may still be arriving (coalesced events
# bring a request's steps late, and each request's at its own time)
PROBE_EVERY = 16
PROBE_STEPS = 4
PROBE_SHARE = 0.05
PROBE_BACKOFF_LIMIT = 8  # the share shrinks by at most this factor while probes find nothing
METHOD_TRIALS = 3
PROBE_BUDGET = 4


@dataclass(frozen=True)
class StepReport:
    """One step event of a request, as the controller reads it."""

    observation: Observation
    kv_tokens: int  # the request's KV length after the step
    forward_index: int
    batch_size: int
    batch: StepShape  # the whole forward
    cycle_s: float  # since the request's previous step (0: its first): what a step of this shape cost it


@dataclass
class Tracked:
    request_id: str
    verifier: str
    method: str
    fixed_budget: int | None  # None = adaptive
    acceptance: AcceptanceModel
    kv_tokens: int
    budget: int = 0

    @property
    def adaptive(self) -> bool:
        """Its budget is the controller's to choose."""
        return self.fixed_budget is None and self.method != "none"


@dataclass(frozen=True)
class Decision:
    verifier: str
    forward_index: int
    cost: StepCost
    request_ids: tuple[str, ...]
    outlooks: tuple[Outlook, ...]
    previous: tuple[int, ...]  # the budgets before (where the search starts)
    budgets: tuple[int, ...]
    probes: tuple[bool, ...]  # budgets set by a probe, not by the search

    def to_json(self) -> str:
        return json.dumps({
            "verifier": self.verifier, "forward_index": self.forward_index, "cost": self.cost.to_dict(),
            "requests": [
                {"request_id": r, "kv_tokens": o.kv_tokens, "options": [[p.budget, p.expected_accepted] for p in o.options],
                 "previous": before, "budget": b, "probe": probe}
                for r, o, before, b, probe in zip(self.request_ids, self.outlooks, self.previous, self.budgets, self.probes)
            ],
        })


def replay(decision_json: str) -> list[int]:
    """The budgets a recorded decision's inputs lead to (a regression shows as a difference)."""
    d = json.loads(decision_json)
    requests = d["requests"]
    outlooks = [Outlook(r["kv_tokens"], tuple(Option(b, e) for b, e in r["options"])) for r in requests]
    chosen = choose_budgets(outlooks, StepCost.from_dict(d["cost"]), [_index(o, r["previous"]) for o, r in zip(outlooks, requests)])
    return [r["budget"] if r["probe"] else b for r, b in zip(requests, chosen)]


def _index(outlook: Outlook, budget: int) -> int:
    return next((i for i, option in enumerate(outlook.options) if option.budget == budget), 0)


@dataclass
class _Forward:
    """The steps of one forward received so far (one per request in it)."""

    index: int
    shape: StepShape
    reports: int = 0
    cycles: list[float] = field(default_factory=list)  # of the requests that had a previous step
    decided: bool = False

    def add(self, cycle_s: float) -> None:
        self.reports += 1
        if cycle_s > 0:
            self.cycles.append(cycle_s)


@dataclass
class _ProbeClock:
    """A verifier's forwards and predicted seconds without speculation since its last probe, and
    the probe forwards still to go."""

    plain_forwards: int = 0
    plain_seconds: float = 0.0
    remaining: int = 0
    share: float = PROBE_SHARE  # of the plain time since the last probe that the next may cost


@dataclass
class BudgetController:
    max_budget: int = LADDER[-1]
    costs: dict[str, StepCostModel] = field(default_factory=dict)  # by verifier address
    curves: dict[str, MethodCurve] = field(default_factory=dict)  # by drafter method
    requests: dict[str, Tracked] = field(default_factory=dict)
    requests_by_method: dict[str, int] = field(default_factory=dict)
    _probes: dict[str, _ProbeClock] = field(default_factory=dict)  # by verifier address
    _forwards: dict[str, dict[int, _Forward]] = field(default_factory=dict)  # verifier -> its recent forwards by index

    def choose_method(self, available: list[str]) -> str:
        """The method for a new `auto` request among the deployed ones ("none" if there are none)."""
        methods = sorted(m for m in available if m != "none")
        if not methods:
            return "none"
        untried = [m for m in methods if self.requests_by_method.get(m, 0) < METHOD_TRIALS]
        if untried:
            return min(untried, key=lambda m: self.requests_by_method.get(m, 0))
        return max(methods, key=lambda m: self.curves[m](PROBE_BUDGET) if m in self.curves else 0.0)

    def knows_verifier(self, verifier: str) -> bool:
        return verifier in self.costs

    def add_verifier(self, verifier: str, profile: tuple[list, list]) -> None:
        self.costs[verifier] = StepCostModel(seed=profile)

    def join(self, request_id: str, verifier: str, method: str, budget: int, kv_tokens: int) -> int:
        """Track a request that starts (or resumes) on `verifier`; returns its first budget."""
        self.costs.setdefault(verifier, StepCostModel())
        curve = self.curves.setdefault(method, MethodCurve.for_method(method))
        self.requests_by_method[method] = self.requests_by_method.get(method, 0) + 1
        fixed = None if budget == ADAPTIVE else budget
        tracked = Tracked(request_id, verifier, method, fixed, AcceptanceModel(curve), kv_tokens)
        self.requests[request_id] = tracked
        if not tracked.adaptive:
            tracked.budget = fixed or 0
        else:
            tracked.budget = dict(zip(*self._choose(verifier)))[request_id]
        return tracked.budget

    def leave(self, request_id: str) -> None:
        self.requests.pop(request_id, None)

    def observe(self, request_id: str, report: StepReport) -> Decision | None:
        """Learn from one step; once all steps of the forward are in, decide the verifier's
        budgets. Returns the decision when a budget changed."""
        tracked = self.requests.get(request_id)
        if tracked is None:
            return None
        tracked.kv_tokens = report.kv_tokens
        tracked.acceptance.observe(report.observation)
        verifier = tracked.verifier
        forwards = self._forwards.setdefault(verifier, {})
        forward = forwards.get(report.forward_index)
        if forward is None:
            forward = forwards[report.forward_index] = _Forward(report.forward_index, report.batch)
            if len(forwards) > OPEN_FORWARDS:
                del forwards[next(iter(forwards))]
        forward.add(report.cycle_s)
        if forward.decided:
            return None
        ids = self._on(verifier)
        if forward.reports < min(report.batch_size, len(ids)):
            return None
        forward.decided = True
        if forward.cycles:
            self.costs[verifier].observe(forward.shape, sum(forward.cycles) / len(forward.cycles))
        return self._decide(verifier, ids, report.forward_index)

    def _on(self, verifier: str) -> list[str]:
        return [r for r, t in self.requests.items() if t.verifier == verifier]

    def _decide(self, verifier: str, ids: list[str], forward_index: int) -> Decision | None:
        """New budgets for the requests `ids`, all those on `verifier`."""
        if not any(len(self._budgets(self.requests[r])) > 1 for r in ids):  # fixed budgets only: nothing to
            self._probes.pop(verifier, None)  # choose, nor to price, and no probe clock runs
            return None
        outlooks = self._outlooks(ids)
        previous = tuple(self.requests[r].budget for r in ids)
        chosen = choose_budgets(outlooks, self.costs[verifier].cost, self._start(ids, outlooks))
        budgets = self._probed(verifier, outlooks, chosen)
        changed = False
        for request_id, budget in zip(ids, budgets):
            tracked = self.requests[request_id]
            changed |= budget != tracked.budget
            tracked.budget = budget
        if not changed:
            return None
        probes = tuple(b != c for b, c in zip(budgets, chosen))
        return Decision(verifier, forward_index, self.costs[verifier].cost, tuple(ids), tuple(outlooks), previous,
                        tuple(budgets), probes)

    def _choose(self, verifier: str) -> tuple[list[str], list[int]]:
        ids = self._on(verifier)
        outlooks = self._outlooks(ids)
        return ids, choose_budgets(outlooks, self.costs[verifier].cost, self._start(ids, outlooks))

    def _outlooks(self, ids: list[str]) -> list[Outlook]:
        return [self._outlook(self.requests[r]) for r in ids]

    def _budgets(self, tracked: Tracked) -> tuple[int, ...]:
        """The budgets the controller may give a request: the ladder if adaptive, else its own."""
        return tuple(b for b in LADDER if b <= self.max_budget) if tracked.adaptive else (tracked.fixed_budget or 0,)

    def _outlook(self, tracked: Tracked) -> Outlook:
        options = tuple(Option(b, tracked.acceptance.expected(b)) for b in self._budgets(tracked))
        return Outlook(tracked.kv_tokens, options)

    def _start(self, ids: list[str], outlooks: list[Outlook]) -> list[int]:
        return [_index(o, self.requests[r].budget) for r, o in zip(ids, outlooks)]

    def _probed(self, verifier: str, outlooks: list[Outlook], budgets: list[int]) -> list[int]:
        """After PROBE_EVERY forwards without speculation, once a probe would cost at most the
        clock's share of the time since the last one, every adaptive request at PROBE_BUDGET for
        PROBE_STEPS forwards."""
        adaptive = [len(o.options) > 1 for o in outlooks]
        if any(b > 0 for b, a in zip(budgets, adaptive) if a):
            self._probes[verifier] = _ProbeClock()
            return budgets
        probe = [min(PROBE_BUDGET, o.options[-1].budget) if a else b for o, a, b in zip(outlooks, adaptive, budgets)]
        clock = self._probes.setdefault(verifier, _ProbeClock())
        if clock.remaining == 0:
            cost = self.costs[verifier].cost

            def seconds(chosen: list[int]) -> float:
                return batch_seconds(outlooks, [nearest_option(o, b) for o, b in zip(outlooks, chosen)], cost)

            plain_s = seconds(budgets)
            clock.plain_forwards += 1
            clock.plain_seconds += plain_s
            if clock.plain_forwards < PROBE_EVERY or clock.share * clock.plain_seconds < PROBE_STEPS * (seconds(probe) - plain_s):
                return budgets  # (the probe's cost is only predicted once PROBE_EVERY forwards have passed)
            clock = self._probes[verifier] = _ProbeClock(remaining=PROBE_STEPS,
                                                         share=max(clock.share / 2, PROBE_SHARE / PROBE_BACKOFF_LIMIT))
        clock.remaining -= 1
        return probe
