"""The unary methods of ``pyrmq.store.v1.Store`` that ``StoreClient`` calls, each with its
request and response types: a call names one of these (``StoreClient._call``), so mypy checks the
request it is given and the response it answers, and a misspelt method cannot pass. The
transports (transport.py) still dispatch on ``Unary.name``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

from google.protobuf.message import Message
from pyrmq.store.v1 import store_pb2 as pb

RequestT = TypeVar("RequestT", bound=Message)
ResponseT = TypeVar("ResponseT", bound=Message)


@dataclass(frozen=True, slots=True)
class Unary(Generic[RequestT, ResponseT]):
    name: str  # the method of pyrmq.store.v1.Store
    request: type[RequestT]
    response: type[ResponseT]


ACK_MESSAGES = Unary("AckMessages", pb.AckMessagesRequest, pb.AckMessagesResponse)
CHANGE_INVISIBLE_DURATION = Unary(
    "ChangeInvisibleDuration", pb.ChangeInvisibleDurationRequest, pb.ChangeInvisibleDurationResponse
)
COMMIT_CONSUMER_OFFSET = Unary("CommitConsumerOffset", pb.CommitConsumerOffsetRequest, pb.CommitConsumerOffsetResponse)
CREATE_OR_UPDATE_GROUP = Unary("CreateOrUpdateGroup", pb.CreateOrUpdateGroupRequest, pb.SubscriptionGroupConfig)
CREATE_OR_UPDATE_TOPIC = Unary("CreateOrUpdateTopic", pb.CreateOrUpdateTopicRequest, pb.TopicConfig)
DELETE_GROUP = Unary("DeleteGroup", pb.DeleteGroupRequest, pb.DeleteGroupResponse)
DELETE_TOPIC = Unary("DeleteTopic", pb.DeleteTopicRequest, pb.DeleteTopicResponse)
DELETE_USER = Unary("DeleteUser", pb.DeleteUserRequest, pb.DeleteUserResponse)
FORWARD_TO_DEAD_LETTER_QUEUE = Unary(
    "ForwardToDeadLetterQueue", pb.ForwardToDeadLetterQueueRequest, pb.ForwardToDeadLetterQueueResponse
)
GET_AUTH_CONFIG = Unary("GetAuthConfig", pb.GetAuthConfigRequest, pb.AuthConfig)
GET_CONSUMER_STATS = Unary("GetConsumerStats", pb.GetConsumerStatsRequest, pb.GetConsumerStatsResponse)
GET_DELAY_OFFSET = Unary("GetDelayOffset", pb.GetDelayOffsetRequest, pb.GetDelayOffsetResponse)
GET_GROUP = Unary("GetGroup", pb.GetGroupRequest, pb.SubscriptionGroupConfig)
GET_GROUP_OFFSETS = Unary("GetGroupOffsets", pb.GetGroupOffsetsRequest, pb.GetGroupOffsetsResponse)
GET_MESSAGES = Unary("GetMessages", pb.GetMessagesRequest, pb.GetMessagesResponse)
GET_OFFSET_BY_TIMESTAMP = Unary("GetOffsetByTimestamp", pb.GetOffsetByTimestampRequest, pb.GetOffsetByTimestampResponse)
GET_QUEUE_OFFSETS = Unary("GetQueueOffsets", pb.GetQueueOffsetsRequest, pb.GetQueueOffsetsResponse)
GET_RAW_MESSAGES = Unary("GetRawMessages", pb.GetMessagesRequest, pb.GetRawMessagesResponse)
GET_STATS = Unary("GetStats", pb.GetStatsRequest, pb.StoreStats)
GET_TOPIC = Unary("GetTopic", pb.GetTopicRequest, pb.TopicConfig)
LIST_GROUPS = Unary("ListGroups", pb.ListGroupsRequest, pb.ListGroupsResponse)
LIST_LITE_TOPICS = Unary("ListLiteTopics", pb.ListLiteTopicsRequest, pb.ListLiteTopicsResponse)
LIST_TOPICS = Unary("ListTopics", pb.ListTopicsRequest, pb.ListTopicsResponse)
LOOK_MESSAGE_BY_OFFSET_MSG_ID = Unary("LookMessageByOffsetMsgId", pb.LookMessageByOffsetMsgIdRequest, pb.Message)
LOOK_MESSAGE_BY_PHY_OFFSET = Unary("LookMessageByPhyOffset", pb.LookMessageByPhyOffsetRequest, pb.Message)
LOOK_RAW_MESSAGES = Unary("LookRawMessages", pb.LookRawMessagesRequest, pb.LookRawMessagesResponse)
POP_LITE_MESSAGES = Unary("PopLiteMessages", pb.PopLiteMessagesRequest, pb.PopMessagesResponse)
POP_MESSAGES = Unary("PopMessages", pb.PopMessagesRequest, pb.PopMessagesResponse)
PUT_ACL = Unary("PutAcl", pb.PutAclRequest, pb.PutAclResponse)
PUT_USER = Unary("PutUser", pb.PutUserRequest, pb.PutUserResponse)
QUERY_CONSUMER_OFFSET = Unary("QueryConsumerOffset", pb.QueryConsumerOffsetRequest, pb.QueryConsumerOffsetResponse)
QUERY_MESSAGES_BY_KEY = Unary("QueryMessagesByKey", pb.QueryMessagesByKeyRequest, pb.QueryMessagesByKeyResponse)
UPDATE_DELAY_OFFSET = Unary("UpdateDelayOffset", pb.UpdateDelayOffsetRequest, pb.UpdateDelayOffsetResponse)


def _check_against_the_service() -> None:
    """Each method above exists in the service with these request and response types (pair
    assertions against the generated descriptor, once at import)."""
    methods = pb.DESCRIPTOR.services_by_name["Store"].methods_by_name
    for value in globals().values():
        if isinstance(value, Unary):
            method = methods[value.name]
            assert not method.client_streaming and not method.server_streaming, value.name
            assert method.input_type.full_name == value.request.DESCRIPTOR.full_name, value.name
            assert method.output_type.full_name == value.response.DESCRIPTOR.full_name, value.name


_check_against_the_service()
