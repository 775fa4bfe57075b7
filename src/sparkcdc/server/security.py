"""TiCDC's `[security]` section for the Open API: TLS, client certificates and client users.

Like TiCDC (pkg/config/security.go, docs ticdc-client-authentication.md):
- `ca-path`/`cert-path`/`key-path` turn on TLS; with `cert-allowed-cn` (or `mtls = true`) a
  client must present a certificate signed by the CA, and its Common Name must be listed.
- `client-user-required = true` asks for HTTP basic auth; the user must be in
  `client-allowed-user` and its password is checked by logging in to the upstream database,
  as TiCDC checks it against TiDB. Client users need TLS, so passwords never cross in clear.
"""

from __future__ import annotations

import base64
import binascii
import ssl
from dataclasses import dataclass, field, replace
from typing import Callable, Optional

from sparkcdc import errors

# TOML key in [security] -> SecurityConfig field.
_TOML_KEYS = {
    "ca-path": "ca_path",
    "cert-path": "cert_path",
    "key-path": "key_path",
    "cert-allowed-cn": "cert_allowed_cn",
    "mtls": "mtls",
    "client-user-required": "client_user_required",
    "client-allowed-user": "client_allowed_user",
}


@dataclass(frozen=True)
class SecurityConfig:
    ca_path: str = ""
    cert_path: str = ""
    key_path: str = ""
    cert_allowed_cn: tuple[str, ...] = ()
    mtls: bool = False
    client_user_required: bool = False
    client_allowed_user: tuple[str, ...] = field(default=())

    @property
    def tls_enabled(self) -> bool:
        return bool(self.cert_path or self.key_path or self.ca_path)

    @property
    def client_cert_required(self) -> bool:
        return self.mtls or bool(self.cert_allowed_cn)

    def validate(self) -> "SecurityConfig":
        """Refuse half-configured security at startup, naming the missing piece."""
        if self.tls_enabled and not (self.cert_path and self.key_path):
            raise errors.ErrSecurityConfig(
                "TLS needs both --cert and --key (security.cert-path and security.key-path); "
                f"got cert={self.cert_path or '(none)'} key={self.key_path or '(none)'}")
        if self.client_cert_required and not self.ca_path:
            raise errors.ErrSecurityConfig(
                "--cert-allowed-cn / security.mtls check client certificates against a CA: pass --ca too")
        if self.client_user_required and not self.tls_enabled:
            raise errors.ErrSecurityConfig(
                "security.client-user-required needs TLS (--cert/--key), as in TiCDC: basic auth "
                "would otherwise send passwords in clear")
        if self.client_user_required and not self.client_allowed_user:
            raise errors.ErrSecurityConfig(
                "security.client-user-required is true but security.client-allowed-user is empty: "
                "list the users that may call the API, e.g. client-allowed-user = [\"root\"]")
        for path_name in ("ca_path", "cert_path", "key_path"):
            path = getattr(self, path_name)
            if path:
                try:
                    with open(path, "rb"):
                        pass
                except OSError as exc:
                    raise errors.ErrSecurityConfig(f"cannot read {path_name.replace('_', '-')} {path}: "
                                                   f"{exc.strerror}") from None
        return self

    def server_ssl_context(self) -> Optional[ssl.SSLContext]:
        if not self.tls_enabled:
            return None
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        try:
            context.load_cert_chain(self.cert_path, self.key_path)
            if self.ca_path:
                context.load_verify_locations(self.ca_path)
        except (ssl.SSLError, OSError) as exc:
            raise errors.ErrSecurityConfig(f"cannot load the server certificate/key/CA: {exc}") from None
        context.verify_mode = ssl.CERT_REQUIRED if self.client_cert_required else ssl.CERT_NONE
        return context

    def allowed_peer(self, peer_cert: Optional[dict]) -> bool:
        """Whether a verified client certificate's Common Name is allowed (any CN when no list)."""
        if not self.cert_allowed_cn:
            return True
        if not peer_cert:
            return False
        names = {value for rdn in peer_cert.get("subject", ()) for key, value in rdn if key == "commonName"}
        return bool(names & set(self.cert_allowed_cn))


def security_from_toml(document: dict, base: SecurityConfig = SecurityConfig()) -> SecurityConfig:
    """Apply the `[security]` table of a server TOML on top of `base` (flags win later)."""
    section = document.get("security") or {}
    if not isinstance(section, dict):
        raise errors.ErrSecurityConfig("[security] in the server config must be a table")
    unknown = sorted(set(section) - set(_TOML_KEYS))
    if unknown:
        raise errors.ErrSecurityConfig(
            f"unknown key(s) {', '.join(unknown)} in [security]; valid keys: {', '.join(_TOML_KEYS)}")
    values = {}
    for key, value in section.items():
        name = _TOML_KEYS[key]
        if name in ("cert_allowed_cn", "client_allowed_user"):
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise errors.ErrSecurityConfig(f"security.{key} must be a list of strings, got {value!r}")
            value = tuple(value)
        elif name in ("mtls", "client_user_required"):
            if not isinstance(value, bool):
                raise errors.ErrSecurityConfig(f"security.{key} must be true or false, got {value!r}")
        elif not isinstance(value, str):
            raise errors.ErrSecurityConfig(f"security.{key} must be a file path, got {value!r}")
        values[name] = value
    return replace(base, **values)


UserVerifier = Callable[[str, str], bool]


class ClientAuthenticator:
    """Checks a request's `Authorization: Basic` header against the allowed users."""

    def __init__(self, config: SecurityConfig, verify_user: UserVerifier):
        self.config = config
        self._verify_user = verify_user

    def check(self, authorization: Optional[str]) -> None:
        if not self.config.client_user_required:
            return
        user, password = _parse_basic(authorization)
        if user not in self.config.client_allowed_user:
            raise errors.ErrClientAuthFailed(
                f"user {user!r} is not in security.client-allowed-user; use an allowed user")
        if not self._verify_user(user, password):
            raise errors.ErrClientAuthFailed(
                f"wrong password for user {user!r} (checked against the upstream database)")


def _parse_basic(authorization: Optional[str]) -> tuple[str, str]:
    if not authorization or not authorization.lower().startswith("basic "):
        raise errors.ErrClientAuthFailed(
            "this server requires a user: pass --user/--password to `sparkcdc cli` "
            "(or TICDC_USER/TICDC_PASSWORD), or HTTP basic auth")
    try:
        decoded = base64.b64decode(authorization[6:].strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        raise errors.ErrClientAuthFailed("the Authorization header is not valid basic auth") from None
    user, sep, password = decoded.partition(":")
    if not sep:
        raise errors.ErrClientAuthFailed("the Authorization header is not valid basic auth (no ':')")
    return user, password


def client_ssl_context(ca_path: str = "", cert_path: str = "", key_path: str = "") -> Optional[ssl.SSLContext]:
    """The CLI's TLS context: trust `ca_path` (else the system CAs), present cert/key if given."""
    if not (ca_path or cert_path or key_path):
        return None
    if bool(cert_path) != bool(key_path):
        raise errors.ErrSecurityConfig("--cert and --key go together: pass both or neither")
    try:
        context = ssl.create_default_context(cafile=ca_path or None)
        if cert_path:
            context.load_cert_chain(cert_path, key_path)
    except (ssl.SSLError, OSError) as exc:
        raise errors.ErrSecurityConfig(f"cannot load the client CA/certificate/key: {exc}") from None
    return context
