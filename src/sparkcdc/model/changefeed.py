"""A changefeed as the metadata store keeps it (TiCDC's model.ChangeFeedInfo and ChangeFeedStatus)
and the store's interface as the changefeed runner uses it.

The SQLite store (server/metastore.py), the etcd store (server/etcd_store.py) and a capture's view
of either (server/capture_store.py) implement `ChangefeedStore`; the pipeline depends on this
interface, never on a store.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

CHANGEFEED_STATES = ("normal", "stopped", "failed", "finished", "warning", "removed")


@dataclass
class ChangefeedInfo:
    """What a user asked for (TiCDC's model.ChangeFeedInfo)."""

    namespace: str
    id: str
    upstream_id: int
    sink_uri: str
    create_time: str
    start_ts: int
    target_ts: int
    state: str
    error: dict | None
    config: dict
    creator_version: str


@dataclass
class ChangefeedStatus:
    """How far a changefeed has got (TiCDC's model.ChangeFeedStatus)."""

    checkpoint_ts: int
    resolved_ts: int
    # TiCDC's barrier: `resume --overwrite-checkpoint-ts` sets it to the new checkpoint, and a
    # start with checkpoint_ts == min_table_barrier_ts runs the DDL at checkpoint_ts again
    # (cdc/owner/changefeed.go starts the DDL puller at checkpoint-1 then; pipeline/runner.py).
    min_table_barrier_ts: int = 0
    # The binlog position after every transaction <= checkpoint_ts ("" when unknown). commit-ts
    # values are local to a capture's transaction index; the position means the same on all.
    checkpoint_position: str = ""
    # The upstream's GTID state after every transaction <= checkpoint_ts ("" when unknown): the
    # same on every server of the topology, so it survives a failover (docs/failover.md).
    checkpoint_gtid: str = ""


class ChangefeedStore(Protocol):
    """What the changefeed runner reads and writes in the metadata store."""

    def get_changefeed(self, namespace: str, changefeed_id: str) -> ChangefeedInfo: ...

    def update_changefeed(self, info: ChangefeedInfo) -> None: ...

    def get_status(self, namespace: str, changefeed_id: str) -> ChangefeedStatus: ...

    def advance_checkpoint(self, namespace: str, changefeed_id: str, checkpoint_ts: int, resolved_ts: int) -> None:
        """Move the checkpoint and resolved ts forward; a stale (smaller) value is ignored."""

    def get_snapshot(self, namespace: str, changefeed_id: str) -> dict | None:
        """The changefeed's snapshot state (model/snapshot.py SnapshotState JSON), None if none."""

    def put_snapshot(self, namespace: str, changefeed_id: str, document: dict) -> None: ...

    def snapshot_requests(self, namespace: str, changefeed_id: str) -> list[dict]:
        """Snapshots asked for through the API: [{"id": n, "tables": ["db.t", ...]}], oldest first."""
