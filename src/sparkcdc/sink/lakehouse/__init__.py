"""Lakehouse sinks: Delta Lake (delta-rs) and Apache Iceberg (pyiceberg) tables kept equal to
the upstream, one table per upstream table (docs/lakehouse-sinks.md).

`sink.py` is the format-independent sink (buffering, exactly-once watermarks, DDL), `changes.py`
the one MERGE planning for both formats, `types.py` the one type mapping, `evolution.py` the
one schema-change rule; `delta.py` and `iceberg.py` are the formats' table operations.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sparkcdc.config.replica import SinkConfig

if TYPE_CHECKING:
    from sparkcdc.sink.lakehouse.config import LakehouseTarget


def make_lakehouse_sink(target: "LakehouseTarget | str", changefeed: str, sink: SinkConfig | None = None):
    """The sink for a `delta...://` or `iceberg...://` target (parsed by the sink registry, or a
    URI to parse with the changefeed's `sink` config); `changefeed` (<namespace>/<id>) is what
    every table commit records."""
    from sparkcdc.sink.lakehouse.config import LakehouseTarget, parse_lakehouse_uri
    from sparkcdc.sink.lakehouse.sink import LakehouseSink

    if not isinstance(target, LakehouseTarget):
        target = parse_lakehouse_uri(target, sink or SinkConfig())
    if target.format == "delta":
        from sparkcdc.sink.lakehouse.delta import DeltaTables

        tables = DeltaTables(target, changefeed)
    else:
        from sparkcdc.sink.lakehouse.iceberg import IcebergTables

        tables = IcebergTables(target, changefeed)
    return LakehouseSink(tables, target.options, changefeed)
