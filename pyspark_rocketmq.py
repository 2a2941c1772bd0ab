"""Auto-registration of the "rocketmq" Spark data source (pyrmq's ``pipeline`` package).

Spark (4.x) registers the ``DefaultSource`` of every top-level ``pyspark_*`` module on the
Python path when a session first looks up a Python data source, so
``spark.read.format("rocketmq")`` works without ``pipeline.register(spark)`` once pyrmq is
installed with the ``spark`` extra (or the repository root is on the workers' PYTHONPATH).
"""

from pipeline.broker_source import RocketMQDataSource as DefaultSource

__all__ = ["DefaultSource"]
