"""Replay a storage sink's output into a downstream sink, following TiCDC's storage consumer
(cmd/storage-consumer/main.go; docs: ticdc-storage-consumer-dev-guide).

Each round:
1. Read `metadata` for the storage checkpoint; nothing to do if it has not moved.
2. Database DDLs (`<schema>/meta`) newer than the consumer checkpoint, in version order
   (DROP DATABASE is not replayed, as in TiCDC).
3. Per table, per table version in order: the schema file's DDL if its version lies in
   (consumer checkpoint, storage checkpoint], then the version's `CDC*` files in index order,
   keeping only rows in that range and skipping transactions already applied (replays).
4. Flush the downstream, then the consumer checkpoint becomes the storage checkpoint.

The consumer checkpoint lives in memory; after a restart everything up to the storage
checkpoint is replayed, so the downstream writes those transactions idempotently.
"""

from __future__ import annotations

import logging
import posixpath
import threading
import time
from typing import Callable, Mapping, Optional, Protocol, Sequence

from sparkcdc.config.replica import SinkConfig
from sparkcdc.consumer.storage_reader import (
    _SCHEMA_FILE,
    _checkpoint_ts,
    _list_dirs,
    decoder_for,
    open_storage,
    table_definitions,
    table_files,
)
from sparkcdc.model.events import ColumnInfo, DDLEvent, RowChange, TableInfo
from sparkcdc.sink.storage.table_definition import ACTION_TYPES, TableDefinition

log = logging.getLogger(__name__)

_ACTION_NAMES: dict[int, str] = {}
for _name, _number in ACTION_TYPES.items():
    _ACTION_NAMES.setdefault(_number, _name)
_DROP_DATABASE = ACTION_TYPES["drop database"]
_BINARY_TYPES = ("binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob")


class Downstream(Protocol):
    def write_rows(self, table: TableInfo, rows: Sequence[RowChange]) -> None: ...
    def write_ddl(self, ddl: DDLEvent) -> None: ...
    def flush(self) -> None: ...
    def close(self) -> None: ...


def table_info_from_definition(definition: TableDefinition, known: Optional[TableInfo] = None) -> TableInfo:
    """The TableInfo a schema file describes; `known` adds enum/set members and the handle key."""
    known_columns = {c.name: c for c in known.columns} if known else {}
    columns = []
    for raw in definition.columns:
        parts = raw["ColumnType"].lower().split(" ")
        base = parts[0]
        precision = raw.get("ColumnPrecision")
        scale = raw.get("ColumnScale")
        previous = known_columns.get(raw["ColumnName"])
        columns.append(ColumnInfo(
            raw["ColumnName"], base, unsigned="unsigned" in parts,
            nullable=raw.get("ColumnNullable") != "false", is_primary_key=raw.get("ColumnIsPk") == "true",
            charset="binary" if base in _BINARY_TYPES else None,
            length=int(precision) if precision and base not in ("decimal", "float", "double") else None,
            precision=int(precision) if precision and base == "decimal" else None,
            scale=int(scale) if scale else None,
            elements=previous.elements if previous else (),
        ))
    primary = tuple(c.name for c in columns if c.is_primary_key)
    handle = known.handle_key if known is not None and known.handle_key else primary
    return TableInfo(definition.schema, definition.table, 0, tuple(columns), definition.table_version, handle)


def _ddl_event(definition: TableDefinition) -> DDLEvent:
    return DDLEvent(definition.table_version, definition.schema, definition.table, definition.query,
                    _ACTION_NAMES.get(definition.type, "unknown"))


class StorageConsumer:
    """Moves a storage sink's output into `downstream`, one round per `sync_once()`."""

    def __init__(self, upstream_uri: str, downstream: Downstream, protocol: str,
                 sink: Optional[SinkConfig] = None, start_ts: int = 0,
                 table_infos: Optional[Mapping[tuple[str, str], TableInfo]] = None):
        decoder_for(protocol)  # an unknown protocol fails here, not in the first round
        self._fs, self._root = open_storage(upstream_uri)
        self._downstream = downstream
        self._protocol = protocol
        self._sink = sink or SinkConfig(protocol=protocol)
        self._table_infos = dict(table_infos or {})
        self.checkpoint_ts = start_ts
        self._applied: dict[tuple[str, str], int] = {}  # newest commit-ts applied per table

    def storage_checkpoint(self) -> int:
        return _checkpoint_ts(self._fs, self._root)

    def sync_once(self) -> int:
        """Apply everything up to the current storage checkpoint; return the new checkpoint."""
        upper = self.storage_checkpoint()
        if upper <= self.checkpoint_ts:
            return self.checkpoint_ts
        lower = self.checkpoint_ts
        schemas = [s for s in _list_dirs(self._fs, self._root)]
        for schema in schemas:
            self._database_ddls(schema, lower, upper)
        for schema in schemas:
            schema_dir = posixpath.join(self._root, schema)
            for table in _list_dirs(self._fs, schema_dir):
                if table != "meta":
                    self._sync_table(schema, table, lower, upper)
        self._downstream.flush()
        self.checkpoint_ts = upper
        log.info("storage consumer applied changes up to checkpoint %d", upper)
        return upper

    def run(self, interval_seconds: float, stop: threading.Event,
            on_round: Callable[[int], None] = lambda ts: None) -> None:
        """Poll `metadata` every `interval_seconds` until `stop` is set."""
        while not stop.is_set():
            on_round(self.sync_once())
            stop.wait(interval_seconds)

    # -- one round ----------------------------------------------------------------------
    def _database_ddls(self, schema: str, lower: int, upper: int) -> None:
        meta = posixpath.join(self._root, schema, "meta")
        if not self._fs.exists(meta):
            return
        definitions = []
        for path in self._fs.ls(meta, detail=False):
            match = _SCHEMA_FILE.match(posixpath.basename(path))
            if match and lower < int(match.group(1)) <= upper:
                with self._fs.open(path, "rb") as handle:
                    definitions.append(TableDefinition.from_json(handle.read().decode()))
        for definition in sorted(definitions, key=lambda d: d.table_version):
            if definition.query and definition.type != _DROP_DATABASE:
                self._downstream.write_ddl(_ddl_event(definition))

    def _sync_table(self, schema: str, table: str, lower: int, upper: int) -> None:
        table_dir = posixpath.join(self._root, schema, table)
        known = self._table_infos.get((schema, table))
        definitions = table_definitions(self._fs, table_dir)
        files_by_version: dict[int, list] = {}
        for data_file in table_files(self._fs, table_dir, self._protocol, known):
            files_by_version.setdefault(data_file.version, []).append(data_file)
        decode = decoder_for(self._protocol)
        applied = self._applied.get((schema, table), lower)
        for version in sorted(set(definitions) | set(files_by_version)):
            if version > upper:
                break
            definition = definitions.get(version)
            if definition is not None and lower < version and definition.query:
                self._downstream.write_ddl(_ddl_event(definition))
            for data_file in files_by_version.get(version, ()):
                info = table_info_from_definition(data_file.definition, known)
                with self._fs.open(data_file.path, "rb") as handle:
                    text = handle.read().decode("utf-8")
                rows: list[RowChange] = []
                newest = applied
                for change in decode(text, list(data_file.columns), self._sink):
                    commit_ts = change.commit_ts
                    if commit_ts is None:
                        commit_ts = version  # csv without include-commit-ts: no range to filter on
                    elif commit_ts <= applied or commit_ts > upper:
                        continue  # applied already (or a replay), or past the storage checkpoint
                    else:
                        newest = max(newest, commit_ts)
                    seq = rows[-1].seq + 1 if rows and rows[-1].commit_ts == commit_ts else 0
                    before = tuple(change.before.get(n) for n in info.column_names) if change.before else None
                    after = tuple(change.after.get(n) for n in info.column_names) if change.after else None
                    op = change.op if not (change.op == "update" and before is None) else "insert"
                    rows.append(RowChange(commit_ts, schema, table, op, before=before, after=after, seq=seq))
                if rows:
                    self._downstream.write_rows(info, rows)
                applied = newest
        self._applied[(schema, table)] = applied


def run_consumer(consumer: StorageConsumer, interval_seconds: float, once: bool = False,
                 stop: Optional[threading.Event] = None) -> int:
    """Run rounds until stopped (or one round with `once`); return the consumer checkpoint."""
    if once:
        return consumer.sync_once()
    stop = stop or threading.Event()
    started = time.monotonic()
    consumer.run(interval_seconds, stop,
                 lambda ts: log.debug("round done at %.1fs, checkpoint %d", time.monotonic() - started, ts))
    return consumer.checkpoint_ts
