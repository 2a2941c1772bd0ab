"""Store metadata under <store_root>/config: fastjson dialect, the four files, fallback, names."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from services.domain.names import (
    GROUP_NAME_LENGTH_MAX,
    SCHEDULE_TOPIC,
    TIMER_TOPIC,
    TRANS_HALF_TOPIC,
)
from services.domain.retry_policy import EXPONENTIAL, CustomizedRetryPolicy, ExponentialRetryPolicy, GroupRetryPolicy
from services.runtime.clock import ManualClock
from services.store.errors import MetadataFileError
from services.store.metadata.config_files import SubscriptionGroupConfig, TopicConfig, write_atomically
from services.store.metadata.consumer_offsets import ConsumerOffsetManager, DelayOffsetManager
from services.store.metadata.fastjson import loads
from services.store.metadata.topic_config import SubscriptionGroupManager, TopicConfigManager
from tests.support.metadata_samples import CONSUMER_OFFSET_48, DELAY_OFFSET_48, DELAY_OFFSET_48_COMPACT

T0 = 1_700_000_000_000

# -- samples in fastjson 1.2.83 pretty style (the offset files: tests/support/metadata_samples.py) --

TOPICS_4X = """{
\t"dataVersion":{
\t\t"counter":2,
\t\t"timestamp":1600000000000
\t},
\t"topicConfigTable":{
\t\t"TopicTest":{
\t\t\t"order":false,
\t\t\t"perm":6,
\t\t\t"readQueueNums":4,
\t\t\t"topicFilterType":"SINGLE_TAG",
\t\t\t"topicName":"TopicTest",
\t\t\t"topicSysFlag":0,
\t\t\t"writeQueueNums":4
\t\t}
\t}
}"""

SUBSCRIPTION_GROUP_4X = """{
\t"dataVersion":{
\t\t"counter":1,
\t\t"timestamp":1600000000000
\t},
\t"subscriptionGroupTable":{
\t\t"please_rename_unique_group_name":{
\t\t\t"brokerId":0,
\t\t\t"consumeBroadcastEnable":true,
\t\t\t"consumeEnable":true,
\t\t\t"consumeFromMinEnable":true,
\t\t\t"consumeMessageOrderly":false,
\t\t\t"groupName":"please_rename_unique_group_name",
\t\t\t"groupSysFlag":0,
\t\t\t"notifyConsumerIdsChangedEnable":true,
\t\t\t"retryMaxTimes":16,
\t\t\t"retryQueueNums":1,
\t\t\t"whichBrokerWhenConsumeSlowly":1
\t\t}
\t}
}"""

# 5.x files, entries in the order RocketMQ's ConcurrentHashMaps iterate them: loading and
# re-encoding must give these bytes back.
TOPICS_5X = """{
\t"dataVersion":{
\t\t"counter":7,
\t\t"stateVersion":0,
\t\t"timestamp":1695000000000
\t},
\t"topicConfigTable":{
\t\t"SCHEDULE_TOPIC_XXXX":{
\t\t\t"attributes":{},
\t\t\t"order":false,
\t\t\t"perm":6,
\t\t\t"readQueueNums":18,
\t\t\t"topicFilterType":"SINGLE_TAG",
\t\t\t"topicName":"SCHEDULE_TOPIC_XXXX",
\t\t\t"topicSysFlag":0,
\t\t\t"writeQueueNums":18
\t\t},
\t\t"rmq_sys_wheel_timer":{
\t\t\t"attributes":{},
\t\t\t"order":false,
\t\t\t"perm":6,
\t\t\t"readQueueNums":1,
\t\t\t"topicFilterType":"SINGLE_TAG",
\t\t\t"topicName":"rmq_sys_wheel_timer",
\t\t\t"topicSysFlag":0,
\t\t\t"writeQueueNums":1
\t\t},
\t\t"FifoTopic":{
\t\t\t"attributes":{
\t\t\t\t"message.type":"FIFO"
\t\t\t},
\t\t\t"order":false,
\t\t\t"perm":6,
\t\t\t"readQueueNums":8,
\t\t\t"topicFilterType":"SINGLE_TAG",
\t\t\t"topicName":"FifoTopic",
\t\t\t"topicSysFlag":0,
\t\t\t"writeQueueNums":8
\t\t},
\t\t"%RETRY%GID_order":{
\t\t\t"attributes":{},
\t\t\t"order":false,
\t\t\t"perm":6,
\t\t\t"readQueueNums":1,
\t\t\t"topicFilterType":"SINGLE_TAG",
\t\t\t"topicName":"%RETRY%GID_order",
\t\t\t"topicSysFlag":0,
\t\t\t"writeQueueNums":1
\t\t},
\t\t"TBW102":{
\t\t\t"attributes":{},
\t\t\t"order":false,
\t\t\t"perm":7,
\t\t\t"readQueueNums":8,
\t\t\t"topicFilterType":"SINGLE_TAG",
\t\t\t"topicName":"TBW102",
\t\t\t"topicSysFlag":0,
\t\t\t"writeQueueNums":8
\t\t}
\t}
}"""

SUBSCRIPTION_GROUP_5X = """{
\t"dataVersion":{
\t\t"counter":3,
\t\t"stateVersion":0,
\t\t"timestamp":1695000000000
\t},
\t"forbiddenTable":{
\t\t"GID_exp":{
\t\t\t"FifoTopic":4
\t\t}
\t},
\t"subscriptionGroupTable":{
\t\t"GID_exp":{
\t\t\t"attributes":{},
\t\t\t"brokerId":0,
\t\t\t"consumeBroadcastEnable":true,
\t\t\t"consumeEnable":true,
\t\t\t"consumeFromMinEnable":true,
\t\t\t"consumeMessageOrderly":false,
\t\t\t"consumeTimeoutMinute":15,
\t\t\t"groupName":"GID_exp",
\t\t\t"groupRetryPolicy":{
\t\t\t\t"exponentialRetryPolicy":{
\t\t\t\t\t"initial":5000,
\t\t\t\t\t"max":7200000,
\t\t\t\t\t"multiplier":2
\t\t\t\t},
\t\t\t\t"type":"EXPONENTIAL"
\t\t\t},
\t\t\t"groupSysFlag":0,
\t\t\t"notifyConsumerIdsChangedEnable":true,
\t\t\t"retryMaxTimes":3,
\t\t\t"retryQueueNums":1,
\t\t\t"subscriptionDataSet":[{
\t\t\t\t"expression":"*",
\t\t\t\t"expressionType":"TAG",
\t\t\t\t"topic":"FifoTopic",
\t\t\t\t"version":0
\t\t\t}],
\t\t\t"whichBrokerWhenConsumeSlowly":1
\t\t},
\t\t"CID_RMQ_SYS_TRANS":{
\t\t\t"attributes":{},
\t\t\t"brokerId":0,
\t\t\t"consumeBroadcastEnable":true,
\t\t\t"consumeEnable":true,
\t\t\t"consumeFromMinEnable":true,
\t\t\t"consumeMessageOrderly":false,
\t\t\t"consumeTimeoutMinute":15,
\t\t\t"groupName":"CID_RMQ_SYS_TRANS",
\t\t\t"groupRetryPolicy":{
\t\t\t\t"type":"CUSTOMIZED"
\t\t\t},
\t\t\t"groupSysFlag":0,
\t\t\t"notifyConsumerIdsChangedEnable":true,
\t\t\t"retryMaxTimes":16,
\t\t\t"retryQueueNums":1,
\t\t\t"whichBrokerWhenConsumeSlowly":1
\t\t},
\t\t"GID_order":{
\t\t\t"attributes":{},
\t\t\t"brokerId":0,
\t\t\t"consumeBroadcastEnable":true,
\t\t\t"consumeEnable":true,
\t\t\t"consumeFromMinEnable":true,
\t\t\t"consumeMessageOrderly":true,
\t\t\t"consumeTimeoutMinute":15,
\t\t\t"groupName":"GID_order",
\t\t\t"groupRetryPolicy":{
\t\t\t\t"customizedRetryPolicy":{
\t\t\t\t\t"next":[1000,5000,10000]
\t\t\t\t},
\t\t\t\t"type":"CUSTOMIZED"
\t\t\t},
\t\t\t"groupSysFlag":0,
\t\t\t"notifyConsumerIdsChangedEnable":true,
\t\t\t"retryMaxTimes":16,
\t\t\t"retryQueueNums":1,
\t\t\t"whichBrokerWhenConsumeSlowly":1
\t\t}
\t}
}"""

CONSUMER_OFFSET_5X = """{
\t"dataVersion":{
\t\t"counter":12,
\t\t"stateVersion":0,
\t\t"timestamp":1695000000000
\t},
\t"groupTopicMap":{
\t\t"CID_RMQ_SYS_TRANS":["RMQ_SYS_TRANS_HALF_TOPIC"],
\t\t"GID_order":["%RETRY%GID_order","FifoTopic","TopicTest"]
\t},
\t"offsetTable":{
\t\t"%RETRY%GID_order@GID_order":{0:0
\t\t},
\t\t"FifoTopic@GID_order":{0:10,1:11,2:12
\t\t},
\t\t"TopicTest@GID_order":{0:6,1:3,2:3,3:2
\t\t},
\t\t"RMQ_SYS_TRANS_HALF_TOPIC@CID_RMQ_SYS_TRANS":{0:42
\t\t}
\t}
}"""


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(T0)


def config_dir(tmp_path: Path) -> Path:
    return tmp_path / "store" / "config"


# -- fastjson reader --------------------------------------------------------------------------


# -- fastjson writer --------------------------------------------------------------------------


# -- topics.json ----------------------------------------------------------------------------


def test_topics_file_snapshot_and_data_version(tmp_path: Path, clock: ManualClock) -> None:
    manager = TopicConfigManager(config_dir(tmp_path), clock)
    manager.load()
    clock.advance_ms(5)
    manager.create_or_update(TopicConfig("TopicA", read_queue_nums=2, write_queue_nums=2))
    assert manager.path.read_text() == (
        "{\n"
        '\t"dataVersion":{\n\t\t"counter":1,\n\t\t"stateVersion":0,\n\t\t"timestamp":1700000000005\n\t},\n'
        '\t"topicConfigTable":{\n'
        '\t\t"TopicA":{\n'
        '\t\t\t"attributes":{},\n'
        '\t\t\t"order":false,\n'
        '\t\t\t"perm":6,\n'
        '\t\t\t"readQueueNums":2,\n'
        '\t\t\t"topicFilterType":"SINGLE_TAG",\n'
        '\t\t\t"topicName":"TopicA",\n'
        '\t\t\t"topicSysFlag":0,\n'
        '\t\t\t"writeQueueNums":2\n'
        "\t\t}\n"
        "\t}\n"
        "}"
    )
    clock.advance_ms(10)
    manager.create_or_update(TopicConfig("TopicA", read_queue_nums=2, write_queue_nums=2))
    assert manager.data_version.counter == 1  # identical config: no change
    manager.create_or_update(TopicConfig("TopicA", read_queue_nums=4, write_queue_nums=4))
    assert (manager.data_version.counter, manager.data_version.timestamp_ms) == (2, T0 + 15)
    assert manager.delete("TopicA") is True
    assert manager.delete("TopicA") is False
    assert manager.data_version.counter == 3
    assert loads(manager.path.read_text())["topicConfigTable"] == {}


def test_topics_round_trip_and_copies(tmp_path: Path, clock: ManualClock) -> None:
    manager = TopicConfigManager(config_dir(tmp_path), clock)
    manager.load()
    configs = [
        TopicConfig("TopicA"),
        TopicConfig("%DLQ%g", 1, 1, perm=2, order=True),
        TopicConfig(
            SCHEDULE_TOPIC, 18, 18, topic_sys_flag=3, topic_filter_type="MULTI_TAG", attributes={"k": "v", "a": "b"}
        ),
    ]
    for config in configs:
        assert manager.create_or_update(config) == config
    fetched = manager.get("TopicA")
    assert fetched is not None
    fetched.read_queue_nums = 99  # a copy: the table is unchanged
    assert manager.get("TopicA") == TopicConfig("TopicA")
    reloaded = TopicConfigManager(config_dir(tmp_path), clock)
    reloaded.load()
    assert sorted(reloaded.list(), key=lambda c: c.topic_name) == sorted(configs, key=lambda c: c.topic_name)
    assert reloaded.data_version.counter == 3
    assert reloaded.encode() == manager.path.read_text()
    assert reloaded.get("missing") is None


@pytest.mark.parametrize(
    "config",
    [
        TopicConfig("bad topic"),
        TopicConfig(""),
        TopicConfig("t", read_queue_nums=-1),
        TopicConfig("t", perm=16),
        TopicConfig("t", topic_filter_type="TAG"),
        TopicConfig("x" * 128),
    ],
)
def test_topic_manager_rejects_invalid_configs(tmp_path: Path, clock: ManualClock, config: TopicConfig) -> None:
    manager = TopicConfigManager(config_dir(tmp_path), clock)
    with pytest.raises(ValueError):
        manager.create_or_update(config)
    assert not manager.path.exists()


def test_topics_reads_a_4x_file(tmp_path: Path, clock: ManualClock) -> None:
    config_dir(tmp_path).mkdir(parents=True)
    (config_dir(tmp_path) / "topics.json").write_text(TOPICS_4X)
    manager = TopicConfigManager(config_dir(tmp_path), clock)
    manager.load()
    assert manager.list() == [TopicConfig("TopicTest", 4, 4)]
    version = manager.data_version
    assert (version.counter, version.state_version, version.timestamp_ms) == (2, 0, 1600000000000)


def test_topics_5x_file_reencodes_byte_for_byte(tmp_path: Path, clock: ManualClock) -> None:
    config_dir(tmp_path).mkdir(parents=True)
    (config_dir(tmp_path) / "topics.json").write_text(TOPICS_5X)
    manager = TopicConfigManager(config_dir(tmp_path), clock)
    manager.load()
    assert [c.topic_name for c in manager.list()] == [
        SCHEDULE_TOPIC,
        TIMER_TOPIC,
        "FifoTopic",
        "%RETRY%GID_order",
        "TBW102",
    ]
    assert manager.get("TBW102") == TopicConfig("TBW102", 8, 8, perm=7)
    assert manager.encode() == TOPICS_5X
    manager.persist()
    assert manager.path.read_text() == TOPICS_5X
    assert (config_dir(tmp_path) / "topics.json.bak").read_text() == TOPICS_5X


def test_tables_are_written_in_java_map_order(tmp_path: Path, clock: ManualClock) -> None:
    java_order = [SCHEDULE_TOPIC, TIMER_TOPIC, "FifoTopic", "%RETRY%GID_order", "TBW102"]
    manager = TopicConfigManager(config_dir(tmp_path), clock)
    for name in sorted(java_order):
        manager.create_or_update(TopicConfig(name))
    assert list(loads(manager.path.read_text())["topicConfigTable"]) == java_order
    offsets = ConsumerOffsetManager(config_dir(tmp_path), clock)
    for topic in ["TopicTest", "FifoTopic", "%RETRY%GID_order"]:
        offsets.commit_offset("GID_order", topic, 2, 1)
        offsets.commit_offset("GID_order", topic, 0, 1)
    offsets.persist()
    document = loads(offsets.path.read_text())
    assert document["groupTopicMap"] == {"GID_order": ["%RETRY%GID_order", "FifoTopic", "TopicTest"]}
    assert list(document["offsetTable"]) == ["%RETRY%GID_order@GID_order", "FifoTopic@GID_order", "TopicTest@GID_order"]
    assert all(list(queues) == [0, 2] for queues in document["offsetTable"].values())


def test_message_type_attribute_round_trip(tmp_path: Path, clock: ManualClock) -> None:
    config = TopicConfig("OrderTopic")
    assert config.message_type == "NORMAL"
    config.message_type = "FIFO"
    assert config.attributes == {"message.type": "FIFO"}
    with pytest.raises(ValueError):
        config.message_type = "UNSPECIFIED"
    manager = TopicConfigManager(config_dir(tmp_path), clock)
    manager.create_or_update(config)
    assert '"message.type":"FIFO"' in manager.path.read_text()
    reloaded = TopicConfigManager(config_dir(tmp_path), clock)
    reloaded.load()
    stored = reloaded.get("OrderTopic")
    assert stored is not None and stored.message_type == "FIFO"
    assert TopicConfig("t", attributes={"+message.type": "DELAY"}).message_type == "DELAY"
    legacy = TopicConfig("t", attributes={"+message.type": "DELAY"})
    legacy.message_type = "TRANSACTION"
    assert legacy.attributes == {"message.type": "TRANSACTION"}
    assert TopicConfig("t", attributes={"message.type": "bogus"}).message_type == "NORMAL"


# -- subscriptionGroup.json -------------------------------------------------------------------


def test_subscription_groups_round_trip(tmp_path: Path, clock: ManualClock) -> None:
    manager = SubscriptionGroupManager(config_dir(tmp_path), clock)
    manager.load()
    fifo = SubscriptionGroupConfig(
        "GID_fifo",
        consume_message_orderly=True,
        retry_max_times=3,
        attributes={"k": "v"},
        subscription_data_set=[{"topic": "T", "expressionType": "TAG", "expression": "a||b", "version": 7}],
    )
    manager.create_or_update(fifo)
    manager.create_or_update(SubscriptionGroupConfig("GID_plain"))
    text = manager.path.read_text()
    assert '\t\t\t"groupRetryPolicy":{\n\t\t\t\t"type":"CUSTOMIZED"\n\t\t\t},\n' in text
    assert "subscriptionDataSet" in text and text.count("subscriptionDataSet") == 1  # null omitted
    assert '\t"forbiddenTable":{},\n' in text
    reloaded = SubscriptionGroupManager(config_dir(tmp_path), clock)
    reloaded.load()
    assert reloaded.get("GID_fifo") == fifo
    assert reloaded.get("GID_plain") == SubscriptionGroupConfig("GID_plain")
    assert reloaded.data_version.counter == 2
    with pytest.raises(ValueError):
        manager.create_or_update(SubscriptionGroupConfig("g" * (GROUP_NAME_LENGTH_MAX + 1)))


def test_subscription_group_5x_file_reencodes_byte_for_byte(tmp_path: Path, clock: ManualClock) -> None:
    config_dir(tmp_path).mkdir(parents=True)
    (config_dir(tmp_path) / "subscriptionGroup.json").write_text(SUBSCRIPTION_GROUP_5X)
    manager = SubscriptionGroupManager(config_dir(tmp_path), clock)
    manager.load()
    order = manager.get("GID_order")
    assert order is not None and order.consume_message_orderly
    assert order.group_retry_policy == GroupRetryPolicy(customized=CustomizedRetryPolicy((1000, 5000, 10000)))
    exponential = manager.get("GID_exp")
    assert exponential is not None
    assert exponential.group_retry_policy == GroupRetryPolicy(EXPONENTIAL, exponential=ExponentialRetryPolicy())
    assert manager.forbidden_table() == {"GID_exp": {"FifoTopic": 4}}
    assert manager.encode() == SUBSCRIPTION_GROUP_5X


def test_subscription_group_reads_a_4x_file(tmp_path: Path, clock: ManualClock) -> None:
    config_dir(tmp_path).mkdir(parents=True)
    (config_dir(tmp_path) / "subscriptionGroup.json").write_text(SUBSCRIPTION_GROUP_4X)
    manager = SubscriptionGroupManager(config_dir(tmp_path), clock)
    manager.load()
    assert manager.list() == [SubscriptionGroupConfig("please_rename_unique_group_name")]
    assert manager.forbidden_table() == {}


# -- consumerOffset.json ------------------------------------------------------------------------


def test_consumer_offsets_commit_query_and_remove(tmp_path: Path, clock: ManualClock) -> None:
    offsets = ConsumerOffsetManager(config_dir(tmp_path), clock)
    offsets.load()
    assert offsets.query_offset("g", "T", 0) == -1
    assert offsets.persist_if_dirty() is False
    offsets.commit_offset("g", "T", 0, 5)
    offsets.commit_offset("g", "T", 1, 7)
    offsets.commit_offset("g", "U", 0, 1)
    offsets.commit_offset("h", "T", 0, 2)
    offsets.commit_offset("g", "T", 0, 6)
    assert offsets.query_offset("g", "T", 0) == 6
    assert offsets.query_offset("g", "T", 9) == -1
    assert offsets.offsets_of_group("g") == {("T", 0): 6, ("T", 1): 7, ("U", 0): 1}
    assert offsets.offset_table() == {"T@g": {0: 6, 1: 7}, "U@g": {0: 1}, "T@h": {0: 2}}
    assert not offsets.path.exists()  # commits never touch the disk
    assert offsets.persist_if_dirty() is True
    assert offsets.persist_if_dirty() is False
    assert offsets.data_version.counter == 1
    assert offsets.remove_topic("U") == 1
    assert offsets.remove_group("h") == 1
    assert offsets.remove_group("nobody") == 0
    assert offsets.offset_table() == {"T@g": {0: 6, 1: 7}}
    offsets.persist()
    reloaded = ConsumerOffsetManager(config_dir(tmp_path), clock)
    reloaded.load()
    assert reloaded.offset_table() == {"T@g": {0: 6, 1: 7}}
    assert reloaded.data_version.counter == 2
    assert loads(reloaded.path.read_text())["groupTopicMap"] == {"g": ["T"]}


def test_consumer_offsets_read_a_48_file(tmp_path: Path, clock: ManualClock) -> None:
    config_dir(tmp_path).mkdir(parents=True)
    (config_dir(tmp_path) / "consumerOffset.json").write_text(CONSUMER_OFFSET_48)
    offsets = ConsumerOffsetManager(config_dir(tmp_path), clock)
    offsets.load()
    group = "please_rename_unique_group_name"
    assert offsets.offsets_of_group(group) == {
        ("TopicTest", 0): 6,
        ("TopicTest", 1): 3,
        ("TopicTest", 2): 3,
        ("TopicTest", 3): 2,
        ("%RETRY%" + group, 0): 0,
    }
    assert (offsets.data_version.counter, offsets.data_version.timestamp_ms) == (0, T0)


def test_consumer_offsets_5x_file_reencodes_byte_for_byte(tmp_path: Path, clock: ManualClock) -> None:
    config_dir(tmp_path).mkdir(parents=True)
    (config_dir(tmp_path) / "consumerOffset.json").write_text(CONSUMER_OFFSET_5X)
    offsets = ConsumerOffsetManager(config_dir(tmp_path), clock)
    offsets.load()
    assert offsets.query_offset("CID_RMQ_SYS_TRANS", TRANS_HALF_TOPIC, 0) == 42
    assert offsets.encode() == CONSUMER_OFFSET_5X
    clock.advance_ms(1)
    offsets.commit_offset("GID_order", "FifoTopic", 1, 20)
    offsets.persist()
    assert '"FifoTopic@GID_order":{0:10,1:20,2:12\n\t\t}' in offsets.path.read_text()
    assert offsets.data_version.counter == 13


def test_concurrent_commits_then_persist(tmp_path: Path, clock: ManualClock) -> None:
    offsets = ConsumerOffsetManager(config_dir(tmp_path), clock)
    offsets.load()
    threads_total, commits_per_thread = 8, 400
    start = threading.Barrier(threads_total + 1)
    stop = threading.Event()
    errors: list[BaseException] = []

    def committer(thread_index: int) -> None:
        start.wait()
        for offset in range(1, commits_per_thread + 1):
            offsets.commit_offset(f"g{thread_index % 2}", f"T{thread_index}", offset % 4, offset)

    def persister() -> None:
        start.wait()
        try:
            while not stop.is_set():
                offsets.persist_if_dirty()
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    workers = [threading.Thread(target=committer, args=(i,)) for i in range(threads_total)]
    background = threading.Thread(target=persister)
    for thread in [*workers, background]:
        thread.start()
    for thread in workers:
        thread.join()
    stop.set()
    background.join()
    offsets.persist()
    assert errors == []
    reloaded = ConsumerOffsetManager(config_dir(tmp_path), clock)
    reloaded.load()
    expected = {f"T{i}@g{i % 2}": {1: 397, 2: 398, 3: 399, 0: 400} for i in range(threads_total)}
    assert reloaded.offset_table() == expected
    assert reloaded.data_version.counter >= 1
    assert not (config_dir(tmp_path) / "consumerOffset.json.tmp").exists()


# -- delayOffset.json ---------------------------------------------------------------------------


def test_delay_offsets_round_trip_and_4x_files(tmp_path: Path, clock: ManualClock) -> None:
    delay = DelayOffsetManager(config_dir(tmp_path), clock)
    delay.load()
    assert delay.get(3) == 0
    delay.update(3, 12)
    delay.update(1, 1)
    delay.persist()
    assert delay.path.read_text() == (
        '{\n\t"dataVersion":{\n\t\t"counter":1,\n\t\t"stateVersion":0,\n'
        '\t\t"timestamp":1700000000000\n\t},\n\t"offsetTable":{1:1,3:12\n\t}\n}'
    )
    reloaded = DelayOffsetManager(config_dir(tmp_path), clock)
    reloaded.load()
    assert reloaded.offset_table() == {1: 1, 3: 12}
    for text, table in [
        (DELAY_OFFSET_48, {1: 1, 3: 12}),
        (DELAY_OFFSET_48_COMPACT, {1: 1}),
        ('{"offsetTable":{"2":5}}', {2: 5}),
    ]:
        delay.path.write_text(text)
        legacy = DelayOffsetManager(config_dir(tmp_path), clock)
        legacy.load()
        assert legacy.offset_table() == table
        assert legacy.data_version.counter == 0


# -- crash safety: .bak fallback ----------------------------------------------------------------


def _two_generations(tmp_path: Path, clock: ManualClock) -> TopicConfigManager:
    manager = TopicConfigManager(config_dir(tmp_path), clock)
    manager.load()
    manager.create_or_update(TopicConfig("First"))
    manager.create_or_update(TopicConfig("Second"))  # .bak now holds only "First"
    return manager


@pytest.mark.parametrize("damage", ["truncated", "garbage", "zeros", "empty", "missing"])
def test_load_falls_back_to_bak(tmp_path: Path, clock: ManualClock, damage: str) -> None:
    manager = _two_generations(tmp_path, clock)
    main = manager.path
    text = main.read_bytes()
    if damage == "truncated":
        main.write_bytes(text[: len(text) // 2])
    elif damage == "garbage":
        main.write_bytes(b"\xff\xfe not json {1:")
    elif damage == "zeros":
        main.write_bytes(b"\0" * len(text))
    elif damage == "empty":
        main.write_bytes(b"")
    else:
        main.unlink()
    recovered = TopicConfigManager(config_dir(tmp_path), clock)
    recovered.load()
    assert [c.topic_name for c in recovered.list()] == ["First"]
    assert recovered.data_version.counter == 1
    # The bad main file is out of the way: the next write keeps the good .bak.
    assert not main.exists()
    assert (main.with_name("topics.json.corrupt").exists()) == (damage in ("truncated", "garbage", "zeros"))
    recovered.create_or_update(TopicConfig("Third"))
    bak = main.with_name("topics.json.bak")
    assert loads(bak.read_text())["topicConfigTable"].keys() == {"First"}


def test_load_without_any_file_gives_defaults(tmp_path: Path, clock: ManualClock) -> None:
    for manager in (
        TopicConfigManager(config_dir(tmp_path), clock),
        SubscriptionGroupManager(config_dir(tmp_path), clock),
    ):
        manager.load()
        assert manager.list() == []
        assert manager.data_version.counter == 0
    offsets = ConsumerOffsetManager(config_dir(tmp_path), clock)
    offsets.load()
    assert offsets.offset_table() == {}
    assert not config_dir(tmp_path).exists()


@pytest.mark.parametrize("bak", [None, b"also garbage", b'{"topicConfigTable":{"t":{"perm":"x"}}}'])
def test_load_refuses_to_start_empty_when_content_is_unreadable(
    tmp_path: Path, clock: ManualClock, bak: bytes | None
) -> None:
    directory = config_dir(tmp_path)
    directory.mkdir(parents=True)
    (directory / "topics.json").write_bytes(b"{garbage")
    if bak is not None:
        (directory / "topics.json.bak").write_bytes(bak)
    with pytest.raises(MetadataFileError):
        TopicConfigManager(directory, clock).load()
    assert (directory / "topics.json").read_bytes() == b"{garbage"  # evidence kept


def test_write_atomically_rotates_to_bak_and_leaves_no_temp(tmp_path: Path) -> None:
    path = tmp_path / "config" / "x.json"
    write_atomically(path, "one")
    assert not path.with_name("x.json.bak").exists()
    write_atomically(path, "two é")
    assert path.read_text(encoding="utf-8") == "two é"
    assert path.with_name("x.json.bak").read_text() == "one"
    assert sorted(p.name for p in path.parent.iterdir()) == ["x.json", "x.json.bak"]


# -- names --------------------------------------------------------------------------------------
