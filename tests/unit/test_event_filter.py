from decimal import Decimal

import pytest
from hypothesis import given, strategies as st

from sparkcdc.config.replica import EventFilterRule, parse_replica_config
from sparkcdc.errors import ErrInvalidReplicaConfig
from sparkcdc.filter.event_filter import EventFilter
from sparkcdc.filter.expression import compile_expression
from sparkcdc.model.events import ColumnInfo, DDLEvent, RowChange, TableInfo

T = TableInfo("db", "t", 1, (
    ColumnInfo("id", "int", is_primary_key=True, nullable=False),
    ColumnInfo("name", "varchar"),
    ColumnInfo("price", "decimal", precision=10, scale=2),
    ColumnInfo("score", "double"),
    ColumnInfo("born", "date"),
), 1, ("id",))


def ev(text, **row):
    return compile_expression(text, "test").evaluate(row.get)


@pytest.mark.parametrize("text, row, expected", [
    ("a = 1", {"a": None}, None),
    ("a IS NULL", {"a": None}, True),
    ("a <=> NULL", {"a": None}, True),
    ("a = 1 OR b = 1", {"a": None, "b": 1}, True),
    ("a = 1 AND b = 1", {"a": None, "b": 0}, False),
    ("a = 1 AND b = 1", {"a": None, "b": 1}, None),
    ("NOT (a = 1)", {"a": None}, None),
    ("a IN (1, NULL)", {"a": 2}, None),
    ("a IN (1, NULL)", {"a": 1}, True),
    ("a NOT IN (1, 2)", {"a": 3}, True),
    ("s = 1", {"s": "1abc"}, True),           # string vs number: numeric prefix
    ("s = 0", {"s": "abc"}, True),
    ("s = '1.0'", {"s": "1"}, False),         # string vs string: text comparison
    ("s > 9", {"s": "10"}, True),
    ("s > '9'", {"s": "10"}, False),
    ("d = 1.5", {"d": Decimal("1.50")}, True),
    ("f = 0.1 + 0.2", {"f": 0.3}, True),      # exact decimal literals, compared as double
    ("a / 0 IS NULL", {"a": 5}, True),
    ("a DIV 2 = -2", {"a": -5}, True),
    ("a % 3 = -2", {"a": -5}, True),
    ("a BETWEEN 1 AND 3", {"a": 3}, True),
    ("s LIKE 'ab%'", {"s": "abc"}, True),
    ("s LIKE 'a_c'", {"s": "abbc"}, False),
    ("s LIKE 'a\\%'", {"s": "a%"}, True),
    ("s REGEXP '^a.c$'", {"s": "abc"}, True),
    ("LENGTH(s) = 6 AND CHAR_LENGTH(s) = 2", {"s": "日本"}, True),
    ("LOWER(s) = 'ab' AND UPPER(s) = 'AB'", {"s": "aB"}, True),
    ("IFNULL(a, 7) = 7 AND COALESCE(a, NULL, 3) = 3", {"a": None}, True),
    ("IF(a > 1, 'big', 'small') = 'small'", {"a": 1}, True),
    ("CASE WHEN a > 1 THEN 1 ELSE 0 END = 1", {"a": 2}, True),
    ("CONCAT(s, '-', a) = 'x-1'", {"s": "x", "a": 1}, True),
    ("CONCAT(s, a) IS NULL", {"s": "x", "a": None}, True),
    ("SUBSTRING(s, 2, 2) = 'bc'", {"s": "abcd"}, True),
    ("ABS(a) = 3 AND ROUND(2.5) = 3 AND FLOOR(-1.5) = -2", {"a": -3}, True),
    ("CAST(s AS SIGNED) = 12", {"s": "12x"}, True),
    ("a = TRUE", {"a": 1}, True),
    ("a XOR b", {"a": 1, "b": 1}, False),
    ("s", {"s": "0"}, False),
])
def test_mysql_semantics(text, row, expected):
    assert ev(text, **row) is expected


@pytest.mark.parametrize("text, reason", [
    ("id >", "syntax error"),
    ("SELECT 1", "statement"),
    ("nosuchfn(id) = 1", "NOSUCHFN"),
    ("id IN (SELECT id FROM t)", "not supported"),
    ("t.id = 1", "qualified"),
])
def test_untranslatable_expressions_rejected_at_config_time(text, reason):
    toml = f'[[filter.event-filters]]\nmatcher = ["db.*"]\nignore-delete-value-expr = "{text}"\n'
    with pytest.raises(ErrInvalidReplicaConfig, match=reason) as caught:
        parse_replica_config(toml)
    assert "filter.event-filters[0].ignore-delete-value-expr" in str(caught.value)


def ins(*after):
    return RowChange(1, "db", "t", "insert", after=after)


def upd(before, after):
    return RowChange(1, "db", "t", "update", before=before, after=after)


def dele(*before):
    return RowChange(1, "db", "t", "delete", before=before)


def test_rows_filtered_by_type_and_expressions():
    f = EventFilter([
        EventFilterRule(matcher=["db.t"], ignore_event=["delete"],
                        ignore_insert_value_expr="price > 10 AND name IS NOT NULL",
                        ignore_update_new_value_expr="name = 'new'",
                        ignore_update_old_value_expr="score < 0"),
        EventFilterRule(matcher=["other.*"], ignore_event=["all dml"]),
    ])
    rows = [
        ins("1", "a", "11.00", "1", "2020-01-01"),      # ignored by insert expr
        ins("2", None, "11.00", "1", None),             # name NULL: kept
        upd(("3", "a", "1.00", "1", None), ("3", "new", "1.00", "1", None)),   # new expr
        upd(("4", "a", "1.00", "-1", None), ("4", "b", "1.00", "1", None)),    # old expr
        upd(("5", "a", "1.00", "1", None), ("5", "b", "1.00", "1", None)),     # kept
        dele("6", "a", "1.00", "1", None),               # ignored by type
    ]
    kept = f.filter_rows(T, rows)
    assert [r.before[0] if r.before else r.after[0] for r in kept] == ["2", "5"]
    other = TableInfo("other", "x", 2, T.columns, 1, ("id",))
    assert f.filter_rows(other, [ins("1", "a", "1.00", "1", None)]) == []
    untouched = TableInfo("db", "u", 3, T.columns, 1, ("id",))
    assert len(f.filter_rows(untouched, rows)) == len(rows)


def test_split_update_is_filtered_as_delete_and_insert():
    f = EventFilter([EventFilterRule(matcher=["db.t"], ignore_event=["delete"])])
    split = [dele("1", "a", "1.00", "1", None), ins("2", "a", "1.00", "1", None)]
    assert [r.op for r in f.filter_rows(T, split)] == ["insert"]


def test_expression_on_missing_column_names_table():
    f = EventFilter([EventFilterRule(matcher=["db.*"], ignore_insert_value_expr="nope = 1")])
    with pytest.raises(ErrInvalidReplicaConfig, match="nope.*db.t"):
        f.filter_rows(T, [ins("1", "a", "1.00", "1", None)])


def ddl(kind, query, table="t"):
    return DDLEvent(1, "db", table, query, kind)


def test_ddl_by_type_group_and_sql():
    f = EventFilter([
        EventFilterRule(matcher=["db.t"], ignore_event=["drop table", "truncate table", "alter table"]),
        EventFilterRule(matcher=["db.*"], ignore_sql=["^create\\s+index", "PARTITION"]),
        EventFilterRule(matcher=["x.*"], ignore_event=["all ddl"]),
    ])
    assert f.ignores_ddl(ddl("drop table", "DROP TABLE t"))
    assert f.ignores_ddl(ddl("truncate table", "TRUNCATE t"))
    assert f.ignores_ddl(ddl("add column", "ALTER TABLE t ADD c INT"))
    assert not f.ignores_ddl(ddl("drop table", "DROP TABLE u", table="u"))
    assert f.ignores_ddl(ddl("create index", "CREATE INDEX i ON u(c)", table="u"))
    assert f.ignores_ddl(ddl("alter table", "alter table u add partition p1", table="u"))
    assert f.ignores_ddl(DDLEvent(1, "x", "", "CREATE DATABASE x", "create database"))
    assert not f.ignores_ddl(DDLEvent(1, "db", "", "DROP DATABASE db", "drop database"))


def test_ignore_event_names_validated():
    with pytest.raises(ErrInvalidReplicaConfig, match=r"ignore-event\[1\]` is 'drop tables'"):
        EventFilter([EventFilterRule(matcher=["a.b"], ignore_event=["insert", "drop tables"])])
    with pytest.raises(ErrInvalidReplicaConfig, match="matcher` is empty"):
        EventFilter([EventFilterRule(ignore_event=["insert"])])


def test_config_roundtrip_through_api_json():
    from sparkcdc.config.replica import replica_config_from_dict, replica_config_to_dict
    config = parse_replica_config(
        '[[filter.event-filters]]\nmatcher = ["db.*"]\nignore-event = ["insert"]\n'
        'ignore-sql = ["^drop"]\nignore-update-new-value-expr = "a > 1"\n')
    assert replica_config_from_dict(replica_config_to_dict(config)) == config


@given(st.one_of(st.none(), st.integers(-5, 5)), st.one_of(st.none(), st.integers(-5, 5)))
def test_three_valued_logic_matches_definition(a, b):
    def t(v):
        return None if v is None else v != 0
    ta, tb = t(a), t(b)
    expected_and = False if (ta is False or tb is False) else (None if None in (ta, tb) else True)
    expected_or = True if (ta is True or tb is True) else (None if None in (ta, tb) else False)
    assert ev("a AND b", a=a, b=b) is expected_and
    assert ev("a OR b", a=a, b=b) is expected_or
