"""Compare the tables of two endpoints: chunk checksums first, rows only where they differ."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

import pymysql

from sparkcdc.config.replica import ReplicaConfig
from sparkcdc.diff.checksum import (
    Chunk,
    Column,
    TableShape,
    checksum_sql,
    key_positions,
    next_boundary_sql,
    rows_sql,
    same_columns,
)
from sparkcdc.errors import ErrMySQLConnectionError
from sparkcdc.filter.table_filter import TableFilter
from sparkcdc.observability.progress import Progress
from sparkcdc.sink.mysql.config import parse_mysql_sink_uri
from sparkcdc.sink.mysql.connection import connect

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DiffOptions:
    filter_rules: tuple[str, ...] = ("*.*",)
    case_sensitive: bool = False
    chunk_size: int = 1000
    max_reported_rows: int = 100  # per table; counts stay exact


@dataclass(frozen=True)
class RowDifference:
    """kind: `missing` (only in source), `extra` (only in target) or `changed`."""

    kind: str
    key: tuple[Optional[str], ...]
    columns: tuple[str, ...] = ()  # changed columns
    source: Optional[dict[str, Optional[str]]] = None
    target: Optional[dict[str, Optional[str]]] = None

    def describe(self) -> str:
        if self.kind == "missing":
            return f"missing in target: key {self.key} {self.source}"
        if self.kind == "extra":
            return f"extra in target: key {self.key} {self.target}"
        changes = ", ".join(f"{c}: {self.source[c]!r} != {self.target[c]!r}" for c in self.columns)
        return f"changed: key {self.key}: {changes}"


@dataclass
class TableDiff:
    schema: str
    table: str
    structure_problem: str = ""  # the table is missing on one side or its columns differ
    chunks: int = 0
    mismatched_chunks: int = 0
    source_rows: int = 0
    target_rows: int = 0
    missing: int = 0
    extra: int = 0
    changed: int = 0
    rows: list[RowDifference] = field(default_factory=list)  # the first max_reported_rows

    @property
    def equal(self) -> bool:
        return not self.structure_problem and not (self.missing or self.extra or self.changed)

    @property
    def name(self) -> str:
        return f"{self.schema}.{self.table}"

    def to_json(self) -> dict:
        return {
            "table": self.name, "equal": self.equal, "structure_problem": self.structure_problem,
            "chunks": self.chunks, "mismatched_chunks": self.mismatched_chunks,
            "source_rows": self.source_rows, "target_rows": self.target_rows,
            "missing": self.missing, "extra": self.extra, "changed": self.changed,
            "rows": [{"kind": r.kind, "key": list(r.key), "columns": list(r.columns),
                      "source": r.source, "target": r.target} for r in self.rows],
        }


@dataclass
class DiffReport:
    tables: list[TableDiff]

    @property
    def equal(self) -> bool:
        return all(t.equal for t in self.tables)

    def summary(self) -> str:
        lines = []
        for t in self.tables:
            if t.structure_problem:
                lines.append(f"{t.name}: DIFFERENT: {t.structure_problem}")
            elif t.equal:
                lines.append(f"{t.name}: equal ({t.source_rows} rows, {t.chunks} chunks)")
            else:
                lines.append(f"{t.name}: DIFFERENT: {t.missing} missing, {t.extra} extra, {t.changed} changed "
                             f"(source {t.source_rows} rows, target {t.target_rows}; "
                             f"{t.mismatched_chunks}/{t.chunks} chunks differ)")
                lines.extend("  " + r.describe() for r in t.rows)
                shown = len(t.rows)
                total = t.missing + t.extra + t.changed
                if shown < total:
                    lines.append(f"  ... and {total - shown} more")
        different = sum(not t.equal for t in self.tables)
        lines.append(f"{len(self.tables)} table(s) compared, {different} different"
                     if different else f"{len(self.tables)} table(s) compared, all equal")
        return "\n".join(lines)


class Endpoint:
    """A read-only session on one side (UTC, so TIMESTAMP values compare as instants)."""

    def __init__(self, role: str, uri: str):
        self.role = role
        config = parse_mysql_sink_uri(uri, ReplicaConfig())
        self.uri = config.uri  # masked
        try:
            self.connection = connect(config, "+00:00")
        except (pymysql.err.MySQLError, OSError) as exc:
            raise ErrMySQLConnectionError(
                f"cannot connect to the {role} {self.uri}: {exc}; check the address, user and password") from exc

    def query(self, sql: str, args: Sequence[Any] = ()) -> list[tuple]:
        try:
            with self.connection.cursor() as cursor:
                cursor.execute(sql, tuple(args) if args else None)  # no args: a literal % stays
                return list(cursor.fetchall())
        except (pymysql.err.OperationalError, pymysql.err.InterfaceError, OSError) as exc:
            raise ErrMySQLConnectionError(f"the {self.role} {self.uri} failed during the diff: {exc}") from exc

    def tables(self) -> list[tuple[str, str]]:
        return [(s, t) for s, t in self.query(
            "SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES WHERE TABLE_TYPE = 'BASE TABLE'")]

    def shape(self, schema: str, table: str) -> TableShape:
        columns = tuple(Column(name, data_type.lower(), column_type.lower()) for name, data_type, column_type in self.query(
            "SELECT COLUMN_NAME, DATA_TYPE, COLUMN_TYPE FROM information_schema.COLUMNS "
            "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s ORDER BY ORDINAL_POSITION", (schema, table)))
        indexes: dict[str, list[str]] = {}
        nullable = {name for (name,) in self.query(
            "SELECT COLUMN_NAME FROM information_schema.COLUMNS "
            "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s AND IS_NULLABLE = 'YES'", (schema, table))}
        for index_name, column_name in self.query(
                "SELECT INDEX_NAME, COLUMN_NAME FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = %s "
                "AND TABLE_NAME = %s AND NON_UNIQUE = 0 ORDER BY INDEX_NAME, SEQ_IN_INDEX", (schema, table)):
            indexes.setdefault(index_name, []).append(column_name)
        key: tuple[str, ...] = ()
        for index_name in sorted(indexes, key=lambda n: (n != "PRIMARY", n)):
            columns_of_index = indexes[index_name]
            if all(columns_of_index) and not nullable & set(columns_of_index):
                key = tuple(columns_of_index)
                break
        return TableShape(schema, table, columns, key)

    def estimated_rows(self, tables: list[tuple[str, str]]) -> int:
        """The server's row estimate (information_schema.TABLES.TABLE_ROWS) summed over `tables`."""
        total = 0
        for schema, table in tables:
            found = self.query("SELECT TABLE_ROWS FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s "
                               "AND TABLE_NAME = %s", (schema, table))
            total += int(found[0][0] or 0) if found else 0
        return total

    def close(self) -> None:
        try:
            self.connection.close()
        except Exception:
            pass


def diff_endpoints(source_uri: str, target_uri: str, options: DiffOptions = DiffOptions(),
                   progress: Callable[[TableDiff], None] = lambda _: None,
                   rows_progress: Optional[Progress] = None) -> DiffReport:
    """Compare every table the filter selects on either side; the source decides the chunking.
    `progress` gets each table's result; `rows_progress` is advanced by each chunk's source rows,
    its total the source's row estimate (information_schema) of the tables compared."""
    table_filter = TableFilter(list(options.filter_rules), options.case_sensitive, where="--filter")
    source = Endpoint("source", source_uri)
    try:
        target = Endpoint("target", target_uri)
    except BaseException:
        source.close()
        raise
    try:
        source_tables = {t for t in source.tables() if table_filter.match(*t)}
        target_tables = {t for t in target.tables() if table_filter.match(*t)}
        results = []
        if rows_progress is not None:
            rows_progress.set_total(source.estimated_rows(sorted(source_tables & target_tables)))
        for schema, table in sorted(source_tables | target_tables):
            if (schema, table) not in target_tables:
                result = TableDiff(schema, table, structure_problem="the table is missing in the target")
            elif (schema, table) not in source_tables:
                result = TableDiff(schema, table, structure_problem="the table exists only in the target")
            else:
                result = _diff_table(source, target, schema, table, options, rows_progress)
            progress(result)
            results.append(result)
        return DiffReport(results)
    finally:
        source.close()
        target.close()


def _diff_table(source: Endpoint, target: Endpoint, schema: str, table: str, options: DiffOptions,
                rows_progress: Optional[Progress] = None) -> TableDiff:
    result = TableDiff(schema, table)
    shape = source.shape(schema, table)
    target_shape = target.shape(schema, table)
    if not same_columns(shape.columns, target_shape.columns):
        result.structure_problem = (
            f"columns differ: source {[(c.name, c.data_type) for c in shape.columns]}, "
            f"target {[(c.name, c.data_type) for c in target_shape.columns]}")
        return result
    for chunk in _chunks(source, shape, options.chunk_size):
        result.chunks += 1
        source_sum = source.query(*checksum_sql(shape, chunk))[0]
        target_sum = target.query(*checksum_sql(shape, chunk))[0]
        result.source_rows += int(source_sum[0])
        result.target_rows += int(target_sum[0])
        if rows_progress is not None:
            rows_progress.advance(int(source_sum[0]))
        if tuple(source_sum) == tuple(target_sum):
            continue
        result.mismatched_chunks += 1
        log.info("%s.%s %s: checksums differ (source %s, target %s)", schema, table, chunk.describe(),
                 source_sum, target_sum)
        _compare_rows(source, target, shape, chunk, result, options.max_reported_rows)
    return result


def _chunks(source: Endpoint, shape: TableShape, chunk_size: int):
    """Key ranges of about chunk_size source rows; the last one is open so target-only rows count."""
    if not shape.key:
        yield Chunk(0, None, None)
        return
    lower, index = None, 0
    while True:
        found = source.query(*next_boundary_sql(shape, lower, chunk_size))
        if not found:
            yield Chunk(index, lower, None)
            return
        upper = tuple(found[0])
        yield Chunk(index, lower, upper)
        lower, index = upper, index + 1


def _compare_rows(source: Endpoint, target: Endpoint, shape: TableShape, chunk: Chunk,
                  result: TableDiff, limit: int) -> None:
    names = shape.column_names
    positions = key_positions(shape) or list(range(len(names)))
    source_rows = _by_key(source.query(*rows_sql(shape, chunk)), positions)
    target_rows = _by_key(target.query(*rows_sql(shape, chunk)), positions)

    def report(difference: RowDifference) -> None:
        if len(result.rows) < limit:
            result.rows.append(difference)

    for key in sorted(source_rows.keys() | target_rows.keys(), key=_sort_key):
        mine, theirs = source_rows.get(key, []), target_rows.get(key, [])
        for row, other in zip(mine, theirs):
            changed = tuple(n for n, a, b in zip(names, row, other) if a != b)
            if changed:
                result.changed += 1
                report(RowDifference("changed", key, changed, dict(zip(names, row)), dict(zip(names, other))))
        for row in mine[len(theirs):]:
            result.missing += 1
            report(RowDifference("missing", key, source=dict(zip(names, row))))
        for row in theirs[len(mine):]:
            result.extra += 1
            report(RowDifference("extra", key, target=dict(zip(names, row))))


def _by_key(rows: list[tuple], positions: list[int]) -> dict[tuple, list[tuple]]:
    """Rows by key text; without a key the whole row is the key, duplicates kept as a list."""
    grouped: dict[tuple, list[tuple]] = {}
    for row in rows:
        grouped.setdefault(tuple(row[p] for p in positions), []).append(tuple(row))
    return grouped


def _sort_key(key: tuple) -> tuple:
    return tuple((value is not None, value or "") for value in key)
