"""The OpenAPI 3 document of the Open API v2, served at /api/v2/openapi.json.

One source for the served document and docs/openapi.json (a unit test fails when they drift).
Shapes follow tiflow cdc/api/v2/model.go; JSON is snake_case as in TiCDC.
"""

from __future__ import annotations

import json
from typing import Any

from sparkcdc import __version__

_INT = {"type": "integer", "minimum": 0}
_TS = {"type": "integer", "minimum": 0, "maximum": (1 << 63) - 1}
# Where a changefeed starts: a TSO, or where the transaction index finds a GTID or binlog position.
_START = {"oneOf": [_TS, {"type": "string", "minLength": 1,
                          "description": "a TSO in digits, a GTID (`0-1-25`, MySQL `uuid:n`) or a binlog `FILE:POS`"}],
          "description": "0 = now; not past the current TSO"}
_STR = {"type": "string"}
_BOOL = {"type": "boolean"}
_TIME = {"type": "string", "description": "UTC time, `2006-01-02 15:04:05.000`"}


def _ref(name: str) -> dict:
    return {"$ref": f"#/components/schemas/{name}"}


def _object(properties: dict, required: tuple[str, ...] | None = None, extra: bool = False) -> dict:
    """An object schema; `required=None` means every property is always present in responses."""
    return {
        "type": "object",
        "properties": properties,
        "required": list(properties) if required is None else list(required),
        "additionalProperties": extra,
    }


def _nullable(schema: dict) -> dict:
    if "$ref" in schema:  # OpenAPI 3.0 ignores siblings of $ref
        return {"allOf": [schema], "nullable": True}
    return {**schema, "nullable": True}


def _request(properties: dict, required: tuple[str, ...] = ()) -> dict:
    """A request body: as with TiCDC's Go JSON decoding, an optional field may be null (= absent)."""
    return _object({name: schema if name in required else _nullable(schema) for name, schema in properties.items()},
                   required=required)


def _list_of(item: str) -> dict:
    return _object({"total": _INT, "items": {"type": "array", "items": _ref(item)}})


_STATES = ["normal", "pending", "failed", "stopped", "removed", "finished", "warning"]
# TiCDC's PDConfig fields: accepted when empty (TiCDC's clients send them), refused otherwise.
_PD_FIELDS = {
    "pd_addrs": {"type": "array", "items": _STR},
    "ca_path": _STR,
    "cert_path": _STR,
    "key_path": _STR,
    "cert_allowed_cn": {"type": "array", "items": _STR},
}

SCHEMAS: dict[str, dict] = {
    "HTTPError": _object({"error_msg": _STR, "error_code": _STR}),
    "EmptyResponse": _object({}),
    "ServerStatus": _object({
        "version": _STR, "git_hash": _STR, "id": _STR, "cluster_id": _STR, "pid": _INT, "is_owner": _BOOL,
        "liveness": {"type": "integer", "enum": [0, 1], "description": "0 alive, 1 stopping"},
    }),
    "LogLevelReq": _request({"log_level": {"type": "string",
                                           "enum": ["debug", "info", "warn", "error", "dpanic", "panic", "fatal"]}},
                            required=("log_level",)),
    "Tso": _object({"timestamp": _INT, "logic_time": _INT}),
    "PDConfig": _request(dict(_PD_FIELDS)),
    "Capture": _object({"id": _STR, "is_owner": _BOOL, "address": _STR, "cluster_id": _STR}),
    "CaptureList": _list_of("Capture"),
    "DrainCaptureResp": _object({"current_table_count": _INT}),
    "ProcessorCommonInfo": _object({"namespace": _STR, "changefeed_id": _STR, "capture_id": _STR}),
    "ProcessorList": _list_of("ProcessorCommonInfo"),
    "ProcessorDetail": _object({"table_ids": {"type": "array", "items": {"type": "integer"}}}),
    "RunningError": _nullable(_object({"time": _STR, "addr": _STR, "code": _STR, "message": _STR},
                                      required=("code", "message"))),
    "ReplicaConfig": {"type": "object", "additionalProperties": True,
                      "description": "the changefeed config (TiCDC's ReplicaConfig, snake_case keys); "
                                     "unknown keys are refused"},
    "ChangefeedConfig": _request({
        "namespace": _STR,
        "changefeed_id": {"type": "string", "pattern": r"^[a-zA-Z0-9]+(\-[a-zA-Z0-9]+)*$", "maxLength": 128},
        "start_ts": _START, "target_ts": _TS,
        "sink_uri": {"type": "string", "description": "e.g. mysql://user:pass@host:3306/ or file:///path"},
        "replica_config": _ref("ReplicaConfig"),
        **_PD_FIELDS,
    }, required=("sink_uri",)),
    "UpdateChangefeedConfig": _request({
        "namespace": _STR, "target_ts": _TS, "sink_uri": _STR, "replica_config": _ref("ReplicaConfig"),
        **_PD_FIELDS,
    }),
    "ResumeChangefeedConfig": _request({"overwrite_checkpoint_ts": _START, **_PD_FIELDS}),
    "VerifyTableConfig": _request({"replica_config": _ref("ReplicaConfig"), "start_ts": _START, "sink_uri": _STR,
                                   **_PD_FIELDS}),
    "TableName": _object({"database_name": _STR, "table_name": _STR, "table_id": {"type": "integer"},
                          "is_partition": _BOOL}),
    "Tables": _object({"ineligible_tables": {"type": "array", "items": _ref("TableName")},
                       "eligible_tables": {"type": "array", "items": _ref("TableName")}}),
    "ChangefeedCommonInfo": _object({
        "upstream_id": _INT, "namespace": _STR, "id": _STR, "state": {"type": "string", "enum": _STATES},
        "checkpoint_tso": _INT, "checkpoint_time": _TIME, "error": _ref("RunningError"),
    }),
    "ChangefeedList": _list_of("ChangefeedCommonInfo"),
    "ChangeFeedInfo": _object({
        "upstream_id": _INT, "namespace": _STR, "id": _STR,
        "sink_uri": {"type": "string", "description": "passwords shown as xxxxx"},
        "create_time": _STR, "start_ts": _INT, "target_ts": _INT,
        "admin_job_type": {"type": "integer", "enum": [0, 1]},
        "config": _ref("ReplicaConfig"), "state": {"type": "string", "enum": _STATES},
        "error": _ref("RunningError"), "creator_version": _STR, "resolved_ts": _INT, "checkpoint_ts": _INT,
        "checkpoint_time": _TIME, "task_status": {"type": "array", "items": _ref("CaptureTaskStatus")},
        "puller": _ref("PullerState"), "snapshot": _ref("SnapshotProgress"),
    }, required=("upstream_id", "namespace", "id", "sink_uri", "create_time", "start_ts", "target_ts",
                 "admin_job_type", "config", "state", "error", "creator_version", "resolved_ts", "checkpoint_ts",
                 "checkpoint_time", "task_status")),
    "PullerState": _object({
        "state": {"type": "string", "enum": ["starting", "running", "reconnecting", "switching", "stalled", "failed",
                                             "stopped"]},
        "upstream": {"type": "string", "description": "the upstream URI, password shown as xxxxx"},
        "server": {"type": "string", "description": "host:port of the server of the URI the puller follows "
                                                    "(empty until it connected)"},
        "epoch": {"type": "integer", "minimum": 0,
                  "description": "the index's source epoch: one more after each upstream failover (docs/failover.md)"},
        "since": {"type": "string", "description": "when the state began (ISO 8601, UTC)"},
        "error": _ref("RunningError"), "capture_id": _STR, "resolved_ts": _INT,
    }),
    "ChangefeedStatus": _object({
        "state": {"type": "string", "enum": _STATES}, "resolved_ts": _INT, "checkpoint_ts": _INT,
        "last_error": _ref("RunningError"), "last_warning": _ref("RunningError"),
    }),
    "SyncedStatus": _object({
        "synced": _BOOL, "sink_checkpoint_ts": _TIME, "puller_resolved_ts": _TIME, "last_synced_ts": _TIME,
        "now_ts": _TIME, "info": _STR,
    }),
    "TableSnapshotProgress": _object({
        "table": _STR, "state": {"type": "string", "enum": ["pending", "copying", "done", "skipped"]},
        "chunks_done": _INT, "chunks_total": _INT, "rows": _INT, "estimated_rows": _INT,
        "rows_per_second": {"type": "number", "minimum": 0}, "eta_seconds": _nullable({"type": "number"}),
        "incremental": _BOOL, "skipped": _STR,
    }, required=("table", "state", "chunks_done", "chunks_total", "rows", "estimated_rows", "rows_per_second",
                 "eta_seconds", "incremental")),
    "SnapshotProgress": _object({
        "state": {"type": "string", "enum": ["none", "pending", "copying", "done"]},
        "tables_done": _INT, "tables_total": _INT, "chunks_done": _INT, "chunks_total": _INT, "rows": _INT,
        "rows_per_second": {"type": "number", "minimum": 0}, "eta_seconds": _nullable({"type": "number"}),
        "tables": {"type": "array", "items": _ref("TableSnapshotProgress")},
    }, required=("state",)),
    "SnapshotRequest": _request({"tables": {"type": "array", "minItems": 1, "items": {
        "type": "string", "description": "`db.table`"}}}, required=("tables",)),
    "SnapshotRequestAccepted": _object({"request_id": _INT, "tables": {"type": "array", "items": _STR}}),
    "CaptureTaskStatus": _object({"capture_id": _STR, "table_ids": {"type": "array", "items": {"type": "integer"}}}),
    "EtcdData": _object({"key": _STR, "value": _STR}),
    "EtcdDataList": {"type": "array", "items": _ref("EtcdData")},
}


def _responses(ok: str | None, *errors: int) -> dict:
    responses: dict[str, Any] = {
        "200": {"description": "OK", "content": {"application/json": {"schema": _ref(ok or "EmptyResponse")}}},
    }
    descriptions = {400: "bad input: the message names the problem and the fix", 401: "client user required",
                    404: "no such changefeed, capture or processor", 405: "method not allowed",
                    500: "internal error", 503: "the upstream, the owner, etcd or a MySQL downstream is unreachable"}
    for status in sorted({*errors, 400, 500}):
        responses[str(status)] = {"description": descriptions[status],
                                  "content": {"application/json": {"schema": _ref("HTTPError")}}}
    return responses


def _body(schema: str, required: bool = False) -> dict:
    return {"required": required, "content": {"application/json": {"schema": _ref(schema)}}}


_NAMESPACE = {"name": "namespace", "in": "query", "required": False, "schema": {"type": "string"},
              "description": "changefeed namespace (default `default`)"}
_CF_ID = {"name": "changefeed_id", "in": "path", "required": True, "schema": {"type": "string"}}
_CAPTURE_ID = {"name": "capture_id", "in": "path", "required": True, "schema": {"type": "string"}}


def _op(summary: str, ok: str | None, *errors: int, body: dict | None = None, params=(), write: bool = False) -> dict:
    operation: dict[str, Any] = {"summary": summary, "parameters": list(params),
                                 "responses": _responses(ok, *errors, *((401,) if write else ()))}
    if body is not None:
        operation["requestBody"] = body
    if write:
        operation["security"] = [{}, {"basicAuth": []}]
    return operation


PATHS: dict[str, dict] = {
    "/api/v2/health": {"get": _op("health of this server", None)},
    "/api/v2/status": {"get": _op("this capture's status", "ServerStatus")},
    "/api/v2/log": {"post": _op("set the log level", None, body=_body("LogLevelReq", True), write=True)},
    "/api/v2/tso": {"post": _op("the current timestamp (TSO)", "Tso", body=_body("PDConfig"))},
    "/api/v2/changefeeds": {
        "get": _op("list changefeeds", "ChangefeedList", params=(
            _NAMESPACE, {"name": "state", "in": "query", "required": False,
                         "schema": {"type": "string", "enum": ["", "all", *_STATES]}})),
        "post": _op("create a changefeed", "ChangeFeedInfo", 503, body=_body("ChangefeedConfig", True),
                    params=(_NAMESPACE,), write=True),
    },
    "/api/v2/changefeeds/{changefeed_id}": {
        "get": _op("one changefeed", "ChangeFeedInfo", 404, params=(_CF_ID, _NAMESPACE)),
        "put": _op("update a stopped or failed changefeed", "ChangeFeedInfo", 404, 503,
                   body=_body("UpdateChangefeedConfig", True), params=(_CF_ID, _NAMESPACE), write=True),
        "delete": _op("remove a changefeed", None, 404, params=(_CF_ID, _NAMESPACE), write=True),
    },
    "/api/v2/changefeeds/{changefeed_id}/meta_info": {
        "get": _op("one changefeed's info", "ChangeFeedInfo", 404, params=(_CF_ID, _NAMESPACE))},
    "/api/v2/changefeeds/{changefeed_id}/status": {
        "get": _op("state, checkpoint and last error", "ChangefeedStatus", 404, params=(_CF_ID, _NAMESPACE))},
    "/api/v2/changefeeds/{changefeed_id}/synced": {
        "get": _op("whether the downstream has caught up", "SyncedStatus", 404, params=(_CF_ID, _NAMESPACE))},
    "/api/v2/changefeeds/{changefeed_id}/snapshot": {
        "get": _op("the initial snapshot's progress per table (sparkcdc)", "SnapshotProgress", 404,
                   params=(_CF_ID, _NAMESPACE)),
        "post": _op("copy tables again while the changefeed streams (sparkcdc; like Debezium's ad-hoc snapshots)",
                    "SnapshotRequestAccepted", 404, body=_body("SnapshotRequest", True), params=(_CF_ID, _NAMESPACE),
                    write=True)},
    "/api/v2/changefeeds/{changefeed_id}/pause": {
        "post": _op("pause a changefeed", None, 404, params=(_CF_ID, _NAMESPACE), write=True)},
    "/api/v2/changefeeds/{changefeed_id}/resume": {
        "post": _op("resume a changefeed", None, 404, 503, body=_body("ResumeChangefeedConfig"),
                    params=(_CF_ID, _NAMESPACE), write=True)},
    "/api/v2/captures": {"get": _op("list captures", "CaptureList")},
    "/api/v2/captures/{capture_id}/drain": {
        "post": _op("move every changefeed off a capture", "DrainCaptureResp", 404, params=(_CAPTURE_ID,),
                    write=True)},
    "/api/v2/processors": {"get": _op("list processors (changefeed, capture)", "ProcessorList")},
    "/api/v2/processors/{changefeed_id}/{capture_id}": {
        "get": _op("one processor", "ProcessorDetail", 404, params=(_CF_ID, _CAPTURE_ID, _NAMESPACE))},
    "/api/v2/verify_table": {
        "post": _op("eligible and ineligible tables for a config", "Tables", 503, body=_body("VerifyTableConfig"))},
    "/api/v2/owner/resign": {"post": _op("make the owner resign", None, 503, write=True)},
    "/api/v2/unsafe/metadata": {"get": _op("every metadata key and value, secrets masked", "EtcdDataList")},
    "/api/v2/openapi.json": {
        "get": {"summary": "this document", "parameters": [],
                "responses": {"200": {"description": "OpenAPI 3 document",
                                      "content": {"application/json": {"schema": {"type": "object"}}}}}}},
}


def _page(summary: str, content_type: str) -> dict:
    """A GET that answers something other than JSON (404 when the server runs with --metrics off)."""
    return {"get": {"summary": summary, "parameters": [], "responses": {
        "200": {"description": "OK", "content": {content_type: {"schema": {"type": "string"}}}},
        "404": {"description": "the server runs with --metrics off",
                "content": {"application/json": {"schema": _ref("HTTPError")}}}}}}


# Not TiCDC's Open API, but served on its address (docs/operations.md).
PATHS.update({
    "/metrics": _page("Prometheus metrics of this capture (text format 0.0.4)", "text/plain"),
    "/": {"get": {"summary": "redirects to the status page", "parameters": [],
                  "responses": {"302": {"description": "Location: /dashboard"}}}},
    "/dashboard": _page("the status page", "text/html"),
    "/dashboard/data": {"get": {"summary": "the status page's data: changefeeds with state, checkpoint, lag, "
                                           "rows/s, last error and recent history; captures and the owner",
                                "parameters": [], "responses": {
                                    "200": {"description": "OK", "content": {"application/json": {
                                        "schema": {"type": "object"}}}},
                                    "404": {"description": "the server runs with --metrics off",
                                            "content": {"application/json": {"schema": _ref("HTTPError")}}}}}},
})


def openapi_document() -> dict:
    return {
        "openapi": "3.0.3",
        "info": {
            "title": "sparkcdc Open API v2",
            "version": __version__,
            "description": "TiCDC's Open API v2 (routes and JSON shapes of tiflow cdc/api/v2) for a "
                           "MariaDB/MySQL upstream. Errors are {error_msg, error_code}; a method a path "
                           "does not list answers 405 with Allow, a malformed request 400, 414, 431 or 505. With "
                           "security.client-user-required, POST/PUT/DELETE (except tso and "
                           "verify_table) need HTTP basic auth.",
        },
        "paths": PATHS,
        "components": {
            "schemas": SCHEMAS,
            "securitySchemes": {"basicAuth": {"type": "http", "scheme": "basic"}},
        },
    }


def openapi_json() -> str:
    """The document as docs/openapi.json holds it."""
    return json.dumps(openapi_document(), indent=2, sort_keys=True) + "\n"
