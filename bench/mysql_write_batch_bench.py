"""Driver CPU of `write_batch` to the MySQL sink: the RowChange path against the columnar one.

    .venv/bin/python bench/mysql_write_batch_bench.py [--changes 100000] [--batch-rows 20000]
        [--workload sysbench|single-row] [--rounds 3] [--workers 16] [--safe-mode] [--profile]

write_batch_bench's Arrow batches (capture_bench's sysbench workload as df.toArrow() gives them:
60% 100-row insert transactions, 30% 50-row `k = k + 1` updates, 10% 17-row deletes) go through
`write_batch` into a MySQLSink writing to a private MariaDB, each round twice from an empty
table: once with the sink's columnar entry hidden (every row becomes a RowChange) and once as a
changefeed runs it. The clock covers what a micro-batch costs the driver process (its writer
threads included): grouping, conflict keys, SQL, the round trips, and waiting for every commit.
The downstream server's CPU is not counted. Prints the process CPU per row and rows/s of each
(best round), their ratio and the load average, and checks that both paths leave a table whose
CHECKSUM TABLE equals that of the rows the workload leaves. --profile prints cProfile's top
functions of one columnar round, the driver thread's and the writer threads' together.
Not a test: figures go in bench/README.md.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from write_batch_bench import TABLE, WORKLOADS, Index, batches, print_best  # noqa: E402

from sparkcdc.config.replica import ReplicaConfig  # noqa: E402
from sparkcdc.pipeline.batch_sink import write_batch  # noqa: E402
from sparkcdc.sink.mysql import sink as sink_module  # noqa: E402
from sparkcdc.sink.mysql.sink import MySQLSink  # noqa: E402
from sparkcdc.testing.mariadb import MariaDBServer  # noqa: E402

CREATE = ("CREATE TABLE `sbtest`.`sbtest1` (id INT NOT NULL PRIMARY KEY, k INT NOT NULL DEFAULT 0, "
          "c CHAR(120) NOT NULL DEFAULT '', pad CHAR(60) NOT NULL DEFAULT '')")


class RowChangeMySQLSink(MySQLSink):
    accepts_arrow = False  # hides write_arrow: the RowChange path


def fresh_table(server: MariaDBServer) -> None:
    connection = server.connect()
    with connection.cursor() as cursor:
        cursor.execute("DROP DATABASE IF EXISTS `sbtest`")
        cursor.execute("CREATE DATABASE `sbtest`")
        cursor.execute(CREATE)
    connection.close()


def checksum(server: MariaDBServer, table: str) -> tuple[int, int]:
    connection = server.connect()
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT COUNT(*) FROM {table}")
        count = cursor.fetchone()[0]
        cursor.execute(f"CHECKSUM TABLE {table}")
        value = cursor.fetchone()[1]
    connection.close()
    return count, value


def expected_checksum(server: MariaDBServer, txns) -> tuple[int, int]:
    """The rows the workload leaves, inserted plainly into a second table."""
    live: dict[str, tuple] = {}
    for txn in txns:
        for row in txn:
            if row.before is not None:
                live.pop(row.before[0], None)
            if row.after is not None:
                live[row.after[0]] = row.after
    connection = server.connect()
    with connection.cursor() as cursor:
        cursor.execute("DROP DATABASE IF EXISTS `expected`")
        cursor.execute("CREATE DATABASE `expected`")
        cursor.execute(CREATE.replace("`sbtest`", "`expected`"))
        rows = list(live.values())
        for start in range(0, len(rows), 1000):
            cursor.executemany("INSERT INTO `expected`.`sbtest1` VALUES (%s,%s,%s,%s)", rows[start:start + 1000])
    connection.close()
    return checksum(server, "`expected`.`sbtest1`")


class ProfiledWriter(sink_module._Writer):
    """A writer thread that runs under its own profiler (cProfile sees only its own thread)."""

    profiles: list[cProfile.Profile] = []

    def run(self) -> None:
        profiler = cProfile.Profile()
        self.profiles.append(profiler)
        profiler.runcall(super().run)


def run(sink_class, server: MariaDBServer, tables, query: str, profile: bool = False) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of writing every batch and closing the sink."""
    fresh_table(server)
    if profile:
        sink_module._Writer = ProfiledWriter
    sink = sink_class(f"mysql://root@127.0.0.1:{server.port}/?{query}", ReplicaConfig())
    sink.table_meta(TABLE)  # read once per table version; not what a batch costs
    profiler = cProfile.Profile() if profile else None
    began, cpu = time.monotonic(), time.process_time()
    if profiler:
        profiler.enable()
    for table in tables:
        write_batch(table, Index(), sink, lambda s, t: True, lambda ts: None)
    sink.close()
    if profiler:
        profiler.disable()
        stats = pstats.Stats(profiler)
        for writer_profile in ProfiledWriter.profiles:
            stats.add(writer_profile)
        stats.sort_stats("tottime").print_stats(30)
    return time.process_time() - cpu, time.monotonic() - began


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--changes", type=int, default=100_000)
    parser.add_argument("--batch-rows", type=int, default=20_000)
    parser.add_argument("--workload", default="sysbench", choices=list(WORKLOADS))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--safe-mode", action="store_true")
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    txns = WORKLOADS[args.workload](args.changes)
    tables = batches(txns, args.batch_rows)
    rows = sum(len(t) for t in txns)
    query = f"worker-count={args.workers}" + ("&safe-mode=true" if args.safe_mode else "")
    print(f"{rows} row changes in {len(txns)} transactions, {len(tables)} batches, workload {args.workload}, "
          f"{query}")
    print("load average before: " + " ".join(f"{x:.2f}" for x in os.getloadavg()))
    paths = {"row-change": RowChangeMySQLSink, "columnar": MySQLSink}
    best = {name: (float("inf"), 0.0) for name in paths}
    with tempfile.TemporaryDirectory(prefix="sparkcdc-mysql-batch-bench-") as scratch:
        server = MariaDBServer(os.path.join(scratch, "downstream")).start()
        try:
            expected = expected_checksum(server, txns)
            for round_number in range(args.rounds):
                for name, sink_class in paths.items():
                    cpu, wall = run(sink_class, server, tables, query)
                    print(f"round {round_number + 1} {name}: {cpu:.2f} CPU s, {wall:.2f} s", flush=True)
                    best[name] = min(best[name], (cpu, wall))
                    got = checksum(server, "`sbtest`.`sbtest1`")
                    if got != expected:
                        print(f"{name}: downstream holds {got}, expected {expected} (rows, checksum)",
                              file=sys.stderr)
                        return 1
            if args.rounds:
                print(f"both paths left the expected {expected[0]:,} rows (CHECKSUM TABLE {expected[1]})")
            if args.profile:
                run(MySQLSink, server, tables, query, profile=True)
        finally:
            server.stop()
    if not args.rounds:
        return 0
    print_best(best, rows, args.rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
