"""One synchronous client of etcd's v3 gRPC API, shared by the store, broker, scheduler and
txcheck: reads of a key or a prefix, puts (with a lease), deletes, compare-and-swap
transactions, compaction, leases, watches (streams.py) and a member's status.

Every call has a deadline (``timeout_s``, the whole call) and each attempt on one endpoint its
own (``attempt_timeout_s``), so a member that hangs (no leader, partitioned) costs one attempt,
not the call. An attempt that fails with UNAVAILABLE or DEADLINE_EXCEEDED moves the call to the
next endpoint, round the list once and then again until the call's deadline; the endpoint that
answered is tried first next time. etcd answers UNAVAILABLE both when nothing was done (member
down, no leader yet) and when a proposal timed out and may still be applied, so a write retried
here can have been applied twice: puts and deletes are idempotent, a lease granted twice expires
unused, and a compare-and-swap ``txn`` that was applied by the first attempt fails its compare
on the retry. A caller whose CAS reports ``succeeded=False`` therefore re-reads the keys (the
responses of ``failure`` ops, usually Gets, do that in the same round trip) rather than
assuming someone else won.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

import grpc
from etcd.api.etcdserverpb import rpc_pb2 as pb
from etcd.api.etcdserverpb import rpc_pb2_grpc as pb_grpc
from etcd.api.mvccpb import kv_pb2

from services.runtime.clock import Clock, SystemClock
from services.runtime.etcd.model import (
    Compare,
    Delete,
    EndpointRotation,
    EtcdError,
    EtcdUnavailable,
    Event,
    Get,
    KeyValue,
    LeaseNotFound,
    Op,
    OpResult,
    Put,
    TxnResult,
    prefix_range_end,
)

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = 5.0
DEFAULT_ATTEMPT_TIMEOUT_S = 2.0
# Codes that say "try another member": the member is down or unreachable, has no leader, or did
# not answer within the attempt's deadline.
FAILOVER_CODES = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
# A member answers UNKNOWN with this when its request to the leader timed out (seen on a
# lease keepalive right after a SIGKILL of the leader): nothing was done, try another member.
FORWARD_TIMEOUT = "context deadline exceeded"
# Streams carry etcd's "hasleader" metadata (clientv3.WithRequireLeader): a member that loses its
# leader ends them with UNAVAILABLE instead of keeping a stream that no longer sees the cluster.
REQUIRE_LEADER = (("hasleader", "true"),)
# etcd's answer to a keepalive, revoke or TimeToLive of a lease it does not have.
LEASE_NOT_FOUND = "requested lease not found"

R = TypeVar("R")


def endpoint_target(endpoint: str) -> str:
    """ "http://127.0.0.1:2379" or "127.0.0.1:2379" -> the gRPC target "127.0.0.1:2379"."""
    for scheme in ("http://", "https://"):
        if endpoint.startswith(scheme):
            return endpoint[len(scheme) :].rstrip("/")
    return endpoint


def key_value(kv: kv_pb2.KeyValue) -> KeyValue:
    return KeyValue(kv.key, kv.value, kv.create_revision, kv.mod_revision, kv.version, kv.lease)


def event(ev: kv_pb2.Event) -> Event:
    prev = key_value(ev.prev_kv) if ev.HasField("prev_kv") else None
    return Event("DELETE" if ev.type == kv_pb2.Event.DELETE else "PUT", key_value(ev.kv), prev)


def compare_pb(compare: Compare) -> pb.Compare:
    out = pb.Compare(
        key=compare.key,
        target=pb.Compare.CompareTarget.Value(compare.target),
        result=pb.Compare.CompareResult.Value(compare.result),
    )
    field = {"VALUE": "value", "MOD": "mod_revision", "VERSION": "version", "CREATE": "create_revision"}
    setattr(out, field.get(compare.target, "lease"), compare.operand)
    return out


def range_request(key: bytes, prefix: bool) -> pb.RangeRequest:
    return pb.RangeRequest(key=key, range_end=prefix_range_end(key) if prefix else b"")


def request_op(op: Op) -> pb.RequestOp:
    if isinstance(op, Put):
        return pb.RequestOp(request_put=pb.PutRequest(key=op.key, value=op.value, lease=op.lease))
    if isinstance(op, Delete):
        end = prefix_range_end(op.key) if op.prefix else b""
        return pb.RequestOp(request_delete_range=pb.DeleteRangeRequest(key=op.key, range_end=end))
    return pb.RequestOp(request_range=range_request(op.key, op.prefix))


def op_result(op: Op, response: pb.ResponseOp) -> OpResult:
    if isinstance(op, Get):
        return OpResult(op, kvs=tuple(key_value(kv) for kv in response.response_range.kvs))
    if isinstance(op, Delete):
        return OpResult(op, deleted=response.response_delete_range.deleted)
    return OpResult(op)


class EtcdClient:
    """A client of an etcd cluster through ``endpoints`` ("host:port", or with http://).
    Thread-safe: the stubs are, and the endpoint rotation is guarded by a lock."""

    def __init__(
        self,
        endpoints: Sequence[str],
        timeout_s: float = DEFAULT_TIMEOUT_S,
        attempt_timeout_s: float = DEFAULT_ATTEMPT_TIMEOUT_S,
        clock: Clock | None = None,
    ) -> None:
        self.rotation = EndpointRotation([endpoint_target(e) for e in endpoints])
        self.timeout_s = timeout_s
        self.attempt_timeout_s = min(attempt_timeout_s, timeout_s)
        self.clock = clock or SystemClock()
        self._lock = threading.Lock()
        self._channels: dict[int, grpc.Channel] = {}
        self._closed = False

    @property
    def endpoints(self) -> list[str]:
        return list(self.rotation.endpoints)

    def channel(self, index: int) -> grpc.Channel:
        with self._lock:
            if self._closed:
                raise EtcdError("etcd client closed")
            if index not in self._channels:
                self._channels[index] = grpc.insecure_channel(self.rotation.endpoints[index])
            return self._channels[index]

    def close(self) -> None:
        with self._lock:
            self._closed = True
            channels, self._channels = list(self._channels.values()), {}
        for channel in channels:
            channel.close()

    def __enter__(self) -> EtcdClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- calls with failover ------------------------------------------------------------------

    def call(self, what: str, attempt: Callable[[grpc.Channel, float], R], timeout_s: float | None = None) -> R:
        """``attempt(channel, timeout)`` on the endpoints in rotation order until one answers,
        within ``timeout_s`` (the client's by default); a non-failover error is raised at once."""
        deadline = self.clock.monotonic_s() + (timeout_s or self.timeout_s)
        errors: list[str] = []
        while True:
            with self._lock:
                order = self.rotation.order()
            for index in order:
                remaining = deadline - self.clock.monotonic_s()
                if remaining <= 0:
                    raise EtcdUnavailable(f"etcd {what}: no endpoint answered in time: {'; '.join(errors[-3:])}")
                try:
                    result = attempt(self.channel(index), min(remaining, self.attempt_timeout_s))
                except grpc.RpcError as exc:
                    code, details = exc.code(), exc.details()
                    if code in FAILOVER_CODES or (
                        code == grpc.StatusCode.UNKNOWN and FORWARD_TIMEOUT in (details or "")
                    ):
                        errors.append(f"{self.rotation.endpoints[index]}: {code.name} {details}")
                        log.debug("etcd %s failed on %s: %s %s", what, self.rotation.endpoints[index], code, details)
                        continue
                    if details and LEASE_NOT_FOUND in details:
                        raise LeaseNotFound(f"etcd {what}: {details}") from exc
                    raise EtcdError(f"etcd {what} on {self.rotation.endpoints[index]}: {code.name} {details}") from exc
                with self._lock:
                    self.rotation.answered(index)
                return result

    def _unary(self, what: str, stub: type, method: str, request: Any) -> Any:
        return self.call(what, lambda ch, t: getattr(stub(ch), method)(request, timeout=t))

    # -- KV -----------------------------------------------------------------------------------

    def get(self, key: bytes) -> KeyValue | None:
        """The pair at ``key``, or None (a linearizable read)."""
        response = self._unary("get", pb_grpc.KVStub, "Range", range_request(key, False))
        return key_value(response.kvs[0]) if response.kvs else None

    def get_prefix(self, prefix: bytes) -> list[KeyValue]:
        """Every pair whose key starts with ``prefix``, in key order."""
        response = self._unary("get_prefix", pb_grpc.KVStub, "Range", range_request(prefix, True))
        return [key_value(kv) for kv in response.kvs]

    def put(self, key: bytes, value: bytes, lease: int = 0) -> int:
        """Sets ``key``; ``lease`` attaches it to a lease (deleted when the lease ends). Returns
        the revision of the put."""
        response = self._unary("put", pb_grpc.KVStub, "Put", pb.PutRequest(key=key, value=value, lease=lease))
        return int(response.header.revision)

    def delete(self, key: bytes, prefix: bool = False) -> int:
        """Deletes ``key`` (or every key under the prefix); returns how many keys were deleted."""
        request = pb.DeleteRangeRequest(key=key, range_end=prefix_range_end(key) if prefix else b"")
        return int(self._unary("delete", pb_grpc.KVStub, "DeleteRange", request).deleted)

    def txn(self, compares: Iterable[Compare], success: Sequence[Op] = (), failure: Sequence[Op] = ()) -> TxnResult:
        """One atomic transaction: when every comparison holds, ``success`` runs, else
        ``failure`` (typically Gets of the compared keys, to see what won). See the module's
        note on retries before reading ``succeeded=False`` as "someone else won"."""
        request = pb.TxnRequest(
            compare=[compare_pb(c) for c in compares],
            success=[request_op(op) for op in success],
            failure=[request_op(op) for op in failure],
        )
        response = self._unary("txn", pb_grpc.KVStub, "Txn", request)
        ops = success if response.succeeded else failure
        results = tuple(op_result(op, r) for op, r in zip(ops, response.responses))
        return TxnResult(bool(response.succeeded), results, int(response.header.revision))

    def compact(self, revision: int) -> None:
        """Drops the history before ``revision`` (etcd's KV.Compact), waiting until it is applied."""
        self._unary("compact", pb_grpc.KVStub, "Compact", pb.CompactionRequest(revision=revision, physical=True))

    # -- Lease --------------------------------------------------------------------------------

    def lease_grant(self, ttl_s: int) -> tuple[int, int]:
        """A new lease of ``ttl_s`` seconds: (lease ID, the TTL etcd granted, which may be
        longer: etcd's minimum is about 1.5 election timeouts)."""
        response = self._unary("lease_grant", pb_grpc.LeaseStub, "LeaseGrant", pb.LeaseGrantRequest(TTL=ttl_s))
        if response.error:
            raise EtcdError(f"etcd lease_grant: {response.error}")
        return int(response.ID), int(response.TTL)

    def lease_revoke(self, lease_id: int) -> None:
        """Ends the lease now, deleting its keys (LeaseNotFound if it had already ended)."""
        self._unary("lease_revoke", pb_grpc.LeaseStub, "LeaseRevoke", pb.LeaseRevokeRequest(ID=lease_id))

    def lease_time_to_live(self, lease_id: int) -> int:
        """The lease's remaining seconds, -1 when it has expired or never existed."""
        request = pb.LeaseTimeToLiveRequest(ID=lease_id)
        return int(self._unary("lease_time_to_live", pb_grpc.LeaseStub, "LeaseTimeToLive", request).TTL)

    def lease_keepalive_once(self, lease_id: int, timeout_s: float | None = None) -> int:
        """One keepalive of the lease (one request on a LeaseKeepAlive stream): the TTL etcd
        renewed it for, 0 or less when the lease is gone."""

        def attempt(channel: grpc.Channel, timeout: float) -> int:
            requests = iter([pb.LeaseKeepAliveRequest(ID=lease_id)])
            stream = pb_grpc.LeaseStub(channel).LeaseKeepAlive(requests, timeout=timeout, metadata=REQUIRE_LEADER)
            try:
                for response in stream:
                    return int(response.TTL)
            finally:
                stream.cancel()
            raise EtcdError(f"etcd lease_keepalive of {lease_id:x}: the stream ended without an answer")

        return self.call("lease_keepalive", attempt, timeout_s)

    # -- Maintenance --------------------------------------------------------------------------

    def status(self, endpoint_index: int, timeout_s: float | None = None) -> pb.StatusResponse:
        """Maintenance.Status of one member (no failover): its member ID (``header.member_id``),
        the leader it sees (``leader``, 0 if none), its raft term and index."""
        stub = pb_grpc.MaintenanceStub(self.channel(endpoint_index))
        try:
            return stub.Status(pb.StatusRequest(), timeout=timeout_s or self.attempt_timeout_s)
        except grpc.RpcError as exc:
            raise EtcdUnavailable(
                f"etcd status of {self.rotation.endpoints[endpoint_index]}: {exc.code().name}"
            ) from exc
