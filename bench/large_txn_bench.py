"""Large-transaction benchmark: one 1,000,000-row upstream transaction through a file-sink changefeed.

    .venv/bin/python bench/large_txn_bench.py [--rows 1000000] [--protocol canal-json|csv] [--timeout 1800]

A private MariaDB and a `sparkcdc server`; one transaction inserts --rows sysbench-shaped rows
(`id, k, c CHAR(120), pad CHAR(60)`) and commits. Once the server's puller has indexed it, a
changefeed to the file storage sink starts from before the transaction and runs until its
checkpoint passes the transaction's commit-ts. Prints the time to write the transaction, the
changefeed's wall time (from `changefeed create`, Spark query start-up included) and CPU seconds,
the peak RSS of the server's whole process tree (server, Spark JVM, Python workers) during the
write and during the changefeed, MariaDB's peak RSS, and checks the sink holds every row.
Target (issue 11): peak memory under 2 GB across all processes.
"""

from __future__ import annotations

import argparse
import glob
import os
import random
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))

from capture_bench import add_server_arg  # noqa: E402
from sparkcdc.testing.mariadb import MariaDBServer  # noqa: E402
from sparkcdc.testing.process_usage import PeakRSS, format_breakdown, tree_usage  # noqa: E402
from sparkcdc.testing.server_process import ServerProcess  # noqa: E402
from sparkcdc.upstream.txn_index import TxnIndex  # noqa: E402
from sparkcdc.testing.scratch import scratch_dir  # noqa: E402

CHANGEFEED = "large-txn"


def write_transaction(conn, rows: int, chunk: int = 5000) -> None:
    """One transaction of `rows` sysbench-shaped inserts, sent in multi-row statements."""
    rng = random.Random(1)
    filler = "".join(rng.choice("0123456789-") for _ in range(180))
    with conn.cursor() as cur:
        cur.execute("BEGIN")
        for first in range(1, rows + 1, chunk):
            last = min(rows, first + chunk - 1)
            values = [(i, rng.randint(1, 10**6), filler[:120], filler[120:]) for i in range(first, last + 1)]
            cur.executemany("INSERT INTO sbtest.sbtest1 VALUES (%s,%s,%s,%s)", values)
        cur.execute("COMMIT")


def sink_rows(directory: str, protocol: str) -> int:
    """Row changes in the sink's data files (one message or csv line per row change)."""
    rows = 0
    extension = "csv" if protocol == "csv" else "json"
    for path in glob.glob(os.path.join(directory, "sbtest", "sbtest1", "**", f"CDC*.{extension}"), recursive=True):
        with open(path, "rb") as f:
            rows += sum(1 for line in f if line.strip())
    return rows


def mariadb_pid(mariadb: MariaDBServer) -> int:
    with open(mariadb.pid_file) as f:
        return int(f.read().strip())


def mib(value: int) -> str:
    return f"{value / 2**20:,.0f} MiB"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--protocol", default="canal-json", choices=["canal-json", "csv"])
    parser.add_argument("--timeout", type=float, default=1800, help="give up on the changefeed after this many seconds")
    add_server_arg(parser)
    args = parser.parse_args()
    if args.rows <= 0:
        parser.error("--rows must be positive")

    base = scratch_dir("sparkcdc-large-txn-")
    sink_dir = os.path.join(base, "out")
    mariadb = MariaDBServer(os.path.join(base, "mariadb")).start()
    server = None
    try:
        conn = mariadb.connect()
        with conn.cursor() as cur:
            cur.execute("CREATE DATABASE sbtest")
            cur.execute("CREATE TABLE sbtest.sbtest1 (id INT PRIMARY KEY, k INT NOT NULL, c CHAR(120) NOT NULL, "
                        "pad CHAR(60) NOT NULL, KEY k_1 (k))")
        server = ServerProcess(os.path.join(base, "cdc"), mariadb.uri, extra_args=tuple(args.server_arg)).start()
        index = TxnIndex(os.path.join(base, "cdc", "txn-index.sqlite"))
        start_ts = index.resolved_ts()
        print(f"load average before: {os.getloadavg()}", flush=True)

        server_peak, mariadb_peak = PeakRSS(server.process.pid), PeakRSS(mariadb_pid(mariadb))
        server_peak.start()
        mariadb_peak.start()
        began = time.monotonic()
        write_transaction(conn, args.rows)
        written = time.monotonic() - began
        with conn.cursor() as cur:
            cur.execute("SHOW MASTER STATUS")
            file, pos = cur.fetchone()[:2]
        while True:  # the puller has indexed the transaction
            last = index.last_txn()
            if last and (last.end.file, last.end.pos) == (file, pos):
                break
            time.sleep(0.2)
        indexed = time.monotonic() - began
        write_peak = server_peak.stop()
        print(f"transaction of {args.rows:,} rows: written in {written:.1f}s, indexed by the puller after "
              f"{indexed:.1f}s, {last.size / 2**20:,.0f} MiB of binlog; server tree peak RSS meanwhile "
              f"{mib(write_peak)}", flush=True)

        server_peak = PeakRSS(server.process.pid)
        server_peak.start()
        cpu_before = tree_usage(server.process.pid)[0]
        began = time.monotonic()
        server.cli("changefeed", "create", "-c", CHANGEFEED, "--start-ts", str(start_ts), "--sink-uri",
                   f"file://{sink_dir}?protocol={args.protocol}"
                   + ("&enable-tidb-extension=true" if args.protocol == "canal-json" else ""))
        state, info = "", {}
        while time.monotonic() - began < args.timeout:
            info = server.api("GET", f"/api/v2/changefeeds/{CHANGEFEED}")
            state = info.get("state", "")
            if int(info["checkpoint_ts"]) >= last.commit_ts or state in ("failed", "stopped"):
                break
            time.sleep(0.5)
        elapsed = time.monotonic() - began
        cpu = tree_usage(server.process.pid)[0] - cpu_before
        changefeed_peak, upstream_peak = server_peak.stop(), mariadb_peak.stop()
        done = server.checkpoint(CHANGEFEED) >= last.commit_ts
        print(f"changefeed ({args.protocol} to file): {'passed the transaction' if done else 'NOT done, state ' + state} "
              f"after {elapsed:.1f}s, CPU {cpu:.1f}s; server tree peak RSS {mib(changefeed_peak)} "
              f"(server + Spark JVM + Python workers); MariaDB peak RSS {mib(upstream_peak)}; "
              f"load average after: {os.getloadavg()}", flush=True)
        print(f"  server tree at its peak: {format_breakdown(server_peak.at_peak)}; each one's own peak: "
              f"{format_breakdown(server_peak.group_peaks)}", flush=True)
        if not done:
            log_path = server.log_path or os.path.join(base, "cdc", "server.log")
            with open(log_path, encoding="utf-8", errors="replace") as f:
                out_of_memory = "java.lang.OutOfMemoryError" in f.read()
            print(f"changefeed error: {str(info.get('error'))[:400]}")
            if out_of_memory:
                print("the Spark JVM ran out of heap (java.lang.OutOfMemoryError): a micro-batch was too large for "
                      "the driver (a transaction over 8 MB of binlog should span several batches in pieces)")
            print(f"see {log_path}")
            return 1
        rows = sink_rows(sink_dir, args.protocol)
        print(f"sink holds {rows:,} row changes (expected {args.rows:,}); peak RSS across sparkcdc's processes "
              f"{mib(max(write_peak, changefeed_peak))} (target < 2 GB)")
        return 0 if rows == args.rows else 1
    finally:
        if server is not None:
            server.stop()
        mariadb.stop()


if __name__ == "__main__":
    sys.exit(main())
