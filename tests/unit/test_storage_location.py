"""Storage URIs for object stores (TiDB's parameter names), without any server."""

import os
import time

import pytest

from sparkcdc.config.replica import SinkConfig
from sparkcdc.errors import ErrSinkUnsupported, ErrSinkURIInvalid
from sparkcdc.model.events import ColumnInfo, RowChange, TableInfo
from sparkcdc.model.tso import compose
from sparkcdc.sink.storage import StorageSink, parse_storage_uri
from sparkcdc.config.storage_location import MULTIPART_CHUNK_SIZE, parse_storage_location

SECRET = "wJalrXUtnFEMI/K7MDENG"


def test_s3_uri_with_tidb_parameters():
    target = parse_storage_uri(
        f"s3://bucket/some/prefix/?protocol=csv&endpoint=http://127.0.0.1:9000&region=us-west-2"
        f"&access-key=AK&secret-access-key={SECRET}&force-path-style=false&flush-concurrency=8",
        SinkConfig())
    assert (target.scheme, target.root, target.protocol) == ("s3", "bucket/some/prefix", "csv")
    assert target.location.options["endpoint"] == "http://127.0.0.1:9000"
    assert target.overridden == ("protocol", "flush-concurrency")
    assert SECRET not in target.uri and SECRET not in repr(target) and "xxxxx" in target.uri
    fs = target.filesystem()
    assert fs.key == "AK" and fs.secret == SECRET and fs.endpoint_url == "http://127.0.0.1:9000"
    assert fs.client_kwargs == {"region_name": "us-west-2"}
    assert fs.config_kwargs == {"s3": {"addressing_style": "virtual"}}
    assert fs.max_concurrency == 8
    assert target.location.upload_options(8) == {"chunksize": MULTIPART_CHUNK_SIZE, "max_concurrency": 8}
    assert target.location.upload_options(1) == {}


@pytest.mark.parametrize("uri,scheme,root", [
    ("gs://b/p?protocol=csv&endpoint=http://h:1", "gcs", "b/p"),
    ("gcs://b?protocol=csv", "gcs", "b"),
    ("azure://c/p?protocol=csv&account-name=a&sas-token=s", "azblob", "c/p"),
    ("azblob://c/p/q?protocol=csv&account-name=a&account-key=k", "azblob", "c/p/q"),
    ("s3://b/p?protocol=csv&s3.endpoint=http://h:1&access_key=a&secret_access_key=s", "s3", "b/p"),
    ("file:///tmp/cdc?protocol=csv", "file", "/tmp/cdc"),
    ("/mnt/nfs/cdc?protocol=csv", "file", "/mnt/nfs/cdc"),
])
def test_schemes_and_aliases(uri, scheme, root):
    target = parse_storage_uri(uri, SinkConfig())
    assert (target.scheme, target.root) == (scheme, root)


def test_prefixed_and_underscored_names_mean_the_same():
    location = parse_storage_location("s3://b/p?s3.endpoint=http://h:1&access_key=a&secret_access_key=s")
    assert dict(location.options) == {"endpoint": "http://h:1", "access-key": "a", "secret-access-key": "s"}


def test_azure_endpoint_uses_a_connection_string():
    location = parse_storage_location(
        "azblob://c/p?account-name=devstoreaccount1&account-key=a2V5&endpoint=http://127.0.0.1:10000/devstoreaccount1")
    fs = location.filesystem(3)
    assert fs.account_name == "devstoreaccount1" and fs.max_concurrency == 3
    assert "BlobEndpoint=http://127.0.0.1:10000/devstoreaccount1" in fs.connection_string
    assert location.upload_options(3) == {"max_concurrency": 3}


@pytest.mark.parametrize("uri,error", [
    ("s3:///prefix?protocol=csv", ErrSinkURIInvalid),  # no bucket
    ("s3://user:pw@bucket/p?protocol=csv", ErrSinkURIInvalid),  # credentials go in the query
    ("s3://b/p?protocol=csv&access-key=a", ErrSinkURIInvalid),  # key without secret
    ("s3://b/p?protocol=csv&force-path-style=maybe", ErrSinkURIInvalid),
    ("s3://b/p?protocol=csv&role-arn=arn:aws:iam::1:role/x", ErrSinkUnsupported),
    ("s3://b/p?protocol=csv&account-key=k", ErrSinkURIInvalid),  # an azure parameter on s3
    ("gcs://b/p?protocol=csv&credentials-file=/nonexistent/key.json&endpoint=http://h:1", ErrSinkURIInvalid),
    ("ftp://b/p?protocol=csv", ErrSinkURIInvalid),
])
def test_rejects(uri, error):
    with pytest.raises(error) as failure:
        parse_storage_uri(uri, SinkConfig()).filesystem()
    assert ":pw@" not in str(failure.value)


def test_file_expiration_removes_only_old_day_files(tmp_path):
    day1 = time.mktime((2024, 3, 1, 12, 0, 0, 0, 0, -1))
    table = TableInfo("db", "t", 1, (ColumnInfo("id", "int", nullable=False, is_primary_key=True),),
                      compose(int(day1 * 1000)), handle_key=("id",))
    config = SinkConfig(protocol="csv")
    config.cloud_storage_config.file_expiration_days = 1
    for offset_days, row_id in ((0, "1"), (1, "2"), (2, "3")):
        now = day1 + offset_days * 86400
        sink = StorageSink(f"file://{tmp_path}?protocol=csv", config, lambda now=now: now)
        commit_ts = compose(int(now * 1000))
        sink.write_rows(table, [RowChange(commit_ts, "db", "t", "insert", after=(row_id,))])
        sink.flush()
    assert sink.cleanup_expired_files(commit_ts) == 1  # 2024-03-01 < 2024-03-03 minus one day
    version_dir = tmp_path / "db" / "t" / str(table.version)
    assert sorted(os.listdir(version_dir / "2024-03-01")) == ["meta"]
    assert os.listdir(version_dir / "2024-03-02") and os.listdir(version_dir / "2024-03-03")
    assert os.listdir(tmp_path / "db" / "t" / "meta")  # schema files stay

    config.date_separator = "month"
    monthly = StorageSink(f"file://{tmp_path}/m?protocol=csv", config, lambda: day1)
    assert monthly.cleanup_expired_files(compose(int((day1 + 400 * 86400) * 1000))) == 0
