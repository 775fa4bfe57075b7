"""MySQL sink apply benchmark: rows/s into a downstream MariaDB with worker-count 1, 4, 16.

    .venv/bin/python bench/mysql_apply_bench.py [--changes 50000] [--workers 1,4,16] [--update-rows 1]

Drives the sink alone (no binlog, no Spark), so the figure is what the sink can apply: a
sysbench-shaped table (`id INT PK, k INT, c CHAR(120), pad CHAR(60)`, index on k) receives
small transactions as sysbench's oltp_write_only makes them: 60% of the changes are inserts in
10-row transactions, 30% single-row updates of k/c, 10% single-row deletes, keys random
(`--update-rows N`: the updates come N distinct rows to a transaction, as sysbench's range
updates). Each worker-count starts from an empty table; the clock runs from the first
`write_rows` until `flush` returns (everything committed); the downstream's CPU seconds are
printed beside it. Not a test: figures go in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

from sparkcdc.config.replica import ReplicaConfig  # noqa: E402
from sparkcdc.model.events import RowChange, TableInfo  # noqa: E402
from sparkcdc.model.tso import compose  # noqa: E402
from sparkcdc.sink.mysql.sink import MySQLSink  # noqa: E402
from sparkcdc.testing.mariadb import MariaDBServer  # noqa: E402
from sparkcdc.upstream.schema_reader import read_table_info  # noqa: E402

SCHEMA, TABLE = "bench", "sbtest1"
CREATE = (f"CREATE TABLE `{SCHEMA}`.`{TABLE}` (id INT NOT NULL PRIMARY KEY, k INT NOT NULL DEFAULT 0, "
          "c CHAR(120) NOT NULL DEFAULT '', pad CHAR(60) NOT NULL DEFAULT '', KEY k_1 (k))")


def sysbench_text(rng: random.Random, groups: int) -> str:
    return "-".join(f"{rng.randrange(10**11):011d}" for _ in range(groups))


def transactions(changes: int, seed: int = 7, update_rows: int = 1) -> list[list[RowChange]]:
    """Upstream-like transactions (one change per key each), commit-ts increasing."""
    rng = random.Random(seed)
    live: dict[int, tuple[str, ...]] = {}
    out: list[list[RowChange]] = []
    next_id, emitted, ts = 1, 0, 1_700_000_000_000
    while emitted < changes:
        ts += 1
        commit_ts = compose(ts)
        choice = rng.random()
        if choice < 0.6 or len(live) < 100:
            txn = []
            for seq in range(10):
                row = (str(next_id), str(rng.randrange(changes)), sysbench_text(rng, 10), sysbench_text(rng, 5))
                live[next_id] = row
                txn.append(RowChange(commit_ts, SCHEMA, TABLE, "insert", after=row, seq=seq))
                next_id += 1
            out.append(txn)
            emitted += len(txn)
            continue
        key = rng.choice(list(live)) if len(live) < 1000 else rng.randrange(1, next_id)
        before = live.get(key)
        if before is None:
            continue
        if choice < 0.9:
            txn = []
            for other in range(key, key + update_rows * 2):
                before = live.get(other)
                if before is None or len(txn) == update_rows:
                    continue
                after = (before[0], str(int(before[1]) + 1), sysbench_text(rng, 10), before[3])
                live[other] = after
                txn.append(RowChange(commit_ts, SCHEMA, TABLE, "update", before=before, after=after, seq=len(txn)))
            out.append(txn)
            emitted += len(txn)
            continue
        else:
            del live[key]
            out.append([RowChange(commit_ts, SCHEMA, TABLE, "delete", before=before)])
        emitted += 1
    return out


def fresh_table(server: MariaDBServer) -> TableInfo:
    """The benchmark table, dropped and created empty; its TableInfo as the sink sees it."""
    conn = server.connect()
    with conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS `{SCHEMA}`")
        cur.execute(f"CREATE DATABASE `{SCHEMA}`")
        cur.execute(CREATE)
    info = read_table_info(conn, SCHEMA, TABLE, version=1, table_id=1)
    conn.close()
    return info


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_once(server: MariaDBServer, workers: int, txns: list[list[RowChange]]) -> tuple[int, float, float]:
    info = fresh_table(server)
    uri = f"mysql://root@127.0.0.1:{server.port}/?worker-count={workers}"
    rows = sum(len(t) for t in txns)
    with MySQLSink(uri, ReplicaConfig()) as sink:
        sink.table_meta(info)  # downstream metadata is read once per table version, not timed
        started, cpu = time.perf_counter(), cpu_seconds(server.pid)
        for start in range(0, len(txns), 500):  # the pipeline hands a batch's transactions at once
            sink.write_rows(info, [row for txn in txns[start:start + 500] for row in txn])
        sink.flush()
        elapsed, cpu = time.perf_counter() - started, cpu_seconds(server.pid) - cpu
    return rows, elapsed, cpu


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--changes", type=int, default=50_000)
    parser.add_argument("--workers", default="1,4,16")
    parser.add_argument("--update-rows", type=int, default=1, help="rows an update transaction changes")
    args = parser.parse_args()
    if args.update_rows < 1:
        parser.error("--update-rows must be 1 or more")
    txns = transactions(args.changes, update_rows=args.update_rows)
    with tempfile.TemporaryDirectory(prefix="sparkcdc-apply-bench-") as base:
        server = MariaDBServer(os.path.join(base, "downstream")).start()
        try:
            print(f"{sum(len(t) for t in txns)} row changes in {len(txns)} transactions")
            print("| worker-count | rows | seconds | rows/s | downstream CPU s |")
            print("|---|---|---|---|---|")
            for workers in (int(w) for w in args.workers.split(",")):
                rows, elapsed, cpu = run_once(server, workers, txns)
                print(f"| {workers} | {rows:,} | {elapsed:.1f} | {rows / elapsed:,.0f} | {cpu:.1f} |", flush=True)
        finally:
            server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
