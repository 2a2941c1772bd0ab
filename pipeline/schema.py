"""Column lists of every pipeline source, as Spark DDL and as Arrow schemas, from one table.

Each source's columns are a tuple of ``(name, spark type)``; the Arrow type follows from the
Spark type (``ARROW_TYPES``), so the two can never drift. Timestamps are Arrow
``timestamp[us, UTC]`` (Spark's TimestampType); pyarrow is imported lazily so that option and
offset code stays importable without it.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow as pa

Columns = tuple[tuple[str, str], ...]  # (name, Spark type) of each column, in order

# Source "rocketmq" (a topic read through the broker): rocketmq-spark's columns under its names, but
# no ``flag`` (not in a v2 Message) and ``properties`` a map (the user properties), not a JSON string.
BROKER_COLUMNS: Columns = (
    ("topic", "string"),
    ("brokerName", "string"),
    ("queueId", "int"),
    ("queueOffset", "bigint"),
    ("messageId", "string"),
    ("tags", "string"),
    ("keys", "array<string>"),
    ("body", "binary"),
    ("properties", "map<string,string>"),
    ("bornTimestamp", "timestamp"),
    ("storeTimestamp", "timestamp"),
    ("bornHost", "string"),
    ("storeHost", "string"),
    ("messageType", "string"),
    ("messageGroup", "string"),
    ("deliveryTimestamp", "timestamp"),
    ("deliveryAttempt", "int"),
    ("liteTopic", "string"),  # a LITE message's lite topic (RocketMQ 5.5), else null
    ("priority", "int"),  # a PRIORITY message's priority (RocketMQ 5.4), else null
)

# Source "rocketmq-commitlog": every field of the record (services/domain/format/commitlog_format.py),
# the property map (the whole-record CRC trailer removed) and what is derived from it, where the
# record lies.
COMMITLOG_COLUMNS: Columns = (
    ("commitLogOffset", "bigint"),
    ("totalSize", "int"),
    ("magicCode", "int"),
    ("bodyCrc", "int"),
    ("queueId", "int"),
    ("flag", "int"),
    ("queueOffset", "bigint"),
    ("sysFlag", "int"),
    ("bornTimestamp", "timestamp"),
    ("bornHost", "string"),
    ("storeTimestamp", "timestamp"),
    ("storeHost", "string"),
    ("reconsumeTimes", "int"),
    ("preparedTransactionOffset", "bigint"),
    ("topic", "string"),
    ("body", "binary"),
    ("properties", "map<string,string>"),
    ("tags", "string"),
    ("keys", "array<string>"),
    ("uniqKey", "string"),
    ("brokerName", "string"),  # the name given with the store root (option brokerNames), else null
    ("segment", "string"),
    ("crcValid", "boolean"),  # null unless verifyCrc: body CRC and, if present, the record CRC
    ("tagsCode", "bigint"),  # what the ConsumeQueue unit holds: JavaHash(TAGS), deliver time on SCHEDULE_TOPIC_XXXX
    ("liteTopic", "string"),  # the __LITE_TOPIC property (a lite message, or a retry / DLQ copy of one)
    ("liteQueueOffset", "bigint"),  # INNER_MULTI_QUEUE_OFFSET: its offset in its lite topic, else null
)

# Source "rocketmq-consumequeue": one row per 20-byte unit (services/domain/format/consume_queue_format.py).
CONSUMEQUEUE_COLUMNS: Columns = (
    ("topic", "string"),
    ("brokerName", "string"),
    ("queueId", "int"),
    ("queueOffset", "bigint"),
    ("commitLogOffset", "bigint"),
    ("size", "int"),
    ("tagsCode", "bigint"),
)


def ddl(columns: Iterable[tuple[str, str]]) -> str:
    """``"topic string, queueId int, ..."`` (names quoted, so reserved words are safe)."""
    return ", ".join(f"`{name}` {kind}" for name, kind in columns)


def _arrow_type(kind: str) -> pa.DataType:
    import pyarrow as pa

    simple = {
        "string": pa.string(),
        "int": pa.int32(),
        "bigint": pa.int64(),
        "binary": pa.binary(),
        "boolean": pa.bool_(),
        "timestamp": pa.timestamp("us", tz="UTC"),
        "array<string>": pa.list_(pa.string()),
        "map<string,string>": pa.map_(pa.string(), pa.string()),
    }
    return simple[kind]


@cache
def arrow_schema(columns: Columns) -> pa.Schema:
    import pyarrow as pa

    return pa.schema([pa.field(name, _arrow_type(kind)) for name, kind in columns])
