"""Which tables a changefeed will replicate (TiCDC's VerifyTables / `verify_table` API).

A table the filter rules select is eligible when it has a valid index (a primary key or a
not-null unique key), or always with `force-replicate` (TableInfo.is_eligible); without one, rows
cannot be keyed downstream, so TiCDC skips it. Column selectors are checked against every
eligible table here, so a selector that would drop a handle-key column fails at creation, not
mid-stream; sink.registry.verify_tables adds the sink's own checks (`[[sink.dispatchers]]`).
"""

from __future__ import annotations

from typing import Sequence

from sparkcdc.filter.column_selector import ColumnSelectors
from sparkcdc.filter.table_filter import TableFilter
from sparkcdc.model.events import TableInfo


def classify_tables(tables: Sequence[TableInfo], config) -> tuple[list[TableInfo], list[TableInfo]]:
    """(eligible, ineligible) among the tables the config's filter rules select."""
    table_filter = TableFilter(config.filter.rules, config.case_sensitive)
    selected = [t for t in tables if table_filter.match(t.schema, t.table)]
    eligible = [t for t in selected if t.is_eligible(config.force_replicate)]
    ineligible = [t for t in selected if not t.is_eligible(config.force_replicate)]
    ColumnSelectors(config.sink.column_selectors, config.case_sensitive).verify(eligible)
    return eligible, ineligible


def table_names_json(tables: Sequence[TableInfo]) -> list[dict]:
    """TiCDC's v2 TableName JSON."""
    return [{"database_name": t.schema, "table_name": t.table, "table_id": t.table_id,
             "is_partition": False} for t in tables]
