"""A table DDL as a schema change of its lake table, decided once for both formats.

The upstream's table before and after the DDL (`DDLEvent.pre_table_info`, `table_info`) say
what the table looks like; the DDL's parsed ALTER operations say which new column is which old
one (a RENAME/CHANGE COLUMN keeps the data, a DROP + ADD does not). Each new column is then:
kept (same lake type), widened (`types.is_widening`), renamed, or added (existing rows take
its default). Any other change of a column's lake type cannot be expressed in place: it stops
the changefeed with ErrLakehouseSchemaChange, before anything is written.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Optional

from sparkcdc.errors import ErrLakehouseSchemaChange
from sparkcdc.model.events import ColumnInfo, DDLEvent, TableInfo
from sparkcdc.schema.parser import ChangeColumn, DDLParseError, RenameColumn, parse
from sparkcdc.sink.lakehouse.types import arrow_type, is_widening


@dataclass(frozen=True)
class ColumnChange:
    column: ColumnInfo  # the column after the DDL
    source: Optional[str]  # the lake column its values come from; None: added by the DDL

    @property
    def renamed(self) -> bool:
        return self.source is not None and self.source != self.column.name


@dataclass(frozen=True)
class SchemaEvolution:
    """The lake table after a DDL: its columns in the new order, each with where it comes from."""

    columns: tuple[ColumnChange, ...]
    dropped: tuple[str, ...]
    widened: tuple[str, ...]  # new names of columns whose lake type widens

    @property
    def added(self) -> tuple[ColumnInfo, ...]:
        return tuple(change.column for change in self.columns if change.source is None)

    @property
    def renames(self) -> tuple[tuple[str, str], ...]:
        return tuple((change.source, change.column.name) for change in self.columns if change.renamed)

    @property
    def changes_nothing(self) -> bool:
        return not (self.added or self.dropped or self.widened or self.renames)

    def with_copies(self, prefix: str) -> "SchemaEvolution":
        """This evolution plus the same changes to a copy of every column named `prefix + name`
        (a changelog table's old image, `_old_<column>`)."""
        def copy(change: ColumnChange) -> ColumnChange:
            source = None if change.source is None else prefix + change.source
            return ColumnChange(replace(change.column, name=prefix + change.column.name), source)

        return SchemaEvolution(self.columns + tuple(map(copy, self.columns)),
                               self.dropped + tuple(prefix + name for name in self.dropped),
                               self.widened + tuple(prefix + name for name in self.widened))


def _renames(ddl: DDLEvent) -> dict[str, str]:
    """new column name -> old name, for the RENAME COLUMN / CHANGE old new operations."""
    try:
        parsed = parse(ddl.query, ddl.schema)
    except DDLParseError:
        return {}
    renames: dict[str, str] = {}
    for op in parsed.ops:
        if isinstance(op, RenameColumn):
            renames[op.new_name.lower()] = op.old_name
        elif isinstance(op, ChangeColumn) and op.old_name.lower() != op.column.name.lower():
            renames[op.column.name.lower()] = op.old_name
    return renames


def schema_evolution(ddl: DDLEvent, before: TableInfo, after: TableInfo) -> SchemaEvolution:
    """How the lake table of `before` becomes `after`; raises ErrLakehouseSchemaChange for a
    column type change the formats cannot make in place."""
    renames = _renames(ddl)
    old_by_name = {c.name.lower(): c for c in before.columns}
    used: set[str] = set()
    changes, widened = [], []
    for column in after.columns:
        source_name = renames.get(column.name.lower(), column.name)
        old = old_by_name.get(source_name.lower())
        if old is None:
            changes.append(ColumnChange(column, None))
            continue
        used.add(old.name.lower())
        old_type, new_type = arrow_type(old), arrow_type(column)
        if old_type != new_type:
            if not is_widening(old_type, new_type):
                raise ErrLakehouseSchemaChange(
                    f"table {after.schema}.{after.table}: the DDL {ddl.query!r} changes column {old.name} from "
                    f"{_describe(old)} (lake type {old_type}) to {_describe(column)} (lake type {new_type}), "
                    "which Delta and Iceberg cannot do in place (only int -> bigint, float -> double and a larger "
                    "decimal precision widen a column). Nothing was written for this DDL. To go on: recreate the "
                    "lake table (drop it and create the changefeed again from a start-ts after this DDL), or exclude "
                    "the table with a filter rule, or set schema-mode = \"strict\" to stop at every schema change")
            widened.append(column.name)
        changes.append(ColumnChange(column, old.name))
    dropped = tuple(c.name for c in before.columns if c.name.lower() not in used)
    return SchemaEvolution(tuple(changes), dropped, tuple(widened))


def _describe(column: ColumnInfo) -> str:
    text = column.mysql_type
    if column.mysql_type == "decimal":
        text += f"({column.precision},{column.scale})"
    return text + (" unsigned" if column.unsigned else "")
