"""Length-prefixed protobuf frames: the wire format of the drafter's data plane (drafter.proto).

A frame is a 4-byte little-endian length, then that many bytes of one serialized message. A
connection that ends between frames has ended cleanly; one that ends inside a frame, or announces
a frame longer than MAX_FRAME_BYTES, is broken (FrameError).
"""

from __future__ import annotations

import asyncio
import socket
import struct
from typing import Callable, TypeVar

from google.protobuf.message import DecodeError

HEADER = struct.Struct("<I")
MAX_FRAME_BYTES = 64 << 20  # a start with the features of a 2048-token prompt is ~2.4 MB

Message = TypeVar("Message")


class FrameError(ValueError):
    """The peer broke the framing."""


def encode(message) -> bytes:
    body = message.SerializeToString()
    return HEADER.pack(len(body)) + body


def _length(header: bytes) -> int:
    (length,) = HEADER.unpack(header)
    if length > MAX_FRAME_BYTES:
        raise FrameError(f"a frame of {length} bytes is over the limit of {MAX_FRAME_BYTES}")
    return length


async def read(reader: asyncio.StreamReader, parse: Callable[[bytes], Message]) -> Message | None:
    """The next message, or None where the connection ended cleanly."""
    try:
        header = await reader.readexactly(HEADER.size)
    except asyncio.IncompleteReadError as ended:
        if ended.partial:
            raise FrameError("the connection ended inside a frame header") from None
        return None
    try:
        body = await reader.readexactly(_length(header))
    except asyncio.IncompleteReadError:
        raise FrameError("the connection ended inside a frame") from None
    return _parse(parse, body)


def receive(sock: socket.socket, parse: Callable[[bytes], Message]) -> Message | None:
    """Blocking `read` on a socket."""
    header = _receive_exactly(sock, HEADER.size, "a frame header", clean_end=True)
    return None if header is None else _parse(parse, _receive_exactly(sock, _length(header), "a frame"))


def _parse(parse: Callable[[bytes], Message], body: bytes) -> Message:
    try:
        return parse(body)
    except DecodeError as error:
        raise FrameError(f"a frame that is not the expected message: {error}") from None


def _receive_exactly(sock: socket.socket, size: int, what: str, clean_end: bool = False) -> bytes | None:
    data = bytearray()
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            if clean_end and not data:
                return None
            raise FrameError(f"the connection ended inside {what}")
        data += chunk
    return bytes(data)
