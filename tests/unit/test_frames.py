"""The data plane's frames (specmesh/frames.py) over real sockets: messages round-trip, a clean
end reads as None, and a connection that breaks the framing raises FrameError."""

from __future__ import annotations

import asyncio
import socket

import pytest

from specmesh import frames
from specmesh.v1 import common_pb2, drafter_pb2

MESSAGES = [
    drafter_pb2.DraftRequest(start=drafter_pb2.DraftStart(request_id="r", method="ngram", context=[5, 6, 7], budget=4,
                                                          trace_context={"traceparent": "00-ab-cd-01"})),
    drafter_pb2.DraftRequest(feedback=drafter_pb2.DraftFeedback(tree_tokens=[7, 8], accepted_tokens=[8, 9], budget=0)),
    drafter_pb2.DraftRequest(),  # an empty message is a frame of length 0
]
PARSE = drafter_pb2.DraftRequest.FromString


def sent(data: bytes) -> socket.socket:
    """The reading end of a socket pair after `data` was written and the writing end closed."""
    reader, writer = socket.socketpair()
    writer.sendall(data)
    writer.close()
    return reader


def test_messages_round_trip_and_a_clean_end_reads_as_none():
    with sent(b"".join(frames.encode(m) for m in MESSAGES)) as sock:
        assert [frames.receive(sock, PARSE) for _ in MESSAGES] == MESSAGES
        assert frames.receive(sock, PARSE) is None


def test_the_asyncio_reader_reads_the_same_frames():
    async def read_all():
        reader = asyncio.StreamReader()
        reader.feed_data(b"".join(frames.encode(m) for m in MESSAGES))
        reader.feed_eof()
        return [await frames.read(reader, PARSE) for _ in range(len(MESSAGES) + 1)]

    assert asyncio.run(read_all()) == [*MESSAGES, None]


BROKEN = {
    "inside a frame header": b"\x05\x00",
    "inside a frame": frames.encode(MESSAGES[0])[:-3],
    "over the limit": frames.HEADER.pack(frames.MAX_FRAME_BYTES + 1),
    "not the expected message": frames.HEADER.pack(3) + b"\xff\xff\xff",
}


@pytest.mark.parametrize("problem", BROKEN)
def test_a_broken_connection_raises_frame_error_naming_the_problem(problem):
    with sent(BROKEN[problem]) as sock, pytest.raises(frames.FrameError, match=problem):
        frames.receive(sock, PARSE)

    async def read():
        reader = asyncio.StreamReader()
        reader.feed_data(BROKEN[problem])
        reader.feed_eof()
        return await frames.read(reader, PARSE)

    with pytest.raises(frames.FrameError, match=problem):
        asyncio.run(read())


def test_responses_frame_like_requests():
    response = drafter_pb2.DraftResponse(tree=common_pb2.DraftTree(tokens=[1, 2], parents=[-1, 0]), wants_recycling_rows=True)
    with sent(frames.encode(response)) as sock:
        assert frames.receive(sock, drafter_pb2.DraftResponse.FromString) == response
