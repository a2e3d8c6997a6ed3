"""A session's link to its drafter's data plane (drafter_service/data_plane.py): the Draft
exchange as length-prefixed frames on one TCP connection.

The engine loop writes each message on the socket itself; a thread per link connects, sends what
was written before the connection stood, then reads the trees and hands them to the engine loop
(TreeReady), or reports the drafter lost (DrafterLost) when the connection ends or the drafter
refuses the session. Against the Draft gRPC stream this takes the event loop and gRPC's own
threads off each step's critical path: two thread hand-offs a round trip instead of six or more.
"""

from __future__ import annotations

import logging
import socket
import struct
import threading

from specmesh import frames
from specmesh.v1 import drafter_pb2
from verifier_service import convert
from verifier_service.loop import DRAFT_TIMEOUT_S, DrafterLost, TreeReady

log = logging.getLogger("specmesh.verifier")

CONNECT_TIMEOUT_S = 5.0


class SocketLink:
    def __init__(self, request_id: str, data_address: str, submit, start: drafter_pb2.DraftRequest):
        self.request_id, self.submit = request_id, submit
        self.closed = False
        self.sock: socket.socket | None = None
        self.pending = [frames.encode(start)]  # written before the connection stood
        self.lock = threading.Lock()
        threading.Thread(target=self._run, args=(data_address,), name="drafter-link", daemon=True).start()

    def send(self, message: drafter_pb2.DraftRequest) -> None:
        """Engine loop: write one message (a drafter that stopped reading is dropped after
        DRAFT_TIMEOUT_S: the reader then reports it lost)."""
        frame = frames.encode(message)
        with self.lock:
            if self.sock is None:
                self.pending.append(frame)
                return
            sock = self.sock
        try:
            sock.sendall(frame)
        except OSError:
            _shut(sock)

    def close(self) -> None:
        with self.lock:
            self.closed = True
            sock = self.sock
        if sock is not None:
            _shut(sock)

    def _run(self, data_address: str) -> None:
        try:
            sock = self._connect(data_address)
            if sock is not None:
                self._read(sock)
        except (OSError, frames.FrameError, ValueError):  # ValueError: a malformed tree
            pass
        if not self.closed:
            self.submit(DrafterLost(self.request_id))

    def _connect(self, data_address: str) -> socket.socket | None:
        host, port = data_address.rsplit(":", 1)
        sock = socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT_S)
        sock.settimeout(None)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, struct.pack("ll", int(DRAFT_TIMEOUT_S), 0))
        with self.lock:
            if self.closed:
                sock.close()
                return None
            for frame in self.pending:
                sock.sendall(frame)
            self.pending, self.sock = [], sock
        return sock

    def _read(self, sock: socket.socket) -> None:
        try:
            while (response := frames.receive(sock, drafter_pb2.DraftResponse.FromString)) is not None:
                if response.error:
                    log.warning("drafter refused session %s: %s", self.request_id, response.error)
                    return
                tree = convert.tree_from_proto(response.tree)
                if self.closed:
                    return
                self.submit(TreeReady(self.request_id, tree, response.wants_recycling_rows))
        finally:
            sock.close()


def _shut(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
