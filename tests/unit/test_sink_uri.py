import pytest

from sparkcdc.config.sink_uri import classify_sink_uri, mask_sink_uri
from sparkcdc.errors import ErrSinkURIInvalid, ErrSinkUnsupported


@pytest.mark.parametrize("uri, kind", [
    ("file:///tmp/cdc?protocol=csv", "storage"),
    ("s3://bucket/prefix?protocol=canal-json", "storage"),
    ("gcs://b/p", "storage"), ("gs://b/p", "storage"), ("azblob://b/p", "storage"),
    ("azure://b/p", "storage"), ("noop://", "storage"),
    ("mysql://root:pw@127.0.0.1:3306/", "mysql"), ("mysql+ssl://h:1/", "mysql"),
    ("tidb://h:4000/", "mysql"), ("TiDB+SSL://h:4000/", "mysql"),
    ("kafka://b1:9092,b2:9092/topic?protocol=canal-json", "kafka"), ("kafka+ssl://b:9093/t", "kafka"),
    ("blackhole://", "blackhole"),
])
def test_classify(uri, kind):
    assert classify_sink_uri(uri) == kind


@pytest.mark.parametrize("uri, fragment", [
    ("", "empty"),
    ("no-scheme-here", "no scheme"),
    ("ftp://host/path", "unknown sink URI scheme 'ftp'"),
    ("http://[::1/x", "cannot be parsed"),
])
def test_classify_errors_list_supported_schemes(uri, fragment):
    with pytest.raises(ErrSinkURIInvalid) as info:
        classify_sink_uri(uri)
    assert fragment in info.value.message
    if uri and "[" not in uri:
        assert "kafka+ssl" in info.value.message and "azblob" in info.value.message


def test_pulsar_is_known_but_not_supported():
    with pytest.raises(ErrSinkUnsupported, match="not supported yet"):
        classify_sink_uri("pulsar://h:6650/t")


@pytest.mark.parametrize("uri, expected", [
    ("mysql://root:secret@127.0.0.1:3306/?worker-count=4", "mysql://root:xxxxx@127.0.0.1:3306/?worker-count=4"),
    ("mysql://root@h:3306/", "mysql://root@h:3306/"),
    ("kafka://b:9092/t?protocol=canal-json&sasl-user=u&sasl-password=p",
     "kafka://b:9092/t?protocol=canal-json&sasl-user=u&sasl-password=xxxxx"),
    ("azure://c/p?account-name=a&account-key=k&sas-token=t",
     "azure://c/p?account-name=a&account-key=xxxxx&sas-token=xxxxx"),
    ("s3://b/p?access-key=AK&secret-access-key=SK&endpoint=http://m:9000",
     "s3://b/p?access-key=xxxxx&secret-access-key=xxxxx&endpoint=http://m:9000"),
    ("file:///tmp/x?protocol=csv", "file:///tmp/x?protocol=csv"),
])
def test_mask(uri, expected):
    assert mask_sink_uri(uri) == expected


def test_mask_hides_secrets_in_unparseable_uri():
    assert "secret" not in mask_sink_uri("mysql://u:secret@[bad/")
