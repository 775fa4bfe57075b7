"""The Kafka sink's columnar path (Arrow rows through canal-json's encode_arrow, `write_arrow`)
sends exactly the messages the RowChange path (`write_rows`) sends: same topic, partition, key
and value, in the same order within each partition, whatever the dispatcher (table, ts, or by
row values: index-value, columns), large-message handling and compression."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from sparkcdc.config.replica import parse_replica_config
from sparkcdc.errors import ErrKafkaSendMessage, ErrMessageTooLarge
from sparkcdc.filter.change_filters import ChangeFilters
from sparkcdc.model.events import ColumnInfo, RowChange, TableInfo
from sparkcdc.model.tso import compose
from sparkcdc.pipeline.batch_sink import write_batch
from sparkcdc.schema.rules import DDLPolicy
from sparkcdc.sink.codec.large_message import decompress
from sparkcdc.sink.kafka.sink import KafkaSink
from sparkcdc.upstream.native_decode import FORCE_PURE_ENCODER_ENV

from test_columnar_batch_write import batch, dele, ins, transactions_in_batches, ts, upd

NOW = time.mktime((2024, 3, 1, 12, 0, 0, 0, 0, -1))
VERSION = compose(1_700_000_000_000)
PK = TableInfo("db", "pk", 1, (
    ColumnInfo("id", "int", nullable=False, is_primary_key=True),
    ColumnInfo("code", "varchar", charset="utf8mb4", length=8, is_unique_key=True),
    ColumnInfo("v", "text", charset="utf8mb4"),
    ColumnInfo("e", "enum", elements=("a", "b")),
    ColumnInfo("u", "bigint", unsigned=True),
), VERSION, handle_key=("id",))
NO_KEY = TableInfo("db", "nokey", 2, (
    ColumnInfo("x", "int"),
    ColumnInfo("v", "varchar", charset="utf8mb4", length=800),
), VERSION)
TABLES = {t.table: t for t in (PK, NO_KEY)}


class FakeIndex:
    def ddls_between(self, low, high):
        return []

    def table_infos_at(self, names, at):
        return [TABLES[table] for _, table in names]


@dataclass
class _Partition:
    leader: int = 1


@dataclass
class _Topic:
    partitions: dict
    error: object = None


@dataclass
class _Metadata:
    topics: dict = field(default_factory=dict)


class FakeAdmin:
    """Every topic exists with `partitions` partitions."""

    def __init__(self, partitions: int):
        self.partitions = partitions

    def list_topics(self, topic=None, timeout=None):
        if topic is None:
            return _Metadata()
        return _Metadata({topic: _Topic({i: _Partition() for i in range(self.partitions)})})


class FakeProducer:
    """What the sink produces, acknowledged at once."""

    def __init__(self):
        self.sent: list[tuple[str, int, bytes | None, bytes | None]] = []

    def produce(self, topic, value=None, key=None, partition=-1, on_delivery=None):
        self.sent.append((topic, partition, key, value))

    def produce_batch(self, topic, messages, partition=-1, on_delivery=None):
        for message in messages:
            self.produce(topic, message.get("value"), message.get("key"), partition, on_delivery)
        return len(messages)

    def poll(self, timeout=0):
        return 0

    def flush(self, timeout=None):
        return 0

    def __len__(self):
        return 0

    def purge(self, **kwargs):
        pass


class RowChangeKafkaSink(KafkaSink):
    """The Kafka sink without its columnar entry: every row takes write_rows."""

    accepts_arrow = False


class CountingKafkaSink(KafkaSink):
    arrow_rows = 0

    def write_arrow(self, table, commit_ts, ops, before, after):
        self.arrow_rows += len(commit_ts)
        super().write_arrow(table, commit_ts, ops, before, after)


_UUID = re.compile(rb"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def per_partition(sent, compression: str) -> dict[tuple[str, int], list[tuple]]:
    """Messages per (topic, partition) in order; values decompressed, claim-check names masked."""
    out: dict[tuple[str, int], list[tuple]] = {}
    for topic, partition, key, value in sent:
        if value is not None:
            value = _UUID.sub(b"UUID", decompress(compression, value))
        out.setdefault((topic, partition), []).append((key, value))
    return out


def write_both(batches: list[pa.Table], uri_query: str = "", config_toml: str = "", partitions: int = 3,
               split_updates: bool = False, compression: str = "none"):
    """Both paths' messages per partition (or the error both raised) and the columnar sink."""
    outputs = []
    for kind in (RowChangeKafkaSink, CountingKafkaSink):
        config = parse_replica_config(config_toml)
        uri = f"kafka://127.0.0.1:9/t?protocol=canal-json{uri_query}"
        producer = FakeProducer()
        sink = kind(uri, config, clock=lambda: NOW, producer=producer, admin=FakeAdmin(partitions))
        filters = ChangeFilters(config)
        try:
            for table in batches:
                write_batch(table, FakeIndex(), sink, lambda s, t: True, lambda ts: None,
                            split_updates, filters, DDLPolicy(force_replicate=True))
        except ErrMessageTooLarge as exc:
            # With several rows over the limit, the row path names the first of the first partition
            # it encodes, the columnar path the first in commit order: the same refusal, maybe not
            # the same row's size (the messages themselves are compared when none is refused).
            outputs.append((("refused", re.sub(r"^(\S+) a \d+-byte", r"\1 a N-byte", str(exc))), sink))
            continue
        outputs.append((per_partition(producer.sent, compression), sink))
    (by_rows, _), (by_arrow, arrow_sink) = outputs
    assert by_arrow == by_rows
    return by_arrow, arrow_sink


def row_messages(sent) -> int:
    return sum(b"TIDB_WATERMARK" not in value for messages in sent.values() for _, value in messages)


CHANGES = [
    ins(1, "pk", ("1", "a", "line\nbreak", "b", "18446744073709551615"), 0),
    ins(1, "pk", ("2", "b", 'quote " \\ <tag> \u2028 é', "a", None), 1),
    ins(1, "nokey", ("7", "n"), 2),
    upd(2, "pk", ("1", "a", "line\nbreak", "b", "18446744073709551615"), ("1", "a", "y", "a", "5"), 0),
    dele(3, "pk", ("2", "b", 'quote " \\ <tag> \u2028 é', "a", None), 0),
    ins(3, "nokey", ("8", None), 1),
]


@pytest.mark.parametrize("pure", [False, True], ids=["native", "python"])
def test_plain_transactions_go_columnar_with_the_same_messages(pure, monkeypatch):
    if pure:
        monkeypatch.setenv(FORCE_PURE_ENCODER_ENV, "1")
    sent, sink = write_both([batch(0, ts(3), CHANGES)], "&enable-tidb-extension=true")
    assert sink.arrow_rows == len(CHANGES)
    assert row_messages(sent) == len(CHANGES)  # one message per row: no split inside a value


def test_ts_dispatch_spreads_transactions_over_partitions():
    toml = '[[sink.dispatchers]]\nmatcher = ["db.*"]\npartition = "ts"\n'
    sent, sink = write_both([batch(0, ts(3), CHANGES)], config_toml=toml)
    assert sink.arrow_rows == len(CHANGES) and len(sent) > 1


def test_dispatch_by_row_values_goes_columnar_too():
    for toml in ('[[sink.dispatchers]]\nmatcher = ["db.*"]\npartition = "index-value"\n',
                 '[[sink.dispatchers]]\nmatcher = ["db.pk"]\npartition = "columns"\ncolumns = ["code", "E"]\n'):
        sent, sink = write_both([batch(0, ts(3), CHANGES)], config_toml=toml, partitions=4)
        assert row_messages(sent) == sink.arrow_rows == len(CHANGES) and len(sent) > 1


def test_a_row_over_max_message_bytes_is_handled_as_the_row_change_path_does(tmp_path):
    big = [ins(1, "nokey", ("1", "x" * 700), 0), ins(1, "nokey", ("2", "small"), 1), ins(2, "nokey", ("3", "s"), 0)]
    refused, _ = write_both([batch(0, ts(2), big)], "&max-message-bytes=600")
    assert refused[0] == "refused"
    toml = ('[sink.kafka-config.large-message-handle]\nlarge-message-handle-option = "claim-check"\n'
            f'claim-check-storage-uri = "file://{tmp_path}/claims"\n')
    sent, sink = write_both([batch(0, ts(2), big)], "&max-message-bytes=600&enable-tidb-extension=true", toml)
    assert sink.arrow_rows == 3
    assert b"claimCheckLocation" in next(iter(sent.values()))[0][1]


_TEXT = st.text(alphabet=st.sampled_from(['a', 'é', '\n', '\r', '"', '\\', '<', '\u2028', '\x00', '😀']), max_size=6)
_VALUE = st.one_of(st.none(), _TEXT, st.sampled_from(["x" * 700]))


@st.composite
def _change(draw, n: int, seq: int) -> RowChange:
    table = draw(st.sampled_from(sorted(TABLES)))
    if table == "pk":
        image = st.tuples(st.sampled_from(["1", "2", "3"]), st.sampled_from(["a", "b"]), _VALUE,
                          st.sampled_from([None, "a", "b"]), st.sampled_from([None, "1", "18446744073709551615"]))
    else:
        image = st.tuples(st.sampled_from([None, "1"]), _VALUE)
    op = draw(st.sampled_from(["insert", "update", "delete"]))
    before = draw(image) if op != "insert" else None
    after = draw(image) if op != "delete" else None
    return RowChange(ts(n), "db", table, op, before, after, seq)


@st.composite
def _batches(draw):
    return transactions_in_batches(draw, _change, 6)


_DISPATCHERS = ["", '[[sink.dispatchers]]\nmatcher = ["db.*"]\npartition = "ts"\n',
                '[[sink.dispatchers]]\nmatcher = ["db.pk"]\ntopic = "{schema}_{table}"\npartition = "table"\n',
                '[[sink.dispatchers]]\nmatcher = ["db.*"]\npartition = "index-value"\n',
                '[[sink.dispatchers]]\nmatcher = ["db.pk"]\npartition = "columns"\ncolumns = ["code", "v"]\n']
_QUERIES = ["", "&content-compatible=true", "&only-output-updated-columns=true"]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=_batches(), dispatcher=st.sampled_from(_DISPATCHERS), query=st.sampled_from(_QUERIES),
       large=st.sampled_from(["none", "handle-key-only", "claim-check"]),
       compression=st.sampled_from(["none", "snappy"]), partitions=st.integers(1, 4), split_updates=st.booleans(),
       delete_handle_key=st.booleans(), extension=st.booleans(), small_messages=st.booleans(), pure=st.booleans())
def test_any_batch_gives_the_same_messages_on_both_paths(tmp_path_factory, monkeypatch, batches, dispatcher, query,
                                                         large, compression, partitions, split_updates,
                                                         delete_handle_key, extension, small_messages, pure):
    monkeypatch.setenv(FORCE_PURE_ENCODER_ENV, "1" if pure else "0")
    if extension or large != "none":  # large-message handling needs the extension
        query += "&enable-tidb-extension=true"
    if small_messages:
        query += "&max-message-bytes=600"
    toml = dispatcher + (
        f'[sink]\ndelete-only-output-handle-key-columns = {str(delete_handle_key).lower()}\n'
        '[sink.kafka-config.large-message-handle]\n'
        f'large-message-handle-option = "{large}"\nlarge-message-handle-compression = "{compression}"\n')
    if large == "claim-check":
        toml += f'claim-check-storage-uri = "file://{tmp_path_factory.mktemp("claims")}"\n'
    write_both(batches, query, toml, partitions, split_updates, compression)


class FullQueueProducer(FakeProducer):
    """Refuses every other message once with BufferError, as librdkafka does with a full queue."""

    def __init__(self):
        super().__init__()
        self.attempts = 0

    def produce(self, topic, value=None, key=None, partition=-1, on_delivery=None):
        self.attempts += 1
        if self.attempts % 2 == 0:
            raise BufferError("Local: Queue full")
        super().produce(topic, value, key, partition, on_delivery)


class PartlyTakingProducer(FakeProducer):
    """produce_batch as librdkafka's with a full queue: the first `taking` messages of each call are
    queued, the others refused with _QUEUE_FULL, or (out_of_order) one of them taken after all."""

    def __init__(self, taking: int, out_of_order: bool = False):
        super().__init__()
        self.taking, self.out_of_order, self.calls = taking, out_of_order, 0

    def produce_batch(self, topic, messages, partition=-1, on_delivery=None):
        from confluent_kafka import KafkaError

        self.calls += 1
        taken = 0
        for position, message in enumerate(messages):
            if position < self.taking or (self.out_of_order and position == len(messages) - 1):
                self.produce(topic, message["value"], None, partition, on_delivery)
                taken += 1
            else:
                message["_error"] = KafkaError(KafkaError._QUEUE_FULL)
        return taken


def write_changes_through(producer, sink_class=KafkaSink) -> KafkaSink:
    """CHANGES written by write_batch to a one-partition canal-json sink producing with `producer`."""
    sink = sink_class("kafka://127.0.0.1:9/t?protocol=canal-json", parse_replica_config(""), clock=lambda: NOW,
                      producer=producer, admin=FakeAdmin(1))
    write_batch(batch(0, ts(3), CHANGES), FakeIndex(), sink, lambda s, t: True, lambda ts: None,
                ddl_policy=DDLPolicy(force_replicate=True))
    return sink


def test_a_batch_the_full_local_queue_takes_in_part_goes_on_from_the_first_refused_message():
    producer = PartlyTakingProducer(taking=2)
    sink = write_changes_through(producer)
    expected, _ = write_both([batch(0, ts(3), CHANGES)], partitions=1)
    assert per_partition(producer.sent, "none") == expected
    assert producer.calls > 1 and sink.sent_messages == len(CHANGES)


def test_a_message_the_full_queue_took_after_a_refused_one_fails_the_batch_for_a_replay():
    with pytest.raises(ErrKafkaSendMessage, match="out of order"):
        write_changes_through(PartlyTakingProducer(taking=1, out_of_order=True))


def test_a_full_local_queue_delays_but_drops_no_message_one_produce_at_a_time():
    producer = FullQueueProducer()
    sink = write_changes_through(producer, RowChangeKafkaSink)
    expected, _ = write_both([batch(0, ts(3), CHANGES)], partitions=1)
    assert per_partition(producer.sent, "none") == expected
    assert sink.sent_messages == len(CHANGES)
