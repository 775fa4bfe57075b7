"""A sink that records what the batch writer hands it, for tests that drive `write_batch`
without Spark and check which DDLs and rows a changefeed would write."""

from __future__ import annotations

from typing import Sequence

from sparkcdc.model.events import DDLEvent, RowChange, TableInfo
from sparkcdc.sink.contract import Sink


class RecordingSink(Sink):
    def __init__(self):
        self.ddls: list[DDLEvent] = []
        self.rows: list[tuple[TableInfo, RowChange]] = []
        self.checkpoints: list[int] = []

    def write_rows(self, table: TableInfo, rows: Sequence[RowChange]) -> None:
        self.rows.extend((table, row) for row in rows)

    def write_ddl(self, ddl: DDLEvent) -> None:
        self.ddls.append(ddl)

    def flush(self) -> None:
        pass

    def write_checkpoint(self, ts: int) -> int:
        self.checkpoints.append(ts)
        return ts

    def tables_written(self) -> set[tuple[str, str]]:
        """(schema, table) of every row written."""
        return {(table.schema, table.table) for table, _ in self.rows}
