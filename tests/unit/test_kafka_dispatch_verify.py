"""A column selector may not drop a column a `[[sink.dispatchers]]` rule hashes (TiCDC's
ColumnSelectors.VerifyTables / EventRouter.VerifyTables): refused when the changefeed is created."""

from __future__ import annotations

import pytest

from sparkcdc.api.server import serve
from sparkcdc.cli.main import main
from sparkcdc.config.replica import parse_replica_config
from sparkcdc.errors import ErrColumnSelectorFailed, ErrInvalidReplicaConfig
from sparkcdc.model.events import ColumnInfo, TableInfo
from sparkcdc.server.metastore import MetaStore
from sparkcdc.sink.registry import verify_tables
from test_api_server import FakeController

ORDERS = TableInfo("shop", "orders", 1, (
    ColumnInfo("id", "int", is_primary_key=True, nullable=False),
    ColumnInfo("customer", "int"),
    ColumnInfo("note", "varchar", length=20),
), 1, ("id",))
OTHER = TableInfo("other", "t", 2, ORDERS.columns, 1, ("id",))

DISPATCH_BY_CUSTOMER = ('[[sink.dispatchers]]\nmatcher = ["other.*"]\npartition = "table"\n'
                        '[[sink.dispatchers]]\nmatcher = ["shop.*"]\npartition = "columns"\ncolumns = ["Customer"]\n')


def config(selector_columns: str, dispatchers: str = DISPATCH_BY_CUSTOMER):
    return parse_replica_config(dispatchers + '[[sink.column-selectors]]\nmatcher = ["shop.*"]\n'
                                f'columns = {selector_columns}\n')


def test_selector_dropping_a_dispatch_column_names_the_column_and_the_rule():
    with pytest.raises(ErrColumnSelectorFailed) as raised:
        verify_tables([ORDERS, OTHER], config('["*", "!customer"]'))
    message = str(raised.value)
    assert "'customer'" in message and "shop.orders" in message
    assert '`sink.dispatchers[1]` (partition = "columns")' in message


def test_kept_dispatch_columns_and_other_tables_pass():
    eligible, _ = verify_tables([ORDERS, OTHER], config('["*", "!note"]'))
    assert [t.table for t in eligible] == ["orders", "t"]
    # The selector applies to shop.* only: other.t keeps every column whatever its dispatcher.
    verify_tables([OTHER], config('["id"]', '[[sink.dispatchers]]\nmatcher = ["*.*"]\npartition = "columns"\n'
                                                'columns = ["note"]\n'))


def test_dispatch_column_the_table_lacks_is_refused():
    with pytest.raises(ErrInvalidReplicaConfig, match=r"dispatchers\[0\]` dispatches shop.orders by column 'region'"):
        verify_tables([ORDERS], parse_replica_config(
            '[[sink.dispatchers]]\nmatcher = ["shop.*"]\npartition = "columns"\ncolumns = ["region"]\n'))


def test_index_value_primary_on_a_selected_out_column():
    table = TableInfo("shop", "keyed_by_uk", 3, (
        ColumnInfo("id", "int", is_primary_key=True, nullable=False),
        ColumnInfo("code", "int", is_unique_key=True, nullable=False),
    ), 1, ("code",))
    with pytest.raises(ErrColumnSelectorFailed, match=r"drops column 'id'.*index = \"PRIMARY\""):
        verify_tables([table], config('["code"]', '[[sink.dispatchers]]\nmatcher = ["shop.*"]\n'
                                                    'partition = "index-value"\nindex = "PRIMARY"\n'))


class VerifyingController(FakeController):
    def verify_tables(self, config, start_ts, sink_uri=""):
        return verify_tables([ORDERS, OTHER], config)


def test_changefeed_create_fails_with_the_error(tmp_path, capsys):
    api = serve("127.0.0.1:0", MetaStore(str(tmp_path / "meta.sqlite")), VerifyingController())
    api.start()
    try:
        path = tmp_path / "cf.toml"
        path.write_text(DISPATCH_BY_CUSTOMER + '[[sink.column-selectors]]\nmatcher = ["shop.*"]\n'
                        'columns = ["id", "note"]\n')
        code = main(["cli", "changefeed", "create", "--server", f"http://127.0.0.1:{api.port}", "-c", "cf",
                     "--sink-uri", "kafka://127.0.0.1:9092/t?protocol=canal-json", "--config", str(path)])
        output = capsys.readouterr()
        assert code != 0
        text = output.out + output.err
        assert "SPARKCDC:ErrColumnSelectorFailed" in text and "'customer'" in text and "sink.dispatchers[1]" in text
        assert "Create changefeed successfully" not in text
    finally:
        api.shutdown()


def test_changefeed_update_fails_with_the_error(tmp_path, capsys):
    api = serve("127.0.0.1:0", MetaStore(str(tmp_path / "meta.sqlite")), VerifyingController())
    api.start()
    try:
        server = f"http://127.0.0.1:{api.port}"
        good = tmp_path / "good.toml"
        good.write_text(DISPATCH_BY_CUSTOMER)
        assert main(["cli", "changefeed", "create", "--server", server, "-c", "cf", "--config", str(good),
                     "--sink-uri", "kafka://127.0.0.1:9092/t?protocol=canal-json"]) == 0
        bad = tmp_path / "bad.toml"
        bad.write_text(DISPATCH_BY_CUSTOMER + '[[sink.column-selectors]]\nmatcher = ["shop.*"]\ncolumns = ["id"]\n')
        capsys.readouterr()
        code = main(["cli", "changefeed", "update", "--server", server, "-c", "cf", "--config", str(bad), "--no-confirm"])
        output = capsys.readouterr()
        assert code != 0
        assert "'customer'" in output.out + output.err and "sink.dispatchers[1]" in output.out + output.err
    finally:
        api.shutdown()
