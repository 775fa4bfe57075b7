"""Sink kinds, chosen by URI scheme in one place, and a changefeed's sink parsed once (`SinkSpec`).

Each kind (TiCDC's pkg/sink/sink_type.go) is one `SinkKind` in SINK_KINDS: its URI schemes, how
its URI and the changefeed config become its settings (validating them, with a coded error that
names the fault), how a sink is opened from them, and what the rest of the pipeline must know
about it. Adding a kind means one package and one entry here; its modules load only when a URI
of the kind is parsed.

`parse_sink_spec` validates a sink URI with the changefeed config once, at the edge (the API's
create and update, and each changefeed start), and the `SinkSpec` it returns is passed down: the
runner opens the sink from it and reads the capabilities that shape the pipeline from it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence
from urllib.parse import urlsplit

from sparkcdc.config.replica import ReplicaConfig
from sparkcdc.config.sink_uri import mask_sink_uri
from sparkcdc.errors import ErrInvalidReplicaConfig, ErrSinkURIInvalid, ErrSinkUnsupported

if TYPE_CHECKING:
    from sparkcdc.model.events import TableInfo
    from sparkcdc.sink.contract import Sink


@dataclass(frozen=True)
class SinkKind:
    """One kind of sink and what it can do."""

    name: str  # "storage", "mysql", "kafka", "lakehouse"
    schemes: tuple[str, ...]
    # The kind's settings from the URI and the changefeed config; raises a coded error.
    parse: Callable[[str, ReplicaConfig], Any]
    # The sink, from a parsed spec and how it is opened (OpenOptions).
    open: Callable[["SinkSpec", "OpenOptions"], "Sink"]
    # Whether it writes only the columns `sink.column-selectors` keep (TiCDC: MQ and storage sinks).
    column_selectors: bool = False
    # Whether the redo log and syncpoints work with it (TiCDC: MySQL-compatible sinks).
    consistency: bool = False
    # Whether key-changing updates reach it as delete + insert (update_split.py).
    splits_key_updates: Callable[["SinkSpec"], bool] = lambda spec: False
    # Whether a transaction larger than a micro-batch may reach it over several batches.
    splits_large_transactions: Callable[["SinkSpec"], bool] = lambda spec: True
    # bdr-mode: checks that the downstream can take part in bidirectional replication (it marks
    # what the sink writes, the user can write the tables given); None: the kind cannot (TiCDC:
    # only MySQL-compatible sinks).
    check_bdr: Optional[Callable[["SinkSpec", Sequence["TableInfo"]], None]] = None
    # Whether it re-runs the upstream's foreign-key cascades, which the binlog has no rows for
    # (MySQL: sink/mysql/foreign_keys.py); changefeeds to the others warn per affected table.
    reruns_foreign_key_cascades: bool = False


@dataclass(frozen=True)
class OpenOptions:
    """What a changefeed start tells the sink it opens (each kind takes what applies to it)."""

    # MySQL: rows committed at or before it may already be downstream and are written
    # idempotently; a ts at or above anything a previous run may have written.
    replicating_ts: int = 0
    # MySQL: how long a write or DDL is retried in place before it fails, for callers that restart
    # the sink themselves (the changefeed runner); None: the sink's own default.
    retry_seconds: Optional[float] = None
    # Lakehouse: `<namespace>/<id>`, recorded with every table commit.
    changefeed: str = "default/changefeed"
    # MySQL: what tells this changefeed from an earlier one with the same id (its creation time).
    # With it, tables linked by cascading foreign keys are written in binlog order, exactly once,
    # under `<changefeed>@<epoch>`; without it (consumers, `redo apply`) like any other table.
    changefeed_epoch: str = ""


@dataclass(frozen=True)
class SinkSpec:
    """A changefeed's sink, parsed and validated: its kind, the kind's settings (StorageTarget,
    MySQLSinkConfig, KafkaSinkConfig) and the changefeed config they were parsed with."""

    uri: str
    kind: SinkKind
    settings: Any
    config: ReplicaConfig

    @property
    def splits_key_updates(self) -> bool:
        """Whether key-changing updates reach this sink as delete + insert (TiCDC's rule for MQ
        and storage sinks unless output-raw-change-event; MySQL sinks split in their own way)."""
        return self.kind.splits_key_updates(self)

    @property
    def splits_large_transactions(self) -> bool:
        """Whether a transaction larger than a micro-batch may reach this sink over several batches
        (the source's split_transactions). Never with a redo log, whose pieces are cut between
        transactions, nor with syncpoints, which must never see half a transaction downstream: those
        get every transaction in one batch, whatever its size; nor for a sink kind that applies each
        transaction whole (MySQL with transaction-atomicity=table)."""
        if self.config.consistent.level == "eventual" or self.config.enable_sync_point:
            return False
        return self.kind.splits_large_transactions(self)

    @property
    def column_selectors_allowed(self) -> bool:
        return self.kind.column_selectors

    @property
    def reruns_foreign_key_cascades(self) -> bool:
        return self.kind.reruns_foreign_key_cascades

    @property
    def supports_consistency(self) -> bool:
        """Whether the redo log ([consistent]) and syncpoints work with this sink."""
        return self.kind.consistency

    def check_bdr_downstream(self, tables: Sequence["TableInfo"]) -> None:
        """bdr-mode: raise a coded error when the downstream cannot take part (SinkKind.check_bdr)."""
        assert self.kind.check_bdr is not None  # parse_sink_spec refused bdr-mode for this kind
        self.kind.check_bdr(self, tables)

    def open(self, replicating_ts: int = 0, retry_seconds: float | None = None,
             changefeed: str = "default/changefeed", changefeed_epoch: str = "") -> "Sink":
        """The sink (sink/contract.py), opened as OpenOptions describes."""
        return self.kind.open(self, OpenOptions(replicating_ts, retry_seconds, changefeed, changefeed_epoch))


# -- the kinds ----------------------------------------------------------------------------------
def _parse_storage(uri: str, config: ReplicaConfig):
    from sparkcdc.sink.storage.uri import parse_storage_uri

    return parse_storage_uri(uri, config.sink)


def _open_storage(spec: SinkSpec, options: OpenOptions) -> "Sink":
    from sparkcdc.sink.storage.writer import StorageSink

    return StorageSink(spec.settings)


def _parse_mysql(uri: str, config: ReplicaConfig):
    from sparkcdc.sink.mysql.config import parse_mysql_sink_uri

    return parse_mysql_sink_uri(uri, config)


def _open_mysql(spec: SinkSpec, options: OpenOptions) -> "Sink":
    from sparkcdc.sink.mysql.connection import RetryPolicy
    from sparkcdc.sink.mysql.sink import MySQLSink

    identity = f"{options.changefeed}@{options.changefeed_epoch}" if options.changefeed_epoch else ""
    if options.retry_seconds is None:
        return MySQLSink(spec.settings, spec.config, replicating_ts=options.replicating_ts, changefeed=identity)
    return MySQLSink(spec.settings, spec.config, replicating_ts=options.replicating_ts,
                     retry=RetryPolicy(max_elapsed=options.retry_seconds),
                     ddl_retry=RetryPolicy(max_elapsed=options.retry_seconds, max_attempts=20), changefeed=identity)


def _check_mysql_bdr(spec: SinkSpec, tables: Sequence["TableInfo"]) -> None:
    from sparkcdc.sink.mysql.bdr import check_bdr_downstream

    check_bdr_downstream(spec.settings, tables)


def _parse_kafka(uri: str, config: ReplicaConfig):
    from sparkcdc.sink.kafka.config import parse_kafka_sink_uri

    return parse_kafka_sink_uri(uri, config)


def _open_kafka(spec: SinkSpec, options: OpenOptions) -> "Sink":
    from sparkcdc.sink.kafka.sink import KafkaSink

    return KafkaSink(spec.settings, spec.config)


def _parse_lakehouse(uri: str, config: ReplicaConfig):
    from sparkcdc.sink.lakehouse.config import parse_lakehouse_uri

    return parse_lakehouse_uri(uri, config.sink)


def _open_lakehouse(spec: SinkSpec, options: OpenOptions) -> "Sink":
    from sparkcdc.sink.lakehouse import make_lakehouse_sink

    return make_lakehouse_sink(spec.settings, options.changefeed)


SINK_KINDS: tuple[SinkKind, ...] = (
    SinkKind("storage", ("file", "s3", "gcs", "gs", "azblob", "azure", "noop"), _parse_storage, _open_storage,
             column_selectors=True,
             splits_key_updates=lambda spec: not spec.settings.sink.cloud_storage_config.output_raw_change_event),
    SinkKind("mysql", ("mysql", "mysql+ssl", "tidb", "tidb+ssl"), _parse_mysql, _open_mysql, consistency=True,
             splits_large_transactions=lambda spec: spec.settings.transaction_atomicity != "table",
             reruns_foreign_key_cascades=True, check_bdr=_check_mysql_bdr),
    SinkKind("kafka", ("kafka", "kafka+ssl"), _parse_kafka, _open_kafka, column_selectors=True,
             splits_key_updates=lambda spec: not spec.settings.output_raw_change_event),
    # One commit per table per batch holds whole transactions (sink/lakehouse/sink.py).
    SinkKind("lakehouse", ("delta", "delta+file", "delta+s3", "iceberg", "iceberg+file", "iceberg+s3"),
             _parse_lakehouse, _open_lakehouse, splits_large_transactions=lambda spec: False),
)
# TiCDC sinks that sparkcdc does not have; named so the error says "not yet", not "unknown".
# A blackhole:// URI is recognised (its kind is "blackhole") and refused when validated.
_NOT_YET_SCHEMES = ("pulsar", "pulsar+ssl", "pulsar+http", "pulsar+https")
_BLACKHOLE = "blackhole"
_KIND_OF_SCHEME = {scheme: kind for kind in SINK_KINDS for scheme in kind.schemes}


def supported_schemes() -> str:
    return ", ".join([*_KIND_OF_SCHEME, _BLACKHOLE])


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
    if scheme in _NOT_YET_SCHEMES:
        raise ErrSinkUnsupported(
            f"the {scheme}:// sink is not supported yet by sparkcdc; supported schemes: {supported_schemes()}")
    if scheme == _BLACKHOLE:
        return _BLACKHOLE
    kind = _KIND_OF_SCHEME.get(scheme)
    if kind is None:
        raise ErrSinkURIInvalid(f"unknown sink URI scheme {scheme!r}; supported schemes: {supported_schemes()}")
    return kind.name


def parse_sink_spec(sink_uri: str, config: ReplicaConfig) -> SinkSpec:
    """The changefeed's sink, validated with its config; a SparkCDCError names the problem if the
    URI, its parameters, or a setting the sink cannot honour is wrong."""
    name = classify_sink_uri(sink_uri)
    kind = next((kind for kind in SINK_KINDS if kind.name == name), None)
    if not (kind is not None and kind.consistency) and (config.consistent.level == "eventual"
                                                        or config.enable_sync_point):
        feature = "the redo log ([consistent] level = \"eventual\")" if config.consistent.level == "eventual" \
            else "enable-sync-point"
        raise ErrInvalidReplicaConfig(
            f"{feature} works only with MySQL-compatible sinks (mysql://, tidb://), not a {name} sink; "
            "remove it from the changefeed config or use a MySQL sink")
    if config.bdr_mode and (kind is None or kind.check_bdr is None):
        raise ErrSinkURIInvalid(
            f"bdr-mode works only with MySQL sinks (mysql://) whose downstream is the other MariaDB primary, not "
            f"a {name} sink ({mask_sink_uri(sink_uri)}), as in TiCDC; remove bdr-mode from the changefeed config "
            "or use a MySQL sink")
    if kind is None:
        raise ErrSinkUnsupported(
            f"the {name} sink is not supported yet; use a storage sink such as "
            "file:///path?protocol=canal-json or a MySQL sink such as mysql://user:password@host:3306/")
    spec = SinkSpec(sink_uri, kind, kind.parse(sink_uri, config), config)
    if config.sink.column_selectors and not spec.column_selectors_allowed:
        scheme = urlsplit(sink_uri.strip()).scheme.lower()
        raise ErrInvalidReplicaConfig(
            f"`sink.column-selectors` is set but the {scheme}:// sink writes whole rows; column "
            "selectors apply only to MQ and storage sinks, remove them for this sink")
    return spec


def verify_tables(tables: Sequence["TableInfo"], config: ReplicaConfig) -> tuple[list, list]:
    """(eligible, ineligible) among the tables the config's filter rules select (TiCDC's
    VerifyTables), after checking the sink settings that name their columns against every eligible
    table: column selectors, and the columns `[[sink.dispatchers]]` rules hash (EventRouter's
    VerifyTables), so a bad one fails at creation, not mid-stream."""
    from sparkcdc.filter.column_selector import ColumnSelectors
    from sparkcdc.filter.eligibility import classify_tables

    eligible, ineligible = classify_tables(tables, config)
    if config.sink.dispatchers:
        from sparkcdc.sink.kafka.dispatcher import EventRouter

        EventRouter("", config.sink.dispatchers, config.case_sensitive).verify_tables(
            eligible, ColumnSelectors(config.sink.column_selectors, config.case_sensitive))
    return eligible, ineligible
