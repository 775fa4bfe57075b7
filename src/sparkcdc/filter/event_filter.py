"""Event filters (`[[filter.event-filters]]`): drop chosen DML and DDL events of matched tables.

A rule applies to tables its `matcher` selects (table-filter syntax, without the system-schema
rule). It ignores an event when the event's type is in `ignore-event` (`all dml`, `all ddl`, a
DML op or a DDL type as in DDLEvent.ddl_type), when a DDL's text matches an `ignore-sql` regex,
or when a row's value expression for its op is true: inserts test the new values, deletes the
old ones, updates are dropped when either the new-value or the old-value expression is true
(TiCDC's pkg/filter sql_event_filter.go and expr_filter.go). Rows are filtered after key
updates were split, so a split update is filtered as a delete and an insert.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional, Sequence

from sparkcdc.errors import ErrFilterRuleInvalid, ErrInvalidIgnoreEventType
from sparkcdc.filter.expression import BoundExpression, Expression, compile_expression
from sparkcdc.filter.table_filter import TableFilter
from sparkcdc.model.events import DDLEvent, RowChange, TableInfo

DML_EVENT_TYPES = ("insert", "update", "delete")
# TiCDC's supported DDL event types (pkg/filter ddlWhiteListMap and binlog-filter names).
DDL_EVENT_TYPES = (
    "create database", "drop database", "create schema", "drop schema",
    "create table", "drop table", "truncate table", "rename table", "recover table",
    "create index", "drop index", "add index", "rename index", "alter index visibility",
    "add column", "drop column", "modify column", "set default value", "alter table",
    "modify table comment", "modify table charset and collate", "modify schema charset and collate",
    "alter database", "add primary key", "drop primary key", "rebase auto id",
    "add table partition", "drop table partition", "truncate table partition",
    "exchange table partition", "reorganize table partition", "alter table partitioning",
    "remove table partitioning", "create view", "drop view", "multi schema change",
    "add full text index", "create sequence", "drop sequence",
)
SUPPORTED_EVENT_TYPES = ("all dml", "all ddl") + DML_EVENT_TYPES + DDL_EVENT_TYPES
_DML_IGNORES = frozenset({"all dml", *DML_EVENT_TYPES})

# `alter table` in ignore-event covers the ALTER TABLE sub-kinds TiCDC reports separately
# (pkg/filter/utils.go alterTableSubType: renames and the partition DDLs too).
_ALTER_TABLE_KINDS = frozenset({
    "alter table", "add column", "drop column", "modify column", "set default value",
    "create index", "drop index", "add index", "rename index", "alter index visibility",
    "add primary key", "drop primary key", "modify table comment",
    "modify table charset and collate", "rebase auto id", "multi schema change", "rename table",
    "add table partition", "drop table partition", "truncate table partition", "exchange table partition",
    "reorganize table partition", "alter table partitioning", "remove table partitioning",
})
_ALIASES = {"create schema": "create database", "drop schema": "drop database"}

_EXPRESSION_KEYS = ("ignore_insert_value_expr", "ignore_update_new_value_expr",
                    "ignore_update_old_value_expr", "ignore_delete_value_expr")


@dataclass(frozen=True)
class _CompiledRule:
    matcher: TableFilter
    ignore_events: frozenset[str]
    ignore_sql: Optional[re.Pattern]
    insert: Optional[Expression]
    update_new: Optional[Expression]
    update_old: Optional[Expression]
    delete: Optional[Expression]

    @property
    def has_expressions(self) -> bool:
        return any((self.insert, self.update_new, self.update_old, self.delete))

    def ignores_ddl_type(self, ddl_type: str) -> bool:
        ddl_type = _ALIASES.get(ddl_type, ddl_type)
        if "all ddl" in self.ignore_events or ddl_type in self.ignore_events:
            return True
        return "alter table" in self.ignore_events and ddl_type in _ALTER_TABLE_KINDS


def _compile_rule(rule, position: int, case_sensitive: bool, style_key) -> _CompiledRule:
    where = f"filter.event-filters[{position}]"
    if not rule.matcher:
        raise ErrFilterRuleInvalid(f"`{where}.{style_key('matcher')}` is empty; list the tables "
                                      "the rule applies to, e.g. [\"db.*\"]")
    matcher = TableFilter(rule.matcher, case_sensitive, where=f"{where}.{style_key('matcher')}")
    events = set()
    for index, name in enumerate(rule.ignore_event):
        normalized = " ".join(name.lower().split())
        if normalized not in SUPPORTED_EVENT_TYPES:
            raise ErrInvalidIgnoreEventType(
                f"`{where}.{style_key('ignore_event')}[{index}]` is {name!r}; 'ignore-event' accepts "
                f"only [{', '.join(SUPPORTED_EVENT_TYPES)}]")
        events.add(_ALIASES.get(normalized, normalized))
    sql = None
    if rule.ignore_sql:
        for index, pattern in enumerate(rule.ignore_sql):
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ErrFilterRuleInvalid(
                    f"`{where}.{style_key('ignore_sql')}[{index}]` {pattern!r} is not a valid "
                    f"regular expression: {exc}") from None
        sql = re.compile("|".join(f"(?:{p})" for p in rule.ignore_sql), re.IGNORECASE)
    expressions = []
    for key in _EXPRESSION_KEYS:
        text = getattr(rule, key)
        expressions.append(compile_expression(text, f"{where}.{style_key(key)}") if text.strip() else None)
    return _CompiledRule(matcher, frozenset(events), sql, *expressions)


class EventFilter:
    """The changefeed's event filters; `EventFilter([])` ignores nothing."""

    def __init__(self, rules: Sequence, case_sensitive: bool = False, style_key=lambda k: k.replace("_", "-")):
        self._rules = [_compile_rule(r, i, case_sensitive, style_key) for i, r in enumerate(rules)]
        self._bound: dict[tuple, list] = {}

    def __bool__(self) -> bool:
        return bool(self._rules)

    def _rules_for(self, schema: str, table: str) -> list[_CompiledRule]:
        return [r for r in self._rules if r.matcher.match_rules(schema, table)]

    def may_drop_rows_of(self, schema: str, table: str) -> bool:
        """Whether a rule that matches the table ignores some DML (by type or by expression), so
        filter_rows may drop some of its rows."""
        return any(rule.has_expressions or rule.ignore_events & _DML_IGNORES for rule in self._rules_for(schema, table))

    def ignores_ddl(self, ddl: DDLEvent) -> bool:
        # A RENAME is held against its old name too: the DDL document ignores `RENAME TABLE t1 TO
        # t2` (and `... TO ignore`) because the rule's matcher names t1.
        names = {(ddl.schema, ddl.table)} | {(r[0], r[1]) for r in ddl.extra.get("renames", ())}
        rules = [rule for rule in self._rules if any(rule.matcher.match_rules(s, t) for s, t in names)]
        for rule in rules:
            if rule.ignores_ddl_type(ddl.ddl_type):
                return True
            if rule.ignore_sql is not None and rule.ignore_sql.search(ddl.query):
                return True
        return False

    def filter_rows(self, table: TableInfo, rows: Sequence[RowChange]) -> list[RowChange]:
        """The rows no rule ignores. ExpressionColumnError (ErrExpressionColumnNotFound) when an expression reads a missing column."""
        checks = self._checks_for(table)
        if not checks:
            return list(rows)
        return [row for row in rows if not any(check(row) for check in checks)]

    def _checks_for(self, table: TableInfo) -> list:
        key = (table.schema, table.table, table.version, table.column_names)
        cached = self._bound.get(key)
        if cached is None:
            cached = []
            for rule in self._rules_for(table.schema, table.table):
                cached.append(_row_check(rule, table))
            self._bound[key] = cached
        return cached


def _row_check(rule: _CompiledRule, table: TableInfo):
    ignored_ops = {op for op in DML_EVENT_TYPES if op in rule.ignore_events or "all dml" in rule.ignore_events}

    def bound(expression: Optional[Expression]) -> Optional[BoundExpression]:
        return expression.bind(table) if expression is not None else None

    insert, update_new = bound(rule.insert), bound(rule.update_new)
    update_old, delete = bound(rule.update_old), bound(rule.delete)

    def ignores(row: RowChange) -> bool:
        if row.op in ignored_ops:
            return True
        if row.op == "insert":
            return insert is not None and insert.matches(row.after)
        if row.op == "delete":
            return delete is not None and delete.matches(row.before)
        return ((update_new is not None and update_new.matches(row.after))
                or (update_old is not None and update_old.matches(row.before)))

    return ignores
