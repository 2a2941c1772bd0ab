"""Raw CommitLog records (a PullRecords response) -> the "rocketmq" source's Arrow batch.

PullRecords (protos/pyrmq/pull/v1/pull.proto) answers with whole CommitLog records
concatenated; ``decode.decode_batch`` (the ``rocketmq-commitlog`` decoder, numpy + pyarrow)
reads them, and this module derives ``BROKER_COLUMNS`` from its columns so that every value
equals what the v2 PullMessage path gives (``messages.to_batch`` over the broker's
``consumer_convert.delivered_message``); tests/pipeline/test_records.py checks the two agree:

* ``messageId``: UNIQ_KEY, else the offset message id (store host + PHYSICALOFFSET);
* ``properties``: the user properties, i.e. without the keys ``domain.delivery.is_internal_property``
  names (decided once per distinct key of the batch, not per row);
* ``bornHost``: the __BORNHOST property (the broker writes it on every message it receives),
  else the BORNHOST field; ``messageGroup``: __SHARDINGKEY, and such rows are FIFO; both set
  column-wide;
* ``messageType`` / ``deliveryTimestamp`` of rows with TRAN_MSG, DELAY, TIMER_DELIVER_MS or
  TIMER_DELAY_SEC (transaction and delay messages) are worked out one by one with the
  broker's own functions (``delivered_message_type``, ``delivery_timestamp_ms``); every other
  row is FIFO (__SHARDINGKEY), else PRIORITY (_SYS_MSG_PRIORITY_), else LITE (__LITE_TOPIC),
  else NORMAL, with no delivery time (``delivered_message_type``'s order), set column-wide;
* ``priority``: a PRIORITY row's ``_SYS_MSG_PRIORITY_`` as ``topic_types.message_priority``
  reads it (judged once per distinct value; null if it is no number, or past int32, which the
  v2 field cannot hold); ``liteTopic``: a LITE row's __LITE_TOPIC; both null on other rows, as
  the broker sets ``SystemProperties.priority`` / ``lite_topic`` only for those types;
* ``deliveryAttempt``: RECONSUMETIMES + 1 (at least 1).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipeline import arrow_util as au
from pipeline.decode import decode_batch, walk
from pipeline.errors import TruncatedRecords
from pipeline.schema import BROKER_COLUMNS, arrow_schema
from services.domain.delivery import MessageType, delivered_message_type, delivery_timestamp_ms, is_internal_property
from services.domain.format.commitlog_format import PHY_OFFSET_POS, host_from_string, offset_msg_id
from services.domain.format.properties_format import (
    BORN_HOST,
    DELAY_TIME_LEVEL,
    LITE_TOPIC,
    PRIORITY,
    SHARDING_KEY,
    TIMER_DELAY_SEC,
    TIMER_DELIVER_MS,
    TRANSACTION_PREPARED,
)
from services.domain.topic_types import message_priority

DECODED = (
    "queueId",
    "queueOffset",
    "bornTimestamp",
    "bornHost",
    "storeTimestamp",
    "storeHost",
    "reconsumeTimes",
    "topic",
    "body",
    "properties",
    "tags",
    "keys",
    "uniqKey",
)
# Properties that make a row a TRANSACTION or DELAY message (or give it a delivery time).
_SPECIAL = (TRANSACTION_PREPARED, DELAY_TIME_LEVEL, TIMER_DELIVER_MS, TIMER_DELAY_SEC)
_INT32_MAX = 2**31 - 1  # SystemProperties.priority is an int32


def priority_of(value: str | None) -> int | None:
    """The ``priority`` column of a PRIORITY message whose _SYS_MSG_PRIORITY_ is ``value``."""
    priority = None if value is None else message_priority({PRIORITY: value})
    return priority if priority is not None and priority <= _INT32_MAX else None


def split_records(data: bytes, expected: int | None = None) -> np.ndarray:
    """Start positions of the records concatenated in ``data``."""
    starts, pos, why = walk(data, 0, len(data), len(data), 1 << 62)
    if pos != len(data) or (expected is not None and len(starts) != expected):
        raise TruncatedRecords(
            f"{len(data)} bytes of records: {len(starts)} whole records found "
            f"(expected {expected}), stopped at byte {pos} ({why})"
        )
    return np.array(starts, np.int64)


def records_to_batch(broker: str, data: bytes, where: str, expected: int | None = None) -> pa.RecordBatch:
    """One ``BROKER_COLUMNS`` batch of the records concatenated in ``data`` (``where`` names the
    queue in errors)."""
    starts = split_records(data, expected)
    if not len(starts):
        return pa.RecordBatch.from_pylist([], schema=arrow_schema(BROKER_COLUMNS))
    a = np.frombuffer(data, np.uint8)
    raw = decode_batch(data, a, starts, 0, where, columns=DECODED)
    count = raw.num_rows
    col = raw.column
    all_props = col("properties")
    props_offsets = all_props.offsets.to_numpy()
    keys = all_props.keys
    entry_row = np.repeat(au.arange(count), np.diff(props_offsets))
    user_props = _user_properties(all_props, keys, entry_row)

    message_ids = col("uniqKey")
    if message_ids.null_count:
        missing = np.flatnonzero(pc.is_null(message_ids).to_numpy(zero_copy_only=False))
        message_ids = _fill_offset_msg_ids(message_ids, missing, a, starts, col("storeHost"))
    # The broker writes __BORNHOST on every message it receives, __SHARDINGKEY on FIFO ones.
    born_hosts = _replaced(col("bornHost"), *_values_of(BORN_HOST, keys, all_props.items, entry_row))
    group_rows, group_values = _values_of(SHARDING_KEY, keys, all_props.items, entry_row)
    groups = _replaced(pa.nulls(count, pa.string()), group_rows, group_values)
    types, lite_topics, priorities = _typed(count, group_rows, keys, all_props.items, entry_row)
    delivery = pa.nulls(count, pa.timestamp("us", tz="UTC"))
    special = np.unique(entry_row[pc.is_in(keys, pa.array(_SPECIAL)).to_numpy(zero_copy_only=False)])
    if len(special):  # transaction and delay messages: the broker's own rules, row by row
        born_hosts, types, groups, delivery, lite_topics, priorities = _special_rows(
            special, all_props, born_hosts, types, groups, delivery, lite_topics, priorities, col("storeTimestamp")
        )
    attempts = np.maximum(1, col("reconsumeTimes").to_numpy() + 1).astype(np.int32)
    schema = arrow_schema(BROKER_COLUMNS)
    arrays = [
        col("topic"),
        au.constant_strings(broker, count),
        col("queueId"),
        col("queueOffset"),
        message_ids,
        col("tags"),
        col("keys"),
        col("body"),
        user_props,
        col("bornTimestamp"),
        col("storeTimestamp"),
        born_hosts,
        col("storeHost"),
        types,
        groups,
        delivery,
        pa.array(attempts, pa.int32()),
        lite_topics,
        priorities,
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _typed(
    count: int, group_rows: np.ndarray, keys: pa.Array, items: pa.Array, entry_row: np.ndarray
) -> tuple[pa.Array, pa.Array, pa.Array]:
    """messageType, liteTopic and priority of rows that are no TRANSACTION or DELAY message:
    FIFO (a message group), else PRIORITY, else LITE, else NORMAL (``delivered_message_type``)."""
    kinds = np.zeros(count, np.int8)  # index into _KIND_NAMES
    lite_rows, lite_values = _values_of(LITE_TOPIC, keys, items, entry_row)
    priority_rows, priority_values = _values_of(PRIORITY, keys, items, entry_row)
    kinds[lite_rows] = _LITE
    kinds[priority_rows] = _PRIORITY
    kinds[group_rows] = _FIFO
    types = pa.DictionaryArray.from_arrays(pa.array(kinds), _KIND_NAMES).cast(pa.string())
    lite_topics = pa.nulls(count, pa.string())
    if len(lite_rows):
        keep = kinds[lite_rows] == _LITE
        lite_topics = _replaced(lite_topics, lite_rows[keep], lite_values.filter(pa.array(keep)))
    priorities = pa.nulls(count, pa.int32())
    if len(priority_rows):
        keep = kinds[priority_rows] == _PRIORITY
        values = priority_values.filter(pa.array(keep)).dictionary_encode()
        levels = pa.array([priority_of(v) for v in values.dictionary.to_pylist()], pa.int32())
        priorities = _replaced(priorities, priority_rows[keep], levels.take(values.indices))
    return types, lite_topics, priorities


_KIND_NAMES = pa.array(["NORMAL", "FIFO", "PRIORITY", "LITE"], pa.string())
_FIFO, _PRIORITY, _LITE = 1, 2, 3


def _user_properties(all_props: pa.MapArray, keys: pa.Array, entry_row: np.ndarray) -> pa.MapArray:
    """The map without internal keys (judged once per distinct key)."""
    if len(keys) == 0:
        return all_props
    encoded = keys.dictionary_encode()
    internal = np.array([is_internal_property(k) for k in encoded.dictionary.to_pylist()], np.bool_)
    keep = ~internal[encoded.indices.to_numpy(zero_copy_only=False)]
    if keep.all():
        return all_props
    kept_per_row = np.bincount(entry_row[keep], minlength=len(all_props))
    mask = pa.array(keep)
    return pa.MapArray.from_arrays(
        pa.array(au.offsets_of(kept_per_row).astype(np.int32)), keys.filter(mask), all_props.items.filter(mask)
    )


def _fill_offset_msg_ids(
    ids: pa.Array, rows: np.ndarray, a: np.ndarray, starts: np.ndarray, store_hosts: pa.Array
) -> pa.Array:
    """UNIQ_KEY, and the offset message id where a record has none (as the broker's Delivery)."""
    if not len(rows):
        return ids
    phy = au.windows(a, 8, starts[rows] + PHY_OFFSET_POS).view(">i8").ravel()
    values = ids.to_pylist()
    hosts = store_hosts.to_pylist()
    for row, phy_offset in zip(rows.tolist(), phy.tolist()):
        values[row] = offset_msg_id(host_from_string(hosts[row]), phy_offset)
    return pa.array(values, pa.string())


def _values_of(name: str, keys: pa.Array, items: pa.Array, entry_row: np.ndarray) -> tuple[np.ndarray, pa.Array]:
    """(rows that have property ``name``, its value in each), the last one of a row winning
    (Java's string2messageProperties puts them into a HashMap in order)."""
    hits = np.flatnonzero(pc.equal(keys, name).to_numpy(zero_copy_only=False))
    rows = entry_row[hits]
    if len(rows) > 1:
        last = np.append(rows[1:] != rows[:-1], True)  # entries are in row order
        hits, rows = hits[last], rows[last]
    return rows, items.take(pa.array(hits, pa.int64()))


def _replaced(column: pa.Array, rows: np.ndarray, values: pa.Array) -> pa.Array:
    """``column`` with ``rows`` set to ``values``."""
    if not len(rows):
        return column
    mask = np.zeros(len(column), np.bool_)
    mask[rows] = True
    return pc.replace_with_mask(column, pa.array(mask), values.cast(column.type))


def _special_rows(
    rows: np.ndarray,
    all_props: pa.MapArray,
    born_hosts: pa.Array,
    types: pa.Array,
    groups: pa.Array,
    delivery: pa.Array,
    lite_topics: pa.Array,
    priorities: pa.Array,
    store_ts: pa.Array,
) -> tuple[pa.Array, pa.Array, pa.Array, pa.Array, pa.Array, pa.Array]:
    """bornHost, messageType, messageGroup, deliveryTimestamp, liteTopic, priority with
    ``rows`` worked out one by one (consumer_convert.delivered_message's rules)."""
    born, kinds, group_of, at = born_hosts.to_pylist(), types.to_pylist(), groups.to_pylist(), delivery.to_pylist()
    lite_of, priority = lite_topics.to_pylist(), priorities.to_pylist()
    stored_us = store_ts.cast(pa.int64()).to_numpy(zero_copy_only=False)
    for row in rows.tolist():
        props = dict(all_props[row].as_py())
        born[row] = props.get(BORN_HOST) or born[row]
        kind = delivered_message_type(props)
        kinds[row] = kind.name
        group_of[row] = props.get(SHARDING_KEY)
        at_ms = delivery_timestamp_ms(props, int(stored_us[row]) // 1000)
        at[row] = None if at_ms is None else at_ms * 1000
        lite_of[row] = props[LITE_TOPIC] if kind is MessageType.LITE else None
        priority[row] = priority_of(props.get(PRIORITY)) if kind is MessageType.PRIORITY else None
    return (
        pa.array(born, pa.string()),
        pa.array(kinds, pa.string()),
        pa.array(group_of, pa.string()),
        pa.array(at, pa.timestamp("us", tz="UTC")),
        pa.array(lite_of, pa.string()),
        pa.array(priority, pa.int32()),
    )
