"""Filter benchmark: a filtered-out busy table does not slow the changefeed of another table.

    .venv/bin/python bench/filter_bench.py [--rows 20000] [--busy-factor 10]

On one MariaDB, two binlog ranges are prepared (catch-up mode):
  quiet: `rows` row changes to table `a` only;
  busy:  the same changes to `a`, interleaved with `busy-factor` times as many to table `b`.
Then, after a warm-up run of the first, three changefeeds run one after another to a file sink, each with a target-ts at the end of
its range, timed from `changefeed create` until it is `finished`:
  1. quiet range, rules ["bench.a"]
  2. busy range,  rules ["bench.a"]   (b's rows are read from the binlog but never decoded)
  3. busy range,  rules ["bench.*"]   (reference: b decoded and written too)
If filtering happens before decoding, 2 takes about as long as 1 and far less than 3.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))
sys.path.insert(0, os.path.dirname(__file__))

from capture_bench import tree_usage  # noqa: E402
from sparkcdc.testing.mariadb import MariaDBServer  # noqa: E402
from sparkcdc.testing.server_process import ServerProcess  # noqa: E402
from sparkcdc.upstream.txn_index import TxnIndex  # noqa: E402
from sparkcdc.testing.scratch import scratch_dir  # noqa: E402


def insert_batches(cur, table: str, first_id: int, rows: int, rng: random.Random) -> None:
    for start in range(first_id, first_id + rows, 100):
        values = [(i, rng.randint(1, 10**6), "c" * 100) for i in range(start, min(start + 100, first_id + rows))]
        cur.execute("BEGIN")
        cur.executemany(f"INSERT INTO bench.{table} VALUES (%s,%s,%s)", values)
        cur.execute("COMMIT")


def wait_indexed(index: TxnIndex, conn) -> int:
    with conn.cursor() as cur:
        cur.execute("SHOW MASTER STATUS")
        file, pos = cur.fetchone()[:2]
    while True:
        last = index.last_txn()
        if last and (last.end.file, last.end.pos) == (file, pos):
            return last.commit_ts
        time.sleep(0.2)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--busy-factor", type=int, default=10)
    args = parser.parse_args()
    base = scratch_dir("sparkcdc-filter-bench-")
    mariadb = MariaDBServer(os.path.join(base, "mariadb")).start()
    server = ServerProcess(os.path.join(base, "cdc"), mariadb.uri).start()
    rng = random.Random(1)
    try:
        print(f"load average before: {os.getloadavg()}")
        index = TxnIndex(os.path.join(base, "cdc", "txn-index.sqlite"))
        conn = mariadb.connect()
        with conn.cursor() as cur:
            cur.execute("CREATE DATABASE bench")
            for table in ("a", "b"):
                cur.execute(f"CREATE TABLE bench.{table} (id INT PRIMARY KEY, k INT, c CHAR(100))")
        quiet_start = wait_indexed(index, conn)
        with conn.cursor() as cur:
            insert_batches(cur, "a", 1, args.rows, rng)
        quiet_end = wait_indexed(index, conn)
        with conn.cursor() as cur:
            chunk = 100
            for n in range(0, args.rows, chunk):
                insert_batches(cur, "a", 10**7 + n, min(chunk, args.rows - n), rng)
                insert_batches(cur, "b", 1 + n * args.busy_factor, chunk * args.busy_factor, rng)
        busy_end = wait_indexed(index, conn)

        runs = [
            ("warm-up (not a measurement)", quiet_start, quiet_end, "bench.a", args.rows),
            ("quiet range, only bench.a", quiet_start, quiet_end, "bench.a", args.rows),
            ("busy range, only bench.a", quiet_end, busy_end, "bench.a", args.rows),
            ("busy range, bench.* (reference)", quiet_end, busy_end, "bench.*",
             args.rows * (1 + args.busy_factor)),
        ]
        for number, (label, start, end, rule, rows) in enumerate(runs, 1):
            config = os.path.join(base, f"cf{number}.toml")
            with open(config, "w") as f:
                f.write(f'[filter]\nrules = ["{rule}"]\n')
            cpu_before = tree_usage(server.process.pid)[0]
            began = time.monotonic()
            server.cli("changefeed", "create", "-c", f"run{number}", "--config", config,
                       "--start-ts", str(start), "--target-ts", str(end),
                       "--sink-uri", f"file://{base}/out{number}?protocol=canal-json")
            while server.api("GET", f"/api/v2/changefeeds/run{number}")["state"] != "finished":
                time.sleep(0.2)
            elapsed = time.monotonic() - began
            cpu = tree_usage(server.process.pid)[0] - cpu_before
            print(f"{number - 1}. {label:<34} {rows:>8} rows written in {elapsed:5.1f}s, CPU {cpu:5.1f}s")
        print(f"load average after: {os.getloadavg()}")
    finally:
        server.stop()
        mariadb.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
