import pickle

import pytest

from sparkcdc.errors import ErrUpstreamURIInvalid
from sparkcdc.upstream.connection import UpstreamConfig


def test_from_uri_parses_and_masks():
    cfg = UpstreamConfig.from_uri("mysql://cdc:p%40ss@db.example:3307/")
    assert cfg == UpstreamConfig("db.example", 3307, "cdc", "p@ss")
    assert cfg.masked_uri() == "mysql://cdc:xxxxx@db.example:3307/"
    assert pickle.loads(pickle.dumps(cfg)) == cfg
    assert cfg.connection_settings()["password"] == "p@ss"


def test_from_uri_defaults():
    assert UpstreamConfig.from_uri("mysql://root@127.0.0.1/") == UpstreamConfig("127.0.0.1", 3306, "root", "")


def test_from_uri_takes_several_servers_of_one_topology():
    cfg = UpstreamConfig.from_uri("mysql://cdc:pw@db1:3307,DB2,[::1]:3308/")
    assert (cfg.host, cfg.port, cfg.others) == ("db1", 3307, (("db2", 3306), ("::1", 3308)))
    assert cfg.masked_uri() == "mysql://cdc:xxxxx@db1:3307,db2:3306,[::1]:3308/"
    assert [s.address for s in cfg.servers()] == ["db1:3307", "db2:3306", "[::1]:3308"]
    assert all(s.password == "pw" and not s.others for s in cfg.servers())
    assert pickle.loads(pickle.dumps(cfg)) == cfg


@pytest.mark.parametrize("uri", ["kafka://h:1/", "mysql:///", "mysql://root@/", "mysql://root@h1,,h2/",
                                 "mysql://root@h1:x/", "mysql://root@h1,h1:3306/"])
def test_from_uri_rejects(uri):
    with pytest.raises(ErrUpstreamURIInvalid):
        UpstreamConfig.from_uri(uri)


def test_binlog_range_pickles_without_connecting():
    from sparkcdc.model.position import BinlogPosition
    from sparkcdc.upstream.range_reader import BinlogRange

    rng = BinlogRange(UpstreamConfig("h", 1), 7, BinlogPosition("mysql-bin.000001", 4),
                      BinlogPosition("mysql-bin.000002", 9), (1, 2), {"db.t": "{}"})
    assert pickle.loads(pickle.dumps(rng)) == rng


def test_an_unreachable_upstream_fails_a_range_read_with_a_retryable_connection_error():
    import pymysql

    from sparkcdc.model.position import BinlogPosition
    from sparkcdc.sink.mysql.error_codes import is_retryable_message
    from sparkcdc.testing.ports import free_port
    from sparkcdc.upstream.range_reader import _ReplicationDump

    with pytest.raises(pymysql.err.OperationalError) as raised:
        _ReplicationDump(UpstreamConfig("127.0.0.1", free_port()), 7, BinlogPosition("mysql-bin.000001", 4))
    assert raised.value.args[0] == 2003 and is_retryable_message(str(raised.value))
