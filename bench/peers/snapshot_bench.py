"""Snapshot benchmark: sparkcdc's initial snapshot next to Debezium's and Flink CDC's on one table.

    .venv/bin/python bench/peers/snapshot_bench.py [--rows 10000000] [--rounds 3]
        [--tools select,debezium,flink-cdc,sparkcdc] [--no-writer] [--parallelism N]

A private MariaDB gets one sysbench table (`id INT PK, k INT, c CHAR(120), pad CHAR(60)`) of
--rows rows (server-side INSERT ... SELECT from the sequence engine). Then, per round and in turn
(interleaved, same tables, same run), each tool copies the table:
  select     not a CDC tool: the upstream's floor. The table read as a snapshot reads it,
             without a change data pipeline: `[snapshot]`'s chunks (CHUNK_ROWS ids each), each
             in its own `START TRANSACTION WITH CONSISTENT SNAPSHOT` with its binlog position
             read, --parallelism (default: the cores) connections at once, by the `mariadb`
             command-line client (`--quick`, rows streamed) into `wc -l`; the lines are checked.
             What MariaDB itself takes to serve a copy on the same cores bounds every tool's
             rows/s, and the writers' latency during it is the serving's own share;
  debezium   Debezium 3.5 embedded + MariaDB connector, snapshot.mode=initial_only,
             snapshot.locking.mode=none; every record to schemaless JSON, counted;
  flink-cdc  Flink CDC 3.2 MySQL source, scan.startup.mode=initial (incremental snapshot in
             chunks), parallelism = cores, on a MiniCluster; counted until every row is read;
  sparkcdc   a changefeed with `[snapshot] mode = "initial-only"` to the file storage sink
             (canal-json), from `changefeed create` until it is `finished`; the rows in the files
             are checked.
Prints rows/s, CPU seconds and peak RSS of each tool's process tree (sparkcdc: the server's whole
tree, Spark included) with its peak PSS (each page the tree holds counted once: the RSS sum counts
the pages a forked Python worker shares with its daemon in both), the upstream MariaDB's CPU
seconds during each run, the ratios, and the writers' latency: a writer thread updates random
rows one at a time all along (unless --no-writer); its median and p99 commit latency while each
tool runs is compared with the same writer's alone before the rounds. Targets (issue 19, 2 cores): sparkcdc >= 2x Flink CDC's and >= 3x Debezium's
rows/s on 10M rows, peak RSS < 1.5 GB, writers' latency <= 1.2x. The Java projects are built
with Maven on first use (bench/peers/java/*).
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "src"))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, HERE)

from capture_bench import add_server_arg, output_rows, start_server  # noqa: E402
from peers_bench import build_java, run_measured  # noqa: E402
from sparkcdc.testing.mariadb import MariaDBServer  # noqa: E402
from sparkcdc.testing.process_usage import PeakRSS, format_breakdown, format_peaks, tree_usage  # noqa: E402
from sparkcdc.testing.scratch import scratch_dir  # noqa: E402

TOOLS = ("select", "debezium", "flink-cdc", "sparkcdc")
DATABASE, TABLE = "sbsnap", "sbtest1"
CHUNK_ROWS = 50_000  # [snapshot] chunk-size's default (docs/snapshot.md)


def create_table(conn, rows: int) -> None:
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE IF NOT EXISTS {DATABASE}")
        cur.execute(f"USE {DATABASE}")  # the sequence engine's seq_1_to_N tables resolve in the current database
        cur.execute(f"CREATE TABLE {DATABASE}.{TABLE} (id INT PRIMARY KEY, k INT NOT NULL, c CHAR(120) NOT NULL, "
                    "pad CHAR(60) NOT NULL, KEY k_1 (k))")
        step = 1_000_000
        for first in range(1, rows + 1, step):
            last = min(rows, first + step - 1)
            cur.execute(f"INSERT INTO {DATABASE}.{TABLE} SELECT seq, seq % 100000, "
                        f"LPAD(CONCAT(seq * 7919 % 99991, '-', seq), 119, '0'), LPAD(seq, 59, '1') "
                        f"FROM seq_{first}_to_{last}")


class LatencyWriter(threading.Thread):
    """Updates one random row per transaction (k = k + 1, so the row count stays) and records
    each commit's latency, tagged with the phase it ran in."""

    def __init__(self, mariadb: MariaDBServer, rows: int):
        super().__init__(daemon=True)
        self.conn, self.rows = mariadb.connect(), rows
        self.phase, self.latencies = "idle", {}
        self.done = threading.Event()

    def run(self) -> None:
        import random

        rng = random.Random(5)
        with self.conn.cursor() as cur:
            while not self.done.is_set():
                began = time.monotonic()
                cur.execute(f"UPDATE {DATABASE}.{TABLE} SET k = k + 1 WHERE id = %s", (rng.randint(1, self.rows),))
                self.latencies.setdefault(self.phase, []).append(time.monotonic() - began)
                time.sleep(0.01)

    def summary(self, phase: str) -> str:
        values = sorted(self.latencies.get(phase, []))
        if not values:
            return "no writes"
        return (f"writers' latency median {1000 * statistics.median(values):.2f} ms, "
                f"p99 {1000 * values[int(0.99 * (len(values) - 1))]:.2f} ms ({len(values)} writes)")


def run_select(mariadb: MariaDBServer, rows: int, parallelism: int, work_dir: str) -> tuple[float, float, int, str]:
    """The `select` floor (module docstring): seconds, CPU seconds of the clients (`mariadb` and
    `wc`), 0 for their peak RSS (not sampled), and what was checked."""
    chunks = [(first, min(rows, first + CHUNK_ROWS - 1)) for first in range(1, rows + 1, CHUNK_ROWS)]
    command = ["mariadb", "--no-defaults", "--quick", "--batch", "--skip-column-names", "-h", "127.0.0.1",
               "-P", str(mariadb.port), "-u", "root"]
    scripts = []
    for connection in range(parallelism):
        path = os.path.join(work_dir, f"chunks-{connection}.sql")
        with open(path, "w") as file:
            for first, last in chunks[connection::parallelism]:
                file.write("START TRANSACTION WITH CONSISTENT SNAPSHOT;\n"
                           "SHOW STATUS LIKE 'binlog_snapshot_%';\n"  # two rows: file and position
                           f"SELECT * FROM {DATABASE}.{TABLE} WHERE id BETWEEN {first} AND {last} ORDER BY id;\n"
                           "COMMIT;\n")
        scripts.append(path)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    began = time.monotonic()
    pipelines = []
    for path in scripts:
        with open(path) as script:
            client = subprocess.Popen(command, stdin=script, stdout=subprocess.PIPE)
        counter = subprocess.Popen(["wc", "-l"], stdin=client.stdout, stdout=subprocess.PIPE, text=True)
        client.stdout.close()
        pipelines.append((client, counter))
    lines = 0
    for client, counter in pipelines:
        lines += int(counter.communicate()[0])
        if client.wait() != 0:
            raise SystemExit(f"mariadb exited with {client.returncode}")
    elapsed = time.monotonic() - began
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if lines != rows + 2 * len(chunks):
        raise SystemExit(f"select read {lines} lines, expected {rows + 2 * len(chunks)}")
    return elapsed, cpu, 0, f"{rows} rows in {len(chunks)} chunks over {parallelism} connections"


def upstream_cpu(mariadb: MariaDBServer) -> float:
    """CPU seconds the upstream mariadbd has used so far."""
    return tree_usage(mariadb.pid)[0]


def run_sparkcdc(server, name: str, work_dir: str, sink_dir: str, rows: int,
                 parallelism: int) -> tuple[float, float, int]:
    sampler = PeakRSS(server.process.pid)
    cpu_before = tree_usage(server.process.pid)[0]
    sampler.start()
    config = os.path.join(work_dir, f"{name}.toml")
    with open(config, "w") as file:
        file.write(f'[filter]\nrules = ["{DATABASE}.{TABLE}"]\n[snapshot]\nmode = "initial-only"\n'
                   f"parallelism = {parallelism}\n")
    began = time.monotonic()
    server.cli("changefeed", "create", "-c", name, "--config", config,
               "--sink-uri", f"file://{sink_dir}?protocol=canal-json&enable-tidb-extension=true")
    while server.api("GET", f"/api/v2/changefeeds/{name}")["state"] != "finished":
        time.sleep(0.2)
    elapsed = time.monotonic() - began
    peak = sampler.stop()
    print(f"  {format_peaks(sampler)}; at the RSS peak: {format_breakdown(sampler.at_peak)}; "
          f"each one's own peak: {format_breakdown(sampler.group_peaks)}", flush=True)
    cpu = tree_usage(server.process.pid)[0] - cpu_before
    return elapsed, cpu, peak


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tools", default=",".join(TOOLS))
    parser.add_argument("--no-writer", action="store_true", help="no concurrent writer (no latency figures)")
    parser.add_argument("--parallelism", type=int, default=0,
                        help="sparkcdc's [snapshot] parallelism (chunk reads at once); default: the cores")
    parser.add_argument("--sink-dir", default="",
                        help="where sparkcdc's file sink writes (a new directory in it, removed after each round): "
                             "e.g. a tmpfs, so the sink's output is not written back to the upstream's disk "
                             "(the peers count their records without writing them); default: the scratch dir")
    add_server_arg(parser)
    args = parser.parse_args()
    tools = [t.strip() for t in args.tools.split(",") if t.strip()]
    if not tools or set(tools) - set(TOOLS):
        parser.error(f"--tools takes some of {', '.join(TOOLS)}")
    cores = os.cpu_count() or 2
    classpaths = {tool: build_java(tool) for tool in tools if tool in ("debezium", "flink-cdc")}
    base = scratch_dir("sparkcdc-snapshot-bench-")
    mariadb = MariaDBServer(os.path.join(base, "mariadb"),
                            extra_config={"innodb_buffer_pool_size": "2G"}).start()
    writer = None
    try:
        t0 = time.monotonic()
        create_table(mariadb.connect(), args.rows)
        print(f"table of {args.rows} rows in {time.monotonic() - t0:.1f}s; load average {os.getloadavg()}", flush=True)
        if not args.no_writer:
            writer = LatencyWriter(mariadb, args.rows)
            writer.start()
            time.sleep(20)
            print(f"alone: {writer.summary('idle')}", flush=True)
        results: dict[str, list[tuple[float, float, int]]] = {tool: [] for tool in tools}
        for round_number in range(1, args.rounds + 1):
            for tool in tools:
                work_dir = os.path.join(base, f"{tool}-{round_number}")
                os.makedirs(work_dir, exist_ok=True)
                if writer is not None:
                    writer.phase = f"{tool}-{round_number}"
                upstream_before = upstream_cpu(mariadb)
                if tool == "select":
                    elapsed, cpu, peak, detail = run_select(mariadb, args.rows, args.parallelism or cores, work_dir)
                elif tool == "debezium":
                    command = ["java", "-Xmx1g", "-cp", classpaths[tool], "io.sparkcdc.bench.DebeziumBench",
                               "127.0.0.1", str(mariadb.port), str(args.rows), work_dir, "initial_only",
                               f"{DATABASE}.{TABLE}"]
                    elapsed, cpu, peak, detail = run_measured(command, args.rows, work_dir, tool)
                elif tool == "flink-cdc":
                    command = ["java", "-Xmx1g", "-cp", classpaths[tool], "io.sparkcdc.bench.FlinkCdcBench",
                               "127.0.0.1", str(mariadb.port), str(args.rows), DATABASE, TABLE, "initial", str(cores)]
                    elapsed, cpu, peak, detail = run_measured(command, args.rows, work_dir, tool)
                else:
                    server = start_server(os.path.join(work_dir, "cdc"), mariadb.uri, "native", warm=True,
                                          extra_args=tuple(args.server_arg))
                    sink_dir = (tempfile.mkdtemp(prefix="sparkcdc-snapshot-out-", dir=args.sink_dir)
                                if args.sink_dir else os.path.join(work_dir, "out"))
                    try:
                        try:
                            elapsed, cpu, peak = run_sparkcdc(server, f"snapshot-{round_number}", work_dir, sink_dir,
                                                              args.rows, args.parallelism or cores)
                        finally:
                            server.stop()
                        written = output_rows(sink_dir, "canal-json")
                    finally:
                        if args.sink_dir:
                            shutil.rmtree(sink_dir, ignore_errors=True)  # a tmpfs holds it in memory
                    if written < args.rows:
                        raise SystemExit(f"sparkcdc wrote {written} rows, expected {args.rows}")
                    detail = f"{written} rows in the files (the writer's updates during the copy included)"
                if writer is not None:
                    writer.phase = "between"
                upstream = upstream_cpu(mariadb) - upstream_before
                results[tool].append((elapsed, cpu, peak))
                latency = writer.summary(f"{tool}-{round_number}") if writer is not None else ""
                print(f"round {round_number} {tool}: {args.rows / elapsed:,.0f} rows/s, {elapsed:.1f}s, CPU {cpu:.1f}s "
                      f"({1e6 * cpu / args.rows:.1f} us a row), peak RSS {peak / 2**20:,.0f} MiB; upstream CPU "
                      f"{upstream:.1f}s ({1e6 * upstream / args.rows:.1f} us a row); {latency}; {detail}", flush=True)
        print(f"load average after: {os.getloadavg()}")
        print(f"\nmedian of {args.rounds} round(s), {args.rows} rows:")
        rates = {}
        for tool in tools:
            rates[tool] = statistics.median(args.rows / e for e, _, _ in results[tool])
            cpu = statistics.median(c for _, c, _ in results[tool])
            peak = max(p for _, _, p in results[tool])
            print(f"{tool:<12}{rates[tool]:>12,.0f} rows/s{cpu:>8.1f} CPU s{peak / 2**20:>10,.0f} MiB peak RSS")
        if "sparkcdc" in rates:
            for tool, target in (("flink-cdc", 2.0), ("debezium", 3.0)):
                if tool in rates:
                    ratio = rates["sparkcdc"] / rates[tool]
                    print(f"sparkcdc / {tool}: {ratio:.2f} (target >= {target})")
        if "select" in rates:
            for tool in tools:
                if tool != "select":
                    print(f"{tool} / the upstream's floor (select): {rates[tool] / rates['select']:.2f}")
        if writer is not None:
            alone = statistics.median(writer.latencies.get("idle", [0.0])) or 1e-9
            for tool in tools:
                during = [v for r in range(1, args.rounds + 1) for v in writer.latencies.get(f"{tool}-{r}", [])]
                if during:
                    print(f"writers' median latency during {tool}: {statistics.median(during) / alone:.2f}x alone "
                          "(target <= 1.2x for sparkcdc)")
    finally:
        if writer is not None:
            writer.done.set()
        mariadb.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
