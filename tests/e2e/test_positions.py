"""Positions belong to the upstream (issues 19 item 6 and 23), end to end against real MariaDB.

Back-fill: a downstream loaded from `mariadb-dump --single-transaction --master-data=2 --gtid` of
an upstream whose binlog predates the sparkcdc server (with an ALTER between the dump and the
server's start), then a changefeed created at the dump's GTID: the downstream equals the upstream
afterwards. A start whose binlog was purged is refused with its coded error, naming the oldest
position left and the fix, and the server goes on.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time

import pytest

from sparkcdc.testing.compare import wait_tables_equal
from sparkcdc.testing.mariadb import MariaDBServer
from sparkcdc.testing.server_process import ServerProcess
from sparkcdc.testing.workload import Workload

pytestmark = pytest.mark.e2e

TABLES = ["customers", "orders", "items", "finish_mark"]


@pytest.fixture(scope="module")
def primary(tmp_path_factory):
    """This module's upstream: its binlog is purged, and (issue 23) it is killed."""
    server = MariaDBServer(str(tmp_path_factory.mktemp("primary"))).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def downstream(tmp_path_factory):
    server = MariaDBServer(str(tmp_path_factory.mktemp("downstream"))).start()
    yield server
    server.stop()


def dump_into(upstream: MariaDBServer, downstream: MariaDBServer, database: str, path) -> dict[str, str]:
    """`mariadb-dump --single-transaction --master-data=2 --gtid` of `database`, loaded into the
    downstream; returns the positions the dump names: {"gtid": ..., "position": "FILE:POS"}."""
    with open(path, "w") as out:
        subprocess.run(["mariadb-dump", "-h127.0.0.1", f"-P{upstream.port}", "-uroot", "--single-transaction",
                        "--master-data=2", "--gtid", "--databases", database], stdout=out, check=True, timeout=120)
    text = path.read_text(encoding="latin-1")  # binary column values
    gtid = re.search(r"SET GLOBAL gtid_slave_pos='([^']*)'", text).group(1)
    match = re.search(r"MASTER_LOG_FILE='([^']+)', MASTER_LOG_POS=(\d+)", text)
    with open(path) as dump:
        subprocess.run(["mariadb", "-h127.0.0.1", f"-P{downstream.port}", "-uroot"], stdin=dump, check=True,
                       timeout=120)
    return {"gtid": gtid, "position": f"{match.group(1)}:{match.group(2)}"}


def test_a_changefeed_starts_at_a_dumps_gtid_from_before_the_server_existed(primary, downstream, tmp_path):
    began = time.monotonic()
    database = "e2e_pos_dump"
    workload = Workload(primary.connect(), database, seed=19)
    workload.create_tables()
    workload.run(30)
    dumped = dump_into(primary, downstream, database, tmp_path / "dump.sql")
    workload.run(30)
    with workload.conn.cursor() as cur:
        cur.execute(f"ALTER TABLE {database}.orders ADD COLUMN audit VARCHAR(20) NULL DEFAULT 'after-dump'")
    workload.run(20)
    server = ServerProcess(str(tmp_path / "cdc"), primary.uri).start()
    try:
        workload.run(10)  # indexed by the server itself
        server.cli("changefeed", "create", "-c", "from-dump", "--start-ts", dumped["gtid"],
                   "--sink-uri", f"mysql://root@127.0.0.1:{downstream.port}/?worker-count=2")
        workload.run(20)
        workload.finish()
        wait_tables_equal(primary.connect(), downstream.connect(), database, TABLES, timeout=240)
        replicated = time.monotonic() - began

        # A start the upstream no longer has: refused with its code, the oldest position and the
        # fix; the server and its changefeed go on.
        oldest = primary.purge_binlogs()
        refused = server.cli("changefeed", "create", "-c", "too-old", "--start-ts", "0-1-1",
                             "--sink-uri", f"mysql://root@127.0.0.1:{downstream.port}/", check=False)
        assert refused.returncode != 0 and "[SPARKCDC:ErrBinlogPurged]" in refused.stderr, refused.stderr
        assert f"its oldest binlog {oldest} begins after GTIDs" in refused.stderr, refused.stderr
        assert '[snapshot] mode = "initial"' in refused.stderr and "Traceback" not in refused.stderr
        listed = {cf["id"]: cf["summary"]["state"] for cf in json.loads(server.cli("changefeed", "list").stdout)}
        assert listed == {"from-dump": "normal"}, listed
        workload.run(5)
        workload.finish(2)
        wait_tables_equal(primary.connect(), downstream.connect(), database, TABLES, timeout=120)
    finally:
        print(f"dump start: replicated after {replicated if 'replicated' in dir() else -1:.0f}s, total "
              f"{time.monotonic() - began:.0f}s, load average {os.getloadavg()[0]:.1f}")
        server.stop()
