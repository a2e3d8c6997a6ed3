"""The distributed stack end to end: client -> orchestrator -> verifier <-> drafter, with the real
SmolLM2 (fp32) in separate processes and request state in the real Redis."""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import threading
import time
import uuid

import grpc
import pytest
import torch
from service_stack import no_sessions_left, services, wait_until

from specmesh.client import Client, SpecmeshError, build_request
from specmesh.datasets import load_prompts
from specmesh.store.keys import Keys
from specmesh.store.requests import RequestStore
from specmesh.text import TextCodec
from specmesh.v1 import common_pb2, drafter_pb2, drafter_pb2_grpc, orchestrator_pb2_grpc, verifier_pb2, verifier_pb2_grpc

NEW_TOKENS = 64


@pytest.fixture(scope="module")
def codec(default_model_dir) -> TextCodec:
    return TextCodec.from_dir(default_model_dir)


@pytest.fixture(scope="module")
def prompts(codec) -> list[list[int]]:
    chosen = load_prompts("mtbench", 3) + load_prompts("humaneval", 2)
    return [codec.chat_prompt(p.text) for p in chosen]


@pytest.fixture(scope="module")
def hf_greedy(default_model_dir, prompts) -> list[list[int]]:
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(default_model_dir, dtype=torch.float32).eval()
    outputs = []
    for ids in prompts:
        inputs = torch.tensor([ids])
        with torch.inference_mode():
            out = hf.generate(inputs, attention_mask=torch.ones_like(inputs), max_new_tokens=NEW_TOKENS,
                              do_sample=False, pad_token_id=hf.generation_config.eos_token_id)
        outputs.append(out[0, len(ids):].tolist())
    return outputs


@pytest.fixture(scope="module")
def client(stack):
    with Client(stack.address, timeout=600) as client:
        yield client


@pytest.mark.parametrize("drafter, budget", [("recycling", 8), ("ngram", 8), ("eagle", 8), ("hybrid", 8)])
def test_greedy_output_is_token_identical_to_hf(client, prompts, hf_greedy, drafter, budget):
    accepted = 0
    for ids, expected in zip(prompts, hf_greedy):
        result = client.generate(token_ids=ids, max_new_tokens=NEW_TOKENS, drafter=drafter, budget=budget)
        assert result.token_ids == expected
        assert result.stats.drafter and result.stats.verifier
        accepted += result.stats.accepted_tokens
    assert accepted > 0  # the drafter service really speculated


def session_events(verifier: str, start: verifier_pb2.SessionStart, controls: queue.Queue | None = None):
    """A session straight on a verifier's Session stream: its step events until it finishes.
    What the caller puts into `controls` meanwhile (budget updates, a cancel) goes after the start."""
    controls = queue.Queue() if controls is None else controls
    controls.put(verifier_pb2.SessionRequest(start=start))
    with grpc.insecure_channel(verifier) as channel:
        for event in verifier_pb2_grpc.VerifierStub(channel).Session(iter(controls.get, None), timeout=300):
            if event.WhichOneof("kind") == "finished":
                break
            yield event.step
        controls.put(None)


def greedy_start(request_id: str, prompt: list[int], max_new_tokens: int) -> verifier_pb2.SessionStart:
    """A greedy session without a drafter (set drafter_method, drafter_address and budget to speculate)."""
    return verifier_pb2.SessionStart(request_id=f"{request_id}-{uuid.uuid4().hex[:8]}", prompt_token_ids=prompt,
                                     max_new_tokens=max_new_tokens, sampling=common_pb2.SamplingParams(temperature=0.0),
                                     drafter_method="none", epoch=1)


@pytest.mark.parametrize("first_budget, updates", [(8, {1: 0, 11: 8}), (0, {9: 8})], ids=["zero-midway", "zero-first"])
def test_budget_zero_for_a_stretch_of_steps_keeps_eagle_exact(stack, redis_client, prompts, hf_greedy, first_budget, updates):
    """Sessions held at budget 0 for a stretch of steps, straight on a verifier's Session stream:
    the EAGLE drafter hears of those steps only with the next tree request (one merged feedback),
    or, for a session that starts at 0, is started only then, on the whole context; the output
    stays token-identical to HF greedy."""
    verifier = services(redis_client, stack, "verifier")[0].address
    start = greedy_start("budget-zero", prompts[0], NEW_TOKENS)
    start.drafter_method, start.budget = "eagle", first_budget
    start.drafter_address = services(redis_client, stack, "drafter")[0].address
    controls: queue.Queue = queue.Queue()
    tokens, budgets = [], []
    for step in session_events(verifier, start, controls):
        assert len(step.steps) == (step.index > 0)  # stream_interval_ms 0: an event per step
        tokens += step.token_ids
        budgets.append(step.steps[0].budget if step.steps else 0)
        if step.index in updates:
            controls.put(verifier_pb2.SessionRequest(budget=verifier_pb2.BudgetUpdate(budget=updates[step.index])))
    assert tokens == hf_greedy[0]
    assert budgets[2:9].count(0) >= 5 and 8 in budgets[16:]  # held at 0 (an update lands a step or two late), then drafting


def test_steps_coalesce_into_events_of_the_stream_interval(stack, redis_client, prompts, hf_greedy):
    """A session that lets a step's tokens wait 300 ms gets its steps several to an event, the
    prefill's token alone and at once, events numbered 0, 1, ...; the tokens are HF greedy's."""
    verifier = services(redis_client, stack, "verifier")[0].address
    start = greedy_start("coalesced", prompts[0], NEW_TOKENS)
    start.stream_interval_ms = 300
    events = list(session_events(verifier, start))
    assert [e.index for e in events] == list(range(len(events)))
    assert (len(events[0].token_ids), len(events[0].steps)) == (1, 0)
    assert [len(e.token_ids) for e in events[1:]] == [len(e.steps) for e in events[1:]]  # no drafter: a token a step
    assert max(len(e.steps) for e in events) > 1 and len(events) < NEW_TOKENS / 2
    assert [t for e in events for t in e.token_ids] == hf_greedy[0]


def test_a_step_cycle_leaves_out_the_prefills_it_waited_for(stack, redis_client, prompts):
    """The cycle a step reports (the cost model's sample) is the session's own step cycle: when
    other requests' long prompts are prefilled between two of its steps, that wait is not in it
    (a burst's first cycles spanned its prefills, and the fit read them as the price of
    speculation)."""
    verifier = services(redis_client, stack, "verifier")[0].address
    arrivals, others = [], []
    for step in session_events(verifier, greedy_start("cycled", prompts[0], 24)):
        arrivals.append((time.perf_counter(), [s.cycle_ms for s in step.steps]))
        if step.index == 8:
            long_prompt = (prompts[1] * 8)[:600]
            others = [threading.Thread(target=lambda i=i: list(session_events(verifier, greedy_start(f"long-{i}", long_prompt, 1))))
                      for i in range(3)]
            for thread in others:
                thread.start()
    for thread in others:
        thread.join()
    gap, (cycle_ms,) = max(((t - before, steps) for (before, _), (t, steps) in zip(arrivals[2:], arrivals[3:])), key=lambda g: g[0])
    typical_ms = sorted(c for _, steps in arrivals for c in steps)[len(arrivals) // 2]
    assert gap > 0.2 and gap > 5 * typical_ms / 1000  # the prefills came between two of its steps
    assert cycle_ms < 2 * typical_ms


def test_eight_concurrent_requests_each_equal_their_solo_run(client, prompts):
    requests = [
        dict(token_ids=prompts[i % len(prompts)][: 20 + 7 * i], max_new_tokens=24 + 4 * i, drafter="recycling",
             **({"temperature": 0.8, "top_p": 0.95, "seed": 100 + i} if i % 2 else {}))
        for i in range(8)
    ]
    solo = [client.generate(**r).token_ids for r in requests]
    results: list = [None] * 8

    def run(i: int) -> None:
        results[i] = client.generate(**requests[i]).token_ids

    threads = [threading.Thread(target=run, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == solo


@pytest.mark.parametrize("kwargs, field", [
    (dict(token_ids=[]), "token_ids"),
    (dict(token_ids=[1, 10**6]), "token_ids\\[1\\]"),
    (dict(prompt=""), "prompt"),
    (dict(token_ids=[1, 2], max_new_tokens=0), "max_new_tokens"),
    (dict(token_ids=[1, 2], max_new_tokens=10**6), "max_new_tokens"),
    (dict(token_ids=[1, 2], temperature=-1.0), "temperature"),
    (dict(token_ids=[1, 2], top_p=0.0), "top_p"),
    (dict(token_ids=[1, 2], top_k=-1), "top_k"),
    (dict(token_ids=[1, 2], drafter="medusa"), "drafter"),
    (dict(token_ids=[1, 2], budget=-2), "budget"),
])
def test_bad_requests_get_invalid_argument_naming_the_field(client, kwargs, field):
    with pytest.raises(SpecmeshError) as error:
        client.generate(**kwargs)
    assert error.value.code.name == "INVALID_ARGUMENT"
    assert pytest.importorskip("re").search(field, error.value.message)
    assert client.generate(token_ids=[1, 2, 3], max_new_tokens=2).finish_reason in ("length", "stop")


def test_cancel_and_deadline_free_the_sessions(client, prompts, redis_client, stack):
    stream = client.generate_stream(token_ids=prompts[0], max_new_tokens=400, drafter="recycling")
    first = next(stream)
    wait_until(lambda: not no_sessions_left(redis_client, stack), what="a session to show up")
    stream.close()  # the client goes away mid-request
    wait_until(lambda: no_sessions_left(redis_client, stack), what="verifier and drafter to free the session")
    record = RequestStore(redis_client, Keys(stack.config.redis_prefix)).get(first.request_id)
    assert record.status == "cancelled"

    with pytest.raises(SpecmeshError) as error:
        client.generate(token_ids=prompts[1], max_new_tokens=400, timeout=1.5)
    assert error.value.code.name == "DEADLINE_EXCEEDED"
    wait_until(lambda: no_sessions_left(redis_client, stack), what="sessions freed after the deadline")


def test_a_whole_request_gets_its_answer_in_one_message_equal_to_the_stream(client, prompts, stack):
    ask = dict(token_ids=prompts[0], max_new_tokens=NEW_TOKENS, drafter="recycling", budget=8, stop=["."])
    chunks = list(client.generate_stream(**ask))
    with grpc.insecure_channel(stack.address) as channel:
        messages = list(orchestrator_pb2_grpc.OrchestratorStub(channel).Generate(build_request(whole=True, **ask), timeout=600))
    assert len(chunks) > 3 and len(messages) == 1
    (whole,) = messages
    assert list(whole.token_ids) == [t for c in chunks for t in c.token_ids]
    assert whole.text == "".join(c.text for c in chunks) and "." not in whole.text
    assert whole.finish_reason == chunks[-1].finish_reason == "stop"
    assert whole.stats.generated_tokens == len(whole.token_ids) and whole.stats.steps > 0
    assert client.generate(**ask).token_ids == list(whole.token_ids)  # Client.generate asks for the whole answer


def test_a_whole_answer_reaches_redis_in_fewer_events_than_a_stream(client, prompts, redis_client, stack):
    """No client waits on a whole answer's steps: its verifier holds them up to 100 ms and sends
    them as one event, one Redis commit; a streamed request gets an event per step. Same tokens."""
    ask = dict(token_ids=prompts[1], max_new_tokens=NEW_TOKENS, drafter="none")
    whole = client.generate(**ask)
    streamed = list(client.generate_stream(**ask))
    store = RequestStore(redis_client, Keys(stack.config.redis_prefix))
    whole_record, streamed_record = store.get(whole.request_id), store.get(streamed[-1].request_id)
    events = {name: int(r.fields["event"]) + 1 for name, r in (("whole", whole_record), ("streamed", streamed_record))}
    steps = int(whole_record.fields["steps"])
    assert steps == int(streamed_record.fields["steps"]) == len(whole.token_ids) - 1  # no drafter: a token a step
    assert events["streamed"] == steps + 1  # the prefill's token, then one a step
    assert 2 <= events["whole"] < steps / 2
    assert whole.token_ids == [t for c in streamed for t in c.token_ids]


def test_cli_generate_at_an_address_prints_the_answer_as_json(client, stack):
    out = subprocess.run([sys.executable, "-m", "specmesh.cli", "generate", "What is 2+2?", "--address", stack.address,
                          "--max-new-tokens", "12", "--drafter", "ngram", "--budget", "4", "--json"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    printed = json.loads(out.stdout)
    expected = client.generate(prompt="What is 2+2?", chat=True, max_new_tokens=12, drafter="ngram", budget=4)
    assert printed["token_ids"] == expected.token_ids and printed["text"] == expected.text
    assert printed["finish_reason"] == expected.finish_reason and printed["stats"]["generated_tokens"] == len(expected.token_ids)


def test_get_request_reports_state_and_tokens(client, prompts):
    result = client.generate(token_ids=prompts[2], max_new_tokens=16, drafter="ngram")
    info = client.get_request(result.request_id)
    assert info.status == "finished" and info.token_ids == result.token_ids
    assert info.stats.generated_tokens == len(result.token_ids) and info.finish_reason == result.finish_reason
    with pytest.raises(SpecmeshError) as error:
        client.get_request("no-such-request")
    assert error.value.code.name == "NOT_FOUND"


def test_drafter_replicas_share_one_recycling_table(client, prompts, redis_client, stack):
    for ids in prompts[:3]:
        client.generate(token_ids=ids, max_new_tokens=24, drafter="recycling")

    def counts() -> set[float]:
        return {s.number("recycling_rows") for s in services(redis_client, stack, "drafter")}

    table_key = Keys(stack.config.redis_prefix).recycling_table(services(redis_client, stack, "drafter")[0].fields["model_id"])
    wait_until(lambda: counts() == {float(redis_client.hlen(table_key))}, what="drafters to converge")
    assert redis_client.hlen(table_key) > 100
    late = stack.add("drafter")  # a replica started later starts warm
    wait_until(lambda: any(s.address == late.address and s.number("recycling_rows") == redis_client.hlen(table_key)
                           for s in services(redis_client, stack, "drafter")), what="the new drafter to start warm")



@pytest.mark.parametrize("method, wants_rows", [("recycling", True), ("ngram", False), ("eagle", False), ("hybrid", False)])
def test_trees_say_whether_the_drafter_learns_from_recycling_rows(stack, redis_client, prompts, default_model_dir,
                                                                  method, wants_rows):
    """The verifier computes recycling rows only for a drafter whose trees ask for them; hybrid
    drafts with EAGLE on this drafter (it has the shipped head), so it has no use for them."""
    context = prompts[0]
    start = drafter_pb2.DraftStart(request_id=f"rows-{uuid.uuid4().hex[:8]}", method=method, context=context, budget=4)
    if method in ("eagle", "hybrid"):  # the prompt's features (their values do not matter here)
        hidden_size = json.loads((default_model_dir / "config.json").read_text())["hidden_size"]
        start.hidden.CopyFrom(drafter_pb2.Features(data=bytes(2 * hidden_size * (len(context) - 1)),
                                                   hidden_size=hidden_size, dtype="bfloat16"))
    address = services(redis_client, stack, "drafter")[0].address
    with grpc.insecure_channel(address) as channel:
        (response,) = drafter_pb2_grpc.DrafterStub(channel).Draft(iter([drafter_pb2.DraftRequest(start=start)]), timeout=60)
    assert response.tree.tokens and response.wants_recycling_rows == wants_rows

def kill_serving(stack, redis_client, request_id: str, kind: str):
    record = RequestStore(redis_client, Keys(stack.config.redis_prefix)).get(request_id)
    address = record.fields["verifier" if kind == "verifier" else "drafter_address"]
    (victim,) = [s for s in stack.services if s.address == address]
    victim.kill()
    return victim


@pytest.mark.parametrize("kind", ["drafter", "verifier"])
def test_kill_9_mid_request_loses_and_duplicates_nothing(client, prompts, hf_greedy, redis_client, stack, kind):
    tokens, chunks = [], client.generate_stream(token_ids=prompts[0], max_new_tokens=NEW_TOKENS, drafter="recycling")
    first = next(chunks)
    tokens += first.token_ids
    for chunk in chunks:
        tokens += chunk.token_ids
        if len(tokens) >= 12 and kill_serving(stack, redis_client, first.request_id, kind):
            break
    last, sizes = None, []
    for chunk in chunks:
        tokens += chunk.token_ids
        sizes.append(len(chunk.token_ids))
        last = chunk
    assert tokens == hf_greedy[0]
    assert last.finish_reason == "length"
    if kind == "verifier":
        assert last.stats.failovers == 1
    else:  # the verifier moved the session to the other drafter: speculation went on
        assert sum(size > 1 for size in sizes) >= 3
    stack.add(kind)  # back to two of each for whatever runs next
