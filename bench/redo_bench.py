"""Redo log overhead: batch-writer throughput (rows/s) into MariaDB with the redo log off and on.

    .venv/bin/python bench/redo_bench.py [--changes 50000] [--batch-txns 500] [--workers 4] [--s3]

Runs the changefeed's batch writer (`write_batch`: grouping, netting, redo, MySQL sink, DDL
barrier, checkpoint) on the same sysbench-shaped micro-batches as bench/mysql_apply_bench.py,
without the binlog and Spark in front, so the redo log's share is as large as it can get: the
capture stage is slower than this (docs/benchmarks.md). Each mode starts from an empty table;
redo modes write to a fresh file:// directory (with fsync per batch), and with --s3 to an S3
emulator too. The machine's load varies, so modes run interleaved and the median of --rounds
runs is shown, with the CPU seconds of the bench process (batch writer, redo thread, sink
writers; MariaDB and the emulator not included). Not a test: figures go in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))
sys.path.insert(0, os.path.dirname(__file__))

import pyarrow as pa  # noqa: E402

from mysql_apply_bench import SCHEMA, TABLE, fresh_table, transactions  # noqa: E402
from sparkcdc.config.replica import ConsistentConfig, ReplicaConfig  # noqa: E402
from sparkcdc.pipeline.batch_sink import write_batch  # noqa: E402
from sparkcdc.model.change_batch import RANGE_MARKER  # noqa: E402
from sparkcdc.redo.storage import RedoStorage  # noqa: E402
from sparkcdc.redo.writer import RedoWriter  # noqa: E402
from sparkcdc.sink.mysql.sink import MySQLSink  # noqa: E402
from sparkcdc.testing.mariadb import MariaDBServer  # noqa: E402

ARROW_SCHEMA = pa.schema([("commit_ts", pa.int64()), ("seq", pa.int64()), ("schema_name", pa.string()),
                          ("table_name", pa.string()), ("op", pa.string()), ("before", pa.list_(pa.string())),
                          ("after", pa.list_(pa.string()))])


class OneTableIndex:
    def __init__(self, info):
        self.info = info

    def table_infos_at(self, names, ts):
        return [self.info for _ in names]

    def ddls_between(self, lo, hi):
        return []


def arrow_batches(txns, per_batch: int) -> list[pa.Table]:
    batches, previous_end = [], txns[0][0].commit_ts - 1
    for start in range(0, len(txns), per_batch):
        rows = [row for txn in txns[start:start + per_batch] for row in txn]
        end = rows[-1].commit_ts
        columns = [[r.commit_ts for r in rows] + [end], [r.seq for r in rows] + [previous_end],
                   [SCHEMA] * len(rows) + [""], [TABLE] * len(rows) + [""], [r.op for r in rows] + [RANGE_MARKER],
                   [list(r.before) if r.before else None for r in rows] + [None],
                   [list(r.after) if r.after else None for r in rows] + [None]]
        batches.append(pa.Table.from_arrays([pa.array(c, type=f.type) for c, f in zip(columns, ARROW_SCHEMA)],
                                            schema=ARROW_SCHEMA))
        previous_end = end
    return batches


def run_once(server: MariaDBServer, workers: int, batches: list[pa.Table], redo_uri: str | None,
             compression: str) -> tuple[int, float, float]:
    info = fresh_table(server)
    index = OneTableIndex(info)
    redo = None
    if redo_uri:
        redo = RedoWriter(RedoStorage.from_uri(redo_uri),
                          ConsistentConfig(level="eventual", storage=redo_uri, compression=compression), "bench/redo")
    rows = 0
    with MySQLSink(f"mysql://root@127.0.0.1:{server.port}/?worker-count={workers}", ReplicaConfig()) as sink:
        sink.table_meta(info)
        started, cpu_started = time.perf_counter(), time.process_time()
        for batch in batches:
            result = write_batch(batch, index, sink, lambda schema, table: True, lambda ts: None, redo=redo)
            rows += result.rows
        elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    if redo is not None:
        redo.close()
    return rows, elapsed, cpu


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--changes", type=int, default=50_000)
    parser.add_argument("--batch-txns", type=int, default=500, help="transactions per micro-batch")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=5,
                        help="runs of each mode, interleaved (the machine's load varies); the median is shown")
    parser.add_argument("--s3", action="store_true", help="also write the redo log to an S3 emulator")
    args = parser.parse_args()
    txns = transactions(args.changes)
    batches = arrow_batches(txns, args.batch_txns)
    with tempfile.TemporaryDirectory(prefix="sparkcdc-redo-bench-") as base:
        server = MariaDBServer(os.path.join(base, "downstream")).start()
        emulator = None
        modes = [("off", None, ""), ("file, no compression", "file", ""), ("file, lz4", "file", "lz4")]
        if args.s3:
            from sparkcdc.testing.emulators import start_emulator

            emulator = start_emulator("s3", os.path.join(base, "s3"))
            modes.append(("s3 emulator, lz4", "s3", "lz4"))
        try:
            print(f"{sum(len(t) for t in txns)} row changes in {len(txns)} transactions, {len(batches)} batches, "
                  f"worker-count {args.workers}")
            times: dict[str, list[float]] = {}
            cpus: dict[str, list[float]] = {}
            rows = 0
            for _ in range(args.rounds):
                for name, kind, compression in modes:
                    uri = None
                    if kind == "file":
                        uri = f"file://{base}/redo-{uuid.uuid4().hex[:8]}"
                    elif kind == "s3":
                        bucket = f"redo-{uuid.uuid4().hex[:8]}"
                        emulator.create_bucket(bucket)
                        uri = emulator.uri(bucket, "redo")
                    rows, elapsed, cpu = run_once(server, args.workers, batches, uri, compression)
                    times.setdefault(name, []).append(elapsed)
                    cpus.setdefault(name, []).append(cpu)
            baseline = rows / statistics.median(times["off"])
            print(f"| redo | rows | median s ({args.rounds} runs) | best s | rows/s (median) | vs off "
                  "| sparkcdc CPU s (median) |")
            print("|---|---|---|---|---|---|---|")
            for name, _, _ in modes:
                median = statistics.median(times[name])
                rate = rows / median
                print(f"| {name} | {rows:,} | {median:.2f} | {min(times[name]):.2f} | {rate:,.0f} | "
                      f"{(rate / baseline - 1) * 100:+.1f}% | {statistics.median(cpus[name]):.2f} |")
        finally:
            server.stop()
            if emulator is not None:
                emulator.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
