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
    flush_interval: str = "5s"
    file_size: int = 67108864
    flush_concurrency: int = 1
    output_column_id: bool = False
    file_expiration_days: int = 0
    file_cleanup_cron_spec: str = "0 0 2 * * *"
    output_raw_change_event: bool = False


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
    cloud_storage_config: CloudStorageConfig = field(default_factory=CloudStorageConfig)


@dataclass
class FilterConfig:
    rules: list[str] = field(default_factory=lambda: ["*.*"])
    ignore_txn_start_ts: list[int] = field(default_factory=list)


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
    filter: FilterConfig = field(default_factory=FilterConfig)
    sink: SinkConfig = field(default_factory=SinkConfig)
