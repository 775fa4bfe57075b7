"""Lakehouse sinks: Delta Lake (delta-rs) and Apache Iceberg (pyiceberg) tables kept equal to
the upstream, one table per upstream table (docs/lakehouse-sinks.md).

`sink.py` is the format-independent sink (buffering, exactly-once watermarks, DDL), `changes.py`
the one MERGE planning for both formats, `types.py` the one type mapping, `evolution.py` the
one schema-change rule; `delta.py` and `iceberg.py` are the formats' table operations.
"""

from __future__ import annotations

from sparkcdc.config.replica import SinkConfig


def make_lakehouse_sink(uri: str, sink: SinkConfig, changefeed: str):
    """The sink for a `delta...://` or `iceberg...://` URI; `changefeed` (<namespace>/<id>) is
    what every table commit records."""
    from sparkcdc.sink.lakehouse.config import parse_lakehouse_uri
    from sparkcdc.sink.lakehouse.sink import LakehouseSink

    target = parse_lakehouse_uri(uri, sink)
    if target.format == "delta":
        from sparkcdc.sink.lakehouse.delta import DeltaTables

        tables = DeltaTables(target, changefeed)
    else:
        from sparkcdc.sink.lakehouse.iceberg import IcebergTables

        tables = IcebergTables(target, changefeed)
    return LakehouseSink(tables, target.options, changefeed)
