import pytest

from sparkcdc.errors import ErrUpstreamBinlogConfig, ErrUpstreamPrivilege, ErrUpstreamUnreachable
from sparkcdc.upstream.connection import UpstreamConfig
from sparkcdc.upstream.preflight import preflight

pytestmark = pytest.mark.integration


def test_passes_on_fixture(mariadb):
    assert preflight(UpstreamConfig.from_uri(mariadb.uri)) == "mariadb"


@pytest.mark.parametrize(
    "variable,value",
    [("binlog_format", "STATEMENT"), ("binlog_row_metadata", "MINIMAL"), ("binlog_row_image", "MINIMAL"), ("log_bin_compress", "ON")],
)
def test_fails_naming_variable_and_fix(mariadb_factory, variable, value):
    server = mariadb_factory(extra_config={variable: value})
    with pytest.raises(ErrUpstreamBinlogConfig) as info:
        preflight(UpstreamConfig.from_uri(server.uri))
    message = str(info.value)
    assert variable in message and value in message.upper() and "restart" in message


def test_fails_without_replication_grants(mariadb):
    conn = mariadb.connect()
    with conn.cursor() as cur:
        cur.execute("CREATE USER IF NOT EXISTS 'plain'@'%' IDENTIFIED BY 'pw'")
        cur.execute("GRANT SELECT ON *.* TO 'plain'@'%'")
    conn.close()
    with pytest.raises(ErrUpstreamPrivilege) as info:
        preflight(UpstreamConfig("127.0.0.1", mariadb.port, "plain", "pw"))
    assert "REPLICATION SLAVE" in str(info.value) and "GRANT" in str(info.value)


def test_passes_with_minimal_grants(mariadb):
    conn = mariadb.connect()
    with conn.cursor() as cur:
        cur.execute("CREATE USER IF NOT EXISTS 'repl'@'%' IDENTIFIED BY 'pw'")
        cur.execute("GRANT REPLICATION SLAVE, BINLOG MONITOR ON *.* TO 'repl'@'%'")
    conn.close()
    assert preflight(UpstreamConfig("127.0.0.1", mariadb.port, "repl", "pw")) == "mariadb"


def test_unreachable():
    with pytest.raises(ErrUpstreamUnreachable):
        preflight(UpstreamConfig("127.0.0.1", 1, "root", ""))
