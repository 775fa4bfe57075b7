"""The storage sink: TiCDC's cloud-storage layout (cdc/sink/dmlsink/cloudstorage, path.go).

    <root>/<schema>/<table>/<tableVersion>[/<date>]/CDC<index>.<ext>
    <root>/<schema>/<table>/<tableVersion>[/<date>]/meta/CDC.index   (name of the newest file)
    <root>/<schema>/<table>/meta/schema_<tableVersion>_<crc10>.json
    <root>/<schema>/meta/schema_<version>_<crc10>.json                (database DDL)
    <root>/metadata                                                   {"checkpoint-ts":...}

Files are write-once and appear atomically: on an object store one PUT (or one multipart
upload, which becomes visible only when completed), on file:// a hidden temp file renamed into
place. The two files rewritten again and again, CDC.index at each flush and `metadata` at each
checkpoint, trade names on file:// with a hidden twin `.<name>.swap` holding the new content
(`exchange_names`), so a rewrite neither frees nor allocates an inode. Rows are buffered per
table version; a buffer becomes a file on flush(), or as soon as it reaches file-size after a
whole transaction, so a transaction never spans two files. On file:// a buffer past SPILL_BYTES
goes on in its hidden temp file, renamed into place at that moment.
`metadata` is written only after every buffered row is in a completed data file.
"""

from __future__ import annotations

import ctypes
import itertools
import json
import logging
import os
import posixpath
import re
import sys
import threading
import time
import uuid
from bisect import bisect_left
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from itertools import accumulate
from typing import TYPE_CHECKING, Callable, Optional, Sequence, Union

from sparkcdc.config.replica import SinkConfig
from sparkcdc.errors import ErrStorageIO, ErrStorageUnavailable, SparkCDCError
from sparkcdc.model.events import DDLEvent, RowChange, TableInfo
from sparkcdc.model.tso import physical_ms
from sparkcdc.sink.codec import encodes_arrow, make_file_encoder
from sparkcdc.sink.contract import Sink
from sparkcdc.sink.storage.table_definition import TableDefinition
from sparkcdc.sink.storage.uri import StorageTarget, parse_storage_uri

if TYPE_CHECKING:  # write_arrow's callers hand it Arrow arrays; importing the sink needs no pyarrow
    import pyarrow as pa

INDEX_FILE = "meta/CDC.index"
METADATA_FILE = "metadata"
_DATE_FORMATS = {"year": "%Y", "month": "%Y-%m", "day": "%Y-%m-%d"}
# A data file under a day directory (TiCDC's RemoveExpiredFiles pathRE).
_DATED_DATA_FILE = re.compile(r"/(\d{4}-\d{2}-\d{2})/CDC[0-9]+\.\S+$")
_LOG = logging.getLogger(__name__)


def data_file_name(index: int, extension: str, width: int) -> str:
    return f"CDC{index:0{width}d}.{extension}"


def _load_renameat2() -> Optional[Callable[..., int]]:
    if not sys.platform.startswith("linux"):
        return None
    try:
        function = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):  # a C library older than glibc 2.28
        return None
    function.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    function.restype = ctypes.c_int
    return function


_RENAMEAT2 = _load_renameat2()
_AT_FDCWD, _RENAME_EXCHANGE = -100, 2  # linux/fcntl.h, linux/fs.h


def exchange_names(first: str, second: str) -> bool:
    """Swap the files at two paths in one step (renameat2's RENAME_EXCHANGE): a reader of either
    path sees one file or the other, never none. False, with nothing changed, when `second` does
    not exist or the system or its file system cannot swap: the caller renames instead."""
    if _RENAMEAT2 is None:
        return False
    return _RENAMEAT2(_AT_FDCWD, os.fsencode(first), _AT_FDCWD, os.fsencode(second), _RENAME_EXCHANGE) == 0


def _open_in_directory(path: str, flags: int = 0) -> int:
    """A descriptor of the local file `path` opened for writing, made if missing (`flags` adds
    O_TRUNC and the like), making its directory only when it is not there yet."""
    flags |= os.O_WRONLY | os.O_CREAT
    try:
        return os.open(path, flags, 0o666)
    except FileNotFoundError:
        os.makedirs(posixpath.dirname(path), exist_ok=True)
        return os.open(path, flags, 0o666)


def _rename_into_directory(source: str, path: str) -> None:
    """os.replace of the local file `source` to `path`, making `path`'s directory only when it is
    not there yet (`_open_in_directory`'s twin for a rename)."""
    try:
        os.replace(source, path)
    except FileNotFoundError:
        if not os.path.exists(source):
            raise
        os.makedirs(posixpath.dirname(path), exist_ok=True)
        os.replace(source, path)


def _iov_max() -> int:
    try:
        return max(1, os.sysconf("SC_IOV_MAX"))
    except (AttributeError, ValueError, OSError):
        return 1024


_IOV_MAX = _iov_max()


# Bytes one writev call hands the kernel at most. On this project's benchmark machine (a Linux
# 6.18 guest) a 33 MB data file written by one writev took 0.26-0.59 s, nearly all of it the
# kernel's copy into the page cache (copy_folio_from_iter_atomic), and 0.012-0.018 s in 1 MiB
# calls (docs/benchmarks.md); why, was not found (a write that large gets the largest folios).
WRITE_CALL_BYTES = 1 << 20


def write_parts(handle: int, parts: Sequence[bytes]) -> None:
    """Write `parts` in order to the descriptor `handle` without joining them into one copy (a
    data file holds one part per transaction: a batch of 54,000 single-row transactions took
    0.13-0.24 s through a buffered file's write per part, 0.03 s by writev), each writev taking
    at most IOV_MAX pieces and WRITE_CALL_BYTES bytes. A short write goes on from the first byte
    not written."""
    group: list[memoryview] = []
    size = 0
    for part in parts:
        view = memoryview(part)
        while len(view):
            piece = view[:WRITE_CALL_BYTES - size]
            group.append(piece)
            size += len(piece)
            view = view[len(piece):]
            if size >= WRITE_CALL_BYTES or len(group) >= _IOV_MAX:
                _write_group(handle, group)
                group, size = [], 0
    if group:
        _write_group(handle, group)


def _write_group(handle: int, group: list[memoryview]) -> None:
    """writev `group` whole, going on after a short write."""
    first = 0
    while first < len(group):
        written = os.writev(handle, group[first:])
        if written == 0:
            raise OSError(f"writev wrote nothing of {sum(map(len, group[first:]))} bytes")
        while first < len(group) and written >= len(group[first]):
            written -= len(group[first])
            first += 1
        if written:
            group[first] = group[first][written:]


# A local buffer holding this many bytes moves them to a hidden temp file in its directory, which
# becomes the data file on flush: a catch-up batch's encoded rows (~100 MB for 250,000 sysbench
# changes in canal-json) were held whole until its checkpoint, beside the batch they came from.
# Buffers below it (thousands of tables with a few rows each) stay in memory: one file, one write.
SPILL_BYTES = 4 << 20


# Errors that retrying cannot fix: the path is a file, access is denied, the bucket is missing,
# the request is malformed. Anything else (connection refused, timeouts, 5xx) may pass by itself.
_PERMANENT_STORAGE_ERRORS = (PermissionError, FileNotFoundError, NotADirectoryError, IsADirectoryError,
                             FileExistsError, ValueError, TypeError)


def storage_error(message: str, exc: BaseException) -> SparkCDCError:
    """ErrStorageIO for a permanent failure, ErrStorageUnavailable (retried) for a transient one."""
    if isinstance(exc, _PERMANENT_STORAGE_ERRORS):
        return ErrStorageIO(message)
    return ErrStorageUnavailable(message)


@dataclass
class _Buffer:
    table: TableInfo
    chunks: list[bytes] = field(default_factory=list)  # encoded transactions not yet in a file
    size: int = 0  # bytes of the buffered rows, the spilled ones included
    held: int = 0  # bytes of `chunks`
    spill: str = ""  # on file://, the hidden temp file holding the rows before `chunks` (SPILL_BYTES)


@dataclass
class _FileIndex:
    date: str
    index: int


class StorageSink(Sink):
    """Writes row changes, schema files and the checkpoint of one changefeed to storage."""

    def __init__(self, target: StorageTarget | str, sink: Optional[SinkConfig] = None,
                 clock: Callable[[], float] = time.time):
        """`target`: the parsed sink URI (sink.registry's SinkSpec.settings), or the URI to parse
        with the changefeed's `sink` config."""
        self.target = target if isinstance(target, StorageTarget) else parse_storage_uri(target, sink or SinkConfig())
        self.sink = self.target.sink
        self._clock = clock
        self._fs = self.target.filesystem()
        self._root = self.target.root
        self._encoder = make_file_encoder(self.sink.protocol, self.sink, clock)
        self._extension = self._encoder.file_extension
        self._buffers: dict[tuple[str, str, int], _Buffer] = {}
        self._dir_versions: dict[tuple[str, str, int], int] = {}
        self._file_indexes: dict[tuple[str, str, int], _FileIndex] = {}
        self._upload_options = self.target.location.upload_options(
            self.sink.cloud_storage_config.flush_concurrency)
        self._last_cleanup_day: Optional[str] = None
        self._closed = False
        self._written = 0  # bytes of every file written (flush writes files from several threads)
        self._written_lock = threading.Lock()
        # Temp file names: this writer's random tag and a count (uuid4 per file cost ~3% of a
        # batch of thousands of small files).
        self._temp_tag = uuid.uuid4().hex[:16]
        self._temp_numbers = itertools.count()
        # flush-interval: rows wait in the buffers across batches until the oldest has waited
        # this long (TiCDC's); 0 writes every batch's files at its checkpoint.
        self._flush_interval = self.target.flush_interval_seconds
        self._held_since: Optional[float] = None  # the clock when the buffers last got rows after a flush

    # -- paths and IO ---------------------------------------------------------------------
    def _path(self, relative: str) -> str:
        return posixpath.join(self._root, relative)

    def _write_atomic(self, relative: str, data: Union[bytes, Sequence[bytes]], rewrite: bool = False) -> None:
        """Write the file whole or not at all. `data` may be the file's parts in order: a local
        file gets them by writev (`write_parts`), so a data file of file-size bytes is never copied whole.
        `rewrite`: a small file the sink replaces again and again (`_swap_into_place`)."""
        path = self._path(relative)
        parts = [data] if isinstance(data, bytes) else data
        try:
            if self.target.is_local and rewrite:
                self._swap_into_place(path, b"".join(parts))
            elif self.target.is_local:
                # Plain os calls, and makedirs only for a directory not there yet: with thousands
                # of tables a batch writes thousands of files, and fsspec's makedirs, open and mv
                # were most of that time.
                directory, name = posixpath.split(path)
                temp = posixpath.join(directory, f".{name}.{self._temp_tag}{next(self._temp_numbers)}.tmp")
                self._write_local(temp, parts, os.O_TRUNC)
                os.replace(temp, path)
            else:
                # One PUT or one multipart upload: the object appears whole or not at all.
                self._fs.pipe_file(path, b"".join(parts), **self._upload_options)
            with self._written_lock:
                self._written += sum(map(len, parts))
        except SparkCDCError:
            raise
        except Exception as exc:  # noqa: BLE001 - every backend raises its own kinds
            raise storage_error(
                f"cannot write {self.target.scheme}://{path}: {exc}; check the sink URI, the "
                "bucket and its permissions", exc) from exc

    @staticmethod
    def _write_local(path: str, parts: Sequence[bytes], flags: int) -> None:
        handle = _open_in_directory(path, flags)
        try:
            write_parts(handle, parts)
        finally:
            os.close(handle)

    def _spill(self, buffer: _Buffer) -> None:
        """Move a local buffer's chunks to the end of its hidden temp file (SPILL_BYTES), made
        with the file's header in the directory of the buffer's table version and today's date."""
        parts, flags = buffer.chunks, os.O_APPEND
        if not buffer.spill:
            directory = self._data_dir(buffer.table, self._check_or_write_schema(buffer.table), self._date())
            buffer.spill = self._path(f"{directory}/.CDC.{self._temp_tag}{next(self._temp_numbers)}.tmp")
            parts, flags = [self._encoder.header(buffer.table), *buffer.chunks], os.O_TRUNC
        try:
            self._write_local(buffer.spill, parts, flags)
        except Exception as exc:  # noqa: BLE001
            raise storage_error(f"cannot write {buffer.spill}: {exc}; check the sink URI and the "
                                "directory's permissions and free space", exc) from exc
        buffer.chunks, buffer.held = [], 0

    def _place_spilled(self, buffer: _Buffer, relative: str) -> None:
        """Make the spilled buffer the data file `relative`: its last chunks, then a rename (the
        date directory may have changed since the spill began: a rename across it)."""
        if buffer.chunks:
            self._spill(buffer)
        path = self._path(relative)
        try:
            _rename_into_directory(buffer.spill, path)
        except Exception as exc:  # noqa: BLE001
            raise storage_error(f"cannot write {self.target.scheme}://{path}: {exc}; check the sink URI "
                                "and the directory's permissions", exc) from exc
        with self._written_lock:
            self._written += len(self._encoder.header(buffer.table)) + buffer.size

    @staticmethod
    def _drop_spill(buffer: _Buffer) -> None:
        """Remove the temp file of a buffer dropped unwritten."""
        if buffer.spill:
            try:
                os.unlink(buffer.spill)
            except OSError:
                pass

    @staticmethod
    def _swap_into_place(path: str, data: bytes) -> None:
        """Replace a local file by writing `data` over its hidden twin `.<name>.swap`, kept from
        the last rewrite, and trading the two names (`exchange_names`). A rename over the file, as
        for any other file, frees the old file's inode and allocates the temp file's: on ext4
        each allocation then steps over the inodes freed in the last half minute, and each rename
        over a file starts writing the new one out (auto_da_alloc). With a thousand tables a
        batch rewrites a thousand CDC.index files, and that was most of the batch's flush."""
        directory, name = posixpath.split(path)
        swap = posixpath.join(directory, f".{name}.swap")
        handle = _open_in_directory(swap)
        try:
            write_parts(handle, [data])
            if os.fstat(handle).st_size != len(data):
                os.ftruncate(handle, len(data))
        finally:
            os.close(handle)
        if not exchange_names(swap, path):
            os.replace(swap, path)  # the first write, or a system that cannot swap names

    def _read(self, relative: str) -> Optional[bytes]:
        path = self._path(relative)
        try:
            if self.target.is_local:
                with open(path, "rb") as handle:
                    return handle.read()
            # One GET: open() would fail if the object is replaced between its HEAD and GET.
            return self._fs.cat_file(path)
        except FileNotFoundError:
            return None
        except Exception as exc:  # noqa: BLE001
            raise storage_error(f"cannot read {self.target.scheme}://{path}: {exc}", exc) from exc

    def _exists(self, path: str) -> bool:
        return os.path.exists(path) if self.target.is_local else self._fs.exists(path)

    def _size(self, path: str) -> int:
        """The file's size in bytes, -1 when there is none."""
        try:
            return os.path.getsize(path) if self.target.is_local else self._fs.size(path)
        except FileNotFoundError:
            return -1

    def _date(self) -> str:
        fmt = _DATE_FORMATS.get(self.sink.date_separator)
        return time.strftime(fmt, time.localtime(self._clock())) if fmt else ""

    # -- schema files ---------------------------------------------------------------------
    def _check_or_write_schema(self, table: TableInfo) -> int:
        """The version directory for rows of this table version (TiCDC's CheckOrWriteSchema)."""
        key = (table.schema, table.table, table.version)
        if key in self._dir_versions:
            return self._dir_versions[key]
        output_ids = self.sink.cloud_storage_config.output_column_id
        definition = TableDefinition.from_table_info(table, table.version, output_column_id=output_ids)
        schema_path = definition.file_path()
        version = table.version
        if not self._exists(self._path(schema_path)):
            meta_dir = self._path(f"{table.schema}/{table.table}/meta")
            suffix = f"_{definition.checksum():010d}.json"
            existing = self._fs.glob(posixpath.join(meta_dir, "schema_*.json")) if self._exists(meta_dir) else []
            same_schema = [
                int(posixpath.basename(p)[len("schema_"):-len(suffix)])
                for p in existing
                if p.endswith(suffix)
            ]
            if same_schema:
                # An identical schema is already stored: TiCDC keeps using its version dir.
                version = max(same_schema)
            else:
                self._write_atomic(schema_path, definition.to_json().encode())
        self._dir_versions[key] = version
        return version

    def write_ddl(self, ddl: DDLEvent) -> None:
        """Write the schema file of the table version (or database) the DDL creates."""
        output_ids = self.sink.cloud_storage_config.output_column_id
        info = ddl.table_info or ddl.pre_table_info
        if ddl.table and info is not None and (info.schema, info.table) != (ddl.schema, ddl.table):
            # A part of `RENAME TABLE a TO tmp, b TO a, tmp TO b`: `tmp` is gone when the statement
            # ends, so only a's old definition is known; its schema file still belongs under the
            # new name (TiCDC's TableInfo of each part carries the new name).
            info = replace(info, schema=ddl.schema, table=ddl.table)
        if ddl.table and info is not None:
            definition = TableDefinition.from_table_info(
                info, ddl.commit_ts, ddl.query, TableDefinition.from_ddl(ddl).type, output_ids
            )
        else:
            definition = TableDefinition.from_ddl(ddl, output_ids)
        self._write_atomic(definition.file_path(), definition.to_json().encode())
        if ddl.table and ddl.table_info is not None:
            self._dir_versions[(ddl.schema, ddl.table, ddl.commit_ts)] = ddl.commit_ts
        partner = ddl.extra.get("partner_table_info")
        if partner:
            # EXCHANGE PARTITION / CONVERT PARTITION: the other table's new version, without a
            # query (the DDL runs once, from the altered table's file), as TiCDC's storage DDL sink
            # writes for EXCHANGE; its rows after the DDL go to this version's directory.
            info = TableInfo.from_json(partner)
            other = TableDefinition.from_table_info(info, ddl.commit_ts, output_column_id=output_ids)
            self._write_atomic(other.file_path(), other.to_json().encode())
            self._dir_versions[(info.schema, info.table, ddl.commit_ts)] = ddl.commit_ts

    # -- data files -----------------------------------------------------------------------
    def _data_dir(self, table: TableInfo, version: int, date: str) -> str:
        parts = [table.schema, table.table, str(version)]
        if date:
            parts.append(date)
        return "/".join(parts)

    def _next_index(self, key: tuple[str, str, int], directory: str, date: str) -> int:
        state = self._file_indexes.get(key)
        if state is None or state.date != date:
            state = _FileIndex(date, self._last_index_on_storage(directory))
            self._file_indexes[key] = state
        state.index += 1
        # Never overwrite a file another process left behind.
        while self._exists(self._path(f"{directory}/{data_file_name(state.index, self._extension, self.sink.file_index_digit)}")):
            state.index += 1
        return state.index

    def _last_index_on_storage(self, directory: str) -> int:
        raw = self._read(f"{directory}/{INDEX_FILE}")
        if raw is None:
            return 0
        name = raw.decode().strip()
        digits = name[3:].split(".", 1)[0]
        if not name.startswith("CDC") or not digits.isdigit():
            raise ErrStorageIO(f"{directory}/{INDEX_FILE} holds {name!r}, not a data file name")
        last = int(digits)
        if self._size(self._path(f"{directory}/{name}")) > 0:
            return last
        return last - 1  # the named file never got written: reuse its number

    def _write_buffer(self, key: tuple[str, str, int]) -> None:
        buffer = self._buffers.pop(key, None)
        if buffer is None or not (buffer.chunks or buffer.spill):
            return
        try:
            table = buffer.table
            version = self._check_or_write_schema(table)
            date = self._date()
            directory = self._data_dir(table, version, date)
            index = self._next_index(key, directory, date)
            name = data_file_name(index, self._extension, self.sink.file_index_digit)
            if buffer.spill:
                self._place_spilled(buffer, f"{directory}/{name}")
            else:
                self._write_atomic(f"{directory}/{name}", [self._encoder.header(table), *buffer.chunks])
            self._write_atomic(f"{directory}/{INDEX_FILE}", (name + "\n").encode(), rewrite=True)
        except BaseException:
            self._drop_spill(buffer)  # the buffer is gone: its batch fails and is written again
            raise

    @property
    def bytes_written(self) -> int:
        with self._written_lock:
            return self._written

    def write_rows(self, table: TableInfo, rows: Sequence[RowChange]) -> None:
        """Buffer rows (ordered by commit_ts, seq; whole transactions) of one table version."""
        encoded, start = [], 0
        for end in range(1, len(rows) + 1):
            if end < len(rows) and rows[end].commit_ts == rows[start].commit_ts:
                continue
            encoded.append(self._encoder.encode_rows(table, rows[start:end]))
            start = end
        self._append_transactions(table, encoded)

    @property
    def accepts_arrow(self) -> bool:
        """Whether write_arrow can take rows: the protocol's encoder encodes Arrow columns."""
        return encodes_arrow(self.sink.protocol)

    def write_arrow(self, table: TableInfo, commit_ts: pa.Int64Array, ops: pa.StringArray,
                    before: pa.ListArray, after: pa.ListArray) -> None:
        """write_rows for rows as Arrow columns (one table version's whole transactions in
        (commit_ts, seq) order, already netted and split): the same files, bytes and index."""
        encoded = self._encoder.encode_arrow(table, commit_ts, ops, before, after)
        self._append_transactions(table, [transaction for _, transaction in encoded])

    def _append_transactions(self, table: TableInfo, encoded: list[bytes]) -> None:
        """Buffer encoded transactions in order; the buffer becomes a file right after the
        transaction that makes it reach file-size, so a transaction never spans two files. The
        running sizes find those transactions without a Python call per transaction (a run of
        single-row transactions was ~1 µs each that way)."""
        key = (table.schema, table.table, table.version)
        file_size = self.sink.cloud_storage_config.file_size
        if self._held_since is None and encoded:
            self._held_since = self._clock()
        ends = list(accumulate(map(len, encoded)))  # bytes up to and including each transaction
        start = 0
        while start < len(encoded):
            buffer = self._buffers.setdefault(key, _Buffer(table))
            buffer.table = table
            before = ends[start - 1] if start else 0  # bytes of encoded[:start], already buffered
            # The first transaction after which the buffer holds file-size bytes, if any.
            full = bisect_left(ends, file_size - buffer.size + before, lo=start)
            stop = min(full + 1, len(encoded))
            buffer.chunks.extend(encoded[start:stop])
            buffer.size += ends[stop - 1] - before
            buffer.held += ends[stop - 1] - before
            if full < len(encoded):
                self._write_buffer(key)
            elif buffer.held >= SPILL_BYTES and self.target.is_local:
                try:
                    self._spill(buffer)
                except BaseException:
                    # Its temp file may end inside a transaction: the buffer goes whole. No
                    # checkpoint covers its rows, so the changefeed hands them over again.
                    self._buffers.pop(key, None)
                    self._drop_spill(buffer)
                    raise
            start = stop

    @property
    def holds_rows(self) -> bool:
        """With flush-interval set, rows wait across batches (write_checkpoint)."""
        return self._flush_interval > 0

    def flush(self) -> None:
        """Write every buffered row into complete data files: to an object store worker-count
        tables at a time, as each upload waits on the network; on file:// one after the other in
        this thread, as each write is a few system calls and more threads only took turns on the
        GIL and the file system's locks (1,000 tables: 0.24 s in one thread, 0.51 s in 16)."""
        self._held_since = None
        keys = list(self._buffers)
        workers = 1 if self.target.is_local else min(self.sink.cloud_storage_config.worker_count, len(keys))
        if workers <= 1:
            for key in keys:
                self._write_buffer(key)
            return
        # Each table version has its own buffer, index and directory: no shared state to lock.
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="storage-sink") as pool:
            for future in [pool.submit(self._write_buffer, key) for key in keys]:
                future.result()

    # -- checkpoint -----------------------------------------------------------------------
    def write_checkpoint(self, ts: int) -> int:
        """Record the storage checkpoint; it never moves backwards. Returns `ts`, or 0 when
        flush-interval holds the buffered rows: none has waited that long yet.

        Buffered rows are flushed first, so `metadata` never covers data that is not durable.
        """
        if self._held_since is not None and 0 <= self._clock() - self._held_since < self._flush_interval:
            return 0
        self.flush()
        self._cleanup_once_a_day(ts)
        raw = self._read(METADATA_FILE)
        if raw:
            try:
                current = int(json.loads(raw).get("checkpoint-ts", 0))
            except (ValueError, AttributeError):
                current = 0
            if current >= ts:
                return ts
        self._write_atomic(METADATA_FILE, ('{"checkpoint-ts":%d}' % ts).encode(), rewrite=True)
        return ts

    # -- file-expiration-days -------------------------------------------------------------
    def cleanup_expired_files(self, checkpoint_ts: int) -> int:
        """Delete data files in day directories older than file-expiration-days before the
        checkpoint's time (TiCDC's RemoveExpiredFiles); returns how many were deleted.

        Only with date-separator=day; schema files, index files and metadata stay.
        """
        days = self.sink.cloud_storage_config.file_expiration_days
        if self.sink.date_separator != "day" or days <= 0:
            return 0
        expired_before = time.strftime(
            "%Y-%m-%d", time.localtime(physical_ms(checkpoint_ts) / 1000 - days * 86400))
        try:
            found = self._fs.find(self._root) if self._fs.exists(self._root) else []
        except Exception as exc:  # noqa: BLE001
            raise storage_error(f"cannot list {self.target.scheme}://{self._root}: {exc}", exc) from exc
        expired = []
        for path in found:
            match = _DATED_DATA_FILE.search("/" + posixpath.relpath(path, self._root.rstrip("/")))
            if match and match.group(1) < expired_before:
                expired.append(path)
        if expired:
            try:
                self._fs.rm(expired)
            except Exception as exc:  # noqa: BLE001
                raise ErrStorageIO(f"cannot delete expired files under "
                                   f"{self.target.scheme}://{self._root}: {exc}") from exc
            _LOG.info("storage sink removed %d data files dated before %s", len(expired), expired_before)
        return len(expired)

    def _cleanup_once_a_day(self, checkpoint_ts: int) -> None:
        # file-cleanup-cron-spec defaults to daily; run at the first checkpoint of each day.
        today = time.strftime("%Y-%m-%d", time.localtime(self._clock()))
        if self._last_cleanup_day != today:
            self.cleanup_expired_files(checkpoint_ts)
            self._last_cleanup_day = today

    def close(self) -> None:
        """Flush the buffers, except rows flush-interval holds: no checkpoint covers them, so the
        changefeed hands them over again when it resumes, and writing them now would only make
        files that repeat them."""
        if not self._closed:
            if self.holds_rows:
                for buffer in self._buffers.values():
                    self._drop_spill(buffer)
                self._buffers.clear()
                self._held_since = None
            else:
                self.flush()
            self._closed = True
