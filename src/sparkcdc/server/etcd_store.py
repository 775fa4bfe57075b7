"""Cluster metadata in etcd under TiCDC's keys; the same interface as the SQLite MetaStore.

Layout (contract §1; `<c>` = cluster id, `<ns>` = namespace):
  /tidb/cdc/<c>/__cdc_meta__/capture/<captureID>     CaptureInfo, bound to the capture's lease
  /tidb/cdc/<c>/__cdc_meta__/owner/<leaseID hex>     election key (lowest create revision wins)
  /tidb/cdc/<c>/__cdc_meta__/meta/meta-version       metadata version
  /tidb/cdc/<c>/__cdc_meta__/drain/<captureID>       ours: a drain was requested for the capture
  /tidb/cdc/<c>/<ns>/changefeed/info/<id>            ChangeFeedInfo
  /tidb/cdc/<c>/<ns>/changefeed/status/<id>          ChangeFeedStatus (+ checkpoint_position, checkpoint_gtid)
  /tidb/cdc/<c>/<ns>/task/assignment/<id>            ours: which capture runs the changefeed
TiCDC keeps table assignments in the owner's memory and rebuilds them from the processors; we
run whole changefeeds per capture and persist the assignment, so a new owner just reads it.

Every write that must not be applied by a capture that lost its lease or its assignment takes
`fence`: etcd compares ANDed into the same transaction (see server/cluster.py).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Optional, Sequence

from sparkcdc.errors import ErrCaptureFenced, ErrChangefeedAlreadyExists, ErrChangefeedNotExists
from sparkcdc.model.gtid import newer, parse_state
from sparkcdc.model.position import BinlogPosition
from sparkcdc.server.etcd_client import (
    EtcdClient,
    KeyValue,
    delete_op,
    key_missing,
    key_unchanged,
    put_op,
)
from sparkcdc.model.changefeed import ChangefeedInfo, ChangefeedStatus

META_VERSION = 1


@dataclass(frozen=True)
class ClusterKeys:
    cluster_id: str = "default"

    @property
    def prefix(self) -> str:
        return f"/tidb/cdc/{self.cluster_id}/"

    @property
    def meta(self) -> str:
        return f"{self.prefix}__cdc_meta__/"

    def capture(self, capture_id: str = "") -> str:
        return f"{self.meta}capture/{capture_id}"

    def owner(self, lease_id: Optional[int] = None) -> str:
        return f"{self.meta}owner/" + ("" if lease_id is None else f"{lease_id:x}")

    def drain(self, capture_id: str = "") -> str:
        return f"{self.meta}drain/{capture_id}"

    @property
    def meta_version(self) -> str:
        return f"{self.meta}meta/meta-version"

    def info(self, namespace: str, changefeed_id: str) -> str:
        return f"{self.prefix}{namespace}/changefeed/info/{changefeed_id}"

    def status(self, namespace: str, changefeed_id: str) -> str:
        return f"{self.prefix}{namespace}/changefeed/status/{changefeed_id}"

    def snapshot(self, namespace: str, changefeed_id: str) -> str:
        return f"{self.prefix}{namespace}/snapshot/state/{changefeed_id}"

    def snapshot_requests(self, namespace: str, changefeed_id: str) -> str:
        return f"{self.prefix}{namespace}/snapshot/request/{changefeed_id}"

    def assignment(self, namespace: str, changefeed_id: str) -> str:
        return f"{self.prefix}{namespace}/task/assignment/{changefeed_id}"

    def parse_changefeed_key(self, key: str) -> Optional[tuple[str, str, str]]:
        """`<prefix><ns>/<a>/<b>/<id>` -> (ns, "<a>/<b>", id) for the per-namespace keys."""
        if not key.startswith(self.prefix) or key.startswith(self.meta):
            return None
        parts = key[len(self.prefix):].split("/")
        if len(parts) != 4:
            return None
        return parts[0], f"{parts[1]}/{parts[2]}", parts[3]


def _dump(document: dict) -> str:
    return json.dumps(document, sort_keys=True)


class EtcdMetaStore:
    """Changefeed info and status documents in etcd (`sparkcdc server --pd http://...`)."""

    def __init__(self, client: EtcdClient, cluster_id: str = "default"):
        self.client = client
        self.keys = ClusterKeys(cluster_id)
        self.client.txn([key_missing(self.keys.meta_version)], [put_op(self.keys.meta_version, str(META_VERSION))])

    # -- changefeeds ---------------------------------------------------------------------------
    def create_changefeed(self, info: ChangefeedInfo, status: ChangefeedStatus) -> None:
        info_key = self.keys.info(info.namespace, info.id)
        ok, _ = self.client.txn(
            [key_missing(info_key)],
            [put_op(info_key, _dump(asdict(info))),
             put_op(self.keys.status(info.namespace, info.id), _dump(asdict(status)))],
        )
        if not ok:
            raise ErrChangefeedAlreadyExists(
                f"changefeed {info.namespace}/{info.id} already exists; pick another id or remove it first")

    def get_changefeed(self, namespace: str, changefeed_id: str) -> ChangefeedInfo:
        kv = self.client.get(self.keys.info(namespace, changefeed_id))
        if kv is None:
            raise _not_exists(namespace, changefeed_id)
        return ChangefeedInfo(**kv.json())

    def list_changefeeds(self, namespace: Optional[str] = None) -> list[ChangefeedInfo]:
        prefix = self.keys.prefix + (f"{namespace}/changefeed/info/" if namespace else "")
        infos = []
        for kv in self.client.get_prefix(prefix):
            parsed = self.keys.parse_changefeed_key(kv.key)
            if parsed and parsed[1] == "changefeed/info":
                infos.append(ChangefeedInfo(**kv.json()))
        return infos

    def update_changefeed(self, info: ChangefeedInfo, fence: Sequence[dict] = ()) -> None:
        key = self.keys.info(info.namespace, info.id)
        while True:
            kv = self.client.get(key)
            if kv is None:
                raise _not_exists(info.namespace, info.id)
            if self._write(key, kv, _dump(asdict(info)), fence, info.namespace, info.id):
                return

    def delete_changefeed(self, namespace: str, changefeed_id: str) -> None:
        info_key = self.keys.info(namespace, changefeed_id)
        ok, _ = self.client.txn(
            [{"key": key_missing(info_key)["key"], "result": "GREATER", "target": "CREATE", "create_revision": 0}],
            [delete_op(info_key), delete_op(self.keys.status(namespace, changefeed_id)),
             delete_op(self.keys.snapshot(namespace, changefeed_id)),
             delete_op(self.keys.snapshot_requests(namespace, changefeed_id))],
        )
        if not ok:
            raise _not_exists(namespace, changefeed_id)

    # -- status --------------------------------------------------------------------------------
    def _status_kv(self, namespace: str, changefeed_id: str) -> KeyValue:
        kv = self.client.get(self.keys.status(namespace, changefeed_id))
        if kv is None:
            raise _not_exists(namespace, changefeed_id)
        return kv

    def get_status(self, namespace: str, changefeed_id: str) -> ChangefeedStatus:
        return ChangefeedStatus(**self._status_kv(namespace, changefeed_id).json())

    def advance_checkpoint(self, namespace: str, changefeed_id: str, checkpoint_ts: int, resolved_ts: int,
                           checkpoint_position: str = "", fence: Sequence[dict] = (),
                           checkpoint_gtid: str = "") -> None:
        """Move the checkpoint forward; a stale one is ignored. commit-ts values differ between
        captures' indexes: with GTID states on both sides the GTID state decides what is newer
        (the same on every server of the topology), else with positions the position does."""
        key = self.keys.status(namespace, changefeed_id)
        while True:
            kv = self._status_kv(namespace, changefeed_id)
            document = kv.json()
            stored, stored_gtid = document.get("checkpoint_position") or "", document.get("checkpoint_gtid") or ""
            if checkpoint_gtid and stored_gtid:
                order = newer(parse_state(checkpoint_gtid), parse_state(stored_gtid))
                move = order is True or (order is False and checkpoint_ts > document["checkpoint_ts"])
            elif checkpoint_position and stored:
                move = (BinlogPosition.parse(checkpoint_position).key() > BinlogPosition.parse(stored).key()
                        or (checkpoint_position == stored and checkpoint_ts > document["checkpoint_ts"]))
            else:
                move = checkpoint_ts > document["checkpoint_ts"]
            if move:
                document["checkpoint_ts"] = checkpoint_ts
                if checkpoint_position:
                    document["checkpoint_position"] = checkpoint_position
                if checkpoint_gtid:
                    document["checkpoint_gtid"] = checkpoint_gtid
            document["resolved_ts"] = max(document["resolved_ts"], resolved_ts, document["checkpoint_ts"])
            if self._write(key, kv, _dump(document), fence, namespace, changefeed_id):
                return

    def set_checkpoint(self, namespace: str, changefeed_id: str, checkpoint_ts: int,
                       checkpoint_position: str = "", checkpoint_gtid: str = "") -> None:
        """Overwrite the checkpoint, backwards too (resume --overwrite-checkpoint-ts)."""
        key = self.keys.status(namespace, changefeed_id)
        while True:
            kv = self._status_kv(namespace, changefeed_id)
            document = kv.json()
            document.update(checkpoint_ts=checkpoint_ts, resolved_ts=checkpoint_ts, min_table_barrier_ts=checkpoint_ts,
                            checkpoint_position=checkpoint_position, checkpoint_gtid=checkpoint_gtid)
            if self._write(key, kv, _dump(document), (), namespace, changefeed_id):
                return

    # -- the initial snapshot (model/snapshot.py) -------------------------------------------------
    def get_snapshot(self, namespace: str, changefeed_id: str) -> Optional[dict]:
        kv = self.client.get(self.keys.snapshot(namespace, changefeed_id))
        return None if kv is None else kv.json()

    def put_snapshot(self, namespace: str, changefeed_id: str, document: dict) -> None:
        self.client.txn([], [put_op(self.keys.snapshot(namespace, changefeed_id), _dump(document))])

    def snapshot_requests(self, namespace: str, changefeed_id: str) -> list[dict]:
        kv = self.client.get(self.keys.snapshot_requests(namespace, changefeed_id))
        return [] if kv is None else kv.json().get("requests", [])

    def request_snapshot(self, namespace: str, changefeed_id: str, tables: list[str]) -> int:
        """Ask the changefeed to copy `tables` again; the request's id."""
        self.get_changefeed(namespace, changefeed_id)
        key = self.keys.snapshot_requests(namespace, changefeed_id)
        while True:
            kv = self.client.get(key)
            document = {"requests": []} if kv is None else kv.json()
            number = max((r["id"] for r in document["requests"]), default=0) + 1
            document["requests"] = [*document["requests"][-99:], {"id": number, "tables": list(tables)}]
            condition = key_missing(key) if kv is None else key_unchanged(key, kv.mod_revision)
            if self.client.txn([condition], [put_op(key, _dump(document))])[0]:
                return number

    def _write(self, key: str, kv: KeyValue, value: str, fence: Sequence[dict], namespace: str,
               changefeed_id: str) -> bool:
        """Compare-and-swap `key` from `kv` under the fence: False when the key moved under us
        (re-read and retry), ErrCaptureFenced when the fence no longer holds."""
        ok, _ = self.client.txn([key_unchanged(key, kv.mod_revision), *fence], [put_op(key, value)])
        if ok:
            return True
        if fence and not self.client.txn(list(fence), [])[0]:
            raise ErrCaptureFenced(
                f"changefeed {namespace}/{changefeed_id} is no longer this capture's (lease lost or reassigned); "
                "this capture stopped writing it")
        return False


def _not_exists(namespace: str, changefeed_id: str) -> ErrChangefeedNotExists:
    return ErrChangefeedNotExists(
        f"changefeed {namespace}/{changefeed_id} does not exist; `sparkcdc cli changefeed list -a` shows them all")
