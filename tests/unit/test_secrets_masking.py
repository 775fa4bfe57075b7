"""Secrets stay out of text, logs, Spark options and the command line (issue 20 item 5)."""

import argparse
import logging
import os
import re
import stat

import pytest

from sparkcdc.cli.logs import SecretMaskingFormatter, configure_logging
from sparkcdc.cli.passwords import PasswordOption
from sparkcdc.cli.server_cmd import UPSTREAM, make_private
from sparkcdc.config.secrets import mask_document, mask_stored_value, mask_text
from sparkcdc.errors import ErrSinkURIInvalid, ErrUpstreamURIInvalid, SparkCDCError
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
    env = UPSTREAM.environment_variable
    assert env == "SPARKCDC_UPSTREAM_PASSWORD" and UPSTREAM.file_flag == "--upstream-password-file"
    secret = tmp_path / "pw"
    secret.write_text("f1le:pw@x\n")
    monkeypatch.setenv(env, "env-pw")
    uri = UPSTREAM.uri(_args(tmp_path, password_file=str(secret)))
    assert UpstreamConfig.from_uri(uri).password == "f1le:pw@x"  # the flag wins over the environment
    assert env not in os.environ  # Spark's JVM and workers do not inherit it

    monkeypatch.setenv(env, "env-pw")
    assert UpstreamConfig.from_uri(UPSTREAM.uri(_args(tmp_path))).password == "env-pw"
    monkeypatch.setenv(env, "env-pw")
    assert UPSTREAM.uri(_args(tmp_path, uri="mysql://cdc:uri-pw@h:1/")) == "mysql://cdc:uri-pw@h:1/"
    assert env not in os.environ


def test_every_command_with_a_mysql_uri_takes_its_password_from_a_file_or_the_environment(tmp_path, monkeypatch):
    """One helper for all: each URI flag has --<name>-password-file and SPARKCDC_<NAME>_PASSWORD."""
    from sparkcdc.cli import consumer_cmd, diff_cmd, redo_cmd, server_cmd
    from sparkcdc.cli.main import build_parser

    parser = build_parser()
    secret = tmp_path / "pw"
    secret.write_text("from-file\n")
    storage, kafka = ["consumer", "storage", "--upstream-uri", "f"], ["consumer", "kafka", "--upstream-uri", "k"]
    cases = [  # (command line without the option, the option, its file flag and variable)
        (storage, consumer_cmd.DOWNSTREAM, "--downstream-password-file", "SPARKCDC_DOWNSTREAM_PASSWORD"),
        (kafka + ["--downstream-uri", "mysql://o@h/"], consumer_cmd.UPSTREAM_MYSQL,
         "--upstream-mysql-password-file", "SPARKCDC_UPSTREAM_MYSQL_PASSWORD"),
        (kafka, consumer_cmd.DOWNSTREAM, "--downstream-password-file", "SPARKCDC_DOWNSTREAM_PASSWORD"),
        (["diff", "--target", "mysql://o@h/"], diff_cmd.SOURCE, "--source-password-file", "SPARKCDC_SOURCE_PASSWORD"),
        (["diff", "--source", "mysql://o@h/"], diff_cmd.TARGET, "--target-password-file", "SPARKCDC_TARGET_PASSWORD"),
        (["redo", "apply", "--storage", "file:///r"], redo_cmd.SINK, "--sink-password-file", "SPARKCDC_SINK_PASSWORD"),
        (["server"], server_cmd.UPSTREAM, "--upstream-password-file", "SPARKCDC_UPSTREAM_PASSWORD"),
    ]
    for command, option, file_flag, env in cases:
        assert (option.file_flag, option.environment_variable) == (file_flag, env)
        args = parser.parse_args([*command, option.flag, "mysql://u@h:3306/", file_flag, str(secret)])
        monkeypatch.setenv(env, "from-env")
        assert UpstreamConfig.from_uri(option.uri(args)).password == "from-file"
        assert env not in os.environ
        args = parser.parse_args([*command, option.flag, "mysql://u@h:3306/"])
        monkeypatch.setenv(env, "from-env")
        assert UpstreamConfig.from_uri(option.uri(args)).password == "from-env"
        args = parser.parse_args([*command, option.flag, "mysql://u:in-uri@h:3306/", file_flag, str(secret)])
        with pytest.raises(SparkCDCError, match="given twice"):
            option.uri(args)


def test_a_password_file_without_its_uri_is_refused():
    option = PasswordOption("downstream", ErrSinkURIInvalid)
    args = argparse.Namespace(downstream_uri="", downstream_password_file="pw")
    with pytest.raises(ErrSinkURIInvalid, match="--downstream-password-file is given without --downstream-uri"):
        option.uri(args)


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
        UPSTREAM.uri(_args(tmp_path, uri=uri, password_file=str(path)))
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
