"""Which topic and partition a change goes to, as TiCDC's EventRouter decides
(cdc/sink/dmlsink/mq/dispatcher: topic/expression.go, partition/*.go; pkg/hash/position_inertia.go).

The first `[[sink.dispatchers]]` rule whose matcher accepts the table wins; tables no rule
matches use the default topic (the URI path) and the `table` partition rule. Hashes are TiCDC's
so the same row lands on the same partition number as it would with TiCDC.
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass
from typing import Optional, Sequence

from sparkcdc.config.replica import DispatchRule
from sparkcdc.errors import ErrColumnSelectorFailed, ErrInvalidReplicaConfig
from sparkcdc.filter.table_filter import TableFilter
from sparkcdc.model.events import ColumnInfo, RowChange, TableInfo, Value
from sparkcdc.sink.codec.mysqltypes import mounted_value

_KAFKA_FORBIDDEN = re.compile(r"[^a-zA-Z0-9._\-]")
_TOPIC_MAX = 249


class PositionInertia:
    """TiCDC's PositionInertia: XOR of CRC32-IEEE sums, one per `write` of byte groups."""

    def __init__(self) -> None:
        self.value = 0

    def write(self, *groups: bytes) -> None:
        self.value ^= zlib.crc32(b"".join(groups)) & 0xFFFFFFFF


def column_value_string(column: ColumnInfo, value: Value) -> str:
    """model.ColumnValueString of the mounter's value: enum/set as numbers, NULL as "null"."""
    return "null" if value is None else mounted_value(column, value)


def substitute_topic(expression: str, schema: str, table: str) -> str:
    """The topic an expression names for a table (TiCDC's Expression.Substitute)."""
    topic = expression.replace("{schema}", _KAFKA_FORBIDDEN.sub("_", schema))
    topic = topic.replace("{table}", _KAFKA_FORBIDDEN.sub("_", table))
    if len(topic) > _TOPIC_MAX:
        return topic[:_TOPIC_MAX]
    return {".": "_", "..": "__"}.get(topic, topic)


def topic_pattern(expression: str) -> str:
    """A regex matching every topic `expression` can name (what a consumer subscribes to)."""
    name = "[A-Za-z0-9._\\-]+"
    return "".join(name if part in ("{schema}", "{table}") else re.escape(part)
                   for part in re.split(r"(\{schema\}|\{table\})", expression) if part)


def is_changefeed_topic(selected: re.Pattern, name: str) -> bool:
    """Whether `name` is one of the `selected` topics and not one of Kafka's own
    (`__consumer_offsets`, ...), which a broad expression such as `{schema}` also matches."""
    return not name.startswith("__") and selected.fullmatch(name) is not None


def _table_hash(table: TableInfo) -> PositionInertia:
    hasher = PositionInertia()
    hasher.write(table.schema.encode(), table.table.encode())
    return hasher


def _image(row: RowChange) -> Sequence[Value]:
    image = row.after if row.after is not None else row.before
    assert image is not None
    return image


class PartitionDispatcher:
    """partition = f(row) % partitions. `kind` is table | ts | index-value | columns."""

    def __init__(self, kind: str, index: str = "", columns: Sequence[str] = ()):
        self.kind = {"": "table", "default": "table", "rowid": "index-value"}.get(kind, kind)
        self.index = index
        self.columns = tuple(columns)

    def partition(self, table: TableInfo, row: RowChange, partitions: int) -> int:
        if self.kind == "ts":
            return row.commit_ts % partitions
        hasher = _table_hash(table)
        if self.kind in ("index-value", "columns"):
            for i, column, name in self._hashed_columns(table):
                hasher.write(name, column_value_string(column, _image(row)[i]).encode())
        return hasher.value % partitions

    def transaction_partition(self, table: TableInfo, commit_ts: int, partitions: int) -> Optional[int]:
        """The partition of every row of a transaction when `partition` does not read row values
        (table, ts), so rows given as columns need no RowChange; None for index-value and columns."""
        if self.kind in ("index-value", "columns"):
            return None
        if self.kind == "ts":
            return commit_ts % partitions
        return _table_hash(table).value % partitions

    def hashed_positions(self, table: TableInfo) -> list[int]:
        """The positions of the columns whose values `partition` hashes (index-value, columns)."""
        return [i for i, _, _ in self._hashed_columns(table)]

    def value_partitions(self, table: TableInfo, values: Sequence[Sequence[Value]], rows: int,
                         partitions: int) -> list[int]:
        """`partition` of index-value or columns dispatch for `rows` rows given by the values of
        their `hashed_positions` columns (one sequence per column, from each row's after image, or
        the before image of a delete), without a RowChange per row."""
        hashed = self._hashed_columns(table)
        base = _table_hash(table).value
        if not hashed:
            return [base % partitions] * rows
        result = []
        for row in zip(*values):
            value = base
            for (_, column, name), item in zip(hashed, row):
                value ^= zlib.crc32(name + column_value_string(column, item).encode()) & 0xFFFFFFFF
            result.append(value % partitions)
        return result

    def _hashed_columns(self, table: TableInfo) -> list[tuple[int, ColumnInfo, bytes]]:
        """(position, column, name as hashed) of each column index-value or columns dispatch hashes."""
        if self.kind == "index-value":
            return [(i, column, column.name.encode()) for i, column in self._index_positions(table)]
        positions = {c.name.lower(): i for i, c in enumerate(table.columns)}
        hashed = []
        for name in self.columns:
            i = positions.get(name.lower())
            if i is None:
                raise ErrInvalidReplicaConfig(
                    f"dispatcher column {name!r} is not a column of {table.schema}.{table.table}")
            hashed.append((i, table.columns[i], name.encode()))
        return hashed

    def _index_positions(self, table: TableInfo) -> list[tuple[int, ColumnInfo]]:
        if self.index and self.index.upper() != "PRIMARY":
            # TableInfo keeps the handle key, not every index by name.
            raise ErrInvalidReplicaConfig(
                f"index-value dispatch by index {self.index!r} is not supported yet; "
                "omit `index` (handle key) or use index = \"PRIMARY\"")
        names = table.primary_key if self.index else table.handle_key
        return [(i, c) for i, c in enumerate(table.columns) if c.name in names]


@dataclass
class _Route:
    matcher: TableFilter
    topic: str  # expression or plain name; "" = default topic
    dispatcher: PartitionDispatcher
    where: str = "the default dispatcher"


class EventRouter:
    """Topic and partition for rows and DDLs, from `[[sink.dispatchers]]` and the default topic."""

    def __init__(self, default_topic: str, rules: Sequence[DispatchRule], case_sensitive: bool = False):
        self.default_topic = default_topic
        self._routes = [
            _Route(TableFilter(rule.matcher, case_sensitive), rule.topic,
                   PartitionDispatcher(rule.partition or rule.dispatcher, rule.index, rule.columns),
                   f"sink.dispatchers[{position}]")
            for position, rule in enumerate(rules)
        ]
        self._default = _Route(TableFilter(["*.*"], case_sensitive), "", PartitionDispatcher("table"))

    def _route(self, schema: str, table: str) -> _Route:
        for route in self._routes:
            if route.matcher.match(schema, table):
                return route
        return self._default

    def topic(self, schema: str, table: str) -> str:
        route = self._route(schema, table)
        if not route.topic:
            return self.default_topic
        return substitute_topic(route.topic, schema, table)

    def ddl_topic(self, schema: str, table: str) -> str:
        """Database-level DDL goes to the default topic, table DDL to the table's topic."""
        if not table:
            return self.default_topic
        return self.topic(schema, table)

    def partition(self, table: TableInfo, row: RowChange, partitions: int) -> int:
        return self._route(table.schema, table.table).dispatcher.partition(table, row, partitions)

    def dispatcher_for(self, schema: str, table: str) -> PartitionDispatcher:
        return self._route(schema, table).dispatcher

    def verify_tables(self, tables: Sequence[TableInfo], selectors) -> None:
        """TiCDC's EventRouter and ColumnSelectors VerifyTables: every column a `columns` or
        `index-value` dispatcher hashes exists and survives the column selectors (`selectors`:
        a ColumnSelectors), else the partition could not be computed from the rows sent."""
        for table in tables:
            route = self._route(table.schema, table.table)
            dispatcher = route.dispatcher
            if dispatcher.kind == "columns":
                names = {c.name.lower(): c.name for c in table.columns}
                needed = []
                for name in dispatcher.columns:
                    if name.lower() not in names:
                        raise ErrInvalidReplicaConfig(
                            f"`{route.where}` dispatches {table.schema}.{table.table} by column {name!r}, "
                            f"which the table does not have; list columns of the table in `columns`")
                    needed.append(names[name.lower()])
                what = 'partition = "columns"'
            elif dispatcher.kind == "index-value":
                needed = [column.name for _, column in dispatcher._index_positions(table)]
                what = 'partition = "index-value"' + (f', index = "{dispatcher.index}"' if dispatcher.index else "")
            else:
                continue
            kept = selectors.kept_positions(table)
            if kept is None:
                continue
            kept_names = {table.columns[i].name for i in kept}
            for name in needed:
                if name not in kept_names:
                    raise ErrColumnSelectorFailed(
                        f"the column selector for {table.schema}.{table.table} drops column {name!r}, which "
                        f"`{route.where}` ({what}) dispatches by; keep the column in "
                        "`sink.column-selectors` or dispatch by other columns")


def partition_count(partitions: Optional[int]) -> int:
    return partitions if partitions and partitions > 0 else 1
