"""Kafka sink benchmark: produce throughput through `KafkaSink` into a real broker (KRaft, from
scripts/setup-kafka.sh), per protocol.

    .venv/bin/python bench/kafka_bench.py [--rows 100000] [--protocols canal-json,open-protocol,simple,debezium,avro]
        [--partitions 3] [--flush-rows 20000]

Rows are the storage bench's sysbench-shaped inserts (`id, k, c CHAR(120), pad CHAR(60)`) in
100-row transactions, prepared before the clock starts. The timed part is what a changefeed's
sink does per micro-batch: route, encode, produce (acks=all, idempotent), and at every
`--flush-rows` rows `write_checkpoint` (wait for every acknowledgement, then a watermark to each
partition). MB/s counts key + value bytes produced. avro starts an Apicurio registry. Each
protocol writes its own new topic. Not a test: figures go in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import sys
import uuid
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))
sys.path.insert(0, os.path.dirname(__file__))

from storage_bench import drive_sink, prepare_rows  # noqa: E402

from sparkcdc.config.replica import ReplicaConfig  # noqa: E402
from sparkcdc.model.events import RowChange  # noqa: E402
from sparkcdc.sink.kafka.sink import KafkaSink  # noqa: E402
from sparkcdc.testing.kafka import KafkaBroker  # noqa: E402
from sparkcdc.testing.schema_registry import SchemaRegistry  # noqa: E402
from sparkcdc.testing.scratch import scratch_dir  # noqa: E402


def run_one(uri: str, transactions: list[list[RowChange]], flush_rows: int) -> dict:
    sink = KafkaSink(uri, ReplicaConfig())
    rows, elapsed, cpu = drive_sink(sink, transactions, flush_rows)
    result = {"rows": rows, "seconds": elapsed, "cpu": cpu, "bytes": sink.sent_bytes, "messages": sink.sent_messages}
    sink.close()
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--protocols", default="canal-json,open-protocol,simple,debezium,avro")
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--flush-rows", type=int, default=20_000,
                        help="rows between checkpoints, i.e. per micro-batch (default %(default)s)")
    args = parser.parse_args()

    transactions = prepare_rows(args.rows)
    work = scratch_dir("sparkcdc-kafka-bench-")
    broker = KafkaBroker(Path(work) / "kafka").start()
    registry = None
    results = []
    try:
        for protocol in args.protocols.split(","):
            topic = f"bench-{protocol}-{uuid.uuid4().hex[:6]}"
            uri = f"kafka://{broker.bootstrap}/{topic}?protocol={protocol}&partition-num={args.partitions}"
            if protocol in ("canal-json", "avro"):
                uri += "&enable-tidb-extension=true"
            if protocol == "avro":
                if registry is None:
                    registry = SchemaRegistry(Path(work) / "registry").start()
                uri += f"&avro-enable-watermark=true&schema-registry={registry.url}"
            result = run_one(uri, transactions, args.flush_rows)
            result["protocol"] = protocol
            results.append(result)
            print(f"{protocol:13} {result['rows'] / result['seconds']:9,.0f} rows/s "
                  f"{result['bytes'] / result['seconds'] / 1e6:6.1f} MB/s  ({result['bytes'] / 1e6:.1f} MB in "
                  f"{result['messages']:,} messages, {result['seconds']:.1f} s, {result['cpu']:.1f} CPU s)", flush=True)
    finally:
        broker.stop()
        if registry is not None:
            registry.stop()

    print("\n| protocol | rows/s | MB/s | produced | messages | s | CPU s |")
    print("|---|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['protocol']} | {r['rows'] / r['seconds']:,.0f} | {r['bytes'] / r['seconds'] / 1e6:.1f} | "
              f"{r['bytes'] / 1e6:.1f} MB | {r['messages']:,} | {r['seconds']:.1f} | {r['cpu']:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
