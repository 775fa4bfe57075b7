"""The binlog puller follows a failover of real MariaDB servers by GTID, and refuses the ones that
would lose or invent data (upstream/switchover.py, issue 23)."""

from __future__ import annotations

import itertools

import pytest

from sparkcdc.errors import ErrBinlogPurged, ErrUpstreamDiverged, ErrUpstreamFailoverConfig
from sparkcdc.testing.ha import wait_until
from sparkcdc.testing.mariadb import MariaDBServer, binlog_gtids
from sparkcdc.upstream.connection import UpstreamConfig
from sparkcdc.upstream.puller import FAILED, RUNNING, Puller
from sparkcdc.upstream.range_reader import BinlogRange, read_range
from sparkcdc.upstream.txn_index import TxnIndex

pytestmark = pytest.mark.integration

_server_ids = itertools.count(4800)
REPLICA = {"server-id": "2", "log_slave_updates": "ON", "gtid_strict_mode": "ON"}


@pytest.fixture
def topology(tmp_path_factory):
    """start(replica_config) -> (primary, replica replicating from it), both stopped at the end."""
    started: list[MariaDBServer] = []

    def start(replica_config: dict = REPLICA) -> tuple[MariaDBServer, MariaDBServer]:
        primary = MariaDBServer(str(tmp_path_factory.mktemp("primary")),
                                extra_config={"log_slave_updates": "ON", "gtid_strict_mode": "ON"}).start()
        replica = MariaDBServer(str(tmp_path_factory.mktemp("replica")), extra_config=replica_config).start()
        started.extend([primary, replica])
        replica.replicate_from(primary)
        run(primary, "CREATE DATABASE fo", "CREATE TABLE fo.t (id INT PRIMARY KEY, v VARCHAR(64))")
        replica.wait_replicated(primary)
        return primary, replica

    yield start
    for server in started:
        server.stop()


def run(server: MariaDBServer, *statements: str) -> None:
    conn = server.connect()
    try:
        with conn.cursor() as cur:
            for statement in statements:
                cur.execute(statement)
    finally:
        conn.close()


def inserts(first: int, count: int) -> list[str]:
    return [f"INSERT INTO fo.t VALUES ({i}, 'row {i}')" for i in range(first, first + count)]


def puller_on(servers: list[MariaDBServer], index: TxnIndex, needed_from=lambda: None) -> Puller:
    uri = "mysql://root@" + ",".join(f"127.0.0.1:{s.port}" for s in servers) + "/"
    return Puller(UpstreamConfig.from_uri(uri), index, next(_server_ids), heartbeat_seconds=0.2,
                  needed_from=needed_from).start()


def failed_with(puller: Puller, code) -> str:
    wait_until(lambda: puller.health().state == FAILED, 60, "the puller to refuse the failover")
    error = puller.health().error
    assert isinstance(error, code), error
    return error.message


def test_the_puller_follows_a_promoted_replica_by_gtid_and_remaps_what_changefeeds_need(topology, tmp_path):
    primary, replica = topology()
    index = TxnIndex(str(tmp_path / "index.sqlite"))
    puller = puller_on([primary, replica], index)
    try:
        puller.wait_caught_up(30)
        run(primary, *inserts(0, 5))
        wait_until(lambda: index.txns_between(index.first_ts(), index.resolved_ts()).__len__() == 5, 30,
                   "the primary's transactions, held until the replica has them, resolved")
        first = index.txns_between(index.first_ts(), index.resolved_ts())
        assert all(t.epoch == 0 for t in first)
        puller.needed_from = lambda: first[1].commit_ts  # a changefeed's checkpoint after the second
        replica.wait_replicated(primary)
        primary.kill()
        replica.promote()
        run(replica, *inserts(100, 3))
        wait_until(lambda: puller.health().state == RUNNING and puller.health().epoch == 1
                   and index.last_txn().gtid == replica.gtid_binlog_pos(), 60, "the switch to the new primary")
        health = puller.health()
        assert health.server == f"127.0.0.1:{replica.port}" and health.epoch == 1

        txns = index.txns_between(index.first_ts(), index.resolved_ts())
        assert [t.gtid for t in txns] == [t.gtid for t in first] + ["0-2-8", "0-2-9", "0-2-10"]
        assert all(a.commit_ts < b.commit_ts for a, b in zip(txns, txns[1:])), "commit-ts go on increasing"
        # Positions after the checkpoint are the new primary's (re-mapped), those before stay the old one's.
        assert [t.epoch for t in txns] == [0, 0, 1, 1, 1, 1, 1, 1]
        assert txns[2].breaks and not any(t.breaks for t in txns[3:])
        in_binlog = binlog_gtids(replica.connect(), txns[2].start)
        assert in_binlog == [t.gtid for t in txns[2:]]
        # A range over re-mapped and new transactions reads from the new primary.
        tables = {f"{t.schema}.{t.table}": t.to_json() for t in index.tables_at(txns[2].commit_ts)}
        rows = read_range(BinlogRange(UpstreamConfig.from_uri(replica.uri), next(_server_ids), txns[2].start,
                                      txns[-1].end, tuple(t.commit_ts for t in txns[2:]), tables))
        assert [r.after[0] for r in rows] == ["2", "3", "4", "100", "101", "102"]
    finally:
        puller.stop()


def test_a_replica_without_log_slave_updates_is_refused(topology, tmp_path):
    primary, replica = topology({"server-id": "2", "log_slave_updates": "OFF"})
    index = TxnIndex(str(tmp_path / "index.sqlite"))
    puller = puller_on([primary, replica], index)
    try:
        puller.wait_caught_up(30)
        run(primary, *inserts(0, 2))
        puller.wait_caught_up(30)
        replica.wait_replicated(primary)
        primary.kill()
        replica.promote()
        message = failed_with(puller, ErrUpstreamFailoverConfig)
        assert "log_slave_updates=OFF" in message and "Promote a replica that replicated" in message
        assert index.current_source().epoch == 0, "a refused switch records no new server"
    finally:
        puller.stop()


def test_a_new_primary_whose_binlog_was_purged_is_refused(topology, tmp_path):
    primary, replica = topology()
    index = TxnIndex(str(tmp_path / "index.sqlite"))
    puller = puller_on([primary, replica], index)
    try:
        puller.wait_caught_up(30)
        run(primary, *inserts(0, 3))
        replica.wait_replicated(primary)
        puller.wait_caught_up(30)
        oldest_needed = index.txns_between(index.first_ts(), index.resolved_ts())[0]
        puller.needed_from = lambda: oldest_needed.commit_ts - 1  # a changefeed still before them all
        oldest = replica.purge_binlogs()  # before the failover: the puller switches as soon as it can
        primary.kill()
        replica.promote()
        run(replica, *inserts(100, 1))
        message = failed_with(puller, ErrBinlogPurged)
        assert f"its oldest binlog {oldest} begins after GTIDs" in message and "snapshot" in message
    finally:
        puller.stop()


def test_an_errant_transaction_on_the_new_primary_is_refused(topology, tmp_path):
    primary, replica = topology()
    index = TxnIndex(str(tmp_path / "index.sqlite"))
    puller = puller_on([primary, replica], index)
    try:
        puller.wait_caught_up(30)
        # Written on the replica directly, in a domain of its own: the old primary never had it.
        run(replica, "SET SESSION gtid_domain_id = 9", "INSERT INTO fo.t VALUES (900, 'errant')")
        run(primary, *inserts(0, 2))
        replica.wait_replicated(primary)
        puller.wait_caught_up(30)
        primary.kill()
        replica.promote()
        message = failed_with(puller, ErrUpstreamDiverged)
        assert "has transaction 9-2-1" in message and "which the old primary never had" in message
    finally:
        puller.stop()


def test_a_missing_transaction_is_refused_when_replicated_and_forgotten_when_not(topology, tmp_path):
    primary, replica = topology()
    run(replica, "STOP SLAVE SQL_THREAD")  # it receives, but its binlog gets nothing more
    # A puller that follows the primary alone resolves what the replica lacks; one told about the
    # replica holds resolved-ts back for it.
    index, held_index = TxnIndex(str(tmp_path / "alone.sqlite")), TxnIndex(str(tmp_path / "held.sqlite"))
    alone, held = puller_on([primary], index), puller_on([primary, replica], held_index)
    try:
        alone.wait_caught_up(30)
        held.wait_caught_up(30)
        run(primary, *inserts(0, 2))
        alone.wait_caught_up(30)
        held.wait_caught_up(30)
        assert index.last_txn().commit_ts <= index.resolved_ts()
        assert [t.gtid for t in held_index.txns_after(held_index.resolved_ts())] == ["0-1-3", "0-1-4"]
    finally:
        alone.stop()
        held.stop()
    primary.kill()
    # Promoted before it applied what it received: those transactions are lost upstream too.
    run(replica, "STOP SLAVE", "RESET SLAVE ALL", "SET GLOBAL read_only = 0", *inserts(100, 1))

    # a restart with another --upstream-uri; a changefeed needs everything since the index's start
    refused = puller_on([replica], index, needed_from=lambda: 0)
    try:
        message = failed_with(refused, ErrUpstreamDiverged)
        assert "lacks transactions the old primary had" in message and "0-1-3, 0-1-4" in message
    finally:
        refused.stop()
    forgetting = puller_on([replica], held_index)
    try:
        wait_until(lambda: forgetting.health().state == RUNNING and forgetting.health().epoch == 1, 60,
                   "the switch that forgets the unresolved transactions")
        forgetting.wait_caught_up(30)
        gtids = [t.gtid for t in held_index.txns_between(held_index.first_ts(), held_index.resolved_ts())]
        assert gtids == ["0-2-3"], gtids
    finally:
        forgetting.stop()
