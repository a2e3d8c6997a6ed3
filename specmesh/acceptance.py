"""Acceptance model: how many draft tokens a request can expect accepted at each budget
(SmartSpec's accepted-length estimate, papers.md §22, made per request and per tree budget).

Glossary:
- method curve: E_m(b), the mean accepted tokens of a drafter method's trees at budget b, learned
  from every request's steps at each ladder budget, shrunk towards the prior curve scaled by the
  method's overall acceptance where a budget has few steps, interpolated in log(1 + b).
- request ratio ρ: the request's acceptance history against the curve, Σ accepted / Σ E_m(b)
  over its steps, decayed so recent steps count most, shrunk towards ρ = 1 by PRIOR_STEPS
  pseudo-steps that never decay (empirical Bayes: one step's acceptance is noisy, so a request's
  estimate stays near its method's curve until several steps say otherwise). A request that
  copies its prompt has ρ > 1 under n-gram drafting; one the drafter cannot predict drifts
  towards ρ ≈ 0 over a few steps. History prediction: E(b) = ρ·E_m(b).
- path probabilities (EAGLE, OPT-Tree §8): with calibrated draft probabilities, the expected
  accepted length of a tree is the sum of its nodes' path probabilities, and the b best nodes
  form the tree drafted at budget b. The request's calibration ratio (observed / this sum)
  corrects over- or under-confident heads. The last tree's probabilities predict the next; nodes
  beyond its size are counted at half its worst node's probability (they can only be less likely).
- calibration: each step's prediction for the budget it used, against what was accepted.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from specmesh.goodput import LADDER

PRIOR_SATURATION = 1.1  # prior_curve: accepted tokens of an unbounded tree ...
PRIOR_SCALE = 8.0  # ... and the budget at which it gets 63% of that: recycling, n-gram
# A drafter with a learned head ranks its tree, so its best few nodes carry most of what a tree gets
# accepted and its curve flattens sooner. In process on the Zen 4 VM, hybrid (EAGLE head) accepted
# 0.93 / 1.40 / 1.72 / 2.20 tokens a step at budgets 2 / 4 / 8 / 16 (3 MT-Bench + 3 HumanEval prompts):
# 16 nodes get 1.57x what 4 get, where PRIOR_SCALE's shape says 2.2x (and 1.6x for 8, measured 1.23x);
# bench-load's fixed:16 / fixed:4 on ShareGPT: 2.52 / 1.55 = 1.63x. A scale of 4 gives 1.55x and 1.37x.
# The scale shapes a budget the method has seldom run at, from the budgets it has.
PRIOR_SCALES = {"eagle": 4.0, "hybrid": 4.0}
CURVE_RATE = 0.05  # EMA rate of the method curve at a ladder budget (after its first 20 steps)
CURVE_SHRINK = 20.0  # steps at a budget before its own mean outweighs the scaled prior
CURVE_DECAY = 0.995  # weight of the method's history per new step (its overall scale)
CURVE_PRIOR_STEPS = 4.0  # pseudo-steps at the prior curve in the method's scale
DECAY = 0.5  # weight of the request's history per new step: acceptance comes in bursts, recent steps say most
PRIOR_STEPS = 2.0  # pseudo-steps at ratio 1 (at PRIOR_BUDGET) beside the request's history. Replaying the
# recorded traces (tests/data/acceptance_traces.json) with a one-step decision lag and the step costs of
# an AMX VM (75 ms forward, +18 ms per speculating sequence): with this pull the controller's on/off
# choice for recycling gets 0.99x the goodput of always speculating, where a history that forgot its
# prior turned speculation off after a few unlucky steps (0.91x)
PRIOR_BUDGET = 8
TAIL_FACTOR = 0.5  # a node beyond the last tree counts half the probability of its worst node


def prior_curve(budget: float, scale: float = PRIOR_SCALE) -> float:
    """Accepted tokens a recycling-class drafter gets at `budget`: saturating, ~0.5 at 4 nodes and
    ~1.1 past 32 (DESIGN.md §6: 1.05 at 80 nodes on MT-Bench; bench/results/load-*: 0.5 at 4);
    `scale` = PRIOR_SCALES[method] for the shape of a drafter with a learned head."""
    return PRIOR_SATURATION * (1 - math.exp(-budget / scale))


class MethodCurve:
    """E_m(b) of one drafter method, shared by its requests: at each ladder budget, the mean
    accepted tokens observed there, shrunk towards the prior curve scaled by the method's
    overall acceptance (so a budget seldom used follows what the others say)."""

    def __init__(self, ladder: tuple[int, ...] = LADDER, prior_scale: float = PRIOR_SCALE):
        self.ladder, self.prior_scale = ladder, prior_scale
        self._x = np.log2(1 + np.asarray(ladder, dtype=float))  # where __call__ interpolates
        self._prior_values = np.asarray([self._prior_at(b) for b in ladder])  # [len(ladder)] the prior curve
        self.means = self._prior_values.tolist()
        self.counts = [0] * len(ladder)
        self._accepted = self._prior = CURVE_PRIOR_STEPS * self._prior_at(PRIOR_BUDGET)  # the method's scale
        self._values: np.ndarray | None = None  # values(), until the next observation

    @classmethod
    def for_method(cls, method: str, ladder: tuple[int, ...] = LADDER) -> "MethodCurve":
        return cls(ladder, PRIOR_SCALES.get(method, PRIOR_SCALE))

    def _prior_at(self, budget: float) -> float:
        return prior_curve(budget, self.prior_scale)

    def observe(self, budget: int, accepted: int) -> None:
        self._values = None
        self._accepted = CURVE_DECAY * self._accepted + accepted
        self._prior = CURVE_DECAY * self._prior + self._prior_at(budget)
        if budget in self.ladder:
            i = self.ladder.index(budget)
            self.counts[i] += 1
            self.means[i] += CURVE_RATE * (accepted - self.means[i])

    def values(self) -> np.ndarray:
        """[len(ladder)] E_m at the ladder budgets; non-decreasing (a larger tree holds the smaller one)."""
        if self._values is None:
            scale = self._accepted / self._prior
            counts = np.asarray(self.counts, dtype=float)
            weight = counts / (counts + CURVE_SHRINK)
            self._values = np.maximum.accumulate(weight * np.asarray(self.means) + (1 - weight) * scale * self._prior_values)
        return self._values

    def __call__(self, budget: float) -> float:
        """Interpolated in log2(1 + b) between the ladder budgets."""
        return float(np.interp(math.log2(1 + max(budget, 0)), self._x, self.values()))


@dataclass(frozen=True)
class Observation:
    """One verification step of a request, as the controller sees it."""

    budget: int  # the budget its tree was drafted for
    tree_size: int
    accepted: int
    path_probs: tuple[float, ...] = ()  # [tree_size] the tree's draft path probabilities, best first (EAGLE)


class DecayedRatio:
    """Σ decayed numerator / Σ decayed denominator. `start` pseudo-units on both sides decay with
    the history (a start at 1 that the first steps overrule); `value(prior)` adds `prior` units
    that never decay (a pull towards 1 that the history can only outweigh, not erase)."""

    def __init__(self, start: float = 0.0):
        self.numerator = self.denominator = start

    def add(self, numerator: float, denominator: float) -> None:
        self.numerator = DECAY * self.numerator + numerator
        self.denominator = DECAY * self.denominator + denominator

    def value(self, prior: float = 0.0) -> float:
        return (prior + self.numerator) / (prior + self.denominator)


class AcceptanceModel:
    """One request's expected accepted tokens by budget."""

    def __init__(self, curve: MethodCurve):
        self.curve = curve
        self.history = DecayedRatio()  # accepted / the method curve's expectation
        self.calibration = DecayedRatio(start=PRIOR_STEPS)  # accepted / the trees' path-probability sums
        self._probs = np.zeros(0)  # cumulative path probabilities of the last tree
        self.predicted_total = self.observed_total = 0.0
        self.steps = 0

    @property
    def ratio(self) -> float:
        return self.history.value(PRIOR_STEPS * self.curve(PRIOR_BUDGET))

    def expected(self, budget: int) -> float:
        history = self.ratio * self.curve(budget)
        if budget == 0 or not len(self._probs):
            return history if budget > 0 else 0.0
        known = min(budget, len(self._probs))
        last = float(self._probs[-1] - self._probs[-2]) if len(self._probs) > 1 else float(self._probs[0])
        beyond = TAIL_FACTOR * last * (budget - known)  # nodes past the last tree: below its worst one
        return self.calibration.value() * (float(self._probs[known - 1]) + beyond)

    def observe(self, step: Observation) -> None:
        if step.budget <= 0:
            return
        self.predicted_total += self.expected(step.budget)
        self.observed_total += step.accepted
        self.steps += 1
        self.curve.observe(step.budget, step.accepted)
        self.history.add(step.accepted, self.curve(step.budget))
        self._probs = np.cumsum(step.path_probs) if step.path_probs else np.zeros(0)
        if step.path_probs:
            self.calibration.add(step.accepted, float(self._probs[-1]))
