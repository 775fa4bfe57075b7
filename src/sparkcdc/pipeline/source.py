"""The binlog as a Spark Structured Streaming source (PySpark's Python Data Source API): the data
source, its name and the schema Spark sees; and the batch source of partitions planned in advance.

Spark unpickles this class in planner workers of their own at every query start (pyspark's
create_data_source and plan_data_source_read, each a daemon and a worker kept until a minute
idle), so this module imports only PySpark's API: the stream reader, with the planning and read
paths and pyarrow, is pipeline/stream_reader.py, imported when Spark asks for a reader. The
create_data_source worker went from ~100 to ~45 MiB RSS that way (bench/README.md).
"""

from __future__ import annotations

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader

SOURCE_NAME = "sparkcdc_binlog"
# Batch reads of partitions the capture planned itself: the initial snapshot's chunk reads
# (pipeline/snapshot.py) and the Spark Connect loop's micro-batches (pipeline/connect_loop.py).
BATCH_SOURCE_NAME = "sparkcdc_binlog_batch"
# What Spark carries: one row per record batch of CHANGE_SCHEMA (pipeline/transport.py).
SPARK_SCHEMA = "changes binary"


class BinlogDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> str:
        return SPARK_SCHEMA

    def streamReader(self, schema) -> DataSourceStreamReader:
        from sparkcdc.pipeline.planning import SourceOptions
        from sparkcdc.pipeline.stream_reader import BinlogStreamReader

        return BinlogStreamReader(SourceOptions.from_options(dict(self.options)))


class PlannedBinlogSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return BATCH_SOURCE_NAME

    def schema(self) -> str:
        return SPARK_SCHEMA

    def reader(self, schema) -> DataSourceReader:
        from sparkcdc.pipeline.planning import BatchPlan
        from sparkcdc.pipeline.stream_reader import PlannedBinlogReader

        return PlannedBinlogReader(BatchPlan.from_options(self.options))
