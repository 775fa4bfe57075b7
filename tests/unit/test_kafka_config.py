"""kafka:// URIs: TiCDC's parameters and defaults, config merging, rejections, librdkafka settings."""

import pytest

from sparkcdc.config.replica import parse_replica_config
from sparkcdc.errors import ErrSinkUnsupported, ErrSinkURIInvalid, ErrSinkUnknownProtocol
from sparkcdc.sink.registry import parse_sink_spec
from sparkcdc.sink.kafka.config import parse_kafka_sink_uri


def test_defaults():
    config = parse_kafka_sink_uri("kafka://127.0.0.1:9092,h2:9093/topic?protocol=canal-json")
    assert config.brokers == ("127.0.0.1:9092", "h2:9093")
    assert config.topic == "topic"
    assert (config.partition_num, config.replication_factor, config.max_message_bytes) == (0, 1, 10485760)
    assert (config.required_acks, config.compression, config.auto_create_topic) == (-1, "none", True)
    assert (config.kafka_version, config.max_retry, config.dial_timeout) == ("2.4.0", 5, 10.0)
    assert config.sink.kafka_config.codec_config.max_batch_size == 16
    conf = config.producer_conf()
    assert conf["acks"] == "-1" and conf["enable.idempotence"] is True


def test_uri_wins_over_kafka_config_and_secrets_are_masked():
    replica = parse_replica_config(
        "[sink.kafka-config]\npartition-num = 6\nrequired-acks = 1\n"
        "[sink.kafka-config.codec-config]\nenable-tidb-extension = true\n")
    config = parse_kafka_sink_uri(
        "kafka://u:pw@h:9092/t?protocol=open-protocol&partition-num=2&sasl-user=u&sasl-password=s3cret"
        "&sasl-mechanism=scram-sha-256&max-batch-size=4", replica)
    assert config.partition_num == 2 and config.required_acks == 1
    assert config.sink.enable_tidb_extension is True
    assert config.sink.kafka_config.codec_config.max_batch_size == 4
    assert "s3cret" not in config.uri and "s3cret" not in repr(config)
    conf = config.producer_conf()
    assert conf["enable.idempotence"] is False and conf["sasl.mechanism"] == "SCRAM-SHA-256"


@pytest.mark.parametrize("uri,error", [
    ("kafka://h:9092/t", ErrSinkUnknownProtocol),
    ("kafka://h:9092/t?protocol=csv", ErrSinkUnknownProtocol),
    ("kafka://h:9092/?protocol=canal-json", ErrSinkURIInvalid),
    ("kafka://h:9092/t?protocol=canal-json&required-acks=2", ErrSinkURIInvalid),
    ("kafka://h:9092/t?protocol=canal-json&compression=brotli", ErrSinkURIInvalid),
    ("kafka://h:9092/t?protocol=canal-json&nope=1", ErrSinkURIInvalid),
    ("kafka://h:9092/t?protocol=canal-json&auto-create-topic=maybe", ErrSinkURIInvalid),
    ("kafka://h:9092/t?protocol=avro", ErrSinkURIInvalid),  # no schema-registry
    ("kafka://h:9092/t?protocol=debezium&debezium-disable-schema=true", ErrSinkUnsupported),
    ("kafka://h/t?protocol=canal-json", ErrSinkURIInvalid),
])
def test_rejections(uri, error):
    with pytest.raises(error):
        parse_kafka_sink_uri(uri)


def test_column_selectors_are_accepted_since_the_batch_writer_applies_them():
    replica = parse_replica_config("[sink]\ncolumn-selectors = [{matcher = ['*.*'], columns = ['*']}]\n")
    parse_kafka_sink_uri("kafka://h:9092/t?protocol=canal-json", replica)


def test_sink_spec_validates_kafka_and_splits_key_updates_unless_raw():
    replica = parse_replica_config("")
    spec = parse_sink_spec("kafka://h:9092/t?protocol=canal-json", replica)
    assert spec.kind.name == "kafka" and spec.settings.topic == "t" and spec.splits_key_updates
    raw = parse_replica_config("[sink.kafka-config]\noutput-raw-change-event = true\n")
    assert not parse_sink_spec("kafka://h:9092/t?protocol=canal-json", raw).splits_key_updates
    assert not parse_sink_spec("kafka://h:9092/t?protocol=canal-json&output-raw-change-event=true",
                               replica).splits_key_updates
