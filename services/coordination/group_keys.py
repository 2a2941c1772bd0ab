"""Where a broker group's coordination lives in etcd, and how each value is encoded.

    {prefix}/groups/{brokerName}/replicas/{brokerId}  ReplicaInfo, under the replica's own lease
    {prefix}/groups/{brokerName}/master               MasterInfo, no lease
    {prefix}/groups/{brokerName}/syncStateSet         SyncStateSet, no lease

``prefix`` is the etcd prefix setting (``DEFAULT_PREFIX``, "/pyrmq"): clusters sharing one etcd
set different ones. A membership key lives exactly as long as its replica's lease, so "the
key exists" is what "the replica is alive" means here (RocketMQ's controller uses broker
heartbeats for that). The master and SyncStateSet keys are never deleted: they carry
``masterEpoch`` and ``syncStateSetEpoch``, which only grow, and a master key naming a replica
whose membership key is gone means "no live master". Every change of the master or the
SyncStateSet is a compare-and-swap on the revisions of the keys it was decided from
(controller.py).

Values are JSON with the field names of RocketMQ's controller (BrokerLiveInfo,
ElectMasterResponseHeader, SyncStateSet), compact and with sorted keys so that one state has one
encoding.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

DEFAULT_PREFIX = "/pyrmq"


@dataclass(frozen=True)
class GroupKeys:
    """The etcd keys of broker group ``group`` (RocketMQ's brokerName) under ``prefix``."""

    group: str
    prefix: str = DEFAULT_PREFIX

    def __post_init__(self) -> None:
        if not self.group or "/" in self.group:
            raise ValueError(f"broker group name {self.group!r}: must be non-empty and contain no '/'")
        if self.prefix and (not self.prefix.startswith("/") or self.prefix.endswith("/")):
            raise ValueError(f"etcd prefix {self.prefix!r}: must start with '/' and not end with one")

    @property
    def root(self) -> bytes:
        """Every key of the group starts with this (a watch of the group watches this prefix)."""
        return f"{self.prefix}/groups/{self.group}/".encode()

    @property
    def replicas(self) -> bytes:
        return self.root + b"replicas/"

    def replica(self, broker_id: int) -> bytes:
        return self.replicas + str(broker_id).encode()

    @property
    def master(self) -> bytes:
        return self.root + b"master"

    @property
    def sync_state_set(self) -> bytes:
        return self.root + b"syncStateSet"

    def replica_id(self, key: bytes) -> int | None:
        """The brokerId of a membership key, None for any other key."""
        if not key.startswith(self.replicas):
            return None
        tail = key[len(self.replicas) :]
        return int(tail) if tail.isdigit() else None


def _dump(fields: dict[str, Any]) -> bytes:
    return json.dumps(fields, separators=(",", ":"), sort_keys=True).encode()


def _load(value: bytes, what: str, required: tuple[str, ...]) -> dict[str, Any]:
    try:
        fields = json.loads(value)
    except ValueError as exc:
        raise ValueError(f"{what}: not JSON: {value[:200]!r}") from exc
    if not isinstance(fields, dict) or any(name not in fields for name in required):
        raise ValueError(f"{what}: needs fields {required}: {value[:200]!r}")
    return fields


@dataclass(frozen=True)
class ReplicaInfo:
    """What a live replica publishes (RocketMQ's BrokerLiveInfo): its address, the last
    ``epoch`` its log holds, its confirmed ``maxOffset`` in the CommitLog, and its
    ``electionPriority`` (lower wins among equals). ``diskFull`` (pyrmq's, not RocketMQ's): its
    disk is past the mark where a master refuses puts, so elections pass it over while another
    candidate can take writes."""

    brokerId: int
    brokerAddr: str
    epoch: int = 0
    maxOffset: int = 0
    electionPriority: int = 0
    diskFull: bool = False

    def encode(self) -> bytes:
        return _dump(
            {
                "brokerId": self.brokerId,
                "brokerAddr": self.brokerAddr,
                "epoch": self.epoch,
                "maxOffset": self.maxOffset,
                "electionPriority": self.electionPriority,
                "diskFull": self.diskFull,
            }
        )

    @classmethod
    def decode(cls, value: bytes) -> ReplicaInfo:
        f = _load(value, "replica", ("brokerId", "brokerAddr"))
        return cls(
            int(f["brokerId"]),
            str(f["brokerAddr"]),
            int(f.get("epoch", 0)),
            int(f.get("maxOffset", 0)),
            int(f.get("electionPriority", 0)),
            f.get("diskFull") is True,
        )


@dataclass(frozen=True)
class MasterInfo:
    """The group's master as last elected (ElectMasterResponseHeader's fields), and
    ``electedBy``, the replica whose transaction elected it: replicas racing to elect the same
    master write different values, so one whose transaction was retried after UNAVAILABLE can
    tell its own success from a racer's (controller.py)."""

    masterBrokerId: int
    masterAddress: str
    masterEpoch: int
    electedBy: int = -1

    def encode(self) -> bytes:
        return _dump(
            {
                "masterBrokerId": self.masterBrokerId,
                "masterAddress": self.masterAddress,
                "masterEpoch": self.masterEpoch,
                "electedBy": self.electedBy,
            }
        )

    @classmethod
    def decode(cls, value: bytes) -> MasterInfo:
        f = _load(value, "master", ("masterBrokerId", "masterAddress", "masterEpoch"))
        return cls(
            int(f["masterBrokerId"]), str(f["masterAddress"]), int(f["masterEpoch"]), int(f.get("electedBy", -1))
        )


@dataclass(frozen=True)
class SyncStateSet:
    """The in-sync replicas (RocketMQ's SyncStateSet): the master and the slaves it has seen
    caught up, with the epoch of this set. Only these can be elected (unless unclean)."""

    syncStateSet: frozenset[int]
    syncStateSetEpoch: int

    def encode(self) -> bytes:
        return _dump({"syncStateSet": sorted(self.syncStateSet), "syncStateSetEpoch": self.syncStateSetEpoch})

    @classmethod
    def decode(cls, value: bytes) -> SyncStateSet:
        f = _load(value, "syncStateSet", ("syncStateSet", "syncStateSetEpoch"))
        return cls(frozenset(int(i) for i in f["syncStateSet"]), int(f["syncStateSetEpoch"]))
