"""Rows over max-message-bytes (TiCDC's large-message-handle) for canal-json and open-protocol:
the exact messages sent, what claim-check storage holds, the consumer reading both back, and the
clear error with "none"."""

from __future__ import annotations

import base64
import json
import struct

import pytest

from sparkcdc.config.replica import parse_replica_config
from sparkcdc.consumer.kafka_consumer import RowEvent, decode_canal_json, decode_open
from sparkcdc.errors import ErrMessageTooLarge, ErrSinkUnsupported, ErrSinkURIInvalid
from sparkcdc.model.events import ColumnInfo, RowChange, TableInfo
from sparkcdc.sink.kafka.config import parse_kafka_sink_uri
from sparkcdc.sink.codec.large_message import ClaimCheckStorage
from sparkcdc.sink.codec import make_message_encoder

TABLE = TableInfo("db", "docs", 1, (
    ColumnInfo("id", "int", is_primary_key=True, nullable=False),
    ColumnInfo("body", "text"),
), 1, ("id",))
TS = 415508878783938562
BIG = "x" * 3000
ROWS = [RowChange(TS, "db", "docs", "insert", after=("1", "small")),
        RowChange(TS, "db", "docs", "insert", after=("2", BIG)),
        RowChange(TS, "db", "docs", "delete", before=("2", BIG))]


def sink_config(protocol: str, option: str, tmp_path, extra: str = ""):
    text = f'[sink.kafka-config.large-message-handle]\nlarge-message-handle-option = "{option}"\n'
    if option == "claim-check":
        text += f'claim-check-storage-uri = "file://{tmp_path}/claims"\n'
    extension = "&enable-tidb-extension=true" if protocol == "canal-json" else ""
    return parse_kafka_sink_uri(f"kafka://h:9092/t?protocol={protocol}{extension}"
                                f"&max-message-bytes=1024{extra}", parse_replica_config(text))


def encoder(config):
    return make_message_encoder(config.protocol, config.sink, lambda: 1.0, max_message_bytes=config.max_message_bytes)


def test_canal_json_handle_key_only_keeps_the_key_and_says_so(tmp_path):
    messages = encoder(sink_config("canal-json", "handle-key-only", tmp_path)).encode_rows(TABLE, ROWS, "t")
    small, big, delete = (json.loads(m.value) for m in messages)
    assert small["data"] == [{"id": "1", "body": "small"}] and small["_tidb"] == {"commitTs": TS}
    assert big["data"] == [{"id": "2"}] and big["mysqlType"] == {"id": "int"}
    assert messages[1].value.endswith(b',"_tidb":{"commitTs":%d,"onlyHandleKey":true}}' % TS)
    assert delete["data"] == [{"id": "2"}] and delete["_tidb"]["onlyHandleKey"] is True
    events = decode_canal_json(messages[1].value)
    assert events == [RowEvent(TS, "db", "docs", "insert", None, (("id", "2"),), events[0].convert, True)]


def test_canal_json_claim_check_stores_the_full_message(tmp_path):
    config = sink_config("canal-json", "claim-check", tmp_path)
    messages = encoder(config).encode_rows(TABLE, ROWS, "t")
    big = json.loads(messages[1].value)
    location = big["_tidb"]["claimCheckLocation"]
    assert location.startswith(f"file://{tmp_path}/claims/") and location.endswith(".json")
    assert big["data"] == [{"id": "2"}] and "onlyHandleKey" not in big["_tidb"]
    stored = json.loads((tmp_path / "claims" / location.rsplit("/", 1)[1]).read_bytes())
    assert stored["key"] is None
    full = json.loads(base64.b64decode(stored["value"]))
    assert full["data"] == [{"id": "2", "body": BIG}] and full["_tidb"] == {"commitTs": TS}
    storage = ClaimCheckStorage(config.sink.kafka_config.large_message_handle.claim_check_storage_uri)
    (event,) = decode_canal_json(messages[1].value, storage)
    assert dict(event.after) == {"id": "2", "body": BIG} and not event.handle_key_only
    with pytest.raises(ErrSinkURIInvalid, match="claim-check-storage-uri"):
        decode_canal_json(messages[1].value, None)


def frames(data: bytes) -> list[bytes]:
    out, position = [], 0
    while position < len(data):
        (length,) = struct.unpack_from(">Q", data, position)
        out.append(data[position + 8:position + 8 + length])
        position += 8 + length
    return out


def test_open_protocol_handle_key_only_marks_the_key_and_stays_in_the_batch(tmp_path):
    messages = encoder(sink_config("open-protocol", "handle-key-only", tmp_path)).encode_rows(TABLE, ROWS, "t")
    assert len(messages) == 1 and messages[0].rows == 3
    keys, values = frames(messages[0].key[8:]), frames(messages[0].value)
    assert keys[1] == b'{"ts":%d,"scm":"db","tbl":"docs","t":1,"ohk":true}' % TS
    assert values[1] == b'{"u":{"id":{"t":3,"h":true,"f":11,"v":2}}}'
    events = decode_open(messages[0].key, messages[0].value)
    assert [e.handle_key_only for e in events] == [False, True, True]


def test_open_protocol_claim_check_is_its_own_message(tmp_path):
    config = sink_config("open-protocol", "claim-check", tmp_path)
    messages = encoder(config).encode_rows(TABLE, ROWS, "t")
    assert [m.rows for m in messages] == [1, 1, 1]  # the batch is closed before and after a claim check
    (key,) = frames(messages[1].key[8:])
    location = json.loads(key)["ccl"]
    assert key.startswith(b'{"ts":%d,"scm":"db","tbl":"docs","t":1,"ccl":"file://' % TS)
    assert frames(messages[1].value) == [b'{"u":{"id":{"t":3,"h":true,"f":11,"v":2}}}']
    stored = json.loads((tmp_path / "claims" / location.rsplit("/", 1)[1]).read_bytes())
    stored_key = base64.b64decode(stored["key"])
    assert stored_key[:8] == struct.pack(">Q", 1)
    assert json.loads(frames(stored_key[8:])[0]) == {"ts": TS, "scm": "db", "tbl": "docs", "t": 1}
    storage = ClaimCheckStorage(config.sink.kafka_config.large_message_handle.claim_check_storage_uri)
    (event,) = decode_open(messages[1].key, messages[1].value, storage)
    body = json.loads(dict(event.after)["body"])
    assert base64.b64decode(body["v"]).decode() == BIG and not event.handle_key_only  # TEXT travels as base64


@pytest.mark.parametrize("protocol", ["canal-json", "open-protocol"])
def test_none_fails_naming_max_message_bytes(protocol, tmp_path):
    with pytest.raises(ErrMessageTooLarge, match=r"db\.docs exceeds max-message-bytes=1024; raise max-message-bytes"):
        encoder(sink_config(protocol, "none", tmp_path)).encode_rows(TABLE, ROWS, "t")


def test_still_too_large_after_reduction_is_an_error(tmp_path):
    wide_key = TableInfo("db", "k", 1, (ColumnInfo("id", "varchar", is_primary_key=True, nullable=False),), 1, ("id",))
    with pytest.raises(ErrMessageTooLarge, match="even after keeping only the handle key"):
        encoder(sink_config("canal-json", "handle-key-only", tmp_path)).encode_rows(
            wide_key, [RowChange(TS, "db", "k", "insert", after=("k" * 2000,))], "t")


def test_claim_check_needs_a_storage_uri_and_compression_needs_canal_json_or_open():
    with pytest.raises(ErrSinkURIInvalid, match="claim-check-storage-uri"):
        parse_kafka_sink_uri("kafka://h:9092/t?protocol=open-protocol", parse_replica_config(
            '[sink.kafka-config.large-message-handle]\nlarge-message-handle-option = "claim-check"\n'))
    with pytest.raises(ErrSinkUnsupported, match="large-message-handle-compression=lz4 is built for canal-json"):
        parse_kafka_sink_uri("kafka://h:9092/t?protocol=simple", parse_replica_config(
            '[sink.kafka-config.large-message-handle]\nlarge-message-handle-compression = "lz4"\n'))


@pytest.mark.parametrize("codec", ["snappy", "lz4"])
@pytest.mark.parametrize("protocol", ["canal-json", "open-protocol"])
def test_compressed_values_shrink_large_rows_and_decode_back(codec, protocol, tmp_path):
    """TiCDC compresses every value with large-message-handle-compression; a compressible large
    row then fits, and the consumer (given the same config) reads it back."""
    config = sink_config(protocol, "claim-check", tmp_path)
    config.sink.kafka_config.large_message_handle.large_message_handle_compression = codec
    storage = ClaimCheckStorage(config.sink.kafka_config.large_message_handle.claim_check_storage_uri)
    encode = encoder(config)
    messages = encode.encode_rows(TABLE, ROWS, "t")
    assert not list((tmp_path / "claims").glob("*.json"))  # 3000 x's compress far below 1024 bytes
    decode = decode_canal_json if protocol == "canal-json" else None
    events = []
    for message in messages:
        if protocol == "canal-json":
            events += decode(message.value, storage, codec)
        else:
            events += decode_open(message.key, message.value, storage, codec)
    assert [e.op for e in events] == ["insert", "insert", "delete"]
    inserted = dict(events[1].after)
    body = inserted["body"] if protocol == "canal-json" else base64.b64decode(json.loads(inserted["body"])["v"]).decode()
    assert body == BIG
    checkpoint = encode.encode_checkpoint(TS)
    if protocol == "canal-json":
        assert checkpoint.value[:1] != b"{"  # watermarks are compressed too
        assert decode_canal_json(checkpoint.value, None, codec) == [("watermark", TS)]
    else:
        assert decode_open(checkpoint.key, checkpoint.value, None, codec) == [("watermark", TS)]


def test_raw_value_claim_check_round_trips(tmp_path):
    storage = ClaimCheckStorage(f"file://{tmp_path}/raw", raw_value=True)
    location = storage.write(None, b'{"a":1}')
    assert (tmp_path / "raw" / location.rsplit("/", 1)[1]).read_bytes() == b'{"a":1}'
    assert storage.read(location) == (None, b'{"a":1}')


@pytest.mark.parametrize("protocol", ["canal-json", "open-protocol"])
def test_compressed_claim_check_round_trips(protocol, tmp_path):
    import random
    import string

    noise = "".join(random.Random(5).choices(string.ascii_letters, k=3000))  # does not compress below 1024
    config = sink_config(protocol, "claim-check", tmp_path)
    config.sink.kafka_config.large_message_handle.large_message_handle_compression = "lz4"
    storage = ClaimCheckStorage(config.sink.kafka_config.large_message_handle.claim_check_storage_uri)
    (message,) = encoder(config).encode_rows(TABLE, [RowChange(TS, "db", "docs", "insert", after=("7", noise))], "t")
    assert len(list((tmp_path / "claims").glob("*.json"))) == 1
    if protocol == "canal-json":
        (event,) = decode_canal_json(message.value, storage, "lz4")
        assert dict(event.after) == {"id": "7", "body": noise}
    else:
        (event,) = decode_open(message.key, message.value, storage, "lz4")
        assert base64.b64decode(json.loads(dict(event.after)["body"])["v"]).decode() == noise
