"""Foreign-key cascades on a MySQL sink.

MariaDB's binlog records a parent row's change only: the child rows InnoDB changes for `ON DELETE
CASCADE`, `ON UPDATE CASCADE` or `SET NULL` are not in it. A replica gets them by running the
same referential actions: it keeps the constraints and applies the parent's change with
foreign_key_checks on, in binlog order. The MySQL sink does the same for the tables that the
downstream's own constraints link to a cascading one (`CascadeGroups`; read from the downstream,
which holds the replicated DDL, and again after every DDL):

- Their rows are not netted or reordered: every row event in binlog order, across tables
  (`Sink.keeps_binlog_order`, `OrderedTransaction`), on one worker at a time (one conflict key).
- A DELETE or UPDATE of a parent row whose change the constraints cascade runs with
  foreign_key_checks on when the upstream ran it so (the binlog's per-event flag, via the
  transaction index); everything else with them off, as the sink always writes.
- They are written exactly once: each upstream transaction commits downstream together with its
  binlog end position and last row in `tidb_cdc.ordered_progress` (keyed by the changefeed), and a
  replay skips what that row says is applied. Replaying instead (the sink's REPLACE and
  delete + insert) would cascade again: REPLACE deletes the parent row, and its children with it.
- Safe mode and a duplicate key (rows a previous changefeed left) write an insert as an upsert
  (`INSERT ... ON DUPLICATE KEY UPDATE`, in place: no delete, no cascade) and an update as itself
  plus an upsert of its after image.

Known limits: a transaction whose row events ran partly with and partly without checks is applied
with checks (logged); sinks without a changefeed identity (the storage and Kafka consumers,
`redo apply`) write these tables like any other, with checks off, so children keep the rows a
cascade removed upstream (docs/mysql-sink.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from sparkcdc.model.events import CASCADING_RULES, FK_CHECKS_OFF, ForeignKey, RowChange, TableInfo
from sparkcdc.model.position import BinlogPosition
from sparkcdc.sink.mysql.sql import (
    PlanOptions,
    Statement,
    delete_row_sql,
    insert_sql,
    update_row_sql,
    upsert_sql,
)

PROGRESS_SCHEMA = "tidb_cdc"
PROGRESS_TABLE = "ordered_progress"
CREATE_PROGRESS_TABLE = f"""CREATE TABLE IF NOT EXISTS {PROGRESS_SCHEMA}.{PROGRESS_TABLE} (
    changefeed VARCHAR(512) NOT NULL PRIMARY KEY,
    binlog_file VARCHAR(255) NOT NULL,
    binlog_pos BIGINT NOT NULL,
    seq BIGINT NOT NULL,
    commit_ts BIGINT NOT NULL
)"""
_WRITE_PROGRESS = (
    f"INSERT INTO {PROGRESS_SCHEMA}.{PROGRESS_TABLE} (changefeed, binlog_file, binlog_pos, seq, commit_ts) "
    "VALUES (?, ?, ?, ?, ?) ON DUPLICATE KEY UPDATE binlog_file = VALUES(binlog_file), "
    "binlog_pos = VALUES(binlog_pos), seq = VALUES(seq), commit_ts = VALUES(commit_ts)")
READ_PROGRESS = (f"SELECT binlog_file, binlog_pos, seq FROM {PROGRESS_SCHEMA}.{PROGRESS_TABLE} "
                 "WHERE changefeed = %s")
CHECKS_ON = Statement("SET foreign_key_checks = 1", (), 0)
CHECKS_OFF = Statement("SET foreign_key_checks = 0", (), 0)


class CascadeGroups:
    """The tables linked (through any foreign key) to a cascading one, and which of them are
    parents whose DELETE or UPDATE the constraints cascade."""

    def __init__(self, foreign_keys: Sequence[ForeignKey]):
        parent: dict[tuple[str, str], tuple[str, str]] = {}

        def root(table: tuple[str, str]) -> tuple[str, str]:
            while parent.setdefault(table, table) != table:
                table = parent[table]
            return table

        for fk in foreign_keys:
            parent[root((fk.schema, fk.table))] = root((fk.parent_schema, fk.parent_table))
        cascading_roots = {root((fk.schema, fk.table)) for fk in foreign_keys if fk.cascades}
        self._ordered = frozenset(table for table in parent if root(table) in cascading_roots)
        self._cascade_on = {
            "delete": frozenset((fk.parent_schema, fk.parent_table) for fk in foreign_keys
                                if fk.on_delete in CASCADING_RULES),
            "update": frozenset((fk.parent_schema, fk.parent_table) for fk in foreign_keys
                                if fk.on_update in CASCADING_RULES),
        }

    def ordered(self, schema: str, table: str) -> bool:
        return (schema, table) in self._ordered

    def cascades(self, table: TableInfo, op: str) -> bool:
        """Whether the constraints cascade a row `op` of `table` to other rows."""
        return (table.schema, table.table) in self._cascade_on.get(op, frozenset())


@dataclass(frozen=True)
class Progress:
    """How far a changefeed's ordered transactions are downstream: every row up to row `seq` of
    the transaction that ends at `position`."""

    position: BinlogPosition
    seq: int

    def pending(self, end_position: BinlogPosition, changes: Sequence[tuple[TableInfo, RowChange]]) -> list:
        """The changes of a transaction ending at `end_position` that are not downstream yet."""
        if end_position.file.rsplit(".", 1)[0] != self.position.file.rsplit(".", 1)[0]:
            return list(changes)  # another binlog series: not comparable, nothing known to be applied
        if end_position.key() < self.position.key():
            return []
        if end_position.key() == self.position.key():
            return [change for change in changes if change[1].seq > self.seq]
        return list(changes)


@dataclass(frozen=True)
class OrderedWork:
    """One upstream transaction's pending ordered changes, as one downstream transaction."""

    changefeed: str
    commit_ts: int
    end_position: BinlogPosition
    foreign_key_checks: str
    changes: tuple[tuple[TableInfo, RowChange], ...]
    groups: CascadeGroups

    def __len__(self) -> int:
        return len(self.changes)

    def plan(self, options: PlanOptions) -> list[Statement]:
        """Every change in order (`options.split_updates`: written idempotently), then the progress."""
        checks = self.foreign_key_checks != FK_CHECKS_OFF
        statements = plan_in_order(self.changes, options,
                                   lambda table, op: checks and self.groups.cascades(table, op))
        last = self.changes[-1][1].seq
        statements.append(Statement(_WRITE_PROGRESS, (self.changefeed, self.end_position.file,
                                                      self.end_position.pos, last, self.commit_ts)))
        return statements


def plan_in_order(changes: Sequence[tuple[TableInfo, RowChange]], options: PlanOptions, cascades) -> list[Statement]:
    """Statements that apply `changes` one at a time in their order, as a replica applies row
    events; consecutive inserts into one table share a multi-row INSERT (up to max-txn-row). A
    change for which `cascades(table, op)` holds runs with foreign_key_checks on. Idempotent
    (`options.split_updates`): an insert overwrites a row with its key in place and an update
    also upserts its after image; nothing is deleted that the upstream did not delete."""
    statements: list[Statement] = []
    inserts: list = []
    insert_table: TableInfo | None = None
    limit = options.max_txn_row if options.batch_dml else 1

    def flush_inserts() -> None:
        for start in range(0, len(inserts), limit):
            chunk = inserts[start:start + limit]
            statements.append(upsert_sql(insert_table, chunk) if options.split_updates
                              else insert_sql(insert_table, chunk))
        inserts.clear()

    for table, row in changes:
        if row.op == "insert":
            if inserts and table is not insert_table and table != insert_table:
                flush_inserts()
            insert_table = table
            inserts.append(row.after)
            continue
        flush_inserts()
        statement = (delete_row_sql(table, row.before) if row.op == "delete"
                     else update_row_sql(table, row.before, row.after))
        checked = cascades(table, row.op)
        statements += [CHECKS_ON, statement, CHECKS_OFF] if checked else [statement]
        if row.op == "update" and options.split_updates:
            statements.append(upsert_sql(table, [row.after]))
    flush_inserts()
    return statements
