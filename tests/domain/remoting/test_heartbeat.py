"""HEART_BEAT 34's HeartbeatData (../shared/docs/remoting.md §2.3) as the Java client, ali-ons
(lib/mq_client.js _prepareHeartbeatData, lib/consumer/mq_push_consumer.js buildSubscriptionData)
and the C++ client (src/protocol/HeartbeatData.h, SubscriptionData::toJson) write it."""

from __future__ import annotations

import pytest

from services.domain.remoting.fastjson_codec import BodyError
from services.domain.remoting.heartbeat import (
    ConsumerData,
    HeartbeatData,
    Subscription,
    encode_heartbeat,
    parse_heartbeat,
)

# §2.3's example, compact.
JAVA_BODY = (
    '{"clientID":"10.0.0.5@1234#9876","consumerDataSet":[{"consumeFromWhere":"CONSUME_FROM_LAST_OFFSET",'
    '"consumeType":"CONSUME_PASSIVELY","groupName":"G","messageModel":"CLUSTERING",'
    '"subscriptionDataSet":[{"classFilterMode":false,"codeSet":[],"expressionType":"TAG","subString":"*",'
    '"subVersion":1732800000000,"tagsSet":[],"topic":"T"}],"unitMode":false}],'
    '"heartbeatFingerprint":0,"producerDataSet":[{"groupName":"P"},{"groupName":"CLIENT_INNER_PRODUCER"}],"withoutSub":false}'
)
JAVA = HeartbeatData(
    client_id="10.0.0.5@1234#9876",
    producer_groups=("P", "CLIENT_INNER_PRODUCER"),
    consumers=(
        ConsumerData(
            group="G",
            consume_type="CONSUME_PASSIVELY",
            message_model="CLUSTERING",
            consume_from_where="CONSUME_FROM_LAST_OFFSET",
            subscriptions=(Subscription("T", "*", "TAG", (), (), 1732800000000, False),),
            unit_mode=False,
        ),
    ),
)


def test_java_client_body():
    assert parse_heartbeat(JAVA_BODY.encode()) == JAVA


def test_encode_writes_the_java_clients_form():
    assert encode_heartbeat(JAVA) == JAVA_BODY.encode()
    assert parse_heartbeat(encode_heartbeat(JAVA)) == JAVA


def test_ali_ons_body():
    body = (
        '{"clientID":"30.1.2.3@8721","consumerDataSet":[{"groupName":"GID_A","consumeType":"CONSUME_PASSIVELY",'
        '"messageModel":"BROADCASTING","consumeFromWhere":"CONSUME_FROM_FIRST_OFFSET","subscriptionDataSet":['
        '{"topic":"T1","subString":"TagA || TagB","classFilterMode":false,"tagsSet":["TagA","TagB"],'
        '"codeSet":[2598919,2598920],"subVersion":1700000000123},'
        '{"topic":"T2","subString":"a > 1","classFilterMode":false,"tagsSet":[],"codeSet":[],"subVersion":1700000000124,'
        '"expressionType":"SQL92"}],"unitMode":false}],"producerDataSet":[]}'
    )
    parsed = parse_heartbeat(body)
    assert parsed.client_id == "30.1.2.3@8721" and parsed.producer_groups == ()
    assert parsed.heartbeat_fingerprint == 0 and parsed.without_sub is False
    (consumer,) = parsed.consumers
    assert (consumer.group, consumer.message_model, consumer.consume_from_where) == (
        "GID_A",
        "BROADCASTING",
        "CONSUME_FROM_FIRST_OFFSET",
    )
    tag, sql = consumer.subscriptions
    assert tag == Subscription("T1", "TagA || TagB", "TAG", ("TagA", "TagB"), (2598919, 2598920), 1700000000123)
    assert sql == Subscription("T2", "a > 1", "SQL92", (), (), 1700000000124)


def test_cpp_client_body():
    # jsoncpp FastWriter: sorted keys, subVersion as a string, empty arrays and unitMode left
    # out, a trailing newline; 1.x codeSet holds atoi(tag), not hash codes.
    body = (
        b'{"clientID":"10.0.0.9@4242","consumerDataSet":[{"consumeFromWhere":"CONSUME_FROM_LAST_OFFSET",'
        b'"consumeType":"CONSUME_PASSIVELY","groupName":"G","messageModel":"CLUSTERING","subscriptionDataSet":'
        b'[{"codeSet":[0],"subString":"TagA","subVersion":"1732800000000","tagsSet":["TagA"],"topic":"T"},'
        b'{"subString":"*","subVersion":"1732800000001","topic":"%RETRY%G"}]}],'
        b'"producerDataSet":[{"groupName":"P"}]}\n'
    )
    parsed = parse_heartbeat(body)
    assert parsed.producer_groups == ("P",)
    (consumer,) = parsed.consumers
    assert consumer.unit_mode is False
    assert consumer.subscriptions == (
        Subscription("T", "TagA", "TAG", ("TagA",), (0,), 1732800000000),
        Subscription("%RETRY%G", "*", "TAG", (), (), 1732800000001),
    )


def test_cpp_producer_only_body():
    body = b'{"clientID":"10.0.0.9@4242","producerDataSet":[{"groupName":"P"}]}\n'
    assert parse_heartbeat(body) == HeartbeatData("10.0.0.9@4242", ("P",), ())


def test_missing_and_null_keys_take_the_java_clients_defaults():
    body = (
        '{"clientID":"c","consumerDataSet":[{"groupName":"G","subscriptionDataSet":[{"topic":"T","subString":null}]}]}'
    )
    (consumer,) = parse_heartbeat(body).consumers
    assert consumer == ConsumerData(
        "G", "CONSUME_PASSIVELY", "CLUSTERING", "CONSUME_FROM_LAST_OFFSET", (Subscription("T"),)
    )
    assert consumer.subscriptions[0].sub_string == "*" and consumer.subscriptions[0].sub_version == 0


def test_heartbeat_v2_keys():
    body = '{"clientID":"c","heartbeatFingerprint":-123,"withoutSub":true,"consumerDataSet":[{"groupName":"G"}]}'
    parsed = parse_heartbeat(body)
    assert parsed.heartbeat_fingerprint == -123 and parsed.without_sub is True
    assert parsed.consumers[0].subscriptions == ()


@pytest.mark.parametrize(
    "body,words",
    [
        ("not json", "expected a JSON value"),
        ("[]", "heartbeat"),
        ('{"producerDataSet":[]}', "without a clientID"),
        ('{"clientID":""}', "without a clientID"),
        ('{"clientID":7}', "clientID"),
        ('{"clientID":"c","consumerDataSet":[{"consumeType":"CONSUME_PASSIVELY"}]}', "without a groupName"),
        ('{"clientID":"c","consumerDataSet":[{"groupName":"G","subscriptionDataSet":[{"subString":"*"}]}]}', "topic"),
        (
            '{"clientID":"c","consumerDataSet":[{"groupName":"G","subscriptionDataSet":[{"topic":"T","subVersion":"x"}]}]}',
            "subVersion",
        ),
        ('{"clientID":"c","consumerDataSet":{"groupName":"G"}}', "consumerDataSet"),
        (
            '{"clientID":"c","consumerDataSet":[{"groupName":"G","subscriptionDataSet":[{"topic":"T","tagsSet":[1]}]}]}',
            "tagsSet",
        ),
    ],
)
def test_bad_bodies_raise_body_error_naming_the_field(body, words):
    with pytest.raises(BodyError, match=words):
        parse_heartbeat(body)


def test_cpp_client_2_body_with_enum_ordinals():
    # As rocketmq-client-python 0.5.0rc2's bundled C++ client sent it to a capture listener
    # (tests/remoting/golden/cpp.json, heart_beat): enums as Java ordinals, subVersion a string.
    body = (
        b'{"clientID":"20414-127.0.0.1@DEFAULT","consumerDataSet":[{"consumeFromWhere":0,"consumeType":1,'
        b'"groupName":"PeerFrameGroup","messageModel":1,"subscriptionDataSet":[{"subString":"*",'
        b'"subVersion":"1795919255526","topic":"%RETRY%PeerFrameGroup"},{"subString":"*",'
        b'"subVersion":"1795919255526","topic":"PeerFrameTopic"}]}]}\n'
    )
    (consumer,) = parse_heartbeat(body).consumers
    assert (consumer.consume_type, consumer.message_model, consumer.consume_from_where) == (
        "CONSUME_PASSIVELY",
        "CLUSTERING",
        "CONSUME_FROM_LAST_OFFSET",
    )
    assert [s.topic for s in consumer.subscriptions] == ["%RETRY%PeerFrameGroup", "PeerFrameTopic"]
    assert {s.sub_version for s in consumer.subscriptions} == {1795919255526}


@pytest.mark.parametrize(
    "key,ordinal,name",
    [
        ("consumeType", 0, "CONSUME_ACTIVELY"),
        ("consumeType", 2, "CONSUME_POP"),
        ("messageModel", 0, "BROADCASTING"),
        ("consumeFromWhere", 4, "CONSUME_FROM_FIRST_OFFSET"),
        ("consumeFromWhere", 5, "CONSUME_FROM_TIMESTAMP"),
    ],
)
def test_enum_ordinals_are_the_java_enums(key, ordinal, name):
    body = f'{{"clientID":"c","consumerDataSet":[{{"groupName":"G","{key}":{ordinal}}}]}}'
    consumer = parse_heartbeat(body).consumers[0]
    attribute = {
        "consumeType": "consume_type",
        "messageModel": "message_model",
        "consumeFromWhere": "consume_from_where",
    }
    assert getattr(consumer, attribute[key]) == name


@pytest.mark.parametrize("ordinal", [-1, 2, 99])
def test_an_enum_ordinal_out_of_range_is_refused(ordinal):
    with pytest.raises(BodyError, match="messageModel: ordinal"):
        parse_heartbeat(f'{{"clientID":"c","consumerDataSet":[{{"groupName":"G","messageModel":{ordinal}}}]}}')
