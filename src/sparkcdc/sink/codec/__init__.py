"""Wire codecs, one module per protocol, chosen by name like TiCDC's `pkg/sink/codec/<protocol>`.

Adding a protocol means one module and one line in `_ENCODERS`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Optional, Protocol, Sequence

from sparkcdc.config.replica import SinkConfig
from sparkcdc.errors import ErrSinkUnknownProtocol
from sparkcdc.model.events import DDLEvent, RowChange, TableInfo

if TYPE_CHECKING:  # pyarrow loads with the first encode_arrow (sink.codec.arrow_input)
    import pyarrow as pa


class Encoder(Protocol):
    """Turns row changes of one table into the bytes of a data file (or a message stream)."""

    file_extension: str  # "json" | "csv"

    def encode_rows(self, table: TableInfo, rows: Sequence[RowChange]) -> bytes: ...

    def encode_arrow(self, table: TableInfo, commit_ts: pa.Int64Array, ops: pa.StringArray,
                     before: pa.ListArray, after: pa.ListArray) -> list[tuple[int, bytes]]:
        """One (commit_ts, encode_rows of that transaction's rows) per transaction, in order, from
        one table's rows as columns (the shape of model.change_batch.CHANGE_SCHEMA, netted and split)."""
        ...

    def encode_ddl(self, ddl: DDLEvent) -> Optional[bytes]: ...

    def encode_watermark(self, ts: int) -> Optional[bytes]: ...


def _canal_json(sink: SinkConfig, clock: Optional[Callable[[], float]]) -> Encoder:
    from sparkcdc.sink.codec.canal_json import CanalJSONEncoder

    return CanalJSONEncoder(sink, clock=clock) if clock else CanalJSONEncoder(sink)


def _csv(sink: SinkConfig, clock: Optional[Callable[[], float]]) -> Encoder:
    from sparkcdc.sink.codec.csv import CSVEncoder

    return CSVEncoder(sink)


_ENCODERS: dict[str, Callable[[SinkConfig, Optional[Callable[[], float]]], Encoder]] = {
    "canal-json": _canal_json,
    "csv": _csv,
}

SUPPORTED_PROTOCOLS = tuple(_ENCODERS)


def make_encoder(
    protocol: str, sink: SinkConfig, clock: Optional[Callable[[], float]] = None
) -> Encoder:
    """The encoder for `protocol`; `clock` (seconds, like time.time) stamps canal-json `ts`."""
    factory = _ENCODERS.get(protocol)
    if factory is None:
        raise ErrSinkUnknownProtocol(
            f"protocol {protocol!r} is not supported here; use one of: "
            + ", ".join(SUPPORTED_PROTOCOLS)
        )
    return factory(sink, clock)
