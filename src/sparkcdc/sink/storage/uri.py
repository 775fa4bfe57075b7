"""Storage sink URIs (`file:///path?protocol=csv&...`, `s3://bucket/prefix?...`), validated once
at the edge.

Sink parameters follow pkg/sink/cloudstorage/config.go; a value given in the URI overrides the
changefeed config, and `StorageTarget.overridden` records which ones did. Where the files live
(`StorageLocation`) follows TiDB's external-storage URIs (br/pkg/storage/parse.go): one fsspec
file system per scheme, so every backend is the same code path.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from sparkcdc.config.replica import SinkConfig
from sparkcdc.config.sink_uri import mask_sink_uri
from sparkcdc.config.storage_location import StorageLocation, location_parameter, parse_bool, parse_storage_location
from sparkcdc.errors import ErrSinkUnknownProtocol, ErrSinkURIInvalid
from sparkcdc.sink.codec import FILE_PROTOCOLS

STORAGE_PROTOCOLS = FILE_PROTOCOLS
MIB = 1024 * 1024

_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)")
_UNIT_SECONDS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: str) -> float:
    """Seconds in a Go duration string (`5s`, `1m30s`, `500ms`)."""
    if not text or _DURATION_PART.sub("", text) != "":
        raise ValueError(f"invalid duration {text!r}")
    return sum(float(n) * _UNIT_SECONDS[u] for n, u in _DURATION_PART.findall(text))


@dataclass(frozen=True)
class StorageTarget:
    """Where and how the storage sink writes: a root inside one fsspec file system.

    `uri` is the masked URI (safe to log or return); credentials live only in `location`.
    """

    uri: str
    scheme: str
    root: str
    sink: SinkConfig  # the effective config: the changefeed's, with URI values applied
    overridden: tuple[str, ...]  # URI parameters that replaced a config value
    location: StorageLocation

    @property
    def protocol(self) -> str:
        return self.sink.protocol

    @property
    def flush_interval_seconds(self) -> float:
        """How long rows may wait for their file; 0 when flush-interval is not set (every batch)."""
        interval = self.sink.cloud_storage_config.flush_interval
        return parse_duration(interval) if interval else 0.0

    @property
    def is_local(self) -> bool:
        return self.location.is_local

    def filesystem(self) -> Any:
        return self.location.filesystem(self.sink.cloud_storage_config.flush_concurrency)


def _int_in(name: str, raw: str, low: int, high: int) -> int:
    try:
        value = int(raw)
    except ValueError:
        raise ErrSinkURIInvalid(f"sink URI parameter {name}={raw!r} is not an integer") from None
    if not low <= value <= high:
        raise ErrSinkURIInvalid(f"sink URI parameter {name}={value} is out of range [{low}, {high}]")
    return value


def _flush_interval(raw: str) -> str:
    try:
        seconds = parse_duration(raw)
    except ValueError:
        raise ErrSinkURIInvalid(f"sink URI parameter flush-interval={raw!r} is not a duration such as 5s") from None
    if not 2 <= seconds <= 600:
        raise ErrSinkURIInvalid(f"sink URI parameter flush-interval={raw} is out of range [2s, 10m]")
    return raw


def _date_separator(raw: str) -> str:
    if raw not in ("none", "year", "month", "day"):
        raise ErrSinkURIInvalid(f"sink URI parameter date-separator={raw!r} must be none, year, month or day")
    return raw


def parse_storage_uri(uri: str, sink: SinkConfig) -> StorageTarget:
    """Validate a storage sink URI and return the target with its effective SinkConfig."""
    location = parse_storage_location(uri)
    parts = urlsplit(uri)

    effective = copy.deepcopy(sink)
    storage = effective.cloud_storage_config
    overridden: list[str] = []
    for name, raw in parse_qsl(parts.query, keep_blank_values=True):
        if location_parameter(location.scheme, name) is not None:
            continue  # where the files live and how to sign in: StorageLocation's part
        if name == "protocol":
            if raw not in STORAGE_PROTOCOLS:
                raise ErrSinkUnknownProtocol(
                    f"protocol {raw!r} is not supported by the storage sink; use canal-json or csv"
                )
            effective.protocol = raw
        elif name == "worker-count":
            storage.worker_count = _int_in(name, raw, 1, 512)
        elif name == "flush-interval":
            storage.flush_interval = _flush_interval(raw)
        elif name == "file-size":
            storage.file_size = _int_in(name, raw, MIB, 512 * MIB)
        elif name == "flush-concurrency":
            storage.flush_concurrency = _int_in(name, raw, 1, 512)
        elif name == "enable-tidb-extension":
            effective.enable_tidb_extension = parse_bool(name, raw)
        elif name == "date-separator":
            effective.date_separator = _date_separator(raw)
        elif name == "file-index-digit":
            effective.file_index_digit = _int_in(name, raw, 6, 20)
        elif name == "enable-partition-separator":
            effective.enable_partition_separator = parse_bool(name, raw)
        else:
            raise ErrSinkURIInvalid(
                f"sink URI parameter {name!r} is not known to the {location.scheme} storage sink; "
                "remove it"
            )
        overridden.append(name)
    if effective.protocol not in STORAGE_PROTOCOLS:
        raise ErrSinkUnknownProtocol(
            f"the storage sink needs protocol=canal-json or protocol=csv in the URI (got {effective.protocol!r})"
        )
    return StorageTarget(mask_sink_uri(uri), location.scheme, location.root, effective,
                         tuple(overridden), location)
