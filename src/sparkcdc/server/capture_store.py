"""The metadata store as one capture sees it: commit-ts values go through its own index.

Each capture's puller gives commit-ts values from its own clock history, so the same upstream
transaction can have different commit-ts on two captures. The upstream's GTID state after it is
the same on all of them, on every server of the topology (a failover changes the binlog
positions, not the GTIDs), and so is the binlog position as long as all follow one server: every
checkpoint is stored with both, and a capture that resumes a changefeed maps them back into its
own index, the GTID state first. The runner's writes also carry the capture's fence: a capture
that lost its lease or its assignment cannot move a checkpoint or mark a changefeed failed.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Callable, Optional

from sparkcdc.errors import ErrStartTsInvalid
from sparkcdc.model.position import BinlogPosition
from sparkcdc.model.changefeed import ChangefeedInfo, ChangefeedStatus
from sparkcdc.upstream.txn_index import TxnIndex

FenceFor = Callable[[str, str], list]


class CaptureStoreView:
    def __init__(self, store, index_path: str, fence_for: Optional[FenceFor] = None, strict: bool = True):
        """`strict`: a checkpoint this index cannot map is an error (the runner must not guess);
        otherwise (API, schema GC) the stored commit-ts is shown as it is."""
        self._store = store
        self._index_path = index_path
        self._fence_for = fence_for
        self._strict = strict
        self._resolve_timeout = 20.0 if strict else 0.0

    def __getattr__(self, name):
        return getattr(self._store, name)

    # -- translation ---------------------------------------------------------------------------
    def position_of(self, ts: int) -> str:
        position = TxnIndex(self._index_path).position_at(ts)
        return str(position) if position is not None else ""

    def gtid_of(self, ts: int) -> str:
        state = TxnIndex(self._index_path).gtid_state_at(ts)
        return str(state) if state is not None else ""

    def local_ts(self, position: str, gtid: str = "") -> int:
        """The commit-ts in this capture's index after which GTID state `gtid` (or else binlog
        `position`) starts; waits briefly for a lagging local puller to reach it."""
        deadline = time.monotonic() + self._resolve_timeout
        index = TxnIndex(self._index_path)
        while True:
            try:
                if gtid:
                    try:
                        return index.resolve_start(gtid)
                    except ErrStartTsInvalid:
                        if not position:
                            raise
                return index.resolve_start(position)
            except ErrStartTsInvalid:
                ts = index.last_txn_ending_at_or_before(BinlogPosition.parse(position)) if position else None
                if ts is not None:
                    return ts
                if time.monotonic() > deadline:
                    raise
            time.sleep(0.2)

    # -- the interface -------------------------------------------------------------------------
    def create_changefeed(self, info: ChangefeedInfo, status: ChangefeedStatus) -> None:
        status = dataclasses.replace(status, checkpoint_position=self.position_of(status.checkpoint_ts),
                                     checkpoint_gtid=self.gtid_of(status.checkpoint_ts))
        self._store.create_changefeed(info, status)

    def get_status(self, namespace: str, changefeed_id: str) -> ChangefeedStatus:
        status = self._store.get_status(namespace, changefeed_id)
        if status.checkpoint_position or status.checkpoint_gtid:
            try:
                local = self.local_ts(status.checkpoint_position, status.checkpoint_gtid)
            except ErrStartTsInvalid:
                if self._strict:
                    raise
                return status
            barrier = local if status.min_table_barrier_ts == status.checkpoint_ts else status.min_table_barrier_ts
            status = dataclasses.replace(status, checkpoint_ts=local, resolved_ts=max(local, status.resolved_ts),
                                         min_table_barrier_ts=barrier)
        return status

    def advance_checkpoint(self, namespace: str, changefeed_id: str, checkpoint_ts: int, resolved_ts: int) -> None:
        fence = self._fence_for(namespace, changefeed_id) if self._fence_for else ()
        self._store.advance_checkpoint(namespace, changefeed_id, checkpoint_ts, resolved_ts,
                                       checkpoint_position=self.position_of(checkpoint_ts), fence=fence,
                                       checkpoint_gtid=self.gtid_of(checkpoint_ts))

    def set_checkpoint(self, namespace: str, changefeed_id: str, checkpoint_ts: int) -> None:
        self._store.set_checkpoint(namespace, changefeed_id, checkpoint_ts,
                                   checkpoint_position=self.position_of(checkpoint_ts),
                                   checkpoint_gtid=self.gtid_of(checkpoint_ts))

    def update_changefeed(self, info: ChangefeedInfo) -> None:
        fence = self._fence_for(info.namespace, info.id) if self._fence_for else ()
        self._store.update_changefeed(info, fence=fence)
