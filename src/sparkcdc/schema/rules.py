"""Which DDLs a changefeed replicates: TiCDC's allow list with the valid-index rules, the RENAME
TABLE rules under table filters, the rule for partition DDLs that move rows between two tables
(EXCHANGE PARTITION, MariaDB's CONVERT PARTITION/TABLE), and what happens to a DDL the schema
store could not follow."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable, Optional

from sparkcdc.errors import ErrDDLUnparseable, ErrExchangePartition, ErrRenameTableNotSupported, SparkCDCError
from sparkcdc.model.events import DDLEvent
from sparkcdc.schema import ddl_types as T
from sparkcdc.schema.store import split_ddl

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DDLPolicy:
    force_replicate: bool = False
    # Skip DDLs the schema store could not parse/apply instead of stopping the changefeed.
    skip_unparseable: bool = False
    # bdr-mode: the peer's DDLs are dropped, the upstream's own go by its BDR role (schema/bdr.py).
    bdr_mode: bool = False
    bdr_role: str = ""


def replicated_ddls(
    ddl: DDLEvent, table_filter: Callable[[str, str], bool], policy: DDLPolicy = DDLPolicy()
) -> list[DDLEvent]:
    """The events `ddl` sends to the sink: multi-table DROP/RENAME become one event per table
    (each held against the allow list with its own table), a multi-table RENAME first passes
    TiCDC's rule for the whole statement. Raises like `should_replicate`."""
    parts = split_ddl(ddl)
    if len(parts) == 1:
        return parts if should_replicate(parts[0], table_filter, policy) else []
    if ddl.ddl_type == T.RENAME_TABLE:
        # The filter judged the whole statement; each step goes downstream in order (a swap's
        # temporary name need not match the filter), held against the allow list on its own.
        if not rename_allowed(ddl, table_filter):
            return []
        return [part for part in parts if _allowed(part, policy)]
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
    elif ddl.extra.get("partner"):
        if not rows_move_within_filter(ddl, table_filter):
            return False
    elif not _matches(ddl, table_filter):
        return False
    return _allowed(ddl, policy)


def _allowed(ddl: DDLEvent, policy: DDLPolicy) -> bool:
    """The allow list's answer for a DDL the filter lets through."""
    if ddl.ddl_type in T.DATABASE_DDLS:
        return T.is_allowed(ddl.ddl_type, True, policy.force_replicate)
    if ddl.ddl_type == T.RENAME_TABLE and ddl.table_info is None and ddl.pre_table_info is None:
        return False  # a SEQUENCE or TEMPORARY table: the store never followed it, the sink never had it
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
    moves = net_renames(renames)
    if not any(table_filter(o[0], o[1]) or table_filter(n[0], n[1]) for o, n in moves):
        return False
    for (old_schema, old_table), (new_schema, new_table) in moves:
        if not table_filter(old_schema, old_table):
            raise ErrRenameTableNotSupported(
                f"{ddl.query!r} moves {old_schema}.{old_table} to {new_schema}.{new_table}, but the old name is "
                "outside the changefeed's filter, so its rows never reached the sink while the statement's other "
                "tables are replicated. Add the old table to the filter rules (or remove the others), or rename "
                "the tables one by one, then recreate the changefeed")
        if not _schema_matches(table_filter, new_schema, old_table):
            raise ErrRenameTableNotSupported(
                f"{ddl.query!r} moves {old_schema}.{old_table} into database {new_schema}, which is outside the "
                "changefeed's filter: a multi-table RENAME is replicated only when every old table and new "
                "database match it (TiCDC's rule). Add the database to the filter rules, or rename the tables "
                "one by one, then recreate the changefeed")
    return True


def net_renames(renames: list[tuple]) -> list[tuple[tuple[str, str], tuple[str, str]]]:
    """What a multi-table RENAME does, its steps applied in order: (old name, new name) of every
    table it moves. A name a step takes and a later step frees again (`a TO tmp, b TO a, tmp TO
    b`) is only passed through, so it does not count: that swap moves a to b and b to a."""
    origin: dict[tuple[str, str], tuple[str, str]] = {}
    for old_schema, old_table, new_schema, new_table in renames:
        source = origin.pop((old_schema, old_table), (old_schema, old_table))
        origin[(new_schema, new_table)] = source
    return [(source, name) for name, source in origin.items()]


def rows_move_within_filter(ddl: DDLEvent, table_filter: Callable[[str, str], bool]) -> bool:
    """EXCHANGE PARTITION and CONVERT PARTITION/TABLE move rows between two tables with no row
    events: replicated when both tables match the filter, ignored when neither does. When only
    one does, the downstream cannot follow (the other table's rows never reached it)."""
    partner_schema, partner_table = ddl.extra["partner"]
    ours, theirs = table_filter(ddl.schema, ddl.table), table_filter(partner_schema, partner_table)
    if ours and theirs:
        return True
    if not ours and not theirs:
        return False
    inside, outside = ((ddl.schema, ddl.table), (partner_schema, partner_table))[:: 1 if ours else -1]
    raise ErrExchangePartition(
        f"{ddl.query!r} moves rows between {inside[0]}.{inside[1]}, which the changefeed replicates, and "
        f"{outside[0]}.{outside[1]}, which its filter excludes: those rows never reached the sink, and the "
        "statement has no row events to replay. Add both tables to the filter rules (or neither) and recreate "
        "the changefeed, or apply the change downstream by hand and resume after it")


def _schema_matches(table_filter: Callable[[str, str], bool], schema: str, table: str) -> bool:
    """Whether the new database matches: some table name in it is replicated (the old name is our probe)."""
    return table_filter(schema, table)


def ddl_error(exc: BaseException) -> Optional[SparkCDCError]:
    return exc if isinstance(exc, SparkCDCError) else None
