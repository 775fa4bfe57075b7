"""The capture's SparkSession: local or a cluster master, its Python workers running this interpreter.

Settings here serve the changefeeds' streaming queries (pipeline/runner.py): the source paces the
batches (a 0 s trigger polling every POLLING_DELAY) and Spark's own offset log is thrown away at
every restart, so it is kept short and written with the plain FileSystem API.
"""

from __future__ import annotations

import os
import sys

from sparkcdc.pipeline.source import BinlogDataSource

# How often a query asks its source whether the next batch may run (source.BatchPacer).
POLLING_DELAY = "100ms"
# pyspark 4.3's name (pinned in pyproject.toml); its FileContext default costs ~3x per log write.
_PLAIN_CHECKPOINT_FILE_MANAGER = \
    "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager"


def make_spark_session(master: str = "local[*]", app_name: str = "sparkcdc"):
    """A SparkSession whose Python workers run this interpreter (see components.md)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.python.worker.reuse", "true")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.driver.memory", "1g")
        .config("spark.sql.streaming.stopTimeout", "30s")
        # Spark's own offset and commit logs are thrown away at every (re)start (the metastore
        # checkpoint is where a changefeed resumes), yet written twice per micro-batch: keep few
        # and write them with the plain FileSystem API, 60 -> 20 ms each (docs/benchmarks.md).
        .config("spark.sql.streaming.minBatchesToRetain", "2")
        # With the source pacing batches (a 0 s trigger), how often an idle query asks it again.
        .config("spark.sql.streaming.pollingDelay", POLLING_DELAY)
        .config("spark.sql.streaming.checkpointFileManagerClass", _PLAIN_CHECKPOINT_FILE_MANAGER)
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("WARN")
    spark.dataSource.register(BinlogDataSource)
    return spark
