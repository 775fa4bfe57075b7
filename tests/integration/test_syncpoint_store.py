"""Syncpoint rows in a real MariaDB: TiCDC's table (plus upstream_position) created by the sink,
one row per syncpoint even when a batch is replayed, old rows removed after the retention, and a
table TiCDC created gets the extra column."""

from __future__ import annotations

import time

import pytest

from sparkcdc.config.replica import ReplicaConfig
from sparkcdc.model.tso import compose
from sparkcdc.sink.mysql.syncpoint import SyncpointWriter

pytestmark = pytest.mark.integration


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def rows(conn, changefeed):
    with conn.cursor() as cur:
        cur.execute("SELECT ticdc_cluster_id, changefeed, primary_ts, secondary_ts, upstream_position "
                    "FROM tidb_cdc.syncpoint_v1 WHERE changefeed = %s ORDER BY primary_ts", (changefeed,))
        return cur.fetchall()


def test_syncpoints_are_recorded_once_and_expire_after_the_retention(mariadb_factory):
    downstream = mariadb_factory()
    clock = FakeClock()
    writer = SyncpointWriter(downstream.uri, ReplicaConfig(), "east", "orders", 600, 3600, clock=clock)
    primary = compose(int(time.time() * 1000) - 5000)
    writer.record(primary, "mysql-bin.000003:1234")
    writer.record(primary, "mysql-bin.000003:1234")  # a replayed batch
    conn = downstream.connect()
    (recorded,) = rows(conn, "orders")
    assert recorded[:3] == ("east", "orders", str(primary)) and recorded[4] == "mysql-bin.000003:1234"
    # secondary_ts on MariaDB: the downstream clock as a TSO, after the upstream commit.
    assert int(recorded[3]) > primary and abs((int(recorded[3]) >> 18) - time.time() * 1000) < 60_000
    with conn.cursor() as cur:
        cur.execute("INSERT INTO tidb_cdc.syncpoint_v1 (ticdc_cluster_id, changefeed, primary_ts, secondary_ts, "
                    "created_at) VALUES ('east', 'orders', '1', '1', NOW() - INTERVAL 2 HOUR)")
        cur.execute("INSERT INTO tidb_cdc.syncpoint_v1 (ticdc_cluster_id, changefeed, primary_ts, secondary_ts, "
                    "created_at) VALUES ('east', 'other', '1', '1', NOW() - INTERVAL 2 HOUR)")
    writer.record(primary + 1, None)  # retention not reached on the writer's clock: nothing removed
    assert len(rows(conn, "orders")) == 3
    clock.now = 3600
    writer.record(primary + 2, None)
    assert [r[2] for r in rows(conn, "orders")] == [str(primary), str(primary + 1), str(primary + 2)]
    assert len(rows(conn, "other")) == 1  # another changefeed's rows are its own business
    writer.close()


def test_a_table_ticdc_created_gets_the_position_column(mariadb_factory):
    downstream = mariadb_factory()
    conn = downstream.connect()
    with conn.cursor() as cur:
        cur.execute("CREATE DATABASE tidb_cdc")
        cur.execute("CREATE TABLE tidb_cdc.syncpoint_v1 (ticdc_cluster_id varchar(255), changefeed varchar(255), "
                    "primary_ts varchar(18), secondary_ts varchar(18), created_at timestamp NOT NULL DEFAULT "
                    "CURRENT_TIMESTAMP, INDEX (created_at), PRIMARY KEY (changefeed, primary_ts))")
    writer = SyncpointWriter(downstream.uri, ReplicaConfig(), "default", "cf", 600, 86400)
    writer.record(compose(1_700_000_000_000), "mysql-bin.000001:4")
    assert rows(conn, "cf")[0][4] == "mysql-bin.000001:4"
    writer.close()
