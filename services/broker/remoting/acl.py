"""ACL on the remoting door: the AclClientRPCHook signature checked against the same ACL 2.0
users and policies as the v2 door (``access.AccessGuard``), before any handler runs.

The signature (../shared/docs/remoting.md §4, services/domain/remoting/signature.py): HmacSHA1 of
the extField values but ``Signature`` in key order, then the body, keyed by the secret of the user
``AccessKey`` names, Base64. A request without an AccessKey, or with an empty one (the C++
client always sends the key), is anonymous: refused while authentication is on. Failures answer
NO_PERMISSION (16) with the reason, as RocketMQ 5's AuthenticationPipeline does.

What each code needs (RocketMQ 5's ``DefaultAuthorizationContextBuilder`` for remoting):

| codes | resources, action |
|---|---|
| sends 10, 310, 320, 324, 325, END_TRANSACTION 37 | Pub on the topic |
| PULL 11, 361, QUERY/UPDATE_CONSUMER_OFFSET 14/15 | Sub on the topic and the group |
| CONSUMER_SEND_MSG_BACK 36, UNREGISTER_CLIENT 35, GET_CONSUMER_LIST_BY_GROUP 38 | Sub on the group |
| HEART_BEAT 34 | Sub on each consumer group and each topic it subscribes (but retry topics) |
| LOCK/UNLOCK_BATCH_MQ 41/42 | Sub on the group and each queue's topic |
| GET_ROUTEINFO_BY_TOPIC 105 | Pub or Sub on the topic |
| offsets by queue 29-32, QUERY_MESSAGE 12, VIEW_MESSAGE_BY_ID 33 | Sub on the topic (33: none named: authentication only) |
| cluster and topic lists 106, 206, 224, 304, KV reads 101, 219, CHECK_CLIENT_CONFIG 46 | authentication only |
| any other (the admin codes) | a Super user |
"""

from __future__ import annotations

import json
from collections.abc import Callable

from services.broker.access import AccessGuard, Needs
from services.broker.auth import AccessDenied, Action, AuthError, ResourceType
from services.broker.remoting.dispatch import RemotingError
from services.broker.remoting.server import Channel
from services.domain.names import RETRY_TOPIC_PREFIX
from services.domain.remoting.codes import RequestCode, ResponseCode
from services.domain.remoting.command import RemotingCommand
from services.domain.remoting.signature import ACCESS_KEY, is_anonymous, verify_request

TOPIC, GROUP = ResourceType.TOPIC, ResourceType.GROUP
PUB, SUB = Action.PUB, Action.SUB
AUTHENTICATION_ONLY: Needs = ([], SUB)
R = RequestCode


def _topic(request: RemotingCommand) -> str:
    fields = request.ext_fields
    return fields.get("topic") or fields.get("b") or ""


def _group(request: RemotingCommand) -> str:
    fields = request.ext_fields
    return fields.get("consumerGroup") or fields.get("group") or ""


def _heartbeat(request: RemotingCommand) -> Needs:
    resources: list[tuple[ResourceType, str]] = []
    try:
        data = json.loads(request.body or b"{}")
    except ValueError:
        return AUTHENTICATION_ONLY  # the handler answers the bad body
    for consumer in data.get("consumerDataSet") or ():
        resources.append((GROUP, str(consumer.get("groupName") or "")))
        for sub in consumer.get("subscriptionDataSet") or ():
            topic = str(sub.get("topic") or "")
            if topic and not topic.startswith(RETRY_TOPIC_PREFIX):
                resources.append((TOPIC, topic))
    return resources, SUB


def _locks(request: RemotingCommand) -> Needs:
    try:
        data = json.loads(request.body or b"{}")
    except ValueError:
        return AUTHENTICATION_ONLY
    resources = [(GROUP, str(data.get("consumerGroup") or ""))]
    resources += [(TOPIC, str(q.get("topic") or "")) for q in data.get("mqSet") or () if isinstance(q, dict)]
    return resources, SUB


NEEDS: dict[int, Callable[[RemotingCommand], Needs]] = {
    **{
        code: lambda r: ([(TOPIC, _topic(r))], PUB)
        for code in (
            R.SEND_MESSAGE,
            R.SEND_MESSAGE_V2,
            R.SEND_BATCH_MESSAGE,
            R.SEND_REPLY_MESSAGE,
            R.SEND_REPLY_MESSAGE_V2,
            R.END_TRANSACTION,
        )
    },
    **{
        code: lambda r: ([(TOPIC, _topic(r)), (GROUP, _group(r))], SUB)
        for code in (R.PULL_MESSAGE, R.LITE_PULL_MESSAGE, R.QUERY_CONSUMER_OFFSET, R.UPDATE_CONSUMER_OFFSET)
    },
    **{
        code: lambda r: ([(GROUP, _group(r))], SUB)
        for code in (R.CONSUMER_SEND_MSG_BACK, R.UNREGISTER_CLIENT, R.GET_CONSUMER_LIST_BY_GROUP)
    },
    R.HEART_BEAT: _heartbeat,
    R.LOCK_BATCH_MQ: _locks,
    R.UNLOCK_BATCH_MQ: _locks,
    R.GET_ROUTEINFO_BY_TOPIC: lambda r: ([(TOPIC, _topic(r))], (PUB, SUB)),
    **{
        code: lambda r: ([(TOPIC, _topic(r))], SUB)
        for code in (
            R.SEARCH_OFFSET_BY_TIMESTAMP,
            R.GET_MAX_OFFSET,
            R.GET_MIN_OFFSET,
            R.GET_EARLIEST_MSG_STORETIME,
            R.QUERY_MESSAGE,
        )
    },
    **{
        code: lambda r: AUTHENTICATION_ONLY
        for code in (
            R.GET_BROKER_CLUSTER_INFO,
            R.GET_ALL_TOPIC_LIST_FROM_NAMESERVER,
            R.GET_TOPICS_BY_CLUSTER,
            R.GET_SYSTEM_TOPIC_LIST_FROM_NS,
            R.GET_KV_CONFIG,
            R.GET_KVLIST_BY_NAMESPACE,
            R.CHECK_CLIENT_CONFIG,
            R.VIEW_MESSAGE_BY_ID,
        )
    },
}


class RemotingAccess:
    """The dispatcher's ``before`` hook while authentication is on."""

    def __init__(self, guard: AccessGuard) -> None:
        self._guard = guard

    def __call__(self, channel: Channel, request: RemotingCommand) -> None:
        fields = request.ext_fields
        if is_anonymous(fields):
            raise RemotingError(
                ResponseCode.NO_PERMISSION, "authentication is required: no AccessKey (set the client's credentials)"
            )
        needs_of = NEEDS.get(request.code)
        needs = needs_of(request) if needs_of is not None else None
        try:
            self._guard.check_signed(
                fields[ACCESS_KEY],
                lambda secret: verify_request(fields, request.body, request.version, secret),
                needs,
                channel.peer_address,
            )
        except (AuthError, AccessDenied) as exc:
            raise RemotingError(ResponseCode.NO_PERMISSION, exc.message) from None
