"""The nemesis: faults on a cluster spread over test hosts (tests/faults/hosts_cluster.py), each
reversible and composable, behind one interface::

    class Fault(Protocol):
        name: str                      # "partition master|etcd", "pause master", "clock +30s master"
        def apply(self) -> None: ...   # inject; returns once in force
        def heal(self) -> None: ...    # undo; idempotent; returns once healed

A fault names its targets by role ("master", "slave", "etcd-leader") or by service
("store-2", "broker-0", "etcd-1"), resolved when it is applied (``resolve``); ``applied`` then
says what it hit (e.g. ``store-1 | etcd-0 etcd-1 etcd-2``). Healing a fault that was never
applied, or twice, does nothing. Faults compose: partitions over the same pair are
reference-counted by the hosts, loss rules and delay relays are each their own, ``Compose``
applies several and heals them in reverse.

* ``Partition``: packets between two sets of hosts dropped (``one_way``: only from the first
  set to the second). Factories for the usual ones: ``master_from_etcd``, ``master_from_slaves``,
  ``master_isolated`` (from every other host and the clients), ``etcd_split`` (an etcd member,
  the leader by default, and the master on the minority side), ``etcd_member_cut`` (one etcd
  member unreachable from the stores and brokers), ``master_to_etcd_one_way``.
* ``LinkLoss``: ``percent`` of packets dropped between a host and peers (or all of its traffic).
* ``LinkRate``: the target's link shaped by tbf (a slow link: latency only as its queue grows).
* ``LinkDelay``: netem is not in this kernel: every TCP connection between a host and each peer
  is relayed through a process that holds each chunk ``delay_ms`` each way (tests/support/netns.py
  ``add_delay``): streams are delayed, not packets; connections open at apply are reset.
* ``Pause``: SIGSTOP (a master past its lease if held long enough), SIGCONT at heal.
* ``Kill``: kill -9, restarted at heal (same host, address and data).
* ``ClockJump``: the wall clock of a host's store or broker moves by ``offset_s`` (forward or
  back; monotonic time goes on), and back at heal. libfaketime, so not etcd.
* ``DiskFull``: a ballast file fills the replica's own filesystem (a tmpfs) but for
  ``leave_bytes``; heal deletes it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from tests.faults.hosts_cluster import HostsCluster, kind_of
from tests.support.netns import Delay, Rule
from tests.support.small_disk import fill_disk

ROLES = ("master", "slave", "etcd-leader")


class Fault(Protocol):
    name: str

    def apply(self) -> None: ...

    def heal(self) -> None: ...


def resolve(cluster: HostsCluster, target: str) -> str:
    """A service name for a role ("master": the live master's store, "slave": the first other
    store running, "etcd-leader") or the name itself."""
    if target == "master":
        return cluster.master_name()
    if target == "slave":
        master = cluster.master_name()
        slaves = [n for n in cluster.names("store") if n != master and cluster.alive(n)]
        assert slaves, "no slave running"
        return slaves[0]
    if target == "etcd-leader":
        leader = cluster.wait_etcd_leader(10.0)
        return f"etcd-{leader}"
    assert target in cluster.config.names(), f"unknown target {target!r} (a role: {ROLES}, or a service)"
    return target


Sides = Callable[[HostsCluster], tuple[Sequence[str], Sequence[str]]]


@dataclass
class Partition:
    """Packets between the two sides ``sides(cluster)`` names are dropped (only from the first
    to the second when ``one_way``). Host "client" is the root namespace's clients."""

    cluster: HostsCluster
    name: str
    sides: Sides
    one_way: bool = False
    applied: str = ""
    _pairs: list[tuple[str, str]] = field(default_factory=list)

    def apply(self) -> None:
        assert not self._pairs, f"{self.name} is applied already"
        a, b = self.sides(self.cluster)
        assert a and b and not set(a) & set(b), f"{self.name}: sides must be disjoint and not empty: {a} | {b}"
        pairs = [(x, y) for x in a for y in b]
        if not self.one_way:
            pairs += [(y, x) for x, y in pairs]
        hosts = self.cluster.hosts
        for source, destination in pairs:
            hosts.block(hosts[source], hosts[destination])
            self._pairs.append((source, destination))
        self.applied = f"{' '.join(a)} {'->' if self.one_way else '|'} {' '.join(b)}"

    def heal(self) -> None:
        hosts = self.cluster.hosts
        while self._pairs:
            source, destination = self._pairs.pop()
            hosts.unblock(hosts[source], hosts[destination])


def master_from_etcd(cluster: HostsCluster) -> Partition:
    """The master cut off from every etcd member (it still reaches its slaves and brokers)."""
    return Partition(cluster, "partition master|etcd", lambda c: ([resolve(c, "master")], c.names("etcd")))


def master_from_slaves(cluster: HostsCluster) -> Partition:
    """The master cut off from its slaves (it still reaches etcd and the brokers)."""

    def sides(c: HostsCluster) -> tuple[list[str], list[str]]:
        master = resolve(c, "master")
        return [master], [n for n in c.names("store") if n != master]

    return Partition(cluster, "partition master|slaves", sides)


def master_isolated(cluster: HostsCluster) -> Partition:
    """The master cut off from every other host and from the clients."""

    def sides(c: HostsCluster) -> tuple[list[str], list[str]]:
        master = resolve(c, "master")
        return [master], [n for n in c.config.names() if n != master] + ["client"]

    return Partition(cluster, "partition master|everything", sides)


def etcd_split(cluster: HostsCluster, member: str = "etcd-leader") -> Partition:
    """A minority (one etcd member, the leader by default, and the master with it) against the
    majority (the other etcd members, the slaves, the brokers)."""

    def sides(c: HostsCluster) -> tuple[list[str], list[str]]:
        minority = [resolve(c, member), resolve(c, "master")]
        return minority, [n for n in c.config.names() if n not in minority]

    return Partition(cluster, f"partition {member}+master|majority", sides)


def etcd_member_cut(cluster: HostsCluster, member: str = "etcd-0") -> Partition:
    """One etcd member cut off from every store and broker (etcd keeps its quorum, and the
    member its place in it): clients of that member must go to another."""

    def sides(c: HostsCluster) -> tuple[list[str], list[str]]:
        return [resolve(c, member)], c.names("store") + c.names("broker")

    return Partition(cluster, f"partition {member}|stores+brokers", sides)


def master_to_etcd_one_way(cluster: HostsCluster) -> Partition:
    """What the master sends to etcd is dropped; what etcd sends it arrives."""
    return Partition(
        cluster, "partition master->etcd one-way", lambda c: ([resolve(c, "master")], c.names("etcd")), one_way=True
    )


def _peers(cluster: HostsCluster, peers: Sequence[str] | None) -> list[str] | None:
    """Peer names with roles resolved (and "etcd" for every etcd member); None: all traffic."""
    if peers is None:
        return None
    out: list[str] = []
    for peer in peers:
        if peer in ("etcd", "store", "broker"):
            out += cluster.names(peer)
        else:
            out.append(resolve(cluster, peer) if peer != "client" else peer)
    return out


@dataclass
class LinkLoss:
    """``percent`` % of the packets between ``target`` and each of ``peers`` dropped, each way
    (``peers`` None: all of the target's traffic). Peers may be roles, services, "client" or a
    kind ("etcd", "store", "broker": every one of them)."""

    cluster: HostsCluster
    target: str
    percent: int
    peers: Sequence[str] | None = None
    name: str = ""
    applied: str = ""
    _rules: list[Rule] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.name = self.name or f"loss {self.percent}% {self.target}|{','.join(self.peers or ['all'])}"

    def apply(self) -> None:
        assert not self._rules, f"{self.name} is applied already"
        target = resolve(self.cluster, self.target)
        peers = _peers(self.cluster, self.peers)
        hosts = self.cluster.hosts
        for peer in peers if peers is not None else [None]:
            self._rules += hosts.add_loss(hosts[target], self.percent, hosts[peer] if peer else None)
        self.applied = f"{target} | {' '.join(peers) if peers is not None else 'all'}"

    def heal(self) -> None:
        while self._rules:
            self.cluster.hosts.remove_rule(self._rules.pop())


@dataclass
class LinkDelay:
    """Every TCP connection between ``target`` and each of ``peers`` delayed ``delay_ms`` each
    way (a relay on the target's host: tests/support/netns.py ``add_delay``)."""

    cluster: HostsCluster
    target: str
    delay_ms: int
    peers: Sequence[str] = ("etcd",)
    name: str = ""
    applied: str = ""
    _delays: list[Delay] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.name = self.name or f"delay {self.delay_ms}ms {self.target}|{','.join(self.peers)}"

    def apply(self) -> None:
        assert not self._delays, f"{self.name} is applied already"
        target = resolve(self.cluster, self.target)
        peers = _peers(self.cluster, self.peers) or []
        hosts = self.cluster.hosts
        for peer in peers:
            self._delays.append(hosts.add_delay(hosts[target], self.delay_ms, hosts[peer]))
        self.applied = f"{target} | {' '.join(peers)}"

    def heal(self) -> None:
        while self._delays:
            self.cluster.hosts.remove_delay(self._delays.pop())


@dataclass
class _OnOneService:
    """A fault on one service (a role such as "master" resolved at apply): what the five below
    share. A subclass says how to ``_inject`` and ``_undo`` it on the resolved service."""

    cluster: HostsCluster
    target: str
    name: str = field(default="", kw_only=True)
    applied: str = field(default="", kw_only=True)  # what it hit, kept after the heal
    _target: str = field(default="", kw_only=True)

    def __post_init__(self) -> None:
        self.name = self.name or self._default_name()

    def _default_name(self) -> str:
        raise NotImplementedError

    def _inject(self, target: str) -> None:
        raise NotImplementedError

    def _undo(self, target: str) -> None:
        raise NotImplementedError

    def apply(self) -> None:
        assert not self._target, f"{self.name} is applied already"
        target = resolve(self.cluster, self.target)
        self._inject(target)
        self.applied = self._target = target

    def heal(self) -> None:
        if self._target:
            self._undo(self._target)
            self._target = ""


@dataclass
class LinkRate(_OnOneService):
    """The target's link shaped to ``rate_kbit`` both ways (tbf: a slow link, not a late one;
    tests/support/netns.py ``shape``). One per host at a time."""

    rate_kbit: int

    def _default_name(self) -> str:
        return f"rate {self.rate_kbit}kbit {self.target}"

    def _inject(self, target: str) -> None:
        self.cluster.hosts.shape(self.cluster.hosts[target], self.rate_kbit)

    def _undo(self, target: str) -> None:
        self.cluster.hosts.unshape(self.cluster.hosts[target])


@dataclass
class Pause(_OnOneService):
    """SIGSTOP of a service (held past the lease by whoever holds the fault), SIGCONT at heal."""

    def _default_name(self) -> str:
        return f"pause {self.target}"

    def _inject(self, target: str) -> None:
        self.cluster.pause(target)

    def _undo(self, target: str) -> None:
        if self.cluster.alive(target):
            self.cluster.resume(target)


@dataclass
class Kill(_OnOneService):
    """kill -9 of a service; heal starts it again (same host, address, data) and waits until ready."""

    def _default_name(self) -> str:
        return f"kill {self.target}"

    def _inject(self, target: str) -> None:
        self.cluster.kill(target)

    def _undo(self, target: str) -> None:
        if not self.cluster.alive(target):
            self.cluster.restart(target)


@dataclass
class ClockJump(_OnOneService):
    """The wall clock of the target's host jumps by ``offset_s`` (its processes started with
    libfaketime: stores and brokers); heal jumps it back by as much."""

    offset_s: float

    def _default_name(self) -> str:
        return f"clock {self.offset_s:+g}s {self.target}"

    def _inject(self, target: str) -> None:
        assert kind_of(target)[0] != "etcd" and self.cluster.config.faketime, f"{target}'s clock cannot be moved"
        self._move(target, self.offset_s)

    def _undo(self, target: str) -> None:
        self._move(target, -self.offset_s)

    def _move(self, target: str, by_s: float) -> None:
        host = self.cluster.hosts[target]
        self.cluster.hosts.set_clock(host, host.clock_offset_s + by_s)


@dataclass
class DiskFull(_OnOneService):
    """The target replica's filesystem filled by a ballast file but for ``leave_bytes``; heal
    deletes it."""

    leave_bytes: int = 0
    ballast: Path | None = None

    def _default_name(self) -> str:
        return f"disk-full {self.target}"

    def _inject(self, target: str) -> None:
        assert kind_of(target)[0] == "store", f"{target} has no disk of its own"
        self.ballast = fill_disk(self.cluster.data_dir(target), self.leave_bytes)

    def _undo(self, target: str) -> None:
        if self.ballast is not None:
            self.ballast.unlink(missing_ok=True)
            self.ballast = None


@dataclass
class Compose:
    """Several faults as one: applied in order, healed in reverse (each heal runs even if one fails)."""

    faults: Sequence[Fault]
    name: str = ""

    def __post_init__(self) -> None:
        self.name = self.name or " + ".join(f.name for f in self.faults)

    def apply(self) -> None:
        for fault in self.faults:
            fault.apply()

    def heal(self) -> None:
        errors = []
        for fault in reversed(self.faults):
            try:
                fault.heal()
            except Exception as exc:  # noqa: BLE001 - every other fault must still be healed
                errors.append(f"{fault.name}: {exc!r}")
        assert not errors, f"healing failed: {errors}"


def catalogue(cluster: HostsCluster) -> dict[str, Callable[[], Fault]]:
    """One of each fault, with the parameters the deterministic tests use, by name (a fresh
    fault per call: a schedule may apply the same kind again once the last one is healed)."""
    return {
        "partition master|etcd": lambda: master_from_etcd(cluster),
        "partition master|slaves": lambda: master_from_slaves(cluster),
        "partition master|everything": lambda: master_isolated(cluster),
        "partition etcd-leader+master|majority": lambda: etcd_split(cluster),
        "partition etcd-0|stores+brokers": lambda: etcd_member_cut(cluster),
        "partition master->etcd one-way": lambda: master_to_etcd_one_way(cluster),
        "loss 20% master|all": lambda: LinkLoss(cluster, "master", 20),
        "delay 100ms master|broker,slave": lambda: LinkDelay(cluster, "master", 100, peers=("broker", "slave")),
        "delay 300ms master|etcd": lambda: LinkDelay(cluster, "master", 300, peers=("etcd",)),
        "rate 1000kbit master": lambda: LinkRate(cluster, "master", 1000),
        "pause master": lambda: Pause(cluster, "master"),
        "pause slave": lambda: Pause(cluster, "slave"),
        "pause broker-0": lambda: Pause(cluster, "broker-0"),
        "kill master": lambda: Kill(cluster, "master"),
        "kill slave": lambda: Kill(cluster, "slave"),
        "kill broker-0": lambda: Kill(cluster, "broker-0"),
        "kill etcd-leader": lambda: Kill(cluster, "etcd-leader"),
        "clock +30s master": lambda: ClockJump(cluster, "master", 30.0),
        "clock -30s master": lambda: ClockJump(cluster, "master", -30.0),
        "clock -30s broker-0": lambda: ClockJump(cluster, "broker-0", -30.0),
        "disk-full master": lambda: DiskFull(cluster, "master"),
        "disk-full slave": lambda: DiskFull(cluster, "slave"),
    }
