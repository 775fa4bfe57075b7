"""Driver CPU of `write_batch` to the file storage sink: the RowChange path against the columnar one.

    .venv/bin/python bench/write_batch_bench.py [--changes 100000] [--batch-rows 20000]
        [--protocol canal-json] [--workload sysbench|single-row] [--tables 1] [--rounds 3] [--profile]

Arrow batches shaped like df.toArrow()'s in a changefeed of capture_bench's sysbench workload
(`id, k, c CHAR(120), pad CHAR(60)`; 60% 100-row insert transactions, 30% 50-row `k = k + 1`
updates, 10% 17-row deletes), or with `--workload single-row` the same mix as one-row autocommit
transactions (peers' single-row workload), are prepared before the clock starts; `--tables N`
puts each transaction on one of N tables of that shape, as peers' tables1000 / tables10000 do.
Each round runs every batch through `write_batch` into a fresh file:// storage sink twice: once
with the sink's columnar entry hidden (every row becomes a RowChange, is netted and encoded by
encode_rows) and once as a changefeed runs it (whole transactions as Arrow columns to
encode_arrow). Prints the process CPU
microseconds per row of each (best round), their ratio, and the load average; --profile prints
cProfile's top functions of one columnar round. Both outputs are compared byte for byte.
Not a test: figures go in bench/README.md.
"""

from __future__ import annotations

import argparse
import cProfile
import dataclasses
import gc
import os
import pstats
import random
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))

import pyarrow as pa  # noqa: E402

from sparkcdc.config.replica import SinkConfig  # noqa: E402
from sparkcdc.model.events import ColumnInfo, RowChange, TableInfo  # noqa: E402
from sparkcdc.model.tso import compose  # noqa: E402
from sparkcdc.pipeline.batch_sink import write_batch  # noqa: E402
from sparkcdc.model.change_batch import marker_batch  # noqa: E402
from sparkcdc.sink.storage import StorageSink  # noqa: E402
from sparkcdc.upstream.range_reader import DEFAULT_BATCH_ROWS, PythonBatchBuilder  # noqa: E402

TABLE = TableInfo("sbtest", "sbtest1", 1, (
    ColumnInfo("id", "int", nullable=False, is_primary_key=True),
    ColumnInfo("k", "int", nullable=False),
    ColumnInfo("c", "char", charset="utf8mb4", length=120, nullable=False),
    ColumnInfo("pad", "char", charset="utf8mb4", length=60, nullable=False),
), compose(1_700_000_000_000), handle_key=("id",))
NOW = time.time()


class Index:
    def ddls_between(self, low, high):
        return []

    def table_infos_at(self, names, at):
        return [_TABLES.get(table) or _TABLES.setdefault(table, dataclasses.replace(TABLE, table=table,
                                                                                   table_id=len(_TABLES) + 1))
                for _, table in names]


_TABLES: dict[str, TableInfo] = {TABLE.table: TABLE}


def spread(txns: list[list[RowChange]], tables: int, seed: int = 2) -> list[list[RowChange]]:
    """Each transaction on one of `tables` tables shaped as sbtest1, chosen at random (peers'
    tables1000 / tables10000 workloads): the per-table cost of a batch over many tables."""
    if tables <= 1:
        return txns
    rng = random.Random(seed)
    spread_txns = []
    for txn in txns:
        name = f"sbtest{rng.randint(1, tables)}"
        spread_txns.append([dataclasses.replace(row, table=name) for row in txn])
    return spread_txns


class RowChangeStorageSink(StorageSink):
    accepts_arrow = False  # hides write_arrow: the RowChange path


def workload(changes: int, seed: int = 1) -> list[list[RowChange]]:
    """capture_bench's workload as the transactions the binlog holds."""
    rng = random.Random(seed)
    pad = lambda n: "".join(rng.choice("0123456789-") for _ in range(n))  # noqa: E731
    live: dict[int, tuple[str, ...]] = {}
    txns, next_id, rows, n = [], 1, 0, 0
    while rows < changes:
        n += 1
        commit_ts = compose(1_700_000_001_000 + n)
        choice = rng.random()
        txn: list[RowChange] = []
        if choice < 0.6 or next_id < 1000:
            for i in range(100):
                after = (str(next_id + i), str(rng.randint(1, 10**6)), pad(120), pad(60))
                live[next_id + i] = after
                txn.append(RowChange(commit_ts, "sbtest", "sbtest1", "insert", None, after, len(txn)))
            next_id += 100
        elif choice < 0.9:
            low = rng.randint(1, next_id - 100)
            for key in range(low, low + 50):
                if key in live:
                    before = live[key]
                    live[key] = after = (before[0], str(int(before[1]) + 1), before[2], before[3])
                    txn.append(RowChange(commit_ts, "sbtest", "sbtest1", "update", before, after, len(txn)))
        else:
            low = rng.randint(1, next_id - 100)
            for key in range(low, low + 17):
                if key in live:
                    txn.append(RowChange(commit_ts, "sbtest", "sbtest1", "delete", live.pop(key), None, len(txn)))
        if txn:
            txns.append(txn)
            rows += len(txn)
    return txns


def single_row_workload(changes: int, seed: int = 1) -> list[list[RowChange]]:
    """peers' single-row workload (bench/peers/workloads.py) as the transactions the binlog
    holds: one insert, `k = k + 1` update or delete of a random id per transaction."""
    rng = random.Random(seed)
    pad = lambda n: "".join(rng.choice("0123456789-") for _ in range(n))  # noqa: E731
    live: dict[int, tuple[str, ...]] = {}
    txns: list[list[RowChange]] = []
    next_id, n = 1, 0
    while len(txns) < changes:
        n += 1
        commit_ts = compose(1_700_000_001_000 + n)
        choice = rng.random()
        if choice < 0.6 or next_id < 1000:
            live[next_id] = after = (str(next_id), str(rng.randint(1, 10**6)), pad(120), pad(60))
            txns.append([RowChange(commit_ts, "sbtest", "sbtest1", "insert", None, after, 0)])
            next_id += 1
            continue
        key = rng.randint(1, next_id - 1)
        if key not in live:
            continue  # the statement matched no row: no transaction in the binlog
        if choice < 0.9:
            before = live[key]
            live[key] = after = (before[0], str(int(before[1]) + 1), before[2], before[3])
            txns.append([RowChange(commit_ts, "sbtest", "sbtest1", "update", before, after, 0)])
        else:
            txns.append([RowChange(commit_ts, "sbtest", "sbtest1", "delete", live.pop(key), None, 0)])
    return txns


WORKLOADS = {"sysbench": workload, "single-row": single_row_workload}


def batches(txns: list[list[RowChange]], batch_rows: int, chunk_rows: int = DEFAULT_BATCH_ROWS) -> list[pa.Table]:
    """Micro-batches of whole transactions, each with its range marker, as df.toArrow() gives them
    unpacked: a record batch per ~`chunk_rows` rows, as the executors' range readers cut them."""
    result, chunks, builder, start = [], [], PythonBatchBuilder(), 0
    for txn in txns:
        builder.add_changes(txn)
        if len(builder) >= chunk_rows:
            chunks.append(builder.finish())
            builder = PythonBatchBuilder()
        if sum(map(len, chunks)) + len(builder) >= batch_rows or txn is txns[-1]:
            end = txn[0].commit_ts
            if len(builder):
                chunks.append(builder.finish())
                builder = PythonBatchBuilder()
            result.append(pa.Table.from_batches([marker_batch(start, end), *chunks]))
            chunks, start = [], end
    return result


def run(sink_class, tables: list[pa.Table], protocol: str, root: str, profile: bool = False) -> float:
    sink = sink_class(f"file://{root}?protocol={protocol}&date-separator=none", SinkConfig(protocol=protocol),
                      clock=lambda: NOW)
    return write_all(sink, tables, profile)[0]


def write_all(sink, tables: list[pa.Table], profile: bool = False) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of writing every batch to `sink` and closing it, key-changing
    updates split as a storage or Kafka changefeed does by default (output-raw-change-event =
    false); with `profile`, prints cProfile's top functions."""
    profiler = cProfile.Profile() if profile else None
    began, cpu = time.monotonic(), time.process_time()
    if profiler:
        profiler.enable()
    for table in tables:
        write_batch(table, Index(), sink, lambda s, t: True, lambda ts: None, split_updates=True)
    sink.close()
    if profiler:
        profiler.disable()
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(18)
    return time.process_time() - cpu, time.monotonic() - began


def tree(root: str) -> dict[str, bytes]:
    found = {}
    for directory, _, names in os.walk(root):
        for name in names:
            with open(os.path.join(directory, name), "rb") as handle:
                found[os.path.relpath(os.path.join(directory, name), root)] = handle.read()
    return found


def print_best(best: dict[str, tuple[float, float]], rows: int, rounds: int) -> None:
    """Each path's best (CPU s, wall s) per row, the columnar / row-change CPU ratio and the load
    average: the summary of the benches that write through a sink with a broker or server."""
    for name, (cpu, wall) in best.items():
        print(f"{name:>10}: {cpu:6.2f} CPU s = {cpu / rows * 1e6:6.2f} CPU us/row, {rows / wall:9,.0f} rows/s wall "
              f"(best of {rounds})")
    print(f"columnar / row-change CPU: {best['columnar'][0] / best['row-change'][0]:.2f}")
    print("load average after: " + " ".join(f"{x:.2f}" for x in os.getloadavg()))

def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--changes", type=int, default=100_000)
    parser.add_argument("--batch-rows", type=int, default=20_000)
    parser.add_argument("--protocol", default="canal-json", choices=["canal-json", "csv"])
    parser.add_argument("--workload", default="sysbench", choices=list(WORKLOADS))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tables", type=int, default=1,
                        help="spread the transactions over this many tables of one shape (issue 27's many tables)")
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    txns = spread(WORKLOADS[args.workload](args.changes), args.tables)
    tables = batches(txns, args.batch_rows)
    rows, transactions = sum(len(t) for t in txns), len(txns)
    # The RowChanges only made the batches; a changefeed's driver holds none, and the garbage
    # collector walking them would add noise to both paths.
    del txns
    gc.collect()
    print(f"{rows} row changes in {transactions} transactions, {len(tables)} batches, "
          f"workload {args.workload}, {args.tables} table(s), protocol {args.protocol}")
    best = {"row-change": float("inf"), "columnar": float("inf")}
    with tempfile.TemporaryDirectory() as scratch:
        for round_number in range(args.rounds):
            roots = {}
            for name, sink_class in (("row-change", RowChangeStorageSink), ("columnar", StorageSink)):
                roots[name] = os.path.join(scratch, f"{name}-{round_number}")
                best[name] = min(best[name], run(sink_class, tables, args.protocol, roots[name]))
            if tree(roots["row-change"]) != tree(roots["columnar"]):
                print("the two paths wrote different storage", file=sys.stderr)
                return 1
        if args.profile:
            run(StorageSink, tables, args.protocol, os.path.join(scratch, "profiled"), profile=True)
    for name, seconds in best.items():
        print(f"{name:>10}: {seconds:6.2f} CPU s, {seconds / rows * 1e6:6.2f} CPU us/row, "
              f"{seconds / transactions * 1e6:6.2f} CPU us/transaction (best of {args.rounds})")
    print(f"columnar / row-change CPU: {best['columnar'] / best['row-change']:.2f}")
    print("load average: " + " ".join(f"{x:.2f}" for x in os.getloadavg()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
