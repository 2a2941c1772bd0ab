"""etcd's v3 data model as plain Python, for pyrmq's etcd client (rpc/client.py): key-value pairs
and watch events, the comparisons and operations of a transaction, and two small pieces of
client logic with no I/O: which endpoint to try next, and when a lease is due for a keepalive
or must be taken as lost.

Names are etcd's (go.etcd.io/etcd/api/v3: mvccpb.KeyValue, mvccpb.Event, etcdserverpb.Compare,
RequestOp). Keys and values are bytes, as in etcd; revisions are etcd's cluster-wide revision
numbers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal


class EtcdError(Exception):
    """An etcd call failed; the message says which call, on which endpoint, and etcd's answer."""


class EtcdUnavailable(EtcdError):
    """No endpoint answered within the call's timeout (all down, no leader, or partitioned).
    The outcome of a write that raised it is unknown: it may have been applied."""


class LeaseNotFound(EtcdError):
    """The lease does not exist any more (expired or revoked); etcd deleted its keys."""


@dataclass(frozen=True)
class KeyValue:
    """mvccpb.KeyValue. ``version`` counts the modifications since the key was created (1 after
    the first put); ``lease`` is the ID of the lease the key is attached to, 0 for none."""

    key: bytes
    value: bytes
    create_revision: int
    mod_revision: int
    version: int
    lease: int = 0


@dataclass(frozen=True)
class Event:
    """mvccpb.Event: a PUT carries the new pair, a DELETE the key with ``mod_revision`` set to
    the revision of the delete (and ``prev_kv`` when the watch asked for it)."""

    type: Literal["PUT", "DELETE"]
    kv: KeyValue
    prev_kv: KeyValue | None = None


CompareTarget = Literal["VALUE", "MOD", "VERSION", "CREATE", "LEASE"]
CompareResult = Literal["EQUAL", "NOT_EQUAL", "GREATER", "LESS"]


@dataclass(frozen=True)
class Compare:
    """etcdserverpb.Compare: ``target`` of ``key`` compared with ``operand`` (bytes for VALUE,
    an int for the others). A key that does not exist has version, create_revision and
    mod_revision 0, so ``Compare.version(key, 0)`` means "absent" and a CAS that creates a key
    only if nobody else did is ``txn([Compare.version(k, 0)], [Put(k, v)])``."""

    key: bytes
    target: CompareTarget
    operand: bytes | int
    result: CompareResult = "EQUAL"

    @classmethod
    def value(cls, key: bytes, value: bytes, result: CompareResult = "EQUAL") -> Compare:
        return cls(key, "VALUE", value, result)

    @classmethod
    def mod_revision(cls, key: bytes, revision: int, result: CompareResult = "EQUAL") -> Compare:
        return cls(key, "MOD", revision, result)

    @classmethod
    def version(cls, key: bytes, version: int, result: CompareResult = "EQUAL") -> Compare:
        return cls(key, "VERSION", version, result)

    @classmethod
    def create_revision(cls, key: bytes, revision: int, result: CompareResult = "EQUAL") -> Compare:
        return cls(key, "CREATE", revision, result)

    @classmethod
    def lease(cls, key: bytes, lease_id: int, result: CompareResult = "EQUAL") -> Compare:
        return cls(key, "LEASE", lease_id, result)

    def __post_init__(self) -> None:
        if (self.target == "VALUE") != isinstance(self.operand, bytes):
            raise ValueError(f"Compare {self.target} of {self.key!r}: operand {self.operand!r} has the wrong type")


@dataclass(frozen=True)
class Put:
    """A put in a transaction (RequestOp.request_put); ``lease`` 0 attaches no lease."""

    key: bytes
    value: bytes
    lease: int = 0


@dataclass(frozen=True)
class Delete:
    """A delete in a transaction (RequestOp.request_delete_range): one key, or every key under
    ``key`` taken as a prefix."""

    key: bytes
    prefix: bool = False


@dataclass(frozen=True)
class Get:
    """A read in a transaction (RequestOp.request_range): one key, or a prefix."""

    key: bytes
    prefix: bool = False


Op = Put | Delete | Get


@dataclass(frozen=True)
class OpResult:
    """The answer to one Op of a transaction: ``kvs`` for a Get, ``deleted`` for a Delete,
    nothing for a Put (``op`` says which Op it answers)."""

    op: Op
    kvs: tuple[KeyValue, ...] = ()
    deleted: int = 0


@dataclass(frozen=True)
class TxnResult:
    """etcdserverpb.TxnResponse: whether every comparison held (so the success ops ran, else
    the failure ops), their results in order, and the store's revision after the transaction."""

    succeeded: bool
    results: tuple[OpResult, ...]
    revision: int


def prefix_range_end(prefix: bytes) -> bytes:
    """The ``range_end`` that makes [prefix, range_end) every key starting with ``prefix``:
    the prefix with its last byte below 0xff incremented and what follows it dropped (etcd's
    clientv3.GetPrefixRangeEnd); b"\\0" (every key) for an empty prefix or one of only 0xff."""
    end = bytearray(prefix)
    for i in range(len(end) - 1, -1, -1):
        if end[i] < 0xFF:
            end[i] += 1
            return bytes(end[: i + 1])
    return b"\0"


@dataclass
class EndpointRotation:
    """Which endpoint a call tries first and next. A call starts at the endpoint that answered
    last; an endpoint that failed sends the call to the next one, round the list once."""

    endpoints: list[str]
    current: int = 0

    def __post_init__(self) -> None:
        if not self.endpoints:
            raise ValueError("no etcd endpoints")

    def order(self) -> list[int]:
        """The endpoint indexes in the order a call tries them."""
        n = len(self.endpoints)
        return [(self.current + i) % n for i in range(n)]

    def answered(self, index: int) -> None:
        self.current = index


@dataclass
class LeaseSchedule:
    """When a lease needs a keepalive and when it must be taken as lost, from the TTLs etcd
    granted. A keepalive is due a third of the TTL after the last one was sent (as etcd's own
    client does); the lease is held until ``ttl_s`` after the *sending* of the last keepalive
    that etcd answered, because etcd may have renewed it at any point after the send.
    Times are the injected clock's monotonic seconds."""

    lease_id: int
    ttl_s: int
    granted_at_s: float
    last_sent_s: float = field(init=False)
    expires_at_s: float = field(init=False)
    lost: bool = False

    def __post_init__(self) -> None:
        self.last_sent_s = self.granted_at_s
        self.expires_at_s = self.granted_at_s + self.ttl_s

    def due_at_s(self) -> float:
        return self.last_sent_s + max(self.ttl_s / 3.0, 0.05)

    def renewed(self, sent_at_s: float, ttl_s: int) -> None:
        """etcd answered a keepalive sent at ``sent_at_s`` with ``ttl_s`` (<= 0: lease gone)."""
        self.last_sent_s = sent_at_s
        if ttl_s <= 0:
            self.lost = True
            return
        self.ttl_s = ttl_s
        self.expires_at_s = max(self.expires_at_s, sent_at_s + ttl_s)

    def held(self, now_s: float) -> bool:
        """Whether the lease is certainly still held at ``now_s``."""
        return not self.lost and now_s < self.expires_at_s
