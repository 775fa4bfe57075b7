"""Latency benchmark: upstream commit -> row visible in the file sink at a steady offered load,
then the checkpoint lag of an idle upstream.

    .venv/bin/python bench/latency_bench.py [--rate 5000] [--seconds 60] [--txn-rows 50]
                                            [--idle-seconds 60] [--poll 0.05] [--trigger-interval 1s]
                                            [--sink file|delta|iceberg]

A private MariaDB and a `sparkcdc server` with one changefeed to the file storage sink
(canal-json + TiDB extension), started (with `--trigger-interval` when given) and warmed up
before the clock starts (three checkpoints after create). Then:
  1. load: a writer inserts sysbench-shaped rows (`id, k, c CHAR(120), pad CHAR(60)`) in
     --txn-rows-row transactions, paced to offer --rate rows/s for --seconds, and records each
     transaction's commit time (when COMMIT returned, on this machine's clock); a watcher polls
     the sink's directory every --poll seconds for new data files (they appear whole: written
     to a hidden temp file and renamed) and records when each row id first shows up. Latency =
     first seen - commit, per row; p50/p95/p99/max are printed with the offered rate achieved.
  2. idle: nothing is written for --idle-seconds; the changefeed's checkpoint lag (now - the
     physical time of its checkpoint-ts, from the Open API) is sampled every 0.5 s, p50/p95/max,
     with the server tree's CPU while idle.
The checkpoint lag under load is sampled too. CPU seconds of the server's process tree and the
load average are printed with the figures. Targets (issue 11): p99 <= 2 s at 5,000 rows/s; idle
checkpoint lag <= 2 s. With `--sink delta` or `iceberg` the changefeed writes a lakehouse table
(upsert mode) and the watcher reads the ids of every data file each new table version adds (a
row is visible once a reader of the table's current version sees it); issue 25's target:
p99 <= 5 s at 5,000 rows/s.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import random
import statistics
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))

from sparkcdc.model import tso  # noqa: E402
from sparkcdc.testing.mariadb import MariaDBServer  # noqa: E402
from sparkcdc.testing.process_usage import tree_usage  # noqa: E402
from sparkcdc.testing.server_process import ServerProcess  # noqa: E402
from sparkcdc.testing.scratch import scratch_dir  # noqa: E402

DATABASE, TABLE = "latency", "sbtest1"
CHANGEFEED = "latency"


def percentile(values: list[float], fraction: float) -> float:
    """Nearest-rank percentile of `values` (0 < fraction <= 1)."""
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, int(round(fraction * len(ordered) + 0.5)) - 1))]


class SinkWatcher(threading.Thread):
    """Polls a file sink's directory; `seen[id]` is when the row with that id first appeared."""

    def __init__(self, root: str, interval: float):
        super().__init__(name="sink-watcher", daemon=True)
        self.root, self.interval = root, interval
        self.seen: dict[int, float] = {}
        self.malformed: list[str] = []  # rows whose id is not an integer: a sink bug
        self._files: set[str] = set()
        self._done = threading.Event()

    def run(self) -> None:
        while not self._done.is_set():
            self.poll()
            self._done.wait(self.interval)

    def poll(self) -> None:
        pattern = os.path.join(self.root, DATABASE, TABLE, "**", "CDC*.json")
        for path in glob.glob(pattern, recursive=True):
            if path in self._files:
                continue
            now = time.time()
            self._files.add(path)
            with open(path, encoding="utf-8") as f:
                for line in f:
                    message = json.loads(line) if line.strip() else {}
                    if message.get("type") != "INSERT":
                        continue
                    for row in message.get("data") or []:
                        try:
                            self.seen.setdefault(int(row["id"]), now)
                        except (KeyError, TypeError, ValueError):  # reported, not a dead watcher
                            self.malformed.append(f"{path}: {json.dumps(row)[:200]}")

    def stop(self) -> None:
        self._done.set()
        self.join(10)


class LakeWatcher(SinkWatcher):
    """Polls a lakehouse table's current version; `seen[id]` is when a data file of a committed
    version first held the row (files are listed from the table's log / snapshot, so a row is
    seen only once its commit is visible to readers)."""

    def __init__(self, uri: str, interval: float):
        super().__init__(uri, interval)
        from sparkcdc.config.replica import SinkConfig
        from sparkcdc.sink.lakehouse.config import parse_lakehouse_uri

        self.target = parse_lakehouse_uri(uri, SinkConfig())
        self._table = None

    def _data_files(self) -> list[str]:
        if self.target.format == "delta":
            from deltalake import DeltaTable

            path = self.target.path(DATABASE, TABLE)
            if self._table is None:
                if not DeltaTable.is_deltatable(path):
                    return []
                self._table = DeltaTable(path)
            self._table.update_incremental()
            return self._table.file_uris()
        from pyiceberg.exceptions import NoSuchTableError

        from sparkcdc.sink.lakehouse.iceberg import IcebergTables

        if self._table is None:
            self._table = IcebergTables(self.target, "latency-bench").catalog
        try:
            table = self._table.load_table((DATABASE, TABLE))
        except NoSuchTableError:
            return []
        return [task.file.file_path.removeprefix("file://") for task in table.scan().plan_files()]

    def poll(self) -> None:
        import pyarrow.parquet as pq

        for path in self._data_files():
            if path in self._files:
                continue
            now = time.time()
            self._files.add(path)
            for row_id in pq.read_table(path, columns=["id"])["id"].to_pylist():
                self.seen.setdefault(row_id, now)


class PacedWriter(threading.Thread):
    """Inserts `rate` rows/s in `txn_rows`-row transactions for `seconds`; `commits` holds
    (first id, last id, commit time) per transaction."""

    def __init__(self, conn, rate: int, seconds: float, txn_rows: int):
        super().__init__(name="paced-writer", daemon=True)
        self.conn, self.rate, self.seconds, self.txn_rows = conn, rate, seconds, txn_rows
        self.commits: list[tuple[int, int, float]] = []
        self.began = self.ended = 0.0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self._write()
        except BaseException as exc:  # reported by the main thread
            self.error = exc

    def _write(self) -> None:
        rng = random.Random(1)
        filler = "".join(rng.choice("0123456789-") for _ in range(180))
        transactions = int(self.rate * self.seconds / self.txn_rows)
        next_id = 1
        self.began = time.time()
        with self.conn.cursor() as cur:
            for number in range(transactions):
                due = self.began + number * self.txn_rows / self.rate
                delay = due - time.time()
                if delay > 0:
                    time.sleep(delay)
                values = [(next_id + i, rng.randint(1, 10**6), filler[:120], filler[120:]) for i in range(self.txn_rows)]
                cur.execute("BEGIN")
                cur.executemany(f"INSERT INTO {DATABASE}.{TABLE} VALUES (%s,%s,%s,%s)", values)
                cur.execute("COMMIT")
                self.commits.append((next_id, next_id + self.txn_rows - 1, time.time()))
                next_id += self.txn_rows
        self.ended = time.time()


def checkpoint_lag(server: ServerProcess) -> float:
    """Seconds between now and the physical time of the changefeed's checkpoint-ts."""
    return time.time() - tso.physical_ms(server.checkpoint(CHANGEFEED)) / 1000


def sample_lag(server: ServerProcess, seconds: float, interval: float = 0.5,
               until: threading.Thread | None = None) -> list[float]:
    """Checkpoint lags every `interval` s for `seconds` (or while `until` is alive)."""
    lags = []
    deadline = time.monotonic() + seconds
    while (until.is_alive() if until is not None else time.monotonic() < deadline):
        lags.append(checkpoint_lag(server))
        time.sleep(interval)
    return lags


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=int, default=5000, help="offered rows/s (default 5000)")
    parser.add_argument("--seconds", type=float, default=60, help="length of the load phase")
    parser.add_argument("--txn-rows", type=int, default=50, help="rows per upstream transaction")
    parser.add_argument("--idle-seconds", type=float, default=60, help="length of the idle phase")
    parser.add_argument("--poll", type=float, default=0.05, help="how often the sink directory is listed (s)")
    parser.add_argument("--sink", default="file", choices=("file", "delta", "iceberg"),
                        help="file (canal-json), or a lakehouse table in upsert mode")
    parser.add_argument("--trigger-interval", default=None, metavar="DURATION",
                        help="the server's --trigger-interval (default: the server's own, 1s)")
    args = parser.parse_args()
    if args.rate <= 0 or args.seconds <= 0 or args.txn_rows <= 0 or args.idle_seconds < 0:
        parser.error("--rate, --seconds and --txn-rows must be positive, --idle-seconds not negative")

    base = scratch_dir("sparkcdc-latency-")
    sink_dir = os.path.join(base, "out")
    mariadb = MariaDBServer(os.path.join(base, "mariadb")).start()
    server = None
    if args.sink == "file":
        sink_uri = f"file://{sink_dir}?protocol=canal-json&enable-tidb-extension=true"
        watcher = SinkWatcher(sink_dir, args.poll)
    else:
        sink_uri = f"{args.sink}://{sink_dir}"
        watcher = LakeWatcher(sink_uri, args.poll)
    try:
        conn = mariadb.connect()
        with conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE {DATABASE}")
            cur.execute(f"CREATE TABLE {DATABASE}.{TABLE} (id INT PRIMARY KEY, k INT NOT NULL, "
                        "c CHAR(120) NOT NULL, pad CHAR(60) NOT NULL, KEY k_1 (k))")
        extra = ("--trigger-interval", args.trigger_interval) if args.trigger_interval else ()
        server = ServerProcess(os.path.join(base, "cdc"), mariadb.uri, extra_args=extra).start()
        server.cli("changefeed", "create", "-c", CHANGEFEED, "--sink-uri", sink_uri)
        for _ in range(3):  # warm-up: the first batches of a new Spark query take seconds each
            now = tso.compose(int(time.time() * 1000))
            while server.checkpoint(CHANGEFEED) < now:
                time.sleep(0.2)
        print(f"load average before: {os.getloadavg()}; trigger interval {args.trigger_interval or 'default'}",
              flush=True)

        watcher.start()
        writer = PacedWriter(conn, args.rate, args.seconds, args.txn_rows)
        cpu_before = tree_usage(server.process.pid)[0]
        writer.start()
        load_lags = sample_lag(server, 0, until=writer)
        writer.join()
        if writer.error is not None:
            raise writer.error
        expected = writer.commits[-1][1]
        deadline = time.monotonic() + 300
        while len(watcher.seen) < expected and time.monotonic() < deadline:
            time.sleep(0.1)
        cpu_load = tree_usage(server.process.pid)[0] - cpu_before
        load_after = os.getloadavg()
        watcher.stop()
        if watcher.malformed:
            raise SystemExit(f"{len(watcher.malformed)} rows in the sink have no integer id, e.g. "
                             + "; ".join(watcher.malformed[:3]))
        missing = expected - len(watcher.seen)
        if missing:
            raise SystemExit(f"{missing} of {expected} rows never appeared in {sink_dir} within 300 s")

        latencies = [watcher.seen[row_id] - committed
                     for first, last, committed in writer.commits for row_id in range(first, last + 1)]
        offered = expected / (writer.ended - writer.began)
        print(f"\nload: {expected:,} rows in {len(writer.commits):,} transactions of {args.txn_rows} rows, "
              f"offered {offered:,.0f} rows/s (asked {args.rate:,}) for {writer.ended - writer.began:.1f}s; "
              f"server tree CPU {cpu_load:.1f}s ({cpu_load / (writer.ended - writer.began):.2f} cores); "
              f"load average after: {load_after}")
        target = "2 s" if args.sink == "file" else "5 s (issue 25)"
        print(f"commit -> visible in the {args.sink} sink, per row: p50 {percentile(latencies, 0.5):.2f}s  "
              f"p95 {percentile(latencies, 0.95):.2f}s  p99 {percentile(latencies, 0.99):.2f}s  "
              f"max {max(latencies):.2f}s  (target p99 <= {target})")
        if load_lags:
            print(f"checkpoint lag under load: p50 {statistics.median(load_lags):.2f}s  max {max(load_lags):.2f}s "
                  f"({len(load_lags)} samples; commit-ts carry the binlog's whole-second event time)")

        if args.idle_seconds:
            cpu_before = tree_usage(server.process.pid)[0]
            idle_lags = sample_lag(server, args.idle_seconds)
            cpu_idle = tree_usage(server.process.pid)[0] - cpu_before
            print(f"idle {args.idle_seconds:.0f}s: checkpoint lag p50 {statistics.median(idle_lags):.2f}s  "
                  f"p95 {percentile(idle_lags, 0.95):.2f}s  max {max(idle_lags):.2f}s ({len(idle_lags)} samples; "
                  f"target <= 2 s); server tree CPU {cpu_idle:.1f}s ({cpu_idle / args.idle_seconds:.2f} cores); "
                  f"load average: {os.getloadavg()}")
    finally:
        if watcher.is_alive():
            watcher.stop()
        if server is not None:
            server.stop()
        mariadb.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
