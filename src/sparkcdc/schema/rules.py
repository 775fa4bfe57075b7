"""Which DDLs a changefeed replicates: TiCDC's allow list with the valid-index rules, the RENAME
TABLE rules under table filters, and what happens to a DDL the schema store could not follow."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable, Optional

from sparkcdc.errors import ErrDDLUnparseable, ErrRenameTableNotSupported, SparkCDCError
from sparkcdc.model.events import DDLEvent
from sparkcdc.schema import ddl_types as T
from sparkcdc.schema.store import split_ddl

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DDLPolicy:
    force_replicate: bool = False
    # Skip DDLs the schema store could not parse/apply instead of stopping the changefeed.
    skip_unparseable: bool = False


def replicated_ddls(
    ddl: DDLEvent, table_filter: Callable[[str, str], bool], policy: DDLPolicy = DDLPolicy()
) -> list[DDLEvent]:
    """The events `ddl` sends to the sink: multi-table DROP/RENAME become one event per table
    (each held against the allow list with its own table), a multi-table RENAME first passes
    TiCDC's rule for the whole statement. Raises like `should_replicate`."""
    parts = split_ddl(ddl)
    if len(parts) == 1:
        return parts if should_replicate(parts[0], table_filter, policy) else []
    if ddl.ddl_type == T.RENAME_TABLE and not rename_allowed(ddl, table_filter):
        return []
    return [part for part in parts if should_replicate(part, table_filter, policy)]


def should_replicate(
    ddl: DDLEvent, table_filter: Callable[[str, str], bool], policy: DDLPolicy = DDLPolicy()
) -> bool:
    """Whether `ddl` goes to the sink. Raises for DDLs TiCDC refuses (illegal renames, unparseable)."""
    if ddl.ddl_type == T.UNPARSEABLE:
        where = f"the DDL at binlog {ddl.extra.get('position', '?')} (commit-ts {ddl.commit_ts})"
        if ddl.extra.get("target_known") and not _matches(ddl, table_filter):
            # About a table (or database) this changefeed does not replicate: nothing to follow.
            log.warning("ignoring %s: its schema store could not follow it, but the changefeed's filter "
                        "excludes %s; query: %r", where, f"{ddl.schema}.{ddl.table}".rstrip("."), ddl.query)
            return False
        if policy.skip_unparseable:
            log.error("skip-unparseable-ddl: skipping %s: %s; query: %r", where, ddl.extra.get("error", ""), ddl.query)
            return False
        raise ErrDDLUnparseable(
            f"{where} could not be followed by the schema store: {ddl.extra.get('error', '')}; query: "
            f"{ddl.query!r}. Apply it downstream by hand and recreate the changefeed after it, or set "
            "skip-unparseable-ddl = true in the changefeed config (a sparkcdc-only key) to skip it"
        )
    if ddl.ddl_type == T.RENAME_TABLE and ddl.extra.get("renames"):
        if not rename_allowed(ddl, table_filter):
            return False
    elif not _matches(ddl, table_filter):
        return False
    if ddl.ddl_type in T.DATABASE_DDLS:
        return T.is_allowed(ddl.ddl_type, True, policy.force_replicate)
    info = ddl.table_info or ddl.pre_table_info
    # Without a recorded definition there is nothing to hold against the table.
    return T.is_allowed(ddl.ddl_type, info is None or info.has_valid_index, policy.force_replicate)


def _matches(ddl: DDLEvent, table_filter: Callable[[str, str], bool]) -> bool:
    return table_filter(ddl.schema, ddl.table)


def rename_allowed(ddl: DDLEvent, table_filter: Callable[[str, str], bool]) -> bool:
    """TiCDC's RENAME TABLE rules (docs ticdc-ddl.md): replicate, ignore, or raise."""
    renames = [tuple(r) for r in ddl.extra.get("renames", ())]
    if len(renames) == 1:
        old_schema, old_table, new_schema, new_table = renames[0]
        if table_filter(old_schema, old_table):
            return True
        if table_filter(new_schema, new_table):
            raise ErrRenameTableNotSupported(
                f"RENAME TABLE {old_schema}.{old_table} TO {new_schema}.{new_table}: the new name matches the "
                "filter but the old one does not, so its data was never replicated. Add the old table to the "
                "filter rules or remove the new one, then recreate the changefeed"
            )
        return False
    olds = [(r[0], r[1]) for r in renames]
    news = [(r[2], r[3]) for r in renames]
    if set(olds) & set(news):
        raise ErrRenameTableNotSupported(
            f"{ddl.query!r} swaps table names in one statement, which cannot be replicated correctly. "
            "Run the renames as separate statements, or pause the changefeed, apply it downstream by hand "
            "and resume after it"
        )
    if not any(table_filter(s, t) for s, t in olds) and not any(table_filter(s, t) for s, t in news):
        return False
    for (old_schema, old_table), (new_schema, _) in zip(olds, news):
        if not table_filter(old_schema, old_table) or not _schema_matches(table_filter, new_schema, old_table):
            raise ErrRenameTableNotSupported(
                f"{ddl.query!r}: a multi-table RENAME is replicated only when every old database, old table "
                f"and new database match the filter ({old_schema}.{old_table} -> {new_schema} does not). "
                "Rename the tables one by one, or adjust the filter rules"
            )
    return True


def _schema_matches(table_filter: Callable[[str, str], bool], schema: str, table: str) -> bool:
    """Whether the new database matches: some table name in it is replicated (the old name is our probe)."""
    return table_filter(schema, table)


def ddl_error(exc: BaseException) -> Optional[SparkCDCError]:
    return exc if isinstance(exc, SparkCDCError) else None
