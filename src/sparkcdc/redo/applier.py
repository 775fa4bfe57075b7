"""`sparkcdc redo apply`: replay the redo log into a MySQL downstream (TiCDC's RedoApplier).

Rows and DDLs with checkpoint-ts < commit-ts <= resolved-ts are applied per table in commit
order through a MySQL sink that writes idempotently (safe mode: updates as delete + REPLACE),
so a downstream left anywhere between the checkpoint and the resolved-ts (a batch half applied,
rows written twice) ends exactly at the upstream's state as of the resolved-ts. Updates that
change a primary or unique key become a delete plus an insert deferred to after every delete and
update of the same transaction (TiCDC's updateEventSplitter), so swapped keys never collide.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Iterable, Optional, Protocol, Sequence

from sparkcdc.model.events import DDLEvent, RowChange, TableInfo
from sparkcdc.observability.progress import Progress
from sparkcdc.redo.format import RedoMeta
from sparkcdc.redo.reader import DDLStep, RowStep, Step

log = logging.getLogger(__name__)


class ApplySink(Protocol):
    def write_rows(self, table: TableInfo, rows: Sequence[RowChange]) -> None: ...
    def write_ddl(self, ddl: DDLEvent) -> None: ...
    def flush(self) -> None: ...


@dataclass(frozen=True)
class ApplyResult:
    checkpoint_ts: int
    resolved_ts: int
    rows: int
    ddls: int


def _key_columns(info: TableInfo) -> list[int]:
    return [i for i, column in enumerate(info.columns) if column.is_primary_key or column.is_unique_key]


def split_updates_for_apply(info: TableInfo, rows: Sequence[RowChange]) -> list[RowChange]:
    """Key-changing updates as delete + deferred insert: per transaction, deletes and other
    updates first (in order), then inserts and the deferred ones (in order)."""
    keys = _key_columns(info)
    result: list[RowChange] = []
    deferred: list[RowChange] = []
    current_ts = None
    for row in rows:
        if row.commit_ts != current_ts:
            result.extend(deferred)
            deferred = []
            current_ts = row.commit_ts
        if row.op == "insert":
            deferred.append(row)
        elif row.op == "update" and any(row.before[i] != row.after[i] for i in keys):
            result.append(RowChange(row.commit_ts, row.schema, row.table, "delete", before=row.before, seq=row.seq))
            deferred.append(RowChange(row.commit_ts, row.schema, row.table, "insert", after=row.after, seq=row.seq))
        else:
            result.append(row)
    result.extend(deferred)
    return result


def apply_steps(steps: Iterable[Step], sink: ApplySink, meta: RedoMeta,
                progress: Optional[Progress] = None) -> ApplyResult:
    """Apply every step in order; `progress` is advanced per step by its rows."""
    rows = ddls = 0
    for step in steps:
        if isinstance(step, RowStep):
            sink.write_rows(step.info, split_updates_for_apply(step.info, step.rows))
            rows += len(step.rows)
            if progress is not None:
                progress.advance(len(step.rows))
        elif isinstance(step, DDLStep):
            sink.flush()  # every row before the DDL is downstream first
            sink.write_ddl(step.ddl)
            ddls += 1
    sink.flush()
    if progress is not None:
        progress.finish()
    log.info("redo apply finished: %d row changes and %d DDLs in (%d, %d]", rows, ddls, meta.checkpoint_ts,
             meta.resolved_ts)
    return ApplyResult(meta.checkpoint_ts, meta.resolved_ts, rows, ddls)
