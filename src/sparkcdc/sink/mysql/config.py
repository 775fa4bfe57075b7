"""MySQL sink URIs (`mysql://user:pass@host:port/?worker-count=16&...`), validated once at the edge.

Parameters, defaults and limits follow TiCDC's pkg/sink/mysql/config.go: values below the
minimum are errors; values above the maximum are capped with a warning, as TiCDC does. A
parameter given in the URI overrides the changefeed config (`safe-mode`,
`transaction-atomicity`). The password lives only in `MySQLSinkConfig.password` (not in repr);
anything shown to a user goes through `masked_uri`.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from typing import Optional
from urllib.parse import parse_qsl, unquote, urlsplit
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from sparkcdc.config.replica import ReplicaConfig, parse_go_duration
from sparkcdc.config.sink_uri import mask_sink_uri
from sparkcdc.errors import ErrSinkURIInvalid

log = logging.getLogger(__name__)

MYSQL_SCHEMES = ("mysql", "mysql+ssl", "tidb", "tidb+ssl")
DEFAULT_PORT = 4000  # TiCDC's default when the URI has no port (its downstream is usually TiDB)

# name -> (default, minimum, maximum): TiCDC's defaults and upper limits.
_INTEGER_PARAMS: dict[str, tuple[int, int, int]] = {
    "worker-count": (16, 1, 1024),
    "max-txn-row": (256, 1, 2048),
    "max-multi-update-row": (40, 1, 256),
    "max-multi-update-row-size": (1024, 0, 8192),
}
_BOOLEAN_PARAMS: dict[str, bool] = {
    "safe-mode": False,
    "batch-dml-enable": True,
    "multi-stmt-enable": True,
    "cache-prep-stmts": True,
    "has-vector-type": False,
}
_DURATION_PARAMS: dict[str, str] = {"read-timeout": "2m", "write-timeout": "2m", "timeout": "2m"}
_STRING_PARAMS = ("ssl-ca", "ssl-cert", "ssl-key", "time-zone", "tidb-txn-mode", "transaction-atomicity")
ALLOWED_PARAMS = tuple(_INTEGER_PARAMS) + tuple(_BOOLEAN_PARAMS) + tuple(_DURATION_PARAMS) + _STRING_PARAMS

TIDB_TXN_MODES = ("optimistic", "pessimistic")
TRANSACTION_ATOMICITIES = ("none", "table")
_OFFSET_ZONE = re.compile(r"^[+-](?:0\d|1[0-4]):[0-5]\d$")
_TRUE = ("true", "1", "t", "yes", "on")
_FALSE = ("false", "0", "f", "no", "off")


@dataclass(frozen=True)
class MySQLSinkConfig:
    """Where and how the MySQL sink writes. `uri` is masked; the password is kept out of repr."""

    uri: str
    scheme: str
    host: str
    port: int
    user: str
    password: str = field(repr=False)
    worker_count: int = 16
    max_txn_row: int = 256
    max_multi_update_row: int = 40
    max_multi_update_row_size: int = 1024
    safe_mode: bool = False
    batch_dml_enable: bool = True
    multi_stmt_enable: bool = True
    cache_prep_stmts: bool = True
    has_vector_type: bool = False
    # None: not given, sessions use UTC; "": the downstream's own time zone; else a zone name/offset.
    time_zone: Optional[str] = None
    read_timeout: float = 120.0
    write_timeout: float = 120.0
    dial_timeout: float = 120.0
    tls: bool = False
    ssl_ca: str = ""
    ssl_cert: str = ""
    ssl_key: str = field(default="", repr=False)
    tidb_txn_mode: str = "optimistic"
    transaction_atomicity: str = "none"
    # The changefeed's bdr-mode: every session marks what it writes (connection.mark_bdr_session).
    bdr_mode: bool = False

    @property
    def masked_uri(self) -> str:
        return self.uri

    @property
    def ddl_time_zone(self) -> Optional[str]:
        """The session time_zone for DDL: the URI's, UTC when not given, None to keep the server's."""
        if self.time_zone is None:
            return "+00:00"
        return self.time_zone or None


def _invalid(uri: str, message: str) -> ErrSinkURIInvalid:
    return ErrSinkURIInvalid(f"{message} (sink URI {mask_sink_uri(uri)!r})")


def _parse_integer(uri: str, name: str, text: str) -> int:
    default, minimum, maximum = _INTEGER_PARAMS[name]
    try:
        value = int(text)
    except ValueError:
        raise _invalid(uri, f"invalid {name} {text!r}: it must be an integer in [{minimum}, {maximum}] "
                            f"(default {default})") from None
    if value < minimum:
        raise _invalid(uri, f"invalid {name} {value}: it must be an integer in [{minimum}, {maximum}] "
                            f"(default {default})")
    if value > maximum:
        log.warning("%s %d is too large; using the maximum %d", name, value, maximum)
        value = maximum
    return value


def _parse_boolean(uri: str, name: str, text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise _invalid(uri, f"invalid {name} {text!r}: it must be true or false")


def _parse_duration(uri: str, name: str, text: str) -> float:
    try:
        seconds = parse_go_duration(text)
    except ValueError:
        raise _invalid(uri, f"invalid {name} {text!r}: it must be a duration such as 30s, 2m or 1m30s") from None
    if seconds <= 0:
        raise _invalid(uri, f"invalid {name} {text!r}: it must be greater than 0")
    return seconds


def _parse_time_zone(uri: str, text: str) -> str:
    if text == "" or text.upper() in ("UTC", "SYSTEM") or _OFFSET_ZONE.match(text):
        return text
    try:
        ZoneInfo(text)
    except (ZoneInfoNotFoundError, ValueError):
        raise _invalid(uri, f"invalid time-zone {text!r}: use a zone name such as Asia/Shanghai, "
                            "an offset such as +08:00, or an empty value for the downstream's own zone") from None
    return text


def parse_mysql_sink_uri(sink_uri: str, config: Optional[ReplicaConfig] = None) -> MySQLSinkConfig:
    """Validate a mysql://, mysql+ssl://, tidb:// or tidb+ssl:// URI; raise ErrSinkURIInvalid naming the problem."""
    try:
        parts = urlsplit(sink_uri.strip())
        port = parts.port
    except ValueError as exc:
        raise _invalid(sink_uri, f"the MySQL sink URI cannot be parsed: {exc}") from None
    scheme = parts.scheme.lower()
    if scheme not in MYSQL_SCHEMES:
        raise _invalid(sink_uri, f"scheme {scheme!r} is not a MySQL sink; use one of {', '.join(MYSQL_SCHEMES)}")
    if not parts.hostname:
        raise _invalid(sink_uri, "the MySQL sink URI has no host; use mysql://user:password@host:port/")

    values: dict[str, str] = {}
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        if key == "protocol":
            raise _invalid(sink_uri, "protocol is not a MySQL sink parameter; remove it "
                                     "(protocols apply to kafka and storage sinks only)")
        if key not in ALLOWED_PARAMS:
            raise _invalid(sink_uri, f"unknown MySQL sink parameter {key!r}; allowed: {', '.join(ALLOWED_PARAMS)}")
        if key in values:
            raise _invalid(sink_uri, f"parameter {key!r} is given more than once")
        values[key] = value

    sink = config.sink if config is not None else None
    settings: dict = {}
    for name, (default, _, _) in _INTEGER_PARAMS.items():
        settings[name] = _parse_integer(sink_uri, name, values[name]) if name in values else default
    for name, default in _BOOLEAN_PARAMS.items():
        if name == "safe-mode" and sink is not None:
            default = sink.safe_mode
        settings[name] = _parse_boolean(sink_uri, name, values[name]) if name in values else default
    for name, default in _DURATION_PARAMS.items():
        settings[name] = _parse_duration(sink_uri, name, values.get(name, default))

    tidb_txn_mode = values.get("tidb-txn-mode", "optimistic").lower() or "optimistic"
    if tidb_txn_mode not in TIDB_TXN_MODES:
        raise _invalid(sink_uri, f"invalid tidb-txn-mode {values['tidb-txn-mode']!r}: it must be one of "
                                 f"{', '.join(TIDB_TXN_MODES)}")
    atomicity = values.get("transaction-atomicity")
    if atomicity is None:
        atomicity = (sink.transaction_atomicity if sink is not None else "") or "none"
    atomicity = atomicity.lower() or "none"
    if atomicity not in TRANSACTION_ATOMICITIES:
        raise _invalid(sink_uri, f"invalid transaction-atomicity {atomicity!r}: it must be one of "
                                 f"{', '.join(TRANSACTION_ATOMICITIES)}")
    time_zone = _parse_time_zone(sink_uri, values["time-zone"]) if "time-zone" in values else None

    ssl_ca, ssl_cert, ssl_key = values.get("ssl-ca", ""), values.get("ssl-cert", ""), values.get("ssl-key", "")
    if bool(ssl_cert) != bool(ssl_key):
        raise _invalid(sink_uri, "ssl-cert and ssl-key must be given together")

    return MySQLSinkConfig(
        uri=mask_sink_uri(sink_uri),
        scheme=scheme,
        host=parts.hostname,
        port=port or DEFAULT_PORT,
        user=unquote(parts.username or "root"),
        password=unquote(parts.password or ""),
        worker_count=settings["worker-count"],
        max_txn_row=settings["max-txn-row"],
        max_multi_update_row=settings["max-multi-update-row"],
        max_multi_update_row_size=settings["max-multi-update-row-size"],
        safe_mode=settings["safe-mode"],
        batch_dml_enable=settings["batch-dml-enable"],
        multi_stmt_enable=settings["multi-stmt-enable"],
        cache_prep_stmts=settings["cache-prep-stmts"],
        has_vector_type=settings["has-vector-type"],
        time_zone=time_zone,
        read_timeout=settings["read-timeout"],
        write_timeout=settings["write-timeout"],
        dial_timeout=settings["timeout"],
        tls=scheme.endswith("+ssl") or bool(ssl_ca),
        ssl_ca=ssl_ca,
        ssl_cert=ssl_cert,
        ssl_key=ssl_key,
        tidb_txn_mode=tidb_txn_mode,
        transaction_atomicity=atomicity,
        bdr_mode=config.bdr_mode if config is not None else False,
    )
