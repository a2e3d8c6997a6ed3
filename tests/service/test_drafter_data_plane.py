"""The drafter's data plane (drafter_service/data_plane.py) against its gRPC Draft stream, with the
drafter's real servicer on loopback and the verifier's real link (verifier_service/drafter_socket.py):
the same session drafts the same trees either way, a session that breaks the contract is refused
with a reason and the drafter serves on, closing a link frees the drafter's session, a drafter
that goes away is reported lost; and a whole stack (tiny model) is token-identical to plain
decoding whichever transport its verifiers use."""

from __future__ import annotations

import asyncio
import queue
import urllib.request
from contextlib import asynccontextmanager

import grpc
import pytest
from prometheus_client.parser import text_string_to_metric_families
import redis.asyncio as aioredis
from service_stack import services, start_stack, wait_until

from drafter_service.data_plane import DataPlane
from drafter_service.servicer import DrafterServicer
from drafter_service.shared_table import SharedTable
from specmesh import Engine, frames
from specmesh.client import Client
from specmesh.store.keys import redis_url
from specmesh.v1 import drafter_pb2, drafter_pb2_grpc
from verifier_service.drafter_socket import SocketLink
from verifier_service.loop import DrafterLost, TreeReady

PATTERN = [5, 6, 7, 8]
CONTEXT = PATTERN * 2 + PATTERN[:2]  # repeats: the n-gram drafter has something to propose
BUDGET = 4


@asynccontextmanager
async def drafter(keys):
    """The drafter's servicer behind a gRPC server and a data plane: (servicer, gRPC address, data address)."""
    servicer = DrafterServicer(SharedTable(aioredis.Redis.from_url(redis_url()), keys, "data-plane-test", 64))
    server, data_plane = grpc.aio.server(), DataPlane(servicer)
    drafter_pb2_grpc.add_DrafterServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        yield servicer, f"127.0.0.1:{port}", f"127.0.0.1:{await data_plane.start(0)}"
    finally:
        await data_plane.stop()
        await server.stop(None)


def start(request_id: str, method: str = "ngram") -> drafter_pb2.DraftRequest:
    return drafter_pb2.DraftRequest(start=drafter_pb2.DraftStart(request_id=request_id, method=method, context=CONTEXT,
                                                                 budget=BUDGET))


def feedback(root: int, tree_tokens, accepted: list[int]) -> drafter_pb2.DraftRequest:
    return drafter_pb2.DraftRequest(feedback=drafter_pb2.DraftFeedback(
        tree_tokens=[root, *tree_tokens], accepted_tokens=accepted, budget=BUDGET))


def accept(context: list[int], tree_tokens) -> list[int]:
    """The tree's nodes (an n-gram tree is a chain), then the bonus token that keeps the pattern."""
    return [*tree_tokens, PATTERN[(len(context) + len(tree_tokens)) % len(PATTERN)]]


async def next_command(commands: queue.Queue):
    return await asyncio.to_thread(commands.get, True, 10)


async def over_data_plane(data_address: str, steps: int) -> list[tuple]:
    commands: queue.Queue = queue.Queue()
    link, context, trees = SocketLink("via-socket", data_address, commands.put, start("via-socket")), list(CONTEXT), []
    for _ in range(steps):
        command = await next_command(commands)
        assert isinstance(command, TreeReady) and command.request_id == "via-socket"
        trees.append((command.tree.tokens, command.tree.parents))
        accepted = accept(context, command.tree.tokens)
        link.send(feedback(context[-1], command.tree.tokens, accepted))
        context += accepted
    link.close()
    return trees


async def over_grpc(address: str, steps: int) -> list[tuple]:
    outbox: asyncio.Queue = asyncio.Queue()
    outbox.put_nowait(start("via-grpc"))

    async def requests():
        while (message := await outbox.get()) is not None:
            yield message

    context, trees = list(CONTEXT), []
    async with grpc.aio.insecure_channel(address) as channel:
        async for response in drafter_pb2_grpc.DrafterStub(channel).Draft(requests()):
            trees.append((tuple(response.tree.tokens), tuple(response.tree.parents)))
            if len(trees) == steps:
                outbox.put_nowait(None)
                continue
            accepted = accept(context, response.tree.tokens)
            outbox.put_nowait(feedback(context[-1], response.tree.tokens, accepted))
            context += accepted
    return trees


def test_the_data_plane_drafts_what_the_grpc_stream_drafts_and_a_closed_link_frees_the_session(keys):
    async def run():
        async with drafter(keys) as (servicer, address, data_address):
            via_socket, via_grpc = await over_data_plane(data_address, 4), await over_grpc(address, 4)
            await asyncio.to_thread(wait_until, lambda: not servicer.sessions, 10, "the sessions to end")
            return via_socket, via_grpc

    via_socket, via_grpc = asyncio.run(run())
    assert via_socket == via_grpc
    assert all(tokens for tokens, _ in via_socket)  # real trees, not empty ones


async def exchange(data_address: str, *frames_out: bytes) -> list[drafter_pb2.DraftResponse]:
    """Send raw frames on a fresh connection; every response until the drafter closes it."""
    host, port = data_address.rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    for frame in frames_out:
        writer.write(frame)
    responses = []
    while (response := await asyncio.wait_for(frames.read(reader, drafter_pb2.DraftResponse.FromString), 10)) is not None:
        responses.append(response)
    writer.close()
    return responses


BROKEN = {
    "feedback first": ([frames.encode(feedback(1, [], [2]))], "FAILED_PRECONDITION: the first message"),
    "unknown method": ([frames.encode(start("bad", method="nope"))], "INVALID_ARGUMENT: method must be one of"),
    "start twice": ([frames.encode(start("twice")), frames.encode(start("twice"))], "INVALID_ARGUMENT: after `start`"),
    "not a message": ([frames.HEADER.pack(3) + b"\xff\xff\xff"], "INVALID_ARGUMENT: a frame that is not"),
    "frame too long": ([frames.HEADER.pack(frames.MAX_FRAME_BYTES + 1)], "INVALID_ARGUMENT: a frame of"),
}


@pytest.mark.parametrize("problem", BROKEN)
def test_a_session_that_breaks_the_contract_is_refused_with_a_reason_and_the_drafter_serves_on(keys, problem):
    sent, reason = BROKEN[problem]

    async def run():
        async with drafter(keys) as (servicer, _, data_address):
            responses = await exchange(data_address, *sent)
            commands: queue.Queue = queue.Queue()
            SocketLink("refused", data_address, commands.put, start("refused", method="nope"))
            lost = await next_command(commands)
            after = await over_data_plane(data_address, 2)  # a good session still drafts
            await asyncio.to_thread(wait_until, lambda: not servicer.sessions, 10, "the sessions to end")
            return responses, lost, after

    responses, lost, after = asyncio.run(run())
    assert responses[-1].error.startswith(reason)
    assert all(r.HasField("tree") for r in responses[:-1])  # a session's trees come before its refusal
    assert lost == DrafterLost("refused")  # the verifier's link reports a refusing drafter lost
    assert len(after) == 2


def test_a_drafter_that_goes_away_is_reported_lost(keys):
    async def run():
        commands: queue.Queue = queue.Queue()
        async with drafter(keys) as (servicer, _, data_address):
            link = SocketLink("orphaned", data_address, commands.put, start("orphaned"))
            first = await next_command(commands)
        lost = await next_command(commands)  # the drafter stopped with the session open
        link.close()
        return first, lost

    first, lost = asyncio.run(run())
    assert isinstance(first, TreeReady) and lost == DrafterLost("orphaned")


def draft_sessions(stack) -> dict[str, float]:
    """The drafter's sessions so far by transport (its /metrics)."""
    with urllib.request.urlopen(stack.by_name("drafter")[0].metrics_url, timeout=5) as response:
        families = text_string_to_metric_families(response.read().decode())
    return {s.labels["transport"]: s.value for f in families if f.name == "specmesh_draft_sessions"
            for s in f.samples if s.name == "specmesh_draft_sessions_total"}


@pytest.mark.parametrize("transport", ["auto", "grpc"])
def test_a_stack_is_token_identical_to_plain_decoding_over_either_transport(tmp_path_factory, redis_client, tiny_model_dir,
                                                                            transport):
    oracle = Engine.from_pretrained(str(tiny_model_dir), drafter="none", dtype="float32", max_context=256)
    prompts = [[3, 1, 4, 1, 5, 9, 2, 6], [2, 7, 1, 8, 2, 8, 1, 8, 2, 8]]
    stack = start_stack(tmp_path_factory, redis_client, model=str(tiny_model_dir), dtype="float32", max_context=256,
                        drafter_transport=transport)
    try:
        drafters = services(redis_client, stack, "drafter")
        assert drafters and all(d.fields["data_address"] for d in drafters)  # listed either way
        with Client(stack.address, timeout=60) as client:
            for prompt in prompts:
                for method in ("recycling", "ngram"):
                    result = client.generate(token_ids=prompt, max_new_tokens=40, drafter=method)
                    assert result.token_ids == oracle.generate(prompt, max_new_tokens=40).token_ids
                    assert result.stats.accepted_tokens > 0 or method == "ngram"
        used = {"auto": "data_plane", "grpc": "grpc"}[transport]
        assert draft_sessions(stack) == {used: len(prompts) * 2, ({"data_plane", "grpc"} - {used}).pop(): 0}
    finally:
        stack.stop()
        stack.forget()
