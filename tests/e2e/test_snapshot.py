"""The initial snapshot, e2e against real MariaDB: a database that already holds tables and rows
(every column type of the type test, composite and case-insensitive string keys, a table without
a key under force-replicate, a few dozen small tables) is copied by three changefeeds at once, to
MySQL, to file storage and to Kafka, while a workload writes inserts, updates (key changes too),
deletes and an ADD COLUMN during the copy. The MySQL downstream, and the tables `sparkcdc consumer
storage|kafka` rebuild from the files and the topic, must equal the upstream row by row.

One upstream, one server, three changefeeds (CI's variant: SNAPSHOT_E2E_ROWS rows in the big
table, 20k by default; `SPARKCDC_SNAPSHOT_E2E_ROWS=1000000` runs the 1M-row variant)."""

from __future__ import annotations

import os
import random
import threading
import time
from collections import Counter

import pytest

from sparkcdc.sink.kafka.config import parse_kafka_sink_uri
from sparkcdc.testing.alltypes import COLUMNS, create_alltypes
from sparkcdc.testing.compare import read_upstream_table, wait_for_row, wait_tables_equal
from sparkcdc.testing.kafka import ConsumerThread
from sparkcdc.testing.process_usage import process_label, process_tree
from sparkcdc.testing.server_process import ServerProcess, run_sparkcdc

pytestmark = pytest.mark.e2e

DATABASE = "snap"
BIG_ROWS = int(os.environ.get("SPARKCDC_SNAPSHOT_E2E_ROWS", "20000"))
SMALL_TABLES = 24
KEYED_TABLES = ["big", "ck", "alltypes", "wide", *[f"s{n:02d}" for n in range(SMALL_TABLES)], "finish_mark"]


def create_upstream(conn) -> None:
    """The database the changefeeds find when they start."""
    with conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {DATABASE}")
        cur.execute(f"CREATE DATABASE {DATABASE} CHARACTER SET utf8mb4")
        cur.execute(f"USE {DATABASE}")
        cur.execute("CREATE TABLE big (id BIGINT NOT NULL PRIMARY KEY, k INT NOT NULL, c CHAR(120) NOT NULL, "
                    "pad CHAR(60) NOT NULL, KEY k (k))")
        cur.execute(f"INSERT INTO big SELECT seq, seq % 1000, CONCAT('c-', seq, '-', REPEAT('x', 80)), "
                    f"CONCAT('pad-', seq) FROM seq_1_to_{BIG_ROWS}")
        # Case-insensitive composite key: 'ab', 'AB' and 'ab ' are one value to the server.
        cur.execute("CREATE TABLE ck (region VARCHAR(12) COLLATE utf8mb4_general_ci NOT NULL, id INT NOT NULL, "
                    "v DECIMAL(12,3), t DATETIME(3), PRIMARY KEY (region, id))")
        regions = ["eu", "US", "ap-Süd", "😀", "Zz", "b"]
        cur.execute("INSERT INTO ck SELECT ELT(1 + seq % 6, " + ", ".join(f"'{r}'" for r in regions) + "), seq, "
                    f"seq / 7, '2024-01-01' + INTERVAL seq SECOND FROM seq_1_to_{max(600, BIG_ROWS // 10)}")
        cur.execute("CREATE TABLE nokey (a INT, b VARCHAR(20), c DOUBLE)")
        cur.execute(f"INSERT INTO nokey SELECT seq % 50, CONCAT('n', seq % 7), seq / 3 FROM seq_1_to_{max(300, BIG_ROWS // 50)}")
        cols = ", ".join(f"`{name}` {sql_type}" for name, sql_type in COLUMNS if name != "i")
        cur.execute(f"CREATE TABLE wide (i INT NOT NULL PRIMARY KEY, {cols})")
        for n in range(SMALL_TABLES):
            cur.execute(f"CREATE TABLE s{n:02d} (id INT NOT NULL PRIMARY KEY, name VARCHAR(40), amount DECIMAL(10,2))")
            cur.execute(f"INSERT INTO s{n:02d} SELECT seq, CONCAT('row ', seq), seq * 1.5 FROM seq_1_to_{50 + 10 * n}")
        cur.execute("CREATE TABLE finish_mark (id INT PRIMARY KEY)")
    create_alltypes(conn, DATABASE)
    from sparkcdc.testing.alltypes import COLUMN_NAMES, ROWS

    names = [n for n in COLUMN_NAMES if n != "i"]
    with conn.cursor() as cur:
        cur.execute("SET time_zone='+00:00'")
        for i in range(1, 301):
            row = ROWS[i % 3]
            cur.execute(f"INSERT INTO {DATABASE}.wide VALUES (%s, {', '.join(['%s'] * len(names))})",
                        [i, *[row[n] for n in names]])


class Writer(threading.Thread):
    """Inserts, updates (also of keys), deletes over the copied tables until stopped."""

    def __init__(self, conn, seed: int = 3):
        super().__init__(daemon=True)
        self.conn, self.rng = conn, random.Random(seed)
        self.stopping = threading.Event()
        self.statements = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            next_id = BIG_ROWS + 1
            with self.conn.cursor() as cur:
                cur.execute(f"USE {DATABASE}")
                while not self.stopping.is_set():
                    pick = self.rng.random()
                    target = self.rng.randint(1, BIG_ROWS)
                    if pick < 0.25:
                        cur.execute("INSERT INTO big (id, k, c, pad) VALUES (%s, 1, 'new', 'p')", (next_id,))
                        next_id += 1
                    elif pick < 0.45:
                        cur.execute("UPDATE big SET k = k + 1, c = CONCAT('u', c) WHERE id = %s", (target,))
                    elif pick < 0.55:  # a key change, often across chunks
                        cur.execute("UPDATE IGNORE big SET id = %s WHERE id = %s", (next_id, target))
                        next_id += 1
                    elif pick < 0.65:
                        cur.execute("DELETE FROM big WHERE id = %s", (target,))
                    elif pick < 0.75:
                        cur.execute("UPDATE IGNORE ck SET region = %s, v = v + 1 WHERE id = %s",
                                    (self.rng.choice(["EU", "us", "new"]), target % 600 + 1))
                    elif pick < 0.8:
                        cur.execute("INSERT INTO nokey VALUES (%s, 'w', 0.5)", (self.rng.randint(1, 9),))
                    elif pick < 0.85:
                        cur.execute("UPDATE nokey SET c = c + 1 WHERE a = %s LIMIT 1", (self.rng.randint(0, 49),))
                    elif pick < 0.9:
                        cur.execute("DELETE FROM nokey WHERE a = %s LIMIT 1", (self.rng.randint(0, 49),))
                    else:
                        n = self.rng.randrange(SMALL_TABLES)
                        cur.execute(f"UPDATE s{n:02d} SET amount = amount + 1 WHERE id = %s", (target % 50 + 1,))
                    self.statements += 1
                    self.stopping.wait(0.004)  # a steady few hundred writes a second, not a flood
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc


def sorted_rows(conn, table: str) -> list:
    """A table without a key, as a sorted multiset of its rows."""
    with conn.cursor() as cur:
        cur.execute(f"SELECT a, b, c FROM {DATABASE}.{table}")
        return sorted(Counter(cur.fetchall()).items())


def snapshot_progress(server, changefeed: str) -> dict:
    return server.api("GET", f"/api/v2/changefeeds/{changefeed}")["snapshot"]


@pytest.fixture(scope="module")
def copied(mariadb, mariadb_factory_module, kafka, tmp_path_factory):
    """Create the upstream, three changefeeds copying it while the writer runs, an ADD COLUMN
    during the copy; yields once all three copies are done and a finish mark is written."""
    base = tmp_path_factory.mktemp("snapshot")
    up = mariadb.connect()
    create_upstream(up)
    broker = kafka
    downstreams = {name: mariadb_factory_module() for name in ("mysql", "storage", "kafka")}
    server = ServerProcess(str(base / "cdc"), mariadb.uri).start()
    config = base / "cf.toml"
    config.write_text(f'force-replicate = true\n[filter]\nrules = ["{DATABASE}.*"]\n'
                      f'[snapshot]\nmode = "initial"\nchunk-size = {max(500, BIG_ROWS // 20)}\nparallelism = 4\n')
    storage_root = str(base / "files")
    kafka_uri = f"kafka://{broker.bootstrap}/snap-e2e?protocol=canal-json&partition-num=2&enable-tidb-extension=true"
    writer = Writer(mariadb.connect())
    writer.start()
    consumer = None
    try:
        server.cli("changefeed", "create", "-c", "to-mysql", "--config", str(config),
                   "--sink-uri", f"mysql://root@127.0.0.1:{downstreams['mysql'].port}/?worker-count=4")
        with up.cursor() as cur:  # a DDL while the big table is being copied
            cur.execute(f"ALTER TABLE {DATABASE}.big ADD COLUMN extra VARCHAR(10) NOT NULL DEFAULT 'x'")
        server.cli("changefeed", "create", "-c", "to-files", "--config", str(config),
                   "--sink-uri", f"file://{storage_root}?protocol=canal-json&enable-tidb-extension=true")
        server.cli("changefeed", "create", "-c", "to-kafka", "--config", str(config), "--sink-uri", kafka_uri)
        consumer = ConsumerThread(parse_kafka_sink_uri(kafka_uri),
                                  f"mysql://root@127.0.0.1:{downstreams['kafka'].port}/?worker-count=2", "snap-e2e")
        consumer.start()
        with up.cursor() as cur:
            cur.execute(f"UPDATE {DATABASE}.big SET extra = 'y' WHERE id % 3 = 0")
        deadline = time.monotonic() + 1800
        for changefeed in ("to-mysql", "to-files", "to-kafka"):
            while snapshot_progress(server, changefeed)["state"] != "done":
                assert time.monotonic() < deadline, snapshot_progress(server, changefeed)
                assert writer.error is None, writer.error
                time.sleep(2)
        writer.stopping.set()
        writer.join(30)
        assert writer.error is None and writer.statements > 100, (writer.error, writer.statements)
        with up.cursor() as cur:
            cur.execute(f"INSERT INTO {DATABASE}.finish_mark VALUES (1)")
        yield server, up, downstreams, storage_root, consumer
    finally:
        writer.stopping.set()
        if consumer is not None:
            consumer.stop()
        server.stop()


def assert_equal(up, down, keyless: bool = True) -> None:
    wait_for_row(down, DATABASE, "finish_mark", timeout=300)
    for table in KEYED_TABLES:
        assert read_upstream_table(up, DATABASE, table), f"{table} is empty upstream"
    wait_tables_equal(up, down, DATABASE, KEYED_TABLES, timeout=120)
    if keyless:
        assert sorted_rows(up, "nokey") == sorted_rows(down, "nokey")


def test_mysql_downstream_equals_upstream(copied):
    server, up, downstreams, _, _ = copied
    assert_equal(up, downstreams["mysql"].connect())
    progress = snapshot_progress(server, "to-mysql")
    big = next(t for t in progress["tables"] if t["table"] == f"{DATABASE}.big")
    assert big["chunks_done"] == big["chunks_total"] >= 20 and big["rows"] >= BIG_ROWS * 0.9
    assert progress["tables_total"] == len(KEYED_TABLES) + 1


def test_storage_files_rebuild_the_upstream(copied):
    server, up, downstreams, root, _ = copied
    down = downstreams["storage"]
    result = run_sparkcdc("consumer", "storage", "--upstream-uri", f"file://{root}?protocol=canal-json",
                          "--downstream-uri", f"mysql://root@127.0.0.1:{down.port}/", "--once", timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    assert_equal(up, down.connect())


def test_kafka_topic_rebuilds_the_upstream(copied):
    server, up, downstreams, _, consumer = copied
    assert_equal(up, downstreams["kafka"].connect())
    assert not consumer.errors, consumer.errors


def test_query_shows_the_snapshot(copied):
    server = copied[0]
    shown = server.query("to-files")
    assert shown["snapshot"]["state"] == "done"
    assert shown["snapshot"]["rows"] >= BIG_ROWS


def test_the_servers_processes_never_import_pandas(copied):
    """The driver (which reads a local master's chunks and batches itself) and any Python worker of
    its Spark copied and streamed without pandas (pipeline/without_pandas.py): no process of the
    server's tree maps its libraries."""
    server = copied[0]
    mapped = {}
    for pid in process_tree(server.process.pid):
        try:
            with open(f"/proc/{pid}/maps") as maps:
                mapped[pid] = (process_label(pid), "/pandas/" in maps.read())
        except OSError:
            continue
    assert any(label.startswith("python sparkcdc") for label, _ in mapped.values()), mapped
    assert not [label for label, pandas in mapped.values() if pandas], mapped


def done_chunks(data_dir: str, changefeed: str) -> set[str]:
    """`db.table#n` of every chunk the metadata store says is done."""
    from sparkcdc.model.snapshot import SnapshotState
    from sparkcdc.server.metastore import MetaStore

    state = SnapshotState.from_json(MetaStore(os.path.join(data_dir, "meta.sqlite")).get_snapshot("default", changefeed))
    return {f"{t.name}#{c.number}" for t in state.tables for c in t.chunks if c.done}


def chunks_read(log_text: str, changefeed: str) -> list[str]:
    marker = f"snapshot of default/{changefeed} reads "
    return [name for line in log_text.splitlines() if marker in line
            for name in line.split(marker, 1)[1].strip().split(", ")]


def test_sigkill_twice_mid_snapshot_keeps_done_chunks(copied, mariadb, mariadb_factory_module, tmp_path):
    """SIGKILL the server twice while it copies; after each restart the chunks already done are
    not read again (the log's reads), the copy completes and the files rebuild the upstream."""
    _, up, downstreams, _, _ = copied
    data_dir, root = str(tmp_path / "cdc"), str(tmp_path / "files")
    config = tmp_path / "cf.toml"
    config.write_text(f'force-replicate = true\n[filter]\nrules = ["{DATABASE}.*"]\n'
                      f'[snapshot]\nmode = "initial"\nchunk-size = {max(200, BIG_ROWS // 40)}\nparallelism = 4\n')
    server = ServerProcess(data_dir, mariadb.uri).start()
    log_path = os.path.join(data_dir, "server.log")
    kept: list[set[str]] = []
    try:
        server.cli("changefeed", "create", "-c", "killed", "--config", str(config),
                   "--sink-uri", f"file://{root}?protocol=canal-json&enable-tidb-extension=true")
        for round_ in range(2):
            deadline = time.monotonic() + 600
            while len(done_chunks(data_dir, "killed")) < 4 * (round_ + 1):
                assert time.monotonic() < deadline, "no chunk done"
                time.sleep(0.5)
            server.kill()
            kept.append(done_chunks(data_dir, "killed"))
            offset = os.path.getsize(log_path)
            server.start()
            deadline = time.monotonic() + 600
            while snapshot_progress(server, "killed")["state"] != "done" and round_ == 1:
                assert time.monotonic() < deadline, snapshot_progress(server, "killed")
                time.sleep(2)
            with open(log_path, encoding="utf-8", errors="replace") as log:
                log.seek(offset)
                after = log.read()
            if round_ == 1:
                read_again = set(chunks_read(after, "killed")) & kept[1]
                assert not read_again, f"chunks done before the SIGKILL were read again: {sorted(read_again)}"
                assert "chunks already done are kept" in after
        assert kept[0] and kept[0] <= kept[1]
        wait_for_row(up, DATABASE, "finish_mark")
        down = mariadb_factory_module()
        deadline = time.monotonic() + 300
        while not os.path.exists(os.path.join(root, "metadata")):
            assert time.monotonic() < deadline
            time.sleep(1)
        time.sleep(5)  # the checkpoint passes the finish mark
        result = run_sparkcdc("consumer", "storage", "--upstream-uri", f"file://{root}?protocol=canal-json",
                              "--downstream-uri", f"mysql://root@127.0.0.1:{down.port}/", "--once", timeout=600)
        assert result.returncode == 0, result.stdout + result.stderr
        assert_equal(up, down.connect())
    finally:
        server.stop()
