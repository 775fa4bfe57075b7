import json
import urllib.request

import pytest

from sparkcdc.api.server import serve
from sparkcdc.cli.main import main
from sparkcdc.config.replica import ReplicaConfig, parse_replica_config
from sparkcdc.errors import ErrInvalidReplicaConfig
from sparkcdc.filter.eligibility import classify_tables
from sparkcdc.model.events import ColumnInfo, TableInfo
from sparkcdc.server.metastore import MetaStore
from test_api_server import FakeController

KEYED = TableInfo("db", "keyed", 1, (ColumnInfo("id", "int", is_primary_key=True, nullable=False),), 1, ("id",))
LOOSE = TableInfo("db", "loose", 2, (ColumnInfo("v", "int"),), 1, ())
OTHER = TableInfo("other", "t", 3, (ColumnInfo("v", "int"),), 1, ())


def test_classify_by_filter_and_index():
    eligible, ineligible = classify_tables([KEYED, LOOSE, OTHER], parse_replica_config('[filter]\nrules = ["db.*"]\n'))
    assert [t.table for t in eligible] == ["keyed"] and [t.table for t in ineligible] == ["loose"]
    config = ReplicaConfig(force_replicate=True)
    assert classify_tables([LOOSE], config) == ([LOOSE], [])


def test_selector_dropping_key_fails_verification():
    config = parse_replica_config('[[sink.column-selectors]]\nmatcher = ["db.*"]\ncolumns = ["v"]\n')
    with pytest.raises(ErrInvalidReplicaConfig, match="handle-key column id of db.keyed"):
        classify_tables([KEYED, LOOSE], config)


class VerifyingController(FakeController):
    def verify_tables(self, config, start_ts, sink_uri=""):
        return classify_tables([KEYED, LOOSE, OTHER], config)


@pytest.fixture
def server(tmp_path):
    api = serve("127.0.0.1:0", MetaStore(str(tmp_path / "meta.sqlite")), VerifyingController())
    api.start()
    yield f"http://127.0.0.1:{api.port}"
    api.shutdown()


def test_verify_table_endpoint(server):
    body = json.dumps({"replica_config": {"filter": {"rules": ["db.*"]}}, "start_ts": 0}).encode()
    request = urllib.request.Request(server + "/api/v2/verify_table", data=body, method="POST",
                                     headers={"Content-Type": "application/json"})
    result = json.loads(urllib.request.urlopen(request).read())
    assert result == {
        "ineligible_tables": [{"database_name": "db", "table_name": "loose", "table_id": 2, "is_partition": False}],
        "eligible_tables": [{"database_name": "db", "table_name": "keyed", "table_id": 1, "is_partition": False}],
    }


def test_create_asks_about_ineligible_tables(server, capsys, monkeypatch, tmp_path):
    import io
    config = tmp_path / "cf.toml"
    config.write_text('[filter]\nrules = ["db.*"]\n')
    argv = ["cli", "changefeed", "create", "--server", server, "--sink-uri", "blackhole://", "--config", str(config)]
    monkeypatch.setattr("sys.stdin", io.StringIO("n\n"))
    assert main(argv + ["-c", "cf-no"]) == 0
    out = capsys.readouterr().out
    assert "db.loose" in out and "No changefeed is created" in out
    monkeypatch.setattr("sys.stdin", io.StringIO("y\n"))
    assert main(argv + ["-c", "cf-yes"]) == 0
    assert "Create changefeed successfully" in capsys.readouterr().out
    assert main(argv + ["-c", "cf-noconfirm", "--no-confirm"]) == 0
    out = capsys.readouterr().out
    assert "db.loose" in out and "Create changefeed successfully" in out
