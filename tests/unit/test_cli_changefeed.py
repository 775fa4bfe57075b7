import json

import pytest

from sparkcdc.cli.main import main
from sparkcdc.model import tso
from test_api_server import NOW, FakeController  # noqa: F401  (same fake as the API tests)
from sparkcdc.api.server import serve
from sparkcdc.server.metastore import MetaStore


@pytest.fixture
def server(tmp_path):
    store = MetaStore(str(tmp_path / "meta.sqlite"))
    api = serve("127.0.0.1:0", store, FakeController())
    api.start()
    api.store = store
    yield f"http://127.0.0.1:{api.port}"
    api.shutdown()


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def cf(server, *argv):
    return ["cli", "changefeed", *argv, "--server", server]


def test_create_list_query_pause_resume_update_remove(server, capsys, tmp_path):
    config = tmp_path / "cf.toml"
    config.write_text('[sink]\nprotocol = "csv"\n[sink.csv]\ndelimiter = "|"\n')
    code, out, err = run(capsys, *cf(server, "create", "-c", "cf-1", "--sink-uri",
                                     "mysql://u:pw@h:3306/", "--config", str(config), "--start-ts", "1000"))
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == "Create changefeed successfully!" and lines[1] == "ID: cf-1"
    info = json.loads(lines[2].removeprefix("Info: "))
    assert info["sink_uri"] == "mysql://u:xxxxx@h:3306/" and info["config"]["sink"]["csv"]["delimiter"] == "|"

    code, out, _ = run(capsys, *cf(server, "list"))
    assert json.loads(out) == [{"id": "cf-1", "namespace": "default", "summary": {
        "state": "normal", "tso": 1000, "checkpoint": tso.format_time(1000), "error": None}}]

    code, out, _ = run(capsys, *cf(server, "query", "-s", "-c", "cf-1"))
    assert json.loads(out)["state"] == "normal" and json.loads(out)["checkpoint_tso"] == 1000
    code, out, _ = run(capsys, *cf(server, "query", "-c", "cf-1"))
    full = json.loads(out)
    assert full["start_ts"] == 1000 and "pw" not in full["sink_uri"] and full["error_history"] is None

    assert run(capsys, *cf(server, "pause", "-c", "cf-1"))[0] == 0
    code, out, _ = run(capsys, *cf(server, "update", "-c", "cf-1", "--target-ts", "9000", "--no-confirm"))
    assert code == 0 and "Update changefeed config successfully!" in out and '"target_ts": 9000' in out
    code, _, err = run(capsys, *cf(server, "resume", "-c", "cf-1", "--overwrite-checkpoint-ts", "2000",
                                   "--no-confirm"))
    assert code == 0, err
    code, out, _ = run(capsys, *cf(server, "query", "-s", "-c", "cf-1"))
    assert json.loads(out)["checkpoint_tso"] == 2000

    code, out, _ = run(capsys, *cf(server, "remove", "-c", "cf-1"))
    assert code == 0 and "Changefeed remove successfully." in out and "CheckpointTs: 2000" in out
    code, _, err = run(capsys, *cf(server, "query", "-c", "cf-1"))
    assert code == 1 and err.startswith("Error: [SPARKCDC:ErrChangefeedNotExists]")


def test_resume_now_uses_server_tso(server, capsys, monkeypatch):
    run(capsys, *cf(server, "create", "-c", "cf-1", "--sink-uri", "blackhole://", "--start-ts", "1000"))
    run(capsys, *cf(server, "pause", "-c", "cf-1"))
    monkeypatch.setattr("sys.stdin", __import__("io").StringIO("n\n"))
    code, out, _ = run(capsys, *cf(server, "resume", "-c", "cf-1", "--overwrite-checkpoint-ts", "now"))
    assert code == 0 and "No changefeed is resumed." in out
    code, _, err = run(capsys, *cf(server, "resume", "-c", "cf-1", "--overwrite-checkpoint-ts", "now",
                                   "--no-confirm"))
    assert code == 0, err
    code, out, _ = run(capsys, *cf(server, "query", "-s", "-c", "cf-1"))
    assert json.loads(out)["checkpoint_tso"] == NOW


@pytest.mark.parametrize("start, resolved", [("0-1-876", 3000), ("mysql-bin.000002:4567", 1500), ("1000", 1000)])
def test_start_ts_takes_what_the_api_takes(server, capsys, start, resolved):
    """`--start-ts 0-1-876` exited 2 with "is not a TSO" though the API took it (issue 20 item 4)."""
    code, out, err = run(capsys, *cf(server, "create", "-c", "cf-1", "--sink-uri", "blackhole://", "--start-ts", start))
    assert code == 0, err
    assert json.loads(out.splitlines()[2].removeprefix("Info: "))["start_ts"] == resolved
    run(capsys, *cf(server, "pause", "-c", "cf-1"))
    code, _, err = run(capsys, *cf(server, "resume", "-c", "cf-1", "--overwrite-checkpoint-ts", start, "--no-confirm"))
    assert code == 0, err
    assert json.loads(run(capsys, *cf(server, "query", "-s", "-c", "cf-1"))[1])["checkpoint_tso"] == resolved


def test_a_future_or_empty_start_is_refused(server, capsys):
    hour_ahead = str(tso.compose(tso.physical_ms(NOW) + 3_600_000))
    code, _, err = run(capsys, *cf(server, "create", "-c", "cf-1", "--sink-uri", "blackhole://",
                                   "--start-ts", hour_ahead))
    assert code == 1 and "ErrStartTsInvalid" in err and "larger than the current TSO" in err
    run(capsys, *cf(server, "create", "-c", "cf-1", "--sink-uri", "blackhole://"))
    run(capsys, *cf(server, "pause", "-c", "cf-1"))
    for overwrite in (hour_ahead, "0", "-5"):
        code, _, err = run(capsys, *cf(server, "resume", "-c", "cf-1", "--overwrite-checkpoint-ts", overwrite,
                                       "--no-confirm"))
        assert code == 1 and "ErrStartTsInvalid" in err, (overwrite, err)
    with pytest.raises(SystemExit) as exited:  # argparse's own refusal
        run(capsys, *cf(server, "create", "-c", "cf-2", "--sink-uri", "blackhole://", "--start-ts", "-5"))
    assert exited.value.code == 2 and "a GTID (0-1-25) or a binlog FILE:POS" in capsys.readouterr().err


def test_bad_config_fails_before_any_request(capsys, tmp_path):
    config = tmp_path / "bad.toml"
    config.write_text('[sink.csv]\ndelimter = ","\n')
    # Nothing listens on port 1: the config error must come first.
    code, _, err = run(capsys, "cli", "changefeed", "create", "--server", "http://127.0.0.1:1",
                       "--sink-uri", "blackhole://", "--config", str(config))
    assert code == 1 and "ErrInvalidReplicaConfig" in err and "sink.csv.delimter" in err


def test_server_unreachable_names_the_address(capsys):
    code, _, err = run(capsys, "cli", "--server", "http://127.0.0.1:1", "changefeed", "list")
    assert code == 1 and "ErrServerUnreachable" in err and "http://127.0.0.1:1" in err


def test_server_errors_are_printed_with_their_code(server, capsys):
    code, _, err = run(capsys, *cf(server, "create", "-c", "bad_id", "--sink-uri", "blackhole://"))
    assert code == 1 and err.startswith("Error: [SPARKCDC:ErrChangefeedInvalidID]")


def test_capture_list_and_tso_query(server, capsys):
    code, out, _ = run(capsys, "cli", "capture", "list", "--server", server)
    assert json.loads(out) == [{"id": "cap-1", "is-owner": True, "address": "127.0.0.1:8300",
                                "cluster-id": "default"}]
    code, out, _ = run(capsys, "cli", "tso", "query", "--server", server)
    assert int(out) == NOW


def test_list_all_and_namespaces(server, capsys):
    run(capsys, *cf(server, "create", "-c", "a", "--sink-uri", "blackhole://", "-n", "ns2"))
    code, out, _ = run(capsys, *cf(server, "list", "-a"))
    assert [(r["id"], r["namespace"]) for r in json.loads(out)] == [("a", "ns2")]
    assert run(capsys, *cf(server, "pause", "-c", "a"))[0] == 1
    assert run(capsys, *cf(server, "pause", "-c", "a", "-n", "ns2"))[0] == 0


def test_processor_synced_and_unsafe_metadata(server, capsys):
    run(capsys, *cf(server, "create", "-c", "cf-1", "--sink-uri", "mysql://u:pw@h:3306/", "--no-confirm"))
    code, out, _ = run(capsys, "cli", "processor", "list", "--server", server)
    assert code == 0 and json.loads(out) == [{"namespace": "default", "changefeed_id": "cf-1", "capture_id": "cap-1"}]
    code, out, _ = run(capsys, "cli", "processor", "query", "-c", "cf-1", "-p", "cap-1", "--server", server)
    assert code == 0 and json.loads(out)["status"] == {"table_ids": [11, 12]}
    assert json.loads(out)["position"]["checkpoint-ts"] == NOW
    code, _, err = run(capsys, "cli", "processor", "query", "-c", "cf-1", "-p", "cap-2", "--server", server)
    assert code == 1 and "ErrProcessorNotExists" in err
    code, out, _ = run(capsys, *cf(server, "synced", "-c", "cf-1"))
    assert code == 0 and set(json.loads(out)) == {"synced", "sink_checkpoint_ts", "puller_resolved_ts",
                                                  "last_synced_ts", "now_ts", "info"}
    code, out, _ = run(capsys, "cli", "unsafe", "show-metadata", "--server", server)
    assert code == 0 and out.endswith("Show 0 KVs\n")


def test_tls_flags_need_https_and_users_go_in_basic_auth(server, capsys, tmp_path, monkeypatch):
    code, _, err = run(capsys, "cli", "capture", "list", "--server", server, "--ca", str(tmp_path / "ca.pem"))
    assert code == 1 and "ErrSecurityConfig" in err and "https://" in err
    seen = []
    from sparkcdc.api import client as client_module
    original = client_module.urllib.request.urlopen

    def spy(request, **kwargs):
        seen.append(request.get_header("Authorization"))
        return original(request, **kwargs)

    monkeypatch.setattr(client_module.urllib.request, "urlopen", spy)
    monkeypatch.setenv("TICDC_USER", "alice")
    monkeypatch.setenv("TICDC_PASSWORD", "pw:with:colons")
    assert run(capsys, "cli", "tso", "query", "--server", server)[0] == 0
    import base64
    assert seen == ["Basic " + base64.b64encode(b"alice:pw:with:colons").decode()]
    assert run(capsys, "cli", "tso", "query", "--server", server, "--user", "bob", "--password", "x")[0] == 0
    assert seen[-1] == "Basic " + base64.b64encode(b"bob:x").decode()


def test_statistics_prints_gaps(server, capsys):
    run(capsys, *cf(server, "create", "-c", "cf-1", "--sink-uri", "blackhole://", "--start-ts", "1000"))
    code, out, _ = run(capsys, *cf(server, "statistics", "-c", "cf-1", "--iterations", "1"))
    # the fake server's clock is NOW; the changefeed's checkpoint and resolved ts are 1000 (physical 0 ms);
    # no capture of the fake runs it, so there are no rows to count
    assert code == 0 and json.loads(out) == {"ops": None, "count": None, "sink_gap": "0ms",
                                             "replication_gap": f"{tso.physical_ms(NOW)}ms",
                                             "checkpoint": tso.format_time(1000)}
    assert run(capsys, *cf(server, "statistics", "-c", "cf-1", "-I", "0"))[0] == 1


def test_create_schema_registry_flag_sets_the_sink_config(server, capsys):
    code, out, err = run(capsys, *cf(server, "create", "-c", "avro-cf", "--no-confirm", "--log-level", "info",
                                     "--sink-uri", "kafka://127.0.0.1:9092/t?protocol=avro",
                                     "--schema-registry", "http://127.0.0.1:8081"))
    assert code == 0, err
    info = json.loads(out.splitlines()[2].removeprefix("Info: "))
    assert info["config"]["sink"]["schema_registry"] == "http://127.0.0.1:8081"


def test_credentials_file_is_the_last_source(server, capsys, tmp_path, monkeypatch):
    import base64
    import io
    import os
    import stat

    from sparkcdc.api import client as client_module

    monkeypatch.setenv("HOME", str(tmp_path))
    for name in ("TICDC_USER", "TICDC_PASSWORD", "TICDC_CA_PATH", "TICDC_CERT_PATH", "TICDC_KEY_PATH"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr("sys.stdin", io.StringIO('carol\nfile "pw"\n\n\n\n'))
    code, out, _ = run(capsys, "cli", "configure-credentials")
    path = tmp_path / ".ticdc" / "credentials"
    assert code == 0 and str(path) in out and stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert 'file \\"pw\\"' in path.read_text()

    seen = []
    original = client_module.urllib.request.urlopen
    monkeypatch.setattr(client_module.urllib.request, "urlopen",
                        lambda request, **kw: seen.append(request.get_header("Authorization")) or original(request, **kw))

    def basic(user, password):
        return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()

    assert run(capsys, "cli", "tso", "query", "--server", server)[0] == 0
    assert seen[-1] == basic("carol", 'file "pw"')
    monkeypatch.setenv("TICDC_USER", "dave")
    monkeypatch.setenv("TICDC_PASSWORD", "env-pw")
    assert run(capsys, "cli", "tso", "query", "--server", server)[0] == 0
    assert seen[-1] == basic("dave", "env-pw")
    assert run(capsys, "cli", "tso", "query", "--server", server, "--user", "erin", "--password", "flag-pw")[0] == 0
    assert seen[-1] == basic("erin", "flag-pw")

    monkeypatch.delenv("TICDC_USER")
    monkeypatch.delenv("TICDC_PASSWORD")
    path.write_text('ticdc_password = "orphan"\n')
    code, _, err = run(capsys, "cli", "tso", "query", "--server", server)
    assert code == 1 and "password is given without a user" in err
    path.write_text('ticdc_user = "x"\nport = 1\n')
    code, _, err = run(capsys, "cli", "tso", "query", "--server", server)
    assert code == 1 and "may only hold strings" in err and "port" in err
