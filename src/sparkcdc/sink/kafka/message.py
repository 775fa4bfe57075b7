"""Kafka messages and the per-protocol message encoders, chosen by protocol name.

Encoders get the rows of one (topic, partition) group in commit order and return the messages
to produce there, so a batching protocol (open protocol, `max-batch-size`) batches exactly as
TiCDC does per partition. Each protocol's wire format lives in `sparkcdc.sink.codec.<protocol>`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Callable, Optional, Protocol, Sequence

from sparkcdc.config.replica import SinkConfig
from sparkcdc.errors import ErrSinkUnknownProtocol
from sparkcdc.model.events import DDLEvent, RowChange, TableInfo
from sparkcdc.sink.kafka.large_message import CLAIM_CHECK, HANDLE_KEY_ONLY, NONE, RECORD_OVERHEAD, LargeMessageHandle

if TYPE_CHECKING:  # pyarrow loads with the first encode_arrow
    import pyarrow as pa


@dataclass(frozen=True)
class Message:
    key: Optional[bytes]
    value: Optional[bytes]  # None: a tombstone (avro delete)
    rows: int = 1


class MessageEncoder(Protocol):
    # Whether DDLs go to every partition (open, simple, ...) or only to partition 0 (canal-json).
    # An encoder may also have `bootstrap(table, topic) -> Optional[Message]`, a message the sink
    # sends to every partition before the rows (Simple's table schema).
    # An encoder may also have `encode_arrow(table, commit_ts, ops, before, after)`: the values
    # encode_rows would give (keys are None), per transaction of rows given as Arrow columns.
    ddl_broadcast: bool

    def encode_rows(self, table: TableInfo, rows: Sequence[RowChange], topic: str) -> list[Message]: ...

    def encode_ddl(self, ddl: DDLEvent) -> Optional[Message]: ...

    def encode_checkpoint(self, ts: int) -> Optional[Message]: ...


class CanalJSONMessageEncoder:
    """Canal-JSON over Kafka: one message per row, key nil, no line terminator."""

    ddl_broadcast = False

    def __init__(self, sink: SinkConfig, clock: Optional[Callable[[], float]] = None,
                 large: Optional[LargeMessageHandle] = None):
        from sparkcdc.sink.codec.canal_json import CanalJSONEncoder

        self._encoder = CanalJSONEncoder(sink, clock=clock) if clock else CanalJSONEncoder(sink)
        # encode_arrow's rows one per line: JSON escapes every newline inside a value.
        lines = replace(sink, terminator="\n")
        self._line_encoder = CanalJSONEncoder(lines, clock=clock) if clock else CanalJSONEncoder(lines)
        self._large = large or LargeMessageHandle(protocol="canal-json")

    def encode_rows(self, table: TableInfo, rows: Sequence[RowChange], topic: str) -> list[Message]:
        return [Message(None, self._encode_row(table, row)) for row in rows]

    def encode_arrow(self, table: TableInfo, commit_ts: "pa.Int64Array", ops: "pa.StringArray",
                     before: "pa.ListArray", after: "pa.ListArray") -> list[tuple[int, list[bytes]]]:
        """The values `encode_rows` gives, per transaction (commit_ts, values in row order) of one
        table's rows as columns (codec.Encoder.encode_arrow). A transaction with a value over
        max-message-bytes is encoded the RowChange way, which applies large-message-handle."""
        large = self._large
        transactions = []
        first = 0
        for ts, text in self._line_encoder.encode_arrow(table, commit_ts, ops, before, after):
            values = text.split(b"\n")
            values.pop()  # what follows the last row's terminator
            if large.compression != NONE:
                values = [large.compress(value) for value in values]
            if values and large.too_large(max(map(len, values)) + RECORD_OVERHEAD):
                values = [self._encode_row(table, row) for row in _transaction_rows(
                    table, (commit_ts, ops, before, after), first, len(values))]
            transactions.append((ts, values))
            first += len(values)
        if first != len(commit_ts):
            raise AssertionError(f"canal-json encode_arrow gave {first} messages for {len(commit_ts)} rows "
                                 f"of {table.schema}.{table.table}")
        return transactions

    def _encode_row(self, table: TableInfo, row: RowChange) -> bytes:
        large = self._large
        value = large.compress(self._encoder.encode_row(table, row).encode())
        if not large.too_large(len(value) + RECORD_OVERHEAD):
            return value
        if large.option == HANDLE_KEY_ONLY:
            reduced = large.compress(self._encoder.encode_row(table, row, HANDLE_KEY_ONLY).encode())
            after = "keeping only the handle key"
        elif large.option == CLAIM_CHECK:
            assert large.claim_check is not None
            location = large.claim_check.write(None, value)
            reduced = large.compress(self._encoder.encode_row(table, row, location).encode())
            after = "moving the row to claim-check storage"
        else:
            raise large.refuse(len(value) + RECORD_OVERHEAD, table.schema, table.table)
        if large.too_large(len(reduced) + RECORD_OVERHEAD):
            raise large.refuse(len(reduced) + RECORD_OVERHEAD, table.schema, table.table, after)
        return reduced

    def encode_ddl(self, ddl: DDLEvent) -> Optional[Message]:
        value = self._encoder.encode_ddl(ddl)
        return Message(None, self._large.compress(value)) if value is not None else None

    def encode_checkpoint(self, ts: int) -> Optional[Message]:
        value = self._encoder.encode_watermark(ts)
        return Message(None, self._large.compress(value)) if value is not None else None


def _transaction_rows(table: TableInfo, columns: tuple, first: int, count: int) -> list[RowChange]:
    """Rows first .. first + count of encode_arrow's columns (one transaction) as RowChanges."""
    from sparkcdc.sink.codec.arrow_input import arrow_rows, arrow_transactions

    rows = arrow_rows(table, *(column.slice(first, count) for column in columns))
    return [row for _, changes in arrow_transactions(table, rows) for row in changes]


def _canal_json(sink: SinkConfig, clock, registry, large) -> MessageEncoder:
    return CanalJSONMessageEncoder(sink, clock, large)


def _open_protocol(sink: SinkConfig, clock, registry, large) -> MessageEncoder:
    from sparkcdc.sink.codec.open import OpenProtocolEncoder

    return OpenProtocolEncoder(sink, large)


def _debezium(sink: SinkConfig, clock, registry, large) -> MessageEncoder:
    from sparkcdc.sink.codec.debezium import DebeziumEncoder

    return DebeziumEncoder(sink, clock) if clock else DebeziumEncoder(sink)


def _avro(sink: SinkConfig, clock, registry, large) -> MessageEncoder:
    from sparkcdc.sink.codec.avro import make_avro_encoder

    return make_avro_encoder(sink, registry)


def _simple(sink: SinkConfig, clock, registry, large) -> MessageEncoder:
    from sparkcdc.sink.codec.simple import SimpleEncoder

    return SimpleEncoder(sink, clock) if clock else SimpleEncoder(sink)


_MESSAGE_ENCODERS = {
    "canal-json": _canal_json,
    "open-protocol": _open_protocol,
    "debezium": _debezium,
    "avro": _avro,
    "simple": _simple,
}


def make_message_encoder(protocol: str, sink: SinkConfig, clock: Optional[Callable[[], float]] = None,
                         schema_registry: str = "", max_message_bytes: int = 10485760) -> MessageEncoder:
    """The encoder for `protocol`; canal-json and open-protocol handle rows over
    `max_message_bytes` as `[sink.kafka-config.large-message-handle]` says."""
    factory = _MESSAGE_ENCODERS.get(protocol)
    if factory is None:
        raise ErrSinkUnknownProtocol(
            f"protocol {protocol!r} is not implemented for Kafka yet; use one of: {', '.join(_MESSAGE_ENCODERS)}")
    large = LargeMessageHandle.from_config(sink.kafka_config.large_message_handle, max_message_bytes, protocol)
    return factory(sink, clock, schema_registry, large)
