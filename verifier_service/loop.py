"""The verifier's engine loop (a thread): continuous batching over sessions.

Each iteration: take commands (new sessions, trees that arrived, budgets, cancels); prefill new
sessions together; then verify every session whose tree is ready in one forward pass. A session
still waiting for its drafter simply sits out the iteration, so a slow drafter delays only its
own session. After a step the session's tokens go to the orchestrator and the feedback to its
drafter, which answers with the next tree.
"""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass

import torch

from specmesh.drafting import Feedback, merge_feedback
from specmesh.drafting.recycling import TOP_K
from specmesh.model.config import ModelConfig
from specmesh.stats import StepStats
from specmesh.step import PrefillInput, StepInput, StepOutcome, prefill, verify_batch
from specmesh.stopping import cut_tokens
from specmesh.tree import DraftTree
from verifier_service import metrics, tracing
from verifier_service.session import Finished, Session

DRAFT_TIMEOUT_S = 5.0  # a drafter that takes longer for one tree is treated as lost
MAX_DRAFTER_SWITCHES = 2  # drafters a session may lose before it stops speculating
MAX_UNSENT_STEPS = 16  # steps at budget 0 whose feedback waits for the next tree request, at most
BATCH_WINDOW_S = 0.01  # before a forward, wait this long at most for trees that are on their way ...
BATCH_WINDOW_SHARE = 0.5  # ... or this share of the last forward's time, if longer: a session that
# misses the batch costs a forward of its own, so waiting up to half of one still pays


@dataclass(frozen=True)
class BatchShape:
    """One verification forward, for the goodput controller's cost model."""

    forward_index: int
    tree_tokens: int  # rows: Σ (1 + tree nodes)
    kv_tokens: int  # Σ KV lengths before the step
    speculating: int  # sequences with a draft tree


@dataclass(frozen=True)
class Admit:
    session: Session


@dataclass(frozen=True)
class TreeReady:
    request_id: str
    tree: DraftTree
    wants_recycling_rows: bool  # the drafter learns from the recycling rows of the steps


@dataclass(frozen=True)
class DrafterLost:
    request_id: str


@dataclass(frozen=True)
class SetBudget:
    request_id: str
    budget: int


@dataclass(frozen=True)
class Cancel:
    request_id: str


class VerifierLoop(threading.Thread):
    def __init__(self, runner, model_config: ModelConfig, drafters, prefill_chunk: int, max_tree_tokens: int):
        super().__init__(name="verifier-loop", daemon=True)
        self.runner, self.model_config, self.drafters = runner, model_config, drafters
        self.prefill_chunk, self.max_tree_tokens = prefill_chunk, max_tree_tokens
        self.inbox: queue.Queue = queue.Queue()
        self.sessions: dict[str, Session] = {}
        self.waiting: list[Session] = []  # admitted, no free KV slot yet
        self.forwards = 0  # verification forwards so far: the steps of one batch share the index
        self.last_forward_s = 0.0
        self.prefill_s = 0.0  # seconds spent prefilling so far (not part of any session's step cycle)
        self._stopped = threading.Event()

    # ---- called from other threads ------------------------------------------------------------

    def submit(self, command) -> None:
        self.inbox.put(command)

    def stop(self) -> None:
        self._stopped.set()
        self.inbox.put(None)

    def snapshot(self) -> list[tuple[str, int, int, int]]:
        """(request id, slot, KV length, epoch) of every running session (for the registry)."""
        return [(s.request_id, s.slot, self.runner.slot_length(s.slot), s.spec.epoch)
                for s in list(self.sessions.values()) if s.slot >= 0]

    # ---- the loop ---------------------------------------------------------------------------------

    def run(self) -> None:
        while not self._stopped.is_set():
            self._take_commands(block=not self._ready())
            self._send_due()
            self._drop_stalled_drafters()
            self._admit_waiting()
            self._wait_for_trees_in_flight()
            ready = self._ready()
            if ready:
                self._verify(ready)

    def _ready(self) -> list[Session]:
        return [s for s in self.sessions.values() if s.slot >= 0 and s.tree is not None and not s.done]

    def _wait_for_trees_in_flight(self) -> None:
        """After a step every session's drafter works on its next tree at once; the trees come
        back within a few ms. Waiting that long (up to half a forward when the machine is busy)
        keeps the sessions in one batch instead of splitting them over alternating forwards; a
        slower drafter misses only its own turn."""
        deadline = time.perf_counter() + max(BATCH_WINDOW_S, BATCH_WINDOW_SHARE * self.last_forward_s)
        while any(s.speculating and s.tree is None for s in self.sessions.values()):
            remaining = deadline - time.perf_counter()
            if remaining <= 0:
                return
            try:
                command = self.inbox.get(timeout=remaining)
            except queue.Empty:
                return
            if command is None:  # stop: leave it for the main loop
                self.inbox.put(None)
                return
            self._handle(command)

    def _take_commands(self, block: bool) -> None:
        try:
            command = self.inbox.get(timeout=0.05) if block else self.inbox.get_nowait()
        except queue.Empty:
            return
        while command is not None:
            self._handle(command)
            try:
                command = self.inbox.get_nowait()
            except queue.Empty:
                return

    def _handle(self, command) -> None:
        if isinstance(command, Admit):
            self._replace(command.session.request_id)
            self.waiting.append(command.session)
            return
        session = self.sessions.get(command.request_id) or next((s for s in self.waiting if s.request_id == command.request_id), None)
        if session is None or session.done:
            return
        if isinstance(command, TreeReady) and session.speculating and session.tree is None:
            if self._acceptable(command.tree, session):
                session.take_tree(command.tree, command.wants_recycling_rows)
            else:  # a drafter that breaks the contract is treated as lost
                self.drafters.close(session)
                self._lose_drafter(session)
        elif isinstance(command, DrafterLost):
            self._lose_drafter(session)
        elif isinstance(command, SetBudget):
            session.budget = command.budget
        elif isinstance(command, Cancel):
            self._finish(session, "cancelled")

    def _replace(self, request_id: str) -> None:
        """A request re-opened here (the orchestrator retried it) supersedes its old session."""
        old = self.sessions.get(request_id) or next((s for s in self.waiting if s.request_id == request_id), None)
        if old is not None and not old.done:
            self._finish(old, "cancelled")

    def _drop_stalled_drafters(self) -> None:
        deadline = time.perf_counter() - DRAFT_TIMEOUT_S
        for session in list(self.sessions.values()):
            if session.speculating and session.tree is None and session.tree_requested_at < deadline:
                self.drafters.close(session)
                self._lose_drafter(session)

    def _acceptable(self, tree: DraftTree, session: Session) -> bool:
        vocab = self.model_config.vocab_size
        return tree.num_nodes <= session.tree_budget and all(0 <= t < vocab for t in tree.tokens)

    def _lose_drafter(self, session: Session) -> None:
        """Move to another drafter serving the method, or decode on without speculation. EAGLE
        sessions do not move: a new drafter would need the target's features of the whole
        context, which the verifier does not keep."""
        session.lost_drafters.add(session.drafter_address)
        replacement = None
        if not session.wants_features and len(session.lost_drafters) <= MAX_DRAFTER_SWITCHES:
            replacement = self.drafters.pick(session.spec.drafter_method, session.lost_drafters)
        if replacement is None:
            session.speculating = session.linked = False
            session.decode_plainly()
            return
        session.drafter_address = replacement
        self._open_drafter(session)

    def _admit_waiting(self) -> None:
        admitted = []
        while self.waiting and self.runner.free_slots:
            session = self.waiting.pop(0)
            session.slot = self.runner.allocate_slot()
            self.sessions[session.request_id] = session
            admitted.append(session)
        if not admitted:
            return
        spec_inputs = [PrefillInput(s.slot, s.spec.prompt_token_ids + s.spec.generated_token_ids, s.spec.params) for s in admitted]
        started, started_ns = time.perf_counter(), time.time_ns()
        prefilled = prefill(self.runner, spec_inputs, self.prefill_chunk, hidden=any(s.wants_features for s in admitted))
        tracing.prefill(admitted, started_ns, time.time_ns())
        self.prefill_s += time.perf_counter() - started
        for session, done in zip(admitted, prefilled):
            session.output = list(session.spec.generated_token_ids)
            session.budget = session.spec.budget
            if session.wants_features:
                session.prompt_features = done.hidden
            if self._emit_tokens(session, [done.first], None) and not session.done:
                self._request_first_tree(session)

    def _request_first_tree(self, session: Session) -> None:
        spec = session.spec
        if spec.drafter_method != "none" and spec.drafter_address:
            session.speculating = True
            self._open_drafter(session)
        else:
            session.decode_plainly()

    def _open_drafter(self, session: Session) -> None:
        """Start a drafter on the whole context; at budget 0 this waits for the first budget
        above 0, so a request the controller holds at 0 costs its drafter nothing (an EAGLE
        drafter would read the whole prompt and every step)."""
        budget = self._budget(session)
        session.linked = budget > 0
        if session.linked:
            if session.wants_features and session.unsent:  # then the features of the steps decoded meanwhile
                session.prompt_features = torch.cat([session.prompt_features, *(step.hidden for step in session.unsent)])
            session.unsent = []
            self.drafters.open(session, budget)
        self._expect_tree(session, budget)

    @staticmethod
    def _expect_tree(session: Session, budget: int) -> None:
        """Budget 0: the session decodes this step without speculation (its drafter, if linked,
        stays linked for the next budget)."""
        if budget > 0:
            session.await_tree(budget)
        else:
            session.decode_plainly()

    def _verify(self, ready: list[Session]) -> None:
        started, started_ns = time.perf_counter(), time.time_ns()
        inputs = [
            StepInput(s.slot, s.output[-1], s.tree, s.spec.params, TOP_K if s.wants_recycling_rows else 0) for s in ready
        ]
        batch = BatchShape(self.forwards, sum(1 + s.tree.num_nodes for s in ready),
                           sum(self.runner.slot_length(s.slot) for s in ready), sum(s.tree.num_nodes > 0 for s in ready))
        outcomes = verify_batch(self.runner, inputs, hidden=any(s.speculating and s.wants_features for s in ready))
        ended, ended_ns = time.perf_counter(), time.time_ns()
        verify_s = self.last_forward_s = ended - started
        self.forwards += 1
        # The drafters first (their next trees are what the sessions wait for); the stats, tracing
        # and step events after (right after a forward the caches are cold, and building a step's
        # stats first took ~35 us of each drafter's wait), from what the step was asked for.
        stepped = []  # (session, (budget, draft_s), its kept tokens and finish reason; None for a session that had ended)
        for session, step, outcome in zip(ready, inputs, outcomes):
            asked, taken = (session.tree_budget, session.draft_s), None
            if not session.done:
                taken = self._take_tokens(session, list(outcome.verdict.tokens))
                if taken[1] is None:  # it goes on
                    self._next_tree(session, step, outcome)
            stepped.append((session, asked, taken))
        for (session, (budget, draft_s), taken), step, outcome in zip(stepped, inputs, outcomes):
            stats = StepStats(step.tree.num_nodes, outcome.verdict.num_accepted, len(ready), draft_s, verify_s, budget,
                              batch.forward_index, batch.tree_tokens, batch.kv_tokens, session.path_probs(step.tree),
                              batch.speculating, session.cycle(ended - self.prefill_s))
            tracing.step(session, stats, session.steps, started_ns, ended_ns)
            if taken is not None:
                self._send_step(session, *taken, stats)

    def _next_tree(self, session: Session, step: StepInput, outcome: StepOutcome) -> None:
        """After a step the session goes on from: its feedback to its drafter, or, without one, an empty tree."""
        if session.speculating:
            hidden = outcome.hidden if session.wants_features else None
            session.unsent.append(Feedback((step.root, *step.tree.tokens), outcome.verdict.tokens, outcome.recycling_rows, hidden))
            self._ask_drafter(session)
        else:
            session.decode_plainly()

    def _ask_drafter(self, session: Session) -> None:
        """After a step, the next tree; at budget 0 nothing: the step's feedback waits for the
        next tree request (at most MAX_UNSENT_STEPS steps), or for the link to open."""
        if not session.linked:
            self._open_drafter(session)
            return
        budget = self._budget(session)
        if budget > 0 or len(session.unsent) >= MAX_UNSENT_STEPS:
            self.drafters.feedback(session, merge_feedback(session.unsent), budget)
            session.unsent = []
        self._expect_tree(session, budget)

    def _budget(self, session: Session) -> int:
        """The session's budget, within the KV slot and the largest tree a forward may carry."""
        room = self.runner.max_len - self.runner.slot_length(session.slot) - 1
        remaining = session.spec.max_new_tokens - len(session.output)
        return min(session.budget, room, self.max_tree_tokens - 1) if remaining > 1 else 0

    def _emit_tokens(self, session: Session, tokens: list[int], stats: StepStats | None) -> bool:
        """Send a step event; finish the session if it ended. False if it had already ended."""
        if session.done:
            return False
        self._send_step(session, *self._take_tokens(session, tokens), stats)
        return True

    def _take_tokens(self, session: Session, tokens: list[int]) -> tuple[list[int], str | None]:
        """Append a step's tokens, cut at EOS or max_new_tokens; returns them and the finish reason, if any."""
        kept, reason = cut_tokens(tokens, len(session.output), session.spec.max_new_tokens, self.model_config.eos_token_ids)
        session.output.extend(kept)
        return kept, reason

    def _send_step(self, session: Session, kept: list[int], reason: str | None, stats: StepStats | None) -> None:
        """Hand a step's tokens to the orchestrator: at once for the prefill's token and the last
        step, else when the session's stream interval says (coalescing, see session.py)."""
        now = time.perf_counter()
        session.hold(kept, stats, now)
        if stats is not None:
            metrics.step(session, stats, len(kept))
        session.steps += 1
        if stats is None or reason is not None or session.due(now):
            self._send_held(session)
        if reason is not None:
            self._finish(session, reason)

    def _send_due(self) -> None:
        """Steps held past their stream interval (their session is waiting for a tree) go now."""
        now = time.perf_counter()
        for session in self.sessions.values():
            if session.due(now):
                self._send_held(session)

    def _send_held(self, session: Session) -> None:
        session.emit(session.take_event(self.runner.slot_length(session.slot)))

    def _finish(self, session: Session, reason: str) -> None:
        if session.holding:  # cancelled or superseded: what it has, first
            self._send_held(session)
        session.done = True
        if session in self.waiting:
            self.waiting.remove(session)
        if session.slot >= 0:
            self.runner.release_slot(session.slot)
            self.sessions.pop(session.request_id, None)
        if session.speculating:
            self.drafters.close(session)
        session.emit(Finished(reason))
