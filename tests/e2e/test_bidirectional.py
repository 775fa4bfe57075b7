"""Bidirectional replication (issue 24) between two real MariaDB primaries, A and B, each read by
its own sparkcdc server (a server has one upstream): changefeed a-to-b on A's server (bdr-role
primary, redo log on) and b-to-a on B's server (bdr-role secondary). B also has a native replica
(log_slave_updates), which must get what A's changefeed applied on B.

The module's servers and changefeeds are shared; each test writes its own database or table:
- bad configs are refused at creation: bdr-mode on a Kafka sink, a sink user who cannot write;
- concurrent workloads on disjoint keys (A writes odd ids, B even ones): inserts, updates,
  deletes, multi-statement transactions over two tables, and A's replicable ADD COLUMN that B's
  writes then use; both databases and B's replica end equal to the union of what was written,
  and an idle period after shows no echo: neither binlog grows, neither changefeed's row counter
  moves, while their checkpoints do;
- the same with A's server SIGKILLed mid-workload and restarted;
- writes to the same keys on both sides at once end as docs/bidirectional-replication.md says.
B's replica must equal A and B whenever they are compared. After each workload, every row in a transaction a binlog marks skip_replication (read by
MariaDB's mariadb-binlog, not by sparkcdc's puller) has the other side's key: nothing written
on a side ever came back to it, and everything the other side wrote arrived.
"""

from __future__ import annotations

import os
import random
import re
import shutil
import subprocess
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest
from prometheus_client.parser import text_string_to_metric_families

from sparkcdc.model import tso
from sparkcdc.testing.compare import diff_tables, read_upstream_table
from sparkcdc.testing.ha import wait_until
from sparkcdc.testing.mariadb import MariaDBServer
from sparkcdc.testing.server_process import ApiError, ServerProcess

pytestmark = pytest.mark.e2e

A_TO_B, B_TO_A = "a-to-b", "b-to-a"
# From the last write to both databases holding it, on a machine at load 15-40.
CONVERGE_SECONDS = 300.0
IDLE_SECONDS = 10.0


class Topology:
    """The two primaries, B's replica, and the two sparkcdc servers."""

    def __init__(self, a: MariaDBServer, b: MariaDBServer, replica: MariaDBServer, server_a: ServerProcess,
                 server_b: ServerProcess):
        self.a, self.b, self.replica = a, b, replica
        self.server_a, self.server_b = server_a, server_b

    def server_of(self, changefeed: str) -> ServerProcess:
        return self.server_a if changefeed == A_TO_B else self.server_b

    def describe(self) -> str:
        """Both changefeeds' states, for failure messages."""
        parts = []
        for changefeed in (A_TO_B, B_TO_A):
            try:
                info = self.server_of(changefeed).api("GET", f"/api/v2/changefeeds/{changefeed}", timeout=30)
                parts.append(f"{changefeed}: {info['state']} {info.get('error')}")
            except (OSError, ApiError) as exc:
                parts.append(f"{changefeed}: {exc}")
        return "; ".join(parts)

    def wait_caught_up(self, timeout: float = CONVERGE_SECONDS) -> None:
        """Until both changefeeds' checkpoints pass now (every write before this call)."""
        now = tso.compose(int(time.time() * 1000))
        for changefeed in (A_TO_B, B_TO_A):
            wait_until(lambda: self.server_of(changefeed).checkpoint(changefeed) > now, timeout,
                       f"{changefeed}'s checkpoint to pass the writes ({self.describe()})", interval=0.5)


def _start_replica(replica: MariaDBServer, primary: MariaDBServer) -> None:
    """`replica` replicates `primary` natively, by GTID, logging what it applies."""
    with primary.connect() as conn, conn.cursor() as cur:
        cur.execute("CREATE USER 'repl'@'%' IDENTIFIED BY 'repl'")
        cur.execute("GRANT REPLICATION SLAVE ON *.* TO 'repl'@'%'")
    with replica.connect() as conn, conn.cursor() as cur:
        cur.execute(f"CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT={primary.port}, MASTER_USER='repl', "
                    "MASTER_PASSWORD='repl', MASTER_USE_GTID=current_pos")
        cur.execute("START SLAVE")


def _create_changefeed(server: ServerProcess, changefeed: str, downstream: MariaDBServer, role: str,
                       redo_dir: str | None = None) -> None:
    config: dict = {"bdr_mode": True, "bdr_role": role}
    if redo_dir is not None:
        config["consistent"] = {"level": "eventual", "storage": f"file://{redo_dir}"}
    server.api("POST", "/api/v2/changefeeds", {"changefeed_id": changefeed, "sink_uri": downstream.uri,
                                               "replica_config": config})


@pytest.fixture(scope="module")
def topology(tmp_path_factory):
    base = tmp_path_factory.mktemp("bdr")
    a = MariaDBServer(str(base / "a"), extra_config={"server-id": "1"}).start()
    b = MariaDBServer(str(base / "b"), extra_config={"server-id": "2"}).start()
    replica = MariaDBServer(str(base / "b-replica"), extra_config={"server-id": "3", "log_slave_updates": "ON"}).start()
    servers: list[ServerProcess] = []
    try:
        _start_replica(replica, b)
        server_a = ServerProcess(str(base / "cdc-a"), a.uri)
        server_b = ServerProcess(str(base / "cdc-b"), b.uri)
        servers += [server_a, server_b]
        with ThreadPoolExecutor(2) as pool:  # two Spark sessions start side by side
            list(pool.map(lambda server: server.start(timeout=300), servers))
        _create_changefeed(server_a, A_TO_B, b, "primary", redo_dir=str(base / "redo"))
        _create_changefeed(server_b, B_TO_A, a, "secondary")
        topology = Topology(a, b, replica, server_a, server_b)
        topology.wait_caught_up()
        yield topology
    finally:
        for server in servers:
            server.stop()
        for mariadb in (replica, b, a):
            mariadb.stop()


# -- workloads -----------------------------------------------------------------------------------

SCHEMA = (
    "CREATE TABLE {db}.accounts (id INT PRIMARY KEY, balance INT NOT NULL, note VARCHAR(32) NULL)",
    "CREATE TABLE {db}.ledger (id INT PRIMARY KEY, account INT NOT NULL, amount INT NOT NULL)",
)
TABLES = ("accounts", "ledger")


class SideWriter(threading.Thread):
    """Writes one side's keys (ids with `parity`) of `database` on `server` until `stop` is set
    after at least `steps` steps, keeping a model of every row it wrote. Optionally runs `ddl`
    after `ddl_after` steps, and from then (once the server has the column) writes `tag`."""

    def __init__(self, server: MariaDBServer, database: str, parity: int, seed: int, steps: int,
                 stop: threading.Event, ddl: str | None = None, ddl_after: int = 0):
        super().__init__(name=f"writer-{database}-{parity}", daemon=True)
        self.connection = server.connect()
        self.database, self.parity, self.steps, self.stop = database, parity, steps, stop
        self.random = random.Random(seed)
        self.ddl, self.ddl_after = ddl, ddl_after
        self.model: dict[str, dict[int, dict]] = {table: {} for table in TABLES}
        self.touched: dict[str, set[int]] = {table: set() for table in TABLES}  # every id it wrote
        self.next_id = parity
        self.tagged = False
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            done = 0
            while done < self.steps or not self.stop.is_set():
                if self.ddl is not None and done == self.ddl_after:
                    self.execute(self.ddl)
                if not self.tagged and done % 10 == 0:
                    self.tagged = self.has_tag_column()
                self.step()
                done += 1
                time.sleep(0.02)
        except BaseException as exc:  # reported by the test
            self.error = exc
        finally:
            self.connection.close()

    def execute(self, sql: str, args=None) -> None:
        with self.connection.cursor() as cur:
            cur.execute(sql, args)

    def has_tag_column(self) -> bool:
        with self.connection.cursor() as cur:
            cur.execute("SELECT 1 FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = %s AND TABLE_NAME = 'accounts' "
                        "AND COLUMN_NAME = 'tag'", (self.database,))
            return cur.fetchone() is not None

    def new_id(self) -> int:
        self.next_id += 2
        return self.next_id

    def step(self) -> None:
        accounts = self.model["accounts"]
        choice = self.random.random()
        if choice < 0.35 or len(accounts) < 3:
            self.insert_account()
        elif choice < 0.6:
            self.update_account(self.random.choice(sorted(accounts)))
        elif choice < 0.75:
            self.delete_account(self.random.choice(sorted(accounts)))
        else:  # a multi-statement transaction over both tables
            self.execute("BEGIN")
            # No key twice in one transaction: the sink nets each key to one change per transaction.
            doomed = self.random.choice(sorted(self.model["ledger"])) if self.model["ledger"] else None
            account = self.random.choice(sorted(accounts))
            amount = self.random.randint(-50, 50)
            self.write("ledger", self.new_id(), {"account": account, "amount": amount}, insert=True)
            self.write("accounts", account, {**accounts[account], "balance": accounts[account]["balance"] + amount})
            if self.random.random() < 0.5:
                self.insert_account()
            if doomed is not None and self.random.random() < 0.3:
                self.delete("ledger", doomed)
            self.execute("COMMIT")

    def insert_account(self) -> None:
        values = {"balance": self.random.randint(0, 1000), "note": self.random.choice([None, "n", "x" * 20])}
        if self.tagged:
            values["tag"] = self.random.choice([None, f"t{self.parity}"])
        self.write("accounts", self.new_id(), values, insert=True)

    def update_account(self, account: int) -> None:
        values = {**self.model["accounts"][account], "balance": self.random.randint(0, 1000)}
        if self.tagged:
            values["tag"] = f"u{self.parity}"
        self.write("accounts", account, values)

    def delete_account(self, account: int) -> None:
        self.delete("accounts", account)

    def write(self, table: str, key: int, values: dict, insert: bool = False) -> None:
        columns = list(values)
        if insert:
            self.execute(f"INSERT INTO `{self.database}`.`{table}` (id, {', '.join(columns)}) VALUES "
                         f"(%s{', %s' * len(columns)})", (key, *values.values()))
        else:
            self.execute(f"UPDATE `{self.database}`.`{table}` SET {', '.join(f'{c} = %s' for c in columns)} "
                         "WHERE id = %s", (*values.values(), key))
        self.model[table][key] = dict(values)
        self.touched[table].add(key)

    def delete(self, table: str, key: int) -> None:
        self.execute(f"DELETE FROM `{self.database}`.`{table}` WHERE id = %s", (key,))
        del self.model[table][key]
        self.touched[table].add(key)


def expected_rows(writers: list[SideWriter], table: str, columns: list[str]) -> dict:
    """The union of what the writers wrote, as read_upstream_table shows it."""
    rows = {}
    for writer in writers:
        for key, values in writer.model[table].items():
            row = {column: None for column in columns}
            row.update({"id": str(key), **{c: None if v is None else str(v) for c, v in values.items()}})
            rows[(str(key),)] = row
    return rows


def wait_converged(topology: Topology, database: str, writers: list[SideWriter]) -> None:
    """Until A, B and B's replica each hold exactly the union of the writers' rows."""
    def differences() -> list[str]:
        problems = []
        for name, server in (("A", topology.a), ("B", topology.b), ("B's replica", topology.replica)):
            with server.connect() as conn:
                for table in TABLES:
                    try:
                        actual = read_upstream_table(conn, database, table)
                    except Exception as exc:  # noqa: BLE001 - not there yet
                        problems.append(f"{name} {table}: {exc}")
                        continue
                    columns = sorted({column for row in actual.values() for column in row} or {"id"})
                    problems += [f"{name} {table}: {p}" for p in diff_tables(expected_rows(writers, table, columns),
                                                                             actual)]
        return problems

    deadline = time.monotonic() + CONVERGE_SECONDS
    while problems := differences():
        if time.monotonic() > deadline:
            raise AssertionError(f"{database} did not converge in {CONVERGE_SECONDS:.0f}s ({topology.describe()}):\n"
                                 + "\n".join(problems[:20]))
        time.sleep(2)


def run_writers(topology: Topology, database: str, steps: int, during=None, ddl: str | None = None) -> list[SideWriter]:
    """A and B write their own keys of `database` at once (`during()` runs meanwhile), then both
    databases (and B's replica) must hold the union of their writes."""
    stop = threading.Event()
    writer_a = SideWriter(topology.a, database, 1, seed=1, steps=steps, stop=stop, ddl=ddl, ddl_after=steps // 3)
    writer_b = SideWriter(topology.b, database, 0, seed=2, steps=steps, stop=stop)
    writers = [writer_a, writer_b]
    for writer in writers:
        writer.start()
    try:
        if during is not None:
            during()
        if ddl is not None:
            # B writes on until the primary's column has reached it, however long a loaded
            # machine takes to replicate the DDL (its own steps may all be done before that).
            wait_until(lambda: writer_b.tagged or not writer_b.is_alive(), CONVERGE_SECONDS,
                       "B to see the primary's DDL", interval=0.5)
    finally:
        stop.set()
        for writer in writers:
            writer.join(CONVERGE_SECONDS)
    for writer in writers:
        assert writer.error is None, f"{writer.name}: {writer.error!r}"
    wait_converged(topology, database, writers)
    return writers


def create_database(topology: Topology, database: str) -> None:
    """On the primary A only: its CREATE DATABASE and CREATE TABLEs are replicable, a-to-b takes them to B."""
    with topology.a.connect() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{database}`")
        for statement in SCHEMA:
            cur.execute(statement.format(db=f"`{database}`"))
    for table in TABLES:
        wait_until(lambda: _table_exists(topology.b, database, table), CONVERGE_SECONDS,
                   f"{database}.{table} on B ({topology.describe()})", interval=1)


def _table_exists(server: MariaDBServer, database: str, table: str) -> bool:
    with server.connect() as conn, conn.cursor() as cur:
        cur.execute("SELECT 1 FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s",
                    (database, table))
        return cur.fetchone() is not None


# -- the loop check: marked rows in each binlog, and the quiet of an idle period -------------------

_MARK = re.compile(r"SET skip_replication=([01])")
_ROWS = re.compile(r"^### (?:INSERT INTO|UPDATE|DELETE FROM) `([^`]+)`\.`([^`]+)`")
_KEY = re.compile(r"^###   @1=(-?\d+)")  # every table here has its key `id` first


def marked_row_ids(server: MariaDBServer, database: str) -> dict[str, set[int]]:
    """The ids of the rows of each table of `database` in the transactions `server`'s binlog marks
    skip_replication, as MariaDB's own mariadb-binlog prints them (it writes `SET
    skip_replication=1` where the flag of the events it prints turns on, and `=0` where it turns off)."""
    with open(os.path.join(server.datadir, "mysql-bin.index")) as index:
        files = [os.path.join(server.datadir, os.path.basename(line.strip())) for line in index if line.strip()]
    text = subprocess.run([shutil.which("mariadb-binlog") or "mysqlbinlog", "--verbose", "--base64-output=decode-rows",
                           *files], capture_output=True, text=True, check=True, timeout=300).stdout
    ids: dict[str, set[int]] = {}
    marked, table = False, None
    for line in text.splitlines():
        if mark := _MARK.search(line):
            marked = mark.group(1) == "1"
        elif rows := _ROWS.match(line):
            table = rows.group(2) if rows.group(1) == database else None
        elif marked and table is not None and (key := _KEY.match(line)):
            ids.setdefault(table, set()).add(int(key.group(1)))
    return ids


def assert_no_change_came_back(topology: Topology, database: str, writers: list[SideWriter]) -> None:
    """A's binlog marks exactly the rows B wrote (even ids), B's exactly those A wrote (odd ids)."""
    writer_a, writer_b = writers
    for server, other in ((topology.a, writer_b), (topology.b, writer_a)):
        marked = marked_row_ids(server, database)
        for table in TABLES:
            own = {key for key in marked.get(table, set()) if key % 2 != other.parity}
            assert not own, f"{table}: rows written on this side came back to it marked: {sorted(own)[:10]}"
            assert marked.get(table, set()) == other.touched[table], f"{table}: the other side's writes did not all arrive"


def binlog_end(server: MariaDBServer) -> tuple:
    with server.connect() as conn, conn.cursor() as cur:
        cur.execute("SHOW MASTER STATUS")
        return tuple(cur.fetchone()[:2])


def rows_written(server: ServerProcess, changefeed: str) -> float:
    """The changefeed's row counter: ticdc_sink_batch_row_count's sum, from /metrics."""
    with urllib.request.urlopen(server.url + "/metrics", timeout=60) as response:
        text = response.read().decode()
    return sum(sample.value for family in text_string_to_metric_families(text) for sample in family.samples
               if sample.name == "ticdc_sink_batch_row_count_sum" and sample.labels.get("changefeed") == changefeed)


def assert_idle_is_quiet(topology: Topology) -> None:
    """With nothing written, nothing is: both binlogs and both row counters stand still for
    IDLE_SECONDS while both checkpoints move (the changefeeds run)."""
    topology.wait_caught_up()
    before = {"A": binlog_end(topology.a), "B": binlog_end(topology.b),
              A_TO_B: rows_written(topology.server_a, A_TO_B), B_TO_A: rows_written(topology.server_b, B_TO_A)}
    time.sleep(IDLE_SECONDS)
    after = {"A": binlog_end(topology.a), "B": binlog_end(topology.b),
             A_TO_B: rows_written(topology.server_a, A_TO_B), B_TO_A: rows_written(topology.server_b, B_TO_A)}
    assert after == before, f"writes while idle: {before} -> {after}"
    assert before[A_TO_B] > 0 and before[B_TO_A] > 0, "the row counters never counted the workload"
    topology.wait_caught_up(60)  # and both checkpoints moved past the idle period


# -- the tests -----------------------------------------------------------------------------------

def test_bad_configs_are_refused_at_creation(topology):
    database = "bdr_refused"
    create_database(topology, database)
    with pytest.raises(ApiError) as kafka:
        topology.server_b.api("POST", "/api/v2/changefeeds", {
            "changefeed_id": "bdr-kafka", "sink_uri": "kafka://127.0.0.1:9/t?protocol=canal-json",
            "replica_config": {"bdr_mode": True}})
    assert "SPARKCDC:ErrSinkURIInvalid" in kafka.value.body and "bdr-mode works only with MySQL sinks" in kafka.value.body
    with topology.a.connect() as conn, conn.cursor() as cur:
        cur.execute("CREATE USER 'reader'@'%' IDENTIFIED BY 'reader-pw'")
        cur.execute(f"GRANT SELECT ON `{database}`.* TO 'reader'@'%'")
    with pytest.raises(ApiError) as privilege:
        topology.server_b.api("POST", "/api/v2/changefeeds", {
            "changefeed_id": "bdr-reader", "sink_uri": f"mysql://reader:reader-pw@127.0.0.1:{topology.a.port}/",
            "replica_config": {"bdr_mode": True, "filter": {"rules": [f"{database}.*"]}}})
    body = privilege.value.body
    assert "SPARKCDC:ErrBDRDownstreamPrivilege" in body and f"{database}.accounts" in body and "reader-pw" not in body
    listed = topology.server_b.api("GET", "/api/v2/changefeeds")["items"]
    assert [item["id"] for item in listed] == [B_TO_A]


def test_concurrent_writes_on_both_sides_converge_and_idle_is_quiet(topology):
    database = "bdr_concurrent"
    create_database(topology, database)
    # A (the primary) adds a column a third of the way; B's writer uses it once B has it.
    writers = run_writers(topology, database, steps=150,
                          ddl=f"ALTER TABLE `{database}`.accounts ADD COLUMN tag VARCHAR(16) NULL")
    assert writers[1].tagged, "B never saw the primary's ADD COLUMN"
    assert_no_change_came_back(topology, database, writers)
    assert_idle_is_quiet(topology)


def test_a_server_killed_mid_workload_loses_and_echoes_nothing(topology):
    """A's server (a-to-b, with its redo log) is SIGKILLed while both sides write, and restarted."""
    database = "bdr_killed"
    create_database(topology, database)

    def kill_and_restart() -> None:
        started = topology.server_a.checkpoint(A_TO_B)
        wait_until(lambda: topology.server_a.checkpoint(A_TO_B) > started, CONVERGE_SECONDS,
                   "a-to-b to move before the kill", interval=0.5)
        topology.server_a.kill()
        time.sleep(2)  # both sides keep writing meanwhile
        topology.server_a.start(timeout=300)

    writers = run_writers(topology, database, steps=100, during=kill_and_restart)
    assert_no_change_came_back(topology, database, writers)
    assert_idle_is_quiet(topology)


def test_conflicting_writes_end_as_documented(topology):
    """The same keys written on both sides at once (well within the replication lag), one case at a
    time: docs/bidirectional-replication.md states these outcomes."""
    database = "bdr_conflicts"
    with topology.a.connect() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{database}`")
        cur.execute(f"CREATE TABLE `{database}`.c (id INT PRIMARY KEY, v VARCHAR(16) NOT NULL)")
        cur.execute(f"INSERT INTO `{database}`.c VALUES (1, 'seed'), (2, 'seed')")
    wait_until(lambda: value_on(topology.b, database, 2) == "seed", CONVERGE_SECONDS,
               f"the seed rows on B ({topology.describe()})", interval=1)

    def at_once(on_a: str, on_b: str) -> None:
        barrier = threading.Barrier(2)

        def write(server: MariaDBServer, statement: str) -> None:
            with server.connect() as conn, conn.cursor() as cur:
                barrier.wait()
                cur.execute(statement.format(t=f"`{database}`.c"))

        with ThreadPoolExecutor(2) as pool:
            list(pool.map(write, (topology.a, topology.b), (on_a, on_b)))
        topology.wait_caught_up()

    # Update and update: each side applies the other's change after its own, so they swap values.
    at_once("UPDATE {t} SET v = 'from-a' WHERE id = 1", "UPDATE {t} SET v = 'from-b' WHERE id = 1")
    assert (value_on(topology.a, database, 1), value_on(topology.b, database, 1)) == ("from-b", "from-a")
    # Insert and insert: the replicated INSERT meets the local row (duplicate key), the sink writes
    # it again idempotently (REPLACE): they swap as well.
    at_once("INSERT INTO {t} VALUES (3, 'from-a')", "INSERT INTO {t} VALUES (3, 'from-b')")
    assert (value_on(topology.a, database, 3), value_on(topology.b, database, 3)) == ("from-b", "from-a")
    # Delete and update: the delete removes B's updated row, the update finds no row on A: gone on both.
    at_once("DELETE FROM {t} WHERE id = 2", "UPDATE {t} SET v = 'from-b' WHERE id = 2")
    assert (value_on(topology.a, database, 2), value_on(topology.b, database, 2)) == (None, None)
    # The sides differ until a key is written again, on one side only.
    with topology.a.connect() as conn, conn.cursor() as cur:
        cur.execute(f"UPDATE `{database}`.c SET v = 'settled' WHERE id IN (1, 3)")
    topology.wait_caught_up()
    with topology.a.connect() as a_conn, topology.b.connect() as b_conn:
        assert read_upstream_table(a_conn, database, "c") == read_upstream_table(b_conn, database, "c")


def value_on(server: MariaDBServer, database: str, key: int) -> str | None:
    with server.connect() as conn, conn.cursor() as cur:
        try:
            cur.execute(f"SELECT v FROM `{database}`.c WHERE id = %s", (key,))
        except Exception:  # noqa: BLE001 - the table is not there yet
            return None
        row = cur.fetchone()
        return row[0] if row else None
