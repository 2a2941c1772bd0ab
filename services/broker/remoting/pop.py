"""The pop family for 5.x push consumers that let the broker balance (``clientRebalance=false``):
POP_MESSAGE 200050, ACK_MESSAGE 200051, BATCH_ACK_MESSAGE 200151, CHANGE_MESSAGE_INVISIBLETIME
200053, with QUERY_ASSIGNMENT 400 and SET_MESSAGE_REQUEST_MODE 401 (../shared/docs/remoting.md
§2.3 "POP family").

Pops go through the same core as v2 ReceiveMessage (``RoutedConsumer.receive``: every read queue
and the group's retries, filters, long polling up to ``pollTime``). The answer is RocketMQ's: the
records (re-encoded from the store's deliveries, STOREHOST naming this door) and the offset
infos from which the client builds each message's POP_CK (``ckQueueOffset popTime invisibleTime
reviveQid topicType brokerName queueId queueOffset``) and acks with it.

pyrmq's store gives each delivery a receipt handle of its own, which a POP_CK cannot carry: this
door remembers, per (group, topic type, queue id, queue offset, pop time), the handle it stands
for (``PopHandles``, bounded, in memory). An ack or change of invisible time that names no handle
known here (another broker process popped it, this one restarted, or it was forgotten) answers
NO_MESSAGE (208), and the message comes back after its invisible time, as any unacked pop does.
Two deliveries of one pop that would share a POP_CK (a retry and a normal message at the same
queue id and offset) cannot both be acked: the second is released at once for the next pop.

SET_MESSAGE_REQUEST_MODE is kept in this broker's memory (mqadmin sends it to every broker); the
default mode is PULL, where QUERY_ASSIGNMENT allocates the topic's queues over the group's live
clients averagely (RocketMQ's AllocateMessageQueueAveragely), as the client would itself.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

from services.broker.consumer import FilterType, ReceiveRequest
from services.broker.errors import Code
from services.broker.remoting.context import RemotingContext
from services.broker.remoting.dispatch import (
    Dispatcher,
    RemotingError,
    json_body,
    optional_bool,
    remoting_code,
    required,
    required_int,
)
from services.broker.remoting.server import Channel
from services.domain.format.commitlog_format import MessageRecord, encode_record
from services.domain.remoting.codes import RequestCode, ResponseCode
from services.domain.remoting.command import RemotingCommand
from services.domain.remoting.fastjson_codec import fastjson_dumpb
from services.domain.remoting.records import record_host, with_store_host
from services.store.client.model import Delivery

HANDLES_MAX = 200_000
NORMAL, RETRY = "0", "1"
MODES = ("PULL", "POP")
HandleKey = tuple[str, str, int, int, int]  # group, topic type, queue id, queue offset, pop time ms


class PopHandles:
    """POP_CK -> the store's receipt handle (and the message's topic), the newest kept."""

    def __init__(self, capacity: int = HANDLES_MAX) -> None:
        self._lock = threading.Lock()
        self._entries: OrderedDict[HandleKey, tuple[str, str]] = OrderedDict()
        self._capacity = capacity

    def put(self, key: HandleKey, topic: str, handle: str) -> bool:
        """Remember ``handle``; False (nothing kept) if the key is taken already."""
        with self._lock:
            if key in self._entries:
                return False
            self._entries[key] = (topic, handle)
            while len(self._entries) > self._capacity:
                self._entries.popitem(last=False)
            return True

    def take(self, key: HandleKey) -> tuple[str, str] | None:
        with self._lock:
            return self._entries.pop(key, None)


class Pops:
    def __init__(self, context: RemotingContext) -> None:
        self._context = context
        self._handles = PopHandles()
        self._modes: dict[tuple[str, str], str] = {}  # (topic, group) -> PULL / POP

    def register(self, dispatcher: Dispatcher) -> None:
        dispatcher.register(RequestCode.POP_MESSAGE, self.pop)
        dispatcher.register(RequestCode.ACK_MESSAGE, self.ack)
        dispatcher.register(RequestCode.BATCH_ACK_MESSAGE, self.batch_ack)
        dispatcher.register(RequestCode.CHANGE_MESSAGE_INVISIBLETIME, self.change_invisible_time)
        dispatcher.register(RequestCode.QUERY_ASSIGNMENT, self.query_assignment)
        dispatcher.register(RequestCode.SET_MESSAGE_REQUEST_MODE, self.set_request_mode, inline=True)

    # -- POP_MESSAGE ------------------------------------------------------------------------------
    def pop(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        fields = request.ext_fields
        group = required(fields, "consumerGroup")
        topic = required(fields, "topic")
        required_int(fields, "queueId")  # -1 or one queue: every read queue is popped (the core's way)
        max_nums = required_int(fields, "maxMsgNums")
        invisible_ms = required_int(fields, "invisibleTime")
        poll_ms = required_int(fields, "pollTime")
        required_int(fields, "bornTime")
        kind = (fields.get("expType") or "TAG").upper()
        if kind not in ("TAG", "SQL92"):
            raise RemotingError(
                ResponseCode.SYSTEM_ERROR, f"The broker does not support consumer to filter message by {kind}"
            )
        broker_name = self._context.broker_name(channel, fields)
        result = self._context.core.consumer.receive(
            ReceiveRequest(
                group=group,
                topic=topic,
                filter_type=FilterType.SQL if kind == "SQL92" else FilterType.TAG,
                filter_expression=fields.get("exp") or "*",
                batch_size=max_nums,
                invisible_ms=invisible_ms,
                long_polling_ms=poll_ms,
                fifo=optional_bool(fields, "order"),
                client_id=next(iter(channel.client_ids), ""),
                alive=lambda: not channel.closed,
                broker_name=broker_name,
            )
        )
        pop_time = self._context.clock.now_ms()
        kept: list[tuple[str, Delivery]] = []
        released: list[str] = []
        for delivery in result.messages:
            # Each record goes under its own topic (a retry too), so the client's POP_CK says
            # topic type 0 for all of them.
            topic_type = NORMAL
            key = (group, topic_type, delivery.queue_id, delivery.queue_offset, pop_time)
            if self._handles.put(key, delivery.topic, delivery.receipt_handle):
                kept.append((topic_type, delivery))
            else:
                released.append(delivery.receipt_handle)
        if released:
            self._context.core.consumer.undelivered(group, released)
        if not kept:
            return request.response(
                ResponseCode.POLLING_TIMEOUT, "no new message", ext_fields={"popTime": str(pop_time)}
            )
        group_name = self._context.group_core(broker_name).name
        body = with_store_host([_record(d) for _, d in kept], self._context.store_host(group_name))
        return request.response(ResponseCode.SUCCESS, ext_fields=_offset_infos(kept, pop_time, invisible_ms), body=body)

    # -- ACK_MESSAGE / BATCH_ACK_MESSAGE ------------------------------------------------------------
    def ack(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        fields = request.ext_fields
        group = required(fields, "consumerGroup")
        required(fields, "topic")
        queue_id = required_int(fields, "queueId")
        offset = required_int(fields, "offset")
        key = _key(group, required(fields, "extraInfo"), queue_id, offset)
        code, remark = self._ack_one(key)
        return request.response(code, remark)

    def batch_ack(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        """BATCH_ACK_MESSAGE: body ``{"acks": [{consumerGroup, topic, queueId, extraInfo, offset}...]}``
        (a subset of BatchAckMessageRequestBody: one ack per message)."""
        acks = json_body(request).get("acks")
        if not isinstance(acks, list):
            raise RemotingError(ResponseCode.SYSTEM_ERROR, "the batch ack body has no acks list")
        failed = 0
        for entry in acks:
            if not isinstance(entry, dict):
                failed += 1
                continue
            texts = {k: str(v) for k, v in entry.items() if v is not None}
            key = _key(
                required(texts, "consumerGroup"),
                required(texts, "extraInfo"),
                required_int(texts, "queueId"),
                required_int(texts, "offset"),
            )
            failed += self._ack_one(key)[0] != ResponseCode.SUCCESS
        if failed:
            return request.response(
                ResponseCode.NO_MESSAGE, f"{failed} of {len(acks)} acks named no message popped here"
            )
        return request.response(ResponseCode.SUCCESS)

    def _ack_one(self, key: HandleKey) -> tuple[int, str | None]:
        entry = self._handles.take(key)
        if entry is None:
            return (
                ResponseCode.NO_MESSAGE,
                "no message popped here has that POP_CK (forgotten or acked: it returns after its invisible time)",
            )
        topic, handle = entry
        [(code, message)] = self._context.core.consumer.ack(key[0], topic, [handle])
        if code is not Code.OK:
            return remoting_code(code), message
        return ResponseCode.SUCCESS, None

    # -- CHANGE_MESSAGE_INVISIBLETIME -----------------------------------------------------------------
    def change_invisible_time(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        fields = request.ext_fields
        group = required(fields, "consumerGroup")
        required(fields, "topic")
        queue_id = required_int(fields, "queueId")
        offset = required_int(fields, "offset")
        invisible_ms = required_int(fields, "invisibleTime")
        key = _key(group, required(fields, "extraInfo"), queue_id, offset)
        entry = self._handles.take(key)
        if entry is None:
            raise RemotingError(ResponseCode.NO_MESSAGE, "no message popped here has that POP_CK")
        topic, handle = entry
        new_handle = self._context.core.consumer.change_invisible_duration(group, topic, handle, invisible_ms)
        pop_time = self._context.clock.now_ms()
        self._handles.put((group, key[1], queue_id, offset, pop_time), topic, new_handle)
        ext = {"popTime": str(pop_time), "invisibleTime": str(invisible_ms), "reviveQid": "0"}
        return request.response(ResponseCode.SUCCESS, ext_fields=ext)

    # -- QUERY_ASSIGNMENT / SET_MESSAGE_REQUEST_MODE ----------------------------------------------------
    def query_assignment(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        data = json_body(request)
        topic = str(data.get("topic") or "")
        group = str(data.get("consumerGroup") or "")
        client_id = str(data.get("clientId") or "")
        if not topic or not group or not client_id:
            raise RemotingError(
                ResponseCode.SYSTEM_ERROR, "the assignment body needs topic, consumerGroup and clientId"
            )
        route = self._context.core.broker_groups.route(topic)
        queues = [
            {"brokerName": qd.broker_name, "queueId": queue_id, "topic": topic}
            for qd in route.queue_datas
            for queue_id in range(qd.read_queue_nums)
        ]
        mode = self._modes.get((topic, group), "PULL")
        if mode == "POP":  # every client pops every broker group's queues (popShareQueueNum 0)
            mine = [{"brokerName": qd.broker_name, "queueId": -1, "topic": topic} for qd in route.queue_datas]
        elif str(data.get("messageModel") or "CLUSTERING") == "BROADCASTING":
            mine = queues
        else:
            clients = sorted({c.client_id for c in self._context.clients.consumers(group)} | {client_id})
            mine = allocate_averagely(queues, clients, client_id)
        body = {"messageQueueAssignments": [{"messageQueue": q, "mode": mode, "attachments": {}} for q in mine]}
        return request.response(ResponseCode.SUCCESS, body=fastjson_dumpb(body))

    def set_request_mode(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        data = json_body(request)
        topic, group = str(data.get("topic") or ""), str(data.get("consumerGroup") or "")
        mode = str(data.get("mode") or "")
        if not topic or not group or mode not in MODES:
            raise RemotingError(ResponseCode.SYSTEM_ERROR, "the body needs topic, consumerGroup and mode PULL or POP")
        self._modes[(topic, group)] = mode
        return request.response(ResponseCode.SUCCESS)


def allocate_averagely(queues: list[Any], clients: list[str], client_id: str) -> list[Any]:
    """RocketMQ's AllocateMessageQueueAveragely: ``client_id``'s share of ``queues`` among the
    sorted ``clients``."""
    index, count, total = clients.index(client_id), len(clients), len(queues)
    mod = total % count
    if total <= count:
        size = 1
    else:
        size = total // count + (1 if mod > 0 and index < mod else 0)
    start = index * size if mod > 0 and index < mod else index * size + mod
    return queues[start : start + max(0, min(size, total - start))]


def _key(group: str, extra_info: str, queue_id: int, offset: int) -> HandleKey:
    """The handle's key from a POP_CK (``ckQueueOffset popTime invisibleTime reviveQid topicType
    brokerName queueId queueOffset``) and the request's queue id and offset."""
    parts = extra_info.split(" ")
    if len(parts) < 7 or not parts[1].lstrip("-").isdigit():
        raise RemotingError(ResponseCode.SYSTEM_ERROR, f"extraInfo is not a POP_CK: {extra_info!r}")
    topic_type = RETRY if parts[4] in ("1", "2") else NORMAL
    return group, topic_type, queue_id, offset, int(parts[1])


def _offset_infos(kept: list[tuple[str, Delivery]], pop_time: int, invisible_ms: int) -> dict[str, str]:
    """startOffsetInfo / msgOffsetInfo (ExtraInfoUtil's forms) and the times of the pop."""
    by_queue: dict[tuple[str, int], list[int]] = {}
    for topic_type, delivery in kept:
        by_queue.setdefault((topic_type, delivery.queue_id), []).append(delivery.queue_offset)
    start = ";".join(f"{t} {q} {min(offsets)}" for (t, q), offsets in by_queue.items())
    offsets = ";".join(f"{t} {q} {','.join(map(str, o))}" for (t, q), o in by_queue.items())
    return {
        "popTime": str(pop_time),
        "invisibleTime": str(invisible_ms),
        "reviveQid": "0",
        "restNum": "0",
        "startOffsetInfo": start,
        "msgOffsetInfo": offsets,
        "orderCountInfo": "",
    }


def _record(delivery: Delivery) -> bytes:
    phy_offset = int(delivery.offset_msg_id[-16:], 16) if len(delivery.offset_msg_id) >= 16 else 0
    return encode_record(
        MessageRecord(
            topic=delivery.topic,
            queue_id=delivery.queue_id,
            body=delivery.body,
            properties=delivery.properties,
            sys_flag=delivery.sys_flag,  # its host bits follow the hosts (encode_record)
            born_timestamp_ms=delivery.born_timestamp_ms,
            born_host=record_host(delivery.born_host),
            store_timestamp_ms=delivery.store_timestamp_ms,
            reconsume_times=max(delivery.delivery_attempt - 1, 0),
            queue_offset=delivery.queue_offset,
            phy_offset=phy_offset,
        )
    )
