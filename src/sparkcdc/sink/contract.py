"""The sink contract: what the batch writer (pipeline/batch_sink.py) drives, and what every sink
kind of the registry (sink/registry.py) opens.

Per micro-batch the writer calls `write_rows` (or `write_arrow`) for each table's rows, `flush`,
then `write_ddl` for the batch's DDL and `flush` again, then `write_checkpoint(end)`; `close` when
the changefeed stops. A sink makes its writes durable by the `flush` before the checkpoint (the
checkpoint is the resume point), and takes a replayed batch again without harm: delivery is
at-least-once. A sink may take some tables' rows in binlog order instead (`keeps_binlog_order`,
`write_ordered`, before the `flush`): the MySQL sink, for tables linked by cascading foreign keys.
A sink may hold rows across batches (`holds_rows`: the storage sink with `flush-interval`, as
TiCDC's): the writer then skips the first `flush` unless the batch has DDL, snapshot chunks or
reaches the changefeed's target-ts, and records the checkpoint `write_checkpoint` returns, 0 while
the rows are held.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Sequence

from sparkcdc.model.events import DDLEvent, OrderedTransaction, RowChange, TableInfo

if TYPE_CHECKING:  # the batch writer's columnar path hands Arrow arrays; a sink need not load pyarrow
    import pyarrow as pa


class Sink(ABC):
    """A changefeed's sink. Rows come per table, as whole transactions in (commit_ts, seq) order,
    already netted (and split or filtered as the changefeed says)."""

    @property
    def accepts_arrow(self) -> bool:
        """Whether `write_arrow` takes rows given as Arrow columns (the batch writer's columnar
        path); False by default, and the writer then hands every row as a RowChange."""
        return False

    @property
    def marks_snapshot_rows(self) -> bool:
        """Whether the sink's output tells snapshot rows (RowChange.snapshot) from inserts
        (Debezium's op "r"); then the batch writer hands them as RowChanges. False by default."""
        return False

    def set_snapshot_tables(self, tables: frozenset[tuple[str, str]]) -> None:
        """The tables whose initial snapshot is still being copied (pipeline/snapshot.py): their
        rows may meet rows already downstream in any state (a chunk's insert of a row an earlier
        change inserted, a key moved into a copied chunk), so a sink that can write idempotently
        (MySQL: split updates, REPLACE) does so for them. Nothing to do by default."""

    @abstractmethod
    def write_rows(self, table: TableInfo, rows: Sequence[RowChange]) -> None: ...

    def write_arrow(self, table: TableInfo, commit_ts: "pa.Int64Array", ops: "pa.StringArray",
                    before: "pa.ListArray", after: "pa.ListArray") -> None:
        """`write_rows` for rows as Arrow columns (model.change_batch's commit_ts, op, before and
        after of one table version's whole transactions): the same output. Only when
        `accepts_arrow`."""
        raise NotImplementedError(f"{type(self).__name__} does not take Arrow columns")

    def keeps_binlog_order(self, table: TableInfo) -> bool:
        """Whether `table`'s rows must come through `write_ordered`, not netted or split: every
        row event in binlog order, across such tables. False by default."""
        return False

    def write_ordered(self, transactions: Sequence[OrderedTransaction]) -> None:
        """The rows of `keeps_binlog_order` tables, as whole upstream transactions in commit
        order (model.events.OrderedTransaction). Only when `keeps_binlog_order` said so."""
        raise NotImplementedError(f"{type(self).__name__} keeps no table in binlog order")

    @abstractmethod
    def write_ddl(self, ddl: DDLEvent) -> None: ...

    @property
    def bytes_written(self) -> int:
        """Bytes sent downstream since the sink opened (encoded messages, file contents, SQL
        text, Arrow data handed to a table format): the sink's own running count, read by the
        batch writer once per batch for `ticdc_sink_write_bytes_total`. Every sink kind of the
        registry counts; 0 only for test sinks."""
        return 0

    @property
    def holds_rows(self) -> bool:
        """Whether the sink keeps rows across batches and decides in `write_checkpoint` when to
        write them (module docstring). False by default: every batch is flushed."""
        return False

    @abstractmethod
    def flush(self) -> None:
        """Everything written so far is durable downstream when this returns."""

    @abstractmethod
    def write_checkpoint(self, ts: int) -> int:
        """Every change up to `ts` has been handed over (after `flush`, unless `holds_rows`).
        Returns the checkpoint now durable downstream: `ts`, or 0 when a sink that holds rows
        kept them (the changefeed's checkpoint then stays where it was)."""

    def close(self) -> None:
        """Release connections and threads; nothing to release by default."""

    def __enter__(self) -> "Sink":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
