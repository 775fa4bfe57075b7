"""Upstream tables read in the canonical text form (model/events.py), to compare with what a
consumer rebuilt from a sink's output, row by row."""

from __future__ import annotations

import numpy

from sparkcdc.model.events import BINARY_TYPES

Rows = dict[tuple, dict[str, "str | None"]]


def _select_expression(name: str, data_type: str, column_type: str) -> str:
    quoted = f"`{name}`"
    if data_type in BINARY_TYPES or "binary" in column_type and data_type in ("char", "varchar"):
        return quoted  # bytes, decoded as ISO-8859-1 below
    if data_type in ("float", "double"):
        return quoted  # a Python float, formatted below
    if data_type == "bit":
        return f"CAST({quoted}+0 AS CHAR)"
    if data_type == "year":
        return f"LPAD(CAST({quoted} AS CHAR), 4, '0')"
    return f"CAST({quoted} AS CHAR)"


def _canonical(data_type: str, value):
    if isinstance(value, (bytes, bytearray)):
        return value.decode("latin-1")
    if value is not None and data_type == "float":
        return numpy.format_float_positional(numpy.float32(value), unique=True, trim="-")
    if value is not None and data_type == "double":
        return numpy.format_float_positional(value, unique=True, trim="-")
    return value


def read_upstream_table(conn, schema: str, table: str) -> Rows:
    """{primary key tuple: {column: canonical text}} for one upstream table (UTC timestamps)."""
    with conn.cursor() as cur:
        cur.execute("SET SESSION time_zone = '+00:00'")
        cur.execute(
            "SELECT COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, COLUMN_KEY FROM information_schema.COLUMNS "
            "WHERE TABLE_SCHEMA=%s AND TABLE_NAME=%s ORDER BY ORDINAL_POSITION",
            (schema, table),
        )
        columns = cur.fetchall()
        names = [c[0] for c in columns]
        types = [c[1].lower() for c in columns]
        key = [c[0] for c in columns if c[3] == "PRI"]
        select = ", ".join(_select_expression(n, t.lower(), ct.lower()) for n, t, ct, _ in columns)
        cur.execute(f"SELECT {select} FROM `{schema}`.`{table}`")
        rows: Rows = {}
        for raw in cur.fetchall():
            row = {n: _canonical(t, v) for n, t, v in zip(names, types, raw)}
            rows[tuple(row[k] for k in key)] = row
        return rows


def diff_tables(expected: Rows, actual: Rows, limit: int = 5) -> list[str]:
    """Human-readable differences (empty when the tables are equal)."""
    problems = []
    for key in sorted(set(expected) | set(actual), key=repr):
        if key not in actual:
            problems.append(f"missing row {key}: {expected[key]}")
        elif key not in expected:
            problems.append(f"extra row {key}: {actual[key]}")
        elif expected[key] != actual[key]:
            problems.append(f"row {key} differs: upstream {expected[key]} != rebuilt {actual[key]}")
        if len(problems) >= limit:
            break
    return problems


def wait_for_row(conn, database: str, table: str, timeout: float = 180.0) -> None:
    """Wait until `database.table` exists and has a row (e.g. a replicated finish mark)."""
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with conn.cursor() as cur:
            try:
                if cur.execute(f"SELECT 1 FROM `{database}`.`{table}` LIMIT 1"):
                    return
            except Exception:  # the table is not replicated yet
                pass
        time.sleep(1)
    raise AssertionError(f"{database}.{table} not replicated downstream in {timeout}s")


def wait_tables_equal(up, down, database: str, tables, timeout: float = 60.0) -> None:
    """Poll until each of `tables` downstream equals upstream, row by row.

    A replicated finish-mark row does not prove its batch is all downstream: a MySQL sink with
    several workers commits each worker's share on its own, so the mark can land first. Raises
    with the differences still seen at the timeout."""
    import time

    deadline = time.monotonic() + timeout
    while True:
        problems = []
        for table in tables:
            try:
                found = diff_tables(read_upstream_table(up, database, table), read_upstream_table(down, database, table))
            except Exception as exc:  # noqa: BLE001 - e.g. the table is not downstream yet
                found = [f"cannot read: {exc}"]
            problems += [f"{table}: {p}" for p in found]
        if not problems:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"{database} still differs after {timeout}s:\n" + "\n".join(problems))
        time.sleep(1)
