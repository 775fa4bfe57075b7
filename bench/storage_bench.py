"""Storage sink benchmark: write throughput through `StorageSink` to each object storage
emulator (moto for S3, fake-gcs-server, Azurite) and to a local directory for reference.

    .venv/bin/python bench/storage_bench.py [--rows 100000] [--backends file,s3,gcs,azblob]
        [--protocols canal-json,csv] [--flush-rows 20000] [--flush-concurrency 1]

Rows are sysbench-shaped (`id, k, c CHAR(120), pad CHAR(60)`) inserts in 100-row
transactions, prepared before the clock starts. The timed part is what a changefeed's sink
does per micro-batch: encode, buffer, and at every `--flush-rows` rows `write_checkpoint`
(data files, CDC.index, metadata). MB/s counts the bytes of the data files written. The
`file` row shows what encoding costs without a network, so the gap to it is the storage.
Not a test: figures go in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import random
import string
import sys
import time
import uuid

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

from sparkcdc.config.replica import SinkConfig  # noqa: E402
from sparkcdc.model.events import ColumnInfo, RowChange, TableInfo  # noqa: E402
from sparkcdc.model.tso import compose  # noqa: E402
from sparkcdc.sink.storage import StorageSink  # noqa: E402
from sparkcdc.testing.emulators import start_emulator  # noqa: E402
from sparkcdc.testing.scratch import scratch_dir  # noqa: E402

TRANSACTION_ROWS = 100
TABLE = TableInfo("bench", "sbtest1", 1, (
    ColumnInfo("id", "int", nullable=False, is_primary_key=True),
    ColumnInfo("k", "int", nullable=False),
    ColumnInfo("c", "char", charset="utf8mb4", length=120, nullable=False),
    ColumnInfo("pad", "char", charset="utf8mb4", length=60, nullable=False),
), compose(1_700_000_000_000), handle_key=("id",))


def sysbench_string(rng: random.Random, groups: int) -> str:
    return "-".join("".join(rng.choices(string.digits, k=11)) for _ in range(groups))


def prepare_rows(count: int, seed: int = 1) -> list[list[RowChange]]:
    """Transactions of TRANSACTION_ROWS inserts, commit-ts increasing by 1 ms."""
    rng = random.Random(seed)
    base_ms = 1_700_000_000_000
    transactions = []
    for start in range(0, count, TRANSACTION_ROWS):
        commit_ts = compose(base_ms + start // TRANSACTION_ROWS + 1)
        transactions.append([
            RowChange(commit_ts, "bench", "sbtest1", "insert", seq=seq, after=(
                str(start + seq + 1), str(rng.randint(1, 1_000_000)),
                sysbench_string(rng, 10), sysbench_string(rng, 5)))
            for seq in range(min(TRANSACTION_ROWS, count - start))
        ])
    return transactions


def data_bytes(sink: StorageSink) -> tuple[int, int]:
    """(bytes, files) of the CDC data files under the sink's root."""
    fs, root = sink.target.filesystem(), sink.target.root
    total = files = 0
    for path, info in fs.find(root, detail=True).items():
        if os.path.basename(path).startswith("CDC") and "/meta/" not in path:
            total += info["size"]
            files += 1
    return total, files


def drive_sink(sink, transactions: list[list[RowChange]], flush_rows: int) -> tuple[int, float, float]:
    """Write every transaction with a checkpoint each `flush_rows` rows (and at the end), as the
    batch writer does; (rows, wall seconds, CPU seconds of this process)."""
    rows = since_flush = 0
    started = time.perf_counter()
    cpu_started = time.process_time()
    for transaction in transactions:
        sink.write_rows(TABLE, transaction)
        rows += len(transaction)
        since_flush += len(transaction)
        if since_flush >= flush_rows:
            sink.write_checkpoint(transaction[-1].commit_ts)
            since_flush = 0
    sink.write_checkpoint(transactions[-1][-1].commit_ts)
    return rows, time.perf_counter() - started, time.process_time() - cpu_started


def run_one(uri: str, protocol: str, transactions: list[list[RowChange]], flush_rows: int) -> dict:
    sink_config = SinkConfig(protocol=protocol, enable_tidb_extension=True)
    sink_config.csv.include_commit_ts = True
    sink = StorageSink(uri, sink_config)
    rows, elapsed, cpu = drive_sink(sink, transactions, flush_rows)
    size, files = data_bytes(sink)
    sink.close()
    return {"rows": rows, "seconds": elapsed, "cpu": cpu, "bytes": size, "files": files}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--backends", default="file,s3,gcs,azblob")
    parser.add_argument("--protocols", default="canal-json,csv")
    parser.add_argument("--flush-rows", type=int, default=20_000,
                        help="rows between checkpoints, i.e. per flush (default %(default)s)")
    parser.add_argument("--flush-concurrency", type=int, default=1,
                        help="the sink's flush-concurrency (multipart parts in parallel)")
    args = parser.parse_args()

    transactions = prepare_rows(args.rows)
    work = scratch_dir("sparkcdc-storage-bench-")
    emulators = {}
    results = []
    try:
        for backend in args.backends.split(","):
            if backend != "file":
                emulators[backend] = start_emulator(backend, os.path.join(work, backend))
            for protocol in args.protocols.split(","):
                params = {"protocol": protocol, "flush-concurrency": str(args.flush_concurrency)}
                if backend == "file":
                    query = "&".join(f"{k}={v}" for k, v in params.items())
                    uri = f"file://{work}/out-{protocol}?{query}"
                else:
                    bucket = f"bench-{uuid.uuid4().hex[:8]}"
                    emulators[backend].create_bucket(bucket)
                    uri = emulators[backend].uri(bucket, "cdc", **params)
                result = run_one(uri, protocol, transactions, args.flush_rows)
                result.update(backend=backend, protocol=protocol)
                results.append(result)
                print(f"{backend:7} {protocol:10} {result['rows'] / result['seconds']:9,.0f} rows/s "
                      f"{result['bytes'] / result['seconds'] / 1e6:6.1f} MB/s  "
                      f"({result['bytes'] / 1e6:.1f} MB in {result['files']} files, "
                      f"{result['seconds']:.1f} s, {result['cpu']:.1f} CPU s)", flush=True)
    finally:
        for emulator in emulators.values():
            emulator.stop()

    print("\n| backend | protocol | rows/s | MB/s | data | files | s | CPU s |")
    print("|---|---|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['backend']} | {r['protocol']} | {r['rows'] / r['seconds']:,.0f} | "
              f"{r['bytes'] / r['seconds'] / 1e6:.1f} | {r['bytes'] / 1e6:.1f} MB | {r['files']} | "
              f"{r['seconds']:.1f} | {r['cpu']:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
