"""Reading a large transaction piece by piece: does a later piece cost more than an early one?

    .venv/bin/python bench/piece_read_bench.py [--rows 200000] [--piece-mb 8]

A private MariaDB; one transaction inserts --rows sysbench-shaped rows (bench/large_txn_bench.py's
workload) and the puller indexes it with --piece-mb pieces. Each piece is then decoded alone, as
an executor does (`read_range_batches`: a short dump of the piece's TABLE_MAP events, then the
binlog from the cut), and the script prints per piece its binlog bytes, rows, wall and CPU
seconds, and the binlog bytes the reader received (the piece plus the TABLE_MAP dump). A
reader that went back to the transaction's start would show bytes and time growing with the
piece number (quadratic in total); reading pieces costs about the same each.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))

from pymysqlreplication import BinLogStreamReader  # noqa: E402

from sparkcdc.testing.mariadb import MariaDBServer  # noqa: E402
from sparkcdc.upstream.connection import UpstreamConfig  # noqa: E402
from sparkcdc.upstream.puller import Puller  # noqa: E402
from sparkcdc.upstream.range_reader import BinlogRange, read_range_batches  # noqa: E402
from sparkcdc.upstream.txn_index import TxnIndex  # noqa: E402
from sparkcdc.testing.scratch import scratch_dir  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from large_txn_bench import write_transaction  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--piece-mb", type=float, default=8.0)
    args = parser.parse_args()
    base = scratch_dir("sparkcdc-piece-read-")
    mariadb = MariaDBServer(os.path.join(base, "mariadb")).start()
    received = [0]
    original = BinLogStreamReader.fetchone

    def counting_fetchone(self):  # every event the readers receive, whatever they keep
        before = self.log_pos
        event = original(self)
        if event is not None and self.log_pos > before:
            received[0] += self.log_pos - before
        return event

    BinLogStreamReader.fetchone = counting_fetchone
    try:
        conn = mariadb.connect()
        with conn.cursor() as cur:
            cur.execute("CREATE DATABASE sbtest")
            cur.execute("CREATE TABLE sbtest.sbtest1 (id INT PRIMARY KEY, k INT NOT NULL, c CHAR(120) NOT NULL, "
                        "pad CHAR(60) NOT NULL, KEY k_1 (k))")
        cfg = UpstreamConfig.from_uri(mariadb.uri)
        index = TxnIndex(os.path.join(base, "index.sqlite"))
        puller = Puller(cfg, index, 9100, piece_bytes=int(args.piece_mb * 2**20)).start()
        puller.wait_caught_up(30)
        write_transaction(conn, args.rows)
        puller.wait_caught_up(600)
        puller.stop()
        txn = index.last_txn()
        tables = {f"{t.schema}.{t.table}": t.to_json() for t in index.tables_at(txn.commit_ts)}
        print(f"load average before: {os.getloadavg()}")
        print(f"transaction: {args.rows:,} rows, {txn.size / 2**20:,.1f} MiB of binlog, {txn.piece_count} pieces")
        print("piece | binlog MiB | rows | wall s | CPU s | MiB received")
        for piece in range(txn.piece_count):
            start, end, maps = txn.piece_range(piece)
            r = BinlogRange(cfg, 9200 + piece, start, end, (txn.commit_ts,), tables, piece, maps)
            received[0] = 0
            began, cpu = time.monotonic(), time.process_time()
            rows = sum(batch.num_rows for batch in read_range_batches(r))
            wall, cpu = time.monotonic() - began, time.process_time() - cpu
            print(f"{piece} | {(end.pos - start.pos) / 2**20:.2f} | {rows:,} | {wall:.2f} | {cpu:.2f} | "
                  f"{received[0] / 2**20:.2f}")
        print(f"load average after: {os.getloadavg()}")
    finally:
        BinLogStreamReader.fetchone = original
        mariadb.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
