"""Load one table of a storage sink's output into a Spark DataFrame: its latest state.

    df = load_table(spark, "s3://bucket/cdc?endpoint=...&access-key=...", "shop", "items")

The driver lists the table's files (small); executors decode them and keep, per handle key,
the newest change at or before the cut (the storage checkpoint, or `as_of_ts` if earlier).
Deleted keys are dropped. Changes are ordered by (commit-ts, table version, file index,
position), so a transaction replayed in a later file (at-least-once delivery) changes
nothing. Rows need a commit-ts: canal-json carries it (exactly with enable-tidb-extension,
else to the millisecond); csv needs `include-commit-ts = true`.
"""

from __future__ import annotations

import datetime as _dt
import posixpath
from decimal import Decimal
from typing import Any, Callable, Iterator, Optional

from sparkcdc.config.replica import SinkConfig
from sparkcdc.consumer.storage_reader import (
    TableFile,
    _checkpoint_ts,
    decoder_for,
    open_storage,
    table_definitions,
    table_files,
    table_members,
)
from sparkcdc.errors import ErrStorageIO
from sparkcdc.model.events import TableInfo
from sparkcdc.config.storage_location import StorageLocation, parse_storage_location
from sparkcdc.sink.storage.table_definition import TableDefinition

_INTEGERS = ("TINYINT", "SMALLINT", "MEDIUMINT", "INT", "YEAR")
_BINARY = ("BINARY", "VARBINARY", "TINYBLOB", "BLOB", "MEDIUMBLOB", "LONGBLOB")


def spark_type(column: dict) -> Any:
    """The Spark type of one schema-file column (TiCDC's ColumnType and precision/scale)."""
    from pyspark.sql import types as T

    parts = column["ColumnType"].split(" ")
    base, unsigned = parts[0], "UNSIGNED" in parts
    if base in _INTEGERS:
        return T.LongType() if base == "INT" and unsigned else T.IntegerType()
    if base == "BIGINT":
        return T.DecimalType(20, 0) if unsigned else T.LongType()
    if base == "BIT":
        return T.DecimalType(20, 0) if int(column.get("ColumnPrecision") or 1) > 63 else T.LongType()
    if base == "DECIMAL":
        precision = int(column.get("ColumnPrecision") or 10)
        return T.DecimalType(min(precision, 38), int(column.get("ColumnScale") or 0))
    if base == "FLOAT":
        return T.FloatType()
    if base == "DOUBLE":
        return T.DoubleType()
    if base == "DATE":
        return T.DateType()
    if base in ("DATETIME", "TIMESTAMP"):
        # Wall-clock text as written by the sink (TIMESTAMP in the changefeed's time zone).
        return T.TimestampNTZType()
    if base in _BINARY:
        return T.BinaryType()
    return T.StringType()  # CHAR, VARCHAR, TEXT, ENUM, SET, JSON, TIME (±838 h is no time of day)


def _converter(column: dict) -> Callable[[Optional[str]], Any]:
    parts = column["ColumnType"].split(" ")
    base, unsigned = parts[0], "UNSIGNED" in parts
    if base in _INTEGERS or base == "BIGINT" and not unsigned:
        return int
    if base == "BIT":
        return int if int(column.get("ColumnPrecision") or 1) <= 63 else Decimal
    if base in ("DECIMAL", "BIGINT"):
        return Decimal
    if base in ("FLOAT", "DOUBLE"):
        return float
    if base == "DATE":
        return lambda text: None if text.startswith("0000") else _dt.date.fromisoformat(text)
    if base in ("DATETIME", "TIMESTAMP"):
        return lambda text: None if text.startswith("0000") else _dt.datetime.fromisoformat(text)
    if base in _BINARY:
        return lambda text: text.encode("latin-1")  # the reader's canonical form: one char per byte
    return str


def _typed_row(definition: TableDefinition, image: dict) -> tuple:
    values = []
    for column in definition.columns:
        text = image.get(column["ColumnName"])
        values.append(None if text is None else _converter(column)(text))
    return tuple(values)


def _changes_of_file(location: StorageLocation, protocol: str, sink: SinkConfig, cut_ts: int,
                     task: tuple[int, TableFile]) -> Iterator[tuple[tuple, tuple]]:
    """(handle key, (order, image or None for a delete)) for every change in one file."""
    ordinal, data_file = task
    fs = location.filesystem()
    with fs.open(data_file.path, "rb") as handle:
        text = handle.read().decode("utf-8")
    decode = decoder_for(protocol)
    keys = data_file.key_columns
    for position, change in enumerate(decode(text, list(data_file.columns), sink)):
        commit_ts = change.commit_ts
        if commit_ts is None:
            raise ErrStorageIO(
                f"{data_file.path} has rows without a commit-ts; write csv with include-commit-ts=true")
        if commit_ts > cut_ts:
            continue
        order = (commit_ts, data_file.version, ordinal, position)
        if change.before is not None:
            before_key = tuple(change.before.get(c) for c in keys)
            if change.after is None or before_key != tuple(change.after.get(c) for c in keys):
                yield before_key, (order + (0,), None)
        if change.after is not None:
            yield tuple(change.after.get(c) for c in keys), (order + (1,), change.after)


def _newer(left: tuple, right: tuple) -> tuple:
    return left if left[0] >= right[0] else right


def load_table(spark, root_uri: str, schema: str, table: str, protocol: str = "canal-json",
               as_of_ts: Optional[int] = None, sink: Optional[SinkConfig] = None,
               table_info: Optional[TableInfo] = None):
    """One row per handle key: the table's state at the storage checkpoint, or at `as_of_ts`
    if that is earlier (rows past the checkpoint may be incomplete, so never later).

    Columns and types follow the newest schema file at or before the cut; `sink` gives the
    csv/canal-json settings the files were written with; `table_info` supplies enum/set
    members and a non-PK handle key when the schema file lacks them.
    """
    from pyspark.sql import types as T

    location = parse_storage_location(root_uri)
    fs, root = open_storage(root_uri)
    sink = sink or SinkConfig(protocol=protocol)
    decoder_for(protocol)  # reject an unknown protocol before Spark does any work
    cut_ts = _checkpoint_ts(fs, root)
    if as_of_ts is not None:
        cut_ts = min(cut_ts, as_of_ts)
    table_dir = posixpath.join(root, schema, table)
    # A RENAME's schema file lists no enum/set members: they come from the old name's files.
    members_before = lambda s, t, ts: table_members(fs, root, s, t, ts)  # noqa: E731
    files = [f for f in table_files(fs, table_dir, protocol, table_info, members_before) if f.version <= cut_ts]
    definitions = {v: d for v, d in table_definitions(fs, table_dir).items() if v <= cut_ts}
    if not definitions:
        raise ErrStorageIO(f"no schema file for {schema}.{table} at or before ts {cut_ts} under "
                           f"{location.scheme}://{root}; check the URI, schema and table names")
    definition = definitions[max(definitions)]
    struct = T.StructType([T.StructField(c["ColumnName"], spark_type(c), True)
                           for c in definition.columns])
    if not files:
        return spark.createDataFrame([], struct)

    tasks = list(enumerate(files))
    partitions = max(1, min(len(tasks), spark.sparkContext.defaultParallelism * 2))
    latest = (
        spark.sparkContext.parallelize(tasks, partitions)
        .flatMap(lambda task: _changes_of_file(location, protocol, sink, cut_ts, task))
        .reduceByKey(_newer)
        .filter(lambda pair: pair[1][1] is not None)
        .map(lambda pair: _typed_row(definition, pair[1][1]))
    )
    return spark.createDataFrame(latest, struct)
