"""The Drafter gRPC servicer: thin. One bidirectional stream per verifier session: a start, then
feedback after every verification; each is answered with the next draft tree, unless its
budget is 0 (the controller chose not to speculate this step): then it is only taken in. Each
tree says whether the session's drafter learns from the recycling rows, so that the verifier
computes them only for drafters that use them. `session` is the same exchange for any transport:
the data plane (data_plane.py) carries it too."""

from __future__ import annotations

from contextlib import aclosing

import grpc
import numpy as np

from drafter_service import convert, metrics
from drafter_service.shared_table import SharedTable
from drafter_service.proposals import Proposals
from specmesh.drafting import NgramDrafter, NoDrafter, RecyclingDrafter
from specmesh.drafting.hybrid import HybridDrafter
from specmesh.v1 import drafter_pb2_grpc


class Refused(Exception):
    """A session message that breaks the contract: the status it ends the session with."""

    def __init__(self, code: grpc.StatusCode, details: str):
        super().__init__(f"{code.name}: {details}")
        self.code, self.details = code, details


class DrafterServicer(drafter_pb2_grpc.DrafterServicer):
    def __init__(self, shared: SharedTable, eagle=None):
        self.shared = shared
        self.drafters = {"recycling": RecyclingDrafter(shared.table), "ngram": NgramDrafter(), "none": NoDrafter()}
        if eagle is not None:
            self.drafters["eagle"] = eagle
        self.drafters["hybrid"] = HybridDrafter(eagle or self.drafters["recycling"], NgramDrafter())
        self.sessions: dict[str, str] = {}  # request id -> method

    async def Draft(self, request_iterator, context: grpc.aio.ServicerContext):
        try:
            async with aclosing(self.session(request_iterator, "grpc", context.invocation_metadata())) as responses:
                async for response in responses:
                    yield response
        except Refused as refused:
            await context.abort(refused.code, refused.details)

    async def session(self, requests, transport: str, metadata=None):
        """One session, whatever carries it (`transport`: "grpc", the Draft stream, or
        "data_plane"): its messages in, its trees out; Refused for a message that breaks the
        contract. `metadata` carries the trace context on gRPC; on the data plane the start does."""
        first = await anext(aiter(requests), None)
        if first is None:
            return
        if first.WhichOneof("kind") != "start":
            raise Refused(grpc.StatusCode.FAILED_PRECONDITION, "the first message of a draft stream must be `start`")
        start = first.start
        problem = _check_start(start, tuple(self.drafters))
        if problem:
            raise Refused(grpc.StatusCode.INVALID_ARGUMENT, problem)
        drafter, request_id = self.drafters[start.method], start.request_id
        context_ids = list(start.context)
        self.sessions[request_id] = start.method
        metrics.session_begun(transport)
        proposals = Proposals(metadata or dict(start.trace_context), request_id, start.method)
        try:
            try:
                drafter.start(request_id, context_ids, convert.features(start.hidden))
            except ValueError as error:
                raise Refused(grpc.StatusCode.INVALID_ARGUMENT, f"start: {error}") from None
            if start.budget > 0:
                yield convert.tree_to_proto(proposals.propose(drafter, context_ids, start.budget), drafter.wants_recycling_rows)
                proposals.record()  # the tree is on its way: off the critical path
            async for message in requests:
                if message.WhichOneof("kind") != "feedback":
                    raise Refused(grpc.StatusCode.INVALID_ARGUMENT, "after `start`, only `feedback` messages")
                try:
                    feedback = convert.feedback(message.feedback)
                    self._observe(drafter, request_id, feedback)
                except ValueError as error:
                    raise Refused(grpc.StatusCode.INVALID_ARGUMENT, f"feedback: {error}") from None
                context_ids += feedback.accepted_tokens
                if message.feedback.budget > 0:
                    yield convert.tree_to_proto(proposals.propose(drafter, context_ids, message.feedback.budget),
                                                drafter.wants_recycling_rows)
                    proposals.record()
        finally:
            proposals.record()  # a stream closed before it asked for the next tree
            drafter.finish(request_id)
            self.sessions.pop(request_id, None)

    def _observe(self, drafter, request_id: str, feedback) -> None:
        drafter.observe(request_id, feedback)
        if drafter.wants_recycling_rows and feedback.recycling_rows is not None:
            self.shared.publish(np.asarray(feedback.tree_tokens, dtype=np.int64), feedback.recycling_rows)


def _check_start(start, methods: tuple[str, ...]) -> str:
    if not start.request_id:
        return "request_id must not be empty"
    if start.method not in methods:
        return f"method must be one of {', '.join(methods)}, got {start.method!r}"
    if not start.context:
        return "context must not be empty"
    if start.budget < 0:
        return f"budget must be >= 0, got {start.budget}"
    return ""
