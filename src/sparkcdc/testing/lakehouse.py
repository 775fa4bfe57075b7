"""Reading lakehouse sink tables back with readers other than the writers, as canonical rows
comparable with `compare.read_upstream_table`.

DuckDB's `delta` and `iceberg` extensions come from PyPI (`duckdb-ext-delta`,
`duckdb-ext-iceberg`, `duckdb-ext-avro`: DuckDB's own signed builds, repackaged), loaded from
their install directory: DuckDB's extension server is not needed. delta-rs reads Iceberg-free
Delta tables too (it wrote them, so it is the second reader, not the independent one).
"""

from __future__ import annotations

import pathlib
from typing import Iterable, Optional

from sparkcdc.model.events import ColumnInfo
from sparkcdc.sink.lakehouse.changes import OLD_PREFIX
from sparkcdc.sink.lakehouse.types import canonical_texts
from sparkcdc.testing.compare import Rows


def duckdb_connection(s3: Optional[dict] = None):
    """A DuckDB connection with the delta and iceberg extensions loaded from PyPI's packages;
    `s3` (endpoint, access-key, secret-access-key, region) configures httpfs for an emulator."""
    import duckdb
    import duckdb_ext

    extensions = pathlib.Path(list(duckdb_ext.__path__)[0]) / "extensions"
    connection = duckdb.connect(config={"extension_directory": str(extensions),
                                        "autoinstall_known_extensions": False, "autoload_known_extensions": True})
    connection.execute("SET TimeZone = 'UTC'")
    for name in ("delta", "iceberg"):
        connection.execute(f"LOAD {name}")
    if s3:
        endpoint = s3["endpoint"].split("://", 1)[-1]
        connection.execute(
            "CREATE SECRET lake_s3 (TYPE S3, KEY_ID ?, SECRET ?, REGION ?, ENDPOINT ?, URL_STYLE 'path', USE_SSL false)",
            [s3["access-key"], s3["secret-access-key"], s3.get("region", "us-east-1"), endpoint])
    return connection


def upstream_columns(conn, schema: str, table: str) -> list[ColumnInfo]:
    """The upstream table's columns, as much as the canonical text of lake values needs."""
    with conn.cursor() as cur:
        cur.execute(
            "SELECT COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, NUMERIC_SCALE, DATETIME_PRECISION FROM "
            "information_schema.COLUMNS WHERE TABLE_SCHEMA=%s AND TABLE_NAME=%s ORDER BY ORDINAL_POSITION",
            (schema, table))
        return [ColumnInfo(name, data_type.lower(), unsigned="unsigned" in column_type.lower(),
                           scale=numeric_scale if numeric_scale is not None else precision)
                for name, data_type, column_type, numeric_scale, precision in cur.fetchall()]


def canonical_rows(columns: list[ColumnInfo], names: list[str], records: Iterable[tuple],
                   key: list[str]) -> Rows:
    """{key tuple: {column: canonical text}} of rows read from a lake table (a changelog table's
    `_old_<column>` as its column; its other columns as read)."""
    by_name = {c.name: c for c in columns}
    by_name.update({OLD_PREFIX + c.name: c for c in columns})
    rows: Rows = {}
    for record in records:
        row = {}
        for name, value in zip(names, record):
            column = by_name.get(name)
            row[name] = canonical_texts(column, [value])[0] if column is not None else value
        rows[tuple(row[k] for k in key)] = row
    return rows


def read_delta(connection, uri: str, columns: list[ColumnInfo], key: list[str]) -> Rows:
    result = connection.execute(f"SELECT * FROM delta_scan('{uri}')")
    names = [d[0] for d in result.description]
    return canonical_rows(columns, names, result.fetchall(), key)


def read_iceberg(connection, metadata_location: str, columns: list[ColumnInfo], key: list[str]) -> Rows:
    result = connection.execute(f"SELECT * FROM iceberg_scan('{metadata_location}')")
    names = [d[0] for d in result.description]
    return canonical_rows(columns, names, result.fetchall(), key)
