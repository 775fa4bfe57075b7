"""librdkafka's two ways in from Python for the Kafka sink's columnar path: a `produce` call per
message against `produce_batch` of 1,000-message slices (what KafkaSink._send_values does).

    .venv/bin/python bench/kafka_produce_bench.py [--messages 200000] [--rounds 4]

Each round produces the same canal-json-sized values (~330 bytes, one sysbench row each) to one
partition of a new topic on a real broker (KRaft, scripts/setup-kafka.sh) with the sink's
producer settings (acks=all, idempotent, linger 5 ms, only errors reported), once each way, and
waits for every acknowledgement. Prints the calling thread's CPU per message (the driver's share),
the process's (librdkafka's threads included) and the wall time, then the medians and the load
average. Not a test: figures go in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from sparkcdc.sink.kafka.sink import PRODUCE_BATCH_MESSAGES  # noqa: E402
from sparkcdc.testing.kafka import KafkaBroker  # noqa: E402

PRODUCER_CONF = {"acks": "-1", "enable.idempotence": True, "linger.ms": 5, "delivery.report.only.error": True,
                 "batch.size": 1000000}


def on_delivery(error, message) -> None:
    pass


def one_at_a_time(producer: Producer, topic: str, values: list[bytes]) -> None:
    produce, poll = producer.produce, producer.poll
    for position, value in enumerate(values):
        produce(topic, value=value, partition=0, on_delivery=on_delivery)
        if position % 1000 == 999:
            poll(0)


def in_slices(producer: Producer, topic: str, values: list[bytes]) -> None:
    for start in range(0, len(values), PRODUCE_BATCH_MESSAGES):
        messages = [{"value": value} for value in values[start:start + PRODUCE_BATCH_MESSAGES]]
        if producer.produce_batch(topic, messages, partition=0, on_delivery=on_delivery) != len(messages):
            raise SystemExit("the local queue refused messages: raise queue.buffering.max.messages")
        producer.poll(0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=200000)
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    values = [b'{"id":%d,"database":"sbtest","table":"sbtest1","pkNames":["id"],"isDdl":false,"type":"UPDATE",'
              b'"es":1,"ts":2,"sql":"","data":[{"id":"%d","k":"2","c":"%s","pad":"%s"}]}'
              % (n, n, b"x" * 120, b"y" * 60) for n in range(args.messages)]
    figures: dict[str, list[tuple[float, float, float]]] = {"produce": [], "produce_batch": []}
    with tempfile.TemporaryDirectory() as scratch:
        broker = KafkaBroker(Path(scratch) / "kafka").start()
        try:
            admin = AdminClient({"bootstrap.servers": broker.bootstrap})
            for round_number in range(args.rounds):
                for name, produce in (("produce", one_at_a_time), ("produce_batch", in_slices)):
                    topic = f"bench-{name}-{round_number}-{uuid.uuid4().hex[:6]}"
                    for future in admin.create_topics([NewTopic(topic, 1, 1)]).values():
                        future.result()
                    producer = Producer({"bootstrap.servers": broker.bootstrap, **PRODUCER_CONF})
                    producer.produce(topic, value=b"warm-up", partition=0)
                    if producer.flush(60):
                        raise SystemExit(f"{topic}: the warm-up message was not acknowledged")
                    cpu, thread, wall = time.process_time(), time.thread_time(), time.monotonic()
                    produce(producer, topic, values)
                    thread = time.thread_time() - thread
                    if producer.flush(120):
                        raise SystemExit(f"{topic}: messages not acknowledged")
                    cpu, wall = time.process_time() - cpu, time.monotonic() - wall
                    per = 1e6 / len(values)
                    figures[name].append((thread * per, cpu * per, wall))
                    print(f"round {round_number + 1} {name:13s}: calling thread {thread * per:.2f} CPU us/msg, "
                          f"process {cpu * per:.2f} CPU us/msg, {wall:.2f} s", flush=True)
        finally:
            broker.stop()
    for name, rows in figures.items():
        print(f"median {name:13s}: calling thread {statistics.median(r[0] for r in rows):.2f} CPU us/msg, "
              f"process {statistics.median(r[1] for r in rows):.2f}, {statistics.median(r[2] for r in rows):.2f} s "
              f"for {len(values):,} messages")
    print("load average after: %.2f %.2f %.2f" % os.getloadavg())


if __name__ == "__main__":
    main()
