"""Lakehouse sink URIs and options, parsed once.

    delta:///path  delta+file:///path  delta+s3://bucket/prefix?endpoint=&region=&access-key=&secret-access-key=
    iceberg:///warehouse  iceberg+s3://bucket/warehouse?...&catalog-uri=sqlite:////var/lib/cdc/catalog.sqlite
    iceberg:///warehouse?catalog=rest&catalog-uri=http://host:8181   (also glue, hive)

The path is the Delta tables' root (`<root>/<database>/<table>` by default) or the Iceberg
warehouse. Storage parameters are the storage sink's (config/storage_location.py); `mode`,
`schema-mode`, `catalog` and `catalog-uri` may be given in the URI, overriding `[sink.delta]` /
`[sink.iceberg]` (config/replica.py). The Iceberg catalog defaults to pyiceberg's SQL catalog on
an embedded SQLite file: no server to run.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, field, replace
from typing import Mapping, Union
from urllib.parse import parse_qsl, urlsplit, urlunsplit

from sparkcdc.config.replica import DeltaConfig, IcebergConfig, SinkConfig
from sparkcdc.config.sink_uri import mask_sink_uri
from sparkcdc.errors import ErrInvalidReplicaConfig, ErrLakehouseCatalog, ErrSinkURIInvalid
from sparkcdc.config.storage_location import StorageLocation, location_parameter, parse_storage_location

FORMATS = ("delta", "iceberg")
CATALOGS = ("sql", "rest", "glue", "hive")
_OPTION_PARAMETERS = {"mode": "mode", "schema-mode": "schema_mode", "catalog": "catalog", "catalog-uri": "catalog_uri"}
DEFAULT_CATALOG_FILE = "sparkcdc-catalog.sqlite"


@dataclass(frozen=True)
class LakehouseTarget:
    format: str  # delta | iceberg
    location: StorageLocation
    options: Union[DeltaConfig, IcebergConfig] = field(compare=False)
    uri: str = field(default="", compare=False, repr=False)

    def path(self, *parts: str) -> str:
        """A path below the root, as the format's library takes it (`s3://bucket/...` or local)."""
        joined = posixpath.join(self.location.root, *parts)
        return joined if self.location.is_local else f"{self.location.scheme}://{joined}"

    def storage_options(self) -> dict[str, str]:
        """The location's credentials for delta-rs (object_store keys)."""
        return _delta_storage_options(self.location)

    def file_io_properties(self) -> dict[str, str]:
        """The location's credentials for pyiceberg's FileIO."""
        options = self.location.options
        if self.location.scheme != "s3":
            return {}
        properties = {"s3.endpoint": _endpoint(options.get("endpoint", "")),
                      "s3.region": options.get("region", "") or "us-east-1",
                      "s3.access-key-id": options.get("access-key", ""),
                      "s3.secret-access-key": options.get("secret-access-key", ""),
                      "s3.session-token": options.get("session-token", "")}
        if options.get("force-path-style"):
            properties["s3.force-virtual-addressing"] = "false"
        return {k: v for k, v in properties.items() if v}


def _endpoint(endpoint: str) -> str:
    return endpoint if not endpoint or "://" in endpoint else f"https://{endpoint}"


def _delta_storage_options(location: StorageLocation) -> dict[str, str]:
    if location.scheme != "s3":
        return {}
    options = location.options
    result = {"AWS_ACCESS_KEY_ID": options.get("access-key", ""),
              "AWS_SECRET_ACCESS_KEY": options.get("secret-access-key", ""),
              "AWS_SESSION_TOKEN": options.get("session-token", ""),
              "AWS_REGION": options.get("region", "") or "us-east-1",
              "AWS_ENDPOINT_URL": _endpoint(options.get("endpoint", ""))}
    if result["AWS_ENDPOINT_URL"].startswith("http://"):
        result["AWS_ALLOW_HTTP"] = "true"
    # S3 has atomic conditional PUTs (If-None-Match) for the commit log: no locking provider.
    result["AWS_CONDITIONAL_PUT"] = "etag"
    return {k: v for k, v in result.items() if v}


def parse_lakehouse_uri(uri: str, sink: SinkConfig) -> LakehouseTarget:
    """The target a `delta...://` or `iceberg...://` URI names, with its options merged."""
    masked = mask_sink_uri(uri)
    try:
        parts = urlsplit(uri.strip())
    except ValueError as exc:
        raise ErrSinkURIInvalid(f"the sink URI {masked!r} cannot be parsed: {exc}") from None
    scheme = parts.scheme.lower()
    fmt, _, storage = scheme.partition("+")
    if fmt not in FORMATS or storage not in ("", "file", "s3"):
        raise ErrSinkURIInvalid(f"the sink URI {masked!r} has scheme {scheme!r}; use delta://, delta+s3://, "
                                "iceberg:// or iceberg+s3://")
    storage = storage or "file"
    options = replace(sink.delta if fmt == "delta" else sink.iceberg)
    location_query = []
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        option = _OPTION_PARAMETERS.get(name.lower())
        if option is not None and (fmt == "iceberg" or not option.startswith("catalog")):
            setattr(options, option, value)
        elif location_parameter(storage, name) is not None:
            location_query.append((name, value))
        else:
            allowed = [n for n in _OPTION_PARAMETERS if fmt == "iceberg" or not n.startswith("catalog")]
            raise ErrSinkURIInvalid(
                f"unknown parameter {name!r} in the {fmt} sink URI {masked!r}; it takes {', '.join(allowed)} and "
                f"the {storage} storage parameters (docs/lakehouse-sinks.md); other options go in [sink.{fmt}]")
    _check_options(fmt, options)
    if storage == "file" and parts.netloc:
        raise ErrSinkURIInvalid(f"the sink URI {masked!r} must name an absolute local path ({fmt}:///path)")
    location = parse_storage_location(urlunsplit((storage, parts.netloc, parts.path, "&".join(
        f"{k}={v}" for k, v in location_query), "")))
    if storage == "file" and not location.root.startswith("/"):
        raise ErrSinkURIInvalid(f"the sink URI {masked!r} must name an absolute local path ({fmt}:///path)")
    if fmt == "iceberg" and options.catalog == "sql" and not options.catalog_uri and not location.is_local:
        raise ErrLakehouseCatalog(
            f"the Iceberg sink {masked!r} keeps its warehouse on {storage}, where the embedded SQLite catalog cannot "
            "live; add catalog-uri=sqlite:////local/path/catalog.sqlite (or any SQLAlchemy URL) to the URI or "
            "[sink.iceberg], or use catalog=rest|glue|hive")
    return LakehouseTarget(fmt, location, options, uri)


def _check_options(fmt: str, options) -> None:
    if options.mode not in ("upsert", "changelog"):
        raise ErrInvalidReplicaConfig(f"{fmt} sink mode {options.mode!r} is unknown; use upsert or changelog")
    if options.schema_mode not in ("evolve", "strict"):
        raise ErrInvalidReplicaConfig(f"{fmt} sink schema-mode {options.schema_mode!r} is unknown; use evolve or strict")
    if fmt == "iceberg" and options.catalog not in CATALOGS:
        raise ErrLakehouseCatalog(
            f"unknown Iceberg catalog {options.catalog!r}; use one of {', '.join(CATALOGS)} (sql is embedded: "
            "a SQLite file, no server), in [sink.iceberg] catalog or the URI's catalog parameter")
    if fmt == "iceberg" and options.catalog in ("rest", "hive") and not options.catalog_uri:
        raise ErrLakehouseCatalog(f"the Iceberg {options.catalog} catalog needs catalog-uri (its server's address)")


def catalog_properties(target: LakehouseTarget) -> Mapping[str, str]:
    """pyiceberg `load_catalog` properties of an Iceberg target."""
    options = target.options
    warehouse = target.path() if not target.location.is_local else f"file://{target.location.root}"
    properties = {"type": options.catalog, "warehouse": warehouse, **target.file_io_properties()}
    if options.catalog == "sql":
        properties["uri"] = options.catalog_uri or f"sqlite:///{posixpath.join(target.location.root, DEFAULT_CATALOG_FILE)}"
    elif options.catalog_uri:
        properties["uri"] = options.catalog_uri
    return properties
