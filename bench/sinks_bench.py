"""Sinks benchmark: one prepared binlog replicated end to end to each sink: file, Kafka, MySQL, Delta, Iceberg.

    .venv/bin/python bench/sinks_bench.py [--changes 100000] [--sinks file,kafka,mysql,delta,iceberg]
        [--workload sysbench] [--kafka-protocols canal-json] [--rounds 1] [--compare-src DIR]
        [--downstream-config innodb_buffer_pool_size=1G,...]

A private MariaDB gets one of bench/peers/workloads.py's workloads (sysbench: 100-row
transactions), indexed by a sparkcdc server. Then, per round and sink, a fresh server runs one
changefeed from before the workload, timed from `changefeed create` until its checkpoint passes
the last transaction (so the sink has flushed, Kafka has acknowledged, MySQL has committed):
  file   canal-json with the TiDB extension to a local directory; checked: every row change is there
  kafka  a real broker (KRaft, scripts/setup-kafka.sh), a new 3-partition topic per run, default
         (table) dispatch, canal-json with the TiDB extension and/or the open protocol; checked:
         sparkcdc's Kafka consumer decodes every row change from the topic
  mysql  a second private MariaDB, tables created before the run; checked: CHECKSUM TABLE and row
         count equal upstream's for every workload table
  mariadb-replica  not sparkcdc: MariaDB's own replication applying the same binlog into a third
         private MariaDB (`CHANGE MASTER TO` the upstream at the workload's first GTID,
         slave_parallel_threads=4, slave_parallel_mode=optimistic, log_slave_updates=ON so it
         writes its binlog as `mysql`'s downstream does), timed from START SLAVE until it has
         applied the workload's last GTID; same checks as `mysql`. With both, prints the MySQL sink's rows/s as a share of the
         replica's (issue 27 target: >= 70%), and Kafka's as a share of the file sink's (>= 90%)
  delta, iceberg  lakehouse tables in upsert mode (delta:///dir, iceberg:///dir with the embedded
         catalog); checked with DuckDB's readers: row count and sums of every integer column equal
         upstream's for every workload table; also prints the Parquet files written (on disk, with
         the ones copy-on-write replaced) and live in the table's last version
Prints rows/s, CPU seconds and peak RSS of the server's process tree (server + Spark JVM +
Python workers) and, apart, of the broker or downstream MariaDB, with load averages.
`--compare-src DIR` also runs every sink with the server importing sparkcdc from DIR (a copy of
src/, e.g. before a change), interleaved with this tree's runs. Not a test: figures go in
bench/README.md and docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))
sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "peers"))

import workloads  # noqa: E402
from capture_bench import anchor_schema_history, binlog_end, output_rows, start_server, wait_indexed  # noqa: E402

from sparkcdc.testing.mariadb import MariaDBServer  # noqa: E402
from sparkcdc.testing.process_usage import PeakRSS, format_breakdown, tree_usage  # noqa: E402
from sparkcdc.testing.server_process import ServerProcess  # noqa: E402
from sparkcdc.upstream.txn_index import TxnIndex  # noqa: E402
from sparkcdc.testing.scratch import scratch_dir  # noqa: E402

SINKS = ("file", "kafka", "mysql", "mariadb-replica", "delta", "iceberg")
# log_slave_updates: the replica writes its binlog as the sink's downstream does for the rows it gets.
REPLICA_CONFIG = {"server-id": "2", "slave_parallel_threads": "4", "slave_parallel_mode": "optimistic",
                  "log_slave_updates": "ON"}


@dataclass
class Run:
    sink: str  # file, kafka/<protocol>, mysql, mariadb-replica
    variant: str  # tree, or compare (--compare-src)
    seconds: float
    cpu: Optional[float]  # the sparkcdc server's tree; None for mariadb-replica
    peak: Optional[int]
    peer_cpu: Optional[float] = None  # broker or downstream MariaDB
    peer_peak: Optional[int] = None
    check: str = ""


def timed_changefeed(server: ServerProcess, name: str, start_ts: int, end_ts: int, uri: str,
                     peer_pid: Optional[int]) -> tuple[float, float, int, Optional[float], Optional[int]]:
    """Seconds, server tree CPU s and peak RSS, peer CPU s and peak RSS for one catch-up changefeed."""
    pids = {"server": server.process.pid, **({"peer": peer_pid} if peer_pid else {})}
    samplers = {name: PeakRSS(pid) for name, pid in pids.items()}
    cpu_before = {name: tree_usage(pid)[0] for name, pid in pids.items()}
    for sampler in samplers.values():
        sampler.start()
    began = time.monotonic()
    server.cli("changefeed", "create", "-c", name, "--start-ts", str(start_ts), "--sink-uri", uri)
    while server.checkpoint(name) < end_ts:
        time.sleep(0.2)
    elapsed = time.monotonic() - began
    peaks = {name: sampler.stop() for name, sampler in samplers.items()}
    print(f"  server at its peak: {format_breakdown(samplers['server'].at_peak)}", flush=True)
    cpu = {name: tree_usage(pid)[0] - cpu_before[name] for name, pid in pids.items()}
    server.cli("changefeed", "remove", "-c", name)
    return elapsed, cpu["server"], peaks["server"], cpu.get("peer"), peaks.get("peer")


def timed_replica(replica: MariaDBServer, upstream: MariaDBServer, gtid_start: str) -> tuple[float, float, int]:
    """Seconds, CPU s and peak RSS of MariaDB's own replica applying the (idle) upstream's binlog
    from gtid_start until it has applied all of it."""
    pid = mariadb_pid(replica)
    sampler = PeakRSS(pid)
    cpu_before = tree_usage(pid)[0]
    sampler.start()
    began = time.monotonic()
    replica.replicate_from(upstream, gtid_start, read_only=False)
    replica.wait_replicated(upstream, timeout=3600)
    elapsed = time.monotonic() - began
    peak = sampler.stop()
    cpu = tree_usage(pid)[0] - cpu_before
    conn = replica.connect()
    try:
        with conn.cursor() as cur:
            cur.execute("STOP SLAVE")
            cur.execute("RESET SLAVE ALL")
    finally:
        conn.close()
    return elapsed, cpu, peak


def kafka_row_changes(bootstrap: str, topic: str, protocol: str) -> tuple[int, dict[str, int]]:
    """Row changes in a topic as sparkcdc's Kafka consumer decodes them (DDLs and watermarks left
    out), by op: every message of every partition, up to the offsets at the start of the read."""
    from confluent_kafka import Consumer, TopicPartition

    from sparkcdc.consumer.kafka_consumer import RowEvent, decode_canal_json, decode_open

    decode = {"canal-json": lambda message: decode_canal_json(message.value()),
              "open-protocol": lambda message: decode_open(message.key(), message.value())}[protocol]
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex[:6]}",
                         "enable.auto.commit": False})
    partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
    ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in partitions}
    consumer.assign([TopicPartition(topic, p, 0) for p in partitions if ends[p]])
    remaining = {p for p in partitions if ends[p]}
    rows, ops = 0, {}
    while remaining:
        for message in consumer.consume(10_000, 5.0):
            if message.error():
                raise RuntimeError(f"reading {topic}: {message.error()}")
            for event in decode(message):
                if isinstance(event, RowEvent):
                    rows += 1
                    ops[event.op] = ops.get(event.op, 0) + 1
            if message.offset() + 1 >= ends[message.partition()]:
                remaining.discard(message.partition())
    consumer.close()
    return rows, ops


def workload_tables(conn) -> list[str]:
    with conn.cursor() as cur:
        cur.execute("SELECT table_name FROM information_schema.tables WHERE table_schema = %s ORDER BY 1",
                    (workloads.DATABASE,))
        return [row[0] for row in cur.fetchall()]


def table_checksums(conn, tables: list[str]) -> dict[str, tuple[int, int]]:
    """(CHECKSUM TABLE, COUNT(*)) per table of the workload database."""
    out = {}
    with conn.cursor() as cur:
        for table in tables:
            cur.execute(f"CHECKSUM TABLE `{workloads.DATABASE}`.`{table}`")
            checksum = cur.fetchone()[1]
            cur.execute(f"SELECT COUNT(*) FROM `{workloads.DATABASE}`.`{table}`")
            out[table] = (checksum, cur.fetchone()[0])
    return out


def fresh_downstream(downstream: MariaDBServer, workload: str) -> None:
    conn = downstream.connect()
    with conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS `{workloads.DATABASE}`")
    workloads.setup(conn, workload)
    conn.close()


def same_tables(server: MariaDBServer, tables: list[str], upstream_sums) -> tuple[bool, str]:
    """Whether every workload table's CHECKSUM TABLE and row count on `server` equal upstream's."""
    conn = server.connect()
    try:
        sums = table_checksums(conn, tables)
    finally:
        conn.close()
    if sums == upstream_sums:
        return True, f"{len(tables)} table checksums equal"
    return False, f"checksums differ: up {upstream_sums} down {sums}"


def lake_check(uri: str, conn, tables: list[str]) -> tuple[bool, str]:
    """Whether each lake table's row count and integer sums equal upstream's, read with DuckDB,
    and how many Parquet files the tables have (on disk; live in the last version)."""
    from sparkcdc.config.replica import SinkConfig
    from sparkcdc.sink.lakehouse.config import parse_lakehouse_uri
    from sparkcdc.testing.lakehouse import duckdb_connection

    target = parse_lakehouse_uri(uri, SinkConfig())
    duck = duckdb_connection()
    problems, on_disk, live = [], 0, 0
    for table in tables:
        with conn.cursor() as cur:
            cur.execute("SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA=%s AND TABLE_NAME=%s "
                        "AND DATA_TYPE IN ('int', 'bigint') ORDER BY ORDINAL_POSITION", (workloads.DATABASE, table))
            numbers = [r[0] for r in cur.fetchall()]
            sums = "".join(f", SUM(`{n}`)" for n in numbers)
            cur.execute(f"SELECT COUNT(*){sums} FROM `{workloads.DATABASE}`.`{table}`")
            expected = tuple(int(v or 0) for v in cur.fetchone())
        lake_sums = "".join(f', SUM("{n}")' for n in numbers)
        if target.format == "delta":
            from deltalake import DeltaTable

            path = target.path(workloads.DATABASE, table)
            source = f"delta_scan('{path}')"
            live += len(DeltaTable(path).file_uris())
        else:
            from sparkcdc.sink.lakehouse.iceberg import IcebergTables

            lake_table = IcebergTables(target, "bench").catalog.load_table((workloads.DATABASE, table))
            source = f"iceberg_scan('{lake_table.metadata_location}')"
            path = lake_table.location().removeprefix("file://")
            live += len(list(lake_table.scan().plan_files()))
        on_disk += sum(1 for _ in Path(path).rglob("*.parquet"))
        found = tuple(int(v or 0) for v in duck.execute(f"SELECT COUNT(*){lake_sums} FROM {source}").fetchone())
        if found != expected:
            problems.append(f"{table}: upstream count and sums {expected}, lake {found}")
    duck.close()
    files = f"{on_disk} Parquet files written, {live} live"
    summary = "; ".join(problems) if problems else f"{len(tables)} tables' counts and sums equal upstream's"
    return not problems, f"{summary} ({files})"


def mariadb_pid(server: MariaDBServer) -> Optional[int]:
    try:
        with open(server.pid_file) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--changes", type=int, default=100_000)
    parser.add_argument("--sinks", default="file,kafka,mysql",
                        help="comma-separated: file, kafka, mysql, mariadb-replica, delta, iceberg")
    parser.add_argument("--workload", default="sysbench", choices=sorted(workloads.WORKLOADS))
    parser.add_argument("--kafka-protocols", default="canal-json",
                        help="comma-separated Kafka protocols: canal-json, open-protocol")
    parser.add_argument("--mysql-options", default="", help="query of the MySQL sink URI, e.g. worker-count=16")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--compare-src", default="",
                        help="also run every sink with the server importing sparkcdc from this directory")
    parser.add_argument("--downstream-config", default="",
                        help="server options of the MySQL sink's downstream and of the replica, comma-separated "
                             "KEY=VALUE, e.g. innodb_buffer_pool_size=1G,innodb_log_file_size=512M (the test "
                             "fixture's defaults are small: a 64M buffer pool, a 16M redo log)")
    args = parser.parse_args()
    items = [item.strip() for item in args.downstream_config.split(",")] if args.downstream_config else []
    if any("=" not in item for item in items):
        parser.error("--downstream-config takes KEY=VALUE[,KEY=VALUE...]")
    downstream_config = dict(item.split("=", 1) for item in items)
    sinks = [s.strip() for s in args.sinks.split(",") if s.strip()]
    if not sinks or set(sinks) - set(SINKS):
        parser.error(f"--sinks takes {', '.join(SINKS)}")
    protocols = [p.strip() for p in args.kafka_protocols.split(",") if p.strip()]
    if set(protocols) - {"canal-json", "open-protocol"}:
        parser.error("--kafka-protocols takes canal-json and/or open-protocol")
    variants = {"tree": ""}
    if args.compare_src:
        variants["compare"] = os.path.abspath(args.compare_src)

    base = scratch_dir("sparkcdc-sinks-bench-")
    data_dir = os.path.join(base, "cdc")
    upstream = MariaDBServer(os.path.join(base, "upstream")).start()
    downstream = broker = replica = None
    server: Optional[ServerProcess] = None
    runs: list[Run] = []
    try:
        print(f"load average before: {os.getloadavg()}", flush=True)
        server = start_server(data_dir, upstream.uri, "native")
        conn = upstream.connect()
        index = TxnIndex(os.path.join(data_dir, "txn-index.sqlite"))
        workloads.setup(conn, args.workload)
        start_ts = wait_indexed(index, *binlog_end(conn)).commit_ts
        gtid_start = upstream.gtid_binlog_pos()
        while index.resolved_ts() <= start_ts + 1:
            time.sleep(0.2)
        began = time.monotonic()
        rows = workloads.write(conn, args.workload, args.changes)
        end_ts = wait_indexed(index, *binlog_end(conn)).commit_ts
        print(f"workload {args.workload}: {rows} row changes in {time.monotonic() - began:.1f}s", flush=True)
        start_ts = anchor_schema_history(server, start_ts, os.path.join(base, "anchor"))
        server.stop()
        server = None
        tables = workload_tables(conn)
        upstream_sums = table_checksums(conn, tables)
        if "kafka" in sinks:
            from sparkcdc.testing.kafka import KafkaBroker

            broker = KafkaBroker(Path(base) / "kafka").start()
        if "mysql" in sinks:
            downstream = MariaDBServer(os.path.join(base, "downstream"), extra_config=downstream_config).start()
        if "mariadb-replica" in sinks:
            replica = MariaDBServer(os.path.join(base, "replica"),
                                    extra_config={**downstream_config, **REPLICA_CONFIG}).start()

        targets = [("kafka/" + p if s == "kafka" else s) for s in sinks for p in (protocols if s == "kafka" else [""])]
        for round_number in range(1, args.rounds + 1):
            for target in targets:
                if target == "mariadb-replica":
                    fresh_downstream(replica, args.workload)
                    seconds, peer_cpu, peer_peak = timed_replica(replica, upstream, gtid_start)
                    ok, check = same_tables(replica, tables, upstream_sums)
                    if not ok:
                        raise SystemExit(f"mariadb-replica: {check}")
                    runs.append(Run(target, "mariadb", seconds, None, None, peer_cpu, peer_peak, check))
                    print(f"round {round_number} mariadb-replica: {rows} rows in {seconds:.1f}s = "
                          f"{rows / seconds:,.0f} rows/s, replica CPU {peer_cpu:.1f}s, peak RSS "
                          f"{peer_peak / 2**20:,.0f} MiB; {check}; load {os.getloadavg()[0]:.2f}", flush=True)
                    continue
                for variant, src in variants.items():
                    name = f"{target.replace('/', '-')}-{variant}-{round_number}"
                    peer_pid = None
                    if target == "file":
                        sink_dir = os.path.join(base, "out-" + name)
                        uri = f"file://{sink_dir}?protocol=canal-json&enable-tidb-extension=true"
                    elif target in ("delta", "iceberg"):
                        uri = f"{target}://{os.path.join(base, 'out-' + name)}"
                    elif target.startswith("kafka/"):
                        protocol = target.split("/", 1)[1]
                        topic = f"bench-{name}"
                        uri = f"kafka://{broker.bootstrap}/{topic}?protocol={protocol}&partition-num=3"
                        if protocol == "canal-json":
                            uri += "&enable-tidb-extension=true"
                        peer_pid = broker.process.pid
                    else:
                        fresh_downstream(downstream, args.workload)
                        uri = f"mysql://root@127.0.0.1:{downstream.port}/" + (
                            f"?{args.mysql_options}" if args.mysql_options else "")
                        peer_pid = mariadb_pid(downstream)
                    saved = os.environ.get("PYTHONPATH")
                    if src:
                        os.environ["PYTHONPATH"] = src + (os.pathsep + saved if saved else "")
                    try:
                        server = start_server(data_dir, upstream.uri, "native")
                    finally:
                        if saved is None:
                            os.environ.pop("PYTHONPATH", None)
                        else:
                            os.environ["PYTHONPATH"] = saved
                    seconds, cpu, peak, peer_cpu, peer_peak = timed_changefeed(
                        server, name, start_ts, end_ts, uri, peer_pid)
                    server.stop()
                    server = None
                    if target == "file":
                        written = output_rows(sink_dir, "canal-json")
                        check = f"{written} rows in files"
                        ok = written == rows
                    elif target in ("delta", "iceberg"):
                        ok, check = lake_check(uri, conn, tables)
                    elif target.startswith("kafka/"):
                        written, ops = kafka_row_changes(broker.bootstrap, topic, target.split("/", 1)[1])
                        check = f"{written} row changes in the topic {ops}"
                        ok = written == rows
                    else:
                        ok, check = same_tables(downstream, tables, upstream_sums)
                    if not ok:
                        raise SystemExit(f"{name}: expected {rows} row changes; {check}")
                    run = Run(target, variant, seconds, cpu, peak, peer_cpu, peer_peak, check)
                    runs.append(run)
                    peer = (f"; {'broker' if target.startswith('kafka') else 'downstream'} CPU {peer_cpu:.1f}s, "
                            f"peak RSS {peer_peak / 2**20:,.0f} MiB" if peer_cpu is not None else "")
                    print(f"round {round_number} {target} ({variant}): {rows} rows in {seconds:.1f}s = "
                          f"{rows / seconds:,.0f} rows/s, server CPU {cpu:.1f}s, peak RSS {peak / 2**20:,.0f} MiB"
                          f"{peer}; {check}; load {os.getloadavg()[0]:.2f}", flush=True)
        print(f"load average after: {os.getloadavg()}")
        print(f"\nmedian of {args.rounds} round(s), {rows} row changes ({args.workload}), from changefeed create "
              "to checkpoint past the last transaction; server = sparkcdc + Spark JVM + workers")
        print("| sink | variant | rows/s | s | server CPU s | server peak RSS MiB | peer CPU s | peer peak RSS MiB |")
        print("|---|---|---|---|---|---|---|---|")
        for target in targets:
            for variant in (["mariadb"] if target == "mariadb-replica" else variants):
                mine = [r for r in runs if r.sink == target and r.variant == variant]
                peer_cpu = [r.peer_cpu for r in mine if r.peer_cpu is not None]
                peer_peak = [r.peer_peak for r in mine if r.peer_peak is not None]
                cpu = [r.cpu for r in mine if r.cpu is not None]
                peak = [r.peak for r in mine if r.peak is not None]
                print(f"| {target} | {variant} | {statistics.median(rows / r.seconds for r in mine):,.0f} | "
                      f"{statistics.median(r.seconds for r in mine):.1f} | "
                      f"{f'{statistics.median(cpu):.1f}' if cpu else '-'} | "
                      f"{f'{max(peak) / 2**20:,.0f}' if peak else '-'} | "
                      f"{f'{statistics.median(peer_cpu):.1f}' if peer_cpu else '-'} | "
                      f"{f'{max(peer_peak) / 2**20:,.0f}' if peer_peak else '-'} |")

        def rate(sink: str) -> Optional[float]:
            mine = [rows / r.seconds for r in runs if r.sink == sink and r.variant in ("tree", "mariadb")]
            return statistics.median(mine) if mine else None

        file_rate, replica_rate, mysql_rate = rate("file"), rate("mariadb-replica"), rate("mysql")
        if file_rate:
            for lake in ("delta", "iceberg"):
                if rate(lake):
                    print(f"{lake}: {rate(lake) / file_rate:.0%} of the file sink's rows/s (issue 25 target: >= 50%)")
            for target in targets:
                if target.startswith("kafka/"):
                    print(f"{target}: {rate(target) / file_rate:.0%} of the file sink's rows/s "
                          "(issue 27 target: >= 90%)")
        if replica_rate and mysql_rate:
            print(f"mysql: {mysql_rate / replica_rate:.0%} of MariaDB's own replica's rows/s "
                  "(issue 27 target: >= 70%)")
    finally:
        if server is not None:
            server.stop()
        if broker is not None:
            broker.stop()
        if downstream is not None:
            downstream.stop()
        if replica is not None:
            replica.stop()
        upstream.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
