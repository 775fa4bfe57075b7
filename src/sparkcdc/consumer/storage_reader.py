"""Rebuild tables from a storage sink's output, following TiCDC's storage consumer
(docs: ticdc-storage-consumer-dev-guide; cmd/storage-consumer/main.go).

1. Read `<root>/metadata` for the storage checkpoint.
2. Per table, walk table versions in order with their schema files.
3. Replay `CDC*` files in index order, skipping rows committed after the checkpoint and
   transactions already applied (delivery is at-least-once, so files may repeat rows).

Values come back in the canonical text form of `sparkcdc.model.events`. `root` is a local
path or any storage sink URI (s3://, gcs://, azblob://, file://) with its credentials.
"""

from __future__ import annotations

import base64
import json
import posixpath
import re
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import Callable, Iterator, Mapping, Optional

from sparkcdc.config.replica import SinkConfig
from sparkcdc.errors import ErrSinkUnknownProtocol, ErrStorageIO
from sparkcdc.model.events import TableInfo
from sparkcdc.model.tso import LOGICAL_BITS
from sparkcdc.schema.parser import DDLParseError, parse
from sparkcdc.config.storage_location import parse_storage_location
from sparkcdc.sink.storage.table_definition import TableDefinition

Row = dict[str, Optional[str]]
Tables = dict[tuple[str, str], dict[tuple, Row]]
Members = Mapping[str, tuple[str, ...]]  # enum/set members by column name
# (schema, table, commit-ts) -> members of that table just before the commit-ts
MembersBefore = Callable[[str, str, int], Members]
# (schema, table, its schema files) -> what the caller knows of the table (members, handle key)
KnownTable = Callable[[str, str, Mapping[int, TableDefinition]], Optional[TableInfo]]

_SCHEMA_FILE = re.compile(r"^schema_(\d+)_(\d{10})\.json$")
_EXTENSIONS = {"canal-json": "json", "csv": "csv"}
_BINARY_TYPES = ("BINARY", "VARBINARY", "TINYBLOB", "BLOB", "MEDIUMBLOB", "LONGBLOB")


@dataclass
class _Change:
    """One decoded row change: op in insert/update/delete, images keyed by column name."""

    op: str
    commit_ts: Optional[int]
    before: Optional[Row]
    after: Optional[Row]


@dataclass(frozen=True)
class _Column:
    name: str
    type: str  # TiCDC's ColumnType, e.g. "INT UNSIGNED", "VARBINARY", "ENUM"
    is_pk: bool
    elements: tuple[str, ...] = ()

    @property
    def base(self) -> str:
        return self.type.split(" ")[0]

    @property
    def lacks_members(self) -> bool:
        """An ENUM/SET column whose members no schema file, query or table definition gave."""
        return self.base in ("ENUM", "SET") and not self.elements


def open_storage(root: str):
    """(fsspec file system, root path inside it) for a local path or a storage URI."""
    location = parse_storage_location(root)
    return location.filesystem(), location.root


def read_bytes(fs, path: str) -> bytes:
    """A whole object in one GET. `fs.open` would check the ETag it saw first and fail with
    FileExpired when the sink replaces the object in between (metadata, CDC.index)."""
    return fs.cat_file(path)


def _checkpoint_ts(fs, root: str) -> int:
    try:
        raw = read_bytes(fs, posixpath.join(root, "metadata"))
    except FileNotFoundError:
        return 0
    return int(json.loads(raw or b"{}").get("checkpoint-ts", 0))


def checkpoint_ts(root: str) -> int:
    """The storage checkpoint in `<root>/metadata` (0 when there is none yet)."""
    fs, path = open_storage(root)
    return _checkpoint_ts(fs, path)


# -- schema -----------------------------------------------------------------------------
def _elements_from_query(query: str, column: str) -> tuple[str, ...]:
    """Enum/set members from the DDL text, since schema files do not list them."""
    pattern = rf"`?{re.escape(column)}`?\s+(?:enum|set)\s*\(((?:\s*'(?:[^']|'')*'\s*,?)*)\)"
    match = re.search(pattern, query, re.IGNORECASE)
    if not match:
        return ()
    return tuple(m.replace("''", "'") for m in re.findall(r"'((?:[^']|'')*)'", match.group(1)))


def _columns(definition: TableDefinition, known: Optional[TableInfo],
             inherited: Optional[Members] = None) -> list[_Column]:
    """Columns of one schema file. Enum/set members: from `known`, else this version's DDL,
    else an earlier version's (`inherited`: an ALTER that adds another column does not
    repeat the members of the columns it leaves alone)."""
    known_elements = {c.name: c.elements for c in known.columns} if known else {}
    inherited = inherited or {}
    result = []
    for raw in definition.columns:
        name = raw["ColumnName"]
        column_type = raw["ColumnType"]
        elements: tuple[str, ...] = ()
        if column_type.split(" ")[0] in ("ENUM", "SET"):
            elements = (known_elements.get(name) or _elements_from_query(definition.query, name)
                        or inherited.get(name, ()))
        result.append(_Column(name, column_type, raw.get("ColumnIsPk") == "true", elements))
    return result


def _parsed_query(definition: TableDefinition):
    if not definition.query or not definition.table or not re.match(
            r"\s*(RENAME|ALTER|CREATE)\b", definition.query, re.IGNORECASE):
        return None
    try:
        return parse(definition.query, definition.schema)
    except (DDLParseError, ValueError):
        return None


def renamed_from(definition: TableDefinition) -> Optional[tuple[str, str]]:
    """The old name of the table a `RENAME TABLE` (or `ALTER TABLE ... RENAME TO`) schema file
    is about. Unqualified names are in the schema file's database, where the consumer runs the
    query."""
    parsed = _parsed_query(definition)
    if parsed is not None and parsed.renames_tables:
        for old, new in parsed.rename_pairs:
            if (new.schema, new.table) == (definition.schema, definition.table):
                return old.schema, old.table
    return None


def source_table(definition: TableDefinition) -> Optional[tuple[str, str]]:
    """The table this schema file's table was made from by its DDL: the old name of a RENAME,
    the table of `CREATE TABLE ... LIKE`. Their schema files list no enum/set members (TiCDC's
    TableCol has none) and their queries name no types."""
    parsed = _parsed_query(definition)
    if parsed is not None and parsed.like is not None:
        return parsed.like.schema, parsed.like.table
    return renamed_from(definition)


def _columns_by_version(definitions: Mapping[int, TableDefinition], known: Optional[TableInfo],
                        members_before: Optional[MembersBefore]) -> dict[int, tuple[_Column, ...]]:
    """Columns of each schema file, enum/set members carried from version to version (oldest
    first) and taken over from the source table at a RENAME or CREATE ... LIKE."""
    result: dict[int, tuple[_Column, ...]] = {}
    members: Members = {}
    for version in sorted(definitions):
        definition = definitions[version]
        source = source_table(definition) if members_before is not None else None
        if source is not None:
            members = members_before(source[0], source[1], version)
        result[version] = tuple(_columns(definition, known, members))
        members = {c.name: c.elements for c in result[version] if c.elements}
    return result


def table_members(fs, root: str, schema: str, table: str, before: int,
                  known_table: Optional[KnownTable] = None) -> dict[str, tuple[str, ...]]:
    """Enum/set members of `schema.table` just before commit-ts `before`, from its schema files
    under `root` (following its own renames back); `known_table` supplies what query-less schema
    files lack."""
    return _members_before(fs, root, schema, table, before, known_table, frozenset())


def _members_before(fs, root: str, schema: str, table: str, before: int,
                    known_table: Optional[KnownTable], visiting: frozenset) -> dict[str, tuple[str, ...]]:
    if (schema, table, before) in visiting:
        return {}  # a cycle of renames at one commit-ts; no order to follow
    definitions = _schema_definitions(fs, posixpath.join(root, schema, table))
    # The newest version before the DDL; a table that exists only since this commit-ts was made
    # by an earlier part of the same statement (RENAME a TO tmp, b TO a, tmp TO b).
    earlier = [v for v in definitions if v < before] or [v for v in definitions if v == before]
    if not earlier:
        return {}
    upto = max(earlier)
    definitions = {v: d for v, d in definitions.items() if v <= upto}
    visiting = visiting | {(schema, table, before)}
    known = known_table(schema, table, definitions) if known_table is not None else None
    columns = _columns_by_version(
        definitions, known,
        lambda s, t, v: _members_before(fs, root, s, t, v, known_table, visiting))[upto]
    return {c.name: c.elements for c in columns if c.elements}


def with_members(columns: tuple[_Column, ...], known: Optional[TableInfo]) -> tuple[_Column, ...]:
    """`columns` with the enum/set members they lack taken from `known` (a table definition
    read elsewhere, e.g. downstream)."""
    if known is None:
        return columns
    elements = {c.name: c.elements for c in known.columns}
    return tuple(replace(c, elements=elements.get(c.name, ())) if c.lacks_members
                 else c for c in columns)


def missing_members(columns: tuple[_Column, ...]) -> bool:
    return any(c.lacks_members for c in columns)


# -- value conversion -------------------------------------------------------------------
def _float_canonical(text: str) -> str:
    number = Decimal(text)
    if number.is_zero():
        return "-0" if text.startswith("-") else "0"
    return format(number.normalize(), "f")


def _csv_value(column: _Column, text: Optional[str], csv) -> Optional[str]:
    if text is None:
        return None
    if column.base in _BINARY_TYPES:
        raw = bytes.fromhex(text) if csv.binary_encoding_method == "hex" else base64.b64decode(text)
        return raw.decode("latin-1")
    if column.base in ("FLOAT", "DOUBLE"):
        return _float_canonical(text)
    return text


def _canal_value(column: _Column, text: Optional[str]) -> Optional[str]:
    if text is None:
        return None
    if column.lacks_members and text != "0":
        raise ErrStorageIO(
            f"column {column.name} is {column.base} but its members are unknown: no schema file or "
            "DDL query of the table (or of the table it was renamed from) lists them; pass table_infos, "
            "or for `sparkcdc consumer storage` create the table downstream with the upstream's "
            "definition (SHOW CREATE TABLE) and restart the consumer"
        )
    if column.base == "ENUM":
        index = int(text)
        return "" if index == 0 else column.elements[index - 1]
    if column.base == "SET":
        mask = int(text)
        return ",".join(e for i, e in enumerate(column.elements) if mask & (1 << i))
    return text


# -- decoding ---------------------------------------------------------------------------
def _csv_records(text: str, csv, terminator: str) -> Iterator[list[Optional[str]]]:
    """Split TiCDC CSV into records; an unquoted null string is NULL."""
    delimiter, quote, null = csv.delimiter, csv.quote, csv.null
    i, n = 0, len(text)
    while i < n:
        fields: list[Optional[str]] = []
        while True:
            if quote and text.startswith(quote, i):
                i += len(quote)
                parts = []
                while True:
                    j = text.find(quote, i)
                    if j < 0:
                        raise ErrStorageIO("unterminated quoted CSV field")
                    parts.append(text[i:j])
                    i = j + len(quote)
                    if text.startswith(quote, i):
                        parts.append(quote)
                        i += len(quote)
                        continue
                    break
                fields.append("".join(parts))
            else:
                ends = [p for p in (text.find(delimiter, i), text.find(terminator, i)) if p >= 0]
                j = min(ends) if ends else n
                raw = text[i:j]
                fields.append(None if raw == null else raw)
                i = j
            if text.startswith(delimiter, i):
                i += len(delimiter)
                continue
            if text.startswith(terminator, i):
                i += len(terminator)
            break
        yield fields


def _decode_csv(text: str, columns: list[_Column], sink: SinkConfig,
                keep: Optional[Callable[[int], bool]] = None) -> Iterator[_Change]:
    csv = sink.csv
    records = list(_csv_records(text, csv, sink.terminator))
    if csv.output_field_header and records and records[0] and records[0][0] == "ticdc-meta$operation":
        records = records[1:]
    meta = 3 + csv.include_commit_ts + csv.output_old_value + csv.output_handle_key
    pending_update_delete: Optional[_Change] = None
    for record in records:
        op = record[0]
        commit_ts = int(record[3]) if csv.include_commit_ts else None
        if keep is not None and commit_ts is not None and not keep(commit_ts):
            continue
        is_update = csv.output_old_value and record[3 + csv.include_commit_ts] == "true"
        values = {
            c.name: _csv_value(c, v, csv) for c, v in zip(columns, record[meta:])
        }
        if op == "D" and is_update:
            pending_update_delete = _Change("update", commit_ts, values, None)
            continue
        if op == "I" and is_update and pending_update_delete is not None:
            pending_update_delete.after = values
            yield pending_update_delete
            pending_update_delete = None
            continue
        if op == "I":
            yield _Change("insert", commit_ts, None, values)
        elif op == "U":
            yield _Change("update", commit_ts, None, values)
        elif op == "D":
            yield _Change("delete", commit_ts, values, None)
        else:
            raise ErrStorageIO(f"unknown CSV operation {op!r}")


def _decode_canal_json(text: str, columns: list[_Column], sink: SinkConfig,
                       keep: Optional[Callable[[int], bool]] = None) -> Iterator[_Change]:
    by_name = {c.name: c for c in columns}

    def convert(image: Optional[dict]) -> Optional[Row]:
        if image is None:
            return None
        return {k: _canal_value(by_name[k], v) if k in by_name else v for k, v in image.items()}

    for line in text.split(sink.terminator):
        if not line.strip():
            continue
        message = json.loads(line)
        if message.get("isDdl") or message.get("type") not in ("INSERT", "UPDATE", "DELETE"):
            continue
        extension = message.get("_tidb") or {}
        commit_ts = extension.get("commitTs")
        if commit_ts is None and "es" in message:
            commit_ts = int(message["es"]) << LOGICAL_BITS  # only millisecond precision
        if keep is not None and commit_ts is not None and not keep(commit_ts):
            continue  # not converted: an applied row needs no enum members
        data = convert((message.get("data") or [None])[0])
        old = convert((message.get("old") or [None])[0])
        kind = message["type"]
        if kind == "INSERT":
            yield _Change("insert", commit_ts, None, data)
        elif kind == "DELETE":
            yield _Change("delete", commit_ts, data, None)
        else:
            before = dict(data or {})
            before.update(old or {})  # `old` may hold only the changed columns
            yield _Change("update", commit_ts, before, data)


# -- layout -----------------------------------------------------------------------------
def _list_dirs(fs, path: str) -> list[str]:
    if not fs.exists(path):
        return []
    return sorted(posixpath.basename(p["name"].rstrip("/")) for p in fs.ls(path, detail=True)
                  if p["type"] == "directory")


def _schema_definitions(fs, table_dir: str) -> dict[int, TableDefinition]:
    meta = posixpath.join(table_dir, "meta")
    result: dict[int, TableDefinition] = {}
    if not fs.exists(meta):
        return result
    for path in fs.ls(meta, detail=False):
        match = _SCHEMA_FILE.match(posixpath.basename(path))
        if match:
            result[int(match.group(1))] = TableDefinition.from_json(read_bytes(fs, path).decode())
    return result


def _data_files(fs, version_dir: str, extension: str) -> list[str]:
    """CDC files of one table version in order: by date/partition dir, then index."""
    pattern = re.compile(rf"^CDC(\d+)\.{extension}$")
    found = []
    for path in fs.find(version_dir):
        relative = posixpath.relpath(path, version_dir)
        directory, name = posixpath.split(relative)
        match = pattern.match(name)
        if match and "meta" not in directory.split("/"):
            found.append((directory, int(match.group(1)), path))
    return [path for _, _, path in sorted(found)]


def _handle_key(columns: list[_Column], known: Optional[TableInfo]) -> tuple[str, ...]:
    if known is not None and known.handle_key:
        return known.handle_key
    pk = tuple(c.name for c in columns if c.is_pk)
    return pk or tuple(c.name for c in columns)


@dataclass(frozen=True)
class TableFile:
    """One data file of a table, with what is needed to decode it; files come in replay order."""

    path: str
    version: int
    definition: TableDefinition
    columns: tuple[_Column, ...]
    key_columns: tuple[str, ...]


def decoder_for(protocol: str):
    """decode(text, columns, sink[, keep]) -> changes, for canal-json or csv; `keep(commit_ts)`
    drops rows before their values are converted."""
    if protocol not in _EXTENSIONS:
        raise ErrSinkUnknownProtocol(f"cannot read protocol {protocol!r}; use canal-json or csv")
    return _decode_csv if protocol == "csv" else _decode_canal_json


def table_files(fs, table_dir: str, protocol: str, known: Optional[TableInfo] = None,
                members_before: Optional[MembersBefore] = None) -> list[TableFile]:
    """Data files of one table, table versions in order and files in index order within each.
    `members_before(schema, table, ts)` gives the enum/set members of a table a RENAME (or
    CREATE ... LIKE) made this one from (`table_members`)."""
    extension = _EXTENSIONS.get(protocol)
    if extension is None:
        raise ErrSinkUnknownProtocol(f"cannot read protocol {protocol!r}; use canal-json or csv")
    definitions = _schema_definitions(fs, table_dir)
    columns_by_version = _columns_by_version(definitions, known, members_before)
    versions = sorted(int(v) for v in _list_dirs(fs, table_dir) if v.isdigit())
    result = []
    for version in versions:
        usable = [v for v in definitions if v <= version]
        if not usable:
            raise ErrStorageIO(f"{table_dir}/{version} has data but no schema file")
        definition = definitions[max(usable)]
        columns = columns_by_version[max(usable)]
        key_columns = _handle_key(list(columns), known)
        for path in _data_files(fs, posixpath.join(table_dir, str(version)), extension):
            result.append(TableFile(path, version, definition, columns, key_columns))
    return result


def table_definitions(fs, table_dir: str) -> dict[int, TableDefinition]:
    """Schema files of one table by table version."""
    return _schema_definitions(fs, table_dir)


def new_rows_filter(newest_applied: int, upper: int, applied_before: int = -1) -> Callable[[int], bool]:
    """`keep(commit_ts)` for the rows of the next data file, in file order: rows up to `upper`
    (the storage checkpoint) and after `newest_applied` (of the files before), so replays are
    dropped; but a file that starts with that newest transaction continues it (a transaction
    larger than a micro-batch spans files, one per piece), so its rows are kept too. Rows at or
    below `applied_before` (an earlier round's) are dropped in any case."""
    first: list[int] = []

    def keep(ts: int) -> bool:
        if not first:
            first.append(ts)
        after = newest_applied <= ts if first[0] == newest_applied else newest_applied < ts
        return after and applied_before < ts <= upper

    return keep


def rebuild_tables(
    root: str,
    protocol: str,
    sink: Optional[SinkConfig] = None,
    table_infos: Optional[Mapping[tuple[str, str], TableInfo]] = None,
    as_of_ts: Optional[int] = None,
) -> Tables:
    """(schema, table) -> {handle key tuple -> row} as of the storage checkpoint (or as_of_ts,
    if earlier).

    `table_infos` optionally supplies what schema files lack: enum/set members (else parsed
    from the DDL query, or taken from the table a RENAME came from) and a non-PK handle key
    (else the PK, else all columns). Rows stay under the table directory they were written
    to: DDLs are not replayed (a renamed table's older rows are under its old name).
    """
    decode = decoder_for(protocol)
    sink = sink or SinkConfig(protocol=protocol)
    fs, root = open_storage(root)
    checkpoint = _checkpoint_ts(fs, root)
    if as_of_ts is not None:
        checkpoint = min(checkpoint, as_of_ts)
    table_infos = table_infos or {}
    known_table: KnownTable = lambda schema, table, _definitions: table_infos.get((schema, table))
    members_before: MembersBefore = lambda schema, table, ts: table_members(fs, root, schema, table, ts, known_table)
    result: Tables = {}
    for schema in _list_dirs(fs, root):
        schema_dir = posixpath.join(root, schema)
        for table in _list_dirs(fs, schema_dir):
            if table == "meta":
                continue
            rows = result.setdefault((schema, table), {})
            applied_upto = -1  # commit-ts of the newest transaction already applied
            known = table_infos.get((schema, table))
            for data_file in table_files(fs, posixpath.join(schema_dir, table), protocol, known, members_before):
                text = read_bytes(fs, data_file.path).decode("utf-8")
                newest = applied_upto
                keep = new_rows_filter(applied_upto, checkpoint)
                for change in decode(text, list(data_file.columns), sink, keep):
                    ts = change.commit_ts
                    if ts is not None:
                        newest = max(newest, ts)
                    _apply(rows, change, data_file.key_columns)
                applied_upto = newest
    return result


def _apply(rows: dict[tuple, Row], change: _Change, key_columns: tuple[str, ...]) -> None:
    def key(image: Row) -> tuple:
        return tuple(image.get(c) for c in key_columns)

    if change.before is not None:
        rows.pop(key(change.before), None)
    if change.after is not None:
        if change.op == "update" and change.before is None:
            rows.pop(key(change.after), None)  # csv without old value: an upsert
        rows[key(change.after)] = dict(change.after)
