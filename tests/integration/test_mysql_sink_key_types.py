"""Every MariaDB column type as part of a primary key, through the MySQL sink into a real MariaDB:
updates and deletes find their row by the key's values, which must round-trip exactly (a FLOAT
key bound as the decimal `3.3` matched no row: the stored float32 reads back as
3.299999952316284). Upstream tables hold the values and their canonical text is read back as
the decoder produces it (testing/compare.py); the upstream's own UPDATE/DELETE define the
expected result; the sink replays the same changes into a downstream database, through both
planners (RowChange and columnar), in normal mode, safe mode and the replay window. The Kafka
consumer's lookup of a row by its key (handle-key-only messages) finds every row too."""

from __future__ import annotations

import dataclasses
import os

import pytest

from sparkcdc.config.replica import ReplicaConfig
from sparkcdc.model.events import RowChange, TableInfo
from sparkcdc.sink.mysql.sink import MySQLSink
from sparkcdc.testing.alltypes import change_key_rows, insert_key_rows, key_tables
from sparkcdc.testing.compare import diff_tables, read_upstream_table
from sparkcdc.upstream.row_lookup import UpstreamRowReader
from sparkcdc.upstream.schema_reader import read_table_info
from test_mysql_sink import ENTRIES, FAST_RETRY, ts, write  # the MySQL sink tests' helpers

pytestmark = pytest.mark.integration


def _create(conn, database: str) -> None:
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{database}`")
        for table, _, body in key_tables("k"):
            cur.execute(f"CREATE TABLE `{database}`.`{table}` {body}")


def _row_changes(info: TableInfo, before: dict, after: dict, commit_ts: int) -> list[RowChange]:
    """The changes that take the table from `before` to `after` (rows paired by `rid`)."""
    def by_rid(rows):
        return {row["rid"]: tuple(row[c.name] for c in info.columns) for row in rows.values()}

    old, new = by_rid(before), by_rid(after)
    changes = []
    for seq, rid in enumerate(sorted(set(old) | set(new), key=int)):
        if rid not in new:
            changes.append(RowChange(commit_ts, info.schema, info.table, "delete", before=old[rid], seq=seq))
        elif rid not in old:
            changes.append(RowChange(commit_ts, info.schema, info.table, "insert", after=new[rid], seq=seq))
        elif old[rid] != new[rid]:
            changes.append(RowChange(commit_ts, info.schema, info.table, "update", before=old[rid],
                                     after=new[rid], seq=seq))
    return changes


@pytest.fixture(scope="module")
def upstream_changes(mariadb):
    """Per key type: (TableInfo, its insert transaction, its update/delete transaction, final rows)."""
    database = f"keys_up_{os.getpid()}"
    conn = mariadb.connect()
    _create(conn, database)
    out = []
    with conn.cursor() as cur:
        cur.execute("SET time_zone = '+00:00'")
        for number, (table, column, _) in enumerate(key_tables("k")):
            insert_key_rows(cur, database, table, column)
            info = read_table_info(conn, database, table, version=ts(1), table_id=number + 1)
            inserted = read_upstream_table(conn, database, table)
            change_key_rows(cur, database, table, column)
            final = read_upstream_table(conn, database, table)
            assert len(final) == 2
            out.append((info, _row_changes(info, {}, inserted, ts(2)), _row_changes(info, inserted, final, ts(3)),
                        final))
    conn.close()
    return out


@pytest.mark.parametrize("query, replicating", [("", 0), ("safe-mode=true", 0), ("", ts(10))],
                         ids=["normal", "safe-mode", "replay-window"])
@ENTRIES
def test_every_column_type_in_a_key_updates_and_deletes_its_row(mariadb, upstream_changes, query, replicating,
                                                                 columnar, request):
    database = f"keys_down_{os.getpid()}_{request.node.callspec.id.replace('-', '_')}"
    conn = mariadb.connect()
    _create(conn, database)
    uri = mariadb.uri.replace("root@", "root:@") + "?worker-count=4" + ("&" + query if query else "")

    def moved(rows: list[RowChange]) -> list[RowChange]:
        return [dataclasses.replace(row, schema=database) for row in rows]

    with MySQLSink(uri, ReplicaConfig(), replicating_ts=replicating, retry=FAST_RETRY, ddl_retry=FAST_RETRY) as sink:
        for step in (1, 2):  # the inserts, flushed, then the updates and deletes
            for info, *transactions, _ in upstream_changes:
                write(sink, dataclasses.replace(info, schema=database), moved(transactions[step - 1]), columnar)
            sink.flush()
    problems = []
    for info, _, _, final in upstream_changes:
        problems += [f"{info.table}: {p}" for p in diff_tables(final, read_upstream_table(conn, database, info.table))]
    conn.close()
    assert not problems, "\n".join(problems)


def test_every_column_type_in_a_key_finds_its_row_upstream(mariadb, upstream_changes):
    reader = UpstreamRowReader(mariadb.connect)
    try:
        for info, _, _, final in upstream_changes:
            for row in final.values():
                want = tuple(row[c.name] for c in info.columns)
                assert reader.read(info, {name: row[name] for name in info.handle_key}) == want, info.table
    finally:
        reader.close()
