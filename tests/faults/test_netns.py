"""The test hosts harness (tests/support/netns.py) on its own: hosts reach each other and the
root namespace's clients; partitions (both ways, one way) drop what they should and heal; loss
drops about its share of datagrams; a delay slows a round trip by twice its value; a tbf rate
makes a transfer slow; a clock jump is seen by a faketime child (wall clock only, its monotonic
clock and its sleeps unharmed); ``close`` and ``cleanup_stale`` leave nothing behind."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.netns import PREFIX, Host, Hosts, cleanup_stale, require_hosts, run

# A host's little server: TCP echo on 7000 (one line back per line), UDP on 7001 counting
# datagrams, answering "count" with how many it got.
SERVER = """
import socket, threading
udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); udp.bind(("0.0.0.0", 7001))
got = [0]
def count():
    while True:
        data, peer = udp.recvfrom(2048)
        if data == b"count":
            udp.sendto(str(got[0]).encode(), peer)
        else:
            got[0] += 1
threading.Thread(target=count, daemon=True).start()
tcp = socket.create_server(("0.0.0.0", 7000))
print("serving", flush=True)
def echo(conn):
    with conn:
        while data := conn.recv(65536):
            conn.sendall(data)
while True:
    threading.Thread(target=echo, args=(tcp.accept()[0],), daemon=True).start()
"""

# Connect to argv[1]:7000, send argv[2] bytes, read them back: prints the seconds it took.
ROUND_TRIP = """
import socket, sys, time
t = time.monotonic()
size = int(sys.argv[2])
with socket.create_connection((sys.argv[1], 7000), timeout=float(sys.argv[3])) as s:
    s.sendall(b"x" * size)
    got = 0
    while got < size:
        got += len(s.recv(65536))
print(f"{time.monotonic() - t:.4f}")
"""

# Send argv[2] datagrams to argv[1]:7001, paced.
DATAGRAMS = """
import socket, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for i in range(int(sys.argv[2])):
    try:
        s.sendto(b"d", (sys.argv[1], 7001))
    except PermissionError:  # dropped by an output rule
        pass
    time.sleep(0.001)
"""

# Print time.time() - time.monotonic() for every line read, after a short sleep.
CLOCK_PROBE = """
import sys, time
print("ready", flush=True)
for _ in sys.stdin:
    time.sleep(0.01)
    print(f"{time.time() - time.monotonic():.3f}", flush=True)
"""


@pytest.fixture(scope="module")
def hosts() -> Iterator[Hosts]:
    require_hosts()
    with Hosts(["a", "b"]) as made:
        servers = [made[name].popen([sys.executable, "-c", SERVER], stdout=subprocess.PIPE) for name in ("a", "b")]
        try:
            for server in servers:
                assert server.stdout is not None and server.stdout.readline().strip() == "serving"
            yield made
        finally:
            for server in servers:
                server.kill()
                server.communicate()


def round_trip_s(host: Host, to: Host, size: int = 16, timeout_s: float = 3.0) -> float | None:
    """Seconds for ``size`` bytes to ``to``'s echo and back from ``host``; None if it failed."""
    done = subprocess.run(
        host.command([sys.executable, "-c", ROUND_TRIP, to.address, str(size), str(timeout_s)]),
        capture_output=True,
        text=True,
        timeout=timeout_s + 20,
    )
    return float(done.stdout) if done.returncode == 0 else None


def datagrams_received(hosts: Hosts, sender: Host, receiver: Host, count: int) -> int:
    """Send ``count`` datagrams from ``sender`` to ``receiver``; how many more it counted (asked
    from the root namespace, which no rule here touches)."""
    before = udp_count(hosts, receiver)
    sender.run([sys.executable, "-c", DATAGRAMS, receiver.address, str(count)])
    return udp_count(hosts, receiver) - before


def udp_count(hosts: Hosts, receiver: Host) -> int:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(2.0)
        s.sendto(b"count", (receiver.address, 7001))
        return int(s.recv(64))


def test_hosts_reach_each_other_and_the_clients(hosts: Hosts) -> None:
    a, b, client = hosts["a"], hosts["b"], hosts["client"]
    assert a.address != b.address and a.address.rsplit(".", 1)[0] == hosts.subnet
    assert round_trip_s(a, b) is not None
    assert round_trip_s(b, a) is not None
    assert round_trip_s(client, b) is not None  # the root namespace's clients
    assert round_trip_s(a, a) is not None  # its own address


def test_partition_blocks_both_ways_and_heals(hosts: Hosts) -> None:
    a, b, client = hosts["a"], hosts["b"], hosts["client"]
    hosts.block(a, b)
    hosts.block(b, a)
    try:
        assert round_trip_s(a, b, timeout_s=1.0) is None
        assert round_trip_s(b, a, timeout_s=1.0) is None
        assert round_trip_s(client, b) is not None  # others still reach both
        assert round_trip_s(client, a) is not None
    finally:
        hosts.unblock(a, b)
        hosts.unblock(b, a)
    assert hosts.blocked() == []
    assert round_trip_s(a, b) is not None and round_trip_s(b, a) is not None


def test_partition_one_way_and_overlapping_blocks(hosts: Hosts) -> None:
    a, b = hosts["a"], hosts["b"]
    hosts.block(a, b)
    try:
        assert datagrams_received(hosts, a, b, 20) == 0
        assert datagrams_received(hosts, b, a, 20) == 20
        hosts.block(a, b)  # a second fault over the same direction
        hosts.unblock(a, b)  # ... healed first: the first still holds
        assert datagrams_received(hosts, a, b, 20) == 0
    finally:
        hosts.unblock(a, b)
    assert datagrams_received(hosts, a, b, 20) == 20


def test_loss_drops_about_its_share(hosts: Hosts) -> None:
    a, b = hosts["a"], hosts["b"]
    rules = hosts.add_loss(a, 50, peer=b)
    try:
        got = datagrams_received(hosts, a, b, 400)
    finally:
        for rule in rules:
            hosts.remove_rule(rule)
    assert 120 <= got <= 280, f"{got} of 400 datagrams through a 50 % loss"
    assert datagrams_received(hosts, a, b, 50) == 50


def test_delay_slows_round_trips_and_ends(hosts: Hosts) -> None:
    a, b, client = hosts["a"], hosts["b"], hosts["client"]
    baseline = round_trip_s(a, b)
    assert baseline is not None and baseline < 0.15
    delay = hosts.add_delay(a, 150, peer=b)
    try:
        slow = round_trip_s(a, b)  # a's connection, redirected in its output
        back = round_trip_s(b, a)  # b's connection, redirected in a's prerouting
        other = round_trip_s(client, a)  # another link: not delayed
    finally:
        hosts.remove_delay(delay)
    assert slow is not None and 0.29 <= slow < 1.5, slow
    assert back is not None and 0.29 <= back < 1.5, back
    assert other is not None and other < 0.15, other
    after = round_trip_s(a, b)
    assert after is not None and after < 0.15


def test_rate_makes_a_slow_link(hosts: Hosts) -> None:
    a, b = hosts["a"], hosts["b"]
    size = 128 * 1024  # 1 Mbit each way (at once) at 1 Mbit/s
    hosts.shape(a, rate_kbit=1000)
    try:
        slow = round_trip_s(a, b, size=size, timeout_s=10.0)
    finally:
        hosts.unshape(a)
    assert slow is not None and slow >= 0.8, slow
    fast = round_trip_s(a, b, size=size)
    assert fast is not None and fast < 0.3, fast


def test_clock_jump_seen_by_a_faketime_child(hosts: Hosts) -> None:
    a = hosts["a"]
    child = a.popen([sys.executable, "-c", CLOCK_PROBE], faketime=True, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert child.stdin is not None and child.stdout is not None
    stdin, stdout = child.stdin, child.stdout

    def offset() -> float:
        stdin.write("\n")
        stdin.flush()
        return float(stdout.readline())

    try:
        assert stdout.readline().strip() == "ready"
        start = offset()
        hosts.set_clock(a, 30.0)
        forward = offset()
        hosts.set_clock(a, -45.5)
        back = offset()
        hosts.set_clock(a, 0.0)
        again = offset()
    finally:
        child.kill()
        child.communicate()
    assert abs(forward - start - 30.0) < 0.5, (start, forward)  # wall clock +30 s, monotonic unchanged
    assert abs(back - start + 45.5) < 0.5, (start, back)
    assert abs(again - start) < 0.5, (start, again)
    plain = subprocess.run(a.command([sys.executable, "-c", "import time; print(time.time())"]), capture_output=True)
    assert abs(float(plain.stdout) - time.time()) < 5  # without faketime: the real clock


def test_close_and_stale_cleanup_leave_nothing() -> None:
    require_hosts()
    with Hosts(["x"]) as made:
        namespaces = [h.namespace for h in made.hosts.values() if h.namespace] + [made.net_namespace]
        sleeper = made["x"].popen(["sleep", "600"])
        mount = made.mount_tmpfs(made.root_dir / "disk", 1 << 20)
        root_dir, link = made.root_dir, made.root_link
    assert sleeper.wait(5) == -9
    listed = run(["ip", "netns", "list"])
    assert not any(ns in listed for ns in namespaces), listed
    assert link not in run(["ip", "link", "show"])
    assert str(mount) not in Path("/proc/mounts").read_text() and not root_dir.exists()
    # A crashed run's namespace (a pid that cannot be alive) is removed by the next run's start.
    stale = f"{PREFIX}-4194999-0-x"
    run(["ip", "netns", "add", stale])
    assert stale in cleanup_stale()
    assert stale not in run(["ip", "netns", "list"])
