import pytest

from sparkcdc.config.replica import ColumnSelector, parse_replica_config
from sparkcdc.errors import ErrInvalidReplicaConfig
from sparkcdc.filter.change_filters import ChangeFilters
from sparkcdc.filter.column_selector import ColumnFilter, ColumnSelectors
from sparkcdc.model.events import ColumnInfo, DDLEvent, RowChange, TableInfo

T = TableInfo("db", "t", 1, (
    ColumnInfo("id", "int", is_primary_key=True, nullable=False),
    ColumnInfo("Name", "varchar"),
    ColumnInfo("secret", "varchar"),
    ColumnInfo("secret2", "varchar"),
), 1, ("id",))


def test_column_rules_later_wins_case_insensitive():
    f = ColumnFilter(["*", "!secret*", "SECRET2"], "c")
    assert [f.match(c) for c in ("id", "name", "secret", "secret2")] == [True, True, False, True]
    assert not ColumnFilter(["id"], "c").match("other")


def test_rows_and_schema_projected_first_matching_selector():
    s = ColumnSelectors([ColumnSelector(["db.t"], ["id", "name"]), ColumnSelector(["db.*"], ["*"])])
    table, rows = s.apply_rows(T, [RowChange(1, "db", "t", "update", before=("1", "a", "s", "s2"),
                                             after=("1", "b", "s", "s2"))])
    assert table.column_names == ("id", "Name")
    assert rows[0].before == ("1", "a") and rows[0].after == ("1", "b")
    other = TableInfo("x", "y", 2, T.columns, 1, ("id",))
    assert s.apply_table(other) is other
    ddl = s.apply_ddl(DDLEvent(1, "db", "t", "ALTER TABLE t ADD c INT", "add column", table_info=T))
    assert ddl.table_info.column_names == ("id", "Name")


def test_selector_dropping_handle_key_rejected():
    s = ColumnSelectors([ColumnSelector(["db.*"], ["*", "!id"])])
    with pytest.raises(ErrInvalidReplicaConfig, match=r"column-selectors\[0\]` drops handle-key column id of db.t"):
        s.verify([T])


def test_bad_column_rule_names_position():
    with pytest.raises(ErrInvalidReplicaConfig, match=r"columns\[1\] 'a.b'.*position 2"):
        ColumnSelectors([ColumnSelector(["db.*"], ["id", "a.b"])])


def test_selectors_refused_for_database_sinks():
    from sparkcdc.sink.registry import parse_sink_spec

    config = parse_replica_config('[[sink.column-selectors]]\nmatcher = ["db.*"]\ncolumns = ["*"]\n')
    assert parse_sink_spec("file:///tmp/x?protocol=csv", config).column_selectors_allowed
    assert parse_sink_spec("kafka://h:9092/t?protocol=canal-json", config).column_selectors_allowed
    with pytest.raises(ErrInvalidReplicaConfig, match="mysql:// sink writes whole rows.*only to MQ and storage sinks"):
        parse_sink_spec("mysql://root@127.0.0.1:3306/", config)


def test_storage_sink_writes_only_selected_columns(tmp_path):
    import glob

    from sparkcdc.model.events import DDLEvent
    from sparkcdc.sink.registry import parse_sink_spec

    config = parse_replica_config('[[sink.column-selectors]]\nmatcher = ["db.t"]\ncolumns = ["*", "!secret*"]\n')
    uri = f"file://{tmp_path}?protocol=csv"
    filters = ChangeFilters(config)
    sink = parse_sink_spec(uri, config).open()
    try:
        sink.write_ddl(filters.ddl(DDLEvent(1, "db", "t", "CREATE TABLE t (...)", "create table", table_info=T)))
        table, rows = filters.rows(T, [RowChange(2, "db", "t", "insert", after=("1", "n", "TOP", "TOP2"))])
        sink.write_rows(table, rows)
        sink.flush()
    finally:
        sink.close()
    data = "".join(open(f).read() for f in glob.glob(f"{tmp_path}/db/t/**/*.csv", recursive=True))
    assert '"n"' in data and "TOP" not in data
    schemas = glob.glob(f"{tmp_path}/db/t/meta/schema_*.json")
    assert schemas and all('"secret' not in open(s).read() for s in schemas)
