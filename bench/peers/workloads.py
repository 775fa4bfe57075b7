"""The workloads of issue 11 for the peers benchmark, written once to a private MariaDB so every tool
reads the same binlog.

  sysbench    `id, k, c CHAR(120), pad CHAR(60)`: 60% inserts in 100-row transactions, 30% updates
              of 50 rows, 10% deletes of 17 rows (bench/capture_bench.py's workload, unchanged)
  single-row  the same mix as single-row autocommit transactions (one row per transaction)
  wide        the same mix on the 36-column mixed-type table of sparkcdc.testing.alltypes
              (every integer width, decimals, floats, strings, binaries, temporals, enum, set, bit,
              JSON), 100-row inserts, 50-row updates of one column, 17-row deletes
  tables1000  the sysbench mix spread over 1,000 sysbench tables: each transaction on one table
              chosen at random (inserts anywhere, updates and deletes where rows exist)
  tables10000 the same over 10,000 tables (issue 27: one changefeed over 10,000 tables)

`setup()` creates the tables (DDL only, no rows) and is run before the tools' start position is
taken for sparkcdc; the peers read the binlog from its beginning and see those DDLs too.
`write()` returns the number of row changes the binlog holds (rows an UPDATE did not change and
ids already deleted are not counted: MariaDB logs nothing for them).
"""

from __future__ import annotations

import os
import random
import sys
from dataclasses import dataclass

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from capture_bench import run_workload  # noqa: E402
from sparkcdc.testing.alltypes import COLUMN_NAMES, COLUMNS, ROWS  # noqa: E402

DATABASE = "sbtest"
SYSBENCH_DDL = ("CREATE TABLE IF NOT EXISTS {database}.{table} (id INT PRIMARY KEY, k INT NOT NULL, "
                "c CHAR(120) NOT NULL, pad CHAR(60) NOT NULL, KEY k_1 (k))")
TABLE_COUNT = 1000
TABLE_COUNTS = {"tables1000": TABLE_COUNT, "tables10000": 10 * TABLE_COUNT}


@dataclass(frozen=True)
class Workload:
    name: str
    table_regex: str  # the tables it writes, as Flink CDC's table-list regex (after "sbtest.")
    description: str


WORKLOADS = {
    "sysbench": Workload("sysbench", "sbtest1", "sysbench, 100-row transactions"),
    "single-row": Workload("single-row", "sbtest1", "sysbench, single-row autocommit transactions"),
    "wide": Workload("wide", "wide", f"{len(COLUMNS)}-column mixed-type table, 100-row transactions"),
    **{name: Workload(name, "sbtest[0-9]+", f"sysbench over {count:,} tables, 100-row transactions")
       for name, count in TABLE_COUNTS.items()},
}


def _filler(rng: random.Random, n: int) -> str:
    return "".join(rng.choice("0123456789-") for _ in range(n))


def setup(conn, workload: str) -> None:
    """The workload's database and tables, without rows."""
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE IF NOT EXISTS {DATABASE}")
        if workload in ("sysbench", "single-row"):
            cur.execute(SYSBENCH_DDL.format(database=DATABASE, table="sbtest1"))
        elif workload == "wide":
            columns = ", ".join(f"`{n}` {t}" for n, t in COLUMNS)
            cur.execute(f"CREATE TABLE {DATABASE}.wide ({columns}, PRIMARY KEY (i))")
        elif workload in TABLE_COUNTS:
            for number in range(1, TABLE_COUNTS[workload] + 1):
                cur.execute(SYSBENCH_DDL.format(database=DATABASE, table=f"sbtest{number}"))
        else:
            raise ValueError(f"unknown workload {workload!r}; choose one of {', '.join(WORKLOADS)}")


def write(conn, workload: str, changes: int, seed: int = 1) -> int:
    """Writes at least `changes` row changes; returns how many the binlog holds."""
    if workload == "sysbench":
        return run_workload(conn, changes, seed)
    if workload == "single-row":
        return _single_row(conn, changes, seed)
    if workload == "wide":
        return _wide(conn, changes, seed)
    if workload in TABLE_COUNTS:
        return _tables(conn, changes, seed, TABLE_COUNTS[workload])
    raise ValueError(f"unknown workload {workload!r}; choose one of {', '.join(WORKLOADS)}")


def _single_row(conn, changes: int, seed: int) -> int:
    rng = random.Random(seed)
    table = f"{DATABASE}.sbtest1"
    next_id, rows = 1, 0
    with conn.cursor() as cur:
        cur.execute("SET autocommit = 1")
        while rows < changes:
            choice = rng.random()
            if choice < 0.6 or next_id < 1000:
                rows += cur.execute(f"INSERT INTO {table} VALUES (%s,%s,%s,%s)",
                                    (next_id, rng.randint(1, 10**6), _filler(rng, 120), _filler(rng, 60)))
                next_id += 1
            elif choice < 0.9:
                rows += cur.execute(f"UPDATE {table} SET k = k + 1 WHERE id = %s", (rng.randint(1, next_id - 1),))
            else:
                rows += cur.execute(f"DELETE FROM {table} WHERE id = %s", (rng.randint(1, next_id - 1),))
    return rows


def _wide(conn, changes: int, seed: int) -> int:
    rng = random.Random(seed)
    table = f"{DATABASE}.wide"
    placeholders = ", ".join(["%s"] * len(COLUMN_NAMES))
    next_id, rows = 1, 0
    with conn.cursor() as cur:
        cur.execute("SET time_zone = '+00:00'")
        while rows < changes:
            choice = rng.random()
            cur.execute("BEGIN")
            if choice < 0.6 or next_id < 1000:
                batch = []
                for offset in range(100):
                    row = dict(ROWS[(next_id + offset) % len(ROWS)])
                    row["i"] = next_id + offset
                    batch.append([row[n] for n in COLUMN_NAMES])
                cur.executemany(f"INSERT INTO {table} VALUES ({placeholders})", batch)
                next_id += 100
                rows += 100
            elif choice < 0.9:
                lo = rng.randint(1, next_id - 100)
                # siu is 65535, 0 or NULL in ROWS: the rows that hold a value always change.
                rows += cur.execute(f"UPDATE {table} SET siu = 65535 - siu WHERE i BETWEEN %s AND %s "
                                    "AND siu IS NOT NULL", (lo, lo + 49))
            else:
                lo = rng.randint(1, next_id - 100)
                rows += cur.execute(f"DELETE FROM {table} WHERE i BETWEEN %s AND %s", (lo, lo + 16))
            cur.execute("COMMIT")
    return rows


def _tables(conn, changes: int, seed: int, count: int) -> int:
    rng = random.Random(seed)
    next_ids = [1] * (count + 1)  # per table number; index 0 unused
    filled: list[int] = []  # tables with at least one insert transaction
    rows = 0
    with conn.cursor() as cur:
        while rows < changes:
            choice = rng.random()
            cur.execute("BEGIN")
            if choice < 0.6 or len(filled) < 10:
                number = rng.randint(1, count)
                next_id = next_ids[number]
                values = [(next_id + i, rng.randint(1, 10**6), _filler(rng, 120), _filler(rng, 60)) for i in range(100)]
                cur.executemany(f"INSERT INTO {DATABASE}.sbtest{number} VALUES (%s,%s,%s,%s)", values)
                if next_id == 1:
                    filled.append(number)
                next_ids[number] = next_id + 100
                rows += 100
            else:
                number = rng.choice(filled)
                lo = rng.randint(1, next_ids[number] - 100)
                if choice < 0.9:
                    rows += cur.execute(f"UPDATE {DATABASE}.sbtest{number} SET k = k + 1 WHERE id BETWEEN %s AND %s",
                                        (lo, lo + 49))
                else:
                    rows += cur.execute(f"DELETE FROM {DATABASE}.sbtest{number} WHERE id BETWEEN %s AND %s",
                                        (lo, lo + 16))
            cur.execute("COMMIT")
    return rows
