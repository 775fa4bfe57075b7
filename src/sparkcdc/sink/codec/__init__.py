"""Wire codecs, one module per protocol, chosen by name like TiCDC's `pkg/sink/codec/<protocol>`.

PROTOCOLS is the one registry: each protocol's file encoder (storage sinks), message encoder (MQ
sinks), and whether they also encode rows given as Arrow columns. Adding a protocol means one
module and one entry here; its module loads with its first encoder. The encoder contracts are in
codec/encoder.py, the large-message policy of message encoders in codec/large_message.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Optional

from sparkcdc.config.replica import SinkConfig
from sparkcdc.errors import ErrSinkUnknownProtocol

if TYPE_CHECKING:
    from sparkcdc.sink.codec.encoder import FileEncoder, MessageEncoder
    from sparkcdc.sink.codec.large_message import LargeMessageHandle

Clock = Callable[[], float]  # seconds, like time.time: stamps canal-json `ts`, simple's `buildTs`...


@dataclass(frozen=True)
class WireProtocol:
    """One protocol and what it encodes."""

    name: str
    # (sink config, clock or None) -> the encoder of data files, for storage sinks.
    file_encoder: Optional[Callable[[SinkConfig, Optional[Clock]], "FileEncoder"]] = None
    # (sink config, clock or None, schema registry URL, large-message handle) -> the encoder of
    # messages, for MQ sinks.
    message_encoder: Optional[Callable[[SinkConfig, Optional[Clock], str, "LargeMessageHandle"],
                                       "MessageEncoder"]] = None
    # Whether its encoders also take rows as Arrow columns (encode_arrow): the batch writer then
    # hands its sink the transactions it would pass unchanged as columns.
    arrow: bool = False


def _canal_json_file(sink: SinkConfig, clock: Optional[Clock]) -> "FileEncoder":
    from sparkcdc.sink.codec.canal_json import CanalJSONEncoder

    return CanalJSONEncoder(sink, clock=clock) if clock else CanalJSONEncoder(sink)


def _canal_json_message(sink: SinkConfig, clock: Optional[Clock], registry: str,
                        large: "LargeMessageHandle") -> "MessageEncoder":
    from sparkcdc.sink.codec.canal_json import CanalJSONMessageEncoder

    return CanalJSONMessageEncoder(sink, clock, large)


def _csv_file(sink: SinkConfig, clock: Optional[Clock]) -> "FileEncoder":
    from sparkcdc.sink.codec.csv import CSVEncoder

    return CSVEncoder(sink)


def _open_protocol(sink: SinkConfig, clock: Optional[Clock], registry: str,
                   large: "LargeMessageHandle") -> "MessageEncoder":
    from sparkcdc.sink.codec.open import OpenProtocolEncoder

    return OpenProtocolEncoder(sink, large)


def _debezium(sink: SinkConfig, clock: Optional[Clock], registry: str, large: "LargeMessageHandle") -> "MessageEncoder":
    from sparkcdc.sink.codec.debezium import DebeziumEncoder

    return DebeziumEncoder(sink, clock) if clock else DebeziumEncoder(sink)


def _avro(sink: SinkConfig, clock: Optional[Clock], registry: str, large: "LargeMessageHandle") -> "MessageEncoder":
    from sparkcdc.sink.codec.avro import make_avro_encoder

    return make_avro_encoder(sink, registry)


def _simple(sink: SinkConfig, clock: Optional[Clock], registry: str, large: "LargeMessageHandle") -> "MessageEncoder":
    from sparkcdc.sink.codec.simple import SimpleEncoder

    return SimpleEncoder(sink, clock) if clock else SimpleEncoder(sink)


PROTOCOLS: dict[str, WireProtocol] = {protocol.name: protocol for protocol in (
    WireProtocol("canal-json", _canal_json_file, _canal_json_message, arrow=True),
    WireProtocol("csv", _csv_file, arrow=True),
    WireProtocol("open-protocol", message_encoder=_open_protocol),
    WireProtocol("debezium", message_encoder=_debezium),
    WireProtocol("avro", message_encoder=_avro),
    WireProtocol("simple", message_encoder=_simple),
)}
FILE_PROTOCOLS = tuple(name for name, protocol in PROTOCOLS.items() if protocol.file_encoder)
MESSAGE_PROTOCOLS = tuple(name for name, protocol in PROTOCOLS.items() if protocol.message_encoder)


def encodes_arrow(protocol: str) -> bool:
    """Whether the protocol's encoders take rows as Arrow columns."""
    known = PROTOCOLS.get(protocol)
    return known is not None and known.arrow


def make_file_encoder(protocol: str, sink: SinkConfig, clock: Optional[Clock] = None) -> "FileEncoder":
    """The data-file encoder for `protocol`; `clock` (seconds, like time.time) stamps canal-json `ts`."""
    known = PROTOCOLS.get(protocol)
    if known is None or known.file_encoder is None:
        raise ErrSinkUnknownProtocol(
            f"protocol {protocol!r} is not supported here; use one of: " + ", ".join(FILE_PROTOCOLS))
    return known.file_encoder(sink, clock)


def make_message_encoder(protocol: str, sink: SinkConfig, clock: Optional[Clock] = None,
                         schema_registry: str = "", max_message_bytes: int = 10485760) -> "MessageEncoder":
    """The message encoder for `protocol`; canal-json and open-protocol handle rows over
    `max_message_bytes` as `[sink.kafka-config.large-message-handle]` says."""
    from sparkcdc.sink.codec.large_message import LargeMessageHandle

    known = PROTOCOLS.get(protocol)
    if known is None or known.message_encoder is None:
        raise ErrSinkUnknownProtocol(
            f"protocol {protocol!r} is not implemented for Kafka yet; use one of: {', '.join(MESSAGE_PROTOCOLS)}")
    large = LargeMessageHandle.from_config(sink.kafka_config.large_message_handle, max_message_bytes, protocol)
    return known.message_encoder(sink, clock, schema_registry, large)
