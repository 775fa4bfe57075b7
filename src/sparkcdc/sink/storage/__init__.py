"""The storage sink: TiCDC's cloud-storage layout, written through fsspec (file, s3, gcs, azblob)."""

from sparkcdc.sink.storage.uri import StorageTarget, parse_storage_uri
from sparkcdc.sink.storage.writer import StorageSink

__all__ = ["StorageSink", "StorageTarget", "parse_storage_uri"]
