"""Rebuild MySQL from a Kafka sink's topic, following TiCDC's kafka-consumer (cmd/kafka-consumer).

Per partition of every topic read, row events are buffered and the partition's watermark (resolved/watermark
events) is tracked; the consumer's resolved ts is the minimum over all partitions. When it
advances, buffered DDLs and rows up to it are applied in commit-ts order: rows before a DDL,
then the DDL, then the rest; then the downstream is flushed. Every write is idempotent (the
MySQL sink's replay mode), because a restarted consumer reads the topic from the beginning.

Replays of a restarted changefeed (at-least-once) are dropped by the shape of the stream, never
by comparing rows: two equal rows in one transaction are two rows (a table without a key, an
initial snapshot's copy of one). Within one run of the sink, each partition gets a table's rows
of one transaction as one contiguous run (pieces of a large transaction: one run per piece, a
watermark of commit-ts - 1 between them) and watermarks that only grow. So, per partition:
- a row at or below the watermark, or a watermark below it, means the changefeed restarted
  from an earlier checkpoint and sends everything after it again: the row is dropped, and so is
  every row buffered (all above the watermark, all sent again);
- a second run of a table's transaction (not the next piece) is that transaction sent again:
  it replaces the first run.

Large messages (large-message-handle-option): a claim-check message is replaced by the full
message read from claim-check-storage-uri; a handle-key-only row gets its other columns from
upstream (`upstream_row`, see sparkcdc.upstream.row_lookup for what that means on MariaDB).

Protocols: canal-json (with enable-tidb-extension, which carries commit-ts and watermarks),
open-protocol, simple (BOOTSTRAP messages are skipped), and avro (with enable-tidb-extension and avro-enable-watermark, schemas from the
registry). An Avro delete is a tombstone without commit-ts: it takes the commit-ts of the next
event of its partition, an upper bound that keeps it before that event and after the ones
before it. Table definitions (enum/set members, keys) come from the downstream.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable, Optional, Protocol, Sequence

from sparkcdc.errors import ErrSinkUnknownProtocol, ErrSinkURIInvalid
from sparkcdc.model.events import DDLEvent, RowChange, TableInfo, Value
from sparkcdc.observability.progress import Progress
from sparkcdc.sink.codec.mysqltypes import enum_name, set_names, type_name
from sparkcdc.sink.kafka.config import KafkaSinkConfig
from sparkcdc.sink.kafka.dispatcher import is_changefeed_topic, topic_pattern
from sparkcdc.sink.codec.large_message import ClaimCheckStorage, decompress

log = logging.getLogger(__name__)

CONSUMER_PROTOCOLS = ("canal-json", "open-protocol", "avro", "simple")
UNKNOWN_TS = -1  # an Avro tombstone's commit-ts, assigned when the partition's next event arrives
_DATABASE_DDL = re.compile(r"^\s*(create|drop)\s+(database|schema)\b", re.IGNORECASE)
Row = dict[str, Value]


class Downstream(Protocol):
    def write_rows(self, table: TableInfo, rows: Sequence[RowChange]) -> None: ...
    def write_ddl(self, ddl: DDLEvent) -> None: ...
    def flush(self) -> None: ...


@dataclass(frozen=True)
class RowEvent:
    commit_ts: int
    schema: str
    table: str
    op: str
    before: Optional[tuple]  # ((column, value), ...) as sent; converted once the table is known
    after: Optional[tuple]
    convert: Callable  # (TableInfo, column name, raw value) -> canonical value
    handle_key_only: bool = False  # a large message: the other columns are read from upstream


@dataclass(frozen=True)
class DDLMessage:
    commit_ts: int
    schema: str
    table: str
    query: str


RunKey = tuple[str, str, int]  # (schema, table, commit-ts): one table's rows of one transaction


def _run_key(row: "RowEvent") -> RunKey:
    return row.schema, row.table, row.commit_ts


@dataclass
class _Partition:
    watermark: int = 0
    rows: list = field(default_factory=list)  # buffered RowEvents, in arrival order
    # Runs of buffered rows, each True once the watermark just below it came after it (the next
    # run of the transaction is its next piece, not a replay).
    runs: dict[RunKey, bool] = field(default_factory=dict)
    run: Optional[RunKey] = None  # the run the last row continued; None after a watermark
    resending: bool = False  # the changefeed resends what the watermark covers (until it passes it)
    tombstones: list = field(default_factory=list)  # deletes waiting for a commit-ts

    def buffer(self, row: "RowEvent") -> None:
        key = _run_key(row)
        if self.run != key:
            if key in self.runs and not self.runs[key]:
                # The transaction's rows again, not its next piece: a restarted changefeed sends them all.
                self.rows = [buffered for buffered in self.rows if _run_key(buffered) != key]
            self.runs[key] = False
            self.run = key
        self.rows.append(row)

    def restarted(self) -> None:
        """The changefeed sends everything after an earlier checkpoint again: forget the rows
        buffered above the watermark (those below it are whole; their copies are dropped). Once
        per restart: until its watermark passes this one, its rows (a batch holds several tables'
        rows, so their commit-ts go up and down) above the watermark are new."""
        if self.resending:
            return
        self.resending = True
        resent = [row for row in self.rows if row.commit_ts > self.watermark]
        if resent:
            log.info("kafka consumer: the changefeed restarted from an earlier checkpoint; %d buffered rows will "
                     "come again", len(resent))
            self.rows = [row for row in self.rows if row.commit_ts <= self.watermark]
        self.runs = {key: ended for key, ended in self.runs.items() if key[2] <= self.watermark}
        self.run = None

    def advance(self, watermark: int) -> None:
        if watermark < self.watermark:
            self.restarted()
            return
        if watermark > self.watermark:
            self.resending = False
        self.watermark = watermark
        self.run = None
        for key in self.runs:
            if key[2] == watermark + 1:
                self.runs[key] = True  # a large transaction's piece ended here

    def take(self, resolved: int) -> list:
        """The buffered rows at or below `resolved`, in arrival order."""
        ready = [row for row in self.rows if row.commit_ts <= resolved]
        if ready:
            self.rows = [row for row in self.rows if row.commit_ts > resolved]
            self.runs = {key: ended for key, ended in self.runs.items() if key[2] > resolved}
        return ready


def ddl_type_of(query: str, table: str) -> str:
    match = _DATABASE_DDL.match(query)
    if match and not table:
        return f"{match.group(1).lower()} database"
    return "alter table"


# -- decoding ----------------------------------------------------------------------------------
def _canal_convert(info: TableInfo, name: str, value: Value) -> Value:
    if value is None:
        return None
    column = info.column(name)
    kind = type_name(column)
    if kind == "enum":
        return enum_name(column, int(value))
    if kind == "set":
        return set_names(column, int(value))
    return value


def decode_canal_json(value: bytes, claim_check: Optional[ClaimCheckStorage] = None,
                      compression: str = "none") -> list:
    """Events of one canal-json message: RowEvent, DDLMessage or ("watermark", ts)."""
    message = json.loads(decompress(compression, value))
    extension = message.get("_tidb") or {}
    location = extension.get("claimCheckLocation")
    if location:
        return decode_canal_json(_claim_check(claim_check, location)[1], None, compression)
    only_key = bool(extension.get("onlyHandleKey"))
    kind = message.get("type")
    if kind == "TIDB_WATERMARK":
        return [("watermark", int(extension["watermarkTs"]))]
    commit_ts = extension.get("commitTs")
    if commit_ts is None:
        raise ValueError("canal-json messages need enable-tidb-extension=true for commit-ts and watermarks")
    if message.get("isDdl"):
        return [DDLMessage(commit_ts, message.get("database") or "", message.get("table") or "", message["sql"])]
    data = (message.get("data") or [None])[0]
    old = (message.get("old") or [None])[0]
    schema, table = message["database"], message["table"]
    if kind == "INSERT":
        return [RowEvent(commit_ts, schema, table, "insert", None, tuple(data.items()), _canal_convert, only_key)]
    if kind == "DELETE":
        return [RowEvent(commit_ts, schema, table, "delete", tuple(data.items()), None, _canal_convert, only_key)]
    before = dict(data)
    before.update(old or {})  # `old` may hold only the changed columns
    return [RowEvent(commit_ts, schema, table, "update", tuple(before.items()), tuple(data.items()),
                     _canal_convert, only_key)]


def _claim_check(storage: Optional[ClaimCheckStorage], location: str) -> tuple[Optional[bytes], bytes]:
    if storage is None:
        raise ErrSinkURIInvalid(
            f"a message's full row is in claim-check storage ({location}); give the consumer the changefeed's "
            "--config with [sink.kafka-config.large-message-handle] claim-check-storage-uri")
    return storage.read(location)


def _open_convert(info: TableInfo, name: str, raw) -> Value:
    from sparkcdc.sink.codec.open import canonical_value

    return canonical_value(info.column(name), raw)


def _open_columns(columns: Optional[dict]) -> Optional[tuple]:
    if columns is None:
        return None
    return tuple((name, json.dumps(column, sort_keys=True)) for name, column in columns.items())


def _open_convert_json(info: TableInfo, name: str, raw: str) -> Value:
    return _open_convert(info, name, json.loads(raw))


def decode_open(key: bytes, value: bytes, claim_check: Optional[ClaimCheckStorage] = None,
                compression: str = "none") -> list:
    from sparkcdc.sink.codec.open import TYPE_DDL, TYPE_RESOLVED, decode_message

    events: list = []
    for event in decode_message(key, value, compression):
        if event.claim_check_location:
            full_key, full_value = _claim_check(claim_check, event.claim_check_location)
            events.extend(decode_open(full_key or b"", full_value, None, compression))
        elif event.kind == TYPE_RESOLVED:
            events.append(("watermark", event.commit_ts))
        elif event.kind == TYPE_DDL:
            events.append(DDLMessage(event.commit_ts, event.schema, event.table, event.value["q"]))
        else:
            body = event.value
            only_key = event.only_handle_key
            if "d" in body:
                events.append(RowEvent(event.commit_ts, event.schema, event.table, "delete",
                                       _open_columns(body["d"]), None, _open_convert_json, only_key))
            elif "p" in body:
                events.append(RowEvent(event.commit_ts, event.schema, event.table, "update",
                                       _open_columns(body["p"]), _open_columns(body["u"]), _open_convert_json,
                                       only_key))
            else:
                events.append(RowEvent(event.commit_ts, event.schema, event.table, "insert",
                                       None, _open_columns(body["u"]), _open_convert_json, only_key))
    return events


def _simple_convert(info: TableInfo, name: str, raw) -> Value:
    from sparkcdc.sink.codec.simple import canonical_value

    return canonical_value(info.column(name), raw)


def _simple_pairs(columns: Optional[dict]) -> Optional[tuple]:
    if columns is None:
        return None
    # A timestamp is {"location","value"}: keep the (hashable) value text.
    return tuple((name, value["value"] if isinstance(value, dict) else value) for name, value in columns.items())


_SIMPLE_DML = {"INSERT": "insert", "UPDATE": "update", "DELETE": "delete"}


def decode_simple(value: bytes) -> list:
    """Events of one Simple (JSON) message: rows, DDLs and watermarks; bootstraps carry nothing we need."""
    message = json.loads(value)
    kind = message.get("type")
    commit_ts = int(message.get("commitTs") or 0)
    if kind == "WATERMARK":
        return [("watermark", commit_ts)]
    if kind == "BOOTSTRAP":
        return []
    op = _SIMPLE_DML.get(kind)
    if op is None:  # a DDL: database/table come from the table schema (after, else before)
        schema = message.get("tableSchema") or message.get("preTableSchema") or {}
        return [DDLMessage(commit_ts, schema.get("schema", ""), schema.get("table", ""), message["sql"])]
    return [RowEvent(commit_ts, message["database"], message["table"], op, _simple_pairs(message.get("old")),
                     _simple_pairs(message.get("data")), _simple_convert)]


def _avro_convert(info: TableInfo, name: str, raw) -> Value:
    from sparkcdc.sink.codec.avro import canonical_value

    return canonical_value(info.column(name), raw)


def _avro_pairs(record: dict) -> tuple:
    return tuple((name, value) for name, value in record.items() if not name.startswith("_tidb_"))


def decode_avro(decoder, key: Optional[bytes], value: Optional[bytes]) -> list:
    """Events of one Avro message; rows need enable-tidb-extension for their commit-ts."""
    kind, body = decoder.decode(key, value)
    if kind == "watermark":
        return [("watermark", body)]
    if kind == "ddl":
        return [DDLMessage(int(body["commitTs"]), body.get("schema") or "", body.get("table") or "", body["query"])]
    key_record, value_record = body
    if key_record is None and value_record is None:
        return []
    if value_record is None:  # a tombstone: the handle key of a deleted row
        schema, table = _avro_table_of(decoder, key)
        return [RowEvent(UNKNOWN_TS, schema, table, "delete", _avro_pairs(key_record), None, _avro_convert)]
    if "_tidb_commit_ts" not in value_record:
        raise ValueError("avro messages need enable-tidb-extension=true for commit-ts (and avro-enable-watermark)")
    schema, table = _avro_table_of(decoder, value)
    after = _avro_pairs(value_record)
    commit_ts = int(value_record["_tidb_commit_ts"])
    if value_record.get("_tidb_op") == "u":  # no old value in Avro: the key is unchanged (key updates are split)
        return [RowEvent(commit_ts, schema, table, "update", after, after, _avro_convert)]
    return [RowEvent(commit_ts, schema, table, "insert", None, after, _avro_convert)]


def _avro_table_of(decoder, data: bytes) -> tuple[str, str]:
    """(schema, table) from the writer schema: namespace `<changefeed ns>.<schema>`, name the table."""
    from sparkcdc.sink.codec.avro import parse_envelope

    parsed = decoder.registry.parsed_schema(parse_envelope(data)[0])
    namespace, _, table = parsed["name"].rpartition(".")
    namespace = parsed.get("namespace") or namespace
    return namespace.split(".", 1)[-1], table


def decoder_for(protocol: str, schema_registry: str = "", claim_check: Optional[ClaimCheckStorage] = None,
                compression: str = "none") -> Callable[[Optional[bytes], Optional[bytes]], list]:
    if protocol == "avro":
        from sparkcdc.sink.codec.avro import AvroDecoder, ConfluentSchemaRegistry

        if not schema_registry:
            raise ErrSinkUnknownProtocol("the avro consumer needs schema-registry=http://... in the upstream URI")
        avro = AvroDecoder(ConfluentSchemaRegistry(schema_registry))
        return lambda key, value: decode_avro(avro, key, value)
    if protocol == "canal-json":
        return lambda key, value: decode_canal_json(value, claim_check, compression) if value else []
    if protocol == "simple":
        return lambda key, value: decode_simple(value) if value else []
    if protocol == "open-protocol":
        return lambda key, value: decode_open(key, value, claim_check, compression) if key else []
    raise ErrSinkUnknownProtocol(
        f"the Kafka consumer reads {', '.join(CONSUMER_PROTOCOLS)}; {protocol!r} is not supported yet")


# -- ordering and applying ---------------------------------------------------------------------
class EventMerger:
    """Per-partition buffers and watermarks; `apply_resolved` writes what the watermarks cover."""

    def __init__(self, downstream: Downstream, table_info: Callable[[str, str], Optional[TableInfo]],
                 invalidate: Callable[[], None] = lambda: None,
                 upstream_row: Optional[Callable[[TableInfo, dict], Optional[tuple]]] = None):
        self._downstream = downstream
        self._table_info = table_info
        self._invalidate = invalidate
        self._upstream_row = upstream_row  # handle key -> current upstream row (handle-key-only messages)
        self._partitions: dict[tuple[str, int], _Partition] = {}
        self._ddls: dict[tuple[int, str], DDLMessage] = {}
        self.applied_ts = 0
        self.rows_applied = 0

    def add_partitions(self, keys: Iterable[tuple[str, int]]) -> None:
        for key in keys:
            self._partitions.setdefault(key, _Partition())

    def add(self, topic: str, partition: int, events: Iterable) -> None:
        state = self._partitions.setdefault((topic, partition), _Partition())
        for event in events:
            if isinstance(event, RowEvent) and event.commit_ts == UNKNOWN_TS:
                state.tombstones.append(event)
                continue
            if state.tombstones:
                self._settle_tombstones(state, event[1] if isinstance(event, tuple) else event.commit_ts)
            if isinstance(event, tuple):
                state.advance(event[1])
            elif isinstance(event, DDLMessage):
                if event.commit_ts > self.applied_ts:
                    self._ddls.setdefault((event.commit_ts, event.query), event)
            elif event.commit_ts <= state.watermark:
                state.restarted()  # a replay of what the watermark covered: the rest comes again too
            elif event.commit_ts <= self.applied_ts:
                continue  # applied already (a partition that joined late)
            else:
                state.buffer(event)

    def _settle_tombstones(self, state: _Partition, commit_ts: int) -> None:
        """Deletes without commit-ts take the next event's: no later than their own, and order kept."""
        tombstones, state.tombstones = state.tombstones, []
        if commit_ts <= state.watermark:
            return  # replays of deletes already covered
        for event in tombstones:
            state.buffer(RowEvent(commit_ts, event.schema, event.table, event.op, event.before, event.after,
                                  event.convert))

    @property
    def resolved_ts(self) -> int:
        if not self._partitions:
            return 0
        return min(p.watermark for p in self._partitions.values())

    def apply_resolved(self) -> int:
        resolved = self.resolved_ts
        if resolved <= self.applied_ts:
            return self.applied_ts
        ready: list[RowEvent] = []
        for state in self._partitions.values():
            ready.extend(state.take(resolved))
        ready.sort(key=lambda r: r.commit_ts)  # stable: per-partition order within a commit-ts
        ddls = sorted((d for d in self._ddls.values() if d.commit_ts <= resolved), key=lambda d: d.commit_ts)
        position = 0
        for ddl in ddls:
            end = position
            while end < len(ready) and ready[end].commit_ts < ddl.commit_ts:
                end += 1
            self._write_rows(ready[position:end])
            position = end
            self._downstream.flush()
            self._downstream.write_ddl(DDLEvent(ddl.commit_ts, ddl.schema, ddl.table, ddl.query,
                                                ddl_type_of(ddl.query, ddl.table)))
            self._invalidate()
            del self._ddls[(ddl.commit_ts, ddl.query)]
        self._write_rows(ready[position:])
        self._downstream.flush()
        self.applied_ts = resolved
        return resolved

    def _write_rows(self, rows: Sequence[RowEvent]) -> None:
        by_table: dict[tuple[str, str], list[RowChange]] = {}
        infos: dict[tuple[str, str], TableInfo] = {}
        for row in rows:
            key = (row.schema, row.table)
            info = infos.get(key)
            if info is None:
                info = self._table_info(row.schema, row.table)
                if info is None:
                    raise RuntimeError(f"table {row.schema}.{row.table} does not exist downstream")
                infos[key] = info
            before, after = self._image(info, row, row.before), self._image(info, row, row.after)
            if row.handle_key_only and after is not None:
                after = self._read_upstream(info, after)
                if after is None:
                    continue  # deleted upstream since: its delete follows
            group = by_table.setdefault(key, [])
            seq = group[-1].seq + 1 if group and group[-1].commit_ts == row.commit_ts else 0
            group.append(RowChange(row.commit_ts, row.schema, row.table, row.op, before=before, after=after, seq=seq))
        for key, changes in by_table.items():
            self._downstream.write_rows(infos[key], changes)
            self.rows_applied += len(changes)

    def _read_upstream(self, info: TableInfo, key_image: tuple) -> Optional[tuple]:
        """The full row of a handle-key-only message, as upstream has it now (see row_lookup)."""
        if self._upstream_row is None:
            raise ErrSinkURIInvalid(
                f"a message of {info.schema}.{info.table} carries only the handle key (large-message-handle-option="
                "handle-key-only); give the consumer --upstream-mysql-uri to read the rest of the row")
        key = {name: key_image[info.column_names.index(name)] for name in info.handle_key}
        return self._upstream_row(info, key)

    @staticmethod
    def _image(info: TableInfo, row: RowEvent, pairs: Optional[tuple]) -> Optional[tuple]:
        if pairs is None:
            return None
        sent = dict(pairs)
        return tuple(row.convert(info, name, sent[name]) if sent.get(name) is not None else None
                     for name in info.column_names)


def topics_to_read(config: KafkaSinkConfig, topics: Sequence[str] = (), topic_regex: str = "") -> re.Pattern:
    """The topics a changefeed writes: the default topic and every `[[sink.dispatchers]]` topic
    expression (`{schema}_{table}` becomes a pattern), or exactly `topics` and/or `topic_regex`."""
    if topics or topic_regex:
        patterns = [re.escape(topic) for topic in topics] + ([topic_regex] if topic_regex else [])
    else:
        patterns = [re.escape(config.topic)] + [topic_pattern(rule.topic) for rule in config.sink.dispatchers
                                                if rule.topic]
    try:
        return re.compile("|".join(f"(?:{p})" for p in patterns))
    except re.error as exc:
        raise ErrSinkURIInvalid(f"topic regex {topic_regex!r} is not a valid regular expression: {exc}") from None


class KafkaConsumer:
    """Reads every partition of the changefeed's topics from the beginning and applies them downstream.

    Topics may appear while it runs (a topic per table is created with the table's first event),
    so the topic list is refreshed after each batch is read and before it is applied: a topic
    holding rows below a watermark already read was created before that watermark was sent, so
    its partitions join (at watermark 0, holding the resolved ts back) before anything is applied.
    """

    def __init__(self, config: KafkaSinkConfig, downstream: Downstream,
                 table_info: Callable[[str, str], Optional[TableInfo]],
                 invalidate: Callable[[], None] = lambda: None, group_id: str = "",
                 topics: Sequence[str] = (), topic_regex: str = "",
                 upstream_row: Optional[Callable[[TableInfo, dict], Optional[tuple]]] = None):
        from confluent_kafka import Consumer

        self.config = config
        self._topics = topics_to_read(config, topics, topic_regex)
        handle = config.sink.kafka_config.large_message_handle
        claim_check = (ClaimCheckStorage(handle.claim_check_storage_uri, handle.claim_check_raw_value)
                       if handle.claim_check_storage_uri else None)
        self._decode = decoder_for(config.protocol, config.schema_registry, claim_check,
                                   handle.large_message_handle_compression or "none")
        conf = config.admin_conf()
        conf.update({
            "group.id": group_id or f"sparkcdc-consumer-{config.topic}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "fetch.message.max.bytes": max(config.max_message_bytes, 1048576),
        })
        self._consumer = Consumer(conf)
        self._merger = EventMerger(downstream, table_info, invalidate, upstream_row)
        self._assigned: set[tuple[str, int]] = set()

    @property
    def checkpoint_ts(self) -> int:
        return self._merger.applied_ts

    @property
    def rows_applied(self) -> int:
        return self._merger.rows_applied

    @property
    def topics(self) -> list[str]:
        return sorted({topic for topic, _ in self._assigned})

    def _refresh_topics(self) -> bool:
        """Start reading (from the beginning) every partition of a matching topic not read yet;
        False if the broker cannot list topics now (then nothing may be applied)."""
        from confluent_kafka import OFFSET_BEGINNING, KafkaException, TopicPartition

        try:
            metadata = self._consumer.list_topics(timeout=10)
        except KafkaException as exc:
            log.warning("kafka consumer: cannot list topics, will retry: %s", exc)
            return False
        new = sorted((name, partition) for name, topic in metadata.topics.items()
                     if topic.error is None and is_changefeed_topic(self._topics, name)
                     for partition in topic.partitions if (name, partition) not in self._assigned)
        if not new:
            return True
        self._consumer.incremental_assign([TopicPartition(name, p, OFFSET_BEGINNING) for name, p in new])
        self._merger.add_partitions(new)
        self._assigned.update(new)
        log.info("kafka consumer: reading %s", ", ".join(f"{name}[{p}]" for name, p in new))
        return True

    def poll_once(self, timeout: float = 1.0, max_messages: int = 5000) -> int:
        """Read what is available, apply what the watermarks cover; return the consumer ts."""
        if not self._assigned:
            self._refresh_topics()
            if not self._assigned:
                time.sleep(timeout)
                return self.checkpoint_ts
        for message in self._consumer.consume(max_messages, timeout):
            if message.error() is not None:
                log.warning("kafka consumer: %s", message.error())
                continue
            self._merger.add(message.topic(), message.partition(), self._decode(message.key(), message.value()))
        if not self._refresh_topics():
            return self.checkpoint_ts
        return self._merger.apply_resolved()

    def run(self, stop: threading.Event, until_ts: Optional[int] = None, progress: Optional[Progress] = None) -> int:
        """Poll until stopped (or `until_ts` is applied); `progress` is advanced by the rows applied."""
        counted = self.rows_applied
        while not stop.is_set():
            reached = self.poll_once()
            if progress is not None and self.rows_applied != counted:
                progress.advance(self.rows_applied - counted)
                counted = self.rows_applied
            if until_ts is not None and reached >= until_ts:
                break
        return self.checkpoint_ts

    def close(self) -> None:
        self._consumer.close()
