"""Which sink a sink URI names, and how to show a sink URI without its secrets.

Schemes follow TiCDC's pkg/sink/sink_type.go. Scheme-specific parameters are validated by
each sink (for storage: sparkcdc.sink.storage.uri.parse_storage_uri).
"""

from __future__ import annotations

from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from sparkcdc.config.secrets import MASK, SENSITIVE_PARAMS
from sparkcdc.errors import ErrSinkURIInvalid, ErrSinkUnsupported

SINK_KINDS: dict[str, str] = {
    "file": "storage", "s3": "storage", "gcs": "storage", "gs": "storage",
    "azblob": "storage", "azure": "storage", "noop": "storage",
    "mysql": "mysql", "mysql+ssl": "mysql", "tidb": "mysql", "tidb+ssl": "mysql",
    "kafka": "kafka", "kafka+ssl": "kafka",
    "delta": "lakehouse", "delta+file": "lakehouse", "delta+s3": "lakehouse",
    "iceberg": "lakehouse", "iceberg+file": "lakehouse", "iceberg+s3": "lakehouse",
    "blackhole": "blackhole",
}

# TiCDC sinks that sparkcdc does not have; named so the error says "not yet", not "unknown".
_TICDC_ONLY_SCHEMES = ("pulsar", "pulsar+ssl", "pulsar+http", "pulsar+https")

def classify_sink_uri(uri: str) -> str:
    """The sink kind ("storage", "mysql", "kafka", "lakehouse", "blackhole") of a sink URI."""
    if not isinstance(uri, str) or not uri.strip():
        raise ErrSinkURIInvalid("the sink URI is empty; pass one such as file:///tmp/cdc?protocol=canal-json")
    try:
        parts = urlsplit(uri.strip())
    except ValueError as exc:
        raise ErrSinkURIInvalid(f"the sink URI {mask_sink_uri(uri)!r} cannot be parsed: {exc}") from None
    scheme = parts.scheme.lower()
    if not scheme or "://" not in uri:
        raise ErrSinkURIInvalid(
            f"the sink URI {mask_sink_uri(uri)!r} has no scheme; it must look like "
            f"scheme://[user:password@]host[:port]/path?params, with scheme one of: {supported_schemes()}")
    if scheme in _TICDC_ONLY_SCHEMES:
        raise ErrSinkUnsupported(
            f"the {scheme}:// sink is not supported yet by sparkcdc; supported schemes: {supported_schemes()}")
    kind = SINK_KINDS.get(scheme)
    if kind is None:
        raise ErrSinkURIInvalid(f"unknown sink URI scheme {scheme!r}; supported schemes: {supported_schemes()}")
    return kind


def supported_schemes() -> str:
    return ", ".join(SINK_KINDS)


def mask_sink_uri(uri: str) -> str:
    """The URI with every password (userinfo and secret query parameters) replaced by xxxxx."""
    try:
        parts = urlsplit(uri)
    except ValueError:
        return MASK  # unparseable: show nothing rather than risk showing a secret
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, _, hostport = netloc.rpartition("@")
        if ":" in userinfo:
            user = userinfo.split(":", 1)[0]
            netloc = f"{user}:{MASK}@{hostport}"
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        if any(key.lower() in SENSITIVE_PARAMS for key, _ in pairs):
            masked = [(key, MASK if key.lower() in SENSITIVE_PARAMS else value) for key, value in pairs]
            query = urlencode(masked, safe="/:,")
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))
