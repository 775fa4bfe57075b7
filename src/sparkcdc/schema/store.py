"""The multi-version schema store: every table's definition over commit-ts, evolved from DDL text.

The store is bootstrapped once, from information_schema, at the index's start point, and persisted
with the index; afterwards it never reads the upstream's current schema again (which may already
reflect later DDLs). Each DDL is parsed and applied to the previous definitions; the result is a new
version of every table it touches, keyed by the DDL's commit-ts (TiCDC's schema_storage.go).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from typing import Optional

from sparkcdc.model.events import DDLEvent, TableInfo
from sparkcdc.schema import ddl_types as T
from sparkcdc.schema.catalog import Catalog, SchemaApplyError, TableDef, apply_ddl
from sparkcdc.schema.parser import (
    ConvertPartition,
    ConvertTable,
    DDLParseError,
    ExchangePartition,
    MovesRows,
    ParsedDDL,
    TableName,
    guess_target,
    looks_like_ddl,
    parse,
    quote_identifier,
)

log = logging.getLogger(__name__)


@dataclass
class DDLOutcome:
    """A DDL as the puller records it: the event, new table versions, new database versions."""

    event: DDLEvent
    tables: dict[tuple[str, str], Optional[TableDef]] = field(default_factory=dict)
    databases: dict[str, Optional[str]] = field(default_factory=dict)


def is_ddl(query: str) -> bool:
    """Whether a standalone Query event is a schema statement the store must see."""
    return looks_like_ddl(query)


class SchemaStore:
    """The newest catalog, as the puller advances; versions go to the TxnIndex."""

    def __init__(self, catalog: Catalog):
        self.catalog = catalog

    @classmethod
    def from_index(cls, index, ts: int) -> "SchemaStore":
        """The catalog persisted in the index as of `ts` (a restart: nothing is re-read upstream)."""
        server_charset, databases, tables = index.schema_at(ts)
        catalog = Catalog(server_charset or "utf8mb4", databases, {})
        for info, definition in tables:
            if definition:
                table = TableDef.from_json(definition)
            else:
                table = TableDef.from_table_info(info, catalog.database_charset(info.schema))
            catalog.tables[(info.schema, info.table)] = table
        return cls(catalog)

    def table(self, schema: str, table: str) -> Optional[TableDef]:
        return self.catalog.tables.get((schema, table))

    def apply(self, query: str, default_schema: str, commit_ts: int, position: str) -> DDLOutcome:
        """Parse and apply one DDL. A DDL the store cannot follow becomes an `unparseable` event
        carrying the error and binlog position; the catalog is left as it was."""
        where = f"DDL at {position} (commit-ts {commit_ts})"
        try:
            parsed = parse(query, default_schema)
        except DDLParseError as exc:
            return self._failed(query, default_schema, commit_ts, position, f"cannot parse: {exc}")
        except Exception as exc:  # a gap in the parser must stop the changefeed, not the puller
            return self._failed(query, default_schema, commit_ts, position,
                                f"cannot parse: {type(exc).__name__}: {exc}")
        working = self.catalog.copy()
        pre = {key: working.tables.get(key) for key in _touched(parsed)}
        try:
            change = apply_ddl(working, parsed, where)
        except SchemaApplyError as exc:
            return self._failed(query, default_schema, commit_ts, position, str(exc), parsed.ddl_type)
        self.catalog = working
        return DDLOutcome(self._event(parsed, query, default_schema, commit_ts, pre), change.tables, change.databases)

    def _failed(self, query: str, default_schema: str, commit_ts: int, position: str, error: str,
                parsed_type: str = "") -> DDLOutcome:
        log.error("schema store cannot follow the DDL at %s: %s: %s", position, error, query)
        extra = {"error": error, "position": position}
        if parsed_type:
            extra["parsed_type"] = parsed_type
        schema, table = default_schema, ""
        target = guess_target(query, default_schema)
        if target is not None:  # lets a changefeed whose filter excludes it go on (rules.py)
            schema, table = target.schema, target.table
            extra["target_known"] = True
        return DDLOutcome(DDLEvent(commit_ts, schema, table, query, T.UNPARSEABLE, extra=extra))

    def _event(self, parsed: ParsedDDL, query: str, default_schema: str, commit_ts: int,
               pre: dict[tuple[str, str], Optional[TableDef]]) -> DDLEvent:
        def info(table: Optional[TableDef]) -> Optional[TableInfo]:
            return table.info(commit_ts) if table is not None else None

        extra: dict = {}
        schema, table = parsed.schema, ""
        table_info = pre_table_info = None
        if parsed.ddl_type in T.DATABASE_DDLS or parsed.kind == "other":
            pass
        elif parsed.renames_tables:
            pairs = parsed.rename_pairs
            extra["renames"] = [[o.schema, o.table, n.schema, n.table] for o, n in pairs]
            steps = _rename_steps(pairs, pre)
            old, new = pairs[0]
            schema, table = new.schema, new.table
            pre_table_info = info(steps[0][0])
            table_info = info(self.catalog.tables.get((new.schema, new.table)) if len(pairs) == 1 else steps[0][1])
            if len(pairs) > 1:
                extra["parts"] = [
                    _part(n.schema, n.table, f"RENAME TABLE {o} TO {n}", info(after), info(before),
                          rename=[o.schema, o.table, n.schema, n.table])
                    for (o, n), (before, after) in zip(pairs, steps)
                ]
        elif parsed.tables:
            first = parsed.tables[0]
            schema, table = first.schema, first.table
            pre_table_info = info(pre.get((first.schema, first.table)))
            table_info = info(self.catalog.tables.get((first.schema, first.table)))
            if len(parsed.tables) > 1:
                extra["tables"] = [[t.schema, t.table] for t in parsed.tables]
            if parsed.kind == "drop table" and len(parsed.tables) > 1:
                # One event per table, as TiDB runs one job per table: each gets its own allow-list check.
                exists = "IF EXISTS " if parsed.if_exists else ""
                extra["parts"] = [
                    _part(t.schema, t.table, f"DROP TABLE {exists}{t}", None, info(pre.get((t.schema, t.table))))
                    for t in parsed.tables
                    if pre.get((t.schema, t.table)) is not None
                ]
        moves = parsed.moves_rows
        if moves is not None:
            # The other table: its own new version (storage writes its schema file too), the
            # filter rule for both (rules.py), and a query that names both tables in full.
            other = moves.table
            extra["partner"] = [other.schema, other.table]
            partner = self.catalog.tables.get((other.schema, other.table))
            if partner is not None:
                extra["partner_table_info"] = info(partner).to_json()
            extra["upstream_query"] = query
            query = _qualified_query(parsed.tables[0], moves)
        if parsed.like is not None:
            # Cross-database CREATE ... LIKE: qualify every name so the downstream resolves them alike.
            exists = "IF NOT EXISTS " if parsed.if_not_exists else ""
            extra["upstream_query"] = query
            query = f"CREATE TABLE {exists}{parsed.tables[0]} LIKE {parsed.like}"
        extra["default_schema"] = default_schema
        return DDLEvent(commit_ts, schema, table, query, parsed.ddl_type, table_info, pre_table_info, extra)


def _part(schema: str, table: str, query: str, table_info: Optional[TableInfo], pre_table_info: Optional[TableInfo],
          rename: Optional[list[str]] = None) -> dict:
    """One table's share of a multi-table DDL, stored in the event's extra (JSON) until it is split."""
    part = {
        "schema": schema,
        "table": table,
        "query": query,
        "table_info": table_info.to_json() if table_info else None,
        "pre_table_info": pre_table_info.to_json() if pre_table_info else None,
    }
    if rename is not None:
        part["rename"] = rename
    return part


def _rename_steps(pairs: list[tuple[TableName, TableName]], pre: dict[tuple[str, str], Optional[TableDef]]
                  ) -> list[tuple[Optional[TableDef], Optional[TableDef]]]:
    """Each step of a multi-table RENAME with its table before and after it, the steps applied in
    order: `a TO tmp, b TO a, tmp TO b` moves a's definition through tmp into b."""
    names = dict(pre)
    steps = []
    for old, new in pairs:
        before = names.pop((old.schema, old.table), None)
        after = replace(before, schema=new.schema, table=new.table) if before is not None else None
        names[(new.schema, new.table)] = after
        steps.append((before, after))
    return steps


def _qualified_query(table: TableName, moves: MovesRows) -> str:
    """EXCHANGE / CONVERT with both tables named in full, as TiCDC rewrites EXCHANGE PARTITION: the
    sink runs it in the altered table's database, where an unqualified other table would resolve
    to a different table than upstream."""
    if isinstance(moves, ExchangePartition):
        validation = f" {moves.validation}" if moves.validation else ""
        return (f"ALTER TABLE {table} EXCHANGE PARTITION {quote_identifier(moves.partition)} "
                f"WITH TABLE {moves.table}{validation}")
    if isinstance(moves, ConvertPartition):
        return f"ALTER TABLE {table} CONVERT PARTITION {quote_identifier(moves.partition)} TO TABLE {moves.table}"
    assert isinstance(moves, ConvertTable)
    return f"ALTER TABLE {table} CONVERT TABLE {moves.table} TO {moves.definition}"


def split_ddl(ddl: DDLEvent) -> list[DDLEvent]:
    """`DROP TABLE a, b` and `RENAME TABLE a TO b, c TO d` as one event per table, all at the DDL's
    commit-ts (TiCDC's BuildDDLEvents); any other DDL as itself."""
    parts = ddl.extra.get("parts")
    if not parts:
        return [ddl]
    base = {k: v for k, v in ddl.extra.items() if k not in ("parts", "tables", "renames")}
    events = []
    for part in parts:
        extra = {**base, "upstream_query": ddl.extra.get("upstream_query", ddl.query)}
        if "rename" in part:
            extra["renames"] = [part["rename"]]
        events.append(DDLEvent(
            ddl.commit_ts, part["schema"], part["table"], part["query"], ddl.ddl_type,
            TableInfo.from_json(part["table_info"]) if part["table_info"] else None,
            TableInfo.from_json(part["pre_table_info"]) if part["pre_table_info"] else None,
            extra,
        ))
    return events


def _touched(parsed: ParsedDDL) -> list[tuple[str, str]]:
    return [(t.schema, t.table) for t in parsed.tables]
