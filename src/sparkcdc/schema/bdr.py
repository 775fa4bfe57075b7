"""Which DDLs a bdr-mode changefeed replicates: TiCDC's BDR roles (docs/bidirectional-replication.md).

TiDB sorts the DDLs TiCDC replicates into replicable ones, which cannot make two primaries that
both take writes disagree (new databases, tables and views, nullable or defaulted columns,
non-unique indexes, defaults, comments, dropped indexes), and non-replicable ones, which drop,
rename, retype or constrain what the other primary may be writing at that moment. The cluster's
BDR role (ADMIN SET BDR ROLE) then refuses DDLs at the source: a PRIMARY runs only replicable
DDLs, and TiCDC replicates them; a SECONDARY runs none; with no role every DDL runs and a
bdr-mode changefeed replicates none (the user runs it on each cluster).

MariaDB has no BDR role and cannot refuse a DDL, so the changefeed does: `bdr-role` in its config
names its upstream's role, and a DDL the role forbids fails the changefeed (ErrBDRDDLRefused, not
retried) once every row before it is downstream and before anything after it is written. A DDL
written by the other primary's sink never gets here: the batch writer drops the marked
transaction it came in, as the source drops marked rows.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from typing import Optional, Sequence

from sparkcdc.errors import ErrBDRDDLRefused
from sparkcdc.model.events import DDLEvent, TableInfo
from sparkcdc.schema import ddl_types as T
from sparkcdc.schema import parser as P

log = logging.getLogger(__name__)

NO_ROLE, PRIMARY, SECONDARY = "", "primary", "secondary"

# TiDB's replicable DDLs whatever their details (ticdc-bidirectional-replication.md).
_REPLICABLE = frozenset({
    T.CREATE_DATABASE, T.CREATE_TABLE, T.CREATE_VIEW, T.DROP_VIEW, T.DROP_INDEX, T.DROP_PRIMARY_KEY,
    T.SET_DEFAULT_VALUE, T.MODIFY_TABLE_COMMENT, T.RENAME_INDEX, T.ADD_PARTITION, T.ALTER_INDEX_VISIBILITY,
    T.ALTER_TTL_INFO, T.ALTER_TTL_REMOVE,
})
# Replicable or not by what they do: ADD COLUMN (nullable, or NOT NULL with a default), ADD INDEX
# (non-unique), MODIFY COLUMN (its default and comment only), and ALTER TABLE with several changes
# (each of them replicable). Every other type is non-replicable.
_BY_DETAIL = frozenset({T.ADD_COLUMN, T.CREATE_INDEX, T.MODIFY_COLUMN, T.MULTI_SCHEMA_CHANGE})
# `AUTO_INCREMENT = n` among other changes: the parser keeps no op for it (alone it is REBASE_AUTO_ID).
_AUTO_INCREMENT_OPTION = re.compile(r"\bAUTO_INCREMENT\s*=?\s*\d", re.IGNORECASE)


def non_replicable_reason(ddl: DDLEvent) -> Optional[str]:
    """Why TiDB counts `ddl` non-replicable in BDR mode, or None when it is replicable."""
    if ddl.ddl_type in _REPLICABLE:
        return None
    if ddl.ddl_type not in _BY_DETAIL:
        return f"{ddl.ddl_type.upper()} is a non-replicable DDL"
    query = ddl.extra.get("upstream_query", ddl.query)
    try:
        parsed = P.parse(query, ddl.extra.get("default_schema", ddl.schema))
    except P.DDLParseError as exc:
        return f"it cannot be told replicable ({exc})"
    if _AUTO_INCREMENT_OPTION.search(query):
        return "it sets AUTO_INCREMENT"
    for op in parsed.ops:
        reason = _op_reason(op, ddl.pre_table_info, ddl.table_info)
        if reason is not None:
            return reason
    return None


def _op_reason(op, before: Optional[TableInfo], after: Optional[TableInfo]) -> Optional[str]:
    """Why one change of an ALTER TABLE is non-replicable, or None."""
    if isinstance(op, P.AddColumn):
        column = op.column
        if column.primary or column.unique or column.auto_increment:
            return f"it adds column {column.name} as a key"
        if column.not_null and column.default is None and not column.generated:
            return f"it adds column {column.name} NOT NULL without a default"
        return None
    if isinstance(op, P.AddIndex):
        if op.index.kind in ("primary", "unique"):
            return f"it adds a {op.index.kind} key"
        return None if op.index.kind in ("index", "fulltext", "spatial") else f"it adds a {op.index.kind} constraint"
    if isinstance(op, P.ChangeColumn):
        return _changed_column_reason(op, before, after)
    if isinstance(op, (P.SetColumnDefault, P.DropIndex, P.RenameIndex)):
        return None
    if isinstance(op, P.SetOptions):
        options = op.options
        if options.charset or options.collation or options.convert:
            return "it changes the table's character set"
        return None
    return f"it has a {type(op).__name__} change"  # drop or rename a column, rename the table, ...


def _changed_column_reason(op: "P.ChangeColumn", before: Optional[TableInfo], after: Optional[TableInfo]) -> Optional[str]:
    """MODIFY/CHANGE COLUMN is replicable when it changes the column's default or comment only."""
    spec = op.column
    if spec.name.lower() != op.old_name.lower():
        return f"it renames column {op.old_name} to {spec.name}"
    if op.position is not None:
        return f"it moves column {spec.name}"
    if spec.primary or spec.unique or spec.auto_increment:
        return f"it makes column {spec.name} a key"
    if before is None or after is None:
        return f"it modifies column {spec.name}, whose definition before and after is unknown"
    try:
        old, new = before.column(op.old_name), after.column(spec.name)
    except KeyError:
        return f"it modifies column {spec.name}, whose definition before and after is unknown"
    if _without_default(old) != _without_default(new):
        return f"it modifies column {spec.name} beyond its default value and comment"
    return None


def _without_default(column):
    return dataclasses.replace(column, default=None, is_primary_key=False, is_unique_key=False)


def bdr_ddls(ddls: Sequence[DDLEvent], role: str) -> list[DDLEvent]:
    """The DDLs (the upstream's own, which the changefeed would replicate) that go downstream under
    the upstream's BDR role; raises ErrBDRDDLRefused for the first one the role forbids."""
    if not ddls:
        return []
    if role == NO_ROLE:
        for ddl in ddls:
            log.info("bdr-mode without a bdr-role: the DDL at %d is not replicated (TiCDC's rule); run it on the "
                     "other primary yourself: %s", ddl.commit_ts, ddl.query)
        return []
    for ddl in ddls:
        if role == SECONDARY:
            raise ErrBDRDDLRefused(
                f"DDL {ddl.query!r} (commit-ts {ddl.commit_ts}) ran on this changefeed's upstream, whose bdr-role is "
                f"\"secondary\": a secondary runs no DDL (TiDB refuses it there with error 8263), only the primary's "
                f"arrive. {_FIX}")
        reason = non_replicable_reason(ddl)
        if reason is not None:
            raise ErrBDRDDLRefused(
                f"DDL {ddl.query!r} (commit-ts {ddl.commit_ts}) ran on this changefeed's upstream, whose bdr-role is "
                f"\"primary\", but {reason}: a primary runs only replicable DDLs (TiDB refuses the others there with "
                f"error 8263). {_FIX}")
    return list(ddls)


_FIX = ("The primaries now differ in this table's schema. To go on (TiCDC's procedure for non-replicable DDLs): "
        "pause both changefeeds, set bdr-role = \"\" on both (`changefeed update`; with no role no DDL is "
        "replicated, so this one is passed over) and resume them, run the same DDL on the other primary yourself "
        "while nothing writes the table, and set the roles back once both changefeeds are past the two DDLs "
        "(docs/bidirectional-replication.md)")
