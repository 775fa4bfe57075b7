import logging

import pytest

from sparkcdc.config.replica import ReplicaConfig, SinkConfig
from sparkcdc.errors import ErrSinkURIInvalid
from sparkcdc.sink.registry import parse_sink_spec
from sparkcdc.sink.mysql.config import parse_mysql_sink_uri


def test_defaults_are_ticdcs():
    c = parse_mysql_sink_uri("mysql://root:secret@127.0.0.1:3306/")
    assert (c.host, c.port, c.user, c.password) == ("127.0.0.1", 3306, "root", "secret")
    assert (c.worker_count, c.max_txn_row, c.max_multi_update_row, c.max_multi_update_row_size) == (16, 256, 40, 1024)
    assert (c.safe_mode, c.batch_dml_enable, c.multi_stmt_enable) == (False, True, True)
    assert (c.read_timeout, c.write_timeout, c.dial_timeout) == (120.0, 120.0, 120.0)
    assert c.transaction_atomicity == "none" and c.tidb_txn_mode == "optimistic"
    assert c.time_zone is None and c.ddl_time_zone == "+00:00" and not c.tls


def test_parameters_are_applied():
    c = parse_mysql_sink_uri(
        "tidb+ssl://u:p%40ss@h:4000/?worker-count=4&max-txn-row=10&safe-mode=true&batch-dml-enable=false"
        "&multi-stmt-enable=false&time-zone=Asia/Shanghai&read-timeout=30s&write-timeout=1m30s&timeout=5s"
        "&transaction-atomicity=table&tidb-txn-mode=pessimistic&max-multi-update-row=7"
        "&max-multi-update-row-size=0&ssl-ca=/ca.pem")
    assert c.password == "p@ss" and c.tls and c.ssl_ca == "/ca.pem"
    assert (c.worker_count, c.max_txn_row, c.max_multi_update_row, c.max_multi_update_row_size) == (4, 10, 7, 0)
    assert c.safe_mode and not c.batch_dml_enable and not c.multi_stmt_enable
    assert (c.read_timeout, c.write_timeout, c.dial_timeout) == (30.0, 90.0, 5.0)
    assert c.time_zone == "Asia/Shanghai" and c.ddl_time_zone == "Asia/Shanghai"
    assert c.transaction_atomicity == "table" and c.tidb_txn_mode == "pessimistic"


def test_empty_time_zone_means_the_downstreams_own():
    assert parse_mysql_sink_uri("mysql://h:1/?time-zone=").ddl_time_zone is None
    assert parse_mysql_sink_uri("mysql://h:1/?time-zone=%2B08:00").time_zone == "+08:00"


def test_values_above_the_maximum_are_capped_like_ticdc(caplog):
    with caplog.at_level(logging.WARNING):
        c = parse_mysql_sink_uri("mysql://h:1/?worker-count=5000&max-txn-row=9999&max-multi-update-row=999"
                                 "&max-multi-update-row-size=99999")
    assert (c.worker_count, c.max_txn_row, c.max_multi_update_row, c.max_multi_update_row_size) == (1024, 2048, 256, 8192)
    assert "worker-count 5000 is too large" in caplog.text


@pytest.mark.parametrize("query, fragment", [
    ("worker-count=0", "invalid worker-count 0: it must be an integer in [1, 1024]"),
    ("worker-count=abc", "invalid worker-count 'abc'"),
    ("max-txn-row=-1", "invalid max-txn-row -1: it must be an integer in [1, 2048]"),
    ("max-multi-update-row=0", "[1, 256]"),
    ("max-multi-update-row-size=-1", "[0, 8192]"),
    ("safe-mode=maybe", "invalid safe-mode 'maybe': it must be true or false"),
    ("read-timeout=10", "invalid read-timeout '10'"),
    ("timeout=0s", "invalid timeout '0s': it must be greater than 0"),
    ("time-zone=Mars/Base", "invalid time-zone 'Mars/Base'"),
    ("transaction-atomicity=global", "transaction-atomicity 'global': it must be one of none, table"),
    ("tidb-txn-mode=fast", "tidb-txn-mode 'fast'"),
    ("protocol=canal-json", "protocol is not a MySQL sink parameter"),
    ("workers=4", "unknown MySQL sink parameter 'workers'; allowed: worker-count"),
    ("ssl-cert=/c.pem", "ssl-cert and ssl-key must be given together"),
    ("worker-count=1&worker-count=2", "given more than once"),
])
def test_bad_parameters_name_the_parameter_and_range(query, fragment):
    with pytest.raises(ErrSinkURIInvalid) as info:
        parse_mysql_sink_uri(f"mysql://root:topsecret@h:3306/?{query}")
    assert fragment in info.value.message
    assert "topsecret" not in str(info.value) and "xxxxx" in info.value.message


def test_password_never_shown():
    c = parse_mysql_sink_uri("mysql://root:topsecret@h:3306/?ssl-key=/k.pem&ssl-cert=/c.pem")
    assert "topsecret" not in repr(c) and "topsecret" not in c.masked_uri
    assert c.masked_uri == "mysql://root:xxxxx@h:3306/?ssl-key=xxxxx&ssl-cert=/c.pem"


def test_changefeed_config_applies_unless_the_uri_overrides():
    config = ReplicaConfig(sink=SinkConfig(safe_mode=True, transaction_atomicity="table"))
    c = parse_mysql_sink_uri("mysql://h:1/", config)
    assert c.safe_mode and c.transaction_atomicity == "table"
    c = parse_mysql_sink_uri("mysql://h:1/?safe-mode=false&transaction-atomicity=none", config)
    assert not c.safe_mode and c.transaction_atomicity == "none"


def test_sink_spec_validates_mysql_uris():
    spec = parse_sink_spec("mysql://root@127.0.0.1:3306/?worker-count=4", ReplicaConfig())
    assert spec.settings.worker_count == 4 and spec.supports_consistency and not spec.splits_key_updates
    with pytest.raises(ErrSinkURIInvalid):
        parse_sink_spec("tidb://h:4000/?protocol=canal-json", ReplicaConfig())
    with pytest.raises(ErrSinkURIInvalid, match="no host"):
        parse_sink_spec("mysql:///", ReplicaConfig())
