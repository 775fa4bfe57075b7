"""The MySQL sink's columnar entry (sink/mysql/columnar.py) against the RowChange path it must
equal: for random tables of every column type the sink handles, random transactions and every
plan option, the statement texts (and row counts) match `render(plan_transaction(...))` with a
pymysql connection's quoting in both quoting modes, and the conflict keys match
`KeySpace.transaction_keys`."""

from __future__ import annotations

from decimal import Decimal

import pyarrow as pa
import pymysql
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pymysql.constants.SERVER_STATUS import SERVER_STATUS_NO_BACKSLASH_ESCAPES

from sparkcdc.model.events import ColumnInfo, RowChange, TableInfo
from sparkcdc.sink.mysql.causality import KeySpace
from sparkcdc.sink.mysql.columnar import ArrowRun, arrow_run_of, statement_text, transaction_key_sets, transactions_of
from sparkcdc.sink.mysql.sql import PlanOptions, plan_transaction, render

IMAGE = pa.list_(pa.field("element", pa.string()))
TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=8)
SPECIAL_TEXT = st.text(st.sampled_from(["a", "É", "ß", "'", '"', "\\", "\0", "\n", "\r", "\x1a", " ", "?", "`"]),
                       max_size=6)
LATIN1 = st.text(st.characters(max_codepoint=255, blacklist_categories=("Cs",)), max_size=6)


def _integer_text(low: int, high: int):
    canonical = st.integers(low, high).map(str)
    return st.one_of(canonical, canonical, st.sampled_from(["-0", "007", "+5"]))  # text int() reads differently


def _decimal_text():
    return st.decimals(allow_nan=False, allow_infinity=False, places=3, min_value=-10**6, max_value=10**6).map(str)


# (mysql_type, charset, value text): every kind of value to_parameter converts differently.
COLUMN_KINDS = [
    ("tinyint", None, _integer_text(-128, 127)),
    ("int", None, _integer_text(-2**31, 2**31 - 1)),
    ("bigint", None, _integer_text(-2**63, 2**64 - 1)),
    ("bit", None, _integer_text(0, 2**64 - 1)),
    ("year", None, _integer_text(1901, 2155)),
    ("decimal", None, _decimal_text()),
    ("float", None, st.floats(allow_nan=False, allow_infinity=False, width=32).map(repr)),
    ("double", None, st.floats(allow_nan=False, allow_infinity=False).map(repr)),
    ("char", "utf8mb4", SPECIAL_TEXT),
    ("varchar", "utf8mb4", TEXT),
    ("text", "utf8mb4", st.one_of(TEXT, SPECIAL_TEXT)),
    ("enum", "utf8mb4", st.sampled_from(["a", "b'c", ""])),
    ("set", "utf8mb4", st.sampled_from(["a,b", "", "x\\y"])),
    ("json", None, st.sampled_from(['{"a": 1}', '"x\'y"', "null", "[1, \"\\\\\"]"])),
    ("date", None, st.sampled_from(["2024-02-29", "0000-00-00"])),
    ("datetime", None, st.sampled_from(["2024-02-29 12:34:56.123456", "0000-00-00 00:00:00"])),
    ("timestamp", None, st.sampled_from(["2024-02-29 12:34:56", "1970-01-01 00:00:01.5"])),
    ("time", None, st.sampled_from(["-838:59:59", "12:00:00.000001"])),
    ("binary", "binary", LATIN1),
    ("varbinary", "binary", LATIN1),
    ("blob", "binary", LATIN1),
    ("char", "binary", LATIN1),  # CHAR with the binary charset is a binary string
    ("geometry", None, LATIN1),
]
COLLATIONS = [None, "utf8mb4_general_ci", "utf8mb4_bin", "utf8mb4_0900_as_cs"]
NAMES = st.text(st.sampled_from(["a", "b", "`", "?", " ", "é"]), min_size=1, max_size=3)


@st.composite
def tables(draw):
    kinds = draw(st.lists(st.integers(0, len(COLUMN_KINDS) - 1), min_size=1, max_size=6))
    names = draw(st.lists(NAMES, min_size=len(kinds), max_size=len(kinds), unique=True))
    columns = []
    for index, (name, kind) in enumerate(zip(names, kinds)):
        mysql_type, charset, _ = COLUMN_KINDS[kind]
        generated = index > 0 and draw(st.booleans()) and draw(st.booleans())
        columns.append(ColumnInfo(name, mysql_type, charset=charset, generated=generated))
    positions = list(range(len(columns)))
    handle = draw(st.one_of(st.just([]), st.lists(st.sampled_from(positions), min_size=1, max_size=2, unique=True)))
    unique_keys = draw(st.lists(st.lists(st.sampled_from(positions), min_size=1, max_size=2, unique=True),
                                max_size=2))
    info = TableInfo(draw(NAMES), draw(NAMES), draw(st.integers(-5, 2**40)), tuple(columns), 1,
                     handle_key=tuple(names[p] for p in handle))
    collations = {name: draw(st.sampled_from(COLLATIONS)) for name in names}
    return info, tuple(tuple(names[p] for p in key) for key in unique_keys), collations, kinds


@st.composite
def images(draw, kinds):
    return tuple(draw(st.one_of(st.none(), COLUMN_KINDS[kind][2], COLUMN_KINDS[kind][2])) for kind in kinds)


@st.composite
def cases(draw):
    info, unique_keys, collations, kinds = draw(tables())
    transactions = []
    for number in range(draw(st.integers(1, 3))):
        rows = []
        for seq in range(draw(st.integers(1, 7))):
            op = draw(st.sampled_from(["insert", "update", "delete"]))
            before = draw(images(kinds)) if op != "insert" else None
            after = None
            if op == "update" and draw(st.booleans()):  # often only some values change
                after = tuple(draw(st.sampled_from([b, v])) for b, v in zip(before, draw(images(kinds))))
            elif op != "delete":
                after = draw(images(kinds))
            rows.append(RowChange(100 + number, info.schema, info.table, op, before, after, seq))
        transactions.append(rows)
    options = PlanOptions(
        split_updates=draw(st.booleans()), use_replace=draw(st.booleans()), batch_dml=draw(st.booleans()),
        downstream_tidb=draw(st.booleans()), max_txn_row=draw(st.integers(1, 4)),
        max_multi_update_row=draw(st.integers(1, 3)), max_multi_update_row_size=draw(st.sampled_from([0, 8, 1024])))
    return info, unique_keys, collations, transactions, options


def arrow_run(info: TableInfo, transactions: list[list[RowChange]]) -> ArrowRun:
    """The run the sink makes of RowChanges (write_rows), equal to the batch writer's columns."""
    rows = [row for transaction in transactions for row in transaction]
    run = arrow_run_of(info, rows)
    assert run is not None
    return run


def connection(no_backslash_escapes: bool):
    """A pymysql connection that never connects: its `escape` is what the sink quotes with."""
    conn = pymysql.connections.Connection(defer_connect=True)
    conn.server_status = SERVER_STATUS_NO_BACKSLASH_ESCAPES if no_backslash_escapes else 0
    return conn


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases(), st.booleans())
def test_columnar_statements_equal_the_rowchange_path(case, no_backslash_escapes):
    info, unique_keys, _, transactions, options = case
    conn = connection(no_backslash_escapes)
    run = arrow_run(info, transactions)
    planned = transactions_of(run)
    assert [len(t) for t in planned] == [len(t) for t in transactions]
    for transaction, rows in zip(planned, transactions):
        expected = [(render(s.sql, s.args, conn.escape), s.rows)
                    for s in plan_transaction(info, rows, options, unique_keys)]
        got = [(statement_text(s, conn), s.rows) for s in transaction.plan(options, unique_keys)]
        assert got == expected


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_columnar_conflict_keys_equal_the_rowchange_path(case):
    info, unique_keys, collations, transactions, _ = case
    key_space = KeySpace.for_table(info, unique_keys, collations)
    got = transaction_key_sets(key_space, arrow_run(info, transactions))
    assert got == [key_space.transaction_keys(rows) for rows in transactions]


def test_both_quoting_modes_of_one_run_are_kept_apart():
    info = TableInfo("d", "t", 1, (ColumnInfo("id", "int"), ColumnInfo("s", "varchar")), 1, handle_key=("id",))
    run = arrow_run(info, [[RowChange(1, "d", "t", "insert", None, ("1", "it's"), 0)]])
    statement, = transactions_of(run)[0].plan(PlanOptions())
    assert statement_text(statement, connection(False)).endswith("VALUES (1,'it\\'s')")
    assert statement_text(statement, connection(True)).endswith("VALUES (1,'it''s')")


def test_values_int_would_rewrite_take_the_connections_quoting():
    info = TableInfo("d", "t", 1, (ColumnInfo("id", "int"), ColumnInfo("n", "decimal")), 1, handle_key=("id",))
    run = arrow_run(info, [[RowChange(1, "d", "t", "insert", None, ("007", str(Decimal("1.50"))), 0)]])
    statement, = transactions_of(run)[0].plan(PlanOptions())
    assert statement_text(statement, connection(False)).endswith("VALUES (7,1.50)")


def test_rows_arrow_cannot_hold_keep_the_rowchange_planner():
    info = TableInfo("d", "t", 1, (ColumnInfo("id", "int"), ColumnInfo("s", "varchar")), 1, handle_key=("id",))
    assert arrow_run_of(info, [RowChange(1, "d", "t", "insert", None, ("1", "ok"), 0)]) is not None
    assert arrow_run_of(info, [RowChange(1, "d", "t", "insert", None, ("1", "lone \udc80"), 0)]) is None
    assert arrow_run_of(info, [RowChange(1, "d", "t", "delete", ("1",), None, 0)]) is None  # too narrow


@pytest.mark.parametrize("image_type", [IMAGE, pa.large_list(pa.large_string()), pa.list_(pa.large_string())],
                         ids=["string", "large", "large-values"])
def test_columns_from_the_batch_writer_equal_the_converted_rows(image_type):
    """Whatever string types the batch's columns have (Spark may give large ones)."""
    info = TableInfo("d", "t", 1, (ColumnInfo("id", "int"), ColumnInfo("s", "varchar"), ColumnInfo("f", "double")), 1,
                     handle_key=("id",))
    rows = [RowChange(1, "d", "t", "insert", None, ("1", "a'", "1.5"), 0),
            RowChange(2, "d", "t", "update", ("1", "a'", "1.5"), ("1", None, "2"), 0),
            RowChange(3, "d", "t", "delete", (None, "x", None), None, 0)]
    ops = pa.array(["insert", "update", "delete"], pa.large_string())
    columns = ArrowRun(info, pa.array([1, 2, 3], pa.int64()), ops,
                       pa.array([None, ["1", "a'", "1.5"], [None, "x", None]], image_type),
                       pa.array([["1", "a'", "1.5"], ["1", None, "2"], None], image_type))
    texts = [[statement_text(s, connection(False)) for s in t.plan(PlanOptions())]
             for run in (columns, arrow_run_of(info, rows)) for t in transactions_of(run)]
    assert texts[:3] == texts[3:] == [
        ["INSERT INTO `d`.`t` (`id`,`s`,`f`) VALUES (1,'a\\'',1.5e0)"],
        ["UPDATE `d`.`t` SET `id` = 1, `s` = NULL, `f` = 2.0e0 WHERE `id` = 1 LIMIT 1"],
        ["DELETE FROM `d`.`t` WHERE `id` IS NULL AND `s` = 'x' AND `f` IS NULL LIMIT 1"]]
    key_space = KeySpace.for_table(info)
    assert transaction_key_sets(key_space, columns) == [key_space.transaction_keys([row]) for row in rows]


def test_a_written_run_is_freed_without_the_cyclic_collector():
    """A run's statement pieces must not hold the run: the batch's columns and SQL would stay
    until Python's cyclic collector ran (the MySQL sink's driver grew past 1 GB)."""
    import gc
    import weakref

    info = TableInfo("d", "t", 1, (ColumnInfo("id", "int"), ColumnInfo("s", "varchar")), 1, handle_key=("id",))
    run = arrow_run(info, [[RowChange(1, "d", "t", "insert", None, ("1", "a"), 0),
                            RowChange(1, "d", "t", "update", ("2", "b"), ("2", "c"), 1),
                            RowChange(1, "d", "t", "delete", ("3", "d"), None, 2)]])
    for statement in transactions_of(run)[0].plan(PlanOptions()):
        assert statement_text(statement, connection(False))
    statement = None
    alive = weakref.ref(run)
    gc.disable()
    try:
        del run
        assert alive() is None
    finally:
        gc.enable()
