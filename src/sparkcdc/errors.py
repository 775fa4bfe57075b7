"""Every error sparkcdc reports to a user, each with a stable code users can search for.

A message says what is wrong and what to do about it. Codes follow TiCDC's naming
(`CDC:ErrSinkURIInvalid` becomes `SPARKCDC:ErrSinkURIInvalid`).

Each class also says whether a changefeed that fails with it may recover by itself
(`retryable`, TiCDC's retryable errors): True for an unreachable upstream, downstream or
store, which the changefeed waits out in `warning`; False when only the user can fix it; None
when the cause inside decides (a MySQL error number, a Spark transient). The changefeed runner
applies this policy (pipeline/failure.py); failures reach it as text, so `error_class` finds a
class again from the code in a message.
"""

from __future__ import annotations


class SparkCDCError(Exception):
    """Base error. `code` is stable; `message` names the problem and the fix."""

    code = "SPARKCDC:ErrInternal"
    http_status = 500
    retryable: bool | None = False

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return f"[{self.code}] {self.message}"

    def to_json(self) -> dict:
        return {"error_code": self.code, "error_msg": self.message}


_BY_CODE: dict[str, type[SparkCDCError]] = {SparkCDCError.code: SparkCDCError}


def _define(name: str, http_status: int = 400, base: type[SparkCDCError] = SparkCDCError,
            retryable: bool | None = False) -> type[SparkCDCError]:
    cls = type(name, (base,), {"code": f"SPARKCDC:{name}", "http_status": http_status, "retryable": retryable})
    _BY_CODE[cls.code] = cls
    return cls


def error_class(code: str) -> type[SparkCDCError] | None:
    """The error class of a code such as `SPARKCDC:ErrUpstreamUnreachable` (None if unknown)."""
    return _BY_CODE.get(code)


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
# The initial snapshot (pipeline/snapshot.py): a chunk key that no index leads with, a table the
# upstream user may not read.
ErrSnapshotChunkKeyInvalid = _define("ErrSnapshotChunkKeyInvalid", base=ErrInvalidReplicaConfig)
ErrSnapshotTablePrivilege = _define("ErrSnapshotTablePrivilege")
ErrSnapshotRequestInvalid = _define("ErrSnapshotRequestInvalid")
ErrChangefeedNotExists = _define("ErrChangefeedNotExists", 404)
ErrChangefeedAlreadyExists = _define("ErrChangefeedAlreadyExists")
ErrChangefeedInvalidID = _define("ErrChangefeedInvalidID")
ErrChangefeedUpdateRefused = _define("ErrChangefeedUpdateRefused")
ErrStartTsInvalid = _define("ErrStartTsInvalid")
ErrTargetTsInvalid = _define("ErrTargetTsInvalid")
ErrUpstreamURIInvalid = _define("ErrUpstreamURIInvalid")
ErrUpstreamUnreachable = _define("ErrUpstreamUnreachable", 503, retryable=True)
ErrUpstreamBinlogConfig = _define("ErrUpstreamBinlogConfig")
ErrUpstreamPrivilege = _define("ErrUpstreamPrivilege")
ErrBinlogUnsupportedEvent = _define("ErrBinlogUnsupportedEvent", 500)
ErrBinlogPositionInvalid = _define("ErrBinlogPositionInvalid")
# The binlog a changefeed (or the puller) needs is gone from the upstream (PURGE BINARY LOGS, expire_logs_days).
ErrBinlogPurged = _define("ErrBinlogPurged", 400)
# A failover to another server of the upstream's topology that would lose or invent data
# (docs/failover.md): the new server lacks what the index needs (log_slave_updates, GTIDs), or its
# history diverged from the old primary's (an errant transaction, a missing one).
ErrUpstreamFailoverConfig = _define("ErrUpstreamFailoverConfig", 400)
ErrUpstreamDiverged = _define("ErrUpstreamDiverged", 409)
# The binlog puller: stopped on an error no retry fixes, or alive but reading nothing.
ErrPullerFailed = _define("ErrPullerFailed", 500)
ErrPullerStalled = _define("ErrPullerStalled", 503, retryable=True)
# A changefeed failure that carries no code of ours (Spark's own, or an unexpected exception):
# retryable when it is one of Spark's transient failures or quotes a connection-class MySQL error.
ErrProcessorUnknown = _define("ErrProcessorUnknown", 500, retryable=None)
ErrStorageIO = _define("ErrStorageIO", 500)
ErrStorageUnavailable = _define("ErrStorageUnavailable", 503, retryable=True)  # a transient storage error
ErrAPIInvalidParam = _define("ErrAPIInvalidParam")
ErrAPINotFound = _define("ErrAPINotFound", 404)
ErrAPIMethodNotAllowed = _define("ErrAPIMethodNotAllowed", 405)
ErrServerUnreachable = _define("ErrServerUnreachable", 503, retryable=True)
# `sparkcdc server --addr` cannot be bound (in use, not an address of this host, a privileged port).
ErrServerListen = _define("ErrServerListen")
ErrSecurityConfig = _define("ErrSecurityConfig")
ErrClientAuthFailed = _define("ErrClientAuthFailed", 401)
ErrProcessorNotExists = _define("ErrProcessorNotExists", 404)
ErrMySQLConnectionError = _define("ErrMySQLConnectionError", 503, retryable=True)
# Retryable when the MySQL error inside is (sink/mysql/error_codes.py: a deadlock, a lost connection).
ErrMySQLTxnError = _define("ErrMySQLTxnError", 500, retryable=None)
ErrExecDDLFailed = _define("ErrExecDDLFailed", 500)
ErrEtcdUnavailable = _define("ErrEtcdUnavailable", 503, retryable=True)
ErrCaptureFenced = _define("ErrCaptureFenced", 409)
ErrDDLUnparseable = _define("ErrDDLUnparseable", 500)
ErrRenameTableNotSupported = _define("ErrRenameTableNotSupported", 400)
ErrExchangePartition = _define("ErrExchangePartition", 400)
# Bidirectional replication (docs/bidirectional-replication.md): a downstream that cannot mark what
# the sink writes, a downstream user without the privileges the sink needs, a DDL the BDR role refuses.
ErrBDRDownstreamUnsupported = _define("ErrBDRDownstreamUnsupported", 400)
ErrBDRDownstreamPrivilege = _define("ErrBDRDownstreamPrivilege", 400)
ErrBDRDDLRefused = _define("ErrBDRDDLRefused", 400)
ErrKafkaSendMessage = _define("ErrKafkaSendMessage", 500, retryable=True)
ErrKafkaTopic = _define("ErrKafkaTopic", 400)
ErrMessageTooLarge = _define("ErrMessageTooLarge", 400)
ErrAvroSchemaRegistry = _define("ErrAvroSchemaRegistry", 500)
ErrInvalidFailpoint = _define("ErrInvalidFailpoint")  # SPARKCDC_FAILPOINTS (tests only, docs/failpoints.md)
# Spark Connect mode (`sparkcdc server --spark-remote`).
ErrSparkRemoteInvalid = _define("ErrSparkRemoteInvalid")
ErrSparkRemoteUnreachable = _define("ErrSparkRemoteUnreachable", 503, retryable=True)
ErrSparkRemoteSessionLost = _define("ErrSparkRemoteSessionLost", 500, retryable=True)
# Redo log (TiCDC's codes).
ErrConsistentStorage = _define("ErrConsistentStorage")
ErrRedoFileOp = _define("ErrRedoFileOp", 500, retryable=True)
ErrRedoMetaFileNotFound = _define("ErrRedoMetaFileNotFound")
# Lakehouse sinks (delta://, iceberg://; docs/lakehouse-sinks.md).
ErrLakehouseCatalog = _define("ErrLakehouseCatalog")  # unknown or unreachable Iceberg catalog
ErrLakehouseTableIncompatible = _define("ErrLakehouseTableIncompatible", 409)  # an existing table's schema differs
ErrLakehouseSchemaChange = _define("ErrLakehouseSchemaChange", 409)  # a DDL the table format cannot express
