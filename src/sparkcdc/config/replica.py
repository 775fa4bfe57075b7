"""The changefeed config (TiCDC's ReplicaConfig) with its defaults in one place.

Field names are TiCDC's TOML keys with `-` turned into `_`. Parsing and validation of TOML
and of sink URI parameters happen once, at the edge (`parse_replica_config`); the rest of
the code trusts these objects.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class CSVConfig:
    delimiter: str = ","
    quote: str = '"'
    null: str = "\\N"
    include_commit_ts: bool = False
    binary_encoding_method: str = "base64"  # base64 | hex
    output_old_value: bool = False
    output_handle_key: bool = False
    output_field_header: bool = False


@dataclass
class CloudStorageConfig:
    worker_count: int = 16
    flush_interval: str = ""  # not set: a file per table each micro-batch (TiCDC's default is 5s)
    file_size: int = 67108864
    flush_concurrency: int = 1
    output_column_id: bool = False
    file_expiration_days: int = 0
    file_cleanup_cron_spec: str = "0 0 2 * * *"
    output_raw_change_event: bool = False


@dataclass
class CodecConfig:
    """`[sink.kafka-config.codec-config]` (TiCDC's CodecConfig)."""

    enable_tidb_extension: bool = False
    max_batch_size: int = 16
    avro_enable_watermark: bool = False
    avro_decimal_handling_mode: str = "precise"  # precise | string
    avro_bigint_unsigned_handling_mode: str = "long"  # long | string
    encoding_format: str = "json"  # json | avro (simple only)


@dataclass
class LargeMessageHandleConfig:
    large_message_handle_option: str = "none"  # none | handle-key-only | claim-check
    large_message_handle_compression: str = "none"
    claim_check_storage_uri: str = ""
    claim_check_raw_value: bool = False


@dataclass
class KafkaConfig:
    """`[sink.kafka-config]`: the Kafka URI's parameters; a value given in the URI wins.
    Empty/zero values mean "not set" (TiCDC's pointer fields); defaults live in
    sparkcdc.sink.kafka.config."""

    partition_num: int = 0
    replication_factor: int = 0
    kafka_version: str = ""
    max_message_bytes: int = 0
    compression: str = ""
    kafka_client_id: str = ""
    auto_create_topic: bool = True
    dial_timeout: str = ""
    write_timeout: str = ""
    read_timeout: str = ""
    required_acks: int = -1
    sasl_user: str = ""
    sasl_password: str = ""
    sasl_mechanism: str = ""
    enable_tls: bool = False
    ca: str = ""
    cert: str = ""
    key: str = ""
    insecure_skip_verify: bool = False
    output_raw_change_event: bool = False
    codec_config: CodecConfig = field(default_factory=CodecConfig)
    large_message_handle: LargeMessageHandleConfig = field(default_factory=LargeMessageHandleConfig)


@dataclass
class DispatchRule:
    """One `[[sink.dispatchers]]` entry: tables it matches, their topic and partition rule."""

    matcher: list[str] = field(default_factory=list)
    partition: str = ""  # default | table | ts | index-value | columns (rowid = index-value)
    dispatcher: str = ""  # TiCDC's old name of `partition`
    topic: str = ""
    index: str = ""
    columns: list[str] = field(default_factory=list)


@dataclass
class ColumnSelector:
    """One `[[sink.column-selectors]]` entry: columns (`!` excludes) sent for matched tables."""

    matcher: list[str] = field(default_factory=list)
    columns: list[str] = field(default_factory=list)


@dataclass
class OpenProtocolConfig:
    output_old_value: bool = True


@dataclass
class DebeziumConfig:
    """`[sink.debezium]`: TiCDC's output-old-value, and the value modes of Debezium's MySQL
    connector (its `decimal.handling.mode` and `bigint.unsigned.handling.mode`), whose defaults
    here are what TiCDC's Debezium codec writes (docs/kafka-sink.md)."""

    output_old_value: bool = True
    decimal_handling_mode: str = "double"  # double | precise | string
    bigint_unsigned_handling_mode: str = "long"  # long | precise


@dataclass
class DeltaConfig:
    """`[sink.delta]`: the Delta Lake sink (docs/lakehouse-sinks.md); `mode` and `schema-mode`
    may also be given in the sink URI, which wins."""

    mode: str = "upsert"  # upsert | changelog
    schema_mode: str = "evolve"  # evolve | strict
    old_value: bool = False  # changelog mode: the before image as _old_<column>
    table_path: str = "{schema}/{table}"  # each table's path under the sink URI's
    compact_every: int = 100  # commits to a table between two automatic compactions; 0: never
    target_file_size: int = 134217728  # bytes: compaction's target


@dataclass
class IcebergConfig:
    """`[sink.iceberg]`: the Iceberg sink (docs/lakehouse-sinks.md); `mode`, `schema-mode`,
    `catalog` and `catalog-uri` may also be given in the sink URI, which wins."""

    mode: str = "upsert"
    schema_mode: str = "evolve"
    old_value: bool = False
    namespace: str = "{schema}"  # each table's Iceberg namespace
    table_name: str = "{table}"
    catalog: str = "sql"  # sql (embedded SQLite by default) | rest | glue | hive
    catalog_uri: str = ""  # sql: a SQLAlchemy URL (default: <warehouse>/sparkcdc-catalog.sqlite); rest/hive: its URI
    compact_every: int = 100
    target_file_size: int = 134217728


@dataclass
class SinkConfig:
    protocol: str = ""
    transaction_atomicity: str = ""
    terminator: str = "\r\n"
    date_separator: str = "day"  # none | year | month | day
    enable_partition_separator: bool = True
    file_index_digit: int = 20
    enable_tidb_extension: bool = False  # set from the sink URI's enable-tidb-extension
    only_output_updated_columns: bool = False
    delete_only_output_handle_key_columns: bool = False
    content_compatible: bool = False
    safe_mode: bool = False
    csv: CSVConfig = field(default_factory=CSVConfig)
    dispatchers: list[DispatchRule] = field(default_factory=list)
    column_selectors: list[ColumnSelector] = field(default_factory=list)
    schema_registry: str = ""
    open: OpenProtocolConfig = field(default_factory=OpenProtocolConfig)
    debezium: DebeziumConfig = field(default_factory=DebeziumConfig)
    kafka_config: KafkaConfig = field(default_factory=KafkaConfig)
    cloud_storage_config: CloudStorageConfig = field(default_factory=CloudStorageConfig)
    delta: DeltaConfig = field(default_factory=DeltaConfig)
    iceberg: IcebergConfig = field(default_factory=IcebergConfig)


@dataclass
class EventFilterRule:
    """`[[filter.event-filters]]`: events of `matcher`'s tables to drop (sparkcdc.filter)."""

    matcher: list[str] = field(default_factory=list)
    ignore_event: list[str] = field(default_factory=list)
    ignore_sql: list[str] = field(default_factory=list)
    ignore_insert_value_expr: str = ""
    ignore_update_new_value_expr: str = ""
    ignore_update_old_value_expr: str = ""
    ignore_delete_value_expr: str = ""


@dataclass
class FilterConfig:
    rules: list[str] = field(default_factory=lambda: ["*.*"])
    ignore_txn_start_ts: list[int] = field(default_factory=list)
    event_filters: list[EventFilterRule] = field(default_factory=list)


@dataclass
class ConsistentConfig:
    """`[consistent]`: the redo log of a MySQL-sink changefeed (sparkcdc.redo, docs/redo.md).

    Zero means TiCDC's default for the numeric keys, as in TiCDC's ValidateAndAdjust."""

    level: str = "none"  # none | eventual
    max_log_size: int = 64  # MiB: a log file rotates once it is this large
    flush_interval: int = 2000  # ms; sparkcdc flushes every micro-batch before the sink applies it
    meta_flush_interval: int = 200  # ms: how soon a new checkpoint-ts reaches the meta file
    storage: str = ""  # file:// (nfs://, local://), s3://, gcs://, azblob://
    compression: str = ""  # "" | none | lz4


@dataclass
class ChunkKeyRule:
    """`[[snapshot.chunk-keys]]`: the columns a table's snapshot chunks are cut by, instead of its
    primary key (or first NOT NULL unique key): the leading columns of one of its indexes, all NOT
    NULL (docs/snapshot.md)."""

    table: str = ""  # "db.table"
    columns: list[str] = field(default_factory=list)


@dataclass
class SnapshotConfig:
    """`[snapshot]` (sparkcdc only; TiCDC has none): copy the rows the tables already hold before
    streaming the binlog (pipeline/snapshot.py, docs/snapshot.md). Modes after Debezium's
    snapshot.mode; the chunk size after Flink CDC's scan.incremental.snapshot.chunk.size."""

    mode: str = "never"  # never | initial | initial-only
    chunk_size: int = 50000  # rows per chunk
    parallelism: int = 0  # chunks read at once; 0: the Spark session's cores
    # Filter rules (the changefeed filter's syntax) narrowing which of the tables the changefeed
    # replicates are copied; empty: all of them.
    tables: list[str] = field(default_factory=list)
    chunk_keys: list[ChunkKeyRule] = field(default_factory=list)


SNAPSHOT_MODES = ("never", "initial", "initial-only")


@dataclass
class ReplicaConfig:
    memory_quota: int = 1073741824
    case_sensitive: bool = False
    force_replicate: bool = False
    check_gc_safe_point: bool = True
    enable_sync_point: bool = False
    sync_point_interval: str = "10m"
    sync_point_retention: str = "24h"
    ignore_ineligible_table: bool = False
    changefeed_error_stuck_duration: str = "30m"
    # Bidirectional replication (docs/bidirectional-replication.md): the MySQL sink marks what it
    # writes with MariaDB's @@skip_replication, and the changefeed drops marked transactions.
    bdr_mode: bool = False
    # sparkcdc only (TiDB sets it per cluster with ADMIN SET BDR ROLE, MariaDB has no such thing):
    # the BDR role of this changefeed's upstream, which decides its DDLs. "": none (no DDL is
    # replicated), "primary" (replicable DDLs are, others fail the changefeed), "secondary" (any
    # DDL fails the changefeed). Only with bdr-mode = true.
    bdr_role: str = ""
    # sparkcdc only (TiCDC has no such key): a DDL the schema store cannot parse or apply is
    # skipped with an error log instead of failing the changefeed. Rows of the tables it touched
    # may then decode against a stale schema, so only use it for DDLs known to change no columns.
    skip_unparseable_ddl: bool = False
    filter: FilterConfig = field(default_factory=FilterConfig)
    sink: SinkConfig = field(default_factory=SinkConfig)
    consistent: ConsistentConfig = field(default_factory=ConsistentConfig)
    snapshot: SnapshotConfig = field(default_factory=SnapshotConfig)


# ---------------------------------------------------------------------------------------------
# Parsing and validation: TiCDC's changefeed TOML (kebab-case keys) and the Open API's
# replica_config JSON (snake_case keys) both land here, so there is one set of rules.
# ---------------------------------------------------------------------------------------------

import dataclasses as _dataclasses
import re as _re
import tomllib as _tomllib
import typing as _typing
from typing import Any as _Any

from sparkcdc import errors as _errors

SINK_PROTOCOLS = (
    "canal-json", "open-protocol", "avro", "debezium", "simple", "csv", "maxwell", "craft", "canal",
)

# Allowed values of string fields with a closed set, keyed by (dataclass, field).
_CHOICES: dict[tuple[type, str], tuple[str, ...]] = {}
# Inclusive numeric ranges, keyed the same way.
_RANGES: dict[tuple[type, str], tuple[int, int]] = {}
# Go-duration fields and their inclusive bounds in seconds (None = unbounded).
_DURATIONS: dict[tuple[type, str], tuple[float | None, float | None]] = {}
_OPTIONAL_DURATIONS: set[tuple[type, str]] = set()  # "" means not set (TiCDC's nil pointer)

# TiCDC keys we know but do not implement yet: accepted only when the value equals TiCDC's
# default, so a config written for TiCDC never silently changes meaning here. A nested dict
# is a section; `_NO_DEFAULT` means any value is refused.
_NO_DEFAULT = object()
_UNSUPPORTED: dict[type, dict[str, _Any]] = {}


def _init_rules() -> None:
    _CHOICES[(SinkConfig, "protocol")] = ("",) + SINK_PROTOCOLS
    _CHOICES[(SinkConfig, "transaction_atomicity")] = ("", "none", "table")
    _CHOICES[(SinkConfig, "date_separator")] = ("none", "year", "month", "day")
    _CHOICES[(CSVConfig, "binary_encoding_method")] = ("base64", "hex")
    _RANGES[(SinkConfig, "file_index_digit")] = (6, 20)
    _RANGES[(ReplicaConfig, "memory_quota")] = (1, 2**63 - 1)
    _RANGES[(CloudStorageConfig, "worker_count")] = (1, 512)
    _RANGES[(CloudStorageConfig, "file_size")] = (1 << 20, 512 << 20)
    _RANGES[(CloudStorageConfig, "flush_concurrency")] = (1, 512)
    _RANGES[(CloudStorageConfig, "file_expiration_days")] = (0, 2**31 - 1)
    for lake in (DeltaConfig, IcebergConfig):
        _CHOICES[(lake, "mode")] = ("upsert", "changelog")
        _CHOICES[(lake, "schema_mode")] = ("evolve", "strict")
        _RANGES[(lake, "compact_every")] = (0, 2**31 - 1)
        _RANGES[(lake, "target_file_size")] = (1 << 20, 1 << 34)
    _DURATIONS[(ReplicaConfig, "sync_point_interval")] = (30, None)
    _DURATIONS[(ReplicaConfig, "sync_point_retention")] = (3600, None)
    _DURATIONS[(ReplicaConfig, "changefeed_error_stuck_duration")] = (1800, None)
    _DURATIONS[(CloudStorageConfig, "flush_interval")] = (2, 600)
    _OPTIONAL_DURATIONS.add((CloudStorageConfig, "flush_interval"))
    _CHOICES[(ReplicaConfig, "bdr_role")] = ("", "primary", "secondary")
    _UNSUPPORTED[ReplicaConfig] = {
        "enable_table_monitor": False,
        "sql_mode": _NO_DEFAULT,
        "mounter": {"worker_num": 16},
        "scheduler": {"enable_table_across_nodes": False, "region_threshold": 100000,
                      "write_key_threshold": 0},
        "integrity": {"integrity_check_level": "none", "corruption_handle_level": "warn"},
        "synced_status": {"synced_check_interval": 300, "checkpoint_interval": 15},
    }
    _CHOICES[(SnapshotConfig, "mode")] = SNAPSHOT_MODES
    _RANGES[(SnapshotConfig, "chunk_size")] = (1, 1 << 31)
    _RANGES[(SnapshotConfig, "parallelism")] = (0, 1024)
    _CHOICES[(ConsistentConfig, "level")] = ("none", "eventual")
    _CHOICES[(ConsistentConfig, "compression")] = ("", "none", "lz4")
    _RANGES[(ConsistentConfig, "max_log_size")] = (0, 2**31 - 1)
    _RANGES[(ConsistentConfig, "flush_interval")] = (0, 2**63 - 1)
    _RANGES[(ConsistentConfig, "meta_flush_interval")] = (0, 2**63 - 1)
    # Tuning keys of TiCDC's redo writer that have no counterpart here yet.
    _UNSUPPORTED[ConsistentConfig] = {
        "encoding_worker_num": 16, "flush_worker_num": 8, "use_file_backend": False,
        "flush_concurrency": 1, "memory_usage": {"memory_quota_percentage": 50},
    }
    _CHOICES[(CodecConfig, "avro_decimal_handling_mode")] = ("precise", "string")
    _CHOICES[(CodecConfig, "avro_bigint_unsigned_handling_mode")] = ("long", "string")
    _CHOICES[(CodecConfig, "encoding_format")] = ("json", "avro")
    _CHOICES[(DebeziumConfig, "decimal_handling_mode")] = ("double", "precise", "string")
    _CHOICES[(DebeziumConfig, "bigint_unsigned_handling_mode")] = ("long", "precise")
    _RANGES[(CodecConfig, "max_batch_size")] = (1, 2**31 - 1)
    _CHOICES[(LargeMessageHandleConfig, "large_message_handle_option")] = (
        "none", "handle-key-only", "claim-check")
    _CHOICES[(LargeMessageHandleConfig, "large_message_handle_compression")] = ("none", "lz4", "snappy")
    _CHOICES[(KafkaConfig, "required_acks")] = (-1, 0, 1)
    _CHOICES[(KafkaConfig, "compression")] = ("", "none", "gzip", "snappy", "lz4", "zstd")
    _CHOICES[(KafkaConfig, "sasl_mechanism")] = ("", "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "GSSAPI")
    _RANGES[(KafkaConfig, "partition_num")] = (0, 2**31 - 1)
    _RANGES[(KafkaConfig, "replication_factor")] = (0, 32767)
    _RANGES[(KafkaConfig, "max_message_bytes")] = (0, 2**31 - 1)
    _CHOICES[(DispatchRule, "partition")] = (
        "", "default", "table", "ts", "index-value", "rowid", "columns")
    _CHOICES[(DispatchRule, "dispatcher")] = _CHOICES[(DispatchRule, "partition")]
    _UNSUPPORTED[KafkaConfig] = {"kafka_sink_v2": False, "max_retry": 5,
                                 "glue_schema_registry_config": {}}
    _UNSUPPORTED[SinkConfig] = {
        "encoder_concurrency": 32,
        "enable_kafka_sink_v2": False,
        "advance_timeout_in_sec": 150,
        "send_bootstrap_interval_in_sec": 120,
        "send_bootstrap_in_msg_count": 10000,
        "send_bootstrap_to_all_partition": True,
        "send_all_bootstrap_at_start": False,
        "debezium_disable_schema": False,
        "pulsar_config": {},
        "mysql_config": {},
    }


_init_rules()

_DURATION_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_DURATION_PART = _re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")


def parse_go_duration(text: str) -> float:
    """Seconds in a Go duration string such as `5s`, `1m30s`, `10m`; ValueError if malformed."""
    if text == "0":
        return 0.0
    position, total = 0, 0.0
    for match in _DURATION_PART.finditer(text):
        if match.start() != position:
            break
        total += float(match.group(1)) * _DURATION_UNITS[match.group(2)]
        position = match.end()
    if position != len(text) or not text:
        raise ValueError(f"invalid duration {text!r}")
    return total


class _KeyStyle:
    """How a field name is spelled in the input: kebab-case for TOML, snake_case for JSON."""

    def __init__(self, separator: str):
        self.separator = separator

    def spell(self, field_name: str) -> str:
        return field_name.replace("_", self.separator)

    def field_name(self, key: str) -> str:
        return key.replace(self.separator, "_")


_TOML = _KeyStyle("-")
_JSON = _KeyStyle("_")


def _invalid(message: str) -> _errors.SparkCDCError:
    return _errors.ErrInvalidReplicaConfig(message)


def _type_name(value: _Any) -> str:
    return {bool: "boolean", int: "integer", str: "string", list: "array", dict: "table",
            float: "float"}.get(type(value), type(value).__name__)


_A_TYPE = {bool: "a boolean", int: "an integer", str: "a string"}


def _check_scalar(expected: _Any, value: _Any, path: str) -> _Any:
    origin = _typing.get_origin(expected)
    if origin is list:
        (item_type,) = _typing.get_args(expected)
        if not isinstance(value, list):
            raise _invalid(f"`{path}` must be an array of {item_type.__name__}, got {_type_name(value)}")
        return [_check_scalar(item_type, item, f"{path}[{i}]") for i, item in enumerate(value)]
    if expected is bool:
        ok = isinstance(value, bool)
    elif expected is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    else:
        ok = isinstance(value, expected)
    if not ok:
        raise _invalid(f"`{path}` must be {_A_TYPE[expected]}, got {_type_name(value)} {value!r}")
    return value


def _check_rules(cls: type, name: str, value: _Any, path: str) -> None:
    choices = _CHOICES.get((cls, name))
    if choices is not None and value not in choices:
        shown = ", ".join(repr(c) if c == "" else c for c in choices)
        raise _invalid(f"`{path}` is {value!r}; allowed values: {shown}")
    bounds = _RANGES.get((cls, name))
    if bounds is not None and not bounds[0] <= value <= bounds[1]:
        raise _invalid(f"`{path}` is {value}; it must be between {bounds[0]} and {bounds[1]}")
    duration_bounds = _DURATIONS.get((cls, name))
    if duration_bounds is not None and not (value == "" and (cls, name) in _OPTIONAL_DURATIONS):
        try:
            seconds = parse_go_duration(value)
        except ValueError:
            raise _invalid(f"`{path}` is {value!r}; it must be a duration such as \"5s\", \"10m\", \"1h\"") from None
        low, high = duration_bounds
        if (low is not None and seconds < low) or (high is not None and seconds > high):
            limits = []
            if low is not None:
                limits.append(f"at least {_format_seconds(low)}")
            if high is not None:
                limits.append(f"at most {_format_seconds(high)}")
            raise _invalid(f"`{path}` is {value!r}; it must be {' and '.join(limits)}")


def _format_seconds(seconds: float) -> str:
    for unit, size in (("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"


def _check_unsupported(default: _Any, value: _Any, path: str, style: _KeyStyle) -> None:
    """Accept a TiCDC key we do not implement only when it says what TiCDC's default says."""
    if isinstance(default, dict) and isinstance(value, dict):
        for key, item in value.items():
            name = style.field_name(key)
            child = f"{path}.{key}"
            if name not in default:
                raise _invalid(f"`{child}` is not supported yet by sparkcdc (TiCDC's [{path}] is "
                               f"accepted only with its default values); remove it")
            _check_unsupported(default[name], item, child, style)
        return
    if default is _NO_DEFAULT or value != default or type(value) is not type(default):
        shown = "" if default is _NO_DEFAULT else f" (only TiCDC's default {default!r} is accepted)"
        raise _invalid(f"`{path}` is not supported yet by sparkcdc{shown}; remove it")


def _build(cls: type, data: _Any, path: str, style: _KeyStyle):
    where = f"[{path}]" if path else "the top level"
    if not isinstance(data, dict):
        raise _invalid(f"`{path}` must be a table, got {_type_name(data)}")
    hints = _typing.get_type_hints(cls)
    fields = {f.name: f for f in _dataclasses.fields(cls)}
    unsupported = _UNSUPPORTED.get(cls, {})
    values: dict[str, _Any] = {}
    for key, value in data.items():
        full_key = f"{path}.{key}" if path else key
        name = style.field_name(key)
        if style is _TOML and "_" in key:
            name = None  # TiCDC's TOML spells keys with '-'; a '_' key is a typo there
        if value is None and style is _JSON:
            continue  # JSON null: not set, as TiCDC's pointer fields treat it
        if name in fields:
            expected = hints[name]
            item_types = _typing.get_args(expected) if _typing.get_origin(expected) is list else ()
            if _dataclasses.is_dataclass(expected):
                values[name] = _build(expected, value, full_key, style)
            elif item_types and _dataclasses.is_dataclass(item_types[0]):
                if not isinstance(value, list):
                    raise _invalid(f"`{full_key}` must be an array of tables, got {_type_name(value)}")
                values[name] = [_build(item_types[0], item, f"{full_key}[{i}]", style)
                                for i, item in enumerate(value)]
            else:
                values[name] = _check_scalar(expected, value, full_key)
                _check_rules(cls, name, values[name], full_key)
        elif name in unsupported:
            _check_unsupported(unsupported[name], value, full_key, style)
        else:
            valid = sorted(style.spell(n) for n in list(fields) + list(unsupported))
            raise _invalid(f"unknown key `{full_key}` in {where}; valid keys: {', '.join(valid)}")
    return cls(**values)


def _validate_filters(config: ReplicaConfig) -> None:
    """Compile every filter once so a bad rule, regex or expression fails changefeed creation."""
    from sparkcdc.filter.column_selector import ColumnSelectors
    from sparkcdc.filter.event_filter import EventFilter
    from sparkcdc.filter.table_filter import TableFilter

    TableFilter(config.filter.rules, config.case_sensitive)
    EventFilter(config.filter.event_filters, config.case_sensitive)
    ColumnSelectors(config.sink.column_selectors, config.case_sensitive)


def _validate_whole(config: ReplicaConfig) -> None:
    """Rules that relate several keys (TiCDC's ReplicaConfig.ValidateAndAdjust, the parts we run)."""
    _validate_filters(config)
    _validate_consistent(config.consistent)
    if config.bdr_role and not config.bdr_mode:
        raise _invalid(f"`bdr-role` is {config.bdr_role!r} but `bdr-mode` is false; a BDR role applies only to "
                       "bidirectional replication: set bdr-mode = true, or remove bdr-role")
    csv = config.sink.csv
    prefix = "sink.csv."
    if not 1 <= len(csv.delimiter) <= 3:
        raise _invalid(f"`{prefix}delimiter` is {csv.delimiter!r}; it must be 1 to 3 characters long")
    if any(ch in csv.delimiter for ch in "\r\n"):
        raise _invalid(f"`{prefix}delimiter` must not contain CR or LF")
    if len(csv.quote) > 1:
        raise _invalid(f"`{prefix}quote` is {csv.quote!r}; it must be empty or one character")
    if csv.quote and csv.quote in csv.delimiter:
        raise _invalid(f"`{prefix}delimiter` {csv.delimiter!r} must not contain the quote character {csv.quote!r}")
    if any(ch in csv.quote for ch in "\r\n"):
        raise _invalid(f"`{prefix}quote` must not contain CR or LF")
    _validate_mq(config)
    _validate_snapshot(config.snapshot)
    if config.sink.terminator not in ("\r\n", "\n", "\r", ""):
        raise _invalid(f"`sink.terminator` is {config.sink.terminator!r}; allowed values: \"\\r\\n\", \"\\n\", \"\\r\"")


# TiCDC's redo.MinFlushIntervalInMs and the defaults a zero stands for (pkg/redo/config.go).
MIN_REDO_FLUSH_INTERVAL_MS = 50
_CONSISTENT_DEFAULTS = {"max_log_size": 64, "flush_interval": 2000, "meta_flush_interval": 200}


def _validate_consistent(consistent: ConsistentConfig) -> None:
    """TiCDC's ConsistentConfig.ValidateAndAdjust: zeros take the defaults, then the limits."""
    if consistent.level != "eventual":
        return
    for name, default in _CONSISTENT_DEFAULTS.items():
        if getattr(consistent, name) == 0:
            setattr(consistent, name, default)
    for name in ("flush_interval", "meta_flush_interval"):
        value = getattr(consistent, name)
        if value < MIN_REDO_FLUSH_INTERVAL_MS:
            raise _invalid(f"`consistent.{name.replace('_', '-')}` is {value}; it must be at least "
                           f"{MIN_REDO_FLUSH_INTERVAL_MS} (milliseconds)")
    if not consistent.storage:
        raise _invalid("`consistent.storage` is empty but `consistent.level` is \"eventual\"; set it to where "
                       "the redo log goes, e.g. \"file:///data/redo\" or \"s3://bucket/redo?endpoint=...\"")
    from sparkcdc.config.storage_location import parse_redo_storage_uri

    parse_redo_storage_uri(consistent.storage)


def _validate_mq(config: ReplicaConfig) -> None:
    """Dispatcher rules and topic expressions (TiCDC's SinkConfig.validate)."""
    for i, rule in enumerate(config.sink.dispatchers):
        where = f"sink.dispatchers[{i}]"
        if rule.partition and rule.dispatcher:
            raise _invalid(f"`{where}` sets both `partition` and its old name `dispatcher`; keep `partition`")
        if not rule.matcher:
            raise _invalid(f"`{where}.matcher` is empty; list the tables the rule applies to, e.g. [\"db.*\"]")
        kind = rule.partition or rule.dispatcher
        if kind == "columns" and not rule.columns:
            raise _invalid(f"`{where}` uses partition = \"columns\" but lists no `columns`")
        if rule.topic and not TOPIC_EXPRESSION.match(rule.topic):
            raise _invalid(
                f"`{where}.topic` is {rule.topic!r}; a topic expression is "
                "[prefix]{schema}[middle][{table}][suffix] with prefix, middle and suffix of "
                "[A-Za-z0-9._-], or a plain topic name")
        _check_matchers(rule.matcher, where)


def _validate_snapshot(snapshot: SnapshotConfig) -> None:
    """The snapshot's table rules and chunk keys (whether a chunk key is indexed is checked against
    the upstream at changefeed creation, pipeline/snapshot.py)."""
    if snapshot.tables:
        _check_matchers(snapshot.tables, "snapshot.tables")
    for i, rule in enumerate(snapshot.chunk_keys):
        where = f"snapshot.chunk-keys[{i}]"
        parts = rule.table.split(".")
        if len(parts) != 2 or not all(parts):
            raise _invalid(f"`{where}.table` is {rule.table!r}; name one table as \"db.table\"")
        if not rule.columns or not all(rule.columns):
            raise _invalid(f"`{where}.columns` is empty; list the leading columns of an index of {rule.table}")


# tiflow cdc/sink/dmlsink/mq/dispatcher/topic/expression.go topicNameRE
TOPIC_EXPRESSION = _re.compile(
    r"^[A-Za-z0-9._\-]*(\{schema\})?([A-Za-z0-9._\-]*\{table\})?[A-Za-z0-9._\-]*$")


def _check_matchers(matcher: list[str], where: str) -> None:
    from sparkcdc.filter.table_filter import TableFilter

    try:
        TableFilter(matcher)
    except Exception as exc:  # the filter names what is wrong
        raise _invalid(f"`{where}.matcher` is invalid: {exc}") from None


def parse_replica_config(toml_text: str) -> ReplicaConfig:
    """Parse TiCDC's changefeed TOML; raises ErrInvalidReplicaConfig naming the key at fault."""
    try:
        data = _tomllib.loads(toml_text)
    except _tomllib.TOMLDecodeError as exc:
        raise _invalid(f"the changefeed config is not valid TOML: {exc}") from None
    config = _build(ReplicaConfig, data, "", _TOML)
    _validate_whole(config)
    return config


def replica_config_to_dict(config: ReplicaConfig) -> dict:
    """The Open API's replica_config JSON (snake_case keys)."""
    return _dataclasses.asdict(config)


def replica_config_from_dict(data: dict) -> ReplicaConfig:
    """Inverse of replica_config_to_dict; missing keys take TiCDC's defaults, unknown keys fail."""
    config = _build(ReplicaConfig, data if data is not None else {}, "", _JSON)
    _validate_whole(config)
    return config
