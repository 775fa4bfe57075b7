"""Decode benchmark: rows/s per CPU core for decoding binlog row images, one process.

    .venv/bin/python bench/decode_bench.py [--changes 200000] [--rounds 3] [--table sysbench|wide|single-row]

A private MariaDB gets a workload (sysbench rows `id, k, c CHAR(120), pad CHAR(60)`: 60% inserts
in 100-row transactions, 30% updates, 10% deletes; `wide`: the 36 mixed-type columns of
sparkcdc.testing.alltypes; `single-row`: sysbench rows, one autocommit INSERT or UPDATE per
transaction). Then, interleaved for --rounds rounds, each over the same binlog:
  framing            mysql-replication reads the events, rows not decoded (the shared floor)
  mysql-replication  the same plus `event.rows` (its own decoding, Python objects per value)
  sparkcdc pure      the same plus sparkcdc's canonical values (the reference path)
  sparkcdc native    framing plus the native decoder (sparkcdc_native) to RowChange
  native in memory   the native decoder alone over the captured event bodies, no connection
  range: mysql-replication framing   read_range_batches' reference path: the whole workload as one
                     indexed range, mysql-replication frames, native decoder, Arrow batches
  range: native framer               the same range through sparkcdc_native's BinlogRangeReader
                     (what executors run): packets, events and rows all in Rust
Rows/s are per CPU second of this process (the server's CPU is not counted). "decode only"
subtracts the framing CPU, so the ratio compares the decoders and not the shared event reader.
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))
sys.path.insert(0, os.path.dirname(__file__))

from pymysqlreplication import BinLogStreamReader  # noqa: E402
from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent  # noqa: E402

from capture_bench import run_workload  # noqa: E402
from sparkcdc.testing.alltypes import COLUMN_NAMES, ROWS, create_alltypes  # noqa: E402
from sparkcdc.testing.mariadb import MariaDBServer  # noqa: E402
from sparkcdc.upstream import decoder_fixes  # noqa: E402,F401
from sparkcdc.upstream.native_decode import native_module  # noqa: E402
from sparkcdc.model.position import BinlogPosition  # noqa: E402
from sparkcdc.upstream.connection import UpstreamConfig  # noqa: E402
from sparkcdc.upstream.range_reader import (  # noqa: E402
    DEFAULT_BATCH_ROWS,
    BinlogRange,
    NativeBatchBuilder,
    framed_range_batches,
    has_native_framer,
    replication_range_batches,
    TableLayout,
    native_row_changes,
    pure_row_changes,
)
from sparkcdc.upstream.schema_reader import read_table_info  # noqa: E402
from sparkcdc.testing.scratch import scratch_dir  # noqa: E402

ROW_EVENTS = [WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent]


def wide_workload(conn, changes: int) -> int:
    """Inserts of the alltypes rows (minus the all-NULL one) in 100-row transactions."""
    create_alltypes(conn, "sbtest", "wide")
    placeholders = ", ".join(["%s"] * len(COLUMN_NAMES))
    rows, next_id = 0, 1_000_000
    with conn.cursor() as cur:
        cur.execute("DELETE FROM sbtest.wide")
        while rows < changes:
            batch = []
            for _ in range(100):
                row = dict(ROWS[rows % 2])
                row["i"] = next_id
                next_id += 1
                batch.append([row[n] for n in COLUMN_NAMES])
            cur.execute("BEGIN")
            cur.executemany(f"INSERT INTO sbtest.wide VALUES ({placeholders})", batch)
            cur.execute("COMMIT")
            rows += 100
    return rows


def single_row_workload(conn, changes: int, seed: int = 1) -> int:
    """Sysbench rows, one autocommit statement (one row) per transaction: 70% inserts, 30% updates."""
    import random

    rng = random.Random(seed)
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE IF NOT EXISTS sbtest.sbtest1 (id INT PRIMARY KEY, k INT NOT NULL, "
                    "c CHAR(120) NOT NULL, pad CHAR(60) NOT NULL, KEY k_1 (k))")
        next_id = 1
        for _ in range(changes):
            if rng.random() < 0.7 or next_id < 100:
                cur.execute("INSERT INTO sbtest.sbtest1 VALUES (%s,%s,%s,%s)",
                            (next_id, rng.randint(1, 10**6), "c" * 120, "p" * 60))
                next_id += 1
            else:
                cur.execute("UPDATE sbtest.sbtest1 SET k = k + 1 WHERE id = %s", (rng.randint(1, next_id - 1),))
    return changes


def transactions_between(mariadb: MariaDBServer, start, end) -> list[BinlogPosition]:
    """Where each transaction (GTID event) in [start, end) begins: what an index would list."""
    from pymysqlreplication.event import GtidEvent, MariadbGtidEvent

    reader = BinLogStreamReader(
        connection_settings={"host": "127.0.0.1", "port": mariadb.port, "user": "root", "passwd": ""},
        server_id=990099, log_file=start[0], log_pos=start[1], resume_stream=True, blocking=False,
        only_events=[MariadbGtidEvent, GtidEvent], enable_logging=False)
    starts = []
    for event in reader:
        if (reader.log_file, reader.log_pos) >= end:
            break
        starts.append(BinlogPosition(reader.log_file, event.packet.log_pos - event.packet.event_size))
    reader.close()
    return starts


_SMALL_RANGE_SERVER_IDS = itertools.count(991000)


def small_range_seconds(upstream: UpstreamConfig, starts: list[BinlogPosition], end, table: str, info,
                        framer: str, reads: int = 20) -> tuple[float, float]:
    """(wall, CPU) seconds per read of a one-transaction range: a range's fixed cost (connection,
    dump, first TABLE_MAP) that a micro-batch of a few transactions pays."""
    read = framed_range_batches if framer == "native" else replication_range_batches
    wall = cpu = 0.0
    for k in range(reads):
        i = (k * 7919) % (len(starts) - 1)
        # A server id of its own, as each planned range has: a dump under a lingering dump's id waits
        # for the server to kill that one first.
        rng = BinlogRange(upstream, next(_SMALL_RANGE_SERVER_IDS), starts[i], starts[i + 1], (1,),
                          {f"sbtest.{table}": info.to_json()})
        cpu0, began = time.process_time(), time.monotonic()
        for _ in read(rng, native_module()):
            pass
        wall += time.monotonic() - began
        cpu += time.process_time() - cpu0
    return wall / reads, cpu / reads


def range_pass(rng: BinlogRange, framer: str) -> tuple[int, float]:
    """(rows, CPU seconds) of read_range_batches' path with `framer` over the whole range."""
    read = framed_range_batches if framer == "native" else replication_range_batches
    cpu0, began = time.process_time(), time.monotonic()
    rows = sum(batch.num_rows for batch in read(rng, native_module()))
    cpu = time.process_time() - cpu0
    RANGE_WALL_SECONDS.setdefault(framer, []).append(time.monotonic() - began)
    return rows, cpu


RANGE_WALL_SECONDS: dict[str, list[float]] = {}


def stream(mariadb: MariaDBServer, start, server_id: int) -> BinLogStreamReader:
    return BinLogStreamReader(
        connection_settings={"host": "127.0.0.1", "port": mariadb.port, "user": "root", "passwd": ""},
        server_id=server_id, log_file=start[0], log_pos=start[1], resume_stream=True, blocking=False,
        only_events=ROW_EVENTS, enable_logging=False,
    )


def one_pass(mariadb, start, end, table: str, info, mode: str, captured: list | None = None) -> tuple[int, float]:
    """(rows, CPU seconds) for one pass over [start, end) in `mode`."""
    native = native_module()
    layouts: dict = {}
    rows = 0
    builder = NativeBatchBuilder(native) if mode == "native arrow" else None
    cpu0 = time.process_time()
    reader = stream(mariadb, start, 990100 + hash(mode) % 1000)
    if mode == "native tuples":
        rows = sum(batch.num_rows for batch in _spark_conversion(_source_tuples(reader, end, table, info, native)))
        reader.close()
        return rows, time.process_time() - cpu0
    for event in reader:
        if event.table == table:
            if mode == "framing":
                rows += 1  # events, not rows; rows are counted by the other modes
            elif mode == "mysql-replication":
                rows += len(event.rows)
            else:
                layout = layouts.get(event.table_id)
                if layout is None:
                    layout = layouts[event.table_id] = TableLayout(
                        info, event.columns, native if mode.startswith("native") else None)
                if mode == "native arrow":
                    builder.add_event(event, layout, 1, 0)
                    if len(builder) >= DEFAULT_BATCH_ROWS:
                        rows += builder.finish().num_rows
                elif mode == "native":
                    if captured is not None:
                        known = 8 if event.event_type in (23, 24, 25) else 10
                        captured.append((layout.native, event.event_type, bytes(event.packet.packet._data[20:20 + event.event_size]),
                                         event._declared_post_header_len(known) - known))
                    for _ in native_row_changes(event, layout, 1, 0):
                        rows += 1
                else:
                    for _ in pure_row_changes(event, layout, 1, 0):
                        rows += 1
        if (reader.log_file, reader.log_pos) >= end:
            break
    if builder is not None and len(builder):
        rows += builder.finish().num_rows
    reader.close()
    return rows, time.process_time() - cpu0


def _source_tuples(reader, end, table: str, info, native):
    """The rows as the source's read() yielded them before it built Arrow batches itself."""
    layouts: dict = {}
    for event in reader:
        if event.table == table:
            layout = layouts.get(event.table_id)
            if layout is None:
                layout = layouts[event.table_id] = TableLayout(info, event.columns, native)
            for row in native_row_changes(event, layout, 1, 0):
                yield (row.commit_ts, row.seq, row.schema, row.table, row.op,
                       list(row.before) if row.before is not None else None,
                       list(row.after) if row.after is not None else None)
        if (reader.log_file, reader.log_pos) >= end:
            break


def _spark_conversion(rows):
    from pyspark.sql.types import ArrayType, LongType, StringType, StructField, StructType
    from pyspark.sql.worker.plan_data_source_read import records_to_arrow_batches

    image = ArrayType(StringType())
    schema = StructType([StructField("commit_ts", LongType()), StructField("seq", LongType()),
                         StructField("schema_name", StringType()), StructField("table_name", StringType()),
                         StructField("op", StringType()), StructField("before", image), StructField("after", image)])
    return records_to_arrow_batches(rows, 10_000, schema, None)


def arrow_in_memory(captured: list) -> tuple[int, float]:
    """The captured bodies through the native batch builder into record batches."""
    builder = NativeBatchBuilder(native_module())
    cpu0 = time.process_time()
    rows = 0
    for layout, event_type, body, extra in captured:
        builder.add_body("sbtest", "t", layout, event_type, body, 0, len(body), extra, 1, 0)
        if len(builder) >= DEFAULT_BATCH_ROWS:
            rows += builder.finish().num_rows
    if len(builder):
        rows += builder.finish().num_rows
    return rows, time.process_time() - cpu0


def in_memory(captured: list) -> tuple[int, float]:
    cpu0 = time.process_time()
    rows = 0
    for layout, event_type, body, extra in captured:
        images = layout.decode(event_type, body, 0, len(body), extra)
        rows += len(images) // 2 if event_type in (24, 31) else len(images)
    return rows, time.process_time() - cpu0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--changes", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--table", choices=["sysbench", "wide", "single-row"], default="sysbench")
    args = parser.parse_args()
    if native_module() is None:
        print("sparkcdc_native is not built (run scripts/setup.sh with cargo installed)", file=sys.stderr)
        return 2
    base = scratch_dir("sparkcdc-decode-bench-")
    mariadb = MariaDBServer(os.path.join(base, "mariadb")).start()
    try:
        conn = mariadb.connect()
        conn.autocommit(True)
        with conn.cursor() as cur:
            cur.execute("CREATE DATABASE IF NOT EXISTS sbtest")
            cur.execute("SHOW MASTER STATUS")
            start = tuple(cur.fetchone()[:2])
        t0 = time.monotonic()
        table = "wide" if args.table == "wide" else "sbtest1"
        workload = {"sysbench": run_workload, "wide": wide_workload, "single-row": single_row_workload}[args.table]
        changes = workload(conn, args.changes)
        with conn.cursor() as cur:
            cur.execute("SHOW MASTER STATUS")
            end = tuple(cur.fetchone()[:2])
        print(f"workload: {changes} row changes ({args.table}) in {time.monotonic() - t0:.1f}s")
        info = read_table_info(conn, "sbtest", table, 1, 0)
        starts = transactions_between(mariadb, start, end)
        transactions = len(starts)
        whole = BinlogRange(UpstreamConfig.from_uri(mariadb.uri), 990200, BinlogPosition(*start), BinlogPosition(*end),
                            tuple(range(1, transactions + 1)), {f"sbtest.{table}": info.to_json()})
        small: dict[str, list[tuple[float, float]]] = {}
        range_modes = ["range: mysql-replication framing"] + (
            ["range: native framer"] if has_native_framer(native_module()) else [])
        print(f"load average before: {os.getloadavg()}")
        modes = ["framing", "mysql-replication", "pure", "native", "native arrow", "native tuples"]
        cpu: dict[str, list[float]] = {m: [] for m in modes + ["in-memory", "arrow in memory"] + range_modes}
        counted: dict[str, int] = {}
        for round_number in range(args.rounds):
            captured: list = []
            for mode in modes:
                rows, seconds = one_pass(mariadb, start, end, table, info, mode, captured if mode == "native" else None)
                counted[mode] = rows
                cpu[mode].append(seconds)
            for name, run in (("in-memory", in_memory), ("arrow in memory", arrow_in_memory)):
                rows, seconds = run(captured)
                counted[name] = rows
                cpu[name].append(seconds)
            for mode in range_modes:
                framer = "native" if "native" in mode else "mysql-replication"
                counted[mode], seconds = range_pass(whole, framer)
                cpu[mode].append(seconds)
                small.setdefault(mode, []).append(
                    small_range_seconds(whole.upstream, starts, end, table, info, framer))
            print(f"round {round_number + 1}: " + ", ".join(f"{m} {cpu[m][-1]:.2f}s" for m in cpu))
        print(f"load average after: {os.getloadavg()}")
        rows = counted["mysql-replication"]
        assert counted["pure"] == counted["native"] == counted["native arrow"] == counted["in-memory"] == rows, counted
        assert counted["arrow in memory"] == counted["native tuples"] == rows, counted
        assert all(counted[mode] == rows for mode in range_modes), counted
        framing = statistics.median(cpu["framing"])
        print(f"\n{rows} rows, {counted['framing']} ROWS events; median CPU seconds of {args.rounds} rounds")
        print(f"{'path':<22}{'CPU s':>8}{'rows/s/core':>14}{'decode only':>14}")
        rates = {}
        for mode in modes[1:] + ["in-memory", "arrow in memory"]:
            seconds = statistics.median(cpu[mode])
            decode_only = seconds if mode in ("in-memory", "arrow in memory") else max(seconds - framing, 1e-9)
            rates[mode] = (rows / seconds, rows / decode_only)
            print(f"{mode:<22}{seconds:>8.2f}{rows / seconds:>14,.0f}{rows / decode_only:>14,.0f}")
        print(f"{'framing (floor)':<22}{framing:>8.2f}{rows / framing:>14,.0f}")
        print(f"\nthe workload as one indexed range of {transactions} transactions (read_range_batches):")
        print(f"{'path':<36}{'CPU s':>8}{'rows/s/core':>14}{'us/transaction':>16}{'wall s':>8}")
        for mode in range_modes:
            seconds = statistics.median(cpu[mode])
            wall = statistics.median(RANGE_WALL_SECONDS["native" if "native" in mode else "mysql-replication"])
            print(f"{mode:<36}{seconds:>8.2f}{rows / seconds:>14,.0f}{seconds / transactions * 1e6:>16.1f}{wall:>8.2f}")
        if len(range_modes) == 2:
            framed, replicated = (statistics.median(cpu[m]) for m in reversed(range_modes))
            print(f"native framer / mysql-replication framing: {replicated / framed:.1f}x")
        print("a one-transaction range, read 20 times a round (connection, dump, first TABLE_MAP):")
        for mode in range_modes:
            wall = statistics.median(w for w, _ in small[mode])
            cpu_each = statistics.median(c for _, c in small[mode])
            print(f"{mode:<36}{wall * 1e3:>8.1f} ms wall{cpu_each * 1e3:>8.1f} ms CPU per range")
        base_rate = rates["mysql-replication"]
        print(f"\nnative / mysql-replication: {rates['native'][0] / base_rate[0]:.1f}x with framing, "
              f"{rates['native'][1] / base_rate[1]:.1f}x decode only, "
              f"{rates['in-memory'][1] / base_rate[1]:.1f}x native in memory vs mysql-replication decode only")
        print(f"native / sparkcdc pure: {rates['native'][0] / rates['pure'][0]:.1f}x with framing")
        print(f"native arrow / mysql-replication: {rates['native arrow'][0] / base_rate[0]:.1f}x with framing, "
              f"{rates['native arrow'][1] / base_rate[1]:.1f}x decode only")
        print(f"native arrow / native tuples through PySpark's conversion: "
              f"{rates['native arrow'][0] / rates['native tuples'][0]:.1f}x with framing")
    finally:
        mariadb.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
