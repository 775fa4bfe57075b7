"""The initial snapshot's state as the metadata store keeps it: per table, its chunks and progress.

Plain data (pipeline/snapshot.py runs the snapshot, server/ stores it, api/ shows it). A table is
cut into chunks by a chunk key (its primary key, a NOT NULL unique key or a user-named index
prefix): chunk n holds the rows whose key is above `low` and at most `high` in the server's own
order (bounds in canonical text, model/events.py; None is unbounded). A table without such a key
is one chunk (`key` None). A chunk is `done` once its rows are downstream and checkpointed; done
chunks are never read again, so a restart resumes with the chunks still to do. `position` is the
binlog position the chunk's read was consistent with, `commit_ts` where it went into the stream
(a position is one server's; the commit-ts stays valid across a failover).

The whole document is one JSON value per changefeed (`SnapshotState.to_json`), rewritten when a
chunk is done; finished tables keep only their counts.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    from sparkcdc.model.changefeed import ChangefeedInfo, ChangefeedStore

Bound = Optional[tuple[Optional[str], ...]]


@dataclass(frozen=True)
class ChunkKey:
    """The index whose leading `columns` cut a table into chunks."""

    index: str  # for FORCE INDEX; "PRIMARY" for the primary key
    columns: tuple[str, ...]


@dataclass
class ChunkState:
    number: int
    low: Bound  # exclusive; None: from the first row
    high: Bound  # inclusive; None: to the last row
    done: bool = False
    rows: int = 0
    position: str = ""  # FILE:POS the read was consistent with (done chunks)
    commit_ts: int = 0  # where the done chunk's rows went into the stream (0: a state from before it was kept)


@dataclass
class TableSnapshot:
    """One table's copy: its chunks planned so far (the last has `high` None once all are)."""

    schema: str
    table: str
    key: Optional[ChunkKey]
    chunks: list[ChunkState] = field(default_factory=list)
    estimated_rows: int = 0  # information_schema's estimate when planned
    started_at: float = 0.0  # wall clock, seconds
    finished_at: float = 0.0
    done_rows: int = 0
    done_chunks: int = 0
    skipped: str = ""  # why the table was not copied (dropped during the snapshot)
    incremental: bool = False  # asked for through the API while the changefeed streamed
    last_key: Bound = None  # the greatest key when the table's chunking began: chunks are cut up to it

    @property
    def name(self) -> str:
        return f"{self.schema}.{self.table}"

    @property
    def planned_all(self) -> bool:
        return bool(self.chunks) and self.chunks[-1].high is None

    @property
    def finished(self) -> bool:
        return bool(self.finished_at)

    def estimated_chunks(self, chunk_size: int) -> int:
        """Chunks in all: exact once every chunk is planned, else from the row estimate."""
        if self.finished or self.planned_all:
            return max(self.done_chunks, len(self.chunks))
        if self.key is None:
            return 1
        return max(len(self.chunks) + (0 if self.planned_all else 1), -(-self.estimated_rows // max(1, chunk_size)))

    def progress(self, chunk_size: int, now: Optional[float] = None) -> dict:
        """What `changefeed query` and the API show: chunks done/total, rows, rows/s, ETA."""
        now = time.time() if now is None else now
        end = self.finished_at or now
        elapsed = max(0.0, end - self.started_at) if self.started_at else 0.0
        rate = self.done_rows / elapsed if elapsed > 0 else 0.0
        total_rows = max(self.estimated_rows, self.done_rows)
        if self.finished:
            eta: Optional[float] = 0.0
        elif rate > 0:
            eta = max(0.0, (total_rows - self.done_rows) / rate)
        else:
            eta = None
        state = "skipped" if self.skipped else "done" if self.finished else "copying" if self.done_chunks else "pending"
        return {
            "table": self.name, "state": state, "chunks_done": self.done_chunks,
            "chunks_total": self.estimated_chunks(chunk_size), "rows": self.done_rows,
            "estimated_rows": total_rows, "rows_per_second": round(rate, 1),
            "eta_seconds": None if eta is None else round(eta, 1), "incremental": self.incremental,
            **({"skipped": self.skipped} if self.skipped else {}),
        }

    def finish(self, skipped: str = "") -> None:
        """Done (or skipped): only the counts are kept from now on."""
        self.finished_at = self.finished_at or time.time()
        self.skipped = skipped
        self.chunks = [chunk for chunk in self.chunks if self.key is None and chunk.done]  # single chunk: its anchor

    def to_dict(self) -> dict:
        data = asdict(self)
        data["key"] = None if self.key is None else {"index": self.key.index, "columns": list(self.key.columns)}
        return data

    @classmethod
    def from_dict(cls, data: dict) -> "TableSnapshot":
        key = data.get("key")
        chunks = [ChunkState(c["number"], _bound(c["low"]), _bound(c["high"]), c["done"], c["rows"], c["position"],
                             c.get("commit_ts", 0))
                  for c in data.get("chunks", [])]
        return cls(data["schema"], data["table"],
                   None if key is None else ChunkKey(key["index"], tuple(key["columns"])), chunks,
                   data.get("estimated_rows", 0), data.get("started_at", 0.0), data.get("finished_at", 0.0),
                   data.get("done_rows", 0), data.get("done_chunks", 0), data.get("skipped", ""),
                   data.get("incremental", False), _bound(data.get("last_key")))


def _bound(value) -> Bound:
    return None if value is None else tuple(value)


@dataclass
class SnapshotState:
    """A changefeed's snapshot: its tables in copy order, and whether the downstream tables exist."""

    tables: list[TableSnapshot] = field(default_factory=list)
    bootstrapped: bool = False  # the CREATE DATABASE/TABLE events went to the sink
    start_ts: int = 0  # the checkpoint the copy started at
    handled_request: int = 0  # the last snapshot request (API) taken into `tables`

    @property
    def finished(self) -> bool:
        return self.bootstrapped and all(t.finished for t in self.tables)

    def table(self, schema: str, table: str) -> Optional[TableSnapshot]:
        return next((t for t in self.tables if (t.schema, t.table) == (schema, table)), None)

    def progress(self, chunk_size: int, now: Optional[float] = None) -> dict:
        now = time.time() if now is None else now
        tables = [t.progress(chunk_size, now) for t in self.tables]
        rows = sum(t["rows"] for t in tables)
        started = [t.started_at for t in self.tables if t.started_at]
        ended = max([t.finished_at for t in self.tables], default=0.0) if self.finished else now
        elapsed = ended - min(started) if started else 0.0
        rate = rows / elapsed if elapsed > 0 else 0.0  # over the whole copy so far
        remaining = sum(max(0, t["estimated_rows"] - t["rows"]) for t in tables if t["state"] in ("copying", "pending"))
        return {
            "state": "done" if self.finished else "copying" if self.bootstrapped else "pending",
            "tables_done": sum(1 for t in self.tables if t.finished), "tables_total": len(self.tables),
            "chunks_done": sum(t["chunks_done"] for t in tables), "chunks_total": sum(t["chunks_total"] for t in tables),
            "rows": rows, "rows_per_second": round(rate, 1),
            "eta_seconds": 0.0 if self.finished else (round(remaining / rate, 1) if rate > 0 else None),
            "tables": tables,
        }

    def to_json(self) -> dict:
        return {"tables": [t.to_dict() for t in self.tables], "bootstrapped": self.bootstrapped,
                "start_ts": self.start_ts, "handled_request": self.handled_request}

    @classmethod
    def from_json(cls, data: Optional[dict]) -> "SnapshotState":
        if not data:
            return cls()
        return cls([TableSnapshot.from_dict(t) for t in data.get("tables", [])], data.get("bootstrapped", False),
                   data.get("start_ts", 0), data.get("handled_request", 0))


def snapshot_progress(store: "ChangefeedStore", info: "ChangefeedInfo") -> dict | None:
    """The initial snapshot's progress of a changefeed with `[snapshot]` (None without one), as the
    API, the status page and the metrics show it."""
    config = info.config.get("snapshot") or {}
    if config.get("mode", "never") == "never":
        return None
    return SnapshotState.from_json(store.get_snapshot(info.namespace, info.id)).progress(
        int(config.get("chunk_size") or 50000))
