"""In-process engine: drafter and verifier loop in one process.

Glossary: a request is prefilled into a KV slot, which yields its first token (the root of the
first draft tree); then every step the drafter proposes a tree within the budget, the verifier
checks all active sequences' trees in one forward pass (continuous batching: sequences join and
leave between steps), and each sequence emits its accepted tokens plus the bonus token.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from specmesh.drafting import DraftTarget, Drafter, Feedback, RecyclingTable, make_drafter
from specmesh.drafting.recycling import TOP_K
from specmesh.model.config import ModelConfig
from specmesh.model.loading import RunnerConfig, load_runner, load_tokenizer
from specmesh.sampling import SamplingParams
from specmesh.stats import GenerationStats, StepStats
from specmesh.stopping import cut_tokens
from specmesh.step import PrefillInput, StepInput, prefill, verify_batch
from specmesh.tree import DraftTree

TokenCallback = Callable[[list[int]], None]


@dataclass(frozen=True)
class Generation:
    token_ids: list[int]
    text: str
    finish_reason: str  # "stop" (EOS or a stop string) or "length"
    stats: GenerationStats


@dataclass(frozen=True)
class Request:
    prompt_token_ids: list[int]
    max_new_tokens: int
    params: SamplingParams
    stop: tuple[str, ...] = ()
    budget: int | None = None
    on_tokens: TokenCallback | None = None


@dataclass
class _Sequence:
    """A request in flight."""

    request: Request
    request_id: str
    slot: int
    params: SamplingParams  # with a concrete seed
    output: list[int] = field(default_factory=list)
    finish_reason: str | None = None
    stats: GenerationStats = field(default_factory=GenerationStats)

    @property
    def context(self) -> list[int]:
        return self.request.prompt_token_ids + self.output


class Engine:
    def __init__(self, runner, tokenizer, model_config: ModelConfig, drafter: Drafter, budget: int, prefill_chunk: int,
                 draft_target: DraftTarget | None = None):
        self.runner = runner
        self.draft_target = draft_target  # where drafters that read the target's weights find them
        self.tokenizer = tokenizer
        self.model_config = model_config
        self.drafter = drafter
        self.budget = budget
        self.prefill_chunk = prefill_chunk
        self.max_context = runner.max_len - prefill_chunk

    @classmethod
    def from_pretrained(
        cls,
        model: str = "default",
        drafter: str = "recycling",
        dtype: str = "auto",
        device: str = "",
        threads: int = 0,
        budget: int = 8,
        num_slots: int = 8,
        max_context: int = 2048,
        recycling_table: RecyclingTable | None = None,
    ) -> "Engine":
        if budget < 0:
            raise ValueError(f"budget must be >= 0, got {budget}")
        config = RunnerConfig(model, dtype, device, threads, num_slots, max_context, max_forward_tokens=256)
        runner, model_config, path = load_runner(config)
        tokenizer = load_tokenizer(path)
        target = DraftTarget.from_config(path, config)
        chosen = make_drafter(drafter, model_config.vocab_size, recycling_table, target)
        return cls(runner, tokenizer, model_config, chosen, budget, config.max_forward_tokens, target)

    def with_drafter(self, drafter: str, budget: int) -> "Engine":
        """Another engine on the same runner (weights and KV slots shared), with its own drafter."""
        chosen = make_drafter(drafter, self.model_config.vocab_size, target=self.draft_target)
        return Engine(self.runner, self.tokenizer, self.model_config, chosen, budget, self.prefill_chunk, self.draft_target)

    # ---- public API -------------------------------------------------------------------------

    def generate(
        self,
        prompt_token_ids: list[int] | str,
        max_new_tokens: int = 128,
        temperature: float = 0.0,
        top_p: float = 1.0,
        top_k: int = 0,
        seed: int | None = None,
        stop: tuple[str, ...] | list[str] = (),
        budget: int | None = None,
        on_tokens: TokenCallback | None = None,
    ) -> Generation:
        """Generate for one prompt (token ids, or text that is tokenized as is)."""
        request = self.make_request(prompt_token_ids, max_new_tokens, temperature, top_p, top_k, seed, stop, budget, on_tokens)
        return self.generate_many([request])[0]

    def make_request(self, prompt_token_ids, max_new_tokens=128, temperature=0.0, top_p=1.0, top_k=0,
                     seed=None, stop=(), budget=None, on_tokens=None) -> Request:
        """A validated request; every bad argument raises ValueError naming the parameter."""
        if isinstance(prompt_token_ids, str):
            prompt_token_ids = self.tokenizer.encode(prompt_token_ids, add_special_tokens=False)
        ids = [int(t) for t in prompt_token_ids]
        if not ids:
            raise ValueError("prompt_token_ids must not be empty")
        vocab = self.model_config.vocab_size
        bad = next((i for i, t in enumerate(ids) if not 0 <= t < vocab), None)
        if bad is not None:
            raise ValueError(f"prompt_token_ids[{bad}]={ids[bad]} is out of range [0, {vocab})")
        if max_new_tokens <= 0:
            raise ValueError(f"max_new_tokens must be > 0, got {max_new_tokens}")
        if len(ids) + max_new_tokens > self.max_context:
            raise ValueError(
                f"max_new_tokens={max_new_tokens} with a {len(ids)}-token prompt exceeds the context window of {self.max_context} tokens"
            )
        if budget is not None and budget < 0:
            raise ValueError(f"budget must be >= 0, got {budget}")
        params = SamplingParams(float(temperature), float(top_p), int(top_k), seed)
        return Request(ids, int(max_new_tokens), params, tuple(stop), budget, on_tokens)

    def generate_many(self, requests: list[Request]) -> list[Generation]:
        """Run requests together with continuous batching; results in request order."""
        waiting = list(enumerate(requests))
        active: list[tuple[int, _Sequence]] = []
        done: dict[int, Generation] = {}
        while waiting or active:
            admitted, waiting = waiting[: self.runner.free_slots], waiting[self.runner.free_slots :]
            if admitted:
                sequences = self._admit([request for _, request in admitted])
                active += [(index, seq) for (index, _), seq in zip(admitted, sequences)]
            self._step([seq for _, seq in active if seq.finish_reason is None])
            for index, seq in [pair for pair in active if pair[1].finish_reason is not None]:
                done[index] = self._release(seq)
            active = [pair for pair in active if pair[1].finish_reason is None]
        return [done[i] for i in range(len(requests))]

    # ---- the loop ---------------------------------------------------------------------------

    def _admit(self, requests: list[Request]) -> list[_Sequence]:
        """Allocate slots and prefill the new sequences together; each gets its first token."""
        started = time.perf_counter()
        sequences = []
        for request in requests:
            params = request.params.with_seed()
            seq = _Sequence(request, uuid.uuid4().hex, self.runner.allocate_slot(), params)
            seq.stats.prompt_tokens, seq.stats.seed = len(request.prompt_token_ids), params.seed
            sequences.append(seq)
        inputs = [PrefillInput(seq.slot, seq.request.prompt_token_ids, seq.params) for seq in sequences]
        prefilled = prefill(self.runner, inputs, self.prefill_chunk, hidden=self.drafter.wants_hidden)
        elapsed = time.perf_counter() - started
        for seq, done in zip(sequences, prefilled):
            seq.stats.prefill_s = seq.stats.total_s = elapsed
            self.drafter.start(seq.request_id, seq.context + [done.first], done.hidden)
            self._emit(seq, [done.first])
        return sequences

    def _step(self, active: list[_Sequence]) -> None:
        if not active:
            return
        started = time.perf_counter()
        budgets = [self._budget(seq) for seq in active]
        trees = [self.drafter.propose(seq.request_id, seq.context, b) for seq, b in zip(active, budgets)]
        drafted = time.perf_counter()
        k = TOP_K if self.drafter.wants_recycling_rows else 0
        inputs = [StepInput(seq.slot, seq.output[-1], tree, seq.params, k) for seq, tree in zip(active, trees)]
        outcomes = verify_batch(self.runner, inputs, hidden=self.drafter.wants_hidden)
        verified = time.perf_counter()
        for seq, tree, budget, outcome in zip(active, trees, budgets, outcomes):
            verdict = outcome.verdict
            self.drafter.observe(
                seq.request_id,
                Feedback((seq.output[-1], *tree.tokens), verdict.tokens, outcome.recycling_rows, outcome.hidden),
            )
            seq.stats.steps.append(
                StepStats(tree.num_nodes, verdict.num_accepted, len(active), drafted - started, verified - drafted, budget)
            )
            seq.stats.total_s += verified - started
            self._emit(seq, list(verdict.tokens))

    def _budget(self, seq: _Sequence) -> int:
        """The sequence's budget, within its KV slot and the largest tree a forward may carry."""
        budget = self.budget if seq.request.budget is None else seq.request.budget
        room = self.runner.max_len - self.runner.slot_length(seq.slot) - 1
        remaining = seq.request.max_new_tokens - len(seq.output)
        return min(budget, room, self.prefill_chunk - 1) if remaining > 1 else 0

    def _emit(self, seq: _Sequence, tokens: list[int]) -> None:
        """Append tokens, cut at EOS / stop string / max_new_tokens, stream them."""
        request = seq.request
        tokens, seq.finish_reason = cut_tokens(tokens, len(seq.output), request.max_new_tokens, self.model_config.eos_token_ids)
        start = len(seq.output)
        seq.output.extend(tokens)
        if request.stop and self._cut_at_stop(seq, start):
            seq.finish_reason = "stop"
        if request.on_tokens and len(seq.output) > start:
            request.on_tokens(seq.output[start:])

    def _cut_at_stop(self, seq: _Sequence, start: int) -> bool:
        """If a stop string appears, drop the tokens after the one that completed it."""
        for end in range(start + 1, len(seq.output) + 1):
            text = self.tokenizer.decode(seq.output[:end], skip_special_tokens=True)
            if any(s in text for s in seq.request.stop):
                del seq.output[end:]
                return True
        return False

    def _release(self, seq: _Sequence) -> Generation:
        self.drafter.finish(seq.request_id)
        self.runner.release_slot(seq.slot)
        text = self.tokenizer.decode(seq.output, skip_special_tokens=True)
        for stop in seq.request.stop:
            text = text.split(stop)[0]
        return Generation(list(seq.output), text, seq.finish_reason, seq.stats)
