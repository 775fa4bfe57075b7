"""The filters a batch's changes pass after the table filter: event filters, then selectors.

The pipeline hands each table's netted (and, for MQ/storage sinks, key-split) rows here, so a
split update is filtered as the delete and the insert it became, and a selector's projection is
the last step before the sink. DDLs pass the same event filters and carry projected schemas.
"""

from __future__ import annotations

from typing import Optional, Sequence
from urllib.parse import urlsplit

from sparkcdc.errors import ErrInvalidReplicaConfig
from sparkcdc.filter.column_selector import ColumnSelectors
from sparkcdc.filter.event_filter import DML_EVENT_TYPES, EventFilter
from sparkcdc.model.events import DDLEvent, RowChange, TableInfo

_DML_IGNORES = frozenset({"all dml", *DML_EVENT_TYPES})

# Sinks that write selected columns only (TiCDC: MQ and cloud storage sinks).
COLUMN_SELECTOR_SCHEMES = frozenset({
    "kafka", "kafka+ssl", "pulsar", "pulsar+ssl", "pulsar+http", "pulsar+https",
    "file", "s3", "gcs", "gs", "azblob", "azure", "local", "nfs", "blackhole",
})


def check_column_selectors_allowed(sink_uri: str, config) -> None:
    """Column selectors are for MQ and storage sinks; a database sink needs whole rows."""
    scheme = urlsplit(sink_uri).scheme.lower()
    if config.sink.column_selectors and scheme not in COLUMN_SELECTOR_SCHEMES:
        raise ErrInvalidReplicaConfig(
            f"`sink.column-selectors` is set but the {scheme}:// sink writes whole rows; column "
            "selectors apply only to MQ and storage sinks, remove them for this sink")


class ChangeFilters:
    def __init__(self, config, sink_uri: str):
        self.events = EventFilter(config.filter.event_filters, config.case_sensitive)
        check_column_selectors_allowed(sink_uri, config)
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
        return bool(self.events) and any(
            rule.has_expressions or rule.ignore_events & _DML_IGNORES
            for rule in self.events._rules_for(table.schema, table.table))

    def ddl(self, ddl: DDLEvent) -> Optional[DDLEvent]:
        if self.events and self.events.ignores_ddl(ddl):
            return None
        return self.selectors.apply_ddl(ddl) if self.selectors else ddl
