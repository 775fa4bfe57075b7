"""The filters a batch's changes pass after the table filter: event filters, then selectors.

The pipeline hands each table's netted (and, for MQ/storage sinks, key-split) rows here, so a
split update is filtered as the delete and the insert it became, and a selector's projection is
the last step before the sink. DDLs pass the same event filters and carry projected schemas.
Whether the sink takes column selectors at all is checked when its URI is parsed
(sink.registry.parse_sink_spec).
"""

from __future__ import annotations

from typing import Optional, Sequence

from sparkcdc.filter.column_selector import ColumnSelectors
from sparkcdc.filter.event_filter import EventFilter
from sparkcdc.model.events import DDLEvent, RowChange, TableInfo


class ChangeFilters:
    def __init__(self, config):
        self.events = EventFilter(config.filter.event_filters, config.case_sensitive)
        self.selectors = ColumnSelectors(config.sink.column_selectors, config.case_sensitive)

    def rows(self, table: TableInfo, rows: Sequence[RowChange]) -> tuple[TableInfo, list[RowChange]]:
        kept = self.events.filter_rows(table, rows) if self.events else list(rows)
        if not self.selectors:
            return table, kept
        return self.selectors.apply_rows(table, kept)

    def changes_rows_of(self, table: TableInfo) -> bool:
        """Whether rows() may drop or project this table's rows: an event filter rule that
        ignores DML matches it, or a column selector does."""
        if self.selectors and self.selectors.kept_positions(table) is not None:
            return True
        return bool(self.events) and self.events.may_drop_rows_of(table.schema, table.table)

    def ddl(self, ddl: DDLEvent) -> Optional[DDLEvent]:
        if self.events and self.events.ignores_ddl(ddl):
            return None
        return self.selectors.apply_ddl(ddl) if self.selectors else ddl
