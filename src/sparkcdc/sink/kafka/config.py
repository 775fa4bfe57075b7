"""Kafka sink URIs (`kafka://b1:9092,b2:9092/<default-topic>?protocol=canal-json&...`).

Parameters and defaults follow TiCDC's pkg/sink/kafka/options.go and
pkg/sink/codec/common/config.go. A parameter in the URI wins over `[sink.kafka-config]`;
everything is validated here, once, and turned into librdkafka settings in `producer_conf`.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field, replace
from typing import Optional
from urllib.parse import parse_qsl, unquote, urlsplit

from sparkcdc.config.replica import ReplicaConfig, SinkConfig, TOPIC_EXPRESSION, parse_go_duration
from sparkcdc.config.sink_uri import mask_sink_uri
from sparkcdc.errors import ErrSinkUnsupported, ErrSinkURIInvalid, ErrSinkUnknownProtocol
from sparkcdc.sink.codec import MESSAGE_PROTOCOLS

log = logging.getLogger(__name__)

KAFKA_SCHEMES = ("kafka", "kafka+ssl")
MQ_PROTOCOLS = MESSAGE_PROTOCOLS
# TiCDC's other Kafka protocols: recognised, refused with a clear error until they are built.
MQ_PROTOCOLS_NOT_YET: tuple[str, ...] = ()
DEFAULT_PARTITION_NUM = 3  # when the sink creates the topic
DEFAULT_MAX_MESSAGE_BYTES = 10485760
_COMPRESSIONS = ("none", "gzip", "snappy", "lz4", "zstd")
_SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "GSSAPI")
_TRUE = ("true", "1", "t", "yes", "on")
_FALSE = ("false", "0", "f", "no", "off")
_HARD_CODED_TOPIC = re.compile(r"^[A-Za-z0-9._\-]{1,249}$")

_INT_PARAMS = ("partition-num", "replication-factor", "max-message-bytes", "required-acks",
               "max-retry", "max-batch-size")
_BOOL_PARAMS = ("auto-create-topic", "enable-tidb-extension", "enable-tls", "insecure-skip-verify",
                "avro-enable-watermark", "only-output-updated-columns", "content-compatible",
                "debezium-disable-schema", "output-raw-change-event")
_STRING_PARAMS = ("protocol", "kafka-version", "compression", "kafka-client-id", "dial-timeout",
                  "write-timeout", "read-timeout", "sasl-user", "sasl-password", "sasl-mechanism",
                  "ca", "cert", "key", "avro-decimal-handling-mode",
                  "avro-bigint-unsigned-handling-mode", "schema-registry", "encoding-format",
                  "sasl-gssapi-auth-type", "sasl-gssapi-keytab-path", "sasl-gssapi-kerberos-config-path",
                  "sasl-gssapi-service-name", "sasl-gssapi-user", "sasl-gssapi-password",
                  "sasl-gssapi-realm", "sasl-gssapi-disable-pafxfast")
ALLOWED_PARAMS = _INT_PARAMS + _BOOL_PARAMS + _STRING_PARAMS


@dataclass(frozen=True)
class KafkaSinkConfig:
    """Where and how the Kafka sink produces. `uri` is masked; secrets are kept out of repr."""

    uri: str
    brokers: tuple[str, ...]
    topic: str  # the default topic (URI path)
    protocol: str
    partition_num: int = 0  # 0: use the topic's partitions; created topics get 3
    replication_factor: int = 1
    kafka_version: str = "2.4.0"
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    compression: str = "none"
    required_acks: int = -1
    max_retry: int = 5
    auto_create_topic: bool = True
    dial_timeout: float = 10.0
    write_timeout: float = 10.0
    read_timeout: float = 10.0
    kafka_client_id: str = ""
    sasl_user: str = ""
    sasl_password: str = field(default="", repr=False)
    sasl_mechanism: str = ""
    enable_tls: bool = False
    ca: str = ""
    cert: str = ""
    key: str = field(default="", repr=False)
    insecure_skip_verify: bool = False
    output_raw_change_event: bool = False
    schema_registry: str = ""
    # The codec options, merged into one SinkConfig the encoders read.
    sink: SinkConfig = field(default_factory=SinkConfig, repr=False)

    def producer_conf(self) -> dict:
        """librdkafka settings: acks per required-acks, idempotence where acks=all allows it."""
        conf = {
            "bootstrap.servers": ",".join(self.brokers),
            "acks": str(self.required_acks),
            # Idempotence keeps per-partition order across retries; librdkafka needs acks=all.
            "enable.idempotence": self.required_acks == -1,
            "compression.type": self.compression,
            "message.max.bytes": max(self.max_message_bytes + 1024, 1000),
            # A record batch stays within the topic's max.message.bytes (= max-message-bytes).
            "batch.size": max(min(self.max_message_bytes, 1000000), 1),
            "socket.connection.setup.timeout.ms": int(self.dial_timeout * 1000),
            "request.timeout.ms": int(self.write_timeout * 1000),
            "message.send.max.retries": self.max_retry if self.required_acks != -1 else 2147483647,
            "linger.ms": 5,
            "max.in.flight.requests.per.connection": 5 if self.required_acks == -1 else 1,
            # The sink's delivery callback only records failures: no Python call per acknowledged message.
            "delivery.report.only.error": True,
        }
        if self.kafka_client_id:
            conf["client.id"] = self.kafka_client_id
        conf.update(self._security_conf())
        return conf

    def admin_conf(self) -> dict:
        conf = {"bootstrap.servers": ",".join(self.brokers)}
        conf.update(self._security_conf())
        return conf

    def _security_conf(self) -> dict:
        conf: dict = {}
        sasl = bool(self.sasl_mechanism or self.sasl_user)
        if self.enable_tls or sasl:
            conf["security.protocol"] = ("SASL_" if sasl else "") + ("SSL" if self.enable_tls else "PLAINTEXT")
        if sasl:
            conf["sasl.mechanism"] = self.sasl_mechanism or "PLAIN"
            conf["sasl.username"] = self.sasl_user
            conf["sasl.password"] = self.sasl_password
        if self.enable_tls:
            if self.ca:
                conf["ssl.ca.location"] = self.ca
            if self.cert:
                conf["ssl.certificate.location"] = self.cert
            if self.key:
                conf["ssl.key.location"] = self.key
            if self.insecure_skip_verify:
                conf["enable.ssl.certificate.verification"] = False
        return conf


def _bool(name: str, text: str, uri: str) -> bool:
    lowered = text.lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ErrSinkURIInvalid(f"`{name}={text}` in {uri} must be true or false")


def _int(name: str, text: str, uri: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise ErrSinkURIInvalid(f"`{name}={text}` in {uri} must be an integer") from None


def _seconds(name: str, text: str, uri: str) -> float:
    try:
        return parse_go_duration(text)
    except ValueError:
        raise ErrSinkURIInvalid(f"`{name}={text}` in {uri} must be a duration such as 10s") from None


def _from_config(config: ReplicaConfig) -> dict[str, object]:
    """`[sink.kafka-config]` values that are set, keyed like URI parameters."""
    kafka = config.sink.kafka_config
    codec = kafka.codec_config
    values: dict[str, object] = {}
    for name, value, unset in (
        ("partition-num", kafka.partition_num, 0), ("replication-factor", kafka.replication_factor, 0),
        ("kafka-version", kafka.kafka_version, ""), ("max-message-bytes", kafka.max_message_bytes, 0),
        ("compression", kafka.compression, ""), ("kafka-client-id", kafka.kafka_client_id, ""),
        ("auto-create-topic", kafka.auto_create_topic, True), ("required-acks", kafka.required_acks, -1),
        ("dial-timeout", kafka.dial_timeout, ""), ("write-timeout", kafka.write_timeout, ""),
        ("read-timeout", kafka.read_timeout, ""), ("sasl-user", kafka.sasl_user, ""),
        ("sasl-password", kafka.sasl_password, ""), ("sasl-mechanism", kafka.sasl_mechanism, ""),
        ("enable-tls", kafka.enable_tls, False), ("ca", kafka.ca, ""), ("cert", kafka.cert, ""),
        ("key", kafka.key, ""), ("insecure-skip-verify", kafka.insecure_skip_verify, False),
        ("output-raw-change-event", kafka.output_raw_change_event, False),
        ("enable-tidb-extension", codec.enable_tidb_extension, False),
        ("max-batch-size", codec.max_batch_size, 16),
        ("avro-enable-watermark", codec.avro_enable_watermark, False),
        ("avro-decimal-handling-mode", codec.avro_decimal_handling_mode, "precise"),
        ("avro-bigint-unsigned-handling-mode", codec.avro_bigint_unsigned_handling_mode, "long"),
        ("encoding-format", codec.encoding_format, "json"),
        ("schema-registry", config.sink.schema_registry, ""),
        ("protocol", config.sink.protocol, ""),
    ):
        if value != unset:
            values[name] = value
    return values


def parse_kafka_sink_uri(uri: str, config: Optional[ReplicaConfig] = None) -> KafkaSinkConfig:
    """Validate a kafka:// URI with the changefeed config; raises ErrSinkURIInvalid naming the fault."""
    config = config or ReplicaConfig()
    masked = mask_sink_uri(uri)
    parts = urlsplit(uri.strip())
    scheme = parts.scheme.lower()
    if scheme not in KAFKA_SCHEMES:
        raise ErrSinkURIInvalid(f"{masked} is not a Kafka sink URI (kafka:// or kafka+ssl://)")
    hosts = parts.netloc.rpartition("@")[2]
    brokers = tuple(b for b in hosts.split(",") if b)
    if not brokers:
        raise ErrSinkURIInvalid(f"{masked} names no broker; use kafka://host:9092/topic?protocol=canal-json")
    for broker in brokers:
        host, _, port = broker.rpartition(":")
        if not host or not port.isdigit():
            raise ErrSinkURIInvalid(f"broker {broker!r} in {masked} must be host:port")
    topic = unquote(parts.path.strip("/"))
    if not topic:
        raise ErrSinkURIInvalid(f"{masked} has no topic; put the default topic in the path: kafka://host:9092/my-topic?...")
    if not _HARD_CODED_TOPIC.match(topic):
        raise ErrSinkURIInvalid(
            f"the topic {topic!r} in {masked} is not a valid Kafka topic name ([A-Za-z0-9._-], at most 249)")

    values = _from_config(config)
    seen: set[str] = set()
    for name, text in parse_qsl(parts.query, keep_blank_values=True):
        if name not in ALLOWED_PARAMS:
            raise ErrSinkURIInvalid(f"unknown parameter `{name}` in {masked}; valid: {', '.join(ALLOWED_PARAMS)}")
        if name in seen:
            raise ErrSinkURIInvalid(f"parameter `{name}` is given twice in {masked}")
        seen.add(name)
        if name in _INT_PARAMS:
            values[name] = _int(name, text, masked)
        elif name in _BOOL_PARAMS:
            values[name] = _bool(name, text, masked)
        else:
            values[name] = text
    if "protocol" in seen and config.sink.protocol and config.sink.protocol != values["protocol"]:
        log.warning("the sink URI's protocol=%s overrides the config's protocol %s",
                    values["protocol"], config.sink.protocol)

    protocol = str(values.get("protocol", ""))
    if not protocol:
        raise ErrSinkUnknownProtocol(f"{masked} needs protocol=...; one of: {', '.join(MQ_PROTOCOLS)}")
    if protocol in MQ_PROTOCOLS_NOT_YET:
        raise ErrSinkUnsupported(
            f"protocol {protocol!r} is not supported yet for Kafka; use one of: {', '.join(MQ_PROTOCOLS)}")
    if protocol not in MQ_PROTOCOLS:
        raise ErrSinkUnknownProtocol(
            f"protocol {protocol!r} in {masked} is not supported for Kafka; use one of: {', '.join(MQ_PROTOCOLS)}")

    def integer(name: str, default: int, low: int, high: int) -> int:
        value = int(values.get(name, default))  # type: ignore[arg-type]
        if not low <= value <= high:
            raise ErrSinkURIInvalid(f"`{name}` is {value} in {masked}; it must be between {low} and {high}")
        return value

    required_acks = integer("required-acks", -1, -1, 1)
    compression = str(values.get("compression", "none")) or "none"
    if compression not in _COMPRESSIONS:
        raise ErrSinkURIInvalid(f"`compression={compression}` in {masked}; allowed: {', '.join(_COMPRESSIONS)}")
    mechanism = str(values.get("sasl-mechanism", ""))
    if mechanism and mechanism.upper() not in _SASL_MECHANISMS:
        raise ErrSinkURIInvalid(f"`sasl-mechanism={mechanism}` in {masked}; allowed: {', '.join(_SASL_MECHANISMS)}")
    for name, allowed in (("avro-decimal-handling-mode", ("precise", "string")),
                          ("avro-bigint-unsigned-handling-mode", ("long", "string")),
                          ("encoding-format", ("json", "avro"))):
        if name in values and values[name] not in allowed:
            raise ErrSinkURIInvalid(f"`{name}={values[name]}` in {masked}; allowed: {', '.join(allowed)}")
    schema_registry = str(values.get("schema-registry", ""))
    if protocol == "avro":
        if not schema_registry:
            raise ErrSinkURIInvalid(f"protocol=avro needs schema-registry=http://... in {masked} or [sink]")
        for rule in config.sink.dispatchers:
            if rule.topic and not re.match(r"^[A-Za-z0-9._\-]*\{schema\}[A-Za-z0-9._\-]*\{table\}[A-Za-z0-9._\-]*$", rule.topic):
                raise ErrSinkURIInvalid(f"topic rule {rule.topic!r}: for Avro it must contain {{schema}} and {{table}}")
    enable_extension = bool(values.get("enable-tidb-extension", False))
    if enable_extension and protocol not in ("canal-json", "avro"):
        log.warning("enable-tidb-extension only applies to canal-json and avro; ignored for %s", protocol)
    large = config.sink.kafka_config.large_message_handle.large_message_handle_option
    if large != "none":
        if protocol not in ("open-protocol", "simple", "canal-json"):
            raise ErrSinkURIInvalid(f"large-message-handle-option={large} is valid only for open-protocol, simple and canal-json")
        if protocol == "canal-json" and not enable_extension:
            raise ErrSinkURIInvalid("large-message-handle-option with canal-json needs enable-tidb-extension=true")
    handle = config.sink.kafka_config.large_message_handle
    if large == "claim-check" and not handle.claim_check_storage_uri:
        raise ErrSinkURIInvalid("large-message-handle-option=claim-check needs "
                                "[sink.kafka-config.large-message-handle] claim-check-storage-uri, e.g. s3://bucket/claim-check")
    if large == "claim-check":
        from sparkcdc.config.storage_location import parse_storage_location

        parse_storage_location(handle.claim_check_storage_uri)
    if handle.large_message_handle_compression not in ("", "none") and protocol not in ("canal-json", "open-protocol"):
        raise ErrSinkUnsupported(
            f"large-message-handle-compression={handle.large_message_handle_compression} is built for canal-json "
            f"and open-protocol; use \"none\" with {protocol}")
    if protocol == "simple" and values.get("encoding-format", "json") != "json":
        raise ErrSinkUnsupported("the simple protocol is built with encoding-format=json only; avro is not yet")
    if protocol == "simple" and large != "none":
        raise ErrSinkUnsupported(f"large-message-handle-option={large} is not built for the simple protocol yet")
    if values.get("debezium-disable-schema"):
        raise ErrSinkUnsupported("debezium-disable-schema=true is not supported yet; the schema is always sent")
    if config.sink.transaction_atomicity == "table":
        raise ErrSinkURIInvalid("transaction-atomicity=table is not allowed for MQ sinks")
    for rule in config.sink.dispatchers:
        if rule.topic and not TOPIC_EXPRESSION.match(rule.topic):
            raise ErrSinkURIInvalid(f"invalid topic expression {rule.topic!r}")

    sink = replace(
        config.sink,
        protocol=protocol,
        enable_tidb_extension=enable_extension,
        only_output_updated_columns=bool(values.get("only-output-updated-columns", config.sink.only_output_updated_columns)),
        content_compatible=bool(values.get("content-compatible", config.sink.content_compatible)),
        terminator="",
    )
    codec = replace(sink.kafka_config.codec_config,
                    enable_tidb_extension=enable_extension,
                    max_batch_size=integer("max-batch-size", 16, 1, 2**31 - 1),
                    avro_enable_watermark=bool(values.get("avro-enable-watermark", False)),
                    avro_decimal_handling_mode=str(values.get("avro-decimal-handling-mode", "precise")),
                    avro_bigint_unsigned_handling_mode=str(values.get("avro-bigint-unsigned-handling-mode", "long")),
                    encoding_format=str(values.get("encoding-format", "json")))
    sink = replace(sink, kafka_config=replace(sink.kafka_config, codec_config=codec))
    return KafkaSinkConfig(
        uri=masked,
        brokers=brokers,
        topic=topic,
        protocol=protocol,
        partition_num=integer("partition-num", 0, 0, 2**31 - 1),
        replication_factor=integer("replication-factor", 1, 1, 32767),
        kafka_version=str(values.get("kafka-version", "2.4.0")),
        max_message_bytes=integer("max-message-bytes", DEFAULT_MAX_MESSAGE_BYTES, 1, 2**31 - 1),
        compression=compression,
        required_acks=required_acks,
        max_retry=integer("max-retry", 5, 0, 2**31 - 1),
        auto_create_topic=bool(values.get("auto-create-topic", True)),
        dial_timeout=_seconds("dial-timeout", str(values.get("dial-timeout", "10s")) or "10s", masked),
        write_timeout=_seconds("write-timeout", str(values.get("write-timeout", "10s")) or "10s", masked),
        read_timeout=_seconds("read-timeout", str(values.get("read-timeout", "10s")) or "10s", masked),
        kafka_client_id=str(values.get("kafka-client-id", "")),
        sasl_user=str(values.get("sasl-user", "")),
        sasl_password=str(values.get("sasl-password", "")),
        sasl_mechanism=mechanism.upper(),
        enable_tls=bool(values.get("enable-tls", scheme == "kafka+ssl")),
        ca=str(values.get("ca", "")),
        cert=str(values.get("cert", "")),
        key=str(values.get("key", "")),
        insecure_skip_verify=bool(values.get("insecure-skip-verify", False)),
        output_raw_change_event=bool(values.get("output-raw-change-event", False)),
        schema_registry=schema_registry,
        sink=sink,
    )
