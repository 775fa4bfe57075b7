"""TiCDC's Open API v2 (the paths and JSON shapes of tiflow cdc/api/v2) on a stdlib HTTP server.

The API keeps changefeed metadata in the MetaStore and asks a ChangefeedController (the
capture, or a fake in tests) to validate, start and stop changefeeds; it runs nothing itself.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import re
import ssl
import threading
import time
import urllib.request
import uuid
from dataclasses import replace
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Optional, Protocol
from urllib.parse import parse_qs, urlsplit

import sparkcdc
from sparkcdc import errors
from sparkcdc.config.replica import ReplicaConfig, replica_config_from_dict, replica_config_to_dict
from sparkcdc.config.secrets import mask_document, mask_stored_value, mask_text
from sparkcdc.config.sink_uri import mask_sink_uri
from sparkcdc.filter.eligibility import table_names_json
from sparkcdc.model import tso
from sparkcdc.model.changefeed import CHANGEFEED_STATES, ChangefeedInfo, ChangefeedStatus
from sparkcdc.model.snapshot import snapshot_progress
from sparkcdc.server.metastore import MetaStore
from sparkcdc.server.security import ClientAuthenticator, SecurityConfig, UserVerifier, client_ssl_context

log = logging.getLogger(__name__)

CHANGEFEED_ID_PATTERN = re.compile(r"^[a-zA-Z0-9]+(\-[a-zA-Z0-9]+)*$")
DEFAULT_NAMESPACE = "default"
MAX_BODY_BYTES = 16 << 20
# TiCDC's request bodies nest 4-5 levels deep; a deeper one is refused before any handler walks it
# (100,000 nested `[` used to end in a RecursionError and a 500).
MAX_JSON_DEPTH = 32
OPENAPI_PATH = "/api/v2/openapi.json"
METRICS_PATH = "/metrics"
DASHBOARD_PATH = "/dashboard"
MAX_TS = (1 << 63) - 1  # timestamps are stored as signed 64-bit integers (SQLite, etcd JSON readers)
# POST routes that change nothing: open without a client user, as in TiCDC.
READ_ONLY_POSTS = frozenset({"/api/v2/tso", "/api/v2/verify_table"})
# TiCDC's log levels (zap) and the Python level each maps to.
LOG_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warn": logging.WARNING, "error": logging.ERROR,
              "dpanic": logging.CRITICAL, "panic": logging.CRITICAL, "fatal": logging.CRITICAL}

# `GET /api/v2/changefeeds?state=`: TiCDC's feed states ("pending" is never ours), "all", or none.
LIST_STATE_FILTERS = frozenset(("", "all", "pending", *CHANGEFEED_STATES))

# TiCDC's model.AdminJobType as the API reports it.
_ADMIN_JOB_NONE, _ADMIN_JOB_STOP = 0, 1

# Fields of TiCDC's v2 ChangefeedConfig that only make sense with a TiDB/PD upstream: accepted
# when empty (TiCDC's own clients send them), refused otherwise.
_PD_ONLY_FIELDS = ("pd_addrs", "ca_path", "cert_path", "key_path", "cert_allowed_cn")


class ChangefeedController(Protocol):
    """What the API needs from the owner; implemented by sparkcdc.server.capture."""

    def validate(self, sink_uri: str, config: ReplicaConfig) -> None: ...
    def resolve_start_ts(self, start_ts: int | str) -> int: ...
    def current_tso(self) -> int: ...
    def start(self, info: ChangefeedInfo) -> None: ...
    def stop(self, namespace: str, id: str) -> None: ...
    def capture_info(self) -> dict: ...
    def verify_tables(self, config: ReplicaConfig, start_ts: int | str, sink_uri: str = "") -> tuple[list, list]: ...
    def list_captures(self) -> list[dict]: ...
    def drain_capture(self, capture_id: str) -> int: ...
    def resign_owner(self) -> bool: ...
    def processors(self) -> list[tuple[str, str, str]]: ...
    def processor_table_ids(self, info: ChangefeedInfo) -> list[int]: ...
    def puller_resolved_ts(self) -> int: ...
    def upstream_tso(self) -> int: ...
    def puller_state(self) -> dict: ...
    def last_synced_ts(self, checkpoint_ts: int) -> int: ...
    def metadata(self) -> list[tuple[str, str]]: ...


class Observability(Protocol):
    """The capture's metrics and status page data (sparkcdc.server.observer.CaptureObserver)."""

    content_type: str  # of the metrics exposition

    def metrics_exposition(self) -> bytes: ...
    def overview(self) -> dict: ...


class _Request:
    def __init__(self, method: str, path: str, query: dict[str, list[str]], body: bytes,
                 authorization: Optional[str] = None):
        self.method = method
        self.path = path
        self.query = query
        self.body = body
        self.authorization = authorization  # forwarded to the owner, never logged

    def param(self, name: str, default: str | None = None) -> str | None:
        values = self.query.get(name)
        return values[-1] if values else default

    @property
    def namespace(self) -> str:
        return self.param("namespace") or DEFAULT_NAMESPACE

    def json(self, allowed: tuple[str, ...], required: bool = False) -> dict:
        """The body as a JSON object with only `allowed` keys; empty body is `{}` unless required."""
        if not self.body.strip():
            if required:
                raise errors.ErrAPIInvalidParam("the request needs a JSON body")
            return {}
        try:
            document = json.loads(self.body)
            too_deep = _nesting_exceeds(document, MAX_JSON_DEPTH)
        except (ValueError, UnicodeDecodeError) as exc:
            raise errors.ErrAPIInvalidParam(f"the request body is not valid JSON: {exc}") from None
        except RecursionError:
            too_deep = True
        if too_deep:
            raise errors.ErrAPIInvalidParam(
                f"the request body nests objects and arrays more than {MAX_JSON_DEPTH} levels deep; "
                "send the flat JSON object the route takes (see /api/v2/openapi.json)")
        if not isinstance(document, dict):
            raise errors.ErrAPIInvalidParam("the request body must be a JSON object")
        unknown = sorted(set(document) - set(allowed))
        if unknown:
            raise errors.ErrAPIInvalidParam(
                f"unknown field(s) {', '.join(unknown)} in the request body; valid fields: {', '.join(allowed)}")
        return document


class _Response:
    def __init__(self, status: int, body: Any, headers: Optional[dict[str, str]] = None,
                 content_type: Optional[str] = None):
        """`body` is a JSON document, or bytes sent as they are with `content_type`."""
        self.status = status
        self.body = body
        self.headers = headers or {}
        self.content_type = content_type


def _ok(body: Any = None) -> _Response:
    return _Response(200, {} if body is None else body)


def _int_field(document: dict, name: str, default: int = 0) -> int:
    value = document.get(name, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_TS:
        raise errors.ErrAPIInvalidParam(f"`{name}` must be an integer in [0, {MAX_TS}], got {value!r}")
    return value


def _str_field(document: dict, name: str, default: str = "") -> str:
    value = document.get(name, default)
    if value is None:
        return default
    if not isinstance(value, str):
        raise errors.ErrAPIInvalidParam(f"`{name}` must be a string, got {value!r}")
    return value


def _now_iso() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="milliseconds")


class OpenAPI:
    """The route handlers; transport-free so the HTTP layer stays a thin shell."""

    def __init__(self, store: MetaStore, controller: ChangefeedController, security: SecurityConfig = SecurityConfig(),
                 observability: Optional[Observability] = None):
        self.store = store
        self.controller = controller
        self.observability = observability
        # How this capture calls the owner: the same TLS files it serves with (TiCDC does the same).
        self._forward_scheme = "https" if security.tls_enabled else "http"
        self._forward_context = (client_ssl_context(security.ca_path, security.cert_path, security.key_path)
                                 if security.tls_enabled else None)
        # Serialises state transitions of changefeeds (create/pause/resume/update/remove).
        self._lock = threading.Lock()
        self._routes: list[tuple[str, re.Pattern, Callable[..., _Response]]] = []
        cf = r"/api/v2/changefeeds/(?P<changefeed_id>[^/]+)"
        for method, pattern, handler in [
            ("GET", r"/api/v2/health", self.health),
            ("GET", r"/api/v2/status", self.status),
            ("POST", r"/api/v2/changefeeds", self.create_changefeed),
            ("GET", r"/api/v2/changefeeds", self.list_changefeeds),
            ("GET", cf, self.get_changefeed),
            ("PUT", cf, self.update_changefeed),
            ("DELETE", cf, self.delete_changefeed),
            ("GET", cf + r"/status", self.changefeed_status),
            ("GET", cf + r"/meta_info", self.get_changefeed_meta_info),
            ("GET", cf + r"/synced", self.changefeed_synced),
            ("GET", cf + r"/snapshot", self.changefeed_snapshot),
            ("POST", cf + r"/snapshot", self.changefeed_snapshot),
            ("POST", cf + r"/pause", self.pause_changefeed),
            ("POST", cf + r"/resume", self.resume_changefeed),
            ("GET", r"/api/v2/captures", self.list_captures),
            ("POST", r"/api/v2/captures/(?P<capture_id>[^/]+)/drain", self.drain_capture),
            ("GET", r"/api/v2/processors", self.list_processors),
            ("GET", r"/api/v2/processors/(?P<changefeed_id>[^/]+)/(?P<capture_id>[^/]+)", self.get_processor),
            ("POST", r"/api/v2/owner/resign", self.resign_owner),
            ("POST", r"/api/v2/log", self.set_log_level),
            ("GET", r"/api/v2/unsafe/metadata", self.unsafe_metadata),
            ("GET", OPENAPI_PATH, self.openapi_document),
            ("POST", r"/api/v2/tso", self.query_tso),
            ("POST", r"/api/v2/verify_table", self.verify_table),
            ("GET", METRICS_PATH, self.metrics),
            ("GET", r"/", self.root),
            ("GET", DASHBOARD_PATH, self.dashboard),
            ("GET", DASHBOARD_PATH + r"/data", self.dashboard_data),
        ]:
            self._routes.append((method, re.compile((pattern.rstrip("/") or "/") + r"/?$"), handler))

    def dispatch(self, request: _Request) -> _Response:
        try:
            allowed: list[str] = []
            for method, pattern, handler in self._routes:
                match = pattern.match(request.path)
                if match is None:
                    continue
                if method == request.method:
                    return handler(request, **match.groupdict())
                allowed.append(method)
            if allowed:
                response = _error_response(405, errors.ErrAPIMethodNotAllowed.code,
                                           f"{request.method} is not allowed on {request.path}; "
                                           f"use {' or '.join(allowed)}")
                response.headers["Allow"] = ", ".join(allowed)
                return response
            return _error_response(404, errors.ErrAPINotFound.code,
                                   f"no API route {request.path}; /api/v2/openapi.json lists the routes")
        except errors.SparkCDCError as exc:
            return _error_response(exc.http_status, exc.code, mask_text(exc.message))
        except Exception as exc:  # a bug must not kill the server; say what happened
            log.exception("API handler failed on %s %s", request.method, request.path)
            return _error_response(500, errors.SparkCDCError.code, mask_text(f"internal error: {exc}"))

    # -- metrics and the status page ---------------------------------------------------------
    def _observability(self) -> Observability:
        if self.observability is None:
            raise errors.ErrAPINotFound("metrics and the status page are off on this server (sparkcdc server "
                                        "--metrics off); start it with --metrics on")
        return self.observability

    def metrics(self, request: _Request) -> _Response:
        """Prometheus's text format (docs/operations.md lists the metrics)."""
        observability = self._observability()
        return _Response(200, observability.metrics_exposition(), content_type=observability.content_type)

    def root(self, request: _Request) -> _Response:
        return _Response(302, b"", headers={"Location": DASHBOARD_PATH}, content_type="text/plain; charset=utf-8")

    def dashboard(self, request: _Request) -> _Response:
        """The status page: one static HTML file that polls /dashboard/data (no build step)."""
        from sparkcdc.api.dashboard import dashboard_html

        self._observability()
        return _Response(200, dashboard_html(), content_type="text/html; charset=utf-8",
                         headers={"Cache-Control": "no-store"})

    def dashboard_data(self, request: _Request) -> _Response:
        return _ok(self._observability().overview())

    # -- server ------------------------------------------------------------------------------
    def health(self, request: _Request) -> _Response:
        return _ok()

    def status(self, request: _Request) -> _Response:
        capture = self.controller.capture_info()
        return _ok({
            "version": sparkcdc_version(),
            "git_hash": "",
            "id": capture.get("id", ""),
            "cluster_id": capture.get("cluster_id", "default"),
            "pid": os.getpid(),
            "is_owner": capture.get("is_owner", True),
            "liveness": 0,
        })

    def list_captures(self, request: _Request) -> _Response:
        items = self.controller.list_captures()
        return _ok({"total": len(items), "items": items})

    def list_processors(self, request: _Request) -> _Response:
        """One processor per (changefeed, capture) that runs it, as TiCDC's ProcessorCommonInfo."""
        items = [{"namespace": namespace, "changefeed_id": changefeed_id, "capture_id": capture_id}
                 for namespace, changefeed_id, capture_id in self.controller.processors()]
        return _ok({"total": len(items), "items": items})

    def get_processor(self, request: _Request, changefeed_id: str, capture_id: str) -> _Response:
        info = self.store.get_changefeed(request.namespace, changefeed_id)
        if (info.namespace, info.id, capture_id) not in set(self.controller.processors()):
            raise errors.ErrProcessorNotExists(
                f"capture {capture_id} does not run changefeed {info.namespace}/{changefeed_id}; "
                f"`sparkcdc cli processor list` shows which capture does")
        return _ok({"table_ids": self.controller.processor_table_ids(info)})

    def set_log_level(self, request: _Request) -> _Response:
        body = request.json(required=True, allowed=("log_level",))
        level = _str_field(body, "log_level").lower()
        if level not in LOG_LEVELS:
            raise errors.ErrAPIInvalidParam(
                f"log_level {body.get('log_level')!r} is not one of {', '.join(LOG_LEVELS)}")
        log.warning("log level changed to %s", level)  # before the change, so it shows at any level
        logging.getLogger().setLevel(LOG_LEVELS[level])
        return _ok()

    def unsafe_metadata(self, request: _Request) -> _Response:
        """TiCDC's `unsafe show-metadata`: every metadata key and value, secrets masked."""
        return _ok([{"key": key, "value": mask_stored_value(value)} for key, value in self.controller.metadata()])

    def openapi_document(self, request: _Request) -> _Response:
        from sparkcdc.api.openapi import openapi_document

        return _ok(openapi_document())

    def drain_capture(self, request: _Request, capture_id: str) -> _Response:
        """TiCDC's DrainCaptureResp: how many changefeeds the capture still runs (0 = drained)."""
        return _ok({"current_table_count": self.controller.drain_capture(capture_id)})

    def resign_owner(self, request: _Request) -> _Response:
        """Resign if this capture is the owner, else forward to the owner, as TiCDC does."""
        capture = self.controller.capture_info()
        if capture.get("is_owner", True):
            self.controller.resign_owner()
            return _ok()
        owner = next((c for c in self.controller.list_captures() if c.get("is_owner")), None)
        if owner is None:
            raise errors.ErrServerUnreachable("no owner is elected right now; retry in a few seconds")
        headers = {"Content-Type": "application/json"}
        if request.authorization:
            headers["Authorization"] = request.authorization
        forward = urllib.request.Request(f"{self._forward_scheme}://{owner['address']}/api/v2/owner/resign",
                                         data=b"{}", method="POST", headers=headers)
        try:
            with urllib.request.urlopen(forward, timeout=10, context=self._forward_context) as response:
                response.read()
        except OSError as exc:
            raise errors.ErrServerUnreachable(f"owner {owner['id']} at {owner['address']} did not answer: {exc}")
        return _ok()

    def query_tso(self, request: _Request) -> _Response:
        _refuse_pd_fields(request.json(allowed=_PD_ONLY_FIELDS))
        # As PD's TSO: above every transaction committed before the call, below every later one
        # (not the clock: binlog event times are whole seconds, so a commit just after the call
        # can be stamped up to a second before the clock's TSO).
        current = self.controller.upstream_tso()
        return _ok({"timestamp": tso.physical_ms(current), "logic_time": tso.logical(current)})

    def verify_table(self, request: _Request) -> _Response:
        body = request.json(allowed=("replica_config", "start_ts", "sink_uri") + _PD_ONLY_FIELDS)
        _refuse_pd_fields(body)
        sink_uri = _str_field(body, "sink_uri")
        config = _replica_config(body.get("replica_config"))
        # The CLI verifies the tables before it creates: the controller names a bad sink then, not
        # after the user has been asked about tables without a valid index.
        eligible, ineligible = self.controller.verify_tables(config, _start_ts_field(body, "start_ts"), sink_uri)
        return _ok({"ineligible_tables": table_names_json(ineligible),
                    "eligible_tables": table_names_json(eligible)})

    # -- changefeeds -------------------------------------------------------------------------
    def create_changefeed(self, request: _Request) -> _Response:
        body = request.json(required=True, allowed=(
            "namespace", "changefeed_id", "start_ts", "target_ts", "sink_uri", "replica_config",
        ) + _PD_ONLY_FIELDS)
        _refuse_pd_fields(body)
        namespace = _str_field(body, "namespace") or request.namespace
        changefeed_id = _str_field(body, "changefeed_id") or str(uuid.uuid4())
        _check_changefeed_id(changefeed_id)
        sink_uri = _str_field(body, "sink_uri")
        if not sink_uri:
            raise errors.ErrSinkURIInvalid("`sink_uri` is required, e.g. file:///tmp/cdc?protocol=canal-json")
        config = _replica_config(body.get("replica_config"))
        target_ts = _int_field(body, "target_ts")
        with self._lock:
            if any(info.id == changefeed_id for info in self.store.list_changefeeds(namespace)):
                raise errors.ErrChangefeedAlreadyExists(
                    f"changefeed {namespace}/{changefeed_id} already exists; pick another id or remove it first")
            self.controller.validate(sink_uri, config)
            start_ts = self._resolve_start(_start_ts_field(body, "start_ts"), "start_ts")
            if target_ts and target_ts <= start_ts:
                raise errors.ErrTargetTsInvalid(
                    f"target_ts {target_ts} must be larger than start_ts {start_ts}")
            info = ChangefeedInfo(
                namespace=namespace, id=changefeed_id, upstream_id=0, sink_uri=sink_uri,
                create_time=_now_iso(), start_ts=start_ts, target_ts=target_ts, state="normal",
                error=None, config=replica_config_to_dict(config), creator_version=sparkcdc_version())
            self.store.create_changefeed(info, ChangefeedStatus(checkpoint_ts=start_ts, resolved_ts=start_ts))
            try:
                self.controller.start(info)
            except BaseException:
                # Nothing runs, so nothing should be recorded: the user can fix and retry the same id.
                self.store.delete_changefeed(namespace, changefeed_id)
                raise
        return _ok(self._info_json(info))

    def list_changefeeds(self, request: _Request) -> _Response:
        state = request.param("state", "") or ""
        if state not in LIST_STATE_FILTERS:
            states = ", ".join(sorted(LIST_STATE_FILTERS - {""}))
            raise errors.ErrAPIInvalidParam(f"state {state!r} is not a changefeed state; use one of {states}, "
                                            "or none for every changefeed but removed and finished ones")
        namespace = request.param("namespace")
        items = []
        for info in self.store.list_changefeeds(namespace):
            if not _state_wanted(info.state, state):
                continue
            status = self.store.get_status(info.namespace, info.id)
            items.append({
                "upstream_id": info.upstream_id,
                "namespace": info.namespace,
                "id": info.id,
                "state": info.state,
                "checkpoint_tso": status.checkpoint_ts,
                "checkpoint_time": tso.format_time(status.checkpoint_ts),
                "error": mask_document(info.error),
            })
        return _ok({"total": len(items), "items": items})

    def get_changefeed(self, request: _Request, changefeed_id: str) -> _Response:
        info = self.store.get_changefeed(request.namespace, changefeed_id)
        document = self._info_json(info)
        # TiCDC's CaptureTaskStatus: which capture runs the changefeed, with its tables.
        captures = [capture_id for namespace, processor_changefeed, capture_id in self.controller.processors()
                    if (namespace, processor_changefeed) == (info.namespace, info.id)]
        table_ids: list[int] = []
        if captures:
            try:
                table_ids = self.controller.processor_table_ids(info)
            except errors.SparkCDCError as exc:  # a display field must not make the changefeed unreadable
                log.warning("table ids of changefeed %s/%s: %s", info.namespace, info.id, exc)
        document["task_status"] = [{"capture_id": capture_id, "table_ids": table_ids} for capture_id in captures]
        # sparkcdc's own: the binlog puller of the capture answering (its problems also show as the
        # changefeed's warning or error on the capture that runs it).
        document["puller"] = self.controller.puller_state()
        snapshot = snapshot_progress(self.store, info)
        if snapshot is not None:
            document["snapshot"] = snapshot
        return _ok(document)

    def changefeed_snapshot(self, request: _Request, changefeed_id: str) -> _Response:
        """sparkcdc's own: the initial snapshot's progress (GET) or a request to copy tables again (POST)."""
        info = self.store.get_changefeed(request.namespace, changefeed_id)
        if request.method == "POST":
            body = request.json(required=True, allowed=("tables",))
            tables = body.get("tables")
            if not isinstance(tables, list) or not tables or not all(
                    isinstance(t, str) and len(t.split(".")) == 2 and all(t.split(".")) for t in tables):
                raise errors.ErrAPIInvalidParam('`tables` must list tables as "db.table", e.g. {"tables": ["shop.orders"]}')
            config = replica_config_from_dict(info.config)
            if config.snapshot.mode == "never":
                raise errors.ErrSnapshotRequestInvalid(
                    f"changefeed {info.namespace}/{info.id} has `[snapshot] mode = \"never\"`, so nothing copies tables; "
                    "update it with mode = \"initial\" (pause, update, resume), then ask again")
            from sparkcdc.filter.table_filter import TableFilter

            selected = TableFilter(config.filter.rules, config.case_sensitive)
            outside = [t for t in tables if not selected.match(*t.split("."))]
            if outside:
                raise errors.ErrSnapshotRequestInvalid(
                    f"{', '.join(outside)} not replicated by changefeed {info.namespace}/{info.id} (its filter leaves "
                    "them out); add them to the filter rules (pause, update, resume), then ask again")
            number = self.store.request_snapshot(info.namespace, info.id, tables)
            return _ok({"request_id": number, "tables": tables})
        return _ok(snapshot_progress(self.store, info) or {"state": "none"})

    def get_changefeed_meta_info(self, request: _Request, changefeed_id: str) -> _Response:
        return _ok(self._info_json(self.store.get_changefeed(request.namespace, changefeed_id)))

    def changefeed_status(self, request: _Request, changefeed_id: str) -> _Response:
        info = self.store.get_changefeed(request.namespace, changefeed_id)
        status = self.store.get_status(request.namespace, changefeed_id)
        return _ok({
            "state": info.state,
            "resolved_ts": status.resolved_ts,
            "checkpoint_ts": status.checkpoint_ts,
            "last_error": mask_document(info.error) if info.state != "warning" else None,
            "last_warning": mask_document(info.error) if info.state == "warning" else None,
        })

    def changefeed_synced(self, request: _Request, changefeed_id: str) -> _Response:
        info = self.store.get_changefeed(request.namespace, changefeed_id)
        status = self.store.get_status(request.namespace, changefeed_id)
        intervals = (info.config or {}).get("synced_status") or {}
        return _ok(synced_status(
            now_ms=tso.physical_ms(self.controller.current_tso()),
            checkpoint_ts=status.checkpoint_ts,
            puller_resolved_ts=self.controller.puller_resolved_ts(),
            last_synced_ts=self.controller.last_synced_ts(status.checkpoint_ts),
            synced_check_interval_s=int(intervals.get("synced_check_interval") or 300),
            checkpoint_interval_s=int(intervals.get("checkpoint_interval") or 15),
        ))

    def update_changefeed(self, request: _Request, changefeed_id: str) -> _Response:
        body = request.json(required=True, allowed=("target_ts", "sink_uri", "replica_config", "namespace")
                            + _PD_ONLY_FIELDS)
        _refuse_pd_fields(body)
        namespace = _str_field(body, "namespace") or request.namespace
        with self._lock:
            info = self.store.get_changefeed(namespace, changefeed_id)
            if info.state not in ("stopped", "failed"):
                raise errors.ErrChangefeedUpdateRefused(
                    f"changefeed {namespace}/{changefeed_id} is {info.state}; only a stopped or failed "
                    f"changefeed can be updated: pause it first")
            sink_uri = _str_field(body, "sink_uri") or info.sink_uri
            config = (_replica_config(body["replica_config"]) if body.get("replica_config") is not None
                      else replica_config_from_dict(info.config))
            target_ts = _int_field(body, "target_ts", info.target_ts) if "target_ts" in body else info.target_ts
            if target_ts and target_ts <= info.start_ts:
                raise errors.ErrTargetTsInvalid(
                    f"target_ts {target_ts} must be larger than the changefeed's start_ts {info.start_ts}")
            self.controller.validate(sink_uri, config)
            info = replace(info, sink_uri=sink_uri, target_ts=target_ts, config=replica_config_to_dict(config))
            self.store.update_changefeed(info)
        return _ok(self._info_json(info))

    def delete_changefeed(self, request: _Request, changefeed_id: str) -> _Response:
        with self._lock:
            self.store.get_changefeed(request.namespace, changefeed_id)
            self.controller.stop(request.namespace, changefeed_id)
            self.store.delete_changefeed(request.namespace, changefeed_id)
        return _ok()

    def pause_changefeed(self, request: _Request, changefeed_id: str) -> _Response:
        request.json(allowed=())
        with self._lock:
            info = self.store.get_changefeed(request.namespace, changefeed_id)
            if info.state == "finished":
                raise errors.ErrChangefeedUpdateRefused(
                    f"changefeed {request.namespace}/{changefeed_id} has finished; there is nothing to pause")
            self.controller.stop(request.namespace, changefeed_id)
            self.store.update_changefeed(replace(info, state="stopped"))
        return _ok()

    def resume_changefeed(self, request: _Request, changefeed_id: str) -> _Response:
        body = request.json(allowed=("overwrite_checkpoint_ts",) + _PD_ONLY_FIELDS)
        _refuse_pd_fields(body)
        overwrite = _start_ts_field(body, "overwrite_checkpoint_ts")
        namespace = request.namespace
        with self._lock:
            info = self.store.get_changefeed(namespace, changefeed_id)
            if info.state in ("normal", "warning"):
                if overwrite:
                    raise errors.ErrChangefeedUpdateRefused(
                        f"changefeed {namespace}/{changefeed_id} is running; pause it before overwriting its checkpoint")
                return _ok()  # already running: resuming is a no-op, as in TiCDC
            if overwrite:
                checkpoint = self._resolve_start(overwrite, "overwrite_checkpoint_ts")
                if info.target_ts and checkpoint >= info.target_ts:
                    raise errors.ErrStartTsInvalid(
                        f"overwrite_checkpoint_ts {checkpoint} must be smaller than target_ts {info.target_ts}")
                self.store.set_checkpoint(namespace, changefeed_id, checkpoint)
            resumed = replace(info, state="normal", error=None)
            self.store.update_changefeed(resumed)
            try:
                self.controller.start(resumed)
            except BaseException:
                self.store.update_changefeed(info)
                raise
        return _ok()

    def _resolve_start(self, start: int | str, name: str) -> int:
        """A start (TSO, GTID or FILE:POS; 0 = now) as the commit-ts to replicate after. As TiCDC, a
        TSO past the current one is refused: nothing can be replicated from the future."""
        ts = self.controller.resolve_start_ts(start)
        # The upstream's clock stamps commit-ts; where it runs ahead of ours, its newest
        # transaction is "now".
        current = max(self.controller.current_tso(), self.controller.puller_resolved_ts())
        if ts > current:
            raise errors.ErrStartTsInvalid(
                f"invalid {name} {ts} ({tso.format_time(ts)} UTC), larger than the current TSO {current} "
                f"({tso.format_time(current)} UTC): a changefeed cannot start in the future; give a TSO up to "
                "`sparkcdc cli tso query`, 0 for now, a GTID or a binlog FILE:POS")
        return ts

    def _info_json(self, info: ChangefeedInfo) -> dict:
        status = self.store.get_status(info.namespace, info.id)
        return {
            "upstream_id": info.upstream_id,
            "namespace": info.namespace,
            "id": info.id,
            "sink_uri": mask_sink_uri(info.sink_uri),
            "create_time": info.create_time,
            "start_ts": info.start_ts,
            "target_ts": info.target_ts,
            "admin_job_type": _ADMIN_JOB_STOP if info.state == "stopped" else _ADMIN_JOB_NONE,
            "config": mask_document(info.config),
            "state": info.state,
            "error": mask_document(info.error),
            "creator_version": info.creator_version,
            "resolved_ts": status.resolved_ts,
            "checkpoint_ts": status.checkpoint_ts,
            "checkpoint_time": tso.format_time(status.checkpoint_ts),
            "task_status": [],
        }


def synced_status(now_ms: int, checkpoint_ts: int, puller_resolved_ts: int, last_synced_ts: int,
                  synced_check_interval_s: int, checkpoint_interval_s: int) -> dict:
    """TiCDC's SyncedStatus: synced once nothing was written for `synced_check_interval` and the
    checkpoint is within `checkpoint_interval` of now (tiflow cdc/api/v2/changefeed.go synced)."""
    since_last_sync_ms = now_ms - tso.physical_ms(last_synced_ts)
    checkpoint_lag_ms = now_ms - tso.physical_ms(checkpoint_ts)
    puller_lead_ms = tso.physical_ms(puller_resolved_ts) - tso.physical_ms(checkpoint_ts)
    synced = False
    if since_last_sync_ms > synced_check_interval_s * 1000 and checkpoint_lag_ms < checkpoint_interval_s * 1000:
        synced, message = True, "Data syncing is finished"
    elif since_last_sync_ms > synced_check_interval_s * 1000 and puller_lead_ms < checkpoint_interval_s * 1000:
        message = ("The checkpoint is behind now although nothing was written recently: check that the "
                   "upstream database is reachable and its binlog advances (sparkcdc's puller resolved ts); "
                   "if the upstream is down, the data syncing is complete")
    else:
        message = "The data syncing is not finished, please wait"
    return {
        "synced": synced,
        "sink_checkpoint_ts": tso.format_time(checkpoint_ts),
        "puller_resolved_ts": tso.format_time(puller_resolved_ts),
        "last_synced_ts": tso.format_time(last_synced_ts),
        "now_ts": tso.format_time(tso.compose(now_ms)),
        "info": message,
    }


def sparkcdc_version() -> str:
    return getattr(sparkcdc, "__version__", "") or "0.1.0"


def _error_response(status: int, code: str, message: str) -> _Response:
    return _Response(status, {"error_msg": message, "error_code": code})


def _nesting_exceeds(document: Any, limit: int) -> bool:
    """Whether objects/arrays nest deeper than `limit` (iterative: the check itself must not recurse)."""
    pending = [(document, 1)]
    while pending:
        value, depth = pending.pop()
        if isinstance(value, (dict, list)):
            if depth > limit:
                return True
            pending.extend((child, depth + 1) for child in (value.values() if isinstance(value, dict) else value))
    return False


def _state_wanted(state: str, wanted: str) -> bool:
    """TiCDC's FeedState.IsNeeded: no filter hides removed and finished changefeeds."""
    if wanted == "all":
        return True
    if wanted == "":
        return state not in ("removed", "finished")
    return state == wanted


def _check_changefeed_id(changefeed_id: str) -> None:
    if not CHANGEFEED_ID_PATTERN.match(changefeed_id) or len(changefeed_id) > 128:
        raise errors.ErrChangefeedInvalidID(
            f"changefeed id {changefeed_id!r} is invalid: use letters, digits and single dashes inside "
            f"(^[a-zA-Z0-9]+(\\-[a-zA-Z0-9]+)*$), at most 128 characters")


def _start_ts_field(document: dict, name: str) -> int | str:
    """A start position field: a TSO (integer or digits), or a GTID / FILE:POS string the
    transaction index resolves; 0 or absent = now (resume: no overwrite)."""
    value = document.get(name)
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise errors.ErrStartTsInvalid(
            f"{name} must be a TSO integer, or a string holding a GTID (0-1-25) or a binlog FILE:POS; got {value!r}")
    if isinstance(value, str):
        value = value.strip()
        if not value:
            raise errors.ErrStartTsInvalid(f"{name} is an empty string; give 0 (now), a TSO, a GTID or FILE:POS")
        if not value.isdigit():
            return value
        value = int(value)
    if not 0 <= value <= MAX_TS:
        raise errors.ErrStartTsInvalid(f"{name} must be a TSO in [0, {MAX_TS}], got {value!r}")
    return value


def _replica_config(document: Any) -> ReplicaConfig:
    if document is None:
        return ReplicaConfig()
    if not isinstance(document, dict):
        raise errors.ErrInvalidReplicaConfig("`replica_config` must be a JSON object")
    return replica_config_from_dict(document)


def _refuse_pd_fields(body: dict) -> None:
    """TiCDC's clients send the PD fields empty: take those, refuse anything else."""
    for name in _PD_ONLY_FIELDS:
        value = body.get(name)
        empty = [] if name in ("pd_addrs", "cert_allowed_cn") else ""
        if value is None or (type(value) is type(empty) and value == empty):
            continue
        raise errors.ErrAPIInvalidParam(
            f"`{name}` is for a TiDB (PD) upstream and may only be {json.dumps(empty)}; sparkcdc's upstream is "
            f"set on `sparkcdc server`: remove it")


class _Handler(BaseHTTPRequestHandler):
    server_version = "sparkcdc"
    protocol_version = "HTTP/1.1"
    api: OpenAPI  # set on the subclass made per server
    authenticator: Optional[ClientAuthenticator]

    def _handle(self) -> None:
        started = time.monotonic()
        length_header = self.headers.get("Content-Length") or "0"
        try:
            length = int(length_header)
        except ValueError:
            length = -1
        url = urlsplit(self.path)
        if length < 0 or length > MAX_BODY_BYTES:
            response = _error_response(400, errors.ErrAPIInvalidParam.code,
                                       f"bad Content-Length {length_header!r} (at most {MAX_BODY_BYTES} bytes)")
            self.close_connection = True
        else:
            body = self.rfile.read(length) if length else b""
            response = self._authenticate() or self.api.dispatch(
                _Request(self.command, url.path, parse_qs(url.query), body, self.headers.get("Authorization")))
        self._send_json(response)
        # TiCDC's LogMiddleware: method, path, status and time; never the body or the headers.
        log.info("%s %s %d %.1fms from %s", self.command, url.path, response.status,
                 (time.monotonic() - started) * 1000, self.client_address[0])

    def _send_json(self, response: _Response) -> None:
        if response.content_type is not None:
            payload, content_type = response.body, response.content_type
        else:
            payload, content_type = json.dumps(response.body).encode(), "application/json; charset=utf-8"
        self.send_response(response.status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(payload)))
        if response.status == 401:
            self.send_header("WWW-Authenticate", 'Basic realm="sparkcdc"')
        for name, value in response.headers.items():
            self.send_header(name, value)
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":  # a HEAD answer has headers only (RFC 9110)
            self.wfile.write(payload)

    def send_error(self, code: int, message: Optional[str] = None, explain: Optional[str] = None) -> None:
        """http.server's own refusals (a malformed request line, a URI over 64 KiB, too many or too
        long headers, an HTTP version other than 1.x) in the API's JSON error shape, not its HTML page."""
        reason = message or self.responses.get(code, ("error",))[0]
        fix = {
            HTTPStatus.REQUEST_URI_TOO_LONG: "the request line is longer than 65536 bytes: shorten the URL",
            HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE:
                "send at most 100 header lines of at most 65536 bytes each",
            HTTPStatus.HTTP_VERSION_NOT_SUPPORTED: "send an HTTP/1.1 (or 1.0) request",
        }.get(code, "send a well-formed HTTP/1.1 request")
        if self.request_version == "HTTP/0.9":  # no request line was parsed: still answer with a status line
            self.request_version = "HTTP/1.0"
        self.close_connection = True
        log.info("refused a malformed request from %s: %d %s", self.client_address[0], code, reason)
        self._send_json(_error_response(code, errors.ErrAPIInvalidParam.code,
                                        mask_text(f"{reason}; {fix}")))

    def __getattr__(self, name: str) -> Any:
        # http.server answers a method without a do_<METHOD> with an HTML 501; route every method
        # instead, so PATCH, OPTIONS, HEAD... get the router's JSON 405 (with Allow) or 404.
        if name.startswith("do_"):
            return self._handle
        raise AttributeError(name)

    def _authenticate(self) -> Optional[_Response]:
        """Writes need a client user when security.client-user-required; reads do not (as in TiCDC)."""
        if self.authenticator is None or self.command == "GET" or \
                urlsplit(self.path).path.rstrip("/") in READ_ONLY_POSTS:
            return None
        try:
            self.authenticator.check(self.headers.get("Authorization"))
        except errors.SparkCDCError as exc:
            return _Response(exc.http_status, exc.to_json())
        return None

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s - %s", self.address_string(), format % args)


class _TLSServer(ThreadingHTTPServer):
    """Wraps each accepted connection in TLS in its own thread, so a slow handshake blocks only it."""

    daemon_threads = True
    security: SecurityConfig
    ssl_context: Optional[ssl.SSLContext] = None

    def finish_request(self, request, client_address) -> None:
        if self.ssl_context is not None:
            request.settimeout(30)
            try:
                request = self.ssl_context.wrap_socket(request, server_side=True)
            except (ssl.SSLError, OSError) as exc:
                log.warning("TLS handshake with %s failed: %s", client_address[0], exc)
                return
            if not self.security.allowed_peer(request.getpeercert()):
                subject = dict(rdn[0] for rdn in (request.getpeercert() or {}).get("subject", ()))
                log.warning("refused %s: certificate CN %r is not in cert-allowed-cn %s", client_address[0],
                            subject.get("commonName"), list(self.security.cert_allowed_cn))
                request.close()
                return
            request.settimeout(None)
        super().finish_request(request, client_address)


class ApiServer:
    """The Open API on a ThreadingHTTPServer (TLS when configured); `start()` serves from a thread."""

    def __init__(self, host: str, port: int, api: OpenAPI, security: SecurityConfig = SecurityConfig(),
                 verify_user: Optional[UserVerifier] = None):
        authenticator = None
        if security.client_user_required:
            if verify_user is None:
                raise errors.ErrSecurityConfig("client-user-required needs a way to check passwords")
            authenticator = ClientAuthenticator(security, verify_user)
        handler = type("OpenAPIHandler", (_Handler,), {"api": api, "authenticator": authenticator})
        self.api = api
        self.security = security
        # Bound now, listening from start(): the port is this process's from here on (nothing
        # started later, Spark's JVM included, can take it), and a client still gets "connection
        # refused", not a hang, until the server is ready.
        self._httpd = _TLSServer((host, port), handler, bind_and_activate=False)
        try:
            self._httpd.server_bind()
        except OSError as exc:
            self._httpd.server_close()
            raise _listen_error(host, port, exc) from None
        self._httpd.security = security
        self._httpd.ssl_context = security.server_ssl_context()
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return self._httpd.server_address[1]

    @property
    def host(self) -> str:
        return self._httpd.server_address[0]

    @property
    def url(self) -> str:
        scheme = "https" if self._httpd.ssl_context is not None else "http"
        return f"{scheme}://{self.host}:{self.port}"

    def start(self) -> None:
        self._activate()
        # A short poll interval keeps shutdown() quick (the default waits up to 0.5 s).
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="sparkcdc-api", daemon=True)
        self._thread.start()

    def serve_forever(self) -> None:
        self._activate()
        self._httpd.serve_forever()

    def _activate(self) -> None:
        """Listen. Binding kept the port from any process that binds without SO_REUSEADDR or
        lets the kernel choose its port (Spark's JVM); one that also bound it with SO_REUSEADDR
        and listened first (another server started at the same moment) makes this fail."""
        try:
            self._httpd.server_activate()
        except OSError as exc:
            self._httpd.server_close()
            raise _listen_error(self.host, self.port, exc) from None

    def shutdown(self) -> None:
        if self._thread is not None:
            self._httpd.shutdown()
            self._thread.join()
            self._thread = None
        self._httpd.server_close()


def _listen_error(host: str, port: int, exc: OSError) -> errors.SparkCDCError:
    return errors.ErrServerListen(
        f"cannot listen on --addr {host}:{port}: {exc.strerror or exc}; stop the process that uses it or give "
        "another --addr (a free port, on an address of this host)")


def serve(addr: str, store: MetaStore, controller: ChangefeedController, security: SecurityConfig = SecurityConfig(),
          verify_user: Optional[UserVerifier] = None, observability: Optional[Observability] = None) -> ApiServer:
    """Bind the Open API on `addr` ("host:port"; port 0 picks a free one); .start() listens and serves.
    Raises ErrServerListen when the address cannot be bound."""
    host, sep, port = addr.rpartition(":")
    if not sep or not port.isdigit():
        raise errors.ErrAPIInvalidParam(f"--addr {addr!r} must be host:port, e.g. 127.0.0.1:8300")
    security = security.validate()
    return ApiServer(host.strip("[]") or "0.0.0.0", int(port), OpenAPI(store, controller, security, observability),
                     security, verify_user)
