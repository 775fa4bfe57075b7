import pytest

from sparkcdc.config.replica import (
    ReplicaConfig, parse_go_duration, parse_replica_config, replica_config_from_dict, replica_config_to_dict,
)
from sparkcdc.errors import ErrInvalidReplicaConfig


def test_empty_toml_is_ticdc_defaults():
    assert parse_replica_config("") == ReplicaConfig()


def test_full_storage_config_maps_dashes_to_fields():
    cfg = parse_replica_config('''
case-sensitive = true
memory-quota = 1024
[filter]
rules = ["db.*", "!db.skip"]
ignore-txn-start-ts = [1, 2]
[sink]
protocol = "csv"
date-separator = "month"
file-index-digit = 6
terminator = "\\n"
[sink.csv]
delimiter = "|#"
quote = "'"
binary-encoding-method = "hex"
include-commit-ts = true
[sink.cloud-storage-config]
flush-interval = "2s"
file-size = 1048576
''')
    assert cfg.case_sensitive and cfg.memory_quota == 1024
    assert cfg.filter.rules == ["db.*", "!db.skip"] and cfg.filter.ignore_txn_start_ts == [1, 2]
    assert (cfg.sink.protocol, cfg.sink.date_separator, cfg.sink.file_index_digit) == ("csv", "month", 6)
    assert cfg.sink.csv.delimiter == "|#" and cfg.sink.csv.binary_encoding_method == "hex"
    assert cfg.sink.cloud_storage_config.flush_interval == "2s"
    assert replica_config_from_dict(replica_config_to_dict(cfg)) == cfg


def test_to_dict_is_snake_case_json_shape():
    d = replica_config_to_dict(ReplicaConfig())
    assert d["sink"]["csv"]["binary_encoding_method"] == "base64"
    assert d["sink"]["cloud_storage_config"]["flush_interval"] == ""
    assert d["filter"]["rules"] == ["*.*"]


@pytest.mark.parametrize("text, fragments", [
    ('[sink.csv]\ndelimter = ","', ["sink.csv.delimter", "delimiter", "quote"]),
    ('memroy-quota = 1', ["memroy-quota", "memory-quota"]),
    ('memory_quota = 1', ["memory_quota", "memory-quota"]),
    ('[sink]\ndate-separator = "week"', ["sink.date-separator", "none, year, month, day"]),
    ('[sink.csv]\ndelimiter = ""', ["sink.csv.delimiter", "1 to 3"]),
    ('[sink.csv]\ndelimiter = "abcd"', ["sink.csv.delimiter", "1 to 3"]),
    ('[sink.csv]\ndelimiter = "a\\"b"', ["sink.csv.delimiter", "quote"]),
    ('[sink.csv]\nquote = "ab"', ["sink.csv.quote"]),
    ('[sink.csv]\nbinary-encoding-method = "raw"', ["binary-encoding-method", "base64, hex"]),
    ('[sink]\nfile-index-digit = 5', ["sink.file-index-digit", "6 and 20"]),
    ('[sink]\nfile-index-digit = 21', ["sink.file-index-digit", "6 and 20"]),
    ('[sink]\nprotocol = "json"', ["sink.protocol", "canal-json", "csv"]),
    ('[sink]\ntransaction-atomicity = "row"', ["sink.transaction-atomicity"]),
    ('[sink]\nterminator = ";"', ["sink.terminator"]),
    ('case-sensitive = "yes"', ["case-sensitive", "boolean"]),
    ('memory-quota = "big"', ["memory-quota", "integer"]),
    ('memory-quota = true', ["memory-quota", "integer"]),
    ('[filter]\nrules = "*.*"', ["filter.rules", "array"]),
    ('[filter]\nignore-txn-start-ts = ["1"]', ["filter.ignore-txn-start-ts[0]", "integer"]),
    ('sink = 1', ["sink", "table"]),
    ('sync-point-interval = "10s"', ["sync-point-interval", "at least 30s"]),
    ('sync-point-interval = "ten"', ["sync-point-interval", "duration"]),
    ('changefeed-error-stuck-duration = "1m"', ["changefeed-error-stuck-duration", "30m"]),
    ('[sink.cloud-storage-config]\nflush-interval = "1h"', ["flush-interval", "at most 10m"]),
    ('[sink.cloud-storage-config]\nworker-count = 0', ["worker-count", "1 and 512"]),
    ('[sink.cloud-storage-config]\nfile-size = 10', ["file-size"]),
    ('[sink.cloud-storage-config]\nbogus = 1', ["sink.cloud-storage-config.bogus", "worker-count"]),
    ('[sink.debezium]\ndecimal-handling-mode = "exact"', ["sink.debezium.decimal-handling-mode",
                                                          "double, precise, string"]),
    ('[sink.debezium]\nbigint-unsigned-handling-mode = "string"', ["sink.debezium.bigint-unsigned-handling-mode",
                                                                   "long, precise"]),
    ('[sink.debezium]\ndecimal.handling.mode = "precise"', ["sink.debezium.decimal", "decimal-handling-mode"]),
])
def test_invalid_values_name_the_key(text, fragments):
    with pytest.raises(ErrInvalidReplicaConfig) as info:
        parse_replica_config(text)
    for fragment in fragments:
        assert fragment in info.value.message


def test_debezium_value_modes():
    cfg = parse_replica_config('[sink.debezium]\ndecimal-handling-mode = "precise"\n'
                               'bigint-unsigned-handling-mode = "precise"\noutput-old-value = false')
    modes = cfg.sink.debezium
    assert (modes.decimal_handling_mode, modes.bigint_unsigned_handling_mode, modes.output_old_value) == \
        ("precise", "precise", False)
    assert replica_config_from_dict(replica_config_to_dict(cfg)) == cfg
    # TiCDC's codec is the default: decimals as doubles, BIGINT UNSIGNED as a (wrapped) long.
    assert (ReplicaConfig().sink.debezium.decimal_handling_mode,
            ReplicaConfig().sink.debezium.bigint_unsigned_handling_mode) == ("double", "long")


def test_toml_syntax_error_has_line_and_column():
    with pytest.raises(ErrInvalidReplicaConfig) as info:
        parse_replica_config('case-sensitive = true\n[sink\n')
    assert "not valid TOML" in info.value.message and "line 2" in info.value.message


@pytest.mark.parametrize("text", [
    "[mounter]\nworker-num = 16",
    "bdr-mode = false",
    "[consistent]\nlevel = \"none\"\n[consistent.memory-usage]\nmemory-quota-percentage = 50",
    "[scheduler]\nenable-table-across-nodes = false",
    "[integrity]\nintegrity-check-level = \"none\"",
    "[sink]\ndispatchers = []\nencoder-concurrency = 32",
    "[sink.kafka-config]",
])
def test_unimplemented_ticdc_keys_accepted_at_their_defaults(text):
    assert parse_replica_config(text) == ReplicaConfig()


@pytest.mark.parametrize("text, key", [
    ("[mounter]\nworker-num = 8", "mounter.worker-num"),
    ("sql-mode = \"ANSI\"", "sql-mode"),
    ("[consistent]\nflush-worker-num = 4", "consistent.flush-worker-num"),
    ("[consistent.memory-usage]\nmemory-quota-percentage = 10", "consistent.memory-usage.memory-quota-percentage"),
    ("[scheduler]\nenable-table-across-nodes = true", "scheduler.enable-table-across-nodes"),
    ("[integrity]\nintegrity-check-level = \"correctness\"", "integrity.integrity-check-level"),
    ("[mounter]\nworker-num = 16.0", "mounter.worker-num"),
])
def test_unimplemented_ticdc_keys_refused_when_not_default(text, key):
    with pytest.raises(ErrInvalidReplicaConfig) as info:
        parse_replica_config(text)
    assert key in info.value.message and "not supported yet" in info.value.message


def test_from_dict_rejects_unknown_and_kebab_keys_and_skips_nulls():
    assert replica_config_from_dict({"sink": {"protocol": None}}) == ReplicaConfig()
    assert replica_config_from_dict({"mounter": {"worker_num": 16}}) == ReplicaConfig()
    with pytest.raises(ErrInvalidReplicaConfig, match="sink.bogus"):
        replica_config_from_dict({"sink": {"bogus": 1}})
    with pytest.raises(ErrInvalidReplicaConfig, match="sink.csv.delimiter"):
        replica_config_from_dict({"sink": {"csv": {"delimiter": ""}}})


def test_go_durations():
    assert parse_go_duration("1m30s") == 90 and parse_go_duration("1.5h") == 5400
    assert parse_go_duration("0") == 0 and parse_go_duration("500ms") == 0.5
    for bad in ("", "5", "s", "5x", "5s junk"):
        with pytest.raises(ValueError):
            parse_go_duration(bad)
