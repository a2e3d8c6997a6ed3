"""Goodput control: a measured cost model of a verifier step and the budget choice that
maximises goodput (SmartSpec, papers.md §22). Pure: no torch, grpc or redis.

Glossary:
- goodput: tokens emitted (accepted draft tokens + the bonus token) per second of step time.
- step time: a verifier's cycle from one batched forward to the next: the forward, the
  verification, the feedback and the wait for the drafters' trees. Modelled as
  c0 + c_seq·B + c_tree·T + c_kv·K + c_spec·S + (c_cycle + c_row·T)·C + c_att·T·K/B
  + c_wide·max(0, T − WIDE_ROWS), where B = sequences in the batch, T = rows through the forward
  (each sequence's root + its tree nodes), K = KV tokens the batch attends to, S = sequences
  that speculate (a drafter round trip; budget 0 asks the drafter for nothing) and C = 1 for a
  served cycle, 0 for a bare forward. T·K/B is the tree attention's work (every row scores its
  sequence's cached tokens; exact for a batch of equal sequences), and the last term the rows
  past the point where a forward stops being bound by streaming its weights: on CPUs a few rows
  cost little more than one, more cost each their compute. Fitted by least
  squares (non-negative, relative, anchored to a prior) on measured steps: first a sweep of
  bare forwards at verifier warm-up (they pin the forward's shape costs), then every cycle the
  orchestrator sees (less the prefills it waited for). What serving adds to a forward has terms
  of its own, per cycle (the engine loop, feedback, step events) and per row (verification,
  recycling rows, the other processes on the cores), so neither is read as the price of
  speculation. Measured on an AMX VM: a bare forward 48 ms + 0.5 ms a row, a served one 83 ms +
  ~1.5 ms a tree node.
- speculating factor: per batch size, how much dearer the speculating cycles measured there were
  than the linear model prices them, relative to the plain cycles there (geometric means of
  measured / predicted over the recent window). A linear model fitted over every shape can be
  off in opposite directions at one batch size, where the choice between speculating or not is
  made (measured under load, batch 4: plain cycles priced 16% low, speculating ones 16% high, so
  budget 0 was held where budget 4 was 3-6% faster). Applied only where both kinds were
  measured, so that a batch size that always speculates (or never) is priced as before.
- budget ladder: the budgets the controller chooses among; 0 (no speculation) is always one.
"""

from __future__ import annotations

import json
from collections import defaultdict, deque
from dataclasses import asdict, dataclass, replace

import numpy as np

# Above 8, one less than a power of two, so that root + tree fill whole row blocks of the
# matmuls: with AMX (16-row tiles) a lone tree of 16 nodes, 17 rows, verified in 30.6 ms
# against 25.9 ms for 15 nodes.
LADDER = (0, 1, 2, 4, 8, 15, 31, 63)
# Rows of a forward up to which its GEMMs are bound by the weight stream: AMX multiplies tiles of
# 16 rows (a 17th row costs a second tile: 30.6 against 25.9 ms above); a 2-core Zen 4's forward
# took 17.9 / 22.5 / 23.9 / 31.4 ms at 1 / 9 / 12 / 16 rows (300 cached tokens). Fitted to that
# VM's warm-up profile, the rows past 16 and the attention term halve the linear model's mean
# error (9.0% -> 4.2%).
WIDE_ROWS = 16
ADAPTIVE = -1  # a request's budget that leaves the choice to the controller
AUTO_METHOD = "auto"  # a request's drafter that leaves the method to the controller
SPECULATION_MARGIN = 1.03  # speculating must promise 3% more goodput than not (noise guard)
SWITCH_MARGIN = 1.02  # a new choice must promise 2% more than the last one (no churn on noise)
PRIOR_WEIGHT = 1.0  # the prior counts as this many measured steps per coefficient
FACTOR_SAMPLES = 3  # plain and speculating cycles each, measured at a batch size before its factor applies
FACTOR_RANGE = (0.5, 2.0)


def parse_budget(text: str) -> int:
    """A budget from the command line: a number of draft nodes, or "adaptive" (-1)."""
    budget = ADAPTIVE if text == "adaptive" else int(text)
    if budget < ADAPTIVE:
        raise ValueError("a budget is >= 0, or 'adaptive' (-1)")
    return budget


@dataclass(frozen=True)
class StepShape:
    batch_size: int
    tree_tokens: int  # rows through the forward: Σ (1 + tree nodes)
    kv_tokens: int  # Σ KV-cache lengths of the batch before the step
    speculating: int = 0  # sequences with a draft tree
    served: int = 1  # 1: a cycle of the running service; 0: a bare forward (the warm-up profile)


@dataclass(frozen=True)
class StepCost:
    """Step-time coefficients, in seconds."""

    fixed: float
    per_sequence: float
    per_tree_token: float
    per_kv_token: float
    per_speculating: float
    per_cycle: float = 0.0  # what serving adds to a forward: per cycle ...
    per_served_row: float = 0.0  # ... and per row
    per_attended: float = 0.0  # per row x cached token of its sequence (tree attention)
    per_wide_row: float = 0.0  # per row past WIDE_ROWS
    speculating_factors: tuple[tuple[int, float], ...] = ()  # (batch size, speculating factor)

    def seconds(self, shape: StepShape) -> float:
        linear = sum(getattr(self, name) * value for name, value in zip(COEFFICIENTS, _feature_values(shape)))
        if shape.speculating:
            return linear * next((f for b, f in self.speculating_factors if b == shape.batch_size), 1.0)
        return linear

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, values: dict) -> "StepCost":
        """From to_dict(); what a record of an older model lacks is 0 (no factors)."""
        factors = tuple((int(b), float(f)) for b, f in values.get("speculating_factors", ()))
        return cls(**{k: float(values.get(k, 0.0)) for k in COEFFICIENTS}, speculating_factors=factors)

    @classmethod
    def from_vector(cls, vector) -> "StepCost":
        return cls(*map(float, vector))

    def vector(self) -> np.ndarray:
        return np.array([getattr(self, name) for name in COEFFICIENTS])


COEFFICIENTS = ("fixed", "per_sequence", "per_tree_token", "per_kv_token", "per_speculating", "per_cycle", "per_served_row",
                "per_attended", "per_wide_row")


def _feature_values(shape: StepShape) -> tuple[float, ...]:
    """What each of COEFFICIENTS multiplies, in order."""
    rows = shape.tree_tokens
    return (1.0, shape.batch_size, rows, shape.kv_tokens, shape.speculating, shape.served, rows * shape.served,
            rows * shape.kv_tokens / max(shape.batch_size, 1), max(0, rows - WIDE_ROWS))


# A CPU-class default (SmolLM2-135M, bf16, 2 cores: DESIGN.md §6) for a verifier that published none.
DEFAULT_STEP_COST = StepCost(fixed=0.032, per_sequence=0.001, per_tree_token=0.0004, per_kv_token=1e-6, per_speculating=0.003,
                             per_cycle=0.003, per_served_row=0.0001)


def fit_linear(features: np.ndarray, targets: np.ndarray, prior: np.ndarray, prior_weight: float = PRIOR_WEIGHT) -> np.ndarray:
    """Non-negative least squares of targets [n] on features [n, p], in relative terms, pulled
    towards `prior` [p] (ridge), so that a few samples of one shape cannot swing the
    coefficients anywhere. Relative: goodput compares step times by their ratio, so each sample
    weighs 1 / its shape's time as an unweighted fit predicts it (not as measured: that would
    favour the samples that happened to be fast). Unweighted, the profile's largest forwards
    and a burst's long cycles set the coefficients, and a lone step after a burst was priced 25%
    low (tests/unit/test_goodput.py `test_a_lone_step_after_a_burst_is_priced_as_measured`)."""
    size = features @ _ridge_nnls(features, targets, prior, prior_weight, np.ones(len(targets)))
    size = np.maximum(size, 0.05 * size.mean())
    return _ridge_nnls(features, targets, prior, prior_weight, size.mean() / size)


def _ridge_nnls(features: np.ndarray, targets: np.ndarray, prior: np.ndarray, prior_weight: float,
                weight: np.ndarray) -> np.ndarray:
    """Weighted least squares with the ridge towards `prior`; a coefficient that comes out
    negative is fixed at 0 and the rest refitted."""
    scale = np.maximum(np.abs(features).mean(axis=0), 1e-9)  # compare coefficients in target units
    free = np.ones(len(prior), dtype=bool)
    while True:
        x = np.vstack([features[:, free] * weight[:, None], np.sqrt(prior_weight) * np.diag(scale[free])])
        y = np.concatenate([targets * weight, np.sqrt(prior_weight) * scale[free] * prior[free]])
        solution = np.linalg.lstsq(x, y, rcond=None)[0]
        coefficients = np.zeros(len(prior))
        coefficients[free] = solution
        if (coefficients >= 0).all():
            return coefficients
        free &= coefficients > 0


def shape_features(shapes: list[StepShape]) -> np.ndarray:
    return np.array([_feature_values(s) for s in shapes], dtype=float)


def fit_step_cost(shapes: list[StepShape], seconds: list[float], prior: StepCost = DEFAULT_STEP_COST,
                  prior_weight: float = PRIOR_WEIGHT) -> StepCost:
    return StepCost.from_vector(fit_linear(shape_features(shapes), np.asarray(seconds), prior.vector(), prior_weight))


def encode_profile(shapes: list[StepShape], seconds: list[float]) -> str:
    """A verifier's warm-up profile as JSON for the registry: [[batch, tree tokens, kv tokens, s], ...]
    (forwards only: no drafters, so no sequence speculates)."""
    return json.dumps([[s.batch_size, s.tree_tokens, s.kv_tokens, round(t, 6)] for s, t in zip(shapes, seconds)])


def decode_profile(text: str) -> tuple[list[StepShape], list[float]]:
    rows = json.loads(text) if text else []
    return [StepShape(int(b), int(t), int(k), served=0) for b, t, k, _ in rows], [float(row[3]) for row in rows]


class OnlineFit:
    """Keeps the seed samples (warm-up profile) and a window of recent ones, each featurized once
    as it comes; refits when the coefficients are read after `refit_every` new observations, so a
    model nobody reads (a verifier serving only fixed budgets) costs no fits."""

    def __init__(self, prior: np.ndarray, featurize, seed: tuple[list, list] = ([], []), window: int = 256,
                 refit_every: int = 8):
        self.prior, self.featurize, self.refit_every = prior, featurize, refit_every
        self.seed_features = featurize(list(seed[0])).reshape(-1, len(prior))
        self.seed_y = list(seed[1])
        self.recent: deque = deque(maxlen=window)  # (x, y)
        self._recent_features: deque = deque(maxlen=window)
        self._coefficients = self._fit() if self.seed_y else prior
        self._since_fit = 0

    def observe(self, x, y: float) -> None:
        self.recent.append((x, y))
        self._recent_features.append(self.featurize([x])[0])
        self._since_fit += 1

    @property
    def coefficients(self) -> np.ndarray:
        if self._since_fit >= self.refit_every:
            self._coefficients, self._since_fit = self._fit(), 0
        return self._coefficients

    def recent_features(self) -> np.ndarray:
        return np.array(self._recent_features).reshape(-1, len(self.prior))

    def _fit(self) -> np.ndarray:
        features = np.vstack([self.seed_features, self.recent_features()])
        ys = self.seed_y + [y for _, y in self.recent]
        return fit_linear(features, np.asarray(ys, dtype=float), self.prior)


class StepCostModel(OnlineFit):
    """One verifier's step time, seeded by its warm-up profile (`seed` = shapes, seconds), with
    the speculating factors of the recent window."""

    def __init__(self, prior: StepCost = DEFAULT_STEP_COST, seed: tuple[list, list] = ([], [])):
        self.factors: tuple[tuple[int, float], ...] = ()
        super().__init__(prior.vector(), shape_features, seed)

    def _fit(self) -> np.ndarray:
        coefficients = super()._fit()
        measured = np.array([seconds for _, seconds in self.recent])
        predicted = self.recent_features() @ coefficients
        self.factors = speculating_factors([shape for shape, _ in self.recent], measured / np.maximum(predicted, 1e-9))
        return coefficients

    @property
    def cost(self) -> StepCost:
        return replace(StepCost.from_vector(self.coefficients), speculating_factors=self.factors)


def speculating_factors(shapes: list[StepShape], ratios: np.ndarray) -> tuple[tuple[int, float], ...]:
    """(batch size, factor) for every batch size with FACTOR_SAMPLES served cycles of each kind
    among `shapes`: the speculating cycles' `ratios` (measured / the linear model's price) over the
    plain cycles', geometric means, within FACTOR_RANGE."""
    logs: dict[int, tuple[list, list]] = defaultdict(lambda: ([], []))
    for shape, ratio in zip(shapes, np.log(ratios)):
        if shape.served:
            logs[shape.batch_size][shape.speculating > 0].append(ratio)
    return tuple(sorted((batch, float(np.clip(np.exp(np.mean(speculating) - np.mean(plain)), *FACTOR_RANGE)))
                        for batch, (plain, speculating) in logs.items() if min(len(plain), len(speculating)) >= FACTOR_SAMPLES))


@dataclass(frozen=True)
class Option:
    budget: int
    expected_accepted: float  # draft tokens expected to be accepted at this budget


@dataclass(frozen=True)
class Outlook:
    """One sequence of a verifier's batch, as the controller sees it."""

    kv_tokens: int
    options: tuple[Option, ...]  # the budgets it may get (one, for a request that fixed its own)


def batch_goodput(outlooks: list[Outlook], choice: list[int], cost: StepCost) -> float:
    """Predicted tokens per second of the whole batch with option `choice[i]` for sequence i."""
    return _Totals(outlooks, choice).goodput(cost)


def batch_seconds(outlooks: list[Outlook], choice: list[int], cost: StepCost) -> float:
    """Predicted step time of the whole batch with option `choice[i]` for sequence i."""
    return _Totals(outlooks, choice).seconds(cost)


class _Totals:
    """The batch's sums under one choice."""

    def __init__(self, outlooks: list[Outlook], choice: list[int]):
        self.outlooks, self.choice = outlooks, list(choice)
        picked = [o.options[c] for o, c in zip(outlooks, choice)]
        self.tokens = sum(1.0 + p.expected_accepted for p in picked)
        self.tree = sum(1 + p.budget for p in picked)
        self.speculating = sum(p.budget > 0 for p in picked)
        self.kv = sum(o.kv_tokens for o in outlooks)

    def seconds(self, cost: StepCost) -> float:
        return cost.seconds(StepShape(len(self.outlooks), self.tree, self.kv, self.speculating))

    def goodput(self, cost: StepCost) -> float:
        """Tokens per second; divided by SPECULATION_MARGIN when anyone speculates."""
        return self.tokens / max(self.seconds(cost), 1e-6) / (SPECULATION_MARGIN if self.speculating else 1.0)


def choose_budgets(outlooks: list[Outlook], cost: StepCost, start: list[int] | None = None) -> list[int]:
    """The budgets that maximise the batch's predicted goodput, one budget from the ladder for
    every sequence that may take it (a fixed request keeps its own): a batch that mixes
    speculating and plain sequences pays the drafters' round trip and the tree rows' logits
    without most of the gain (measured: 8 requests half at budget 0, half at 4 ran at 0.9x plain
    and 0.8x all at 4). `start` (option indices: the last choice) stays unless the new one wins
    by SWITCH_MARGIN. Speculation must win by SPECULATION_MARGIN."""
    if all(len(o.options) == 1 for o in outlooks):  # every request fixed its budget: nothing to choose
        return [o.options[0].budget for o in outlooks]
    uniform = [[nearest_option(o, b) for o in outlooks] for b in LADDER]
    best = max((_Totals(outlooks, choice) for choice in uniform), key=lambda t: t.goodput(cost))
    if start is not None and _Totals(outlooks, start).goodput(cost) * SWITCH_MARGIN >= best.goodput(cost):
        best = _Totals(outlooks, start)
    return [o.options[c].budget for o, c in zip(outlooks, best.choice)]


def nearest_option(outlook: Outlook, budget: int) -> int:
    """The index of the option whose budget is closest to `budget`."""
    return min(range(len(outlook.options)), key=lambda i: abs(outlook.options[i].budget - budget))
