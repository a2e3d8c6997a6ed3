"""free_port: the ports a stack plans for its services must still be free when a slow service binds them."""

import socket

from specmesh.serving import free_port, port_taken


def _ephemeral_start() -> int:
    return int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])


def test_ports_are_picked_below_the_range_outgoing_connections_take_theirs_from():
    ports = [free_port() for _ in range(50)]
    assert all(port < _ephemeral_start() for port in ports), ports


def test_a_process_never_gets_the_same_port_twice():
    ports = [free_port() for _ in range(200)]
    assert len(set(ports)) == len(ports)


def test_a_port_someone_listens_on_is_taken_and_a_closed_one_is_not():
    port = free_port()
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", port))
        listener.listen()
        assert port_taken(port)
    assert not port_taken(port)
