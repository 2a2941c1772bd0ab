"""StoreClient: every call of the store's API, converting between protobuf and ``model``'s types.

Thread-safe (the transports are). Failures raise ``StoreError`` (``errors.py``); answers that
are refusals (a put's status, an ack's result) are values. Where the store's NOT_FOUND is an
answer, not a failure (``get_topic``, ``look_message`` ...), the call returns None.

``GrpcStoreClient`` talks to a store process; ``LocalStoreClient`` to a store core in this
process, through the same servicer code a store process runs.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Sequence

from pyrmq.store.v1 import store_pb2 as pb

from services.domain.retry_policy import GroupRetryPolicy
from services.runtime.clock import Clock, SystemClock
from services.runtime.rpc.tls import TlsFiles
from services.store.client import rpcs
from services.store.client.convert import (
    PUT_STATUS,
    ack_result_from_pb,
    delivery_from_pb,
    group_info_from_pb,
    put_outcomes_from_pb,
    stored_from_pb,
    topic_info_from_pb,
)
from services.store.client.errors import StoreError, StoreNotFoundError, StoreRejectedError
from services.store.client.model import (
    AckResult,
    ConsumerStats,
    ConsumerStatsReport,
    GetOutcome,
    GetStatus,
    GroupInfo,
    LiteTopicView,
    MessageToPut,
    PolicyView,
    PopOutcome,
    PutOutcome,
    StoredMessage,
    StoreStats,
    TopicInfo,
    stored_from_raw,
)
from services.store.client.retry_policy_convert import retry_policy_to_pb
from services.store.client.rpcs import RequestT, ResponseT, Unary
from services.store.client.transport import GrpcTransport, Stream, Transport

log = logging.getLogger(__name__)

LOOK_RAW_RECORDS_MAX = 1024  # the store's limit per LookRawMessages
WATCH_RETRY_INTERVAL_S = 0.5
_GET_STATUS = {pb.GetStatus.Value(s.name): s for s in GetStatus}

UserRow = tuple[str, str, str, str]  # (name, secret, user type, user status)
AclRow = tuple[str, list[PolicyView]]  # (user name, policies)


class StoreClient:
    def __init__(self, transport: Transport) -> None:
        self._transport = transport
        self._put = transport.put
        self._watch: Stream | None = None
        self._watch_stopped: threading.Event | None = None

    def _call(self, rpc: Unary[RequestT, ResponseT], request: RequestT, timeout_s: float | None = None) -> ResponseT:
        """One unary call; the ``StoreError`` of its status if it fails."""
        response: ResponseT = self._transport.call(rpc.name, request, timeout_s)
        return response

    @property
    def address(self) -> str:
        return self._transport.address

    def close(self) -> None:
        self._transport.close()

    @property
    def failing_over(self) -> bool:
        """A call is waiting for a new master of the store's replica set (never, for one store)."""
        return self._transport.failing_over

    @property
    def failovers(self) -> int:
        """Calls retried because of a failover so far (0 for one store)."""
        return self._transport.failovers

    def wait_ready(
        self, timeout_s: float, give_up: Callable[[], bool] = lambda: False, clock: Clock | None = None
    ) -> bool:
        """Block until the store reports SERVING (True), or ``give_up()`` (False);
        StoreUnavailableError after ``timeout_s``."""
        return self._transport.wait_ready(timeout_s, give_up, clock or SystemClock())

    # -- messages -------------------------------------------------------------------------------
    def put_messages(
        self, messages: Sequence[MessageToPut], allow_system_topics: bool = False, timeout_s: float | None = None
    ) -> list[PutOutcome]:
        """One PutMessages: one outcome per message, in order (a batch is all or nothing).
        ``timeout_s`` bounds the wait for a (new) master of the group (MasterTransport); None:
        the client's own failover timeout."""
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
        response = self._put(request, timeout_s)
        if not response.HasField("batch"):  # a store that predates batch_results
            if len(response.results) != len(messages):
                raise StoreError(f"store answered {len(response.results)} results for {len(messages)} messages")
            return [
                PutOutcome(
                    PUT_STATUS[r.status], r.queue_offset, r.phy_offset, r.offset_msg_id, r.error, r.store_timestamp_ms
                )
                for r in response.results
            ]
        return put_outcomes_from_pb(response.batch, len(messages))

    def get_messages(
        self,
        topic: str,
        queue_id: int,
        queue_offset: int,
        max_count: int,
        max_bytes: int = 0,
        tags_codes: Iterable[int] = (),
    ) -> GetOutcome:
        """GetMessages: ``StoredMessage``s of a queue from ``queue_offset`` (0 bytes: the store's limit)."""
        response = self._call(
            rpcs.GET_MESSAGES,
            _get_request(topic, queue_id, queue_offset, max_count, max_bytes, tags_codes),
        )
        return GetOutcome(
            _GET_STATUS[response.status],
            [stored_from_pb(m) for m in response.messages],
            response.next_begin_offset,
            response.min_offset,
            response.max_offset,
        )

    def get_raw_messages(
        self,
        topic: str,
        queue_id: int,
        queue_offset: int,
        max_count: int,
        max_bytes: int = 0,
        tags_codes: Iterable[int] = (),
    ) -> GetOutcome:
        """GetRawMessages: the same read, whole CommitLog records as bytes (``model.stored_from_raw``
        decodes one)."""
        response = self._call(
            rpcs.GET_RAW_MESSAGES,
            _get_request(topic, queue_id, queue_offset, max_count, max_bytes, tags_codes),
        )
        return GetOutcome(
            _GET_STATUS[response.status],
            list(response.records),
            response.next_begin_offset,
            response.min_offset,
            response.max_offset,
        )

    def look_messages(self, refs: Sequence[tuple[int, int]]) -> dict[int, StoredMessage]:
        """The records at these (CommitLog offset, size) pairs, by offset (LookRawMessages);
        absent ones, and bytes that are not that record, are left out."""
        found: dict[int, StoredMessage] = {}
        for start in range(0, len(refs), LOOK_RAW_RECORDS_MAX):
            chunk = refs[start : start + LOOK_RAW_RECORDS_MAX]
            response = self._call(
                rpcs.LOOK_RAW_MESSAGES,
                pb.LookRawMessagesRequest(
                    phy_offsets=[offset for offset, _ in chunk], sizes=[size for _, size in chunk]
                ),
            )
            for (offset, size), raw in zip(chunk, response.records):
                record = stored_from_raw(raw) if raw else None
                if record is not None and record.phy_offset == offset and record.store_size_bytes == size:
                    found[offset] = record
        return found

    def look_message(self, phy_offset: int) -> StoredMessage | None:
        """The record starting at a CommitLog offset, or None."""
        try:
            record = self._call(
                rpcs.LOOK_MESSAGE_BY_PHY_OFFSET, pb.LookMessageByPhyOffsetRequest(phy_offset=phy_offset)
            )
        except StoreNotFoundError:
            return None
        return stored_from_pb(record)

    def look_message_by_offset_msg_id(self, offset_msg_id: str) -> StoredMessage | None:
        """None when no record starts there or the id does not decode."""
        try:
            record = self._call(
                rpcs.LOOK_MESSAGE_BY_OFFSET_MSG_ID, pb.LookMessageByOffsetMsgIdRequest(offset_msg_id=offset_msg_id)
            )
        except (StoreNotFoundError, StoreRejectedError):
            return None
        return stored_from_pb(record)

    def query_messages_by_key(self, topic: str, key: str, max_num: int) -> list[StoredMessage]:
        """Records of ``topic`` indexed under ``key`` (a KEYS word or a UNIQ_KEY)."""
        response = self._call(
            rpcs.QUERY_MESSAGES_BY_KEY, pb.QueryMessagesByKeyRequest(topic=topic, key=key, max_num=max_num)
        )
        return [stored_from_pb(record) for record in response.messages]

    # -- offsets --------------------------------------------------------------------------------
    def queue_offsets(self, topic: str, queue_id: int) -> tuple[int, int]:
        """(min, max) queue offsets; (0, 0) for a queue that never held a message."""
        response = self._call(rpcs.GET_QUEUE_OFFSETS, pb.GetQueueOffsetsRequest(topic=topic, queue_id=queue_id))
        return response.min_offset, response.max_offset

    def offset_by_timestamp(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        response = self._call(
            rpcs.GET_OFFSET_BY_TIMESTAMP,
            pb.GetOffsetByTimestampRequest(topic=topic, queue_id=queue_id, timestamp_ms=timestamp_ms),
        )
        return response.queue_offset

    def commit_consumer_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        self._call(
            rpcs.COMMIT_CONSUMER_OFFSET,
            pb.CommitConsumerOffsetRequest(group=group, topic=topic, queue_id=queue_id, offset=offset),
        )

    def query_consumer_offset(self, group: str, topic: str, queue_id: int) -> int:
        """The committed offset; -1 if never committed."""
        response = self._call(
            rpcs.QUERY_CONSUMER_OFFSET, pb.QueryConsumerOffsetRequest(group=group, topic=topic, queue_id=queue_id)
        )
        return response.offset

    def group_offsets(self, group: str) -> list[tuple[str, int, int]]:
        """(topic, queue id, committed offset) of every queue ``group`` committed."""
        response = self._call(rpcs.GET_GROUP_OFFSETS, pb.GetGroupOffsetsRequest(group=group))
        return [(o.topic, o.queue_id, o.offset) for o in response.offsets]

    def group_lite_parents(self, group: str) -> list[str]:
        """The LITE parents under which ``group`` has offsets in lite topics."""
        request = pb.GetGroupOffsetsRequest(group=group, lite_parents_only=True)
        return list(self._call(rpcs.GET_GROUP_OFFSETS, request).lite_parents)

    def get_delay_offset(self, level: int) -> int:
        """The next SCHEDULE_TOPIC_XXXX queue offset to deliver for a level (0 if none)."""
        return self._call(rpcs.GET_DELAY_OFFSET, pb.GetDelayOffsetRequest(level=level)).offset

    def update_delay_offset(self, level: int, offset: int) -> None:
        self._call(rpcs.UPDATE_DELAY_OFFSET, pb.UpdateDelayOffsetRequest(level=level, offset=offset))

    def consumer_stats(self, timeout_s: float | None = None) -> list[ConsumerStats]:
        """Lag, in-flight, ready and dead-lettered messages of every consumer group, by topic."""
        return self.consumer_stats_report(timeout_s).consumers

    def consumer_stats_report(self, timeout_s: float | None = None) -> ConsumerStatsReport:
        """``consumer_stats`` and the open transactions (half messages) per real topic, in one call."""
        response = self._call(rpcs.GET_CONSUMER_STATS, pb.GetConsumerStatsRequest(), timeout_s)
        return ConsumerStatsReport(
            [
                ConsumerStats(s.group, s.topic, s.lag_messages, s.inflight_messages, s.ready_messages, s.dlq_messages)
                for s in response.stats
            ],
            {h.topic: h.count for h in response.half_messages},
        )

    def stats(self) -> StoreStats:
        """GetStats: the store's put counters and CommitLog offsets."""
        s = self._call(rpcs.GET_STATS, pb.GetStatsRequest())
        return StoreStats(
            s.put_messages_total,
            s.put_bytes_total,
            s.commitlog_min_offset,
            s.commitlog_max_offset,
            s.dispatch_behind_bytes,
            s.flush_behind_bytes,
            s.storage_size_bytes,
        )

    # -- pop consumption ------------------------------------------------------------------------
    def pop_messages(
        self,
        group: str,
        topic: str,
        queue_id: int,
        max_count: int,
        invisible_ms: int,
        tags_codes: Iterable[int],
        fifo: bool,
        sql_expression: str = "",
    ) -> PopOutcome:
        request = pb.PopMessagesRequest(
            group=group,
            topic=topic,
            queue_id=queue_id,
            max_count=max_count,
            invisible_duration_ms=invisible_ms,
            tags_codes=list(tags_codes),
            fifo=fifo,
            sql_expression=sql_expression,
        )
        response = self._call(rpcs.POP_MESSAGES, request)
        return PopOutcome(
            [delivery_from_pb(m) for m in response.messages], frozenset(q.topic for q in response.examined_queues)
        )

    def list_lite_topics(
        self, parent: str, group: str = "", backlog_only: bool = False, after: str = "", limit: int = 0
    ) -> tuple[list[LiteTopicView], str]:
        """ListLiteTopics: a page of the parent's lite topics and where the next page starts ("": none)."""
        response = self._call(
            rpcs.LIST_LITE_TOPICS,
            pb.ListLiteTopicsRequest(
                parent_topic=parent, group=group, backlog_only=backlog_only, after=after, limit=limit
            ),
        )
        rows = [
            LiteTopicView(t.lite_topic, t.min_offset, t.max_offset, t.last_store_timestamp_ms, t.consumer_offset)
            for t in response.lite_topics
        ]
        return rows, response.next_after

    def lite_topic_count(self, parent: str) -> int:
        """Lite topics of the LITE parent holding messages."""
        request = pb.ListLiteTopicsRequest(parent_topic=parent, count_only=True)
        return self._call(rpcs.LIST_LITE_TOPICS, request).lite_topic_count

    def pop_lite_messages(
        self, group: str, lmqs: Sequence[str], max_count: int, per_queue_max: int, invisible_ms: int
    ) -> PopOutcome:
        """PopLiteMessages: the deliveries (topic = the parent) and the LMQs examined."""
        request = pb.PopLiteMessagesRequest(
            group=group,
            lmq_topics=lmqs,
            max_count=max_count,
            per_queue_max_count=per_queue_max,
            invisible_duration_ms=invisible_ms,
        )
        response = self._call(rpcs.POP_LITE_MESSAGES, request)
        return PopOutcome(
            [delivery_from_pb(m) for m in response.messages], frozenset(q.topic for q in response.examined_queues)
        )

    def ack_messages(self, group: str, topic: str, handles: list[str]) -> list[AckResult]:
        response = self._call(
            rpcs.ACK_MESSAGES, pb.AckMessagesRequest(group=group, topic=topic, receipt_handles=handles)
        )
        if len(response.statuses) != len(handles):
            raise StoreError(f"store answered {len(response.statuses)} ack statuses for {len(handles)} handles")
        return [ack_result_from_pb(status) for status in response.statuses]

    def change_invisible_duration(
        self, group: str, topic: str, handle: str, invisible_ms: int, suspend: bool = False
    ) -> tuple[AckResult, str]:
        response = self._call(
            rpcs.CHANGE_INVISIBLE_DURATION,
            pb.ChangeInvisibleDurationRequest(
                group=group, topic=topic, receipt_handle=handle, invisible_duration_ms=invisible_ms, suspend=suspend
            ),
        )
        return ack_result_from_pb(response.status), response.receipt_handle

    def forward_to_dead_letter_queue(self, group: str, topic: str, handle: str) -> AckResult:
        response = self._call(
            rpcs.FORWARD_TO_DEAD_LETTER_QUEUE,
            pb.ForwardToDeadLetterQueueRequest(group=group, topic=topic, receipt_handle=handle),
        )
        return ack_result_from_pb(response.status)

    # -- arrivals -------------------------------------------------------------------------------
    def watch_arrivals(
        self,
        topics: Sequence[str],
        on_arrivals: Callable[[list[str]], None],
        on_restart: Callable[[], None],
        stopped: threading.Event,
    ) -> None:
        """Follow the store's WatchArrivals stream for ``topics`` (empty: every topic) until
        ``stopped`` or ``stop_watching``: ``on_arrivals(topics)`` per announced batch,
        ``on_restart()`` after every (re)connect (arrivals may have been missed meanwhile).
        Runs on the caller's thread; reconnects after a failure."""
        self._watch_stopped = stopped
        while not stopped.is_set():
            try:
                call = self._transport.stream("WatchArrivals", pb.WatchArrivalsRequest(topics=topics))
            except StoreError as exc:
                log.debug("WatchArrivals did not open: %s", exc)
                stopped.wait(WATCH_RETRY_INTERVAL_S)
                continue
            self._watch = call
            if stopped.is_set():  # stop_watching ran before the call existed
                call.cancel()
                return
            try:
                on_restart()
                for batch in call:
                    on_arrivals([a.topic for a in batch.arrivals])
            except StoreError as exc:
                if not stopped.is_set():
                    log.debug("WatchArrivals ended: %s", exc.code)
            stopped.wait(WATCH_RETRY_INTERVAL_S)

    def stop_watching(self) -> None:
        """End ``watch_arrivals`` (its ``stopped`` event is set; the open stream is cancelled)."""
        if self._watch_stopped is not None:
            self._watch_stopped.set()
        call = self._watch
        if call is not None:
            call.cancel()

    # -- topics and groups ----------------------------------------------------------------------
    def _get_or_none(self, rpc: Unary[RequestT, ResponseT], request: RequestT) -> ResponseT | None:
        try:
            return self._call(rpc, request)
        except StoreNotFoundError:
            return None

    def get_topic(self, name: str) -> TopicInfo | None:
        config = self._get_or_none(rpcs.GET_TOPIC, pb.GetTopicRequest(topic_name=name))
        return None if config is None else topic_info_from_pb(config)

    def create_topic(self, topic: TopicInfo) -> TopicInfo:
        config = pb.TopicConfig(
            topic_name=topic.name,
            read_queue_nums=topic.read_queue_nums,
            write_queue_nums=topic.write_queue_nums,
            perm=topic.perm,
            message_type=pb.MessageType.Value(topic.message_type),
        )
        return topic_info_from_pb(self._call(rpcs.CREATE_OR_UPDATE_TOPIC, pb.CreateOrUpdateTopicRequest(config=config)))

    def update_topic(
        self, name: str, queue_nums: int, message_type: str, attributes: dict[str, str] | None = None
    ) -> TopicInfo:
        """Read-modify-write of the full config, so fields the caller does not model (perm,
        other attributes, filter type) keep their stored values; ``attributes`` are set over them."""
        config = self._get_or_none(rpcs.GET_TOPIC, pb.GetTopicRequest(topic_name=name)) or pb.TopicConfig(
            topic_name=name
        )
        if queue_nums:
            config.read_queue_nums = config.write_queue_nums = queue_nums
        config.message_type = pb.MessageType.Value(message_type)
        config.attributes.update(attributes or {})
        return topic_info_from_pb(self._call(rpcs.CREATE_OR_UPDATE_TOPIC, pb.CreateOrUpdateTopicRequest(config=config)))

    def delete_topic(self, name: str) -> bool:
        return self._call(rpcs.DELETE_TOPIC, pb.DeleteTopicRequest(topic_name=name)).existed

    def list_topics(self) -> list[TopicInfo]:
        return [topic_info_from_pb(config) for config in self._call(rpcs.LIST_TOPICS, pb.ListTopicsRequest()).topics]

    def get_group(self, name: str) -> GroupInfo | None:
        config = self._get_or_none(rpcs.GET_GROUP, pb.GetGroupRequest(group_name=name))
        return None if config is None else group_info_from_pb(config)

    def update_group(
        self,
        name: str,
        fifo: bool,
        retry_max_times: int,
        retry_policy: GroupRetryPolicy | None = None,
        attributes: dict[str, str] | None = None,
    ) -> GroupInfo:
        """Read-modify-write of the full config, as update_topic (``retry_policy`` / ``attributes``
        None: keep them; ``attributes`` replace the stored ones)."""
        config = self._get_or_none(rpcs.GET_GROUP, pb.GetGroupRequest(group_name=name)) or pb.SubscriptionGroupConfig(
            group_name=name
        )
        config.consume_message_orderly = fifo
        config.retry_max_times = retry_max_times
        if retry_policy is not None:
            config.group_retry_policy.CopyFrom(retry_policy_to_pb(retry_policy))
        if attributes is not None:
            config.attributes.clear()
            config.attributes.update(attributes)
        return group_info_from_pb(self._call(rpcs.CREATE_OR_UPDATE_GROUP, pb.CreateOrUpdateGroupRequest(config=config)))

    def delete_group(self, name: str) -> bool:
        """Whether the group existed (its committed offsets stay)."""
        return self._call(rpcs.DELETE_GROUP, pb.DeleteGroupRequest(group_name=name)).existed

    def list_groups(self) -> list[GroupInfo]:
        return [group_info_from_pb(config) for config in self._call(rpcs.LIST_GROUPS, pb.ListGroupsRequest()).groups]

    # -- users and ACLs -------------------------------------------------------------------------
    def auth_config(self) -> tuple[list[UserRow], list[AclRow], int]:
        """(users, ACLs, version): the version changes with every write."""
        response = self._call(rpcs.GET_AUTH_CONFIG, pb.GetAuthConfigRequest())
        return (
            [(u.username, u.password, u.user_type, u.user_status) for u in response.users],
            [
                (
                    a.username,
                    [PolicyView(p.resource, tuple(p.actions), p.decision, tuple(p.source_ips)) for p in a.policies],
                )
                for a in response.acls
            ],
            response.version,
        )

    def put_user(self, username: str, secret: str, user_type: str, user_status: str) -> bool:
        """True if the user is new."""
        return self._call(
            rpcs.PUT_USER,
            pb.PutUserRequest(
                user=pb.AuthUser(username=username, password=secret, user_type=user_type, user_status=user_status)
            ),
        ).created

    def delete_user(self, username: str) -> bool:
        return self._call(rpcs.DELETE_USER, pb.DeleteUserRequest(username=username)).existed

    def put_acl(self, username: str, policies: list[PolicyView]) -> None:
        """StoreNotFoundError if the user does not exist."""
        self._call(
            rpcs.PUT_ACL,
            pb.PutAclRequest(
                acl=pb.AuthAcl(
                    username=username,
                    policies=[
                        pb.AuthPolicy(
                            resource=p.resource,
                            actions=list(p.actions),
                            decision=p.decision,
                            source_ips=list(p.source_ips),
                        )
                        for p in policies
                    ],
                )
            ),
        )


class GrpcStoreClient(StoreClient):
    """The store client of a store process at ``address`` (``host:port``); ``put_stream``: puts
    over one long-lived PutMessagesStream (``put_stream.py``), as the broker sends.

    With ``etcd_endpoints`` (comma-separated) the client follows the master of broker group
    ``group`` as etcd says, retrying calls a failover interrupted for up to
    ``failover_timeout_s`` (``master.MasterTransport``); ``address`` is then unused."""

    def __init__(
        self,
        address: str,
        rpc_timeout_s: float = 5.0,
        tls: TlsFiles | None = None,
        put_stream: bool = True,
        etcd_endpoints: str = "",
        group: str = "",
        failover_timeout_s: float = 5.0,
    ) -> None:
        endpoints = [e.strip() for e in etcd_endpoints.split(",") if e.strip()]
        if endpoints:
            from services.store.client.master import MasterTransport  # the etcd client's stubs

            self.transport: Transport = MasterTransport(
                endpoints, group, rpc_timeout_s, tls, put_stream, failover_timeout_s=failover_timeout_s
            )
        else:
            self.transport = GrpcTransport(address, rpc_timeout_s, tls, put_stream)
        super().__init__(self.transport)


def _get_request(
    topic: str, queue_id: int, queue_offset: int, max_count: int, max_bytes: int, tags_codes: Iterable[int]
) -> pb.GetMessagesRequest:
    return pb.GetMessagesRequest(
        topic=topic,
        queue_id=queue_id,
        queue_offset=queue_offset,
        max_count=max_count,
        max_bytes=max_bytes,
        tags_codes=tags_codes,
    )
