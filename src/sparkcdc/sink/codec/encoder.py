"""The encoder contracts every protocol implements: rows of one table in, bytes out.

Two shapes, as TiCDC's TxnEventEncoder (cloud storage) and RowEventEncoder (MQ): a FileEncoder
turns a transaction's rows into the bytes of a data file (the storage sink), a MessageEncoder
turns rows into the messages of one topic partition (the Kafka sink). Which protocol has which,
and which of them also encode rows given as Arrow columns (`encode_arrow`, the batch writer's
columnar path), is listed in one registry (sparkcdc.sink.codec.PROTOCOLS).

Codecs are plain Python: they import no sink, and a sink chooses its encoder by protocol name.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional, Sequence

from sparkcdc.model.events import DDLEvent, RowChange, TableInfo

if TYPE_CHECKING:  # pyarrow loads with the first encode_arrow (sink.codec.arrow_input)
    import pyarrow as pa


@dataclass(frozen=True)
class Message:
    """One message of a message protocol (TiCDC's common.Message)."""

    key: Optional[bytes]
    value: Optional[bytes]  # None: a tombstone (avro delete)
    rows: int = 1


class FileEncoder(ABC):
    """Rows of one table into the bytes of a data file; DDLs and watermarks where the protocol has them."""

    file_extension: str  # "json" | "csv"

    @abstractmethod
    def encode_rows(self, table: TableInfo, rows: Sequence[RowChange]) -> bytes: ...

    def encode_arrow(self, table: TableInfo, commit_ts: "pa.Int64Array", ops: "pa.StringArray",
                     before: "pa.ListArray", after: "pa.ListArray") -> list[tuple[int, bytes]]:
        """One (commit_ts, encode_rows of that transaction's rows) per transaction, in order, from
        one table's rows as columns (model.change_batch.CHANGE_SCHEMA's, netted and split). Only
        for a protocol the registry lists with `arrow`."""
        raise NotImplementedError(f"{type(self).__name__} does not encode Arrow columns")

    def header(self, table: TableInfo) -> bytes:
        """What starts each data file of the table (CSV's column names); nothing by default."""
        return b""

    @abstractmethod
    def encode_ddl(self, ddl: DDLEvent) -> Optional[bytes]: ...

    @abstractmethod
    def encode_watermark(self, ts: int) -> Optional[bytes]: ...


class MessageEncoder(ABC):
    """Rows of one (topic, partition) group, in commit order, into the messages to produce there,
    so a batching protocol (open protocol, `max-batch-size`) batches exactly as TiCDC does per
    partition."""

    # Whether DDLs go to every partition (open, simple, ...) or only to partition 0 (canal-json).
    ddl_broadcast: bool

    @abstractmethod
    def encode_rows(self, table: TableInfo, rows: Sequence[RowChange], topic: str = "") -> list[Message]: ...

    def encode_arrow(self, table: TableInfo, commit_ts: "pa.Int64Array", ops: "pa.StringArray",
                     before: "pa.ListArray", after: "pa.ListArray") -> list[tuple[int, list[bytes]]]:
        """The values encode_rows would give (keys are None), per transaction (commit_ts, values
        in row order) of one table's rows as columns. Only for a protocol the registry lists with
        `arrow`."""
        raise NotImplementedError(f"{type(self).__name__} does not encode Arrow columns")

    def bootstrap(self, table: TableInfo, topic: str) -> Optional[Message]:
        """A message the sink sends to every partition of the topic before the table's rows
        (Simple's table schema); None by default."""
        return None

    @abstractmethod
    def encode_ddl(self, ddl: DDLEvent) -> Optional[Message]: ...

    @abstractmethod
    def encode_checkpoint(self, ts: int) -> Optional[Message]: ...
