"""AdminServicer: the gRPC face of ``admin.AdminService`` (``pyrmq.admin.v1.Admin``).

Each method converts the request, calls the core, converts back. Unlike MessagingService,
errors are real gRPC status codes, mapped in one table (``_STATUS``) by ``admin_errors``:

| core error | gRPC status |
|---|---|
| ``RequestError`` (bad name, type, count; the store refused a field) | INVALID_ARGUMENT |
| ``NotFoundError`` (topic, group, message) | NOT_FOUND |
| ``StoreCallError`` with PROXY_TIMEOUT | DEADLINE_EXCEEDED |
| ``StoreCallError`` (store unreachable or failing), other ``BrokerError`` | UNAVAILABLE |
| anything else (a bug; logged with its traceback) | INTERNAL |

CheckTransaction (internal, for services/txcheck) turns the half record into the v2
``Message`` a consumer would receive (topic = REAL_TOPIC, internal properties filtered, MD5
digest) and hands a ``RecoverOrphanedTransactionCommand`` to ``transaction.TransactionCheckRelay``.

ListClients, PrintClientStack and VerifyMessage are ``client_admin.ClientAdmin``'s; the v2
commands they write down a client's Telemetry stream are built here (``V2ClientCommands``).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any, TypeVar

import grpc
from apache.rocketmq.v2 import definition_pb2 as d
from apache.rocketmq.v2 import service_pb2 as s
from pyrmq.admin.v1 import admin_pb2 as pb
from pyrmq.admin.v1 import admin_pb2_grpc as pb_grpc

from services.broker.access import AccessGuard
from services.broker.acl_admin import AclAdmin
from services.broker.admin import AdminService, ClusterStatus, QueueProgress, ResetPosition
from services.broker.assembly import BrokerCore
from services.broker.auth import AccessDenied, AuthError
from services.broker.client_admin import Answered, ClientAdmin, ClientView
from services.broker.cluster_admin import ClusterAdmin
from services.broker.errors import FAILURES, BrokerError, Code, NotFoundError, RequestError, as_broker_error
from services.broker.pull import pulled_delivery
from services.broker.topic_placement import TopicPlacement
from services.broker.transaction import TransactionCheck, TransactionCheckRelay
from services.broker.v2.consumer_convert import delivered_message
from services.broker.v2.status import DIRECT, Peers, check_access
from services.broker.validation import validate_topic
from services.domain.format.properties_format import REAL_QUEUE_ID, UNIQ_KEY
from services.domain.names import is_system_group, is_system_topic
from services.domain.retry_policy import CustomizedRetryPolicy, ExponentialRetryPolicy, GroupRetryPolicy
from services.store.client.model import Delivery, GroupInfo, PolicyView, StoredMessage, TopicInfo

log = logging.getLogger(__name__)

ADMIN_SERVICE_NAME = pb.DESCRIPTOR.services_by_name["Admin"].full_name  # pyrmq.admin.v1.Admin
_STATUS: tuple[tuple[type[BrokerError], grpc.StatusCode], ...] = (
    (AuthError, grpc.StatusCode.UNAUTHENTICATED),
    (AccessDenied, grpc.StatusCode.PERMISSION_DENIED),
    (RequestError, grpc.StatusCode.INVALID_ARGUMENT),
    (NotFoundError, grpc.StatusCode.NOT_FOUND),
    (BrokerError, grpc.StatusCode.UNAVAILABLE),
)

Method = TypeVar("Method", bound=Callable[..., Any])
_RESET_POSITIONS = {pb.RESET_POSITION_EARLIEST: ResetPosition.EARLIEST, pb.RESET_POSITION_LATEST: ResetPosition.LATEST}


def status_of(exc: BrokerError) -> grpc.StatusCode:
    if exc.code is Code.PROXY_TIMEOUT:
        return grpc.StatusCode.DEADLINE_EXCEEDED
    return next(code for kind, code in _STATUS if isinstance(exc, kind))


DETAILS_MAX_CHARS = 1_024


def bounded_details(text: str) -> str:
    """Error details travel in a gRPC trailer (8 KiB soft, 16 KiB hard limit): a message that
    quotes a huge bad value must not turn the status into RESOURCE_EXHAUSTED."""
    return text if len(text) <= DETAILS_MAX_CHARS else text[: DETAILS_MAX_CHARS - 20] + f"... ({len(text)} chars)"


def admin_errors(method: Method) -> Method:
    """Check the caller (``self._guard``, when authentication is on), then abort the call with
    the status ``_STATUS`` gives a raised error."""

    @functools.wraps(method)
    def wrapper(self: Any, request: Any, context: grpc.ServicerContext) -> Any:
        try:
            check_access(self._guard, method.__name__, request, context, self._peers)
            return method(self, request, context)
        except FAILURES as caught:
            exc = as_broker_error(caught)
            context.abort(status_of(exc), bounded_details(exc.message))
        except Exception as exc:  # a bug: log it, answer INTERNAL
            log.exception("Admin.%s failed", method.__name__)
            context.abort(grpc.StatusCode.INTERNAL, f"internal error: {type(exc).__name__}: {exc}")

    return wrapper  # type: ignore[return-value]


class AdminServicer(pb_grpc.AdminServicer):
    def __init__(
        self,
        admin: AdminService,
        placement: TopicPlacement,
        cluster: ClusterAdmin,
        checks: TransactionCheckRelay | None = None,
        acl: AclAdmin | None = None,
        guard: AccessGuard | None = None,
        peers: Peers = DIRECT,
        clients: ClientAdmin | None = None,
    ) -> None:
        self._placement = placement  # topics and consumer groups over every broker group
        self._cluster = cluster  # status, progress, reset and message queries over every broker group
        self._peers = peers
        self._clients = clients
        self._admin = admin
        self._checks = checks
        self._acl = acl
        self._guard = guard

    # -- users and ACLs ----------------------------------------------------------------------------
    def _acl_admin(self) -> AclAdmin:
        if self._acl is None:
            raise RequestError("this broker has no user and ACL store")
        return self._acl

    @admin_errors
    def PutUser(self, request: pb.PutUserRequest, context: grpc.ServicerContext) -> pb.PutUserResponse:
        return pb.PutUserResponse(
            created=self._acl_admin().put_user(
                request.username, request.secret_key, request.super_user, request.disabled
            )
        )

    @admin_errors
    def DeleteUser(self, request: pb.DeleteUserRequest, context: grpc.ServicerContext) -> pb.DeleteUserResponse:
        self._acl_admin().delete_user(request.username)
        return pb.DeleteUserResponse()

    @admin_errors
    def ListUsers(self, request: pb.ListUsersRequest, context: grpc.ServicerContext) -> pb.ListUsersResponse:
        return pb.ListUsersResponse(
            users=[
                pb.User(username=u.username, user_type=u.user_type, user_status=u.user_status)
                for u in self._acl_admin().list_users()
            ]
        )

    @admin_errors
    def SetAcl(self, request: pb.SetAclRequest, context: grpc.ServicerContext) -> pb.SetAclResponse:
        self._acl_admin().set_acl(
            request.acl.username,
            [PolicyView(p.resource, tuple(p.actions), p.decision, tuple(p.source_ips)) for p in request.acl.policies],
        )
        return pb.SetAclResponse()

    @admin_errors
    def ListAcls(self, request: pb.ListAclsRequest, context: grpc.ServicerContext) -> pb.ListAclsResponse:
        return pb.ListAclsResponse(
            acls=[
                pb.Acl(
                    username=name,
                    policies=[
                        pb.Policy(
                            resource=p.resource,
                            actions=list(p.actions),
                            decision=p.decision,
                            source_ips=list(p.source_ips),
                        )
                        for p in policies
                    ],
                )
                for name, policies in self._acl_admin().list_acls(request.username)
            ]
        )

    @admin_errors
    def CreateTopic(self, request: pb.CreateTopicRequest, context: grpc.ServicerContext) -> pb.CreateTopicResponse:
        if request.message_type not in pb.MessageType.values():
            raise RequestError(f"unknown message type {request.message_type}")
        message_type = (
            "" if request.message_type == pb.MESSAGE_TYPE_UNSPECIFIED else pb.MessageType.Name(request.message_type)
        )
        placed = self._placement.create(
            request.name, message_type, request.queue_nums, list(request.broker_groups), dict(request.attributes)
        )
        return pb.CreateTopicResponse(topic=_topic(placed.topic, placed.broker_groups), created=placed.created)

    @admin_errors
    def ListTopics(self, request: pb.ListTopicsRequest, context: grpc.ServicerContext) -> pb.ListTopicsResponse:
        return pb.ListTopicsResponse(
            topics=[_topic(t, g) for t, g in self._placement.list_topics(request.include_system)]
        )

    @admin_errors
    def DeleteTopic(self, request: pb.DeleteTopicRequest, context: grpc.ServicerContext) -> pb.DeleteTopicResponse:
        validate_topic(request.name)
        if not self._placement.delete(request.name):
            raise NotFoundError(f"topic {request.name} does not exist", Code.TOPIC_NOT_FOUND)
        return pb.DeleteTopicResponse()

    @admin_errors
    def CreateGroup(self, request: pb.CreateGroupRequest, context: grpc.ServicerContext) -> pb.CreateGroupResponse:
        fifo = request.fifo if request.HasField("fifo") else None
        policy = retry_policy_from_pb(request.retry_policy) if request.HasField("retry_policy") else None
        group, created = self._placement.create_group(
            request.name,
            fifo,
            request.max_delivery_attempts,
            policy,
            request.must_exist,
            dict(request.attributes),
            list(request.removed_attributes),
        )
        return pb.CreateGroupResponse(group=_group(group), created=created)

    @admin_errors
    def ListGroups(self, request: pb.ListGroupsRequest, context: grpc.ServicerContext) -> pb.ListGroupsResponse:
        return pb.ListGroupsResponse(groups=[_group(g) for g in self._admin.list_groups(request.include_system)])

    @admin_errors
    def GetConsumerProgress(
        self, request: pb.GetConsumerProgressRequest, context: grpc.ServicerContext
    ) -> pb.GetConsumerProgressResponse:
        progress = self._cluster.consumer_progress(request.group, request.topic)
        return pb.GetConsumerProgressResponse(
            group=progress.group,
            queues=[_queue(q) for q in progress.queues],
            total_lag=progress.total_lag,
            unreachable_broker_groups=progress.unreachable,
        )

    @admin_errors
    def ResetConsumerOffset(
        self, request: pb.ResetConsumerOffsetRequest, context: grpc.ServicerContext
    ) -> pb.ResetConsumerOffsetResponse:
        target = request.WhichOneof("target")
        if target == "position" and request.position not in _RESET_POSITIONS:
            raise RequestError(f"unknown reset position {request.position}")
        resets = self._cluster.reset_consumer_offset(
            request.group,
            request.topic,
            timestamp_ms=request.timestamp_ms if target == "timestamp_ms" else None,
            position=_RESET_POSITIONS[request.position] if target == "position" else None,
            offset=request.offset if target == "offset" else None,
        )
        return pb.ResetConsumerOffsetResponse(
            group=request.group,
            topic=request.topic,
            queues=[
                pb.QueueReset(
                    queue_id=r.queue_id, old_offset=r.old_offset, new_offset=r.new_offset, broker_name=r.broker_name
                )
                for r in resets
            ],
        )

    @admin_errors
    def GetClusterStatus(
        self, request: pb.GetClusterStatusRequest, context: grpc.ServicerContext
    ) -> pb.GetClusterStatusResponse:
        return _cluster_status(self._cluster.cluster_status(request.include_system))

    @admin_errors
    def QueryMessages(
        self, request: pb.QueryMessagesRequest, context: grpc.ServicerContext
    ) -> pb.QueryMessagesResponse:
        if request.key and request.message_id:
            raise RequestError("query by key or by message id, not both")
        if request.message_id:
            found = self._cluster.query_by_id(request.message_id, request.topic, request.max_num)
        else:
            found = self._cluster.query_by_key(request.topic, request.key, request.max_num)
        return pb.QueryMessagesResponse(
            messages=[_message(m, group) for group, m in found.messages], unreachable_broker_groups=found.unreachable
        )

    # -- connected clients ---------------------------------------------------------------------------
    def _client_admin(self) -> ClientAdmin:
        if self._clients is None:
            raise RequestError("this broker serves no clients (an admin-only set-up)")
        return self._clients

    @admin_errors
    def ListClients(self, request: pb.ListClientsRequest, context: grpc.ServicerContext) -> pb.ListClientsResponse:
        return pb.ListClientsResponse(clients=[_client(c) for c in self._client_admin().list_clients(request.group)])

    @admin_errors
    def PrintClientStack(
        self, request: pb.PrintClientStackRequest, context: grpc.ServicerContext
    ) -> pb.PrintClientStackResponse:
        answered = self._client_admin().print_stack(request.client_id, request.timeout_ms / 1000)
        return pb.PrintClientStackResponse(answer=_answer(answered), thread_stack_trace=answered.answer.text)

    @admin_errors
    def VerifyMessage(
        self, request: pb.VerifyMessageRequest, context: grpc.ServicerContext
    ) -> pb.VerifyMessageResponse:
        answered, message = self._client_admin().verify_message(
            request.group, request.message_id, request.topic, request.client_id, request.timeout_ms / 1000
        )
        return pb.VerifyMessageResponse(
            answer=_answer(answered),
            topic=message.topic,
            message_id=message.message_id,
            offset_msg_id=message.offset_msg_id,
        )

    @admin_errors
    def CheckTransaction(
        self, request: pb.CheckTransactionRequest, context: grpc.ServicerContext
    ) -> pb.CheckTransactionResponse:
        if self._checks is None:  # a broker without client sessions (admin-only test set-ups)
            return pb.CheckTransactionResponse(status=pb.NO_PRODUCER)
        half = request.half
        client_id = self._checks.relay(
            TransactionCheck(
                request.producer_group,
                request.topic,
                request.message_id,
                request.transaction_id,
                StoredMessage(
                    topic=half.topic,
                    queue_id=half.queue_id,
                    body=half.body,
                    properties=dict(half.properties),
                    queue_offset=half.queue_offset,
                    phy_offset=half.phy_offset,
                    born_timestamp_ms=half.born_timestamp_ms,
                    born_host=half.born_host,
                    store_timestamp_ms=half.store_timestamp_ms,
                    store_host=half.store_host,
                    reconsume_times=half.reconsume_times,
                    offset_msg_id=half.offset_msg_id,
                    sys_flag=request.sys_flag,
                ),
                request.sys_flag,
            )
        )
        if client_id is None:
            return pb.CheckTransactionResponse(status=pb.NO_PRODUCER)
        return pb.CheckTransactionResponse(status=pb.SENT, client_id=client_id)


def check_message(check: TransactionCheck) -> d.Message:
    """The half message as the producer's checker sees it: in its real topic and queue."""
    half = check.half
    properties = dict(half.properties)
    properties.setdefault(UNIQ_KEY, check.message_id)
    real_qid = properties.get(REAL_QUEUE_ID, "")
    return delivered_message(
        Delivery(
            topic=check.topic,
            body=half.body,
            properties=properties,
            queue_id=int(real_qid) if real_qid.isdigit() else half.queue_id,
            queue_offset=half.queue_offset,
            delivery_attempt=1,
            receipt_handle="",
            sys_flag=check.sys_flag,
            born_timestamp_ms=half.born_timestamp_ms,
            born_host=half.born_host,
            store_timestamp_ms=half.store_timestamp_ms,
            store_host=half.store_host,
            offset_msg_id=half.offset_msg_id,
        )
    )


class V2ClientCommands:
    """The Telemetry commands of ``client_admin.ClientAdmin`` and the lite consumers
    (``assembly.WireCommands``)."""

    def check_command(self, check: TransactionCheck) -> s.TelemetryCommand:
        return s.TelemetryCommand(
            recover_orphaned_transaction_command=s.RecoverOrphanedTransactionCommand(
                message=check_message(check), transaction_id=check.transaction_id
            )
        )

    def unsubscribe_lite_command(self, lite_topic: str) -> s.TelemetryCommand:
        return s.TelemetryCommand(notify_unsubscribe_lite_command=s.NotifyUnsubscribeLiteCommand(lite_topic=lite_topic))

    def stack_command(self, nonce: str) -> s.TelemetryCommand:
        return s.TelemetryCommand(print_thread_stack_trace_command=s.PrintThreadStackTraceCommand(nonce=nonce))

    def verify_command(self, nonce: str, message: StoredMessage) -> s.TelemetryCommand:
        """The stored message as a consumer would receive it (no receipt handle: it is not popped)."""
        delivered = delivered_message(pulled_delivery(message))
        return s.TelemetryCommand(verify_message_command=s.VerifyMessageCommand(nonce=nonce, message=delivered))


def add_admin_service(server: grpc.Server, core: BrokerCore, peers: Peers = DIRECT) -> AdminServicer:
    """Serve ``pyrmq.admin.v1.Admin`` on ``server`` over the core's admin services: users and
    ACLs of the home group's store; topics, consumer groups, status and queries over every
    broker group; CheckTransaction; the connected clients."""
    servicer = AdminServicer(
        core.admin,
        core.placement,
        core.cluster_admin,
        core.checks,
        acl=core.acl,
        guard=core.guard,
        peers=peers,
        clients=core.clients,
    )
    pb_grpc.add_AdminServicer_to_server(servicer, server)
    return servicer


def _topic(topic: TopicInfo, broker_groups: tuple[str, ...] = ()) -> pb.Topic:
    return pb.Topic(
        broker_groups=list(broker_groups),
        name=topic.name,
        message_type=pb.MessageType.Value(topic.message_type),
        read_queue_nums=topic.read_queue_nums,
        write_queue_nums=topic.write_queue_nums,
        perm=topic.perm,
        system=is_system_topic(topic.name),
        attributes=topic.attributes,
    )


def _group(group: GroupInfo) -> pb.Group:
    return pb.Group(
        name=group.name,
        fifo=group.consume_message_orderly,
        max_delivery_attempts=group.retry_max_times + 1,
        system=is_system_group(group.name),
        retry_policy=retry_policy_to_pb(group.retry_policy),
        attributes=group.attributes,
    )


def retry_policy_to_pb(policy: GroupRetryPolicy) -> pb.RetryPolicy:
    if policy.is_default:
        return pb.RetryPolicy(kind=pb.RETRY_POLICY_DEFAULT)
    backoff = policy.backoff()
    if isinstance(backoff, ExponentialRetryPolicy):
        return pb.RetryPolicy(
            kind=pb.RETRY_POLICY_EXPONENTIAL,
            initial_backoff_ms=backoff.initial_ms,
            max_backoff_ms=backoff.max_ms,
            backoff_multiplier=backoff.multiplier,
        )
    return pb.RetryPolicy(kind=pb.RETRY_POLICY_CUSTOMIZED, backoffs_ms=backoff.next_ms)


def retry_policy_from_pb(message: pb.RetryPolicy) -> GroupRetryPolicy | None:
    """None: unchanged (kind unspecified). Values are checked by the core."""
    if message.kind == pb.RETRY_POLICY_DEFAULT:
        return GroupRetryPolicy()
    if message.kind == pb.RETRY_POLICY_CUSTOMIZED:
        return GroupRetryPolicy.of(CustomizedRetryPolicy(tuple(message.backoffs_ms)))
    if message.kind == pb.RETRY_POLICY_EXPONENTIAL:
        return GroupRetryPolicy.of(
            ExponentialRetryPolicy(message.initial_backoff_ms, message.max_backoff_ms, message.backoff_multiplier)
        )
    return None


def _queue(queue: QueueProgress) -> pb.QueueProgress:
    return pb.QueueProgress(
        topic=queue.topic,
        queue_id=queue.queue_id,
        min_offset=queue.min_offset,
        broker_offset=queue.broker_offset,
        consumer_offset=queue.consumer_offset,
        lag=queue.lag,
        broker_name=queue.broker_name,
        lite_topic=queue.lite_topic,
    )


def _cluster_status(status: ClusterStatus) -> pb.GetClusterStatusResponse:
    return pb.GetClusterStatusResponse(
        store_address=status.store_address,
        broker_groups=[
            pb.BrokerGroupStatus(name=g.name, store_address=g.store_address, error=g.error)
            for g in status.broker_groups
        ],
        topics=[
            pb.TopicStatus(
                topic=_topic(t.topic, t.broker_groups),
                message_count=t.message_count,
                lite_topic_count=t.lite_topic_count,
                queues=[
                    pb.QueueOffsets(
                        queue_id=q.queue_id, min_offset=q.min_offset, max_offset=q.max_offset, broker_name=q.broker_name
                    )
                    for q in t.queues
                ],
            )
            for t in status.topics
        ],
        groups=[
            pb.GroupTopicStatus(
                group=g.group,
                topic=g.topic,
                queues=[_queue(q) for q in g.queues],
                lag=g.lag,
                inflight_messages=g.inflight_messages,
                lite_topic_count=g.lite_topic_count,
            )
            for g in status.groups
        ],
    )


def _message(message: StoredMessage, broker_name: str = "") -> pb.MessageRecord:
    return pb.MessageRecord(
        broker_name=broker_name,
        topic=message.topic,
        queue_id=message.queue_id,
        queue_offset=message.queue_offset,
        phy_offset=message.phy_offset,
        message_id=message.message_id,
        offset_msg_id=message.offset_msg_id,
        tag=message.tag,
        keys=message.keys,
        born_timestamp_ms=message.born_timestamp_ms,
        store_timestamp_ms=message.store_timestamp_ms,
        born_host=message.born_host,
        store_host=message.store_host,
        reconsume_times=message.reconsume_times,
        properties=message.properties,
        body=message.body,
    )


def _client(view: ClientView) -> pb.Client:
    return pb.Client(
        client_id=view.client_id,
        client_type=view.client_type,
        group=view.group,
        topics=view.topics,
        expressions=view.expressions,
        language=view.language,
        version=view.version,
        address=view.address,
        connected_timestamp_ms=view.connected_ms,
        last_heartbeat_timestamp_ms=view.last_heartbeat_ms,
        protocol=view.protocol,
        message_model=view.message_model,
    )


def _answer(answered: Answered) -> pb.ClientAnswer:
    code = answered.answer.code
    name = d.Code.Name(code) if code in d.Code.values() else str(code)
    return pb.ClientAnswer(client_id=answered.client_id, code=name, message=answered.answer.message)
