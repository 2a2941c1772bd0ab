"""The requests this broker sends to remoting clients, oneway on their own connection:
NOTIFY_CONSUMER_IDS_CHANGED (a group's members changed) and CHECK_TRANSACTION_STATE (a half
message waits for its producer's decision; ../shared/docs/remoting.md §2.2 "Transactions").

CHECK_TRANSACTION_STATE carries the half as a stored record (``MessageDecoder.encode``) in its
real topic and queue, as RocketMQ's check listener rewrites it; the header names the half's
queue offset (``tranStateTableOffset``) and commit-log offset, which the producer's
END_TRANSACTION sends back."""

from __future__ import annotations

from services.broker.transaction import TransactionCheck
from services.domain.format.commitlog_format import MessageRecord, encode_record
from services.domain.format.commitlog_format import offset_msg_id as record_offset_msg_id
from services.domain.format.properties_format import REAL_QUEUE_ID, UNIQ_KEY
from services.domain.remoting.codes import RequestCode
from services.domain.remoting.command import RemotingCommand
from services.domain.remoting.records import record_host


def members_changed(group: str) -> RemotingCommand:
    return RemotingCommand(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, ext_fields={"consumerGroup": group})


def check_transaction_state(check: TransactionCheck, store_host: tuple[bytes, int] | None) -> RemotingCommand:
    """``store_host``: the door's address the producer is connected to (the record's STOREHOST
    and the offsetMsgId name it, as they name the broker in RocketMQ)."""
    half = check.half
    properties = dict(half.properties)
    properties.setdefault(UNIQ_KEY, check.message_id)
    real_qid = properties.get(REAL_QUEUE_ID, "")
    record = MessageRecord(
        topic=check.topic,
        queue_id=int(real_qid) if real_qid.isdigit() else half.queue_id,
        body=half.body,
        properties=properties,
        flag=half.flag,
        sys_flag=check.sys_flag,
        born_timestamp_ms=half.born_timestamp_ms,
        born_host=record_host(half.born_host),
        store_timestamp_ms=half.store_timestamp_ms,
        store_host=store_host or record_host(half.store_host),
        reconsume_times=half.reconsume_times,
        queue_offset=half.queue_offset,
        phy_offset=half.phy_offset,
    )
    header = {
        "topic": check.topic,
        "tranStateTableOffset": str(half.queue_offset),
        "commitLogOffset": str(half.phy_offset),
        "msgId": check.message_id,
        "transactionId": check.transaction_id,
        "offsetMsgId": record_offset_msg_id(record.store_host, half.phy_offset),
    }
    return RemotingCommand(RequestCode.CHECK_TRANSACTION_STATE, ext_fields=header, body=encode_record(record))
