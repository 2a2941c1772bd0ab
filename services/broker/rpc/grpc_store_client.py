"""GrpcStoreClient: ``StoreClient`` over the store's gRPC API (``pyrmq.store.v1.Store``).

One channel, shared by every broker thread (grpc channels are thread-safe and multiplex
calls). Puts go over one long-lived PutMessagesStream (``put_stream.py``) unless
``put_stream`` is off. gRPC failures become ``StoreCallError``: DEADLINE_EXCEEDED -> PROXY_TIMEOUT (the
outcome is unknown), anything else -> INTERNAL_SERVER_ERROR; the store's INVALID_ARGUMENT
(a field the broker should have checked) -> BAD_REQUEST.
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import grpc
from pyrmq.store.v1 import store_pb2 as pb
from pyrmq.store.v1 import store_pb2_grpc as pb_grpc

from services.runtime.tls import TlsFiles, open_channel
from services.broker.access import AuthSnapshot, snapshot_of
from services.broker.acl_admin import PolicyView
from services.broker.admin import MessageView
from services.runtime.clock import Clock, SystemClock
from services.broker.consumer import AckResult, Delivery, PopOutcome
from services.broker.errors import Code, NotFoundError, RequestError, StoreCallError
from services.broker.model import GroupInfo, PutOutcome, PutStatus, StoredMessage, StoreMessage, TopicInfo
from services.broker.offsets import GetOutcome, GetStatus
from services.broker.rpc.put_stream import PutStream
from services.runtime.health import NotServingError, wait_serving
from services.domain.format.commitlog_format import offset_msg_id_with_prefix

log = logging.getLogger(__name__)

STORE_SERVICE = "pyrmq.store.v1.Store"
_PUT_STATUS = {pb.PutStatus.Value(s.name): s for s in PutStatus}
_ACK_RESULT = {pb.ACK_OK: AckResult.OK, pb.INVALID_RECEIPT_HANDLE: AckResult.INVALID_RECEIPT_HANDLE,
               pb.DLQ_PUT_FAILED: AckResult.DLQ_PUT_FAILED}
WATCH_RETRY_INTERVAL_S = 0.5


def _call_error(exc: grpc.RpcError, what: str) -> Exception:
    code = exc.code() if hasattr(exc, "code") else None
    details = exc.details() if hasattr(exc, "details") else str(exc)
    if code is grpc.StatusCode.DEADLINE_EXCEEDED:
        return StoreCallError(f"store did not answer {what} in time", Code.PROXY_TIMEOUT)
    if code is grpc.StatusCode.INVALID_ARGUMENT:
        return RequestError(f"store refused {what}: {details}", Code.BAD_REQUEST)
    name = code.name if code is not None else "UNKNOWN"
    return StoreCallError(f"store failed {what}: {name} {details}", Code.INTERNAL_SERVER_ERROR)


class GrpcStoreClient:
    def __init__(self, address: str, rpc_timeout_s: float = 5.0, tls: TlsFiles | None = None,
                 put_stream: bool = True) -> None:
        self.address = address
        self._timeout_s = rpc_timeout_s
        self._channel = open_channel(address, tls)
        self._stub = pb_grpc.StoreStub(self._channel)
        unary_put = lambda request: self._stub.PutMessages(request, timeout=self._timeout_s)  # noqa: E731
        self._put: Callable[[pb.PutMessagesRequest], Any] = unary_put
        self._put_stream: PutStream | None = None
        if put_stream:
            self._put_stream = PutStream(self._stub.PutMessagesStream, unary_put, rpc_timeout_s,
                                         SystemClock().monotonic_s)
            self._put = self._put_stream.put

    def close(self) -> None:
        if self._put_stream is not None:
            self._put_stream.close()
        self._channel.close()

    def _call(self, method: str, request: Any, timeout_s: float | None = None) -> Any:
        """One unary store RPC; a gRPC failure becomes the broker error ``_call_error`` picks."""
        try:
            return getattr(self._stub, method)(request, timeout=self._timeout_s if timeout_s is None else timeout_s)
        except grpc.RpcError as exc:
            raise _call_error(exc, method) from None
        except ValueError as exc:  # grpc: the channel is closed (the broker is stopping)
            raise StoreCallError(f"store client closed: {exc}") from None

    def wait_ready(self, timeout_s: float, clock: Clock | None = None,
                   give_up: Callable[[], bool] = lambda: False) -> bool:
        """Block until the store reports SERVING (True), or ``give_up()`` (False).

        StoreCallError after timeout_s.
        """
        clock = clock or SystemClock()
        try:
            return wait_serving(self._channel, STORE_SERVICE, timeout_s, clock.monotonic_s, give_up)
        except NotServingError as exc:
            raise StoreCallError(f"store at {self.address} {exc}") from None

    # -- messages -------------------------------------------------------------------------------
    def put_messages(self, messages: list[StoreMessage], allow_system_topics: bool) -> list[PutOutcome]:
        request = pb.PutMessagesRequest(allow_system_topics=allow_system_topics, batch_results=True)
        add = request.messages.add
        for message in messages:
            out = add()
            out.topic = message.topic
            out.queue_id = message.queue_id
            out.body = message.body
            properties = out.properties
            for key, value in message.properties.items():  # MutableMapping.update is pure Python
                properties[key] = value
            if message.sys_flag:
                out.sys_flag = message.sys_flag
            if message.flag:
                out.flag = message.flag
            out.born_timestamp_ms = message.born_timestamp_ms
            if message.born_host:
                out.born_host = message.born_host
            if message.reconsume_times:
                out.reconsume_times = message.reconsume_times
            if message.prepared_transaction_offset:
                out.prepared_transaction_offset = message.prepared_transaction_offset
        try:
            response = self._put(request)
        except grpc.RpcError as exc:
            raise _call_error(exc, "PutMessages") from None
        except ValueError as exc:  # grpc: the channel is closed (the broker is stopping)
            raise StoreCallError(f"store client closed: {exc}") from None
        status_of = _PUT_STATUS
        if not response.HasField("batch"):  # a store that predates batch_results
            return [PutOutcome(status_of[r.status], r.queue_offset, r.phy_offset, r.offset_msg_id, r.error)
                    for r in response.results]
        return _outcomes(response.batch, len(messages))

    def look_message(self, phy_offset: int) -> StoredMessage | None:
        record = self._get_or_none("LookMessageByPhyOffset", pb.LookMessageByPhyOffsetRequest(phy_offset=phy_offset))
        return None if record is None else _stored(record)

    def query_messages_by_key(self, topic: str, key: str, max_num: int) -> list[StoredMessage]:
        response = self._call("QueryMessagesByKey", pb.QueryMessagesByKeyRequest(topic=topic, key=key, max_num=max_num))
        return [_stored(record) for record in response.messages]

    # -- pop consumption ------------------------------------------------------------------------
    def pop_messages(self, group: str, topic: str, queue_id: int, max_count: int, invisible_ms: int,
                     tags_codes, fifo: bool, sql_expression: str = "") -> PopOutcome:
        request = pb.PopMessagesRequest(group=group, topic=topic, queue_id=queue_id, max_count=max_count,
                                        invisible_duration_ms=invisible_ms, tags_codes=list(tags_codes), fifo=fifo,
                                        sql_expression=sql_expression)
        response = self._call("PopMessages", request)
        return PopOutcome([_delivery(m) for m in response.messages],
                          frozenset(q.topic for q in response.examined_queues))

    def consumer_stats(self, timeout_s: float) -> list[tuple[str, str, int, int]]:
        """(group, topic, lag messages, in-flight messages) of every consumer group."""
        response = self._call("GetConsumerStats", pb.GetConsumerStatsRequest(), timeout_s)
        return [(s.group, s.topic, s.lag_messages, s.inflight_messages) for s in response.stats]

    def ack_messages(self, group: str, topic: str, handles: list[str]) -> list[AckResult]:
        response = self._call("AckMessages", pb.AckMessagesRequest(group=group, topic=topic, receipt_handles=handles))
        if len(response.statuses) != len(handles):
            raise StoreCallError(f"store answered {len(response.statuses)} ack statuses for {len(handles)} handles")
        return [_ack_result(status) for status in response.statuses]

    def change_invisible_duration(self, group: str, topic: str, handle: str,
                                  invisible_ms: int) -> tuple[AckResult, str]:
        response = self._call("ChangeInvisibleDuration", pb.ChangeInvisibleDurationRequest(
            group=group, topic=topic, receipt_handle=handle, invisible_duration_ms=invisible_ms))
        return _ack_result(response.status), response.receipt_handle

    def forward_to_dead_letter_queue(self, group: str, topic: str, handle: str) -> AckResult:
        response = self._call("ForwardToDeadLetterQueue", pb.ForwardToDeadLetterQueueRequest(
            group=group, topic=topic, receipt_handle=handle))
        return _ack_result(response.status)

    def watch_arrivals(self, on_arrivals: Callable[[list[str]], None], on_restart: Callable[[], None],
                       stopped: threading.Event) -> None:
        """Follow the store's WatchArrivals stream (every topic) until ``stopped``: call
        ``on_arrivals(topics)`` per batch, ``on_restart()`` after every (re)connect (arrivals
        may have been missed meanwhile). Runs on the caller's thread."""
        while not stopped.is_set():
            call = self._stub.WatchArrivals(pb.WatchArrivalsRequest(), wait_for_ready=True)
            self._watch_call = call
            try:
                on_restart()
                for batch in call:
                    on_arrivals([a.topic for a in batch.arrivals])
            except grpc.RpcError as exc:
                if not stopped.is_set():
                    log.debug("WatchArrivals ended: %s", exc.code())
            stopped.wait(WATCH_RETRY_INTERVAL_S)

    def stop_watching(self) -> None:
        call = getattr(self, "_watch_call", None)
        if call is not None:
            call.cancel()

    # -- topics and groups ----------------------------------------------------------------------
    def _get_or_none(self, method: str, request):
        """Call a Get* RPC; the store's NOT_FOUND means None."""
        try:
            return getattr(self._stub, method)(request, timeout=self._timeout_s)
        except grpc.RpcError as exc:
            if exc.code() is grpc.StatusCode.NOT_FOUND:
                return None
            raise _call_error(exc, method) from None

    def get_topic(self, name: str) -> TopicInfo | None:
        config = self._get_or_none("GetTopic", pb.GetTopicRequest(topic_name=name))
        return None if config is None else _topic_info(config)

    def create_topic(self, topic: TopicInfo) -> TopicInfo:
        config = pb.TopicConfig(topic_name=topic.name, read_queue_nums=topic.read_queue_nums,
                                write_queue_nums=topic.write_queue_nums, perm=topic.perm,
                                message_type=pb.MessageType.Value(topic.message_type))
        stored = self._call("CreateOrUpdateTopic", pb.CreateOrUpdateTopicRequest(config=config))
        return _topic_info(stored)

    def get_group(self, name: str) -> GroupInfo | None:
        config = self._get_or_none("GetGroup", pb.GetGroupRequest(group_name=name))
        if config is None:
            return None
        return GroupInfo(name=config.group_name, consume_message_orderly=config.consume_message_orderly,
                         retry_max_times=config.retry_max_times)


    # -- admin (services/broker/admin.py: AdminStore) ------------------------------------------
    def list_topics(self) -> list[TopicInfo]:
        response = self._call("ListTopics", pb.ListTopicsRequest())
        return [_topic_info(config) for config in response.topics]

    def update_topic(self, name: str, queue_nums: int, message_type: str) -> TopicInfo:
        """Read-modify-write of the full config, so fields the broker does not model (perm,
        other attributes, filter type) keep their stored values."""
        config = self._get_or_none("GetTopic", pb.GetTopicRequest(topic_name=name)) or pb.TopicConfig(topic_name=name)
        if queue_nums:
            config.read_queue_nums = config.write_queue_nums = queue_nums
        config.message_type = pb.MessageType.Value(message_type)
        stored = self._call("CreateOrUpdateTopic", pb.CreateOrUpdateTopicRequest(config=config))
        return _topic_info(stored)

    def delete_topic(self, name: str) -> bool:
        response = self._call("DeleteTopic", pb.DeleteTopicRequest(topic_name=name))
        return response.existed

    def list_groups(self) -> list[GroupInfo]:
        response = self._call("ListGroups", pb.ListGroupsRequest())
        return [_group_info(config) for config in response.groups]

    def update_group(self, name: str, fifo: bool, retry_max_times: int) -> GroupInfo:
        """Read-modify-write of the full config, as update_topic."""
        config = (self._get_or_none("GetGroup", pb.GetGroupRequest(group_name=name))
                  or pb.SubscriptionGroupConfig(group_name=name))
        config.consume_message_orderly = fifo
        config.retry_max_times = retry_max_times
        stored = self._call("CreateOrUpdateGroup", pb.CreateOrUpdateGroupRequest(config=config))
        return _group_info(stored)

    def group_offsets(self, group: str) -> list[tuple[str, int, int]]:
        response = self._call("GetGroupOffsets", pb.GetGroupOffsetsRequest(group=group))
        return [(o.topic, o.queue_id, o.offset) for o in response.offsets]

    def queue_offsets(self, topic: str, queue_id: int) -> tuple[int, int]:
        response = self._call("GetQueueOffsets", pb.GetQueueOffsetsRequest(topic=topic, queue_id=queue_id))
        return response.min_offset, response.max_offset

    def find_messages_by_key(self, topic: str, key: str, max_num: int) -> list[MessageView]:
        response = self._call("QueryMessagesByKey", pb.QueryMessagesByKeyRequest(topic=topic, key=key, max_num=max_num))
        return [_message_view(record) for record in response.messages]

    def find_message_by_offset_msg_id(self, offset_msg_id: str) -> MessageView | None:
        """None when no record starts there (NOT_FOUND) or the id does not decode (INVALID_ARGUMENT)."""
        try:
            record = self._stub.LookMessageByOffsetMsgId(
                pb.LookMessageByOffsetMsgIdRequest(offset_msg_id=offset_msg_id), timeout=self._timeout_s)
        except grpc.RpcError as exc:
            if exc.code() in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.INVALID_ARGUMENT):
                return None
            raise _call_error(exc, "LookMessageByOffsetMsgId") from None
        return _message_view(record)

    # -- offset-based pulls (services/broker/offsets.py: OffsetStore) -----------------------------
    def get_messages(self, topic: str, queue_id: int, queue_offset: int, max_count: int, max_bytes: int,
                     tags_codes: list[int]) -> GetOutcome:
        response = self._call("GetMessages", pb.GetMessagesRequest(
            topic=topic, queue_id=queue_id, queue_offset=queue_offset, max_count=max_count, max_bytes=max_bytes,
            tags_codes=tags_codes))
        return GetOutcome(GetStatus[pb.GetStatus.Name(response.status)], [_pulled(m) for m in response.messages],
                          response.next_begin_offset, response.min_offset, response.max_offset)

    def get_raw_messages(self, topic: str, queue_id: int, queue_offset: int, max_count: int, max_bytes: int,
                         tags_codes: list[int]) -> GetOutcome:
        """GetRawMessages (services/broker/raw_pull.py: RawStore): records as bytes."""
        response = self._call("GetRawMessages", pb.GetMessagesRequest(
            topic=topic, queue_id=queue_id, queue_offset=queue_offset, max_count=max_count, max_bytes=max_bytes,
            tags_codes=tags_codes))
        return GetOutcome(GetStatus[pb.GetStatus.Name(response.status)], list(response.records),
                          response.next_begin_offset, response.min_offset, response.max_offset)

    # -- users and ACLs (acl_admin.AuthStore; access.AccessGuard's load) -----------------------------
    def auth_config(self) -> tuple[list[tuple[str, str, str, str]], list[tuple[str, list[PolicyView]]], int]:
        response = self._call("GetAuthConfig", pb.GetAuthConfigRequest())
        return ([(u.username, u.password, u.user_type, u.user_status) for u in response.users],
                [(a.username, [PolicyView(p.resource, tuple(p.actions), p.decision, tuple(p.source_ips))
                               for p in a.policies]) for a in response.acls], response.version)

    def auth_snapshot(self) -> AuthSnapshot:
        users, acls, version = self.auth_config()
        return snapshot_of(users, [(name, [(p.resource, p.actions, p.decision, p.source_ips) for p in policies])
                                   for name, policies in acls], version)

    def put_user(self, username: str, secret: str, user_type: str, user_status: str) -> bool:
        return self._call("PutUser", pb.PutUserRequest(user=pb.AuthUser(
            username=username, password=secret, user_type=user_type, user_status=user_status))).created

    def delete_user(self, username: str) -> bool:
        return self._call("DeleteUser", pb.DeleteUserRequest(username=username)).existed

    def put_acl(self, username: str, policies: list[PolicyView]) -> None:
        try:
            self._stub.PutAcl(pb.PutAclRequest(acl=pb.AuthAcl(username=username, policies=[
                pb.AuthPolicy(resource=p.resource, actions=list(p.actions), decision=p.decision,
                              source_ips=list(p.source_ips)) for p in policies])), timeout=self._timeout_s)
        except grpc.RpcError as exc:
            if exc.code() is grpc.StatusCode.NOT_FOUND:
                raise NotFoundError(f"no user {username!r}", Code.NOT_FOUND) from None
            raise _call_error(exc, "PutAcl") from None

    def offset_by_timestamp(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        response = self._call("GetOffsetByTimestamp", pb.GetOffsetByTimestampRequest(
            topic=topic, queue_id=queue_id, timestamp_ms=timestamp_ms))
        return response.queue_offset

    def commit_consumer_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        self._call("CommitConsumerOffset", pb.CommitConsumerOffsetRequest(
            group=group, topic=topic, queue_id=queue_id, offset=offset))

    def query_consumer_offset(self, group: str, topic: str, queue_id: int) -> int:
        response = self._call("QueryConsumerOffset", pb.QueryConsumerOffsetRequest(
            group=group, topic=topic, queue_id=queue_id))
        return response.offset


def _pulled(record: pb.Message) -> Delivery:
    return Delivery(
        topic=record.topic, body=record.body, properties=dict(record.properties), queue_id=record.queue_id,
        queue_offset=record.queue_offset, delivery_attempt=record.reconsume_times + 1, receipt_handle="",
        sys_flag=record.sys_flag, born_timestamp_ms=record.born_timestamp_ms, born_host=record.born_host,
        store_timestamp_ms=record.store_timestamp_ms, store_host=record.store_host,
        offset_msg_id=record.offset_msg_id)


def _delivery(popped: pb.PoppedMessage) -> Delivery:
    record = popped.message
    return Delivery(
        topic=record.topic, body=record.body, properties=dict(record.properties), queue_id=popped.queue_id,
        queue_offset=popped.queue_offset, delivery_attempt=max(1, popped.delivery_attempt),
        receipt_handle=popped.receipt_handle, sys_flag=record.sys_flag, born_timestamp_ms=record.born_timestamp_ms,
        born_host=record.born_host, store_timestamp_ms=record.store_timestamp_ms, store_host=record.store_host,
        offset_msg_id=record.offset_msg_id)


def _ack_result(status: int) -> AckResult:
    result = _ACK_RESULT.get(status)
    if result is None:
        raise StoreCallError(f"store answered an unknown ack status {status}")
    return result


def _outcomes(batch: pb.PutBatchResult, count: int) -> list[PutOutcome]:
    """One PutOutcome per message from a PutBatchResult (one status, packed offset columns)."""
    status = _PUT_STATUS[batch.status]
    phy_offsets = list(batch.phy_offset)
    if len(phy_offsets) != count:  # not appended (the columns are empty): the same refusal for all
        if status is PutStatus.PUT_OK and count:
            raise StoreCallError(f"store answered {len(phy_offsets)} offsets for {count} messages")
        return [PutOutcome(status, error=batch.error) for _ in range(count)]
    prefix = batch.store_host_prefix
    error = batch.error
    return [PutOutcome(status, queue_offset, phy_offset, offset_msg_id_with_prefix(prefix, phy_offset), error)
            for queue_offset, phy_offset in zip(batch.queue_offset, phy_offsets)]


def _stored(record: pb.Message) -> StoredMessage:
    return StoredMessage(
        topic=record.topic, queue_id=record.queue_id, body=record.body, properties=dict(record.properties),
        queue_offset=record.queue_offset, phy_offset=record.phy_offset, sys_flag=record.sys_flag, flag=record.flag,
        born_timestamp_ms=record.born_timestamp_ms, born_host=record.born_host,
        store_timestamp_ms=record.store_timestamp_ms, reconsume_times=record.reconsume_times,
        prepared_transaction_offset=record.prepared_transaction_offset)


def _topic_info(config: pb.TopicConfig) -> TopicInfo:
    return TopicInfo(name=config.topic_name, read_queue_nums=config.read_queue_nums,
                     write_queue_nums=config.write_queue_nums, perm=config.perm,
                     message_type=pb.MessageType.Name(config.message_type))


def _group_info(config: pb.SubscriptionGroupConfig) -> GroupInfo:
    return GroupInfo(name=config.group_name, consume_message_orderly=config.consume_message_orderly,
                     retry_max_times=config.retry_max_times)


def _message_view(record: pb.Message) -> MessageView:
    return MessageView(
        topic=record.topic, queue_id=record.queue_id, queue_offset=record.queue_offset, phy_offset=record.phy_offset,
        offset_msg_id=record.offset_msg_id, body=record.body, properties=dict(record.properties),
        born_timestamp_ms=record.born_timestamp_ms, store_timestamp_ms=record.store_timestamp_ms,
        born_host=record.born_host, store_host=record.store_host, reconsume_times=record.reconsume_times)
