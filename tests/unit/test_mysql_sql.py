"""Statement shapes pinned to TiCDC's pkg/sqlmodel/multirow_test.go and row_change_test.go."""

from decimal import Decimal

import pymysql
import pytest

from sparkcdc.model.events import ColumnInfo, RowChange, TableInfo
from sparkcdc.model.netting import net_changes_per_key
from sparkcdc.sink.mysql.sql import (
    RESET_TIMESTAMP,
    PlanOptions,
    ddl_prelude,
    delete_row_sql,
    delete_rows_sql,
    insert_sql,
    plan_transaction,
    render,
    to_parameter,
    update_row_sql,
    update_rows_sql,
)


def table(columns, handle_key=(), name="tb"):
    cols = tuple(ColumnInfo(n, "int", is_primary_key=(n in handle_key), generated=n.startswith("gen"))
                 for n in columns)
    return TableInfo("db", name, 1, cols, 1, tuple(handle_key))


def img(*values):
    return tuple(None if v is None else str(v) for v in values)


def test_delete_multi_rows():
    s = delete_rows_sql(table(["c", "c2"], ["c"]), [img(1, 2), img(3, 4)])
    assert s.sql == "DELETE FROM `db`.`tb` WHERE (`c` = ?) OR (`c` = ?)"
    assert s.args == (1, 3) and s.rows == 2


def test_update_multi_rows_case_when_two_column_key():
    info = table(["c", "c2", "c3"], ["c", "c2"])
    s = update_rows_sql(info, [(img(1, 2, 3), img(10, 20, 30)), (img(4, 5, 6), img(40, 50, 60))])
    assert s.sql == ("UPDATE `db`.`tb` SET "
                     "`c`=CASE WHEN `c` = ? AND `c2` = ? THEN ? WHEN `c` = ? AND `c2` = ? THEN ? END, "
                     "`c2`=CASE WHEN `c` = ? AND `c2` = ? THEN ? WHEN `c` = ? AND `c2` = ? THEN ? END, "
                     "`c3`=CASE WHEN `c` = ? AND `c2` = ? THEN ? WHEN `c` = ? AND `c2` = ? THEN ? END "
                     "WHERE (`c` = ? AND `c2` = ?) OR (`c` = ? AND `c2` = ?)")
    assert s.args == (1, 2, 10, 4, 5, 40, 1, 2, 20, 4, 5, 50, 1, 2, 30, 4, 5, 60, 1, 2, 4, 5)


def test_update_multi_rows_skips_generated_columns():
    info = table(["gen0", "gen1", "c2", "c3", "c4"], ["c4"])
    pairs = [(img(1, 101, 2, 3, 1), img(100, 110, 20, 30, 10)), (img(16, 104, 5, 6, 4), img(1600, 140, 50, 60, 40)),
             (img(49, 107, 8, 9, 7), img(4900, 170, 80, 90, 70))]
    s = update_rows_sql(info, pairs)
    assert s.sql == ("UPDATE `db`.`tb` SET "
                     "`c2`=CASE WHEN `c4` = ? THEN ? WHEN `c4` = ? THEN ? WHEN `c4` = ? THEN ? END, "
                     "`c3`=CASE WHEN `c4` = ? THEN ? WHEN `c4` = ? THEN ? WHEN `c4` = ? THEN ? END, "
                     "`c4`=CASE WHEN `c4` = ? THEN ? WHEN `c4` = ? THEN ? WHEN `c4` = ? THEN ? END "
                     "WHERE (`c4` = ?) OR (`c4` = ?) OR (`c4` = ?)")
    assert s.args == (1, 20, 4, 50, 7, 80, 1, 30, 4, 60, 7, 90, 1, 10, 4, 40, 7, 70, 1, 4, 7)


def test_insert_and_replace_multi_rows_skip_generated():
    info = table(["gen", "c", "c2"], ["c"])
    s = insert_sql(info, [img(2, 1, 2), img(4, 3, 4)])
    assert s.sql == "INSERT INTO `db`.`tb` (`c`,`c2`) VALUES (?,?),(?,?)" and s.args == (1, 2, 3, 4)
    s = insert_sql(info, [img(2, 1, 2), img(4, 3, 4)], replace=True)
    assert s.sql == "REPLACE INTO `db`.`tb` (`c`,`c2`) VALUES (?,?),(?,?)"


def test_single_row_delete_and_update():
    info = table(["id", "name"], ["id"], name="tb2")
    assert delete_row_sql(info, img(1, 2)).sql == "DELETE FROM `db`.`tb2` WHERE `id` = ? LIMIT 1"
    s = update_row_sql(info, img(1, 2), img(3, 4))
    assert s.sql == "UPDATE `db`.`tb2` SET `id` = ?, `name` = ? WHERE `id` = ? LIMIT 1" and s.args == (3, 4, 1)


def test_keyless_rows_use_every_column_null_safe():
    info = table(["c", "c2"], [], name="tb2")
    s = delete_row_sql(info, img(1, None))
    assert s.sql == "DELETE FROM `db`.`tb2` WHERE `c` = ? AND `c2` IS ? LIMIT 1" and s.args == (1, None)
    s = update_row_sql(info, img(1, 2), img(3, 4))
    assert s.sql == "UPDATE `db`.`tb2` SET `c` = ?, `c2` = ? WHERE `c` = ? AND `c2` = ? LIMIT 1"
    assert s.args == (3, 4, 1, 2)


def test_update_skips_generated_column():
    info = table(["c", "gen2"], ["c"], name="tb2")
    s = update_row_sql(info, img(1, 2), img(3, 4))
    assert s.sql == "UPDATE `db`.`tb2` SET `c` = ? WHERE `c` = ? LIMIT 1" and s.args == (3, 1)


def test_typed_parameters_from_canonical_text():
    def col(t, **kw):
        return ColumnInfo("x", t, **kw)
    assert to_parameter(col("bigint", unsigned=True), "18446744073709551615") == 18446744073709551615
    assert to_parameter(col("decimal"), "1.50") == Decimal("1.50")
    assert to_parameter(col("double"), "0.1") == 0.1
    # A FLOAT is compared as the double its float32 widens to (issue 21: `b = 3.3` matched no row).
    assert to_parameter(col("float"), "3.3") == 3.299999952316284
    assert render("`b` = ?", (to_parameter(col("float"), "3.3"),), pymysql.converters.escape_item) == \
        "`b` = 3.299999952316284e0"
    assert to_parameter(col("bit"), "5") == 5 and to_parameter(col("year"), "0000") == 0
    assert to_parameter(col("blob", charset="binary"), "\x00\xff") == b"\x00\xff"
    assert to_parameter(col("varchar", charset="binary"), "ab") == b"ab"
    assert to_parameter(col("point"), "\x01") == b"\x01"
    assert to_parameter(col("enum"), "a") == "a" and to_parameter(col("timestamp"), None) is None


def test_render_skips_question_marks_in_names():
    text = render("UPDATE `d?`.`t``?` SET `a` = ? WHERE `b` IS ?", [1, None],
                  lambda v: "NULL" if v is None else repr(v))
    assert text == "UPDATE `d?`.`t``?` SET `a` = 1 WHERE `b` IS NULL"
    with pytest.raises(ValueError):
        render("SELECT ?", [1, 2], repr)


def _rows(*specs, ts=10):
    out = []
    for seq, (op, before, after) in enumerate(specs):
        out.append(RowChange(ts, "db", "t", op, before=before and img(*before), after=after and img(*after), seq=seq))
    return out


def test_a_row_touched_many_times_is_netted_by_the_pipeline_before_planning():
    info = table(["a", "b"], ["a"])
    rows = _rows(("insert", None, (1, 1)), ("update", (1, 1), (1, 2)), ("update", (1, 2), (5, 2)),
                 ("delete", (9, 9), None), ("insert", None, (9, 8)), ("insert", None, (7, 7)),
                 ("delete", (7, 7), None))
    plan = plan_transaction(info, net_changes_per_key(info, rows), PlanOptions())
    assert [(s.sql, s.args) for s in plan] == [
        ("UPDATE `db`.`tb` SET `a` = ?, `b` = ? WHERE `a` = ? LIMIT 1", (9, 8, 9)),
        ("INSERT INTO `db`.`tb` (`a`,`b`) VALUES (?,?)", (5, 2)),
    ]


def test_pk_swap_in_either_order_splits_into_deletes_then_inserts():
    """Product document 003: UPDATE a=3 WHERE a=2; UPDATE a=2 WHERE a=1, received in either order."""
    info = table(["a", "b"], ["a"])
    for order in ([((2, 2), (3, 2)), ((1, 1), (2, 1))], [((1, 1), (2, 1)), ((2, 2), (3, 2))]):
        rows = _rows(*[("update", b, a) for b, a in order])
        plan = plan_transaction(info, rows, PlanOptions())
        assert [s.sql for s in plan] == ["DELETE FROM `db`.`tb` WHERE (`a` = ?) OR (`a` = ?)",
                                         "INSERT INTO `db`.`tb` (`a`,`b`) VALUES (?,?),(?,?)"]
        assert sorted(plan[0].args) == [1, 2] and sorted(zip(plan[1].args[::2], plan[1].args[1::2])) == [(2, 1), (3, 2)]


def test_plan_orders_deletes_updates_inserts():
    info = table(["a", "b"], ["a"])
    rows = _rows(("insert", None, (5, 5)), ("update", (2, 2), (2, 3)), ("delete", (1, 1), None),
                 ("update", (3, 3), (3, 4)))
    plan = plan_transaction(info, rows, PlanOptions())
    assert [s.sql for s in plan] == [
        "DELETE FROM `db`.`tb` WHERE `a` = ? LIMIT 1",
        "INSERT INTO `db`.`tb` (`a`,`b`) VALUES (?,?),(?,?) ON DUPLICATE KEY UPDATE `a`=VALUES(`a`), `b`=VALUES(`b`)",
        "INSERT INTO `db`.`tb` (`a`,`b`) VALUES (?,?)",
    ]
    assert plan[1].args == (2, 3, 3, 4) and plan[1].rows == 2
    unbatched = plan_transaction(info, rows, PlanOptions(batch_dml=False))
    assert [s.sql.split(" ")[0] for s in unbatched] == ["DELETE", "UPDATE", "UPDATE", "INSERT"]
    tidb = plan_transaction(info, rows, PlanOptions(downstream_tidb=True))
    assert [s.sql.split(" ")[0] for s in tidb] == ["DELETE", "UPDATE", "INSERT"] and "CASE WHEN" in tidb[1].sql


def test_safe_mode_splits_every_update_and_replaces():
    info = table(["a", "b"], ["a"])
    rows = _rows(("update", (2, 2), (2, 3)), ("insert", None, (5, 5)))
    plan = plan_transaction(info, rows, PlanOptions(split_updates=True, use_replace=True))
    assert [s.sql for s in plan] == ["DELETE FROM `db`.`tb` WHERE `a` = ? LIMIT 1",
                                     "REPLACE INTO `db`.`tb` (`a`,`b`) VALUES (?,?),(?,?)"]


def test_unique_key_change_is_split_too():
    info = table(["a", "u"], ["a"])
    rows = _rows(("update", (1, 10), (1, 20)), ("update", (2, 20), (2, 10)))
    plan = plan_transaction(info, rows, PlanOptions(), unique_keys=[("u",)])
    assert [s.sql.split(" ")[0] for s in plan] == ["DELETE", "INSERT"]


def test_batches_are_chunked_by_max_txn_row_and_batching_can_be_disabled():
    info = table(["a"], ["a"])
    rows = _rows(*[("insert", None, (i,)) for i in range(5)])
    assert [s.rows for s in plan_transaction(info, rows, PlanOptions(max_txn_row=2))] == [2, 2, 1]
    assert [s.rows for s in plan_transaction(info, rows, PlanOptions(batch_dml=False))] == [1] * 5


def test_keyless_tables_keep_upstream_order():
    info = table(["a", "b"], [])
    rows = _rows(("insert", None, (1, 1)), ("insert", None, (1, 1)), ("delete", (1, 1), None),
                 ("update", (1, 1), (2, 2)))
    plan = plan_transaction(info, rows, PlanOptions())
    assert [s.sql for s in plan] == [
        "INSERT INTO `db`.`tb` (`a`,`b`) VALUES (?,?),(?,?)",
        "DELETE FROM `db`.`tb` WHERE `a` = ? AND `b` = ? LIMIT 1",
        "UPDATE `db`.`tb` SET `a` = ?, `b` = ? WHERE `a` = ? AND `b` = ? LIMIT 1",
    ]


def test_single_row_insert_and_replace():
    info = table(["c", "c2"], ["c"])
    assert insert_sql(info, [img(1, None)]).sql == "INSERT INTO `db`.`tb` (`c`,`c2`) VALUES (?,?)"
    s = insert_sql(info, [img(1, None)], replace=True)
    assert s.sql == "REPLACE INTO `db`.`tb` (`c`,`c2`) VALUES (?,?)" and s.args == (1, None) and s.rows == 1


def test_delete_multi_rows_two_column_key_and_a_null_key_value():
    info = table(["c", "c2", "c3"], ["c", "c2"])
    s = delete_rows_sql(info, [img(1, 2, 3), img(4, None, 6)])
    # A key holding NULL cannot find the row by key: every column, NULL-safe.
    assert s.sql == ("DELETE FROM `db`.`tb` WHERE (`c` = ? AND `c2` = ?) OR "
                     "(`c` = ? AND `c2` IS ? AND `c3` = ?)")
    assert s.args == (1, 2, 4, None, 6)


def test_multi_row_update_on_tidb_below_the_row_size_upsert_elsewhere_in_chunks():
    info = table(["a", "b"], ["a"])
    rows = _rows(*[("update", (i, 0), (i, 1)) for i in range(5)])
    tidb = PlanOptions(downstream_tidb=True, max_multi_update_row=2)
    assert [(s.sql.count("WHEN"), s.rows) for s in plan_transaction(info, rows, tidb)] == [(4, 2), (4, 2), (2, 1)]
    # Rows larger on average than max-multi-update-row-size (bytes) are updated one by one.
    small_limit = PlanOptions(downstream_tidb=True, max_multi_update_row_size=1)
    assert {s.sql for s in plan_transaction(info, rows, small_limit)} == {
        "UPDATE `db`.`tb` SET `a` = ?, `b` = ? WHERE `a` = ? LIMIT 1"}
    # MySQL/MariaDB: the after images upserted, max-txn-row a statement, whatever their size.
    upserts = plan_transaction(info, rows, PlanOptions(max_txn_row=2, max_multi_update_row_size=1))
    assert [(s.sql.split(" ")[0], s.rows) for s in upserts] == [("INSERT", 2), ("INSERT", 2), ("INSERT", 1)]
    assert all(s.sql.endswith(" ON DUPLICATE KEY UPDATE `a`=VALUES(`a`), `b`=VALUES(`b`)") for s in upserts)
    assert [s.args for s in upserts] == [(0, 1, 1, 1), (2, 1, 3, 1), (4, 1)]


def test_ddl_session_statements():
    assert ddl_prelude("db", "add column", 1_700_000_004_250) == [
        "USE `db`", "SET TIMESTAMP = DEFAULT", "SET TIMESTAMP = 1700000004.250"]
    # Creating or dropping a database does not USE it; a DDL without a time keeps the server's.
    assert ddl_prelude("new`db", "create database", 1_000) == ["SET TIMESTAMP = DEFAULT", "SET TIMESTAMP = 1.000"]
    assert ddl_prelude("d", "drop database", 0) == ["SET TIMESTAMP = DEFAULT"]
    assert ddl_prelude("we`ird", "create table", 0)[0] == "USE `we``ird`"
    assert RESET_TIMESTAMP == "SET TIMESTAMP = DEFAULT"
