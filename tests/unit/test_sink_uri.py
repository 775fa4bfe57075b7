import pytest

from sparkcdc.config.replica import ReplicaConfig
from sparkcdc.config.sink_uri import mask_sink_uri
from sparkcdc.errors import ErrInvalidReplicaConfig, ErrSinkURIInvalid, ErrSinkUnsupported
from sparkcdc.sink.registry import SINK_KINDS, classify_sink_uri, parse_sink_spec


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


# -- the registry: one SinkSpec per changefeed start -------------------------------------------
@pytest.mark.parametrize("uri, kind, selectors, consistency, splits_updates, splits_large", [
    ("file:///tmp/out?protocol=canal-json", "storage", True, False, True, True),
    ("s3://b/p?protocol=csv", "storage", True, False, True, True),
    ("kafka://h:9092/t?protocol=canal-json", "kafka", True, False, True, True),
    ("kafka://h:9092/t?protocol=canal-json&output-raw-change-event=true", "kafka", True, False, False, True),
    ("mysql://root@h:3306/", "mysql", False, True, False, True),
    ("tidb://root@h:4000/?transaction-atomicity=table", "mysql", False, True, False, False),
    ("delta:///tmp/lake", "lakehouse", False, False, False, False),
    ("iceberg:///tmp/warehouse", "lakehouse", False, False, False, False),
])
def test_sink_spec_capabilities(uri, kind, selectors, consistency, splits_updates, splits_large):
    spec = parse_sink_spec(uri, ReplicaConfig())
    assert (spec.kind.name, spec.column_selectors_allowed, spec.supports_consistency, spec.splits_key_updates,
            spec.splits_large_transactions) == (kind, selectors, consistency, splits_updates, splits_large)
    assert spec.kind.name == classify_sink_uri(uri)


def test_every_scheme_of_a_kind_classifies_as_that_kind():
    for kind in SINK_KINDS:
        for scheme in kind.schemes:
            assert classify_sink_uri(f"{scheme}://h/p") == kind.name


def test_a_spec_opens_its_sink_from_the_parsed_settings(tmp_path):
    spec = parse_sink_spec(f"file://{tmp_path}/out?protocol=csv&file-index-digit=7", ReplicaConfig())
    sink = spec.open()
    try:
        assert sink.target is spec.settings and sink.sink.file_index_digit == 7
    finally:
        sink.close()


def test_blackhole_is_recognised_and_refused_and_consistency_needs_a_mysql_sink():
    with pytest.raises(ErrSinkUnsupported, match="blackhole sink is not supported yet"):
        parse_sink_spec("blackhole://", ReplicaConfig())
    config = ReplicaConfig()
    config.enable_sync_point = True
    with pytest.raises(ErrInvalidReplicaConfig, match="enable-sync-point works only with MySQL-compatible sinks"):
        parse_sink_spec("blackhole://", config)
    assert parse_sink_spec("mysql://root@h:3306/", config).supports_consistency
