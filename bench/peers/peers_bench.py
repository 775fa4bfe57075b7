"""Peers benchmark: sparkcdc next to Debezium and mysql-replication on one prepared binlog.

    .venv/bin/python bench/peers/peers_bench.py [--changes 100000] [--rounds 3]
        [--workload sysbench|single-row|wide|tables1000|tables10000]
        [--tools debezium,flink-cdc,mysql-replication,sparkcdc,sparkcdc-no-metrics] [--sparkcdc-start cold|warm]
        [--sink-param flush-interval=2s]

A private MariaDB gets one workload of bench/peers/workloads.py: sysbench-shaped rows (60% inserts
in 100-row transactions, 30% updates, 10% deletes; bench/capture_bench.py's), the same as
single-row autocommit transactions, the same mix on the 36-column mixed-type table, or spread over
1,000 tables. The tables are created first (sparkcdc's start position is after those DDLs; the
peers read them from the binlog's start). Then, per round and in turn (in reverse order every other
round), each tool reads the whole binlog from its start (catch-up mode):
  debezium           Debezium 3.5 embedded engine + MariaDB connector (bench/peers/java/debezium),
                     every record to schemaless JSON, counted; no Kafka;
  flink-cdc          Flink CDC 3.2 MySQL source on a Flink 1.20 MiniCluster, parallelism 1
                     (bench/peers/java/flink-cdc), Debezium JSON per record, counted;
  mysql-replication  plain python-mysql-replication in one process, rows to JSON;
  sparkcdc           a changefeed to the file storage sink (canal-json + TiDB extension), until
                     its checkpoint passes the last transaction (capture_bench.run_changefeed), with
                     /metrics scraped every --scrape-seconds while it runs (default 1; Prometheus
                     scrapes every 15 s by default in most setups, every 60 s out of the box);
  sparkcdc-no-metrics  the same on a server started with `--metrics off`: next to `sparkcdc`, the
                     cost of metrics (docs/operations.md; the target is < 3% of rows/s).
The Java projects are built here on demand with Maven from Maven Central (needs mvn and Java 17;
not run by CI). Prints rows/s (from process start for the peers, from `changefeed create` for sparkcdc: each
includes its start-up), CPU seconds and peak RSS (and PSS) of each tool's process tree, the ratio of sparkcdc
to each peer, and the load average before and after. Peers do less work (no sink): intended.

sparkcdc's server is restarted for each of its runs. --sparkcdc-start says when its changefeed is
created: `cold` (default) right after the fresh server is ready, so the run includes the Spark
session's first streaming query (the JVM compiling and loading Spark's classes, the first Python
workers); `warm` once the server's own warm-up query has ended (pipeline/warmup.py), as on a
long-running TiCDC-style server, so the run includes only what a changefeed's own start costs.
Either way CPU is counted from the create; the warm-up's is not.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "src"))
sys.path.insert(0, os.path.join(HERE, ".."))

from capture_bench import (  # noqa: E402
    add_server_arg, anchor_schema_history, binlog_end, wait_indexed, output_rows, run_changefeed, start_server, tree_usage,
)
import workloads  # noqa: E402
from sparkcdc.testing.mariadb import MariaDBServer  # noqa: E402
from sparkcdc.testing.process_usage import PeakRSS, format_peaks  # noqa: E402
from sparkcdc.testing.scratch import scratch_dir  # noqa: E402
from sparkcdc.upstream.txn_index import TxnIndex  # noqa: E402

JAVA_PROJECTS = os.path.join(HERE, "java")
TOOLS = ("debezium", "flink-cdc", "mysql-replication", "sparkcdc", "sparkcdc-no-metrics")
SPARKCDC_TOOLS = ("sparkcdc", "sparkcdc-no-metrics")
SCRAPE_SECONDS = 1.0


class MetricsScraper(threading.Thread):
    """GET /metrics every `interval` seconds while a sparkcdc run goes on, as Prometheus would."""

    def __init__(self, url: str, interval: float = SCRAPE_SECONDS):
        super().__init__(daemon=True)
        self.url, self.interval, self.done, self.scrapes = url, interval, threading.Event(), 0

    def run(self) -> None:
        while not self.done.wait(self.interval):
            try:
                with urllib.request.urlopen(self.url + "/metrics", timeout=30) as response:
                    response.read()
                self.scrapes += 1
            except OSError:
                pass


def build_java(project: str) -> str:
    """The classpath of bench/peers/java/<project>, building it with Maven if needed."""
    root = os.path.join(JAVA_PROJECTS, project)
    classes, lib = os.path.join(root, "target", "classes"), os.path.join(root, "target", "lib")
    if not (os.path.isdir(lib) and os.path.isdir(os.path.join(classes, "io"))):
        print(f"building bench/peers/java/{project} (Maven Central; the first time takes minutes)", flush=True)
        subprocess.run(["mvn", "-q", "-B", "-f", os.path.join(root, "pom.xml"), "package",
                        "dependency:copy-dependencies", f"-DoutputDirectory={lib}", "-DincludeScope=runtime"],
                       check=True)
    jars = sorted(os.listdir(lib))
    # Flink CDC's jars carry patched Debezium classes: they must come first.
    first = [j for j in jars if j.startswith(("flink-connector-mysql-cdc", "flink-cdc-"))]
    return ":".join([classes] + [os.path.join(lib, j) for j in first + [j for j in jars if j not in first]])


PLAIN_MYSQL_REPLICATION = """
import sys
sys.path.insert(0, {bench!r})
from types import SimpleNamespace
from capture_bench import plain_mysql_replication
from sparkcdc.model.position import BinlogPosition
rows, seconds, cpu = plain_mysql_replication(SimpleNamespace(port={port}), BinlogPosition({first!r}, {first_pos}), BinlogPosition({last!r}, {last_pos}))
print(f"rows={{rows}} seconds={{seconds:.3f}}")
"""


def run_measured(command: list[str], rows: int, work_dir: str, name: str) -> tuple[float, float, int, str]:
    """Seconds, CPU seconds, peak RSS of the process tree and the tool's own report line."""
    os.makedirs(work_dir, exist_ok=True)
    began = time.monotonic()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=open(os.path.join(work_dir, f"{name}.log"), "wb"),
                               text=True)
    sampler = PeakRSS(process.pid)
    sampler.start()
    cpu = 0.0
    while process.poll() is None:
        cpu = max(cpu, tree_usage(process.pid)[0])
        time.sleep(0.1)
    elapsed = time.monotonic() - began
    peak = sampler.stop()
    report = process.stdout.read().strip()
    if process.returncode != 0 or f"rows={rows} " not in report:
        raise SystemExit(f"{name} failed (exit {process.returncode}, {report!r}); see {work_dir}/{name}.log")
    return elapsed, cpu, peak, f"{report}; {format_peaks(sampler)}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--changes", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workload", default="sysbench", choices=list(workloads.WORKLOADS))
    parser.add_argument("--tools", default=",".join(TOOLS), help="comma-separated: " + ", ".join(TOOLS))
    parser.add_argument("--sparkcdc-start", default="cold", choices=["cold", "warm"],
                        help="create sparkcdc's changefeed right after its server is ready (cold) or after the "
                             "server's Spark warm-up has ended (warm); default %(default)s")
    parser.add_argument("--scrape-seconds", type=float, default=SCRAPE_SECONDS,
                        help="how often /metrics is scraped during a sparkcdc run (default %(default)s)")
    add_server_arg(parser)
    parser.add_argument("--sink-param", action="append", default=[], metavar="NAME=VALUE",
                        help="one more parameter of sparkcdc's file sink URI, e.g. flush-interval=2s; repeatable")
    args = parser.parse_args()
    tools = [t.strip() for t in args.tools.split(",") if t.strip()]
    if not tools or set(tools) - set(TOOLS):
        parser.error(f"--tools takes some of {', '.join(TOOLS)}")
    classpaths = {tool: build_java(tool) for tool in tools if tool in ("debezium", "flink-cdc")}
    base = scratch_dir("sparkcdc-peers-")
    data_dir = os.path.join(base, "cdc")
    mariadb = MariaDBServer(os.path.join(base, "mariadb")).start()
    server = start_server(data_dir, mariadb.uri, "native") if set(SPARKCDC_TOOLS) & set(tools) else None
    server_stopped = False
    try:
        print(f"load average before: {os.getloadavg()}", flush=True)
        workload = workloads.WORKLOADS[args.workload]
        conn = mariadb.connect()
        first_file, first_pos = binlog_end(conn)
        index = TxnIndex(os.path.join(data_dir, "txn-index.sqlite")) if server else None
        t0 = time.monotonic()
        workloads.setup(conn, workload.name)
        start_ts = wait_indexed(index, *binlog_end(conn)).commit_ts if index else 0
        while index and index.resolved_ts() <= start_ts + 1:
            # anchor_schema_history holds start_ts + 1: no workload transaction may get that ts.
            time.sleep(0.2)
        print(f"setup ({workload.name}): {time.monotonic() - t0:.1f}s", flush=True)
        t0 = time.monotonic()
        rows = workloads.write(conn, workload.name, args.changes)
        print(f"workload {workload.name}: {rows} row changes in {time.monotonic() - t0:.1f}s", flush=True)
        file, pos = binlog_end(conn)
        end_ts = 0
        if index:
            end_ts = wait_indexed(index, file, pos).commit_ts
            start_ts = anchor_schema_history(server, start_ts, os.path.join(base, "anchor"))
            server.stop()  # restarted for each sparkcdc run, so it does not run beside the peers
            server_stopped = True

        results: dict[str, list[tuple[float, float, int]]] = {t: [] for t in tools}
        for round_number in range(1, args.rounds + 1):
            # Every other round in reverse order: a tool that always ran first (a cooler page
            # cache, a fresher JVM heap of the machine) would carry the order in its figures.
            for tool in (tools if round_number % 2 else tools[::-1]):
                work_dir = os.path.join(base, f"{tool}-{round_number}")
                if tool == "debezium":
                    command = ["java", "-Xmx512m", "-cp", classpaths[tool], "io.sparkcdc.bench.DebeziumBench",
                               "127.0.0.1", str(mariadb.port), str(rows), work_dir]
                    elapsed, cpu, peak, detail = run_measured(command, rows, work_dir, tool)
                elif tool == "flink-cdc":
                    command = ["java", "-Xmx512m", "-cp", classpaths[tool], "io.sparkcdc.bench.FlinkCdcBench",
                               "127.0.0.1", str(mariadb.port), str(rows), workloads.DATABASE, workload.table_regex]
                    elapsed, cpu, peak, detail = run_measured(command, rows, work_dir, tool)
                elif tool == "mysql-replication":
                    script = PLAIN_MYSQL_REPLICATION.format(bench=os.path.join(HERE, ".."), port=mariadb.port, first=first_file,
                                                            first_pos=first_pos, last=file, last_pos=pos)
                    elapsed, cpu, peak, detail = run_measured([sys.executable, "-c", script], rows, work_dir, tool)
                else:
                    metrics = tool == "sparkcdc"
                    if server is not None and not server_stopped:
                        server.stop()
                    server = start_server(data_dir, mariadb.uri, "native", warm=args.sparkcdc_start == "warm",
                                          extra_args=tuple(args.server_arg) + (() if metrics else ("--metrics", "off")))
                    server_stopped = False
                    scraper = MetricsScraper(server.url, args.scrape_seconds) if metrics else None
                    if scraper is not None:
                        scraper.start()
                    sink_dir = os.path.join(base, f"out-{tool}-{round_number}")
                    elapsed, cpu, peak = run_changefeed(server, f"peers-{round_number}", start_ts, end_ts, sink_dir,
                                                        "canal-json", tuple(args.sink_param))
                    if scraper is not None:
                        scraper.done.set()
                    server.stop()
                    server_stopped = True
                    written = output_rows(sink_dir, "canal-json")
                    if written != rows:
                        raise SystemExit(f"sparkcdc wrote {written} row changes, expected {rows}")
                    stores = ", ".join(f"{name} {os.path.getsize(os.path.join(data_dir, name)) / 2**20:,.1f} MiB"
                                       for name in sorted(os.listdir(data_dir)) if ".sqlite" in name)
                    files = sum(name.startswith("CDC") and name != "CDC.index"
                                for _, _, names in os.walk(sink_dir) for name in names)
                    detail = (f"{written} rows in {files} data files{''.join(' &' + p for p in args.sink_param)}; "
                              f"{args.sparkcdc_start} start; stores: {stores}")
                    if scraper is not None:
                        detail += f"; /metrics scraped {scraper.scrapes} times"
                results[tool].append((elapsed, cpu, peak))
                print(f"round {round_number} {tool}: {rows / elapsed:,.0f} rows/s, {elapsed:.1f}s, CPU {cpu:.1f}s, "
                      f"peak RSS {peak / 2**20:,.0f} MiB; {detail}", flush=True)
        print(f"load average after: {os.getloadavg()}")

        print(f"\nmedian of {args.rounds} round(s), {rows} row changes ({workload.description}); "
              f"sparkcdc {args.sparkcdc_start} start:")
        print(f"{'tool':<20}{'rows/s':>10}{'CPU s':>8}{'peak RSS MiB':>14}")
        rates = {}
        for tool in tools:
            rates[tool] = statistics.median(rows / e for e, _, _ in results[tool])
            cpu = statistics.median(c for _, c, _ in results[tool])
            peak = max(p for _, _, p in results[tool])
            print(f"{tool:<20}{rates[tool]:>10,.0f}{cpu:>8.1f}{peak / 2**20:>14,.0f}")
        if "sparkcdc" in rates:
            for tool in tools:
                if tool != "sparkcdc":
                    print(f"sparkcdc / {tool}: {rates['sparkcdc'] / rates[tool]:.2f}")
        if "sparkcdc" in rates and "sparkcdc-no-metrics" in rates:
            paired = [off[0] / on[0] for on, off in zip(results["sparkcdc"], results["sparkcdc-no-metrics"])]
            print(f"cost of metrics: {100 * (1 - rates['sparkcdc'] / rates['sparkcdc-no-metrics']):.1f}% of rows/s "
                  "(target < 3%); per round, rows/s with / without: "
                  f"{', '.join(f'{ratio:.3f}' for ratio in paired)} (mean {statistics.mean(paired):.3f}, "
                  f"median {statistics.median(paired):.3f})")
    finally:
        if server is not None and not server_stopped:
            server.stop()
        mariadb.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
