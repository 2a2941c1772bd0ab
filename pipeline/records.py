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
  row is NORMAL / FIFO with no delivery time;
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
from services.domain.delivery import delivered_message_type, delivery_timestamp_ms, is_internal_property
from services.domain.format.commitlog_format import PHY_OFFSET_POS, host_from_string, offset_msg_id
from services.domain.format.properties_format import (
    BORN_HOST,
    DELAY_TIME_LEVEL,
    SHARDING_KEY,
    TIMER_DELAY_SEC,
    TIMER_DELIVER_MS,
    TRANSACTION_PREPARED,
)

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
    types = _replaced(au.constant_strings("NORMAL", count), group_rows, au.constant_strings("FIFO", len(group_rows)))
    delivery = pa.nulls(count, pa.timestamp("us", tz="UTC"))
    special = np.unique(entry_row[pc.is_in(keys, pa.array(_SPECIAL)).to_numpy(zero_copy_only=False)])
    if len(special):  # transaction and delay messages: the broker's own rules, row by row
        born_hosts, types, groups, delivery = _special_rows(
            special, all_props, born_hosts, types, groups, delivery, col("storeTimestamp")
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
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


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
    store_ts: pa.Array,
):
    """bornHost, messageType, messageGroup, deliveryTimestamp with ``rows`` worked out one by
    one (consumer_convert.delivered_message's rules)."""
    born, kinds, group_of, at = born_hosts.to_pylist(), types.to_pylist(), groups.to_pylist(), delivery.to_pylist()
    stored_us = store_ts.cast(pa.int64()).to_numpy(zero_copy_only=False)
    for row in rows.tolist():
        props = dict(all_props[row].as_py())
        born[row] = props.get(BORN_HOST) or born[row]
        kinds[row] = delivered_message_type(props).name
        group_of[row] = props.get(SHARDING_KEY)
        at_ms = delivery_timestamp_ms(props, int(stored_us[row]) // 1000)
        at[row] = None if at_ms is None else at_ms * 1000
    return (
        pa.array(born, pa.string()),
        pa.array(kinds, pa.string()),
        pa.array(group_of, pa.string()),
        pa.array(at, pa.timestamp("us", tz="UTC")),
    )
