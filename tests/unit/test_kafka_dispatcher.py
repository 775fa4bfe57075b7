"""Topic expressions and partition dispatch with TiCDC's PositionInertia hashing.

Expected partitions are the ones TiCDC's own tests pin (dispatcher/partition/table_test.go,
index_value_test.go) for the same tables and values with 16 partitions.
"""

import pytest

from sparkcdc.config.replica import DispatchRule, TOPIC_EXPRESSION, parse_replica_config
from sparkcdc.errors import ErrInvalidReplicaConfig
from sparkcdc.model.events import ColumnInfo, RowChange, TableInfo
from sparkcdc.sink.kafka.dispatcher import EventRouter, PartitionDispatcher, substitute_topic


def table(name="t1", columns=None, handle=("a",)):
    columns = columns or (ColumnInfo("a", "int", is_primary_key=True, nullable=False), ColumnInfo("b", "int"))
    return TableInfo("test", name, 1, tuple(columns), 1, handle)


def insert(values, ts=1, name="t1"):
    return RowChange(ts, "test", name, "insert", after=tuple(values))


@pytest.mark.parametrize("name,expected", [("t1", 15), ("t2", 5), ("t3", 3)])
def test_table_dispatch_matches_ticdc(name, expected):
    assert PartitionDispatcher("table").partition(table(name), insert(("1", "2"), name=name), 16) == expected


@pytest.mark.parametrize("a,expected", [("11", 2), ("22", 11)])
def test_index_value_dispatch_matches_ticdc(a, expected):
    assert PartitionDispatcher("index-value").partition(table(), insert((a, "5")), 16) == expected


def test_index_value_uses_the_pre_image_for_deletes_and_rowid_is_an_alias():
    row = RowChange(1, "test", "t1", "delete", before=("11", "5"))
    assert PartitionDispatcher("rowid").partition(table(), row, 16) == 2


def test_ts_dispatch_is_commit_ts_modulo():
    assert PartitionDispatcher("ts").partition(table(), insert(("1", "2"), ts=435), 16) == 435 % 16


def test_columns_dispatch_hashes_configured_columns_in_order():
    import zlib
    expected = (zlib.crc32(b"testt1") ^ zlib.crc32(b"b7")) % 5
    assert PartitionDispatcher("columns", columns=["b"]).partition(table(), insert(("1", "7")), 5) == expected
    with pytest.raises(ErrInvalidReplicaConfig):
        PartitionDispatcher("columns", columns=["nope"]).partition(table(), insert(("1", "7")), 5)


def test_router_first_matching_rule_wins_and_default_topic_otherwise():
    rules = [DispatchRule(matcher=["test.t1"], partition="ts", topic="cdc_{schema}_{table}"),
             DispatchRule(matcher=["test.*"], topic="hard-coded")]
    router = EventRouter("default-topic", rules)
    assert router.topic("test", "t1") == "cdc_test_t1"
    assert router.topic("test", "t2") == "hard-coded"
    assert router.topic("other", "x") == "default-topic"
    assert router.dispatcher_for("test", "t1").kind == "ts"
    assert router.dispatcher_for("other", "x").kind == "table"
    assert router.ddl_topic("test", "") == "default-topic"


def test_topic_substitution_replaces_forbidden_characters_and_truncates():
    assert substitute_topic("p_{schema}_{table}", "d b", "t$1") == "p_d_b_t_1"
    assert len(substitute_topic("{schema}", "x" * 300, "")) == 249
    assert substitute_topic("{schema}", ".", "") == "_"


@pytest.mark.parametrize("expression,valid", [
    ("{schema}", True), ("prefix_{schema}_{table}_suffix", True), ("hard-coded.topic", True),
    ("{table}", True), ("{schema}{table}", True), ("a/{schema}", False), ("{table}{schema}", False),
    ("{schema}_{schema}", False), ("{db}", False),
])
def test_topic_expression_validation(expression, valid):
    assert bool(TOPIC_EXPRESSION.match(expression)) is valid


def test_dispatchers_parse_from_toml_and_are_validated():
    config = parse_replica_config(
        "[sink]\ndispatchers = [\n"
        "  {matcher = ['test.*'], partition = 'index-value', topic = 'cdc_{schema}'},\n"
        "  {matcher = ['db.t'], partition = 'columns', columns = ['a', 'b']},\n]\n")
    assert config.sink.dispatchers[0].partition == "index-value"
    assert config.sink.dispatchers[1].columns == ["a", "b"]
    for bad, where in [
        ("{matcher = ['*.*'], partition = 'ts', dispatcher = 'ts'}", "both"),
        ("{matcher = ['*.*'], partition = 'columns'}", "columns"),
        ("{matcher = ['*.*'], topic = 'a/{schema}'}", "topic"),
        ("{matcher = ['*.*'], partition = 'random'}", "partition"),
        ("{partition = 'ts'}", "matcher"),
    ]:
        with pytest.raises(ErrInvalidReplicaConfig) as info:
            parse_replica_config(f"[sink]\ndispatchers = [{bad}]\n")
        assert where in str(info.value)
