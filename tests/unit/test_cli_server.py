"""`sparkcdc server` refuses bad security settings before starting anything."""

import pytest

from sparkcdc.cli.main import main


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
