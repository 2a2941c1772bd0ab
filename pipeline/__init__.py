"""pyrmq's Spark pipeline: PySpark Python data sources and offline jobs (the ``spark`` extra).

Formats (``spark.read.format(name)``):

* ``rocketmq``: topics through the broker (batch and Structured Streaming reads with per-queue
  offsets, batch and streaming writes), ``pipeline/broker_source.py``;
* ``rocketmq-commitlog`` / ``rocketmq-consumequeue``: a store root's files read directly,
  ``pipeline/store_source.py``.

``register(spark)`` registers all three. ``rocketmq`` is also found without it when this
project is installed (non-editable) or on the workers' PYTHONPATH: Spark registers every
top-level ``pyspark_*`` module's ``DefaultSource`` (``pyspark_rocketmq.py``).

Jobs: ``python -m pipeline.jobs.<export|rebuild|audit|stats>`` (``pipeline/jobs/``).

Nothing under ``services/`` imports this package; it imports only pure modules from there: the
store's format modules (``services.domain.format.*``) and SQL92 filter, the v2 delivery rules
(``services.domain.delivery``: raw records get the columns the v2 path gives), the admin v2
client's helpers and, for rebuild, the store's own ConsumeQueue and IndexFile writers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

BROKER_FORMAT = "rocketmq"
COMMITLOG_FORMAT = "rocketmq-commitlog"
CONSUMEQUEUE_FORMAT = "rocketmq-consumequeue"


def register(spark: SparkSession) -> None:
    """Register the pipeline's data sources with a SparkSession."""
    from pipeline.broker_source import RocketMQDataSource
    from pipeline.store_source import CommitLogDataSource, ConsumeQueueDataSource

    for source in (RocketMQDataSource, CommitLogDataSource, ConsumeQueueDataSource):
        spark.dataSource.register(source)
