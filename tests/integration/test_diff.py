"""`sparkcdc diff` between two real MariaDB servers with injected differences."""

from __future__ import annotations

import io
import json
import subprocess
import sys

import pytest

from sparkcdc.diff import DiffOptions, DiffReport, diff_endpoints
from sparkcdc.errors import ErrMySQLConnectionError
from sparkcdc.observability.progress import Progress

TABLES = [
    """CREATE TABLE kinds (
        id INT NOT NULL, part CHAR(2) NOT NULL, s VARCHAR(20) NULL, f FLOAT NULL, d DOUBLE NULL,
        b VARBINARY(8) NULL, ts TIMESTAMP(3) NULL, n DECIMAL(10,2) NULL,
        PRIMARY KEY (id, part))""",
    "CREATE TABLE keyless (x INT NULL, y VARCHAR(5) NULL)",
    "CREATE TABLE other (id INT PRIMARY KEY, v INT)",
]


def _load(server, database: str) -> None:
    with server.connect().cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS `{database}`")
        cur.execute(f"CREATE DATABASE `{database}`")
        cur.execute(f"USE `{database}`")
        cur.execute("SET time_zone = '+00:00'")
        for ddl in TABLES:
            cur.execute(ddl)
        rows = [(i, "p" + str(i % 3), None if i % 5 == 0 else f"s{i}", i / 3, i / 7,
                 bytes([i % 256, 0, 255]), "2024-01-01 00:00:00.123", f"{i}.25") for i in range(1, 251)]
        cur.executemany("INSERT INTO kinds VALUES (%s,%s,%s,%s,%s,%s,%s,%s)", rows)
        cur.executemany("INSERT INTO keyless VALUES (%s,%s)", [(1, "a"), (1, "a"), (2, None)])
        cur.executemany("INSERT INTO other VALUES (%s,%s)", [(i, i) for i in range(10)])


@pytest.fixture
def endpoints(mariadb, mariadb_factory):
    target = mariadb_factory()
    _load(mariadb, "dif")
    _load(target, "dif")
    yield mariadb, target
    with mariadb.connect().cursor() as cur:
        cur.execute("DROP DATABASE IF EXISTS dif")


def _run(source, target, **options) -> DiffReport:
    return diff_endpoints(source.uri, target.uri, DiffOptions(filter_rules=("dif.*",), chunk_size=40, **options))


def test_equal_tables_report_no_difference(endpoints):
    source, target = endpoints
    progress = Progress("diff", stream=io.StringIO(), terminal=False)
    report = diff_endpoints(source.uri, target.uri, DiffOptions(filter_rules=("dif.*",), chunk_size=40),
                            rows_progress=progress)
    assert report.equal, report.summary()
    kinds = next(t for t in report.tables if t.table == "kinds")
    assert kinds.chunks == 7 and kinds.source_rows == kinds.target_rows == 250
    # The progress counts every source row compared, against the server's estimate of them.
    assert progress.done == sum(t.source_rows for t in report.tables) and progress.total > 0


def test_injected_differences_are_reported_row_by_row(endpoints):
    source, target = endpoints
    with target.connect("dif").cursor() as cur:
        cur.execute("DELETE FROM kinds WHERE id = 17")  # missing
        cur.execute("INSERT INTO kinds (id, part) VALUES (1000, 'zz')")  # extra, past the last boundary
        cur.execute("UPDATE kinds SET s = '' WHERE id = 25")  # NULL upstream vs '' downstream
        cur.execute("UPDATE kinds SET f = f + 0.0001 WHERE id = 60")  # float
        cur.execute("UPDATE kinds SET b = x'00ff' WHERE id = 99")  # binary
        cur.execute("UPDATE kinds SET d = NULL, n = 1.26 WHERE id = 200")
        cur.execute("DELETE FROM keyless WHERE x = 1 LIMIT 1")  # one of two identical rows
    report = _run(source, target)
    assert not report.equal
    kinds = next(t for t in report.tables if t.table == "kinds")
    assert (kinds.missing, kinds.extra, kinds.changed) == (1, 1, 4)
    by_key = {(r.kind, r.key): r for r in kinds.rows}
    assert ("missing", ("17", "p2")) in by_key and ("extra", ("1000", "zz")) in by_key
    assert by_key[("changed", ("25", "p1"))].columns == ("s",)
    assert by_key[("changed", ("25", "p1"))].source["s"] is None
    assert by_key[("changed", ("25", "p1"))].target["s"] == ""
    assert by_key[("changed", ("60", "p0"))].columns == ("f",)
    assert by_key[("changed", ("99", "p0"))].columns == ("b",)
    assert by_key[("changed", ("99", "p0"))].target["b"] == "00FF"
    assert by_key[("changed", ("200", "p2"))].columns == ("d", "n")
    keyless = next(t for t in report.tables if t.table == "keyless")
    assert (keyless.missing, keyless.extra, keyless.changed) == (1, 0, 0)
    assert next(t for t in report.tables if t.table == "other").equal
    assert "1 missing, 1 extra, 4 changed" in report.summary()


def test_missing_table_and_column_difference_and_filters(endpoints):
    source, target = endpoints
    with target.connect("dif").cursor() as cur:
        cur.execute("DROP TABLE other")
        cur.execute("ALTER TABLE keyless ADD COLUMN z INT")
    report = _run(source, target)
    problems = {t.table: t.structure_problem for t in report.tables}
    assert "missing in the target" in problems["other"] and "columns differ" in problems["keyless"]
    report = diff_endpoints(source.uri, target.uri, DiffOptions(filter_rules=("dif.*", "!dif.other", "!dif.keyless")))
    assert [t.table for t in report.tables] == ["kinds"] and report.equal


def test_cli_exit_codes_and_errors(endpoints):
    source, target = endpoints

    def cli(*args):
        return subprocess.run([sys.executable, "-m", "sparkcdc.cli.main", "diff", "--source", source.uri,
                               *args], capture_output=True, text=True, timeout=120)

    equal = cli("--target", target.uri, "--filter", "dif.*")
    assert equal.returncode == 0, equal.stderr + equal.stdout
    assert "all equal" in equal.stdout
    with target.connect("dif").cursor() as cur:
        cur.execute("UPDATE other SET v = NULL WHERE id = 3")
    different = cli("--target", target.uri, "--filter", "dif.other", "--output", "json")
    assert different.returncode == 1
    document = json.loads(different.stdout)
    assert document["equal"] is False and document["tables"][0]["rows"][0]["key"] == ["3"]
    unreachable = cli("--target", "mysql://root:hunter2@127.0.0.1:1/", "--filter", "dif.*")
    assert unreachable.returncode == 2 and "SPARKCDC:ErrMySQLConnectionError" in unreachable.stderr
    assert "hunter2" not in unreachable.stderr
    nothing = cli("--target", target.uri, "--filter", "nosuchdb.*")
    assert nothing.returncode == 2 and "no table matches" in nothing.stderr


def test_unreachable_endpoint_is_a_coded_error(endpoints):
    source, _ = endpoints
    with pytest.raises(ErrMySQLConnectionError, match="target"):
        diff_endpoints(source.uri, "mysql://root@127.0.0.1:1/", DiffOptions())
