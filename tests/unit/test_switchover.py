"""The switch's bookkeeping without servers (upstream/switchover.py): which server a read goes to,
and how re-mapped transactions are matched by GTID and written back (real servers:
tests/integration/test_failover.py)."""

from __future__ import annotations

import pytest

from sparkcdc.errors import ErrUpstreamDiverged
from sparkcdc.model.gtid import parse_state
from sparkcdc.model.position import BinlogPosition
from sparkcdc.upstream.connection import UpstreamConfig
from sparkcdc.upstream.switchover import Switch, followed_server
from sparkcdc.upstream.txn_index import TxnIndex, TxnRecord

URI = UpstreamConfig.from_uri("mysql://cdc:pw@db1:3306,db2:3307/")


def at(pos: int, file: str = "mysql-bin.000001") -> BinlogPosition:
    return BinlogPosition(file, pos)


@pytest.fixture
def index(tmp_path):
    index = TxnIndex(str(tmp_path / "index.sqlite"))
    index.bootstrap(at(100), 1000, [], gtid_state=parse_state("0-1-0"))
    index.append([TxnRecord(1000 + n, f"0-1-{n}", at(100 * n), at(100 * n + 100), 100, False) for n in (1, 2, 3)],
                 [], [], 1003)
    return index


def test_reads_go_to_the_server_the_index_follows_whatever_the_uris_order(index):
    first, epoch = followed_server(index, URI)
    assert (first.address, epoch) == ("db1:3306", 0), "no source recorded: the URI's first"
    index.record_source("db2", 3307, 2, None, "mariadb", new_epoch=False)
    server, epoch = followed_server(index, URI)
    assert (server.address, server.user, server.password, epoch) == ("db2:3307", "cdc", "pw", 0)
    index.record_source("db1", 3306, 1, None, "mariadb", new_epoch=True)
    assert [(s.address, e) for s, e in [followed_server(index, URI)]] == [("db1:3306", 1)]


def test_a_switch_moves_each_transaction_it_finds_by_gtid_and_refuses_another_one(index):
    index.record_source("db1", 3306, 1, None, "mariadb", new_epoch=False)
    source = index.record_source("db2", 3307, 2, None, "mariadb", new_epoch=True)
    assert source.epoch == 1
    pending = {(t.gtid, False): t for t in index.txns_after(1001)}
    switch = Switch(index, URI.at("db2", 3307), source, parse_state("0-1-1"), pending, {1002: None, 1003: 1002})
    switch.match("0-1-2", False, at(4, "b.000001"), at(50, "b.000001"), ())
    with pytest.raises(ErrUpstreamDiverged, match="has transaction 9-2-1 .* which the old primary never had"):
        switch.match("9-2-1", False, at(50, "b.000001"), at(90, "b.000001"), ())
    switch.match("0-1-3", False, at(90, "b.000001"), at(140, "b.000001"), ())
    assert switch.done and not switch.next_breaks()
    moved = index.txns_after(1000)
    assert [(t.epoch, str(t.start), t.breaks) for t in moved] == [
        (0, "mysql-bin.000001:100", False), (1, "b.000001:4", True), (1, "b.000001:90", False)]
    assert [t.commit_ts for t in moved] == [1001, 1002, 1003], "commit-ts kept"
