"""Sinks are chosen by URI scheme, in one place."""

from __future__ import annotations

from sparkcdc.config.replica import ReplicaConfig
from sparkcdc.config.sink_uri import classify_sink_uri
from sparkcdc.errors import ErrInvalidReplicaConfig, ErrSinkUnsupported


def validate_sink(sink_uri: str, config: ReplicaConfig) -> None:
    """Raise a SparkCDCError naming the problem if the URI or its parameters are invalid."""
    kind = classify_sink_uri(sink_uri)
    if kind != "mysql" and (config.consistent.level == "eventual" or config.enable_sync_point):
        feature = "the redo log ([consistent] level = \"eventual\")" if config.consistent.level == "eventual" \
            else "enable-sync-point"
        raise ErrInvalidReplicaConfig(
            f"{feature} works only with MySQL-compatible sinks (mysql://, tidb://), not a {kind} sink; "
            "remove it from the changefeed config or use a MySQL sink")
    if kind == "storage":
        from sparkcdc.sink.storage.uri import parse_storage_uri

        parse_storage_uri(sink_uri, config.sink)
        return
    if kind == "mysql":
        from sparkcdc.sink.mysql.config import parse_mysql_sink_uri

        parse_mysql_sink_uri(sink_uri, config)
        return
    if kind == "kafka":
        from sparkcdc.sink.kafka.config import parse_kafka_sink_uri

        parse_kafka_sink_uri(sink_uri, config)
        return
    if kind == "lakehouse":
        from sparkcdc.sink.lakehouse.config import parse_lakehouse_uri

        parse_lakehouse_uri(sink_uri, config.sink)
        return
    raise ErrSinkUnsupported(
        f"the {kind} sink is not supported yet; use a storage sink such as "
        "file:///path?protocol=canal-json or a MySQL sink such as mysql://user:password@host:3306/"
    )


def make_sink(sink_uri: str, config: ReplicaConfig, replicating_ts: int = 0,
              retry_seconds: float | None = None, changefeed: str = "default/changefeed"):
    """The sink for a changefeed: write_rows, write_ddl, flush, write_checkpoint, close.

    `replicating_ts` (MySQL sink): rows committed at or before it may already be downstream
    and are written idempotently; pass a ts at or above anything a previous run may have written.
    `retry_seconds` (MySQL sink): how long a write or DDL is retried in place before it fails, for
    callers that restart the sink themselves (the changefeed runner).
    `changefeed` (lakehouse sinks): `<namespace>/<id>`, recorded with every table commit.
    """
    validate_sink(sink_uri, config)
    kind = classify_sink_uri(sink_uri)
    if kind == "storage":
        from sparkcdc.sink.storage.writer import StorageSink

        return StorageSink(sink_uri, config.sink)
    if kind == "mysql":
        from sparkcdc.sink.mysql.sink import MySQLSink

        from sparkcdc.sink.mysql.connection import RetryPolicy

        if retry_seconds is None:
            return MySQLSink(sink_uri, config, replicating_ts=replicating_ts)
        return MySQLSink(sink_uri, config, replicating_ts=replicating_ts,
                         retry=RetryPolicy(max_elapsed=retry_seconds),
                         ddl_retry=RetryPolicy(max_elapsed=retry_seconds, max_attempts=20))
    if kind == "kafka":
        from sparkcdc.sink.kafka.sink import KafkaSink

        return KafkaSink(sink_uri, config)
    if kind == "lakehouse":
        from sparkcdc.sink.lakehouse import make_lakehouse_sink

        return make_lakehouse_sink(sink_uri, config.sink, changefeed)
    raise AssertionError(kind)  # validate_sink rejected every other kind


def splits_key_updates(sink_uri: str, config: ReplicaConfig) -> bool:
    """Whether key-changing updates reach this sink as delete + insert (TiCDC's rule for MQ
    and storage sinks unless output-raw-change-event; MySQL sinks split in their own way)."""
    kind = classify_sink_uri(sink_uri)
    if kind == "storage":
        return not config.sink.cloud_storage_config.output_raw_change_event
    if kind == "kafka":
        from sparkcdc.sink.kafka.config import parse_kafka_sink_uri

        return not parse_kafka_sink_uri(sink_uri, config).output_raw_change_event
    return False


def splits_large_transactions(sink_uri: str, config: ReplicaConfig) -> bool:
    """Whether a transaction larger than a micro-batch may reach this sink over several batches
    (the source's split_transactions). Not for a MySQL sink with transaction-atomicity=table,
    which applies each transaction whole, nor with a redo log, whose pieces are cut between
    transactions, nor with syncpoints, which must never see half a transaction downstream:
    those get every transaction in one batch, whatever its size."""
    if config.consistent.level == "eventual" or config.enable_sync_point:
        return False
    if classify_sink_uri(sink_uri) == "lakehouse":
        return False  # one commit per table per batch holds whole transactions (sink/lakehouse/sink.py)
    if classify_sink_uri(sink_uri) == "mysql":
        from sparkcdc.sink.mysql.config import parse_mysql_sink_uri

        return parse_mysql_sink_uri(sink_uri, config).transaction_atomicity != "table"
    return True
