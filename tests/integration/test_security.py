"""A real `sparkcdc server` with TLS, a client-CN allow list and TiCDC's client users, whose
passwords are checked by the real upstream MariaDB; driven by the real `sparkcdc cli`."""

import base64
import json
import os
import subprocess
import sys

import pytest

from sparkcdc.server.security import client_ssl_context
from sparkcdc.testing.server_process import ServerProcess
from sparkcdc.testing.tls import TestCA

pytestmark = pytest.mark.integration

PASSWORD = "Adm1n-pw!x7"


@pytest.fixture(scope="module")
def secured(mariadb, tmp_path_factory):
    base = tmp_path_factory.mktemp("secured")
    ca = TestCA(str(base / "pki"))
    rogue_ca = TestCA(str(base / "pki"), name="rogue-ca")
    pki = {"ca": ca.ca_path, "server": ca.issue("127.0.0.1", server=True), "cli": ca.issue("cdc-cli"),
           "other": ca.issue("intruder"), "rogue": rogue_ca.issue("cdc-cli-rogue")}
    conn = mariadb.connect()
    with conn.cursor() as cur:
        for user in ("cdcadmin", "outsider"):
            for host in ("%", "127.0.0.1", "localhost"):
                cur.execute(f"CREATE USER IF NOT EXISTS '{user}'@'{host}' IDENTIFIED BY '{PASSWORD}'")
        cur.execute("CREATE DATABASE IF NOT EXISTS secured_db")
        cur.execute("CREATE TABLE IF NOT EXISTS secured_db.t (id INT PRIMARY KEY, v VARCHAR(10))")
    conn.close()
    config = base / "server.toml"
    config.write_text('[security]\nclient-user-required = true\nclient-allowed-user = ["cdcadmin"]\n')
    server = ServerProcess(
        str(base / "cdc"), mariadb.uri,
        extra_args=("--config", str(config), "--ca", pki["ca"], "--cert", pki["server"].cert,
                    "--key", pki["server"].key, "--cert-allowed-cn", "cdc-cli,cdc-ops",
                    "--spark-master", "local[1]"),
        ssl_context=client_ssl_context(pki["ca"], pki["cli"].cert, pki["cli"].key),
    ).start()
    yield server, pki, base
    server.stop()


def cli(server, *args, cert=None, env=None):
    tls = ["--ca", cert["ca"], "--cert", cert["cert"], "--key", cert["key"]] if cert else []
    return subprocess.run([sys.executable, "-m", "sparkcdc.cli.main", "cli", *args, "--server", server.url, *tls],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, **(env or {})}, stdin=subprocess.DEVNULL)


def test_unlisted_or_missing_client_certificates_are_refused(secured):
    server, pki, _ = secured
    good = {"ca": pki["ca"], "cert": pki["cli"].cert, "key": pki["cli"].key}
    assert cli(server, "capture", "list", cert=good).returncode == 0
    for name in ("other", "rogue"):
        refused = cli(server, "capture", "list", cert={"ca": pki["ca"], "cert": pki[name].cert, "key": pki[name].key})
        assert refused.returncode == 1 and "ErrServerUnreachable" in refused.stderr, refused.stderr
    no_cert = subprocess.run([sys.executable, "-m", "sparkcdc.cli.main", "cli", "capture", "list",
                              "--server", server.url, "--ca", pki["ca"]], capture_output=True, text=True, timeout=60)
    assert no_cert.returncode == 1 and "cannot reach" in no_cert.stderr
    plain = subprocess.run([sys.executable, "-m", "sparkcdc.cli.main", "cli", "capture", "list",
                            "--server", server.url.replace("https", "http")], capture_output=True, text=True,
                           timeout=60)
    assert plain.returncode == 1


def test_client_users_are_checked_by_the_upstream(secured):
    server, pki, base = secured
    good = {"ca": pki["ca"], "cert": pki["cli"].cert, "key": pki["cli"].key}
    create = ("changefeed", "create", "-c", "secure-cf", "--no-confirm",
              "--sink-uri", f"file://{base}/out?protocol=canal-json")
    anonymous = cli(server, *create, cert=good)
    assert anonymous.returncode == 1 and "SPARKCDC:ErrClientAuthFailed" in anonymous.stderr
    wrong = cli(server, *create, "--user", "cdcadmin", "--password", "not-it", cert=good)
    assert wrong.returncode == 1 and "wrong password" in wrong.stderr
    outsider = cli(server, *create, "--user", "outsider", "--password", PASSWORD, cert=good)
    assert outsider.returncode == 1 and "not in security.client-allowed-user" in outsider.stderr
    # Reads need no user (TiCDC's rule): nothing was created by the refused calls.
    assert json.loads(cli(server, "changefeed", "list", cert=good).stdout) == []

    env = {"TICDC_USER": "cdcadmin", "TICDC_PASSWORD": PASSWORD}
    created = cli(server, *create, cert=good, env=env)
    assert created.returncode == 0 and "Create changefeed successfully!" in created.stdout, created.stderr
    listing = json.loads(cli(server, "changefeed", "list", cert=good).stdout)
    assert [row["id"] for row in listing] == ["secure-cf"]
    processors = json.loads(cli(server, "processor", "list", cert=good).stdout)
    assert [p["changefeed_id"] for p in processors] == ["secure-cf"]
    capture_id = processors[0]["capture_id"]
    query = json.loads(cli(server, "processor", "query", "-c", "secure-cf", "-p", capture_id, cert=good).stdout)
    eligible = server.api("POST", "/api/v2/verify_table", {})["eligible_tables"]
    secured_table = next(t["table_id"] for t in eligible if (t["database_name"], t["table_name"]) == ("secured_db", "t"))
    assert secured_table in query["status"]["table_ids"]
    assert query["status"]["table_ids"] == sorted(t["table_id"] for t in eligible)
    synced = json.loads(cli(server, "changefeed", "synced", "-c", "secure-cf", cert=good).stdout)
    assert isinstance(synced["synced"], bool) and synced["puller_resolved_ts"] >= synced["sink_checkpoint_ts"]
    statistics = json.loads(cli(server, "changefeed", "statistics", "-c", "secure-cf", "--iterations", "1",
                                cert=good).stdout)
    assert statistics["replication_gap"].endswith("ms")
    metadata = cli(server, "unsafe", "show-metadata", cert=good).stdout
    assert "/changefeed/info/secure-cf" in metadata and metadata.rstrip().endswith("KVs")
    assert cli(server, "changefeed", "pause", "-c", "secure-cf", cert=good, env=env).returncode == 0
    assert cli(server, "changefeed", "remove", "-c", "secure-cf", cert=good, env=env).returncode == 0

    log = open(os.path.join(server.data_dir, "server.log"), encoding="utf-8", errors="replace").read()
    assert "POST /api/v2/changefeeds 401" in log and "POST /api/v2/changefeeds 200" in log
    assert "POST /api/v2/verify_table 200" in log  # read-only POSTs need no user, as in TiCDC
    for secret in (PASSWORD, base64.b64encode(f"cdcadmin:{PASSWORD}".encode()).decode(), "not-it"):
        assert secret not in log
