"""Planning the binlog source's micro-batches on the driver: offsets, pacing and partitions.

Offsets are commit-ts values: `{"ts": N}`. A micro-batch is every transaction with
commit-ts in (start, end], where `end` never passes the upstream's resolved-ts and a DDL is
always the last transaction of its batch, so every batch has one schema per table and the
sink can run the DDL as a barrier after the batch's rows.

A transaction larger than max-batch-bytes is not one batch: the puller records cut points in
it (`TxnRecord.pieces`), and an offset `{"ts": T, "piece": k}` means everything up to T - 1
plus the first k pieces of T (`BatchOffset`). Rows of piece k have seq `k << 32 | row`, so
(commit_ts, seq) order holds across the batches. A changefeed that must apply a transaction
whole (MySQL transaction-atomicity=table, a redo log, syncpoints) gets it whole
(`split_transactions=False`, from the sink's `SinkSpec.splits_large_transactions`).

A bdr-mode changefeed (docs/bidirectional-replication.md) never reads the transactions the index
marks `skip_replication`: a BDR peer's MySQL sink wrote them, so they came from where this
changefeed sends its changes. They end a binlog range as a DDL does, so the executors decode
contiguous ranges without them, and they cost a batch nothing; the batch bounds, hence the
checkpoint, still move over them.

Planning only reads the transaction index the capture's puller persists. A batch's partitions
are transaction-aligned binlog ranges (`RangePartition`), each decoded on an executor with its
own replication connection and server_id, the first of them carrying the batch's range marker
(`MarkerPartition`: the batch's bounds as checkpoint-ts values); a batch with no range to read
(an idle upstream's, a DDL's, a bdr-mode batch of marked transactions) is its marker alone.
Each partition carries everything it needs, and the same (start, end) always plans the same
partitions, so Spark's replay of an uncommitted batch reads identical data. The bounds are
checkpoint-ts values: a batch that ends inside transaction T ends at T - 1 for the sink, so the
checkpoint never passes a transaction until its last piece is downstream, and a restart replays
it from its start (duplicates, never gaps).

Executors unpickle the partitions, so this module imports nothing the read tasks do not need
(the transaction index and the table filter only under TYPE_CHECKING or on first use).
"""

from __future__ import annotations

import base64
import io
import logging
import os
import pickle
import threading
import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Callable, Iterator, Mapping, Optional, Sequence

from pyspark.sql.datasource import InputPartition

from sparkcdc.model.events import TableInfo
from sparkcdc.upstream.connection import UpstreamConfig, split_password, with_password
from sparkcdc.upstream.range_reader import BinlogRange, PackedTables
from sparkcdc.upstream.snapshot_reader import ChunkRead
from sparkcdc.upstream.switchover import source_server

if TYPE_CHECKING:  # the driver-side planning modules stay out of the executors' imports
    from sparkcdc.model.position import BinlogPosition
    from sparkcdc.upstream.txn_index import TxnIndex, TxnRecord, TxnSize

# The binlog bytes one micro-batch may span. A batch is all-or-nothing: its checkpoint moves only
# when all of it is downstream. After a failover the new capture starts at the checkpoint with a
# backlog; one 64 MB batch took minutes on a loaded 2-core machine (and was lost whole when that
# capture died too), while 8 MB batches move the checkpoint every few seconds at ~1 s overhead each.
DEFAULT_MAX_BATCH_BYTES = 8 << 20
# While a changefeed catches up (the previous batch was cut by size), its batches may span this
# many times max-batch-bytes: besides its rows, a micro-batch costs ~0.25 s (a Spark job of two
# tasks, the offset log), a third of an 8 MB batch's time. The first batch after a (re)start, and
# batches of a large transaction's pieces (whose memory max-batch-bytes bounds), stay at 1x.
CATCH_UP_BATCH_FACTOR = 4
# An idle changefeed's checkpoint-only batches run at most this often (BatchPacer), however short
# the trigger interval: the idle checkpoint lag stays within about this plus one batch. At 0.5 s, a
# 500ms trigger keeps the idle lag's p95 at 0.73 s for 0.15 cores (1 s: p95 1.18-1.26 s, 0.10
# cores; docs/benchmarks.md); the default 1s trigger runs them once a second.
IDLE_BATCH_SECONDS = 0.5
DEFAULT_BATCH_INTERVAL_MS = 1000

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RangePartition(InputPartition):
    """A stretch of binlog to decode on an executor; the batch's first one also yields its range
    marker, before its rows, in the same read task. A marker of its own would be a task of its
    own: a catch-up batch of two ranges would be three tasks on two cores, one always waiting."""

    binlog_range: BinlogRange
    marker: "MarkerPartition | None" = None


@dataclass(frozen=True)
class MarkerPartition(InputPartition):
    """The batch's range marker (start, end], read without the upstream (model.change_batch.marker_batch)."""

    start: int
    end: int


@dataclass(frozen=True)
class ChunkPartition(InputPartition):
    """A chunk of a table for the snapshot to read on an executor (pipeline/snapshot.py)."""

    chunk: ChunkRead


@dataclass(frozen=True)
class SourceOptions:
    """What the source needs, passed through Spark's string options (keys arrive lower-cased)."""

    index_path: str
    upstream_uri: str
    start_ts: int
    target_ts: int = 0  # 0 = no target
    server_id_base: int = 100000
    max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES
    parallelism: int = 2
    filter_rules: tuple[str, ...] = ("*.*",)
    case_sensitive: bool = False
    force_replicate: bool = False  # also decode tables without a valid index
    split_transactions: bool = True  # a large transaction may span batches (see the module docstring)
    bdr_mode: bool = False  # drop the transactions a BDR peer's sink wrote (see the module docstring)
    batch_interval_ms: int = DEFAULT_BATCH_INTERVAL_MS  # the trigger interval, kept by BatchPacer
    # Where read tasks leave their batches for the driver: only with executors on the driver's
    # filesystem (pipeline/transport.py); empty, the batches travel through Spark.
    spool_dir: str = ""
    # While this file exists the source plans no batch (latestOffset returns its start): a stop
    # creates it to bring the query to rest first (query_rest.py).
    hold_file: str = ""
    # While this file holds a commit-ts, batches end at or before it (`stream_cap`): the snapshot
    # stage caps the stream at a wave's start while the wave reads (pipeline/snapshot.py), so the
    # batches below it are written meanwhile instead of waiting for the wave.
    cap_file: str = ""

    def to_options(self) -> dict[str, str]:
        # The password goes apart, under a key Spark's spark.redaction.regex matches: Spark shows
        # a source's options in plans and errors, and redacts only the values of such keys.
        upstream_uri, upstream_password = split_password(self.upstream_uri)
        return {
            "index_path": self.index_path,
            "upstream_uri": upstream_uri,
            "upstream_password": upstream_password,
            "start_ts": str(self.start_ts),
            "target_ts": str(self.target_ts),
            "server_id_base": str(self.server_id_base),
            "max_batch_bytes": str(self.max_batch_bytes),
            "parallelism": str(self.parallelism),
            "filter_rules": "\n".join(self.filter_rules),
            "case_sensitive": "true" if self.case_sensitive else "false",
            "force_replicate": "true" if self.force_replicate else "false",
            "split_transactions": "true" if self.split_transactions else "false",
            "bdr_mode": "true" if self.bdr_mode else "false",
            "batch_interval_ms": str(self.batch_interval_ms),
            "spool_dir": self.spool_dir,
            "hold_file": self.hold_file,
            "cap_file": self.cap_file,
        }

    @classmethod
    def from_options(cls, options: dict[str, str]) -> "SourceOptions":
        return cls(
            index_path=options["index_path"],
            upstream_uri=(with_password(options["upstream_uri"], options["upstream_password"])
                          if options.get("upstream_password") else options["upstream_uri"]),
            start_ts=int(options["start_ts"]),
            target_ts=int(options.get("target_ts", "0")),
            server_id_base=int(options.get("server_id_base", "100000")),
            max_batch_bytes=int(options.get("max_batch_bytes", str(DEFAULT_MAX_BATCH_BYTES))),
            parallelism=int(options.get("parallelism", "2")),
            filter_rules=tuple(r for r in options.get("filter_rules", "*.*").split("\n") if r),
            case_sensitive=options.get("case_sensitive", "false") == "true",
            force_replicate=options.get("force_replicate", "false") == "true",
            split_transactions=options.get("split_transactions", "true") == "true",
            bdr_mode=options.get("bdr_mode", "false") == "true",
            batch_interval_ms=int(options.get("batch_interval_ms", str(DEFAULT_BATCH_INTERVAL_MS))),
            spool_dir=options.get("spool_dir", ""),
            hold_file=options.get("hold_file", ""),
            cap_file=options.get("cap_file", ""),
        )

    def capped(self) -> "SourceOptions":
        """These options with the cap file's commit-ts, if any, as the target of the next batch."""
        cap = stream_cap(self.cap_file)
        if cap is None:
            return self
        return replace(self, target_ts=min(self.target_ts, cap) if self.target_ts else cap)


def stream_cap(path: str) -> Optional[int]:
    """The commit-ts in the cap file at `path`, or None when there is none."""
    if not path:
        return None
    try:
        with open(path, encoding="ascii") as file:
            return int(file.read())
    except (FileNotFoundError, ValueError):  # none (set_stream_cap renames a whole file into place)
        return None


def set_stream_cap(path: str, ts: Optional[int]) -> None:
    """Caps the stream at `ts` (written whole, then renamed into place), or lifts the cap (None)."""
    if not path:
        return
    if ts is None:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        return
    with open(path + ".tmp", "w", encoding="ascii") as file:
        file.write(str(ts))
    os.replace(path + ".tmp", path)


# Beside the cap file while chunks a snapshot wave read wait for the stream to pass their positions:
# the source then plans batches at once instead of one per trigger interval (BatchPacer.ready).
WAITING_SUFFIX = ".waiting"


def set_chunks_waiting(cap_file: str, waiting: bool) -> None:
    """Tells the source (through a file beside `cap_file`) whether read chunks wait for a batch."""
    if not cap_file:
        return
    path = cap_file + WAITING_SUFFIX
    if waiting:
        with open(path, "w", encoding="ascii"):
            pass
        return
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def chunks_waiting(cap_file: str) -> bool:
    """Whether the snapshot stage said read chunks wait for a batch (`set_chunks_waiting`)."""
    return bool(cap_file) and os.path.exists(cap_file + WAITING_SUFFIX)


@dataclass(frozen=True)
class BatchOffset:
    """A source offset: every transaction up to `ts`, or with `piece` = k > 0, every transaction
    up to ts - 1 plus the first k pieces of transaction `ts`. JSON `{"ts": N}` or
    `{"ts": N, "piece": k}`, so checkpoints from before pieces existed still parse."""

    ts: int
    piece: int = 0

    @property
    def checkpoint_ts(self) -> int:
        """The newest commit-ts wholly before this offset: what a checkpoint may say."""
        return self.ts - 1 if self.piece else self.ts

    def key(self) -> tuple[int, int]:
        """Orders offsets: (T - 1, 0) < (T, piece 1) < (T, piece 2) < ... < (T, 0)."""
        return (self.checkpoint_ts, self.piece)

    def to_json(self) -> dict:
        return {"ts": self.ts, "piece": self.piece} if self.piece else {"ts": self.ts}

    @classmethod
    def of(cls, value: "BatchOffset | dict | int") -> "BatchOffset":
        if isinstance(value, BatchOffset):
            return value
        if isinstance(value, dict):
            return cls(int(value["ts"]), int(value.get("piece", 0)))
        return cls(int(value))


def plan_next_batch(
    index: "TxnIndex", start: BatchOffset, target_ts: int, max_batch_bytes: int, split_transactions: bool = True,
    piece_batch_bytes: int | None = None, read: "list[TxnSize] | None" = None, drop_marked: bool = False,
) -> tuple[BatchOffset, bool]:
    """The end of the next micro-batch starting after `start` (== start when nothing is new).

    A batch takes transactions until it holds more than `max_batch_bytes` of binlog (at least
    one); with `split_transactions`, the pieces of a split transaction while they fit in
    `piece_batch_bytes` (default max_batch_bytes; at least one piece), so a batch of pieces stays
    within that plus one piece.

    With `drop_marked` (bdr-mode), a transaction marked skip_replication counts for nothing: it is
    not read.

    Also says whether more is ready beyond the end (a size cut, or a DDL with transactions
    resolved after it): then the next batch should run at once (BatchPacer). `read`, when given,
    gets every TxnSize read, in order: all of the batch's and perhaps the next transaction."""
    limit = index.resolved_ts()
    if target_ts:
        limit = min(limit, target_ts)
    end = limit
    next_ddl = index.next_ddl_after(start.checkpoint_ts)
    if next_ddl is not None:
        end = min(end, next_ddl)
    if end <= start.checkpoint_ts:
        return start, False
    piece_limit = min(max_batch_bytes, piece_batch_bytes or max_batch_bytes)
    size = 0
    for size_row in _paged_sizes(index, start.checkpoint_ts, end):
        if read is not None:
            read.append(size_row)
        commit_ts, txn_size, split = size_row.commit_ts, size_row.size, size_row.split
        if drop_marked and size_row.skip_replication:
            continue
        first = start.piece if commit_ts == start.ts else 0
        if split and (split_transactions or first):  # a batch never re-reads pieces it had
            txn = _record(index, commit_ts)
            for piece in range(first, txn.piece_count):
                if size and size + txn.piece_size(piece) > piece_limit:  # the piece starts the next batch
                    return (BatchOffset(commit_ts, piece) if piece else BatchOffset(commit_ts - 1)), True
                size += txn.piece_size(piece)
            continue
        size += txn_size
        if size > max_batch_bytes:
            return BatchOffset(commit_ts), commit_ts < limit
    return BatchOffset(end), end < limit


# Transactions read from the index per query while planning: a backlog of a million
# transactions must not be read whole for every 8 MB batch.
_PLAN_PAGE = 1024


def _paged_sizes(index: "TxnIndex", lo_exclusive: int, hi_inclusive: int) -> Iterator["TxnSize"]:
    """index.txn_sizes_between(lo_exclusive, hi_inclusive), read a page at a time as the caller goes."""
    while True:
        page = index.txn_sizes_between(lo_exclusive, hi_inclusive, _PLAN_PAGE)
        yield from page
        if len(page) < _PLAN_PAGE:
            return
        lo_exclusive = page[-1].commit_ts


class BatchPacer:
    """When the next micro-batch may run; shared by the stream reader and the Spark Connect loop.

    Spark's trigger fires continuously (a `0 seconds` processingTime trigger, polling every
    `spark.sql.streaming.pollingDelay` while there is nothing to run), and the source decides:
    - a backlog (the planned batch was cut by max-batch-bytes, or stops at a DDL with more
      resolved after it) runs at once, so catch-up is not held to one batch per trigger interval;
      so does the batch after it, the backlog's tail: its rows were waiting already when the
      last batch was planned (holding it for the interval added up to a second to every
      catch-up, ~10% of a 1M-change one);
    - a batch with transactions runs `interval` seconds after the previous batch started;
    - a batch that only moves an idle upstream's resolved-ts runs at most once per
      max(interval, IDLE_BATCH_SECONDS), so a short trigger interval costs no more when idle;
    - a batch reaching the changefeed's target-ts runs at once;
    - so does any batch while chunks an initial snapshot read wait for the stream to pass their
      positions (`chunks_waiting`): the snapshot's next wave waits for them to be written, and
      holding each such batch for the interval left the cores idle between waves.
    It also sizes batches: CATCH_UP_BATCH_FACTOR times max-batch-bytes after a batch that was cut
    by size (`batch_bytes`), max-batch-bytes otherwise."""

    def __init__(self, interval: float, clock: Callable[[], float] = time.monotonic):
        self.interval = interval
        self._clock = clock
        self._last = float("-inf")
        self._catching_up = False
        # The last batch planned, (start, end, its TxnSize rows): its partitions are planned next
        # from the same rows instead of reading them again (`sizes_of`).
        self._planned: "tuple[BatchOffset, BatchOffset, list[TxnSize]] | None" = None

    @property
    def catching_up(self) -> bool:
        """Whether the last batch planned had more ready behind it."""
        return self._catching_up

    def batch_bytes(self, max_batch_bytes: int) -> int:
        """The binlog bytes the next batch may span."""
        return max_batch_bytes * CATCH_UP_BATCH_FACTOR if self._catching_up else max_batch_bytes

    def plan(self, index: "TxnIndex", start: BatchOffset, options: "SourceOptions") -> BatchOffset:
        """The end of the batch to run now after `start` (plan_next_batch sized by `batch_bytes`),
        or `start` when none may run yet; a batch returned counts as run."""
        read: list[TxnSize] = []
        end, backlog = plan_next_batch(index, start, options.target_ts, self.batch_bytes(options.max_batch_bytes),
                                       options.split_transactions, piece_batch_bytes=options.max_batch_bytes,
                                       read=read, drop_marked=options.bdr_mode)
        if not self.ready(index, start, end, backlog, options.target_ts, chunks_waiting(options.cap_file)):
            return start
        self.ran(backlog)
        self._planned = (start, end, [size for size in read if size.commit_ts <= end.ts])
        return end

    def sizes_of(self, start: BatchOffset, end: BatchOffset) -> "list[TxnSize] | None":
        """The TxnSize rows of the batch (start, end] when it is the one `plan` returned last
        (index.txn_sizes_between(start.checkpoint_ts, end.ts)); None for any other batch (Spark
        replaying a batch after a restart)."""
        if self._planned is None or self._planned[:2] != (start, end):
            return None
        return self._planned[2]

    def ready(self, index: "TxnIndex", start: BatchOffset, end: BatchOffset, backlog: bool, target_ts: int = 0,
              chunks_wait: bool = False) -> bool:
        if end.key() <= start.key():
            return False
        if (backlog or chunks_wait or self._catching_up or start.piece or end.piece
                or (target_ts and end.ts >= target_ts)):
            return True
        elapsed = self._clock() - self._last
        if elapsed >= max(self.interval, IDLE_BATCH_SECONDS):
            return True
        return elapsed >= self.interval and bool(index.txns_between(start.checkpoint_ts, end.ts, limit=1))

    def ran(self, backlog: bool = False) -> None:
        """A batch was just planned (with more ready behind it: `backlog`): the intervals count
        from now."""
        self._last = self._clock()
        self._catching_up = backlog


def replicated_tables(
    tables: Sequence[TableInfo], table_filter: Callable[[str, str], bool], force_replicate: bool
) -> tuple[dict[str, str], list[TableInfo]]:
    """("schema.table" -> TableInfo JSON to decode, tables skipped for lack of a valid index).

    TiCDC does not replicate the rows of a table without a PK or NOT-NULL unique key unless
    force-replicate is set: downstream they could not be keyed (IsIneligibleTable)."""
    chosen: dict[str, str] = {}
    ineligible: list[TableInfo] = []
    for info in tables:
        if not table_filter(info.schema, info.table):
            continue
        if info.is_eligible(force_replicate):
            chosen[f"{info.schema}.{info.table}"] = info.to_json()
        else:
            ineligible.append(info)
    return chosen, ineligible


def split_ranges(txns: Sequence["TxnSize | TxnRecord"], parts: int,
                 drop_marked: bool = False) -> list[list["TxnSize | TxnRecord"]]:
    """Cut the batch's DML transactions into contiguous runs of about equal binlog size.

    DDL transactions carry no rows, and with `drop_marked` a transaction marked skip_replication
    is not read: each ends a run, and a run never spans one. Nor does a run reach into a
    transaction marked `breaks` or of another epoch (its positions are another server's, or not
    where the previous transaction ends: txn_index.py).
    """
    runs: list[list] = [[]]
    for txn in txns:
        if txn.is_ddl or (drop_marked and txn.skip_replication):
            if runs[-1]:
                runs.append([])
            continue
        if runs[-1] and (txn.breaks or txn.epoch != runs[-1][-1].epoch):
            runs.append([])
        runs[-1].append(txn)
    runs = [r for r in runs if r]
    total = sum(t.size for r in runs for t in r)
    target = max(1, total // max(1, parts))
    pieces: list[list] = []
    for run in runs:
        current: list = []
        size = 0
        for txn in run:
            current.append(txn)
            size += txn.size
            if size >= target:
                pieces.append(current)
                current, size = [], 0
        if current:
            pieces.append(current)
    return pieces


@dataclass(frozen=True)
class _Span:
    """A stretch of binlog to decode: whole transactions, or one piece of a split transaction."""

    start: "BinlogPosition"
    end: "BinlogPosition"
    commit_ts: tuple[int, ...]
    size: int
    piece: int = 0
    table_maps: tuple["BinlogPosition", ...] = ()
    continues_group: bool = False  # it starts with the rest of a GTID group (TxnRecord.continues_group)
    epoch: int = 0  # the source whose binlog holds it


def batch_spans(
    index: "TxnIndex", start: BatchOffset, end: BatchOffset, parts: int, sizes: "list[TxnSize] | None" = None,
    drop_marked: bool = False,
) -> list[_Span]:
    """The binlog stretches of the batch (start, end]: whole transactions cut into runs of about
    equal size (split_ranges), and each piece of a split transaction on its own; with
    `drop_marked`, none of a transaction marked skip_replication. Only the transactions at the
    runs' ends and the split ones are read whole (TxnRecord). `sizes`: the batch's TxnSize rows
    when the caller has them (BatchPacer.sizes_of)."""
    whole: list[TxnSize] = []
    spans: list[_Span] = []
    if sizes is None:
        sizes = index.txn_sizes_between(start.checkpoint_ts, end.ts)
    for size in sizes:
        first = start.piece if size.commit_ts == start.ts else 0
        ends_inside = size.commit_ts == end.ts and end.piece
        # The whole transaction is in the batch (or is dropped whole: split_ranges leaves it out).
        if not size.split or not (first or ends_inside) or (drop_marked and size.skip_replication):
            whole.append(size)
            continue
        txn = _record(index, size.commit_ts)
        for piece in range(first, end.piece if ends_inside else txn.piece_count):
            piece_start, piece_end, maps = txn.piece_range(piece)
            spans.append(_Span(piece_start, piece_end, (txn.commit_ts,), piece_end.pos - piece_start.pos, piece, maps,
                               txn.continues_group, txn.epoch))
    for run in split_ranges(whole, parts, drop_marked):
        first = _record(index, run[0].commit_ts)
        spans.append(_Span(first.start, _record(index, run[-1].commit_ts).end, tuple(t.commit_ts for t in run),
                           sum(t.size for t in run), continues_group=first.continues_group, epoch=first.epoch))
    return sorted(spans, key=lambda span: (span.commit_ts[0], span.piece))


def _record(index: "TxnIndex", commit_ts: int) -> "TxnRecord":
    return index.txns_between(commit_ts - 1, commit_ts)[0]


def plan_partitions(
    index: "TxnIndex",
    options: SourceOptions,
    start: "BatchOffset | int",
    end: "BatchOffset | int",
    warned: set[tuple[str, str, int]],
    sizes: "list[TxnSize] | None" = None,
) -> list[InputPartition]:
    """The partitions of the batch (start, end]: the binlog ranges to decode, the first carrying the
    batch's range marker, or the marker alone for a batch with no range (batch_marker parts them).

    Shared by the stream reader and the Spark Connect loop (pipeline/connect_loop.py), so both
    plan a batch the same way. `warned` holds the ineligible table versions already logged;
    `sizes` the batch's TxnSize rows when the caller has them (BatchPacer.sizes_of).
    The marker carries checkpoint bounds: a batch ending inside transaction T ends at T - 1."""
    start, end = BatchOffset.of(start), BatchOffset.of(end)
    if end.key() <= start.key():
        return []
    tables = _replicated_tables_at(index, start.checkpoint_ts, options, warned)
    upstream = UpstreamConfig.from_uri(options.upstream_uri)
    servers: dict[int, UpstreamConfig] = {}
    marker = MarkerPartition(start.checkpoint_ts, end.checkpoint_ts)
    partitions: list[InputPartition] = []
    for number, span in enumerate(batch_spans(index, start, end, options.parallelism, sizes, options.bdr_mode)):
        if span.epoch not in servers:
            servers[span.epoch] = source_server(index, span.epoch, upstream)
        partitions.append(
            RangePartition(
                BinlogRange(
                    upstream=servers[span.epoch],
                    server_id=options.server_id_base + number,
                    start=span.start,
                    end=span.end,
                    commit_ts=span.commit_ts,
                    tables=tables,
                    piece=span.piece,
                    table_maps=span.table_maps,
                    continues_group=span.continues_group,
                ),
                None if partitions else marker,
            )
        )
    return partitions or [marker]


def batch_marker(partitions: Sequence[InputPartition]) -> tuple[Optional[MarkerPartition], list[InputPartition]]:
    """A batch's planned partitions (plan_partitions) as its range marker and its binlog ranges,
    each range without the marker; (None, ...) when they are not a batch's."""
    if not partitions:
        return None, []
    first = partitions[0]
    if isinstance(first, MarkerPartition):
        return first, list(partitions[1:])
    if isinstance(first, RangePartition) and first.marker is not None:
        return first.marker, [RangePartition(first.binlog_range), *partitions[1:]]
    return None, list(partitions)


# The last few (tables, filter) -> (the tables, packed tables, ineligible) of _replicated_tables_at:
# the tables change only with DDL, and filtering and packing 10,000 of them took ~0.1 s a batch.
_PACKED_MEMO: dict[tuple, tuple[list[TableInfo], PackedTables, list[TableInfo]]] = {}
_PACKED_MEMO_SIZE = 4
_PACKED_MEMO_LOCK = threading.Lock()


def _replicated_tables_at(
    index: "TxnIndex", ts: int, options: SourceOptions, warned: set[tuple[str, str, int]]
) -> PackedTables:
    from sparkcdc.filter.table_filter import TableFilter

    infos = index.tables_at(ts)
    # Parsed tables are shared per JSON text (TableInfo.from_json); the memo holds them, so their
    # ids stay theirs while the key is in it.
    key = (tuple(map(id, infos)), options.filter_rules, options.case_sensitive, options.force_replicate)
    with _PACKED_MEMO_LOCK:
        memo = _PACKED_MEMO.get(key)
    if memo is None:
        table_filter = TableFilter(list(options.filter_rules), options.case_sensitive)
        tables, ineligible = replicated_tables(infos, table_filter.match, options.force_replicate)
        memo = (infos, PackedTables.pack(tables), ineligible)
        with _PACKED_MEMO_LOCK:
            if len(_PACKED_MEMO) >= _PACKED_MEMO_SIZE:
                _PACKED_MEMO.pop(next(iter(_PACKED_MEMO)))
            _PACKED_MEMO[key] = memo
    _, packed, ineligible = memo
    # Once per table version, so a long-running changefeed does not repeat itself every batch.
    new = [t for t in ineligible if (t.schema, t.table, t.version) not in warned]
    if new:
        warned.update((t.schema, t.table, t.version) for t in new)
        log.warning(
            "[SPARKCDC:WarnIneligibleTable] tables without a valid index (no primary key and no unique key "
            "of NOT NULL columns) are not replicated: %s; add such a key upstream, or set force-replicate = true",
            ", ".join(f"{t.schema}.{t.table}" for t in new),
        )
    return packed


# A batch planned in advance travels to a batch read (source.PlannedBinlogSource) as read options:
# the pickled plan, and beside it the upstream password, under a key spark.redaction.regex matches,
# so a Connect server's plans, UI and logs show it redacted; the pickled plan holds none.
PLAN_OPTION = "plan"
PASSWORD_OPTION = "upstream_password"


@dataclass(frozen=True)
class BatchPlan:
    """One batch as planned by the capture: the changefeed's source options and its partitions."""

    options: SourceOptions
    partitions: tuple[InputPartition, ...]

    def to_options(self) -> dict[str, str]:
        """The read options that carry this plan: the pickled plan without the upstream password,
        and the password (see PASSWORD_OPTION)."""
        upstream_uri, password = split_password(self.options.upstream_uri)
        buffer = io.BytesIO()
        _PasswordlessPickler(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump(
            replace(self, options=replace(self.options, upstream_uri=upstream_uri)))
        return {PLAN_OPTION: base64.b64encode(buffer.getvalue()).decode("ascii"), PASSWORD_OPTION: password}

    @staticmethod
    def from_options(options: Mapping[str, str]) -> "BatchPlan":
        password = options.get(PASSWORD_OPTION) or ""
        plan = _PasswordUnpickler(io.BytesIO(base64.b64decode(options[PLAN_OPTION])), password).load()
        if not isinstance(plan, BatchPlan):
            raise TypeError(f"the {PLAN_OPTION} option holds a {type(plan).__name__}, not a BatchPlan")
        if password:
            plan = replace(plan, options=replace(plan.options,
                                                 upstream_uri=with_password(plan.options.upstream_uri, password)))
        return plan


class _PasswordlessPickler(pickle.Pickler):
    """Pickles each UpstreamConfig (in the binlog ranges) without its password."""

    def persistent_id(self, obj):
        if type(obj) is UpstreamConfig and obj.password:
            return "upstream", replace(obj, password="")
        return None


class _PasswordUnpickler(pickle.Unpickler):
    """Puts the password back into the UpstreamConfigs _PasswordlessPickler left it out of."""

    def __init__(self, file, password: str):
        super().__init__(file)
        self._password = password

    def persistent_load(self, pid):
        kind, upstream = pid
        if kind != "upstream" or type(upstream) is not UpstreamConfig:
            raise pickle.UnpicklingError(f"unknown persistent id {kind!r} in a {PLAN_OPTION} option")
        return replace(upstream, password=self._password)
