"""StoreServicer: the gRPC face of ``FileStore``. Each method converts, calls the core, converts.

No store logic lives here (docs/conventions.md, rule 4). Errors are raised, never aborted by hand:
``rpc_errors`` maps them through the one table in ``rpc.status``.

WatchArrivals is the only method with state: each open stream owns an ``ArrivalWatcher``, a
bounded buffer fed by the store's arrival listener (on the store's dispatch thread, which must
never block) and drained by the stream's gRPC worker thread.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any, Protocol

import grpc
from prometheus_client import Histogram
from pyrmq.store.v1 import store_pb2 as pb
from pyrmq.store.v1 import store_pb2_grpc as pb_grpc

from services.domain.format.commitlog_format import MessageRecord
from services.domain.statuses import PutStatus
from services.store.config import StoreConfig
from services.store.errors import TooManyWatchersError
from services.store.ha.replica_status import group_status
from services.store.ha.replication import Replication
from services.store.ha.switch import switch_master
from services.store.lite.consumer_offsets import LiteConsumerOffsets
from services.store.lite.index import LiteIndex
from services.store.lite.queue import LIST_LITE_TOPICS_MAX, list_lite_topics
from services.store.log.commitlog import CommitLog
from services.store.metadata.auth_config import AuthConfigManager
from services.store.metadata.consumer_offsets import ConsumerOffsetManager, DelayOffsetManager
from services.store.metadata.consumer_stats import consumer_stats
from services.store.metadata.topic_config import SubscriptionGroupManager, TopicConfigManager
from services.store.metadata.transaction_metrics import TransactionMetrics
from services.store.model import Arrival, GetResult, PutResult, StoreStats
from services.store.pop.service import PopService
from services.store.rpc import convert
from services.store.rpc.replica import group_status_to_pb, switch_result_to_pb
from services.store.rpc.replicate import serve_replica
from services.store.rpc.status import check_put_batch, check_put_status, rpc_errors

WATCH_BUFFER_ARRIVALS_MAX = 1024  # arrivals buffered per watcher before coalescing per queue
WATCHERS_MAX = 16  # open WatchArrivals streams (each holds a worker thread)
WATCH_POLL_INTERVAL_S = 1.0  # how often an idle stream checks that its client is alive
LOOK_RAW_RECORDS_MAX = 1024  # LookRawMessages: records per call
LOOK_RAW_BYTES_MAX = 64 << 20  # LookRawMessages: bytes per call


class ArrivalWatcher:
    """One WatchArrivals subscriber: a bounded buffer of arrivals, coalesced when full.

    ``offer`` (store dispatch thread) appends to ``_buffer`` until it holds
    ``buffer_arrivals_max`` arrivals; after that, and until the stream drains, arrivals go to
    ``_overflow``, keyed by queue, keeping only the highest max_offset. Memory is therefore
    bounded by the buffer size plus the number of queues, however slow the client. Order is
    kept per queue: everything in ``_overflow`` is newer than everything in ``_buffer``.
    """

    def __init__(self, topics: frozenset[str], buffer_arrivals_max: int = WATCH_BUFFER_ARRIVALS_MAX) -> None:
        assert buffer_arrivals_max > 0
        self._topics = topics
        self._buffer_arrivals_max = buffer_arrivals_max
        self._cond = threading.Condition()
        self._buffer: list[Arrival] = []
        self._overflow: dict[tuple[str, int], Arrival] = {}
        self._overflow_offered = 0
        self._closed = False

    def offer(self, arrivals: list[Arrival]) -> None:
        """Called by the store for each dispatched batch; never blocks on the client."""
        with self._cond:
            for arrival in arrivals:
                if self._topics and arrival.topic not in self._topics:
                    continue
                if not self._overflow and len(self._buffer) < self._buffer_arrivals_max:
                    self._buffer.append(arrival)
                    continue
                key = (arrival.topic, arrival.queue_id)
                previous = self._overflow.get(key)
                if previous is None or arrival.max_offset >= previous.max_offset:
                    self._overflow[key] = arrival
                self._overflow_offered += 1
            self._cond.notify()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def take(self, timeout_s: float) -> tuple[list[Arrival], int] | None:
        """(arrivals, coalesced count) once any are pending, ([], 0) on timeout, None if closed."""
        with self._cond:
            self._cond.wait_for(lambda: self._buffer or self._overflow or self._closed, timeout_s)
            if self._closed:
                return None
            batch = self._buffer + list(self._overflow.values())
            coalesced = self._overflow_offered - len(self._overflow)
            self._buffer, self._overflow, self._overflow_offered = [], {}, 0
            return batch, coalesced


class StoreCore(Protocol):
    """The part of FileStore (services/store/store.py) the servicer uses."""

    @property
    def config(self) -> StoreConfig: ...
    @property
    def topics(self) -> TopicConfigManager: ...
    @property
    def groups(self) -> SubscriptionGroupManager: ...
    @property
    def consumer_offsets(self) -> ConsumerOffsetManager: ...
    @property
    def lite_consumer_offsets(self) -> LiteConsumerOffsets: ...
    @property
    def lite(self) -> LiteIndex: ...
    @property
    def delay_offsets(self) -> DelayOffsetManager: ...
    @property
    def auth(self) -> AuthConfigManager: ...
    @property
    def pop(self) -> PopService: ...
    @property
    def transactions(self) -> TransactionMetrics: ...
    @property
    def commitlog(self) -> CommitLog: ...  # read_bytes for LookRawMessages, store_host_prefix
    @property
    def replication(self) -> Replication: ...  # AttributeError before start

    def put_messages(self, messages: list[MessageRecord], allow_system_topics: bool = False) -> list[PutResult]: ...
    def put_batch(self, messages: list[MessageRecord], allow_system_topics: bool = False) -> tuple[PutStatus, str]: ...
    def get_messages(
        self,
        topic: str,
        queue_id: int,
        queue_offset: int,
        max_count: int = 32,
        max_bytes: int = 4 << 20,
        tags_codes: frozenset[int] | None = None,
    ) -> GetResult: ...
    def look_message_by_phy_offset(self, phy_offset: int) -> MessageRecord | None: ...
    def look_message_by_offset_msg_id(self, msg_id: str) -> MessageRecord | None: ...
    def query_messages_by_key(
        self, topic: str, key: str, max_num: int, begin_timestamp_ms: int, end_timestamp_ms: int
    ) -> list[MessageRecord]: ...
    def min_offset_in_queue(self, topic: str, queue_id: int) -> int: ...
    def max_offset_in_queue(self, topic: str, queue_id: int) -> int: ...
    def offset_by_timestamp(self, topic: str, queue_id: int, timestamp_ms: int) -> int: ...
    def add_arrival_listener(self, listener: Callable[[list[Arrival]], None]) -> Callable[[], None]: ...
    def delete_topic(self, topic: str) -> bool: ...
    def stats(self) -> StoreStats: ...


def _found(value: Any, what: str) -> Any:
    if value is None:
        raise LookupError(f"{what} not found")
    return value


class StoreServicer(pb_grpc.StoreServicer):
    def __init__(
        self,
        store: StoreCore,
        put_latency: Histogram | None = None,
        watchers_max: int = WATCHERS_MAX,
        watch_buffer_arrivals_max: int = WATCH_BUFFER_ARRIVALS_MAX,
    ) -> None:
        self._store = store
        self._put_latency = put_latency
        self._watchers_max = watchers_max
        self._watch_buffer_arrivals_max = watch_buffer_arrivals_max
        self._watchers: set[ArrivalWatcher] = set()
        self._watchers_lock = threading.Lock()
        self._stopping = threading.Event()  # set by close(): Replicate streams end

    def close(self) -> None:
        """End every open WatchArrivals and Replicate stream (called before the server stops)."""
        self._stopping.set()
        ha_service = self._ha_service()
        if ha_service is not None:
            ha_service.wake()
        with self._watchers_lock:
            watchers = list(self._watchers)
        for watcher in watchers:
            watcher.close()

    # -- messages ------------------------------------------------------------------------
    @rpc_errors
    def PutMessagesStream(
        self, requests: Iterator[pb.PutMessagesRequest], context: grpc.ServicerContext
    ) -> Iterator[pb.PutMessagesResponse]:
        for request in requests:
            yield self._put_messages(request)

    @rpc_errors
    def Replicate(
        self, requests: Iterator[pb.ReplicateRequest], context: grpc.ServicerContext
    ) -> Iterator[pb.ReplicateResponse]:
        config = self._store.config
        heartbeat_s, housekeeping_s = (
            config.ha_send_heartbeat_interval_ms / 1000,
            config.ha_housekeeping_interval_ms / 1000,
        )
        yield from serve_replica(self._ha_service(), requests, context, heartbeat_s, housekeeping_s, self._stopping)

    @rpc_errors
    def GetReplicaStatus(
        self, request: pb.GetReplicaStatusRequest, context: grpc.ServicerContext
    ) -> pb.GetReplicaStatusResponse:
        return group_status_to_pb(group_status(self._store.replication))

    @rpc_errors
    def SwitchMaster(self, request: pb.SwitchMasterRequest, context: grpc.ServicerContext) -> pb.SwitchMasterResponse:
        replication = self._store.replication
        timeout_ms = request.timeout_ms or self._store.config.sync_replicas_timeout_ms
        return switch_result_to_pb(switch_master(replication.coordinator, request.target_replica_id, timeout_ms / 1000))

    def _ha_service(self) -> Any:
        """The master's HAService; None on a slave, a store not started, or a store double."""
        replication = getattr(self._store, "replication", None)
        return replication.ha_service if replication is not None else None

    @rpc_errors
    def PutMessages(self, request: pb.PutMessagesRequest, context: grpc.ServicerContext) -> pb.PutMessagesResponse:
        return self._put_messages(request)

    def _put_messages(self, request: pb.PutMessagesRequest) -> pb.PutMessagesResponse:
        records = convert.messages_from_pb(request.messages)
        timer = self._put_latency.time() if self._put_latency else contextlib.nullcontext()
        if request.batch_results:
            with timer:
                status, error = self._store.put_batch(records, allow_system_topics=request.allow_system_topics)
            check_put_status(status, error, len(records))
            return convert.put_batch_response_to_pb(status, error, records, self._store.commitlog.store_host_prefix)
        with timer:
            results = self._store.put_messages(records, allow_system_topics=request.allow_system_topics)
        check_put_batch(results)
        return convert.put_response_to_pb(results)

    @rpc_errors
    def GetMessages(self, request: pb.GetMessagesRequest, context: grpc.ServicerContext) -> pb.GetMessagesResponse:
        args = convert.get_request_from_pb(request)
        result = self._store.get_messages(
            args.topic, args.queue_id, args.queue_offset, args.max_count, args.max_bytes, args.tags_codes
        )
        return convert.get_result_to_pb(result)

    @rpc_errors
    def LookMessageByPhyOffset(
        self, request: pb.LookMessageByPhyOffsetRequest, context: grpc.ServicerContext
    ) -> pb.Message:
        if request.phy_offset < 0:
            raise ValueError(f"phy_offset must not be negative, got {request.phy_offset}")
        record = self._store.look_message_by_phy_offset(request.phy_offset)
        return convert.message_to_pb(_found(record, f"message at phy_offset {request.phy_offset}"))

    @rpc_errors
    def LookMessageByOffsetMsgId(
        self, request: pb.LookMessageByOffsetMsgIdRequest, context: grpc.ServicerContext
    ) -> pb.Message:
        try:
            record = self._store.look_message_by_offset_msg_id(request.offset_msg_id)
        except ValueError as exc:
            raise ValueError(f"malformed offset_msg_id {request.offset_msg_id!r}: {exc}") from exc
        return convert.message_to_pb(_found(record, f"message {request.offset_msg_id}"))

    @rpc_errors
    def QueryMessagesByKey(
        self, request: pb.QueryMessagesByKeyRequest, context: grpc.ServicerContext
    ) -> pb.QueryMessagesByKeyResponse:
        query = convert.query_request_from_pb(request)
        records = self._store.query_messages_by_key(
            query.topic, query.key, query.max_num, query.begin_timestamp_ms, query.end_timestamp_ms
        )
        return pb.QueryMessagesByKeyResponse(messages=[convert.message_to_pb(r) for r in records])

    # -- queue and consumer offsets --------------------------------------------------------
    @rpc_errors
    def GetQueueOffsets(
        self, request: pb.GetQueueOffsetsRequest, context: grpc.ServicerContext
    ) -> pb.GetQueueOffsetsResponse:
        return pb.GetQueueOffsetsResponse(
            min_offset=self._store.min_offset_in_queue(request.topic, request.queue_id),
            max_offset=self._store.max_offset_in_queue(request.topic, request.queue_id),
        )

    @rpc_errors
    def GetOffsetByTimestamp(
        self, request: pb.GetOffsetByTimestampRequest, context: grpc.ServicerContext
    ) -> pb.GetOffsetByTimestampResponse:
        offset = self._store.offset_by_timestamp(request.topic, request.queue_id, request.timestamp_ms)
        return pb.GetOffsetByTimestampResponse(queue_offset=offset)

    @rpc_errors
    def CommitConsumerOffset(
        self, request: pb.CommitConsumerOffsetRequest, context: grpc.ServicerContext
    ) -> pb.CommitConsumerOffsetResponse:
        if not request.group or not request.topic:
            raise ValueError("group and topic must not be empty")
        if request.offset < 0:
            raise ValueError(f"offset must not be negative, got {request.offset}")
        # Through the pop engine: the group's pop state (in-flight handles) starts again there.
        self._store.pop.commit_offset(request.group, request.topic, request.queue_id, request.offset)
        return pb.CommitConsumerOffsetResponse()

    @rpc_errors
    def QueryConsumerOffset(
        self, request: pb.QueryConsumerOffsetRequest, context: grpc.ServicerContext
    ) -> pb.QueryConsumerOffsetResponse:
        offset = self._store.consumer_offsets.query_offset(request.group, request.topic, request.queue_id)
        return pb.QueryConsumerOffsetResponse(offset=offset)

    @rpc_errors
    def GetGroupOffsets(
        self, request: pb.GetGroupOffsetsRequest, context: grpc.ServicerContext
    ) -> pb.GetGroupOffsetsResponse:
        parents = self._store.lite_consumer_offsets.parents_of_group(request.group)
        if request.lite_parents_only:
            return pb.GetGroupOffsetsResponse(lite_parents=parents)
        response = convert.group_offsets_to_pb(self._store.consumer_offsets.offsets_of_group(request.group))
        response.lite_parents.extend(parents)
        return response

    # -- topics ----------------------------------------------------------------------------
    @rpc_errors
    def CreateOrUpdateTopic(
        self, request: pb.CreateOrUpdateTopicRequest, context: grpc.ServicerContext
    ) -> pb.TopicConfig:
        config = convert.topic_from_pb(request.config)
        self._store.topics.create_or_update(config)
        return convert.topic_to_pb(_found(self._store.topics.get(config.topic_name), "topic"))

    @rpc_errors
    def DeleteTopic(self, request: pb.DeleteTopicRequest, context: grpc.ServicerContext) -> pb.DeleteTopicResponse:
        # FileStore.delete_topic also drops the topic's ConsumeQueues and consumer offsets.
        return pb.DeleteTopicResponse(existed=self._store.delete_topic(request.topic_name))

    @rpc_errors
    def GetTopic(self, request: pb.GetTopicRequest, context: grpc.ServicerContext) -> pb.TopicConfig:
        config = self._store.topics.get(request.topic_name)
        return convert.topic_to_pb(_found(config, f"topic {request.topic_name!r}"))

    @rpc_errors
    def ListTopics(self, request: pb.ListTopicsRequest, context: grpc.ServicerContext) -> pb.ListTopicsResponse:
        configs = sorted(self._store.topics.list(), key=lambda c: c.topic_name)
        return pb.ListTopicsResponse(topics=[convert.topic_to_pb(c) for c in configs])

    # -- subscription groups ---------------------------------------------------------------
    @rpc_errors
    def CreateOrUpdateGroup(
        self, request: pb.CreateOrUpdateGroupRequest, context: grpc.ServicerContext
    ) -> pb.SubscriptionGroupConfig:
        config = convert.group_from_pb(request.config)
        self._store.groups.create_or_update(config)
        return convert.group_to_pb(_found(self._store.groups.get(config.group_name), "group"))

    @rpc_errors
    def DeleteGroup(self, request: pb.DeleteGroupRequest, context: grpc.ServicerContext) -> pb.DeleteGroupResponse:
        return pb.DeleteGroupResponse(existed=bool(self._store.groups.delete(request.group_name)))

    @rpc_errors
    def GetGroup(self, request: pb.GetGroupRequest, context: grpc.ServicerContext) -> pb.SubscriptionGroupConfig:
        config = self._store.groups.get(request.group_name)
        return convert.group_to_pb(_found(config, f"group {request.group_name!r}"))

    @rpc_errors
    def ListGroups(self, request: pb.ListGroupsRequest, context: grpc.ServicerContext) -> pb.ListGroupsResponse:
        configs = sorted(self._store.groups.list(), key=lambda c: c.group_name)
        return pb.ListGroupsResponse(groups=[convert.group_to_pb(c) for c in configs])

    # -- users and ACLs (config/auth.json) -----------------------------------------------------
    @rpc_errors
    def GetAuthConfig(self, request: pb.GetAuthConfigRequest, context: grpc.ServicerContext) -> pb.AuthConfig:
        users, acls, version = self._store.auth.snapshot()
        return pb.AuthConfig(
            users=[convert.user_to_pb(u) for u in users], acls=[convert.acl_to_pb(a) for a in acls], version=version
        )

    @rpc_errors
    def PutUser(self, request: pb.PutUserRequest, context: grpc.ServicerContext) -> pb.PutUserResponse:
        return pb.PutUserResponse(created=self._store.auth.put_user(convert.user_from_pb(request.user)))

    @rpc_errors
    def DeleteUser(self, request: pb.DeleteUserRequest, context: grpc.ServicerContext) -> pb.DeleteUserResponse:
        return pb.DeleteUserResponse(existed=self._store.auth.delete_user(request.username))

    @rpc_errors
    def PutAcl(self, request: pb.PutAclRequest, context: grpc.ServicerContext) -> pb.PutAclResponse:
        try:
            self._store.auth.put_acl(convert.acl_from_pb(request.acl))
        except KeyError:
            raise LookupError(f"no user {request.acl.username!r}") from None
        return pb.PutAclResponse()

    # -- delay offsets and stats -----------------------------------------------------------
    @rpc_errors
    def GetDelayOffset(
        self, request: pb.GetDelayOffsetRequest, context: grpc.ServicerContext
    ) -> pb.GetDelayOffsetResponse:
        return pb.GetDelayOffsetResponse(offset=self._store.delay_offsets.get(request.level))

    @rpc_errors
    def UpdateDelayOffset(
        self, request: pb.UpdateDelayOffsetRequest, context: grpc.ServicerContext
    ) -> pb.UpdateDelayOffsetResponse:
        if request.offset < 0:
            raise ValueError(f"offset must not be negative, got {request.offset}")
        levels = len(self._store.config.delay_level_millis)
        if not 1 <= request.level <= levels:
            raise ValueError(f"delay level must be in 1..{levels}, got {request.level}")
        self._store.delay_offsets.update(request.level, request.offset)
        return pb.UpdateDelayOffsetResponse()

    @rpc_errors
    def GetStats(self, request: pb.GetStatsRequest, context: grpc.ServicerContext) -> pb.StoreStats:
        return convert.stats_to_pb(self._store.stats())

    @rpc_errors
    def GetConsumerStats(
        self, request: pb.GetConsumerStatsRequest, context: grpc.ServicerContext
    ) -> pb.GetConsumerStatsResponse:
        return pb.GetConsumerStatsResponse(
            stats=[
                pb.ConsumerStats(
                    group=s.group,
                    topic=s.topic,
                    lag_messages=s.lag_messages,
                    inflight_messages=s.inflight_messages,
                    ready_messages=s.ready_messages,
                    dlq_messages=s.dlq_messages,
                )
                for s in consumer_stats(self._store, request.group)
            ],
            half_messages=[
                pb.HalfMessageCount(topic=topic, count=count)
                for topic, count in sorted(self._store.transactions.half_messages().items())
            ],
        )

    # -- pop consumption (statuses are data; only bad arguments fail the call) --------------
    @rpc_errors
    def PopMessages(self, request: pb.PopMessagesRequest, context: grpc.ServicerContext) -> pb.PopMessagesResponse:
        args = convert.pop_request_from_pb(request)
        result = self._store.pop.pop(
            args.group,
            args.topic,
            args.queue_id,
            args.max_count,
            args.invisible_ms,
            args.tags_codes,
            args.fifo,
            args.sql_expression,
        )
        return convert.pop_result_to_pb(result)

    @rpc_errors
    def ListLiteTopics(
        self, request: pb.ListLiteTopicsRequest, context: grpc.ServicerContext
    ) -> pb.ListLiteTopicsResponse:
        if not request.parent_topic or (request.backlog_only and not request.group):
            raise ValueError("parent_topic is required, and group with backlog_only")
        count = self._store.lite.parent_count(request.parent_topic)
        if request.count_only:
            return pb.ListLiteTopicsResponse(lite_topic_count=count)
        limit = request.limit if 0 < request.limit <= LIST_LITE_TOPICS_MAX else LIST_LITE_TOPICS_MAX
        rows, next_after = list_lite_topics(
            self._store.lite,
            self._store.consumer_offsets.query_offset,
            request.parent_topic,
            request.group,
            request.backlog_only,
            request.after,
            limit,
        )
        return pb.ListLiteTopicsResponse(
            lite_topics=[
                pb.LiteTopicInfo(
                    lite_topic=r.lite_topic,
                    min_offset=r.min_offset,
                    max_offset=r.max_offset,
                    last_store_timestamp_ms=r.last_store_timestamp_ms,
                    consumer_offset=r.consumer_offset,
                )
                for r in rows
            ],
            next_after=next_after,
            lite_topic_count=count,
        )

    @rpc_errors
    def PopLiteMessages(
        self, request: pb.PopLiteMessagesRequest, context: grpc.ServicerContext
    ) -> pb.PopMessagesResponse:
        args = convert.pop_lite_request_from_pb(request)
        result = self._store.pop.pop_lite(args.group, args.lmqs, args.max_count, args.invisible_ms, args.per_queue_max)
        return convert.pop_result_to_pb(result)

    @rpc_errors
    def AckMessage(self, request: pb.AckMessageRequest, context: grpc.ServicerContext) -> pb.AckMessageResponse:
        status = self._store.pop.ack(*convert.receipt_request_from_pb(request))
        return pb.AckMessageResponse(status=convert.ack_status_to_pb(status))

    @rpc_errors
    def AckMessages(self, request: pb.AckMessagesRequest, context: grpc.ServicerContext) -> pb.AckMessagesResponse:
        group, topic, handles = convert.receipts_request_from_pb(request)
        statuses = self._store.pop.ack_many(group, topic, handles)
        return pb.AckMessagesResponse(statuses=[convert.ack_status_to_pb(s) for s in statuses])

    @rpc_errors
    def ChangeInvisibleDuration(
        self, request: pb.ChangeInvisibleDurationRequest, context: grpc.ServicerContext
    ) -> pb.ChangeInvisibleDurationResponse:
        if request.invisible_duration_ms < 0:
            raise ValueError(f"invisible_duration_ms must not be negative, got {request.invisible_duration_ms}")
        status, handle = self._store.pop.change_invisible_duration(
            *convert.receipt_request_from_pb(request), request.invisible_duration_ms, request.suspend
        )
        return pb.ChangeInvisibleDurationResponse(status=convert.ack_status_to_pb(status), receipt_handle=handle)

    @rpc_errors
    def ForwardToDeadLetterQueue(
        self, request: pb.ForwardToDeadLetterQueueRequest, context: grpc.ServicerContext
    ) -> pb.ForwardToDeadLetterQueueResponse:
        status = self._store.pop.forward_to_dead_letter_queue(*convert.receipt_request_from_pb(request))
        return pb.ForwardToDeadLetterQueueResponse(status=convert.ack_status_to_pb(status))

    # -- arrivals --------------------------------------------------------------------------
    @rpc_errors
    def WatchArrivals(
        self, request: pb.WatchArrivalsRequest, context: grpc.ServicerContext
    ) -> Iterator[pb.ArrivalBatch]:
        watcher = ArrivalWatcher(frozenset(request.topics), self._watch_buffer_arrivals_max)
        with self._watchers_lock:
            if len(self._watchers) >= self._watchers_max:
                raise TooManyWatchersError(f"at most {self._watchers_max} WatchArrivals streams")
            self._watchers.add(watcher)
        unsubscribe = self._store.add_arrival_listener(watcher.offer)
        context.add_callback(watcher.close)  # client cancelled, deadline, or server stopping
        try:
            yield pb.ArrivalBatch()  # "subscribed": every later arrival will be announced
            while (taken := watcher.take(WATCH_POLL_INTERVAL_S)) is not None and context.is_active():
                arrivals, coalesced = taken
                if arrivals:
                    yield pb.ArrivalBatch(
                        arrivals=[convert.arrival_to_pb(a) for a in arrivals], coalesced_arrivals=coalesced
                    )
        finally:
            unsubscribe()
            with self._watchers_lock:
                self._watchers.discard(watcher)

    # -- raw records ----------------------------------------------------------------------------
    @rpc_errors
    def GetRawMessages(
        self, request: pb.GetMessagesRequest, context: grpc.ServicerContext
    ) -> pb.GetRawMessagesResponse:
        args = convert.get_request_from_pb(request)
        result = self._store.get_messages(
            args.topic, args.queue_id, args.queue_offset, args.max_count, args.max_bytes, args.tags_codes
        )
        return pb.GetRawMessagesResponse(
            status=pb.GetStatus.Value(result.status.name),
            records=result.raw_messages,
            next_begin_offset=result.next_begin_offset,
            min_offset=result.min_offset,
            max_offset=result.max_offset,
        )

    @rpc_errors
    def LookRawMessages(
        self, request: pb.LookRawMessagesRequest, context: grpc.ServicerContext
    ) -> pb.LookRawMessagesResponse:
        offsets, sizes = list(request.phy_offsets), list(request.sizes)
        if (
            len(offsets) != len(sizes)
            or len(offsets) > LOOK_RAW_RECORDS_MAX
            or sum(sizes) > LOOK_RAW_BYTES_MAX
            or any(value < 0 for value in offsets)
            or any(value <= 0 for value in sizes)
        ):
            raise ValueError(
                f"phy_offsets and sizes must pair up: at most {LOOK_RAW_RECORDS_MAX} records, "
                f"{LOOK_RAW_BYTES_MAX} bytes, no negative offset or size"
            )
        read = self._store.commitlog.read_bytes
        return pb.LookRawMessagesResponse(records=[read(offset, size) or b"" for offset, size in zip(offsets, sizes)])
