"""Row messages over `max-message-bytes`: TiCDC's `[sink.kafka-config.large-message-handle]`
(pkg/sink/codec/common/config.go, pkg/sink/kafka/claimcheck).

- `none`: the changefeed fails with ErrMessageTooLarge naming max-message-bytes.
- `handle-key-only`: the message keeps only the handle-key columns and says so (canal-json
  `_tidb.onlyHandleKey`, open-protocol key `ohk`); a consumer reads the rest from upstream.
- `claim-check`: the full message goes to `claim-check-storage-uri` as `<uuid>.json`
  (`{"key":<base64>,"value":<base64>}`, or the bare value with `claim-check-raw-value`), and the
  Kafka message keeps the handle key plus the file's location (`claimCheckLocation` / `ccl`).

`large-message-handle-compression` (snappy, lz4) compresses message values as TiCDC does: every
canal-json value (rows, DDLs, watermarks) and every open-protocol row and DDL value.
"""

from __future__ import annotations

import base64
import json
import uuid
from dataclasses import dataclass
from typing import Optional

from sparkcdc.config.replica import LargeMessageHandleConfig
from sparkcdc.errors import ErrMessageTooLarge, ErrStorageIO

NONE, HANDLE_KEY_ONLY, CLAIM_CHECK = "none", "handle-key-only", "claim-check"
# Kafka's per-record overhead as TiCDC counts it (common.MaxRecordOverhead).
RECORD_OVERHEAD = 5 * 5 + 10 + 1


def compress(codec: str, data: bytes) -> bytes:
    """TiCDC's pkg/compression: snappy block format, lz4 frame format, or the data as it is."""
    if codec in ("", NONE):
        return data
    import cramjam

    if codec == "snappy":
        return bytes(cramjam.snappy.compress_raw(data))
    if codec == "lz4":
        return bytes(cramjam.lz4.compress(data))
    raise ValueError(f"unknown large-message-handle-compression {codec!r}")


def decompress(codec: str, data: bytes) -> bytes:
    if codec in ("", NONE):
        return data
    import cramjam

    if codec == "snappy":
        return bytes(cramjam.snappy.decompress_raw(data))
    if codec == "lz4":
        return bytes(cramjam.lz4.decompress(data))
    raise ValueError(f"unknown large-message-handle-compression {codec!r}")


class ClaimCheckStorage:
    """Where claim-check messages are written (the sink) and read back (the consumer)."""

    def __init__(self, uri: str, raw_value: bool = False):
        from sparkcdc.config.storage_location import parse_storage_location

        location = parse_storage_location(uri)
        self._filesystem = location.filesystem()
        self._root = location.root.rstrip("/")
        self.raw_value = raw_value
        # TiCDC's FileNameWithPrefix: the storage URI without its query, then the file name.
        self.prefix = (f"file://{self._root}" if location.is_local else f"{uri.split('://', 1)[0]}://{self._root}")
        if location.is_local:
            self._filesystem.makedirs(self._root, exist_ok=True)

    def write(self, key: Optional[bytes], value: bytes) -> str:
        """Store one full message; returns its location for the Kafka message."""
        name = f"{uuid.uuid4()}.json"
        if self.raw_value:
            data = value
        else:
            data = json.dumps({"key": base64.b64encode(key).decode() if key is not None else None,
                               "value": base64.b64encode(value).decode()}, separators=(",", ":")).encode()
        try:
            self._filesystem.pipe_file(f"{self._root}/{name}", data)
        except OSError as exc:
            raise ErrStorageIO(f"cannot write claim-check message {name} to {self.prefix}: {exc}") from None
        return f"{self.prefix}/{name}"

    def read(self, location: str) -> tuple[Optional[bytes], bytes]:
        """(key, value) of a stored message; like TiCDC's consumer, only the file name of the
        location is used, under this storage's root."""
        name = location.rsplit("/", 1)[-1]
        try:
            data = self._filesystem.cat_file(f"{self._root}/{name}")
        except (OSError, FileNotFoundError) as exc:
            raise ErrStorageIO(f"cannot read claim-check message {location} from {self.prefix}: {exc}; "
                               "is claim-check-storage-uri the changefeed's?") from None
        if self.raw_value:
            return None, data
        message = json.loads(data)
        key = message.get("key")
        return (base64.b64decode(key) if key is not None else None), base64.b64decode(message["value"])


@dataclass
class LargeMessageHandle:
    """What an encoder does with a row message over max-message-bytes."""

    option: str = NONE
    max_message_bytes: int = 10485760
    claim_check: Optional[ClaimCheckStorage] = None
    protocol: str = ""
    compression: str = NONE  # large-message-handle-compression, applied to every value as TiCDC does

    @classmethod
    def from_config(cls, config: LargeMessageHandleConfig, max_message_bytes: int,
                    protocol: str) -> "LargeMessageHandle":
        storage = None
        if config.large_message_handle_option == CLAIM_CHECK:
            storage = ClaimCheckStorage(config.claim_check_storage_uri, config.claim_check_raw_value)
        return cls(config.large_message_handle_option, max_message_bytes, storage, protocol,
                   config.large_message_handle_compression or NONE)

    def compress(self, data: bytes) -> bytes:
        return compress(self.compression, data)

    def too_large(self, length: int) -> bool:
        return length > self.max_message_bytes

    def refuse(self, length: int, schema: str, table: str, after: str = "") -> ErrMessageTooLarge:
        detail = f" even after {after}" if after else ""
        return ErrMessageTooLarge(
            f"a {length}-byte {self.protocol} message for a row of {schema}.{table} exceeds "
            f"max-message-bytes={self.max_message_bytes}{detail}; raise max-message-bytes (and the topic's "
            "max.message.bytes) or set [sink.kafka-config.large-message-handle] "
            'large-message-handle-option = "handle-key-only" or "claim-check"')
