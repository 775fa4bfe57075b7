"""Capture benchmark: rows/s from a prepared binlog to the file storage sink (catch-up mode).

    .venv/bin/python bench/capture_bench.py [--changes 100000] [--protocol canal-json]

A private MariaDB gets a sysbench-shaped workload (`id, k, c CHAR(120), pad CHAR(60)`; 60%
inserts in 100-row transactions, 30% updates, 10% deletes). Then
  1. plain `mysql-replication` decodes the same binlog range in one process, rows to JSON;
  2. a sparkcdc changefeed replicates it from before the workload to a file sink, timed from
     `changefeed create` until its checkpoint passes the last transaction.
Prints rows/s, CPU seconds and peak RSS for each, and the ratio. Not a test: figures go in
notes and docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

from sparkcdc.testing.mariadb import MariaDBServer  # noqa: E402
from sparkcdc.testing.server_process import ServerProcess  # noqa: E402
from sparkcdc.upstream.txn_index import TxnIndex  # noqa: E402

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


def process_tree(root_pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(int(entry))
            except OSError:
                continue
    tree, todo = [], [root_pid]
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo.extend(children.get(pid, []))
    return tree


def tree_usage(root_pid: int) -> tuple[float, int]:
    """(CPU seconds, RSS bytes) of a process and all its descendants."""
    cpu, rss = 0.0, 0
    for pid in process_tree(root_pid):
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            cpu += (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
            rss += int(fields[21]) * PAGE
        except OSError:
            continue
    return cpu, rss


class PeakSampler(threading.Thread):
    def __init__(self, pid: int):
        super().__init__(daemon=True)
        self.pid, self.peak, self.done = pid, 0, threading.Event()

    def run(self):
        while not self.done.is_set():
            self.peak = max(self.peak, tree_usage(self.pid)[1])
            time.sleep(0.2)


def run_workload(conn, changes: int, seed: int = 1) -> int:
    rng = random.Random(seed)
    pad = lambda n: "".join(rng.choice("0123456789-") for _ in range(n))  # noqa: E731
    with conn.cursor() as cur:
        cur.execute("CREATE DATABASE IF NOT EXISTS sbtest")
        cur.execute("CREATE TABLE IF NOT EXISTS sbtest.sbtest1 (id INT PRIMARY KEY, k INT NOT NULL, "
                    "c CHAR(120) NOT NULL, pad CHAR(60) NOT NULL, KEY k_1 (k))")
        next_id, rows = 1, 0
        while rows < changes:
            choice = rng.random()
            cur.execute("BEGIN")
            if choice < 0.6 or next_id < 1000:
                values = [(next_id + i, rng.randint(1, 10**6), pad(120), pad(60)) for i in range(100)]
                cur.executemany("INSERT INTO sbtest.sbtest1 VALUES (%s,%s,%s,%s)", values)
                next_id += 100
                rows += 100
            elif choice < 0.9:
                lo = rng.randint(1, next_id - 100)
                rows += cur.execute("UPDATE sbtest.sbtest1 SET k = k + 1 WHERE id BETWEEN %s AND %s", (lo, lo + 49))
            else:
                lo = rng.randint(1, next_id - 100)
                rows += cur.execute("DELETE FROM sbtest.sbtest1 WHERE id BETWEEN %s AND %s", (lo, lo + 16))
            cur.execute("COMMIT")
    return rows


def plain_mysql_replication(mariadb: MariaDBServer, start, end) -> tuple[int, float, float]:
    """Rows, seconds and CPU seconds for one process decoding [start, end) to JSON."""
    from pymysqlreplication import BinLogStreamReader
    from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

    began, cpu0 = time.monotonic(), time.process_time()
    stream = BinLogStreamReader(
        connection_settings={"host": "127.0.0.1", "port": mariadb.port, "user": "root", "passwd": ""},
        server_id=990001, log_file=start.file, log_pos=start.pos, resume_stream=True,
        blocking=False, only_events=[WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent],
        enable_logging=False,
    )
    rows = 0
    end_key = (int(end.file.rsplit(".", 1)[1]), end.pos)
    for event in stream:
        for row in event.rows:
            json.dumps(row, default=str)
            rows += 1
        if (int(stream.log_file.rsplit(".", 1)[1]), stream.log_pos) >= end_key:
            break
    stream.close()
    return rows, time.monotonic() - began, time.process_time() - cpu0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--changes", type=int, default=100_000)
    parser.add_argument("--protocol", default="canal-json", choices=["canal-json", "csv"])
    args = parser.parse_args()
    base = tempfile.mkdtemp(prefix="sparkcdc-bench-")
    mariadb = MariaDBServer(os.path.join(base, "mariadb")).start()
    server = ServerProcess(os.path.join(base, "cdc"), mariadb.uri).start()
    try:
        print(f"load average before: {os.getloadavg()}")
        index = TxnIndex(os.path.join(base, "cdc", "txn-index.sqlite"))
        start_ts = index.resolved_ts()
        start_pos = index.position_at(start_ts)
        conn = mariadb.connect()
        t0 = time.monotonic()
        rows = run_workload(conn, args.changes)
        print(f"workload: {rows} row changes in {time.monotonic() - t0:.1f}s")
        with conn.cursor() as cur:
            cur.execute("SHOW MASTER STATUS")
            file, pos = cur.fetchone()[:2]
        while True:  # wait until the puller has indexed the whole workload
            last = index.last_txn()
            if last and (last.end.file, last.end.pos) == (file, pos):
                break
            time.sleep(0.2)
        end_ts = last.commit_ts

        decoded, seconds, cpu = plain_mysql_replication(mariadb, start_pos, last.end)
        print(f"plain mysql-replication: {decoded} rows in {seconds:.1f}s = {decoded / seconds:,.0f} rows/s, "
              f"CPU {cpu:.1f}s, one process")

        sampler = PeakSampler(server.process.pid)
        cpu_before = tree_usage(server.process.pid)[0]
        sampler.start()
        began = time.monotonic()
        server.cli("changefeed", "create", "-c", "bench", "--start-ts", str(start_ts), "--sink-uri",
                   f"file://{base}/out?protocol={args.protocol}&enable-tidb-extension=true"
                   if args.protocol == "canal-json" else f"file://{base}/out?protocol=csv")
        while server.checkpoint("bench") < end_ts:
            time.sleep(0.2)
        elapsed = time.monotonic() - began
        sampler.done.set()
        cpu_used = tree_usage(server.process.pid)[0] - cpu_before
        print(f"sparkcdc ({args.protocol} to file): {rows} rows in {elapsed:.1f}s = {rows / elapsed:,.0f} rows/s, "
              f"CPU {cpu_used:.1f}s, peak RSS {sampler.peak / 2**20:,.0f} MiB (server + Spark JVM + workers); "
              f"includes Spark query start-up")
        print(f"ratio sparkcdc / plain mysql-replication: {(rows / elapsed) / (decoded / seconds):.2f}")
        print(f"load average after: {os.getloadavg()}")
    finally:
        server.stop()
        mariadb.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
