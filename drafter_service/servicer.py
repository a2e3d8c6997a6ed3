"""The Drafter gRPC servicer: thin. One bidirectional stream per verifier session: a start, then
feedback after every verification; each is answered with the next draft tree, unless its
budget is 0 (the controller chose not to speculate this step): then it is only taken in. Each
tree says whether the session's drafter learns from the recycling rows, so that the verifier
computes them only for drafters that use them."""

from __future__ import annotations

import grpc
import numpy as np

from drafter_service import convert, metrics
from drafter_service.shared_table import SharedTable
from drafter_service.tracing import DraftTrace
from specmesh.drafting import NgramDrafter, NoDrafter, RecyclingDrafter
from specmesh.drafting.hybrid import HybridDrafter
from specmesh.v1 import drafter_pb2_grpc


class DrafterServicer(drafter_pb2_grpc.DrafterServicer):
    def __init__(self, shared: SharedTable, eagle=None):
        self.shared = shared
        self.drafters = {"recycling": RecyclingDrafter(shared.table), "ngram": NgramDrafter(), "none": NoDrafter()}
        if eagle is not None:
            self.drafters["eagle"] = eagle
        self.drafters["hybrid"] = HybridDrafter(eagle or self.drafters["recycling"], NgramDrafter())
        self.sessions: dict[str, str] = {}  # request id -> method

    async def Draft(self, request_iterator, context: grpc.aio.ServicerContext):
        first = await anext(aiter(request_iterator), None)
        if first is None:
            return
        if first.WhichOneof("kind") != "start":
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, "the first message of a draft stream must be `start`")
        start = first.start
        problem = _check_start(start, tuple(self.drafters))
        if problem:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, problem)
        drafter, request_id = metrics.timed(self.drafters[start.method], start.method), start.request_id
        context_ids = list(start.context)
        self.sessions[request_id] = start.method
        trace = DraftTrace(context.invocation_metadata(), request_id, start.method)
        try:
            try:
                drafter.start(request_id, context_ids, convert.features(start.hidden))
            except ValueError as error:
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"start: {error}")
            if start.budget > 0:
                yield convert.tree_to_proto(trace.propose(drafter, context_ids, start.budget), drafter.wants_recycling_rows)
            async for message in request_iterator:
                if message.WhichOneof("kind") != "feedback":
                    await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "after `start`, only `feedback` messages")
                try:
                    feedback = convert.feedback(message.feedback)
                    self._observe(drafter, request_id, feedback)
                except ValueError as error:
                    await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"feedback: {error}")
                context_ids += feedback.accepted_tokens
                if message.feedback.budget > 0:
                    yield convert.tree_to_proto(trace.propose(drafter, context_ids, message.feedback.budget),
                                                drafter.wants_recycling_rows)
        finally:
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
