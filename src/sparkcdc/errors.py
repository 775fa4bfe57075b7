"""Every error sparkcdc reports to a user, each with a stable code users can search for.

A message says what is wrong and what to do about it. Codes follow TiCDC's naming
(`CDC:ErrSinkURIInvalid` becomes `SPARKCDC:ErrSinkURIInvalid`).
"""

from __future__ import annotations


class SparkCDCError(Exception):
    """Base error. `code` is stable; `message` names the problem and the fix."""

    code = "SPARKCDC:ErrInternal"
    http_status = 500

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return f"[{self.code}] {self.message}"

    def to_json(self) -> dict:
        return {"error_code": self.code, "error_msg": self.message}


def _define(name: str, http_status: int = 400, base: type[SparkCDCError] = SparkCDCError) -> type[SparkCDCError]:
    return type(name, (base,), {"code": f"SPARKCDC:{name}", "http_status": http_status})


ErrSinkURIInvalid = _define("ErrSinkURIInvalid")
ErrSinkUnknownProtocol = _define("ErrSinkUnknownProtocol")
ErrSinkUnsupported = _define("ErrSinkUnsupported")
ErrInvalidReplicaConfig = _define("ErrInvalidReplicaConfig")
# Filter errors: TiCDC's codes, each a kind of invalid replica config.
ErrFilterRuleInvalid = _define("ErrFilterRuleInvalid", base=ErrInvalidReplicaConfig)
ErrInvalidIgnoreEventType = _define("ErrInvalidIgnoreEventType", base=ErrInvalidReplicaConfig)
ErrExpressionParseFailed = _define("ErrExpressionParseFailed", base=ErrInvalidReplicaConfig)
ErrExpressionColumnNotFound = _define("ErrExpressionColumnNotFound", base=ErrInvalidReplicaConfig)
ErrColumnSelectorFailed = _define("ErrColumnSelectorFailed", base=ErrInvalidReplicaConfig)
ErrChangefeedNotExists = _define("ErrChangefeedNotExists", 404)
ErrChangefeedAlreadyExists = _define("ErrChangefeedAlreadyExists")
ErrChangefeedInvalidID = _define("ErrChangefeedInvalidID")
ErrChangefeedUpdateRefused = _define("ErrChangefeedUpdateRefused")
ErrStartTsInvalid = _define("ErrStartTsInvalid")
ErrTargetTsInvalid = _define("ErrTargetTsInvalid")
ErrUpstreamURIInvalid = _define("ErrUpstreamURIInvalid")
ErrUpstreamUnreachable = _define("ErrUpstreamUnreachable", 503)
ErrUpstreamBinlogConfig = _define("ErrUpstreamBinlogConfig")
ErrUpstreamPrivilege = _define("ErrUpstreamPrivilege")
ErrBinlogUnsupportedEvent = _define("ErrBinlogUnsupportedEvent", 500)
ErrBinlogPositionInvalid = _define("ErrBinlogPositionInvalid")
ErrStorageIO = _define("ErrStorageIO", 500)
ErrStorageUnavailable = _define("ErrStorageUnavailable", 503)  # a transient storage error: retried
ErrAPIInvalidParam = _define("ErrAPIInvalidParam")
ErrAPINotFound = _define("ErrAPINotFound", 404)
ErrAPIMethodNotAllowed = _define("ErrAPIMethodNotAllowed", 405)
ErrServerUnreachable = _define("ErrServerUnreachable", 503)
ErrSecurityConfig = _define("ErrSecurityConfig")
ErrClientAuthFailed = _define("ErrClientAuthFailed", 401)
ErrProcessorNotExists = _define("ErrProcessorNotExists", 404)
ErrMySQLConnectionError = _define("ErrMySQLConnectionError", 503)
ErrMySQLTxnError = _define("ErrMySQLTxnError", 500)
ErrExecDDLFailed = _define("ErrExecDDLFailed", 500)
ErrEtcdUnavailable = _define("ErrEtcdUnavailable", 503)
ErrCaptureFenced = _define("ErrCaptureFenced", 409)
ErrDDLUnparseable = _define("ErrDDLUnparseable", 500)
ErrRenameTableNotSupported = _define("ErrRenameTableNotSupported", 400)
ErrKafkaSendMessage = _define("ErrKafkaSendMessage", 500)
ErrKafkaTopic = _define("ErrKafkaTopic", 400)
ErrMessageTooLarge = _define("ErrMessageTooLarge", 400)
ErrAvroSchemaRegistry = _define("ErrAvroSchemaRegistry", 500)
# Spark Connect mode (`sparkcdc server --spark-remote`).
ErrSparkRemoteInvalid = _define("ErrSparkRemoteInvalid")
ErrSparkRemoteUnreachable = _define("ErrSparkRemoteUnreachable", 503)
ErrSparkRemoteSessionLost = _define("ErrSparkRemoteSessionLost", 500)
# Redo log (TiCDC's codes).
ErrConsistentStorage = _define("ErrConsistentStorage")
ErrRedoFileOp = _define("ErrRedoFileOp", 500)
ErrRedoMetaFileNotFound = _define("ErrRedoMetaFileNotFound")
# Lakehouse sinks (delta://, iceberg://; docs/lakehouse-sinks.md).
ErrLakehouseCatalog = _define("ErrLakehouseCatalog")  # unknown or unreachable Iceberg catalog
ErrLakehouseTableIncompatible = _define("ErrLakehouseTableIncompatible", 409)  # an existing table's schema differs
ErrLakehouseSchemaChange = _define("ErrLakehouseSchemaChange", 409)  # a DDL the table format cannot express
