"""Driver CPU of `write_batch` to the Kafka sink (canal-json): the RowChange path against the columnar one.

    .venv/bin/python bench/kafka_write_batch_bench.py [--changes 100000] [--batch-rows 20000] [--rounds 3]
        [--partitions 3] [--dispatch table] [--profile]

write_batch_bench's Arrow batches (sysbench workload as df.toArrow() gives them) go through
`write_batch` into a KafkaSink producing to a real broker (KRaft, scripts/setup-kafka.sh), each
round twice: once with the sink's columnar entry hidden (every row becomes a RowChange and is
encoded by encode_rows) and once as a changefeed runs it (write_arrow: encode_arrow, one message
per row). The clock covers what a micro-batch costs the driver: route, encode, produce, flush and
the checkpoint (every acknowledgement, then a watermark per partition). Prints the process CPU
and wall time per row of each (best round), their ratio and the load average, and checks that
both topics hold the same (partition, value) sequences. Not a test: figures go in bench/README.md.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from write_batch_bench import batches, print_best, workload, write_all  # noqa: E402

from sparkcdc.config.replica import parse_replica_config  # noqa: E402
from sparkcdc.sink.kafka.sink import KafkaSink  # noqa: E402
from sparkcdc.testing.kafka import KafkaBroker, read_topic  # noqa: E402

NOW = time.time()


class RowChangeKafkaSink(KafkaSink):
    accepts_arrow = False  # hides write_arrow: the RowChange path


def run(sink_class, tables, uri: str, config_toml: str, profile: bool = False) -> tuple[float, float]:
    sink = sink_class(uri, parse_replica_config(config_toml), clock=lambda: NOW)
    return write_all(sink, tables, profile)


def topic_contents(bootstrap: str, topic: str) -> dict[int, list[bytes]]:
    return {partition: [m.value() for m in messages] for partition, messages in read_topic(bootstrap, topic).items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--changes", type=int, default=100_000)
    parser.add_argument("--batch-rows", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--dispatch", default="table", choices=["table", "ts", "index-value"])
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    txns = workload(args.changes)
    tables = batches(txns, args.batch_rows)
    rows = sum(len(t) for t in txns)
    config_toml = f'[[sink.dispatchers]]\nmatcher = ["*.*"]\npartition = "{args.dispatch}"\n'
    print(f"{rows} row changes in {len(txns)} transactions, {len(tables)} batches, canal-json, "
          f"{args.partitions} partitions, {args.dispatch} dispatch")
    print("load average before: " + " ".join(f"{x:.2f}" for x in os.getloadavg()))
    best = {"row-change": (float("inf"), 0.0), "columnar": (float("inf"), 0.0)}
    with tempfile.TemporaryDirectory(prefix="sparkcdc-kafka-batch-bench-") as scratch:
        broker = KafkaBroker(Path(scratch) / "kafka").start()
        try:
            for round_number in range(args.rounds):
                topics = {}
                for name, sink_class in (("row-change", RowChangeKafkaSink), ("columnar", KafkaSink)):
                    topics[name] = f"bench-{name}-{round_number}-{uuid.uuid4().hex[:6]}"
                    uri = (f"kafka://{broker.bootstrap}/{topics[name]}?protocol=canal-json"
                           f"&enable-tidb-extension=true&partition-num={args.partitions}")
                    cpu, wall = run(sink_class, tables, uri, config_toml)
                    print(f"round {round_number + 1} {name}: {cpu:.2f} CPU s, {wall:.2f} s", flush=True)
                    best[name] = min(best[name], (cpu, wall))
                if round_number == 0:
                    by_rows, by_arrow = (topic_contents(broker.bootstrap, topics[n]) for n in ("row-change", "columnar"))
                    if by_rows != by_arrow:
                        print("the two paths produced different messages", file=sys.stderr)
                        return 1
                    print(f"both topics hold the same {sum(map(len, by_rows.values())):,} messages")
            if args.profile:
                uri = f"kafka://{broker.bootstrap}/bench-profiled?protocol=canal-json&enable-tidb-extension=true"
                run(KafkaSink, tables, uri, config_toml, profile=True)
        finally:
            broker.stop()
    print_best(best, rows, args.rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
