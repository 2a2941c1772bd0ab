"""services/domain/delivery.py: which stored properties a delivered message shows as user
properties, and the type it reads back as (the proxy's GrpcConverter)."""

from __future__ import annotations

import pytest

from services.domain.delivery import (
    BROKER_PROPERTY_KEYS,
    HIDDEN_PROPERTY_KEYS,
    MessageType,
    delivered_message_type,
    is_internal_property,
    user_properties,
)
from services.domain.format.properties_format import INNER_MULTI_DISPATCH, LITE_TOPIC, RESERVED_PROPERTY_KEYS


def test_every_reserved_key_is_hidden_and_nothing_else_but_the_lite_index_keys():
    stored = {key: "v" for key in RESERVED_PROPERTY_KEYS | {LITE_TOPIC, INNER_MULTI_DISPATCH}}
    stored["color"] = "red"
    assert user_properties(stored) == {"color": "red"}
    assert HIDDEN_PROPERTY_KEYS - RESERVED_PROPERTY_KEYS == {LITE_TOPIC, INNER_MULTI_DISPATCH}


@pytest.mark.parametrize(
    "key",
    [
        "__SHARDINGKEY",  # a FIFO message's group: the clients' tests read it among the properties
        "__transactionId__",  # a transactional message's id
        "CHECK_IMMUNITY_TIME_IN_SECONDS",
        "TRANSACTION_CHECK_TIMES",
        "TRACE_CONTEXT",
        # a user's own keys that merely begin like system ones
        "REAL_NAME",
        "TIMER_LABEL",
        "POP_STAR",
        "DLQ_ORIGIN_NOTE",
        "__CRC32",
    ],
)
def test_keys_outside_the_reserved_set_pass_through(key):
    stored = {"UNIQ_KEY": "ID1", "TAGS": "TagA", key: "value", "color": "red"}
    assert user_properties(stored) == {key: "value", "color": "red"}
    assert not is_internal_property(key)


def test_broker_keys_refused_on_send_are_delivered_but_the_lite_ones():
    shown = {key for key in BROKER_PROPERTY_KEYS if not is_internal_property(key)}
    assert shown == BROKER_PROPERTY_KEYS - {LITE_TOPIC, INNER_MULTI_DISPATCH}
    assert "__SHARDINGKEY" in shown and "__transactionId__" in shown


def test_transaction_type_needs_exactly_true():
    assert delivered_message_type({"TRAN_MSG": "true"}) is MessageType.TRANSACTION
    assert delivered_message_type({"TRAN_MSG": "TRUE"}) is MessageType.NORMAL  # the proxy compares with equals
    assert delivered_message_type({"TRAN_MSG": "TRUE", "__SHARDINGKEY": "g"}) is MessageType.FIFO
