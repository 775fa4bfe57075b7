"""Secrets stay out of text, logs, Spark options and the command line (issue 20 item 5)."""

import argparse
import logging
import os
import re
import stat

import pytest

from sparkcdc.cli.logs import SecretMaskingFormatter, configure_logging
from sparkcdc.cli.server_cmd import UPSTREAM_PASSWORD_ENV, make_private, upstream_uri
from sparkcdc.config.secrets import mask_document, mask_stored_value, mask_text
from sparkcdc.errors import ErrUpstreamURIInvalid
from sparkcdc.pipeline.planning import SourceOptions
from sparkcdc.upstream.connection import UpstreamConfig


@pytest.mark.parametrize("text, secret", [
    ("upstream_uri mysql://cdc:Upstr3am@127.0.0.1:3306/", "Upstr3am"),
    ("mysql://root:p@ss-w0rd@127.0.0.1:3306/ failed", "ss-w0rd"),
    ("s3://b/p?endpoint=http://127.0.0.1:9000&access-key=AK1&secret-access-key=SK/1+x&protocol=csv", "SK/1+x"),
    ("azblob://c/p?account-name=dev&account-key=QUJD==&protocol=canal-json", "QUJD=="),
    ("kafka://h:9092/t?protocol=canal-json&sasl-user=u&sasl-password=KPW9&sasl-mechanism=PLAIN", "KPW9"),
    ("gcs://b/p?credentials-file=/keys/sa.json&protocol=csv", "/keys/sa.json"),
    ("UpstreamConfig(host='h', port=1, user='u', password='pw with space')", "pw with space"),
    ('{"sasl_password": "hunter2", "sasl_user": "bob"}', "hunter2"),
    ("{'sasl.password': 'x1y2', 'bootstrap.servers': 'h:9092'}", "x1y2"),
    ("secret_access_key=ABC123 region=us-east-1", "ABC123"),
    ("SPARKCDC_UPSTREAM_PASSWORD=envpw1", "envpw1"),
    ("query: CREATE USER 'app'@'%' IDENTIFIED BY 'B1nlogPw'", "B1nlogPw"),
    ("ALTER USER app IDENTIFIED WITH mysql_native_password AS \"*ABCDEF\"", "*ABCDEF"),
    ("SET PASSWORD FOR 'app'@'%' = PASSWORD('Old-Pw')", "Old-Pw"),
    ("SET PASSWORD = 'direct'", "direct"),
])
def test_mask_text_hides_each_kind_of_secret(text, secret):
    masked = mask_text(text)
    assert secret not in masked and "xxxxx" in masked
    assert mask_text(masked) == masked  # idempotent


@pytest.mark.parametrize("text", [
    "Access denied for user 'cdc'@'localhost' (using password: YES)",  # says whether, not what
    "mysql://root@127.0.0.1:3306/ file:///tmp/a?protocol=csv http://h:80/x",
    "key=(1, 2) rows=5 tokens=7 account-name=dev",
])
def test_mask_text_leaves_what_is_not_a_secret(text):
    assert mask_text(text) == text


def test_mask_document_masks_secret_keys_and_uris_at_any_depth():
    document = {"sink": {"kafka_config": {"sasl_password": "pw1", "sasl_user": "bob"}},
                "consistent": {"storage": "s3://b/redo?secret-access-key=SK2&endpoint=http://h"},
                "list": ["mysql://u:pw3@h:1/"], "count": 3}
    masked = mask_document(document)
    assert masked["sink"]["kafka_config"] == {"sasl_password": "xxxxx", "sasl_user": "bob"}
    assert masked["consistent"]["storage"] == "s3://b/redo?secret-access-key=xxxxx&endpoint=http://h"
    assert masked["list"] == ["mysql://u:xxxxx@h:1/"] and masked["count"] == 3
    assert "SK2" not in mask_stored_value(str(document).replace("'", '"'))


def test_every_log_line_is_masked_whatever_the_level(caplog):
    formatter = SecretMaskingFormatter("%(levelname)s %(message)s")
    try:
        raise ValueError("cannot reach mysql://u:TracebackPw@h:1/")
    except ValueError:
        record = logging.LogRecord("sparkcdc.x", logging.DEBUG, __file__, 1, "options %s", ({"password": "ArgPw"},),
                                   exc_info=__import__("sys").exc_info())
    line = formatter.format(record)
    assert "ArgPw" not in line and "TracebackPw" not in line and "Traceback" in line


def test_py4j_wire_trace_stays_off_at_debug():
    """py4j's DEBUG lines carry every Spark call's arguments and the gateway's auth token."""
    root = logging.getLogger()
    before = root.level
    try:
        configure_logging("debug")
        root.setLevel(logging.DEBUG)  # what POST /api/v2/log {"log_level": "debug"} does
        assert not logging.getLogger("py4j.clientserver").isEnabledFor(logging.DEBUG)
        assert logging.getLogger("sparkcdc.api").isEnabledFor(logging.DEBUG)
    finally:
        root.setLevel(before)


def test_source_options_pass_the_upstream_password_under_a_key_spark_redacts():
    options = SourceOptions(index_path="i", upstream_uri="mysql://cdc:S3cr%40t@h:3306/", start_ts=1).to_options()
    assert options["upstream_uri"] == "mysql://cdc@h:3306/" and options["upstream_password"] == "S3cr@t"
    spark_redaction_regex = re.compile(r"(?i)secret|password|token|access[.]?key")  # spark.redaction.regex
    assert [key for key, value in options.items() if "S3cr" in value] == ["upstream_password"]
    assert spark_redaction_regex.search("upstream_password")
    back = SourceOptions.from_options(options)
    assert UpstreamConfig.from_uri(back.upstream_uri).password == "S3cr@t"
    assert "S3cr" not in repr(UpstreamConfig.from_uri(back.upstream_uri))


def _args(tmp_path, uri="mysql://cdc@127.0.0.1:3306/", password_file=None):
    return argparse.Namespace(upstream_uri=uri, upstream_password_file=password_file)


def test_upstream_password_from_file_or_environment(tmp_path, monkeypatch):
    secret = tmp_path / "pw"
    secret.write_text("f1le:pw@x\n")
    monkeypatch.setenv(UPSTREAM_PASSWORD_ENV, "env-pw")
    uri = upstream_uri(_args(tmp_path, password_file=str(secret)))
    assert UpstreamConfig.from_uri(uri).password == "f1le:pw@x"  # the flag wins over the environment
    assert UPSTREAM_PASSWORD_ENV not in os.environ  # Spark's JVM and workers do not inherit it

    monkeypatch.setenv(UPSTREAM_PASSWORD_ENV, "env-pw")
    assert UpstreamConfig.from_uri(upstream_uri(_args(tmp_path))).password == "env-pw"
    monkeypatch.setenv(UPSTREAM_PASSWORD_ENV, "env-pw")
    assert upstream_uri(_args(tmp_path, uri="mysql://cdc:uri-pw@h:1/")) == "mysql://cdc:uri-pw@h:1/"


@pytest.mark.parametrize("uri, content, words", [
    ("mysql://cdc:uri-pw@h:1/", "pw", "given twice"),
    ("mysql://cdc@h:1/", "\n", "is empty"),
    ("mysql://cdc@h:1/", None, "cannot read --upstream-password-file"),
])
def test_upstream_password_file_errors(tmp_path, uri, content, words):
    path = tmp_path / "pw"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ErrUpstreamURIInvalid) as error:
        upstream_uri(_args(tmp_path, uri=uri, password_file=str(path)))
    assert words in str(error.value) and "uri-pw" not in str(error.value)


def test_make_private_creates_and_tightens(tmp_path):
    fresh = tmp_path / "fresh"
    make_private(str(fresh), directory=True)
    assert stat.S_IMODE(fresh.stat().st_mode) & 0o077 == 0
    loose = tmp_path / "loose"
    loose.mkdir(mode=0o755)
    os.chmod(loose, 0o755)
    make_private(str(loose), directory=True)
    assert stat.S_IMODE(loose.stat().st_mode) == 0o700
    log_file = tmp_path / "server.log"
    log_file.write_text("")
    os.chmod(log_file, 0o644)
    make_private(str(log_file), directory=False)
    assert stat.S_IMODE(log_file.stat().st_mode) == 0o600
    make_private(str(tmp_path / "absent.log"), directory=False)
    assert not (tmp_path / "absent.log").exists()
