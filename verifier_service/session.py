"""A session: one request on this verifier, from its prefill to its last step.

Glossary: the session's context is prompt + output; the last output token is the root of the
next draft tree and is not in the KV cache yet. `tree` is the drafter's proposal once it has
arrived (None while the drafter is working); a session without a drafter always has an empty
tree ready, i.e. it decodes without speculation.

Coalescing (the stream interval): a step's tokens may be held for up to the session's stream
interval so that the steps of that time reach the orchestrator in one event. Every event costs
the orchestrator, its Redis commit and the client a wake-up, and on a small machine that CPU
comes out of the verifier's forward (vLLM's `stream_interval` does this counted in tokens).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable

from specmesh.drafting import Feedback
from specmesh.sampling import SamplingParams
from specmesh.stats import StepStats
from specmesh.tree import DraftTree


FEATURE_METHODS = ("eagle", "hybrid")  # drafters that get the target's features
LOG_PROB_SCORED_METHODS = ("eagle",)  # drafters whose tree scores are path log-probabilities


@dataclass(frozen=True)
class SessionSpec:
    """What the orchestrator asks for (the SessionStart message, converted)."""

    request_id: str
    prompt_token_ids: list[int]
    generated_token_ids: list[int]
    max_new_tokens: int
    params: SamplingParams
    drafter_method: str
    drafter_address: str
    budget: int
    epoch: int
    stream_interval_s: float = 0.0  # how long a step's tokens may wait to share an event (0 = never)


@dataclass(frozen=True)
class StepEvent:
    index: int  # 0 = the token from the prefill, then one per event
    token_ids: list[int]
    steps: tuple[StepStats, ...]  # the verification steps whose tokens it carries; () for the prefill's
    kv_length: int


@dataclass(frozen=True)
class Finished:
    finish_reason: str  # "stop", "length", "cancelled"


@dataclass
class Session:
    spec: SessionSpec
    emit: Callable[[StepEvent | Finished], None]  # thread-safe: hands an event to the gRPC stream
    slot: int = -1
    output: list[int] = field(default_factory=list)
    budget: int = 0
    tree: DraftTree | None = None
    tree_budget: int = 0  # the budget the pending tree was asked for
    speculating: bool = False  # it drafts with a drafter service ...
    linked: bool = False  # ... whose link is open (from its first budget above 0)
    drafter_wants_rows: bool = False  # its drafter learns from the recycling rows (its trees say so)
    steps: int = 0
    tree_requested_at: float = 0.0
    draft_s: float = 0.0  # how long the last tree took to arrive
    done: bool = False
    prompt_features: object | None = None  # [len(context) - 1, hidden] tensor for an EAGLE drafter's start
    drafter_address: str = ""  # the drafter serving the session now (the spec's, until it is lost)
    lost_drafters: set[str] = field(default_factory=set)
    last_step_at: float = 0.0  # when its previous step ended (the step clock: see cycle)
    unsent: list[Feedback] = field(default_factory=list)  # steps at budget 0 the drafter has not heard of yet
    trace: object | None = None  # tracing.SessionTrace: the orchestrator's trace context, if it sent one
    events: int = 0  # step events sent
    held_tokens: list[int] = field(default_factory=list)  # steps not sent yet (coalescing), their tokens ...
    held_steps: list[StepStats] = field(default_factory=list)  # ... and stats
    held_since: float = 0.0  # when the oldest of them was held (perf_counter)

    def __post_init__(self) -> None:
        self.drafter_address = self.drafter_address or self.spec.drafter_address

    @property
    def request_id(self) -> str:
        return self.spec.request_id

    @property
    def wants_recycling_rows(self) -> bool:
        """Top-k rows cost a top-k over every tree token's logits and go over the wire: only for
        a linked drafter that said it uses them (recycling; hybrid without an EAGLE head)."""
        return self.linked and self.drafter_wants_rows

    @property
    def wants_features(self) -> bool:
        return self.spec.drafter_method in FEATURE_METHODS

    @property
    def context(self) -> list[int]:
        return self.spec.prompt_token_ids + self.output

    def path_probs(self, tree: DraftTree) -> tuple[float, ...]:
        """A tree's draft path probabilities, best first, where its scores are path
        log-probabilities (the acceptance model's input); () otherwise."""
        if self.spec.drafter_method not in LOG_PROB_SCORED_METHODS or not tree.scores:
            return ()
        return tuple(sorted((math.exp(score) for score in tree.scores), reverse=True))

    def cycle(self, now: float) -> float:
        """Seconds since the session's previous step ended: its whole step cycle (forward,
        feedback, its drafter, the forwards it sat out); 0 for its first step. `now` is on the
        step clock, which stops while the verifier prefills: admitting a request is not part of
        what a step of some shape costs (a burst's first cycles spanned its prefills, 330-580 ms,
        and a fit that read them as the price of speculation held requests at budget 0 after it)."""
        previous, self.last_step_at = self.last_step_at, now
        return now - previous if previous else 0.0

    def hold(self, tokens: list[int], stats: StepStats | None, now: float) -> None:
        """A step's tokens and stats (None: the prefill's token) wait for the next event."""
        if not self.holding:
            self.held_since = now
        self.held_tokens += tokens
        if stats is not None:
            self.held_steps.append(stats)

    @property
    def holding(self) -> bool:
        return bool(self.held_tokens or self.held_steps)

    def due(self, now: float) -> bool:
        """Whether the held steps have waited their stream interval."""
        return self.holding and now - self.held_since >= self.spec.stream_interval_s

    def take_event(self, kv_length: int) -> StepEvent:
        """The held steps (or the prefill's token) as the next event."""
        event = StepEvent(self.events, self.held_tokens, tuple(self.held_steps), kv_length)
        self.events, self.held_tokens, self.held_steps = self.events + 1, [], []
        return event

    def await_tree(self, budget: int) -> None:
        self.tree, self.tree_budget, self.tree_requested_at = None, budget, time.perf_counter()

    def take_tree(self, tree: DraftTree, drafter_wants_rows: bool) -> None:
        self.tree, self.draft_s = tree, time.perf_counter() - self.tree_requested_at
        self.drafter_wants_rows = drafter_wants_rows

    def decode_plainly(self) -> None:
        """No drafter (none asked for, or it was lost): the next step verifies an empty tree."""
        self.tree, self.tree_budget, self.draft_s = DraftTree.empty(), 0, 0.0
