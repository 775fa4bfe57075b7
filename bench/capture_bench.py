"""Capture benchmark: rows/s from a prepared binlog to the file storage sink (catch-up mode).

    .venv/bin/python bench/capture_bench.py [--changes 100000] [--protocol canal-json]
                                            [--rounds 1] [--decoders native,pure]

A private MariaDB gets a sysbench-shaped workload (`id, k, c CHAR(120), pad CHAR(60)`; 60%
inserts in 100-row transactions, 30% updates, 10% deletes), indexed by a sparkcdc server. Then,
per round (the server restarts on the same data directory for each row decoder: native, and pure
Python via SPARKCDC_PURE_PYTHON_DECODER=1; two servers at once would share a replication id):
  1. plain `mysql-replication` decodes the same binlog range in one process, rows to JSON;
  2. for each decoder, a sparkcdc changefeed replicates it from before the workload to a file
     sink, timed from `changefeed create` until its checkpoint passes the last transaction, and
     the output is checked to hold every row change.
Prints rows/s, CPU seconds and peak RSS (and PSS) for each, and the ratios. Not a test: figures go in
bench/README.md and docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
import random
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

from sparkcdc.testing.ha import WARM_UP_DONE, WARM_UP_FAILED  # noqa: E402
from sparkcdc.testing.mariadb import MariaDBServer  # noqa: E402
from sparkcdc.testing.process_usage import PeakRSS, format_breakdown, format_peaks, tree_usage  # noqa: E402
from sparkcdc.testing.scratch import scratch_dir  # noqa: E402
from sparkcdc.testing.server_process import ServerProcess  # noqa: E402
from sparkcdc.upstream.txn_index import TxnIndex  # noqa: E402

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


def output_rows(directory: str, protocol: str) -> int:
    """Row changes in a file sink's data files (canal-json: `data` rows per message; csv: lines)."""
    rows = 0
    extension = "csv" if protocol == "csv" else "json"
    for path in glob.glob(os.path.join(directory, "**", f"CDC*.{extension}"), recursive=True):
        with open(path, encoding="utf-8") as f:
            for line in f:
                if not line.strip():
                    continue
                if protocol == "csv":
                    rows += 1
                else:
                    message = json.loads(line)
                    if not message.get("isDdl"):
                        rows += len(message.get("data") or [])
    return rows


def run_changefeed(server: ServerProcess, name: str, start_ts: int, end_ts: int, sink_dir: str,
                   protocol: str, sink_params: tuple[str, ...] = ()) -> tuple[float, float, int]:
    """Seconds, CPU seconds and peak RSS of `server`'s process tree for one catch-up changefeed;
    `sink_params` are more `name=value` parameters of the sink URI."""
    sampler = PeakRSS(server.process.pid)
    cpu_before = tree_usage(server.process.pid)[0]
    sampler.start()
    began = time.monotonic()
    uri = (f"file://{sink_dir}?protocol={protocol}&enable-tidb-extension=true" if protocol == "canal-json"
           else f"file://{sink_dir}?protocol=csv") + "".join(f"&{param}" for param in sink_params)
    server.cli("changefeed", "create", "-c", name, "--start-ts", str(start_ts), "--sink-uri", uri)
    first = None  # seconds until the checkpoint first moved past start_ts
    while (checkpoint := server.checkpoint(name)) < end_ts:
        if first is None and checkpoint > start_ts:
            first = time.monotonic() - began
        time.sleep(0.2)
    elapsed = time.monotonic() - began
    peak = sampler.stop()
    print(f"  first checkpoint after {first if first is not None else elapsed:.1f}s; "
          f"{format_peaks(sampler)}; at the RSS peak: {format_breakdown(sampler.at_peak)}; "
          f"each one's own peak: {format_breakdown(sampler.group_peaks)}", flush=True)
    cpu_used = tree_usage(server.process.pid)[0] - cpu_before
    server.cli("changefeed", "remove", "-c", name)
    return elapsed, cpu_used, peak


def binlog_end(conn) -> tuple[str, int]:
    """The upstream's current binlog file and position."""
    with conn.cursor() as cur:
        cur.execute("SHOW MASTER STATUS")
        file, pos = cur.fetchone()[:2]
    return file, pos


def wait_indexed(index: TxnIndex, file: str, pos: int):
    """Wait until the puller has indexed the binlog up to (file, pos); its last transaction."""
    while True:
        last = index.last_txn()
        if last and (last.end.file, last.end.pos) == (file, pos):
            return last
        time.sleep(0.2)


def anchor_schema_history(server: ServerProcess, start_ts: int, sink_dir: str) -> int:
    """Keeps schema versions from `start_ts` on across runs; returns the start-ts for timed runs.

    The capture drops schema versions below the lowest changefeed checkpoint, so after a timed
    changefeed is removed, the next could not start from before the workload. A changefeed that
    finishes at start_ts + 1 (no transaction commits in between) holds that point."""
    server.cli("changefeed", "create", "-c", "anchor", "--start-ts", str(start_ts), "--target-ts", str(start_ts + 1),
               "--sink-uri", f"file://{sink_dir}?protocol=canal-json")
    while server.checkpoint("anchor") < start_ts + 1:
        time.sleep(0.2)
    return start_ts + 1


def add_server_arg(parser) -> None:
    """`--server-arg`, repeatable: more `sparkcdc server` arguments for a benchmark's sparkcdc runs,
    for `start_server`'s (or ServerProcess's) extra_args."""
    parser.add_argument("--server-arg", action="append", default=[], metavar="ARG",
                        help="one more `sparkcdc server` argument for the sparkcdc runs, e.g. "
                             "--server-arg=--spark-master --server-arg=local[1]; repeatable")


def start_server(directory: str, upstream_uri: str, decoder: str, warm: bool = False,
                 extra_args: tuple[str, ...] = ()) -> ServerProcess:
    """A server on `directory`; with `warm`, returned once its Spark warm-up (pipeline/warmup.py) has
    ended, so a changefeed created next runs on a warm session as on a long-running server.
    `extra_args`: more `sparkcdc server` flags (e.g. --metrics off)."""
    saved = os.environ.get("SPARKCDC_PURE_PYTHON_DECODER")
    if decoder == "pure":
        os.environ["SPARKCDC_PURE_PYTHON_DECODER"] = "1"
    else:
        os.environ.pop("SPARKCDC_PURE_PYTHON_DECODER", None)
    try:
        log_path = os.path.join(directory, "server.log")
        log_offset = os.path.getsize(log_path) if os.path.exists(log_path) else 0
        server = ServerProcess(directory, upstream_uri, log_path=log_path, extra_args=extra_args).start()
        if warm:
            try:
                _wait_warm_up(log_path, log_offset)
            except BaseException:  # the run ends here: no server left behind it (it outlived one)
                server.stop()
                raise
        return server
    finally:
        if saved is None:
            os.environ.pop("SPARKCDC_PURE_PYTHON_DECODER", None)
        else:
            os.environ["SPARKCDC_PURE_PYTHON_DECODER"] = saved


def _wait_warm_up(log_path: str, log_offset: int, timeout: float = 300.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with open(log_path, "rb") as log:
            log.seek(log_offset)
            text = log.read()
        if WARM_UP_DONE in text:
            return
        if WARM_UP_FAILED in text:
            raise SystemExit(f"the server's Spark warm-up failed; see {log_path}")
        time.sleep(0.5)
    raise SystemExit(f"the server's Spark warm-up did not end within {timeout:.0f}s; see {log_path}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--changes", type=int, default=100_000)
    parser.add_argument("--protocol", default="canal-json", choices=["canal-json", "csv"])
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--decoders", default="native,pure",
                        help="comma-separated row decoders to run sparkcdc with: native, pure")
    args = parser.parse_args()
    decoders = [d.strip() for d in args.decoders.split(",") if d.strip()]
    if not decoders or set(decoders) - {"native", "pure"}:
        parser.error("--decoders takes native and/or pure, e.g. --decoders native,pure")
    base = scratch_dir("sparkcdc-bench-")
    data_dir = os.path.join(base, "cdc")
    mariadb = MariaDBServer(os.path.join(base, "mariadb")).start()
    server = start_server(data_dir, mariadb.uri, decoders[0])
    try:
        print(f"load average before: {os.getloadavg()}")
        index = TxnIndex(os.path.join(data_dir, "txn-index.sqlite"))
        start_ts = index.resolved_ts()
        start_pos = index.position_at(start_ts)
        conn = mariadb.connect()
        t0 = time.monotonic()
        rows = run_workload(conn, args.changes)
        print(f"workload: {rows} row changes in {time.monotonic() - t0:.1f}s")
        last = wait_indexed(index, *binlog_end(conn))  # the puller has indexed the whole workload
        end_ts = last.commit_ts
        start_ts = anchor_schema_history(server, start_ts, os.path.join(base, "anchor"))

        results: dict[str, list[tuple[float, float, int]]] = {d: [] for d in decoders}
        plain: list[tuple[int, float, float]] = []
        for round_number in range(1, args.rounds + 1):
            decoded, seconds, cpu = plain_mysql_replication(mariadb, start_pos, last.end)
            plain.append((decoded, seconds, cpu))
            print(f"round {round_number} plain mysql-replication: {decoded} rows in {seconds:.1f}s = "
                  f"{decoded / seconds:,.0f} rows/s, CPU {cpu:.1f}s, one process", flush=True)
            for decoder in decoders:
                if server is None:
                    server = start_server(data_dir, mariadb.uri, decoder)
                sink_dir = os.path.join(base, f"out-{decoder}-{round_number}")
                elapsed, cpu_used, peak = run_changefeed(server, f"bench-{decoder}-{round_number}", start_ts, end_ts,
                                                         sink_dir, args.protocol)
                server.stop()
                server = None
                written = output_rows(sink_dir, args.protocol)
                if written != rows:
                    raise SystemExit(f"sparkcdc ({decoder}) wrote {written} row changes, expected {rows}")
                results[decoder].append((elapsed, cpu_used, peak))
                print(f"round {round_number} sparkcdc {decoder} ({args.protocol} to file): {rows} rows in "
                      f"{elapsed:.1f}s = {rows / elapsed:,.0f} rows/s, CPU {cpu_used:.1f}s, peak RSS "
                      f"{peak / 2**20:,.0f} MiB (server + Spark JVM + workers); includes Spark query start-up",
                      flush=True)
        print(f"load average after: {os.getloadavg()}")

        plain_rate = statistics.median(d / s for d, s, _ in plain)
        print(f"\nmedian of {args.rounds} round(s), {rows} row changes, {args.protocol}:")
        print(f"{'tool':<28}{'rows/s':>10}{'CPU s':>8}{'peak RSS MiB':>14}{'vs mysql-replication':>22}")
        print(f"{'plain mysql-replication':<28}{plain_rate:>10,.0f}{statistics.median(c for _, _, c in plain):>8.1f}"
              f"{'':>14}{1.0:>22.2f}")
        rates = {}
        for decoder in decoders:
            rates[decoder] = statistics.median(rows / e for e, _, _ in results[decoder])
            cpu = statistics.median(c for _, c, _ in results[decoder])
            peak = max(p for _, _, p in results[decoder])
            print(f"{'sparkcdc ' + decoder:<28}{rates[decoder]:>10,.0f}{cpu:>8.1f}{peak / 2**20:>14,.0f}"
                  f"{rates[decoder] / plain_rate:>22.2f}")
        if len(decoders) == 2:
            print(f"sparkcdc native / pure: {rates['native'] / rates['pure']:.2f}")
    finally:
        if server is not None:
            server.stop()
        mariadb.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
