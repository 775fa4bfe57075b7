"""`sparkcdc server` refuses bad security settings before starting anything."""

import os
import sys

import pytest

from sparkcdc.cli.main import main


@pytest.fixture(autouse=True)
def keep_process_state():
    """`sparkcdc server` sets its process's umask to 0077 and keeps pandas out of it
    (`keep_pandas_out`); these tests run it in pytest's process, whose later tests need neither."""
    before = os.umask(0o022)
    os.umask(before)
    finders = list(sys.meta_path)
    yield
    os.umask(before)
    sys.meta_path[:] = finders


@pytest.mark.parametrize("extra, message", [
    (["--cert-allowed-cn", "a", "--cert", "{cert}", "--key", "{key}"], "pass --ca too"),
    (["--cert", "{cert}"], "--cert and --key"),
    (["--cert", "{cert}", "--key", "{key}"], "cannot load the server certificate"),
    (["--cert", "{dir}/missing.pem", "--key", "{key}"], "cannot read cert-path"),
    (["--config", "{dir}/server.toml"], "reads only the [security] table; remove capture-session-ttl"),
    (["--config", "{dir}/missing.toml"], "cannot read --config"),
    (["--config", "{dir}/broken.toml"], "is not valid TOML"),
])
def test_bad_security_settings_fail_fast(tmp_path, capsys, extra, message):
    (tmp_path / "cert.pem").write_text("x")
    (tmp_path / "key.pem").write_text("x")
    (tmp_path / "server.toml").write_text("capture-session-ttl = 5\n[security]\n")
    (tmp_path / "broken.toml").write_text("[security\n")
    values = {"cert": str(tmp_path / "cert.pem"), "key": str(tmp_path / "key.pem"), "dir": str(tmp_path)}
    argv = ["server", "--upstream-uri", "mysql://root@127.0.0.1:1/", "--data-dir", str(tmp_path / "data"),
            *[arg.format(**values) for arg in extra]]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert "ErrSecurityConfig" in err and message in err
    assert not (tmp_path / "data").exists()  # nothing was started


@pytest.mark.parametrize("entry", ["spark.driver.memory", "driver.memory=2g", "=2g"])
def test_spark_conf_takes_spark_key_equals_value(tmp_path, capsys, entry):
    argv = ["server", "--upstream-uri", "mysql://root@127.0.0.1:1/", "--data-dir", str(tmp_path / "data"),
            "--spark-conf", entry]
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    assert "is not KEY=VALUE with a spark.* key" in capsys.readouterr().err
    assert not (tmp_path / "data").exists()


def test_spark_conf_is_refused_with_spark_remote(tmp_path, capsys):
    argv = ["server", "--upstream-uri", "mysql://root@127.0.0.1:1/", "--data-dir", str(tmp_path / "data"),
            "--spark-remote", "sc://127.0.0.1:15002", "--spark-conf", "spark.driver.memory=2g"]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert "ErrSparkRemoteInvalid" in err and "--spark-conf" in err
    assert not (tmp_path / "data").exists()


def test_addr_in_use_fails_before_the_puller_and_spark_start(tmp_path, capsys, monkeypatch):
    """--addr is bound first: a port another process listens on is a coded error at once, and the
    capture (puller, Spark) is never opened."""
    import socket

    from sparkcdc.server.capture import Capture

    def must_not_open(self):
        raise AssertionError("the capture was opened although --addr could not be bound")

    monkeypatch.setattr(Capture, "open", must_not_open)
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        addr = f"127.0.0.1:{holder.getsockname()[1]}"
        argv = ["server", "--upstream-uri", "mysql://root@127.0.0.1:1/", "--data-dir", str(tmp_path / "data"),
                "--addr", addr]
        assert main(argv) == 1
    err = capsys.readouterr().err
    assert "ErrServerListen" in err and f"cannot listen on --addr {addr}" in err and "another --addr" in err
