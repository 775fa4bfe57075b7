"""The Kafka sink (the sink contract of sink/contract.py).

- `write_rows`: rows of one table (whole transactions, commit order) are routed to a topic and
  partitions by the dispatcher rules; each partition's rows keep their order and are encoded
  (batched for the open protocol) and produced.
- `write_arrow` (canal-json): the same messages from rows given as Arrow columns, encoded
  natively without a RowChange per row (pipeline.batch_sink's columnar path); index-value and
  columns dispatch read only the hashed columns' values.
- `write_ddl`: after the data before it is delivered; canal-json sends DDL to partition 0,
  other protocols to every partition of the table's topic, then waits for delivery.
- `flush`: waits until every message is acknowledged (acks per required-acks, idempotent
  producer with acks=all) and raises on any delivery error, so a checkpoint never passes
  undelivered data.
- `write_checkpoint`: resolved/watermark events to every partition of every topic used,
  after the data they cover is delivered.
Delivery is at-least-once: a batch replayed after a crash is produced again.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from typing import TYPE_CHECKING, Callable, Optional, Sequence

from sparkcdc.config.replica import ReplicaConfig
from sparkcdc.model.events import DDLEvent, RowChange, TableInfo
from sparkcdc.errors import ErrKafkaSendMessage, ErrKafkaTopic, ErrMessageTooLarge
from sparkcdc.sink.codec import encodes_arrow, make_message_encoder
from sparkcdc.sink.codec.encoder import Message
from sparkcdc.sink.contract import Sink
from sparkcdc.sink.kafka.config import DEFAULT_PARTITION_NUM, KafkaSinkConfig, parse_kafka_sink_uri
from sparkcdc.sink.kafka.dispatcher import EventRouter, is_changefeed_topic, topic_pattern

if TYPE_CHECKING:  # pyarrow loads with the first write_arrow
    import pyarrow as pa

log = logging.getLogger(__name__)

# Messages per produce_batch call of the columnar path (KafkaSink._send_values).
PRODUCE_BATCH_MESSAGES = 1000


class KafkaSink(Sink):
    def __init__(self, sink_uri: str | KafkaSinkConfig, config: ReplicaConfig,
                 clock: Optional[Callable[[], float]] = None, producer=None, admin=None):
        """`sink_uri`: the parsed URI (sink.registry's SinkSpec.settings), or the URI to parse with
        the changefeed `config`."""
        from confluent_kafka import Producer
        from confluent_kafka.admin import AdminClient

        self.config: KafkaSinkConfig = (
            sink_uri if isinstance(sink_uri, KafkaSinkConfig) else parse_kafka_sink_uri(sink_uri, config))
        self._rules = config.sink.dispatchers
        self._router = EventRouter(self.config.topic, self._rules, config.case_sensitive)
        self._encoder = make_message_encoder(self.config.protocol, self.config.sink, clock,
                                             self.config.schema_registry, self.config.max_message_bytes)
        self._producer = producer if producer is not None else Producer(self.config.producer_conf())
        self._admin = admin if admin is not None else AdminClient(self.config.admin_conf())
        self._partitions: dict[str, int] = {}
        self._errors: list[str] = []
        self._lock = threading.Lock()
        self.sent_messages = 0
        self.sent_bytes = 0
        self._stalled = False
        self._partition_count(self.config.topic)  # fail at start if the default topic is unusable
        self._adopt_existing_topics()

    # -- topics ----------------------------------------------------------------------------
    def _partition_count(self, topic: str) -> int:
        known = self._partitions.get(topic)
        if known is not None:
            return known
        metadata = self._list_topic(topic)
        info = metadata.topics.get(topic)
        exists = info is not None and info.error is None and info.partitions
        if not exists:
            if not self.config.auto_create_topic:
                raise ErrKafkaTopic(f"topic {topic!r} does not exist and auto-create-topic is false; create it")
            self._create_topic(topic)
            count = self.config.partition_num or DEFAULT_PARTITION_NUM
        else:
            count = len(info.partitions)
            wanted = self.config.partition_num
            if wanted > count:
                raise ErrKafkaTopic(f"partition-num={wanted} but topic {topic!r} has only {count} partitions; "
                                    "lower partition-num or add partitions to the topic")
            if wanted:
                count = wanted  # TiCDC uses the first partition-num partitions
        self._partitions[topic] = count
        return count

    def _adopt_existing_topics(self) -> None:
        """Topics this changefeed's expressions name that already exist get checkpoints from the
        start, like TiCDC's checkpoint to every table's topic: after a restart a table with no new
        rows still gets watermarks, so a consumer's resolved ts over all topics keeps moving."""
        from confluent_kafka import KafkaException

        pattern = re.compile("|".join(f"(?:{topic_pattern(rule.topic)})" for rule in self._rules if rule.topic))
        if not pattern.pattern:
            return
        try:
            metadata = self._admin.list_topics(timeout=self.config.read_timeout)
        except KafkaException as exc:
            raise ErrKafkaSendMessage(f"cannot list topics on {','.join(self.config.brokers)}: {exc}") from None
        for topic in sorted(metadata.topics):
            if is_changefeed_topic(pattern, topic):
                self._partition_count(topic)

    def _list_topic(self, topic: str):
        from confluent_kafka import KafkaException

        try:
            return self._admin.list_topics(topic=topic, timeout=self.config.read_timeout)
        except KafkaException as exc:  # brokers down or unreachable: the changefeed retries
            raise ErrKafkaSendMessage(f"cannot read metadata of topic {topic!r} from {','.join(self.config.brokers)} "
                                      f"in read-timeout={self.config.read_timeout:g}s: {exc}") from None

    def _create_topic(self, topic: str) -> None:
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import NewTopic

        partitions = self.config.partition_num or DEFAULT_PARTITION_NUM
        new = NewTopic(topic, num_partitions=partitions, replication_factor=self.config.replication_factor,
                       config={"max.message.bytes": str(self.config.max_message_bytes)})
        futures = self._admin.create_topics([new], request_timeout=self.config.write_timeout)
        try:
            futures[topic].result(timeout=self.config.write_timeout + 5)
        except KafkaException as exc:
            if "TOPIC_ALREADY_EXISTS" not in str(exc):
                raise ErrKafkaTopic(f"cannot create topic {topic!r}: {exc}") from None
        log.info("created topic %s with %d partitions", topic, partitions)
        # Wait until the new topic's leaders are known, or the first produce stalls.
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            info = self._admin.list_topics(topic=topic, timeout=5).topics.get(topic)
            if info and info.error is None and len(info.partitions) >= partitions and all(
                    p.leader >= 0 for p in info.partitions.values()):
                return
            time.sleep(0.2)

    # -- producing --------------------------------------------------------------------------
    def _on_delivery(self, error, message) -> None:
        if error is not None:
            with self._lock:
                self._errors.append(f"{message.topic()}[{message.partition()}]: {error}")

    def _produce(self, topic: str, partition: int, message: Message) -> None:
        self._send(topic, partition, message.key, message.value)

    def _send(self, topic: str, partition: int, key: Optional[bytes], value: Optional[bytes]) -> None:
        size = len(value or b"") + len(key or b"")
        if size > self.config.max_message_bytes:
            raise ErrMessageTooLarge(
                f"a {size}-byte message for {topic} exceeds max-message-bytes={self.config.max_message_bytes}; "
                "raise max-message-bytes (and the topic's max.message.bytes)")
        stalled = None
        while True:
            try:
                self._producer.produce(topic, value=value, key=key, partition=partition,
                                       on_delivery=self._on_delivery)
                break
            except BufferError:  # the local queue is full
                stalled = self._wait_for_room(stalled)
        self._producer.poll(0)
        self.sent_messages += 1
        self.sent_bytes += size

    @property
    def bytes_written(self) -> int:
        return self.sent_bytes

    @property
    def marks_snapshot_rows(self) -> bool:
        return self.config.protocol == "debezium"  # op "r"; the other protocols have no snapshot marker

    def write_rows(self, table: TableInfo, rows: Sequence[RowChange]) -> None:
        if not rows:
            return
        topic = self._router.topic(table.schema, table.table)
        partitions = self._partition_count(topic)
        message = self._encoder.bootstrap(table, topic)  # Simple: the schema, to every partition
        if message is not None:
            for partition in range(partitions):
                self._produce(topic, partition, message)
        groups: dict[int, list[RowChange]] = {}
        for row in rows:
            groups.setdefault(self._router.partition(table, row, partitions), []).append(row)
        for partition, group in groups.items():
            for message in self._encoder.encode_rows(table, group, topic):
                self._produce(topic, partition, message)

    @property
    def accepts_arrow(self) -> bool:
        """Whether write_arrow can take rows: the protocol's encoder encodes Arrow columns (canal-json)."""
        return encodes_arrow(self.config.protocol)

    def write_arrow(self, table: TableInfo, commit_ts: "pa.Int64Array", ops: "pa.StringArray",
                    before: "pa.ListArray", after: "pa.ListArray") -> None:
        """write_rows for rows as Arrow columns (one table version's whole transactions in
        (commit_ts, seq) order, already netted and split): the same messages to the same
        partitions, in the same order within each partition."""
        if not len(commit_ts):
            return
        topic = self._router.topic(table.schema, table.table)
        partitions = self._partition_count(topic)
        dispatcher = self._router.dispatcher_for(table.schema, table.table)
        row_partitions = None
        if dispatcher.transaction_partition(table, 0, partitions) is None:  # by row values, as write_rows first
            keys = _image_values(before, after, dispatcher.hashed_positions(table))
            row_partitions = dispatcher.value_partitions(table, keys, len(commit_ts), partitions)
        transactions = self._encoder.encode_arrow(table, commit_ts, ops, before, after)
        groups: dict[int, list[bytes]] = {}
        if row_partitions is None:
            for ts, values in transactions:
                groups.setdefault(dispatcher.transaction_partition(table, ts, partitions), []).extend(values)
        else:
            messages = (value for _, values in transactions for value in values)
            for partition, value in zip(row_partitions, messages, strict=True):
                groups.setdefault(partition, []).append(value)
        for partition, values in groups.items():
            self._send_values(topic, partition, values)

    def _send_values(self, topic: str, partition: int, values: list[bytes]) -> None:
        """`_send` of key-less values to one partition, in slices of PRODUCE_BATCH_MESSAGES through
        `produce_batch`: one call into librdkafka per slice, ~1 CPU us a message less than a
        `produce` each (docs/benchmarks.md). A slice the local queue takes only in part goes on
        from its first refused message once the queue has room; a message taken after a refused
        one would be out of order, so that fails the batch (retryable: the changefeed replays it
        from its checkpoint, at least once as always)."""
        if not values:
            return
        if max(map(len, values)) > self.config.max_message_bytes:
            self._send(topic, partition, None, max(values, key=len))  # raises ErrMessageTooLarge
        produce_batch, on_delivery = self._producer.produce_batch, self._on_delivery
        for start in range(0, len(values), PRODUCE_BATCH_MESSAGES):
            messages = [{"value": value} for value in values[start:start + PRODUCE_BATCH_MESSAGES]]
            stalled = None
            while True:
                taken = produce_batch(topic, messages, partition=partition, on_delivery=on_delivery)
                if taken == len(messages):
                    break
                messages = self._refused_suffix(topic, partition, messages, taken)
                stalled = self._wait_for_room(stalled)
            self._producer.poll(0)
        self.sent_messages += len(values)
        self.sent_bytes += sum(map(len, values))

    def _wait_for_room(self, stalled: Optional["_Stall"]) -> "_Stall":
        """Let deliveries drain the full local queue for a moment; raise when none was
        acknowledged for write-timeout since the first wait (`stalled`, None at the first)."""
        stalled = stalled or _Stall(len(self._producer), self.config.write_timeout)
        self._producer.poll(0.1)
        self._raise_if_stalled(stalled, len(self._producer))
        return stalled

    @staticmethod
    def _refused_suffix(topic: str, partition: int, messages: list[dict], taken: int) -> list[dict]:
        """The messages of a `produce_batch` call the local queue refused, to offer again: its
        last ones from the first refused, when they all were refused for a full queue."""
        from confluent_kafka import KafkaError

        errors = [message.get("_error") for message in messages]
        for error in errors:
            if error is not None and error.code() != KafkaError._QUEUE_FULL:
                raise ErrKafkaSendMessage(f"{topic}[{partition}]: {error}")
        if any(error is None for error in errors[taken:]):  # taken after a refused one: out of order
            raise ErrKafkaSendMessage(
                f"{topic}[{partition}]: the local queue took messages out of order while full; "
                "the changefeed retries from its checkpoint")
        return [{"value": message["value"]} for message in messages[taken:]]

    def write_ddl(self, ddl: DDLEvent) -> None:
        message = self._encoder.encode_ddl(ddl)
        if message is None:
            return
        topic = self._router.ddl_topic(ddl.schema, ddl.table)
        partitions = self._partition_count(topic)
        targets = range(partitions) if self._encoder.ddl_broadcast else (0,)
        for partition in targets:
            self._produce(topic, partition, message)
        self.flush()

    def write_checkpoint(self, ts: int) -> int:
        message = self._encoder.encode_checkpoint(ts)
        if message is None:
            return ts
        self.flush()  # the data a checkpoint covers is delivered before it
        for topic, partitions in list(self._partitions.items()):
            for partition in range(partitions):
                self._produce(topic, partition, message)
        self.flush()
        return ts

    def flush(self) -> None:
        """Wait for every acknowledgement; fail (a retryable error: the changefeed restarts from its
        checkpoint, as TiCDC's does on a producer error) when none arrives for write-timeout."""
        stalled = _Stall(len(self._producer), self.config.write_timeout)
        while True:
            remaining = self._producer.flush(1.0)
            self._raise_errors()
            if remaining == 0:
                return
            self._raise_if_stalled(stalled, remaining)

    def _raise_if_stalled(self, stalled: "_Stall", remaining: int) -> None:
        if stalled.update(remaining):
            self._stalled = True
            raise ErrKafkaSendMessage(
                f"no message acknowledged by {','.join(self.config.brokers)} for write-timeout="
                f"{self.config.write_timeout:g}s ({remaining} waiting); is the broker up? The changefeed retries")

    def _raise_errors(self) -> None:
        with self._lock:
            errors, self._errors = self._errors, []
        if errors:
            raise ErrKafkaSendMessage(f"{len(errors)} messages failed: " + "; ".join(errors[:5]))

    def close(self) -> None:
        try:
            if self._stalled:  # the broker did not answer for write-timeout already: do not wait again
                raise ErrKafkaSendMessage("closing a Kafka sink whose messages were not acknowledged")
            self.flush()
        except Exception:
            # Drop what is still queued: the restarted changefeed sends it again from its checkpoint,
            # and a late copy from this producer must not arrive after the new one's watermarks.
            self._producer.purge(in_queue=True, in_flight=True, blocking=False)
            raise
        finally:
            self._producer = None
            self._admin = None


def _image_values(before: "pa.ListArray", after: "pa.ListArray", positions: list[int]) -> list[list]:
    """Per position, each row's value there in its after image, or its before image for a delete."""
    import pyarrow.compute as pc

    deleted = pc.is_null(after)
    return [pc.if_else(deleted, pc.list_element(before, position), pc.list_element(after, position)).to_pylist()
            for position in positions]


class _Stall:
    """Notices when a count of waiting messages stops going down for `limit` seconds."""

    def __init__(self, waiting: int, limit: float, clock: Callable[[], float] = time.monotonic):
        self._least = waiting
        self._limit = limit
        self._clock = clock
        self._since = clock()

    def update(self, waiting: int) -> bool:
        if waiting < self._least:
            self._least = waiting
            self._since = self._clock()
        return self._clock() - self._since > self._limit
