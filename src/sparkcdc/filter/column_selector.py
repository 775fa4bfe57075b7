"""Column selectors (`[[sink.column-selectors]]`): which columns MQ and storage sinks write.

Each selector has a `matcher` (table-filter rules) and `columns`, TiDB's column-filter rules:
a wildcard pattern per rule, `!` to exclude, later rules win, a column no rule matches is
dropped; column names match case-insensitively. The first selector whose matcher matches a
table applies; other tables keep every column. A selector may not drop a handle-key column,
since consumers need the key to apply changes (TiCDC's ErrColumnSelectorFailed).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Optional, Sequence

from sparkcdc.errors import ErrColumnSelectorFailed
from sparkcdc.filter.table_filter import FilterRuleError, TableFilter, _RuleParser
from sparkcdc.model.events import DDLEvent, RowChange, TableInfo


class ColumnFilter:
    """TiDB's column filter: `ColumnFilter(["*", "!secret"]).match("id")`."""

    def __init__(self, rules: Sequence[str], where: str):
        self._rules = []
        for position, text in enumerate(rules):
            parser = _RuleParser(f"{where}[{position}]", text, case_sensitive=False)
            stripped = text.strip(" \t")
            if not stripped or stripped.startswith("#"):
                continue
            start = len(text) - len(text.lstrip(" \t"))
            end = len(text.rstrip(" \t"))
            exclude = text[start] == "!"
            begin = start + 1 if exclude else start
            matcher, stop = parser.pattern(begin, end, needs_dot=False)
            if stop != end:
                raise parser.error(stop, "syntax error: stray characters after column pattern")
            self._rules.append((exclude, matcher))

    def match(self, column: str) -> bool:
        for exclude, matcher in reversed(self._rules):
            if matcher(column):
                return not exclude
        return False


@dataclass(frozen=True)
class _Selector:
    matcher: TableFilter
    columns: ColumnFilter
    where: str


class ColumnSelectors:
    """Applies the first matching selector to a table's rows and schema."""

    def __init__(self, selectors: Sequence, case_sensitive: bool = False):
        self._selectors = []
        for position, selector in enumerate(selectors):
            where = f"sink.column-selectors[{position}]"
            if not selector.matcher:
                raise ErrColumnSelectorFailed(f"`{where}.matcher` is empty; list the tables it applies to")
            self._selectors.append(_Selector(
                TableFilter(selector.matcher, case_sensitive, where=f"{where}.matcher"),
                ColumnFilter(selector.columns, f"{where}.columns"),
                where,
            ))
        self._kept: dict[tuple, Optional[tuple[int, ...]]] = {}

    def __bool__(self) -> bool:
        return bool(self._selectors)

    def kept_positions(self, table: TableInfo) -> Optional[tuple[int, ...]]:
        """Positions of the columns to keep, or None when no selector applies (keep all)."""
        key = (table.schema, table.table, table.version, table.column_names)
        if key not in self._kept:
            self._kept[key] = self._select(table)
        return self._kept[key]

    def _select(self, table: TableInfo) -> Optional[tuple[int, ...]]:
        for selector in self._selectors:
            if not selector.matcher.match_rules(table.schema, table.table):
                continue
            kept = tuple(i for i, c in enumerate(table.columns) if selector.columns.match(c.name))
            kept_names = {table.columns[i].name for i in kept}
            dropped_keys = [name for name in table.handle_key if name not in kept_names]
            if dropped_keys:
                raise ErrColumnSelectorFailed(
                    f"`{selector.where}` drops handle-key column {', '.join(dropped_keys)} of "
                    f"{table.schema}.{table.table}; keep the primary key or not-null unique key columns")
            return kept
        return None

    def verify(self, tables: Sequence[TableInfo]) -> None:
        """Raise for the first table a selector would strip of its handle key."""
        for table in tables:
            self.kept_positions(table)

    def apply_table(self, table: TableInfo) -> TableInfo:
        kept = self.kept_positions(table)
        if kept is None:
            return table
        return dataclasses.replace(table, columns=tuple(table.columns[i] for i in kept))

    def apply_rows(self, table: TableInfo, rows: Sequence[RowChange]) -> tuple[TableInfo, list[RowChange]]:
        kept = self.kept_positions(table)
        if kept is None:
            return table, list(rows)

        def project(values):
            return None if values is None else tuple(values[i] for i in kept)

        projected = [dataclasses.replace(row, before=project(row.before), after=project(row.after))
                     for row in rows]
        return self.apply_table(table), projected

    def apply_ddl(self, ddl: DDLEvent) -> DDLEvent:
        if not self._selectors or (ddl.table_info is None and ddl.pre_table_info is None):
            return ddl
        return dataclasses.replace(
            ddl,
            table_info=self.apply_table(ddl.table_info) if ddl.table_info else None,
            pre_table_info=self.apply_table(ddl.pre_table_info) if ddl.pre_table_info else None,
        )


__all__ = ["ColumnFilter", "ColumnSelectors", "FilterRuleError"]
