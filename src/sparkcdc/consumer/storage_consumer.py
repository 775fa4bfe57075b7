"""Replay a storage sink's output into a downstream sink, following TiCDC's storage consumer
(cmd/storage-consumer/main.go; docs: ticdc-storage-consumer-dev-guide).

Each round:
1. Read `metadata` for the storage checkpoint; nothing to do if it has not moved.
2. Database DDLs (`<schema>/meta`) newer than the consumer checkpoint, in version order
   (DROP DATABASE is not replayed, as in TiCDC).
3. Per table, per table version in order: the schema file's DDL if its version lies in
   (consumer checkpoint, storage checkpoint], then the version's `CDC*` files in index order,
   keeping only rows in that range and skipping transactions already applied (replays).
4. Flush the downstream, then the consumer checkpoint becomes the storage checkpoint and is
   saved (`CheckpointStore`: a table in the downstream, or a local file), so a restarted
   consumer resumes there. A crash between the flush and the save replays one round, which the
   downstream writes idempotently (DDL replays count as done).

Tables that existed before the changefeed have a first schema file without a DDL query; the
consumer creates them from the file's columns (`create_table_query`, IF NOT EXISTS) the first
time it sees that file, whatever its version, since the file shows up only with the table's
first rows.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import posixpath
import tempfile
import threading
import time
from dataclasses import replace
from typing import Callable, Mapping, NamedTuple, Optional, Protocol, Sequence

from sparkcdc.config.replica import SinkConfig
from sparkcdc.consumer.storage_reader import (
    _SCHEMA_FILE,
    _checkpoint_ts,
    _list_dirs,
    decoder_for,
    missing_members,
    new_rows_filter,
    open_storage,
    read_bytes,
    renamed_from,
    table_definitions,
    table_files,
    table_members,
    with_members,
)
from sparkcdc.errors import ErrStorageIO
from sparkcdc.model.events import ColumnInfo, DDLEvent, RowChange, TableInfo
from sparkcdc.model.netting import net_changes_per_key
from sparkcdc.observability.progress import Progress
from sparkcdc.schema.parser import quote_identifier
from sparkcdc.upstream.connection import close_quietly
from sparkcdc.config.storage_location import parse_storage_location
from sparkcdc.schema.ddl_types import ACTION_TYPES
from sparkcdc.sink.storage.table_definition import TableDefinition

log = logging.getLogger(__name__)

_ACTION_NAMES: dict[int, str] = {}
for _name, _number in ACTION_TYPES.items():
    _ACTION_NAMES.setdefault(_number, _name)
_DROP_DATABASE = ACTION_TYPES["drop database"]
_DROP_TABLE = ACTION_TYPES["drop table"]
_BINARY_TYPES = ("binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob")


class Downstream(Protocol):
    def write_rows(self, table: TableInfo, rows: Sequence[RowChange]) -> None: ...
    def write_ddl(self, ddl: DDLEvent) -> None: ...
    def flush(self) -> None: ...
    def close(self) -> None: ...


def table_info_from_definition(definition: TableDefinition, known: Optional[TableInfo] = None,
                               read_columns: Sequence = ()) -> TableInfo:
    """The TableInfo a schema file describes; `known` adds the handle key, and enum/set members
    come from `known` or the reader's columns (which carry them across versions)."""
    known_columns = {c.name: c for c in known.columns} if known else {}
    read_elements = {c.name: c.elements for c in read_columns}
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
            elements=(previous.elements if previous else ()) or read_elements.get(raw["ColumnName"], ()),
        ))
    primary = tuple(c.name for c in columns if c.is_primary_key)
    handle = known.handle_key if known is not None and known.handle_key else primary
    return TableInfo(definition.schema, definition.table, 0, tuple(columns), definition.table_version, handle)


# -- tables without a DDL query -----------------------------------------------------------
def _quote_string(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "''") + "'"


# Types whose width in a schema file is a display width or a storage maximum, not part of
# the type a CREATE TABLE needs (INT(11), TEXT(65535), FLOAT(12) would change the meaning).
_WIDTH_FREE_TYPES = frozenset({
    "TINYINT", "SMALLINT", "MEDIUMINT", "INT", "INTEGER", "BIGINT", "YEAR", "FLOAT", "DOUBLE",
    "TINYTEXT", "TEXT", "MEDIUMTEXT", "LONGTEXT", "TINYBLOB", "BLOB", "MEDIUMBLOB", "LONGBLOB",
    "DATE", "JSON", "GEOMETRY",
})
_FRACTIONAL_TYPES = frozenset({"TIME", "DATETIME", "TIMESTAMP"})


def _column_sql(raw: dict, elements: tuple[str, ...], where: str) -> str:
    parts = raw["ColumnType"].split(" ")
    base, modifiers = parts[0].upper(), [p.upper() for p in parts[1:]]
    precision, scale = raw.get("ColumnPrecision"), raw.get("ColumnScale")
    if base in ("ENUM", "SET"):
        if not elements:
            raise ErrStorageIO(
                f"{where} has no DDL query and its {base} column {raw['ColumnName']} lists no members, "
                "so the consumer cannot create the table; create it downstream with the upstream's "
                "definition (SHOW CREATE TABLE), then restart the consumer")
        sql_type = f"{base}({', '.join(_quote_string(e) for e in elements)})"
    elif base == "DECIMAL":
        sql_type = f"DECIMAL({precision or 10},{scale or 0})"
    elif base in _FRACTIONAL_TYPES:
        sql_type = f"{base}({scale})" if scale else base
    elif base in _WIDTH_FREE_TYPES or not precision:
        sql_type = base
    else:  # CHAR, VARCHAR, BINARY, VARBINARY, BIT: the length is part of the type
        sql_type = f"{base}({precision})"
    if modifiers:
        sql_type += " " + " ".join(modifiers)
    nullable = raw.get("ColumnNullable") != "false" and raw.get("ColumnIsPk") != "true"
    if base == "TIMESTAMP":
        # Without NULL/DEFAULT MariaDB gives the first TIMESTAMP column ON UPDATE CURRENT_TIMESTAMP.
        return f"{quote_identifier(raw['ColumnName'])} {sql_type} {'NULL' if nullable else 'NOT NULL DEFAULT 0'}"
    return f"{quote_identifier(raw['ColumnName'])} {sql_type}{'' if nullable else ' NOT NULL'}"


def create_table_query(definition: TableDefinition, known: Optional[TableInfo] = None) -> str:
    """`CREATE TABLE IF NOT EXISTS` from a schema file's columns, for a table that existed
    before the changefeed (its first schema file carries no DDL query).

    Schema files hold no indexes, defaults, charsets or enum members: the primary key comes from
    ColumnIsPk, enum/set members from `known`; strings get the downstream's default charset.
    """
    where = f"{definition.schema}.{definition.table} (schema file version {definition.table_version})"
    elements = {c.name: c.elements for c in known.columns} if known is not None else {}
    lines = [_column_sql(raw, elements.get(raw["ColumnName"], ()), where) for raw in definition.columns]
    primary = [raw["ColumnName"] for raw in definition.columns if raw.get("ColumnIsPk") == "true"]
    if primary:
        lines.append(f"PRIMARY KEY ({', '.join(quote_identifier(n) for n in primary)})")
    return (f"CREATE TABLE IF NOT EXISTS {quote_identifier(definition.table)} (\n  "
            + ",\n  ".join(lines) + "\n)")


def _needs_members(definition: TableDefinition) -> bool:
    return not definition.query and any(
        c["ColumnType"].split(" ")[0].upper() in ("ENUM", "SET") for c in definition.columns)


# -- the consumer checkpoint ---------------------------------------------------------------
class CheckpointStore(Protocol):
    """Where the consumer keeps its checkpoint across restarts."""

    def load(self) -> int: ...
    def save(self, ts: int) -> None: ...


def upstream_identity(upstream_uri: str) -> str:
    """`scheme://bucket/prefix` of a storage URI: one checkpoint per storage root, no secrets."""
    location = parse_storage_location(upstream_uri)
    root = location.root if location.scheme != "file" else os.path.abspath(location.root)
    return f"{location.scheme}://{root}"


class MemoryCheckpointStore:
    """Keeps nothing across restarts (tests, `--once` without a store)."""

    def __init__(self, ts: int = 0):
        self.ts = ts

    def load(self) -> int:
        return self.ts

    def save(self, ts: int) -> None:
        self.ts = ts


class FileCheckpointStore:
    """`{"checkpoint-ts": N, "upstream": ...}` in a local file, replaced atomically."""

    def __init__(self, path: str, upstream: str):
        self.path = os.path.abspath(path)
        self.upstream = upstream

    def load(self) -> int:
        try:
            with open(self.path, encoding="utf-8") as handle:
                saved = json.load(handle)
        except FileNotFoundError:
            return 0
        except ValueError as exc:
            raise ErrStorageIO(f"consumer checkpoint file {self.path} is not JSON ({exc}); "
                               "fix or delete it (deleting replays from the start)") from exc
        if saved.get("upstream") not in (None, self.upstream):
            raise ErrStorageIO(
                f"consumer checkpoint file {self.path} belongs to {saved['upstream']}, not "
                f"{self.upstream}; pass another --checkpoint-file")
        return int(saved.get("checkpoint-ts", 0))

    def save(self, ts: int) -> None:
        directory = os.path.dirname(self.path)
        os.makedirs(directory, exist_ok=True)
        handle, temp = tempfile.mkstemp(prefix=".checkpoint-", dir=directory)
        try:
            with os.fdopen(handle, "w", encoding="utf-8") as out:
                json.dump({"checkpoint-ts": ts, "upstream": self.upstream}, out)
                out.flush()
                os.fsync(out.fileno())
            os.replace(temp, self.path)
        except BaseException:
            if os.path.exists(temp):
                os.unlink(temp)
            raise


CHECKPOINT_DATABASE = "sparkcdc_consumer"
CHECKPOINT_TABLE = "storage_checkpoint"


class MySQLCheckpointStore:
    """One row per storage root in `sparkcdc_consumer.storage_checkpoint` downstream, so the
    checkpoint lives next to the data it describes (written after that data is committed)."""

    def __init__(self, connect: Callable[[], object], upstream: str):
        self._connect = connect
        self._connection = None
        self.upstream = upstream

    def _cursor(self):
        if self._connection is None:
            self._connection = self._connect()
            with self._connection.cursor() as cursor:
                cursor.execute(f"CREATE DATABASE IF NOT EXISTS {CHECKPOINT_DATABASE}")
                cursor.execute(
                    f"CREATE TABLE IF NOT EXISTS {CHECKPOINT_DATABASE}.{CHECKPOINT_TABLE} ("
                    "upstream VARCHAR(700) NOT NULL PRIMARY KEY, checkpoint_ts BIGINT UNSIGNED NOT NULL, "
                    "updated_at TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3) ON UPDATE CURRENT_TIMESTAMP(3))")
        return self._connection.cursor()

    def _run(self, action):
        try:
            with self._cursor() as cursor:
                return action(cursor)
        except Exception:
            self.close()  # reconnect on the next call
            raise

    def load(self) -> int:
        def read(cursor) -> int:
            cursor.execute(f"SELECT checkpoint_ts FROM {CHECKPOINT_DATABASE}.{CHECKPOINT_TABLE} "
                           "WHERE upstream = %s", (self.upstream,))
            row = cursor.fetchone()
            return int(row[0]) if row else 0
        return self._run(read)

    def save(self, ts: int) -> None:
        # GREATEST: a consumer started with an older --start-ts never moves it backwards.
        self._run(lambda cursor: cursor.execute(
            f"INSERT INTO {CHECKPOINT_DATABASE}.{CHECKPOINT_TABLE} (upstream, checkpoint_ts) VALUES (%s, %s) "
            "ON DUPLICATE KEY UPDATE checkpoint_ts = GREATEST(checkpoint_ts, VALUES(checkpoint_ts))",
            (self.upstream, ts)))

    def close(self) -> None:
        close_quietly(self._connection)
        self._connection = None


def _ddl_event(definition: TableDefinition) -> DDLEvent:
    return DDLEvent(definition.table_version, definition.schema, definition.table, definition.query,
                    _ACTION_NAMES.get(definition.type, "unknown"))


class StorageConsumer:
    """Moves a storage sink's output into `downstream`, one round per `sync_once()`."""

    def __init__(self, upstream_uri: str, downstream: Downstream, protocol: str,
                 sink: Optional[SinkConfig] = None, start_ts: int = 0,
                 table_infos: Optional[Mapping[tuple[str, str], TableInfo]] = None,
                 checkpoint_store: Optional[CheckpointStore] = None,
                 downstream_table: Optional[Callable[[str, str], Optional[TableInfo]]] = None):
        """`checkpoint_store` keeps the consumer checkpoint across restarts (the saved one wins
        over an older `start_ts`); `downstream_table` reads a table as it exists downstream,
        for enum/set members that query-less schema files do not carry."""
        decoder_for(protocol)  # an unknown protocol fails here, not in the first round
        self._fs, self._root = open_storage(upstream_uri)
        self._downstream = downstream
        self._protocol = protocol
        self._sink = sink or SinkConfig(protocol=protocol)
        self._table_infos = dict(table_infos or {})
        self._store = checkpoint_store or MemoryCheckpointStore()
        self._downstream_table = downstream_table
        self.checkpoint_ts = max(start_ts, self._store.load())
        self.rows_applied = 0  # row changes written downstream by this consumer (its progress)
        self._applied: dict[tuple[str, str], int] = {}  # newest commit-ts applied per table
        self._created_databases: set[str] = set()
        self._ensured: set[tuple[str, str, int]] = set()  # query-less schema files handled
        # Commit-ts of the RENAMEs that moved each table away, this round.
        self._renamed_away: dict[tuple[str, str], list[int]] = {}

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
        # Every table's versions in one commit-ts order, so a DDL stored under one table (RENAME
        # lives in the new name's directory) runs after the rows and DDLs of older versions of
        # the others (the old name's rows); within a table, versions stay in order. At one
        # commit-ts every DDL (the parts of one multi-table RENAME) runs before any rows.
        steps: list[_Step] = []
        for schema in schemas:
            schema_dir = posixpath.join(self._root, schema)
            for table in _list_dirs(self._fs, schema_dir):
                if table != "meta":
                    steps += self._table_steps(schema, table, lower, upper)
        self._renamed_away = {}
        for step in steps:
            if step.source is not None:
                self._renamed_away.setdefault(step.source, []).append(step.version)
        for step in order_steps(steps):
            step.run()
        self._downstream.flush()
        self._store.save(upper)
        self.checkpoint_ts = upper
        log.info("storage consumer applied changes up to checkpoint %d", upper)
        return upper

    def _create_from_columns(self, definition: TableDefinition, known: Optional[TableInfo]) -> None:
        """Create a table the changefeed found already there (no DDL query to replay); a table
        that exists downstream is left as it is."""
        if definition.schema not in self._created_databases:
            self._downstream.write_ddl(DDLEvent(
                definition.table_version, definition.schema, "",
                f"CREATE DATABASE IF NOT EXISTS {quote_identifier(definition.schema)}", "create database"))
            self._created_databases.add(definition.schema)
        self._downstream.write_ddl(DDLEvent(
            definition.table_version, definition.schema, definition.table,
            create_table_query(definition, known), "create table"))

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
                definitions.append(TableDefinition.from_json(read_bytes(self._fs, path).decode()))
        for definition in sorted(definitions, key=lambda d: d.table_version):
            if definition.query and definition.type != _DROP_DATABASE:
                self._downstream.write_ddl(_ddl_event(definition))

    def _known_table(self, schema: str, table: str, definitions: Mapping[int, TableDefinition]) -> Optional[TableInfo]:
        """What schema files lack: enum/set members (and a handle key) from `table_infos`, else,
        for a table with query-less schema files (it existed before the changefeed), from the
        table as it exists downstream now."""
        known = self._table_infos.get((schema, table))
        if known is None and self._downstream_table is not None and any(
                _needs_members(d) for d in definitions.values()):
            known = self._downstream_table(schema, table)
        return known

    def _table_steps(self, schema: str, table: str, lower: int, upper: int) -> list["_Step"]:
        """For each of the table's versions up to `upper`: a step for the version's DDL (or the
        table's creation from a query-less schema file), one for its rows."""
        table_dir = posixpath.join(self._root, schema, table)
        definitions = table_definitions(self._fs, table_dir)
        known = self._known_table(schema, table, definitions)
        files_by_version: dict[int, list] = {}
        # A RENAME's schema file lists no enum/set members: they come from the old name's files.
        members_before = lambda s, t, ts: table_members(self._fs, self._root, s, t, ts, self._known_table)  # noqa: E731
        for data_file in table_files(self._fs, table_dir, self._protocol, known, members_before):
            files_by_version.setdefault(data_file.version, []).append(data_file)
        self._applied.setdefault((schema, table), lower)
        steps = []
        for version in sorted(set(definitions) | set(files_by_version)):
            if version > upper:
                continue
            definition = definitions.get(version)
            if definition is not None:
                steps.append(_Step(version, 0, (schema, table), renamed_from(definition),
                                   lambda definition=definition: self._apply_definition(definition, definitions, known, lower),
                                   definition.type == _DROP_TABLE, not definition.query))
            if version in files_by_version:
                steps.append(_Step(version, 1, (schema, table), None,
                                   lambda version=version: self._apply_rows(schema, table, version,
                                                                            files_by_version[version], known, upper)))
        return steps

    def _apply_definition(self, definition: TableDefinition, definitions: Mapping[int, TableDefinition],
                          known: Optional[TableInfo], lower: int) -> None:
        """A schema file's DDL if it is newer than the consumer checkpoint; a query-less one
        creates its table."""
        schema, table, version = definition.schema, definition.table, definition.table_version
        if definition.query:
            if lower < version:
                self._downstream.write_ddl(_ddl_event(definition))
        elif definition.columns and (schema, table, version) not in self._ensured:
            # A query-less schema file carries the table's old version, and it appears when
            # the table's first rows are flushed, often after the consumer checkpoint has
            # passed that version: ensure the table once per process, unless a later DDL
            # (already applied) has moved the table on or renamed it away.
            later_ddls = list(definitions) + self._renamed_away.get((schema, table), [])
            if not any(version < later <= lower for later in later_ddls):
                self._create_from_columns(definition, known)
            self._ensured.add((schema, table, version))

    def _apply_rows(self, schema: str, table: str, version: int, data_files,
                    known: Optional[TableInfo], upper: int) -> None:
        """The rows of one table version's data files in (applied commit-ts, upper]."""
        decode = decoder_for(self._protocol)
        applied = self._applied[(schema, table)]
        if self._downstream_table is not None and any(missing_members(f.columns) for f in data_files):
            # Members storage does not give (the old name of a renamed table existed before the
            # changefeed and is gone downstream): read the table downstream, after its DDL ran.
            self._downstream.flush()
            downstream = self._downstream_table(schema, table)
            data_files = [replace(f, columns=with_members(f.columns, downstream)) for f in data_files]
        applied_before = applied  # by an earlier round
        for data_file in data_files:
            info = table_info_from_definition(data_file.definition, known, data_file.columns)
            text = read_bytes(self._fs, data_file.path).decode("utf-8")
            rows: list[RowChange] = []
            newest = applied
            # Rows applied already (or replays), or past the storage checkpoint, are dropped;
            # a file may continue the newest transaction (new_rows_filter). Rows a replay of it
            # repeats hit duplicate keys, which the MySQL sink then writes idempotently.
            keep = new_rows_filter(applied, upper, applied_before)
            for change in _decoded(decode(text, list(data_file.columns), self._sink, keep), data_file.path):
                commit_ts = change.commit_ts
                if commit_ts is None:
                    commit_ts = version  # csv without include-commit-ts: no range to filter on
                else:
                    newest = max(newest, commit_ts)
                seq = rows[-1].seq + 1 if rows and rows[-1].commit_ts == commit_ts else 0
                before = tuple(change.before.get(n) for n in info.column_names) if change.before else None
                after = tuple(change.after.get(n) for n in info.column_names) if change.after else None
                op = change.op if not (change.op == "update" and before is None) else "insert"
                rows.append(RowChange(commit_ts, schema, table, op, before=before, after=after, seq=seq))
            if rows:
                # One change per key per commit-ts, as the sink takes transactions. Rows without a
                # commit-ts of their own (canal-json without the TiDB extension: milliseconds; csv
                # without include-commit-ts: the table version) share one across transactions.
                self._downstream.write_rows(info, net_changes_per_key(info, rows))
                self.rows_applied += len(rows)
            applied = newest
        self._applied[(schema, table)] = applied


class _Step(NamedTuple):
    """One thing a round does: a table version's DDL (phase 0) or its rows (phase 1)."""

    version: int
    phase: int
    table: tuple[str, str]
    source: Optional[tuple[str, str]]  # the old name, for a RENAME
    run: Callable[[], None]
    drops: bool = False  # a DROP TABLE
    ensures: bool = False  # a schema file without a query: it only makes sure the table exists


def order_steps(steps: Sequence[_Step]) -> list[_Step]:
    """Steps by commit-ts, DDLs before rows; DDLs of one commit-ts in `_rename_order`, and the
    schema files without a query last (the other table of an EXCHANGE or CONVERT PARTITION has
    one at the DDL's commit-ts: creating that table first would make the DDL fail)."""
    ordered: list[_Step] = []
    pending = sorted(steps, key=lambda s: (s.version, s.phase, s.table))
    history = _table_history(steps)
    while pending:
        head = pending[0]
        group = [s for s in pending if (s.version, s.phase) == (head.version, head.phase)]
        pending = pending[len(group):]
        if head.phase == 0:
            group = sorted(_rename_order(group, history), key=lambda s: s.ensures)
        ordered += group
    return ordered


_MAX_RENAMES_TO_ORDER = 7
_History = dict[tuple[str, str], list[tuple[int, bool]]]


def _table_history(steps: Sequence[_Step]) -> _History:
    """(commit-ts, the DDL made the name exist) for every DDL that made a name exist (a schema
    file in its directory) or not (DROP TABLE, a RENAME away)."""
    history: _History = {}
    for step in steps:
        if step.phase == 0:
            history.setdefault(step.table, []).append((step.version, not step.drops))
            if step.source is not None:
                history.setdefault(step.source, []).append((step.version, False))
    return history


def _existed_before(history: _History, name: tuple[str, str], version: int) -> Optional[bool]:
    """Whether `name` existed just before commit-ts `version`, as far as storage tells (None: no
    DDL of it before). A name made and unmade at one commit-ts (a swap's temporary, or a swapped
    table) ends that statement as it began."""
    state: Optional[bool] = None
    events = sorted(e for e in history.get(name, ()) if e[0] < version)
    for at in sorted({v for v, _ in events}):
        kinds = {made for v, made in events if v == at}
        if len(kinds) == 1:
            state = kinds.pop()
    return state


def _rename_order(ddls: list[_Step], history: _History) -> list[_Step]:
    """DDLs of one commit-ts are the parts of one statement (`RENAME TABLE a TO b, c TO a`, or a
    swap `a TO tmp, b TO a, tmp TO b`), stored in separate directories without their order.
    Renames go in an order that is a valid sequence (each source exists, each target does not)
    given which names existed before, as far as their DDLs tell; else the order that has the
    most names exist before the statement (a swap's temporary name is new)."""
    renames = [s for s in ddls if s.source is not None]
    others = [s for s in ddls if s.source is None]
    if len(renames) < 2 or len(renames) > _MAX_RENAMES_TO_ORDER:
        return others + renames
    version = renames[0].version
    known = {name: _existed_before(history, name, version)
             for step in renames for name in (step.table, step.source)}
    best, best_existing = renames, -1
    for order in itertools.permutations(renames):
        existing = _names_existing_before(order, known)
        if existing is not None and existing > best_existing:
            best, best_existing = list(order), existing
    return others + best


def _names_existing_before(renames: Sequence[_Step], known: Mapping[tuple[str, str], Optional[bool]]) -> Optional[int]:
    """How many names must exist before `renames` run in this order, or None if the order is not
    a valid sequence of renames given what is `known` to have existed."""
    exists: dict[tuple[str, str], bool] = {}
    initially: dict[tuple[str, str], bool] = {}
    for step in renames:
        for name, needed in ((step.source, True), (step.table, False)):
            if name not in exists:
                if known.get(name) not in (None, needed):
                    return None
                exists[name] = initially[name] = needed
        if not exists[step.source] or exists[step.table]:
            return None
        exists[step.source], exists[step.table] = False, True
    return sum(initially.values())


def _decoded(changes, path: str):
    """`changes`, with the data file named in a decoding error."""
    try:
        yield from changes
    except ErrStorageIO as exc:
        raise ErrStorageIO(f"{path}: {exc}") from exc


def run_consumer(consumer: StorageConsumer, interval_seconds: float, once: bool = False,
                 stop: Optional[threading.Event] = None, progress: Optional[Progress] = None) -> int:
    """Run rounds until stopped (or one round with `once`); return the consumer checkpoint.
    `progress` is advanced by the rows each round applied."""
    counted = [consumer.rows_applied]

    def round_done(ts: int) -> None:
        if progress is not None:
            progress.advance(consumer.rows_applied - counted[0])
            counted[0] = consumer.rows_applied
        log.debug("round done at %.1fs, checkpoint %d", time.monotonic() - started, ts)

    started = time.monotonic()
    if once:
        reached = consumer.sync_once()
        round_done(reached)
        return reached
    stop = stop or threading.Event()
    consumer.run(interval_seconds, stop, round_done)
    return consumer.checkpoint_ts
