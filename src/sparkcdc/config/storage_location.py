"""Where files live: a root inside one fsspec file system, from a URI (the storage sink's, the
redo log's, claim-check storage's, and the consumers' upstream).

Credential parameters keep TiDB's external-storage names (br/pkg/storage/parse.go, s3.go,
gcs.go, azblob.go), so a TiCDC sink URI works unchanged:

    s3://bucket/prefix?endpoint=&region=&access-key=&secret-access-key=&session-token=
                       &force-path-style=&storage-class=&sse=&sse-kms-key-id=&acl=&provider=
    gcs://bucket/prefix (gs://)?endpoint=&credentials-file=
    azblob://container/prefix (azure://)?account-name=&account-key=&sas-token=&endpoint=
    file:///path (also an NFS mount), or a bare path

Every backend is one code path: s3fs, gcsfs and adlfs behind fsspec. Secrets stay in
`StorageLocation.options`, which is left out of repr() and equality.

Parsing is part of validating a changefeed's config (it sits below the sinks and the redo log
that use it); the file systems are built only when `filesystem()` is called.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from typing import Any, Mapping
from urllib.parse import parse_qsl, unquote, urlsplit

from sparkcdc.config.sink_uri import mask_sink_uri
from sparkcdc.errors import ErrConsistentStorage, ErrSinkUnsupported, ErrSinkURIInvalid, SparkCDCError

LOCAL_SCHEMES = frozenset({"file", "local", ""})
SCHEME_ALIASES = {"gs": "gcs", "azure": "azblob", "local": "file", "": "file"}

# Parameters each backend takes, by canonical scheme. Values are the key in `options`.
LOCATION_PARAMETERS: dict[str, frozenset[str]] = {
    "file": frozenset(),
    "s3": frozenset({
        "endpoint", "region", "access-key", "secret-access-key", "session-token",
        "force-path-style", "storage-class", "sse", "sse-kms-key-id", "acl", "provider",
        "use-accelerate-endpoint", "role-arn", "external-id", "object-lock-enabled",
    }),
    "gcs": frozenset({"endpoint", "credentials-file", "storage-class", "predefined-acl"}),
    "azblob": frozenset({
        "account-name", "account-key", "sas-token", "endpoint", "access-tier",
        "encryption-scope", "encryption-key",
    }),
}
# Accepted by TiDB but not wired to an fsspec option yet: refuse rather than ignore silently.
_NOT_YET = frozenset({
    ("s3", "role-arn"), ("s3", "external-id"), ("s3", "object-lock-enabled"),
    ("gcs", "storage-class"), ("gcs", "predefined-acl"),
    ("azblob", "access-tier"), ("azblob", "encryption-scope"), ("azblob", "encryption-key"),
})
# Part size of a multipart upload when flush-concurrency > 1 (br's hardcodedS3ChunkSize).
MULTIPART_CHUNK_SIZE = 5 * 1024 * 1024
# Azurite's and Azure's well-known emulator host names never need https.
_AZURE_DEFAULT_SUFFIX = "blob.core.windows.net"


def canonical_scheme(scheme: str) -> str:
    scheme = scheme.lower()
    if len(scheme) == 1:  # a Windows drive letter, not a scheme
        scheme = ""
    return SCHEME_ALIASES.get(scheme, scheme)


def parse_bool(name: str, raw: str) -> bool:
    """A storage sink URI parameter's boolean value (true/1/t, false/0/f)."""
    lowered = raw.lower()
    if lowered in ("true", "1", "t"):
        return True
    if lowered in ("false", "0", "f"):
        return False
    raise ErrSinkURIInvalid(f"storage sink URI parameter {name}={raw!r} must be true or false")


def _with_http_scheme(endpoint: str) -> str:
    return endpoint if "://" in endpoint else f"https://{endpoint}"


@dataclass(frozen=True)
class StorageLocation:
    """A root (`bucket/prefix` or a local path) in the file system of one scheme."""

    scheme: str  # canonical: file, s3, gcs, azblob
    root: str
    options: Mapping[str, str] = field(default_factory=dict, repr=False, compare=False)

    @property
    def is_local(self) -> bool:
        return self.scheme == "file"

    def filesystem(self, flush_concurrency: int = 1) -> Any:
        """A fresh fsspec file system (no instance or listing cache: writers read their writes)."""
        if self.scheme == "file":
            import fsspec

            return fsspec.filesystem("file")
        builder = {"s3": self._s3, "gcs": self._gcs, "azblob": self._azblob}[self.scheme]
        return builder(max(1, flush_concurrency))

    def upload_options(self, flush_concurrency: int) -> dict[str, Any]:
        """Keyword arguments for `fs.pipe_file` (multipart when flush-concurrency > 1)."""
        if flush_concurrency <= 1:
            return {}
        if self.scheme == "s3":
            return {"chunksize": MULTIPART_CHUNK_SIZE, "max_concurrency": flush_concurrency}
        if self.scheme == "azblob":
            return {"max_concurrency": flush_concurrency}
        return {}  # gcsfs uploads large objects as one resumable (sequential) upload

    # -- one builder per backend ---------------------------------------------------------
    def _s3(self, concurrency: int) -> Any:
        import s3fs

        options = self.options
        kwargs: dict[str, Any] = {
            "skip_instance_cache": True, "use_listings_cache": False,
            "max_concurrency": concurrency,
        }
        if options.get("access-key") or options.get("secret-access-key"):
            kwargs["key"] = options.get("access-key")
            kwargs["secret"] = options.get("secret-access-key")
            if options.get("session-token"):
                kwargs["token"] = options["session-token"]
        if options.get("endpoint"):
            kwargs["endpoint_url"] = _with_http_scheme(options["endpoint"])
        if options.get("region"):
            kwargs["client_kwargs"] = {"region_name": options["region"]}
        # TiDB defaults force-path-style to true: S3-compatible servers rarely do virtual hosts.
        path_style = parse_bool("force-path-style", options.get("force-path-style", "true"))
        s3_config: dict[str, Any] = {"addressing_style": "path" if path_style else "virtual"}
        if options.get("use-accelerate-endpoint"):
            s3_config["use_accelerate_endpoint"] = parse_bool(
                "use-accelerate-endpoint", options["use-accelerate-endpoint"])
        kwargs["config_kwargs"] = {"s3": s3_config}
        additional = {
            name: options[key] for key, name in (
                ("storage-class", "StorageClass"), ("sse", "ServerSideEncryption"),
                ("sse-kms-key-id", "SSEKMSKeyId"), ("acl", "ACL"),
            ) if options.get(key)
        }
        if additional:
            kwargs["s3_additional_kwargs"] = additional
        return s3fs.S3FileSystem(**kwargs)

    def _gcs(self, concurrency: int) -> Any:
        # gcsfs otherwise probes every bucket's type with a call emulators never answer.
        os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")
        import gcsfs

        options = self.options
        kwargs: dict[str, Any] = {"skip_instance_cache": True, "use_listings_cache": False}
        if options.get("endpoint"):
            kwargs["endpoint_url"] = _with_http_scheme(options["endpoint"])
        if options.get("credentials-file"):
            if not os.path.isfile(options["credentials-file"]):
                # gcsfs would take the path for an access token and send it to Google.
                raise ErrSinkURIInvalid(
                    "credentials-file in the gcs:// URI is not a readable file; pass the path of a "
                    "service account JSON key")
            kwargs["token"] = options["credentials-file"]
        elif options.get("endpoint"):
            kwargs["token"] = "anon"  # an explicit endpoint without credentials: an emulator
        return gcsfs.GCSFileSystem(**kwargs)

    def _azblob(self, concurrency: int) -> Any:
        import adlfs

        # The Azure SDK logs every HTTP request and response at INFO: a consumer polling
        # `metadata` each second would bury its own log under request headers.
        logging.getLogger("azure.core.pipeline.policies.http_logging_policy").setLevel(logging.WARNING)

        options = self.options
        account = options.get("account-name") or os.environ.get("AZURE_STORAGE_ACCOUNT")
        key = options.get("account-key") or (
            None if options.get("sas-token") else os.environ.get("AZURE_STORAGE_KEY"))
        sas = (options.get("sas-token") or "").lstrip("?")
        # Without use_listings_cache=False adlfs answers ls/find from its first listing forever:
        # a polling consumer never saw new tables or files.
        kwargs: dict[str, Any] = {"skip_instance_cache": True, "use_listings_cache": False,
                                  "max_concurrency": concurrency}
        endpoint = options.get("endpoint")
        if endpoint:
            # A connection string is the one adlfs input that takes a full (path-style) URL.
            parts = [f"BlobEndpoint={_with_http_scheme(endpoint)}"]
            if account:
                parts.append(f"AccountName={account}")
            if key:
                parts.append(f"AccountKey={key}")
            elif sas:
                parts.append(f"SharedAccessSignature={sas}")
            kwargs["connection_string"] = ";".join(parts)
            if account:
                kwargs["account_name"] = account
        else:
            if not account:
                raise ErrSinkURIInvalid(
                    "azblob:// needs account-name (or AZURE_STORAGE_ACCOUNT) or an endpoint")
            kwargs["account_name"] = account
            if key:
                kwargs["account_key"] = key
            elif sas:
                kwargs["sas_token"] = sas
        return adlfs.AzureBlobFileSystem(**kwargs)


def location_parameter(scheme: str, raw_name: str) -> str | None:
    """The canonical name of a location parameter of `scheme`, or None for any other.

    Like TiDB, `access_key` means `access-key` and `s3.endpoint` means `endpoint`.
    """
    scheme = canonical_scheme(scheme)
    name = raw_name.lower().replace("_", "-")
    for alias, canonical in (*SCHEME_ALIASES.items(), (scheme, scheme)):
        if canonical == scheme and alias and name.startswith(f"{alias}."):
            name = name[len(alias) + 1:]
    return name if name in LOCATION_PARAMETERS.get(scheme, ()) else None


def parse_storage_location(uri: str) -> StorageLocation:
    """The location a storage URI names; parameters that are not about location are ignored
    here (the storage sink validates them)."""
    masked = mask_sink_uri(uri)
    try:
        parts = urlsplit(uri)
    except ValueError as exc:
        raise ErrSinkURIInvalid(f"storage URI {masked!r} cannot be parsed: {exc}") from None
    scheme = canonical_scheme(parts.scheme if "://" in uri or len(parts.scheme) > 1 else "")
    if scheme not in LOCATION_PARAMETERS:
        raise ErrSinkURIInvalid(
            f"storage URI {masked!r} has scheme {parts.scheme!r}; use file://, s3://, gcs:// (gs://) "
            "or azblob:// (azure://)")
    if scheme == "file":
        root = unquote(parts.path if parts.scheme else uri.split("?", 1)[0])
        if parts.scheme and parts.netloc:  # file://relative/dir: the host is the first element
            root = parts.netloc + root
        if not root:
            raise ErrSinkURIInvalid(f"storage URI {masked!r} has no path")
        return StorageLocation("file", root)

    bucket = parts.netloc
    if not bucket or "@" in bucket:
        raise ErrSinkURIInvalid(
            f"storage URI {masked!r} needs a bucket (container) as its host, e.g. "
            f"{parts.scheme}://bucket/prefix; put credentials in query parameters")
    prefix = unquote(parts.path).strip("/")
    root = f"{bucket}/{prefix}" if prefix else bucket
    options: dict[str, str] = {}
    for raw_name, value in parse_qsl(parts.query, keep_blank_values=True):
        name = location_parameter(scheme, raw_name)
        if name is None:
            continue
        if (scheme, name) in _NOT_YET:
            raise ErrSinkUnsupported(
                f"storage URI parameter {name!r} is not supported yet for {scheme}://; remove it")
        options[name] = value
    if "force-path-style" in options:
        parse_bool("force-path-style", options["force-path-style"])
    if scheme == "s3" and bool(options.get("access-key")) != bool(options.get("secret-access-key")):
        raise ErrSinkURIInvalid("s3:// takes access-key and secret-access-key together; pass both")
    return StorageLocation(scheme, root, options)


# Redo storage URIs (`consistent.storage`, `sparkcdc redo --storage`): TiCDC's redo schemes.
REDO_SCHEMES = ("file", "local", "nfs", "s3", "gcs", "gs", "azblob", "azure")


def parse_redo_storage_uri(uri: str) -> StorageLocation:
    """The location `consistent.storage` (or `redo --storage`) names; a coded error if invalid."""
    scheme = urlsplit(uri).scheme.lower() if "://" in uri else ""
    if scheme not in REDO_SCHEMES:
        raise ErrConsistentStorage(
            f"redo storage {mask_sink_uri(uri)!r} must be a URI with one of the schemes "
            f"{', '.join(s + '://' for s in REDO_SCHEMES)}, e.g. file:///data/redo")
    if scheme == "nfs":
        uri = "file" + uri[len("nfs"):]
    try:
        return parse_storage_location(uri)
    except SparkCDCError as exc:
        raise ErrConsistentStorage(f"redo storage is invalid: {exc.message}") from None
