"""Which tables a changefeed will replicate (TiCDC's VerifyTables / `verify_table` API).

A table the filter rules select is eligible when it has a valid index (a primary key or a
not-null unique key), or always with `force-replicate` (TableInfo.is_eligible); without one, rows
cannot be keyed downstream, so TiCDC skips it. Column selectors are checked against every
eligible table here, so a selector that would drop a handle-key column fails at creation, not
mid-stream; sink.registry.verify_tables adds the sink's own checks (`[[sink.dispatchers]]`).

Tables whose rows change through a cascading foreign key replicate incompletely to every sink but
a MySQL one (`cascaded_tables`): MariaDB's binlog has no rows for what InnoDB cascades, and only
a MySQL downstream re-runs the cascades (sink/mysql/foreign_keys.py).
"""

from __future__ import annotations

import re
from typing import Sequence

from sparkcdc.filter.column_selector import ColumnSelectors
from sparkcdc.filter.table_filter import TableFilter
from sparkcdc.model.events import CASCADING_RULES, ForeignKey, TableInfo


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


def cascaded_tables(foreign_keys: Sequence[ForeignKey], config) -> dict[tuple[str, str], list[ForeignKey]]:
    """The tables the config replicates whose rows the upstream changes through a cascading
    foreign key (ON DELETE / ON UPDATE CASCADE, SET NULL, SET DEFAULT), with those keys."""
    table_filter = TableFilter(config.filter.rules, config.case_sensitive)
    tables: dict[tuple[str, str], list[ForeignKey]] = {}
    for fk in foreign_keys:
        if fk.cascades and table_filter.match(fk.schema, fk.table):
            tables.setdefault((fk.schema, fk.table), []).append(fk)
    return tables


def describe_cascade(fk: ForeignKey) -> str:
    """`FOREIGN KEY fk (b) REFERENCES db.p (id) ON DELETE CASCADE`: the cascading actions only."""
    actions = "".join(f" ON {event} {rule}" for event, rule in (("DELETE", fk.on_delete), ("UPDATE", fk.on_update))
                      if rule in CASCADING_RULES)
    return (f"FOREIGN KEY {fk.name} ({', '.join(fk.columns)}) REFERENCES {fk.parent_schema}.{fk.parent_table} "
            f"({', '.join(fk.parent_columns)}){actions}")


_CASCADING_ACTION = re.compile(r"\bON\s+(?:DELETE|UPDATE)\s+(?:CASCADE|SET\s+NULL|SET\s+DEFAULT)\b", re.IGNORECASE)


def declares_cascade(ddl_query: str) -> bool:
    """Whether a DDL's text declares a cascading foreign key action (CREATE TABLE, ALTER TABLE
    ... ADD FOREIGN KEY): from then on its table changes through cascades."""
    return _CASCADING_ACTION.search(ddl_query) is not None
