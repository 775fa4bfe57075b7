"""The apply side of the redo log: complete batches, each commit-ts taken once, in order.

A batch counts only with its COMMIT frame and every frame that COMMIT names. Batches of
different runs may overlap (a restarted changefeed writes again from its checkpoint); they hold
the same upstream transactions, so each commit-ts is taken from the first complete batch, in
order of batch start, that covers it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Iterator, Optional, Union

from sparkcdc.errors import ErrRedoFileOp, ErrRedoMetaFileNotFound
from sparkcdc.model.events import DDLEvent, RowChange, TableInfo
from sparkcdc.redo import format as fmt
from sparkcdc.redo.storage import RedoStorage


@dataclass
class LoggedBatch:
    run: int
    start: int
    end: int
    frames: dict[int, fmt.Frame] = field(default_factory=dict)  # part -> ROW or DDL frame
    expected: Optional[int] = None  # from the COMMIT frame

    @property
    def complete(self) -> bool:
        return self.expected is not None and len(self.frames) == self.expected


@dataclass(frozen=True)
class RowStep:
    info: TableInfo
    rows: list[RowChange]


@dataclass(frozen=True)
class DDLStep:
    ddl: DDLEvent


Step = Union[RowStep, DDLStep]


class RedoReader:
    def __init__(self, storage: RedoStorage, tmp_dir: Optional[str] = None):
        self._storage = storage
        self._tmp_dir = tmp_dir
        self._batches: Optional[list[LoggedBatch]] = None

    def read_meta(self) -> fmt.RedoMeta:
        where = f"{self._storage.location.scheme}://{self._storage.location.root}"
        try:
            data = self._storage.read(fmt.META_FILE)
        except FileNotFoundError:
            raise ErrRedoMetaFileNotFound(
                f"no redo meta ({fmt.META_FILE}) in {where}; pass the consistent.storage URI of a changefeed "
                "with [consistent] level = \"eventual\"") from None
        except Exception as exc:  # unreachable endpoint, bad credentials, ...
            raise ErrRedoFileOp(f"cannot read the redo meta in {where}: {exc}; check --storage and that the "
                                "storage is reachable") from None
        try:
            return fmt.RedoMeta.from_bytes(data)
        except (ValueError, KeyError) as exc:
            raise ErrRedoFileOp(f"the redo meta in {where} is not valid: {exc}") from None

    def effective_meta(self) -> fmt.RedoMeta:
        """The meta with resolved-ts extended to the end of the last complete batch reachable
        from the checkpoint without a gap: every batch the sink may have applied is in it."""
        meta = self.read_meta()
        covered = meta.checkpoint_ts
        for batch in self.batches():
            if batch.start > covered:
                break  # a gap: a batch after it cannot have been applied before the missing one
            covered = max(covered, batch.end)
        return fmt.RedoMeta(meta.checkpoint_ts, max(meta.resolved_ts, covered), meta.changefeed)

    def _file_bytes(self, name: str) -> bytes:
        if self._storage.is_local or not self._tmp_dir:
            return self._storage.read(name)
        os.makedirs(self._tmp_dir, exist_ok=True)
        local = os.path.join(self._tmp_dir, name)
        self._storage.download(name, local)  # like TiCDC's reader: remote logs are staged locally
        with open(local, "rb") as handle:
            return handle.read()

    def batches(self) -> list[LoggedBatch]:
        """Every complete batch in the log, by (start, end, run); read once."""
        if self._batches is None:
            self._batches = self._read_batches()
        return self._batches

    def _read_batches(self) -> list[LoggedBatch]:
        found: dict[tuple[int, int, int], LoggedBatch] = {}
        for name in self._storage.list():
            if not name.endswith(fmt.LOG_SUFFIX):
                continue
            for frame in fmt.decode_frames(self._file_bytes(name)):
                batch = found.setdefault(frame.batch, LoggedBatch(frame.run, frame.start, frame.end))
                if frame.kind == fmt.KIND_COMMIT:
                    batch.expected = fmt.decode_commit(frame.payload)
                else:
                    batch.frames[frame.part] = frame
        return sorted((b for b in found.values() if b.complete), key=lambda b: (b.start, b.end, b.run))

    def steps(self, meta: fmt.RedoMeta) -> Iterator[Step]:
        """Rows and DDLs with checkpoint-ts < commit-ts <= resolved-ts, batch by batch; within a
        batch each table's rows in commit order, then the batch's DDLs (a DDL ends its batch)."""
        covered = meta.checkpoint_ts
        for batch in self.batches():
            if batch.end <= covered or covered >= meta.resolved_ts:
                continue
            if batch.start > covered:
                raise ErrRedoFileOp(
                    f"the redo log has no batch between commit-ts {covered} and {batch.start}, below its "
                    f"resolved-ts {meta.resolved_ts}: log files are missing from the storage; restore them "
                    "or apply only up to the gap by hand")
            low, high = covered, min(batch.end, meta.resolved_ts)
            ddls: list[DDLEvent] = []
            for part in sorted(batch.frames):
                frame = batch.frames[part]
                if frame.kind == fmt.KIND_ROW:
                    info, rows = fmt.decode_rows(frame.payload)
                    rows = [row for row in rows if low < row.commit_ts <= high]
                    if rows:
                        yield RowStep(info, rows)
                elif frame.kind == fmt.KIND_DDL:
                    ddls.extend(d for d in fmt.decode_ddls(frame.payload) if low < d.commit_ts <= high)
            for ddl in sorted(ddls, key=lambda d: d.commit_ts):
                yield DDLStep(ddl)
            covered = batch.end
