"""services/runtime/process.py helpers shared by `pyrmq up`, the tests and the benches."""

from __future__ import annotations

import socket

from services.runtime.process import free_ports


def test_free_ports_are_distinct_and_bindable_with_their_successor():
    ports = free_ports(20)
    assert len(set(ports)) == 20  # held until all are found: none given twice
    [port] = free_ports(1, with_successor=True)
    with socket.socket() as a, socket.socket() as b:
        a.bind(("127.0.0.1", port))
        b.bind(("127.0.0.1", port + 1))
