import pytest

from sparkcdc.errors import ErrInvalidReplicaConfig
from sparkcdc.filter.table_filter import TableFilter


def test_later_rules_win_and_exclusions():
    f = TableFilter(["db*.*", "!db1.secret", "db1.sec?et2"])
    assert f.match("db1", "orders")
    assert not f.match("db1", "secret")
    assert f.match("db1", "secret2")
    assert not f.match("other", "orders")


def test_case_insensitive_by_default_and_system_schemas_never_match():
    assert TableFilter(["DB.T"]).match("db", "t")
    assert not TableFilter(["DB.T"], case_sensitive=True).match("db", "t")
    assert not TableFilter(["*.*"]).match("mysql", "user")
    assert TableFilter(["*.*"]).match_event("db", "")
    assert not TableFilter(["*.*"]).match_event("mysql", "")


def test_backticks_and_classes():
    f = TableFilter(["`a.b`.`c*`", "x.[a-c]1"])
    assert f.match("a.b", "c*")
    assert not f.match("a.b", "cc")
    assert f.match("x", "b1") and not f.match("x", "d1")


def test_malformed_rule_names_the_rule():
    with pytest.raises(ErrInvalidReplicaConfig, match=r"filter.rules\[1\] 'nodot'"):
        TableFilter(["*.*", "nodot"])
