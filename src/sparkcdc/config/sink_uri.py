"""How to show a sink URI (or any URI with credentials) without its secrets.

Which sink a URI names, and its parameters, are the sink registry's (sparkcdc.sink.registry).
"""

from __future__ import annotations

from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from sparkcdc.config.secrets import MASK, SENSITIVE_PARAMS


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
