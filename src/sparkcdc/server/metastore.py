"""Changefeed metadata (TiCDC's etcd documents) in SQLite, the single-node default store.

Documents are JSON under TiCDC's etcd keys (`/tidb/cdc/<cluster>/<namespace>/changefeed/info/<id>`
and `.../changefeed/status/<id>`), so an etcd-backed store can implement the same small interface.
Every call opens its own connection: safe across threads and processes (WAL, busy timeout).
"""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing, contextmanager
from dataclasses import asdict, dataclass, field
from typing import Iterator

from sparkcdc.errors import ErrChangefeedAlreadyExists, ErrChangefeedNotExists
from sparkcdc.model.changefeed import ChangefeedInfo, ChangefeedStatus

_SCHEMA = "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)"


@dataclass
class _Keys:
    cluster_id: str
    prefix: str = field(init=False)

    def __post_init__(self) -> None:
        self.prefix = f"/tidb/cdc/{self.cluster_id}/"

    def info(self, namespace: str, changefeed_id: str) -> str:
        return f"{self.prefix}{namespace}/changefeed/info/{changefeed_id}"

    def status(self, namespace: str, changefeed_id: str) -> str:
        return f"{self.prefix}{namespace}/changefeed/status/{changefeed_id}"

    def snapshot(self, namespace: str, changefeed_id: str) -> str:
        return f"{self.prefix}{namespace}/snapshot/state/{changefeed_id}"

    def snapshot_requests(self, namespace: str, changefeed_id: str) -> str:
        return f"{self.prefix}{namespace}/snapshot/request/{changefeed_id}"


class MetaStore:
    """Changefeed info and status documents in one SQLite file."""

    def __init__(self, path: str, cluster_id: str = "default", busy_timeout_ms: int = 10_000):
        self.path = path
        self._keys = _Keys(cluster_id)
        self._busy_timeout_ms = busy_timeout_ms
        with self._transaction() as db:
            db.execute(_SCHEMA)
        with closing(self._connect()) as db:
            db.execute("PRAGMA journal_mode=WAL")

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, timeout=self._busy_timeout_ms / 1000, isolation_level=None)
        db.execute(f"PRAGMA busy_timeout={int(self._busy_timeout_ms)}")
        return db

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """A write transaction taken up front, so read-modify-write cannot interleave."""
        with closing(self._connect()) as db:
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")

    @staticmethod
    def _get(db: sqlite3.Connection, key: str) -> dict | None:
        row = db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else json.loads(row[0])

    @staticmethod
    def _put(db: sqlite3.Connection, key: str, document: dict) -> None:
        db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)",
                   (key, json.dumps(document, sort_keys=True)))

    def create_changefeed(self, info: ChangefeedInfo, status: ChangefeedStatus) -> None:
        with self._transaction() as db:
            if self._get(db, self._keys.info(info.namespace, info.id)) is not None:
                raise ErrChangefeedAlreadyExists(
                    f"changefeed {info.namespace}/{info.id} already exists; pick another id or remove it first")
            self._put(db, self._keys.info(info.namespace, info.id), asdict(info))
            self._put(db, self._keys.status(info.namespace, info.id), asdict(status))

    def get_changefeed(self, namespace: str, changefeed_id: str) -> ChangefeedInfo:
        with closing(self._connect()) as db:
            document = self._get(db, self._keys.info(namespace, changefeed_id))
        if document is None:
            raise _not_exists(namespace, changefeed_id)
        return ChangefeedInfo(**document)

    def list_changefeeds(self, namespace: str | None = None) -> list[ChangefeedInfo]:
        with closing(self._connect()) as db:
            rows = db.execute("SELECT key, value FROM meta WHERE key LIKE ? ORDER BY key",
                              (self._keys.prefix.replace("%", r"\%") + "%",)).fetchall()
        infos = []
        for key, value in rows:
            parts = key[len(self._keys.prefix):].split("/")
            if len(parts) == 4 and parts[1:3] == ["changefeed", "info"]:
                info = ChangefeedInfo(**json.loads(value))
                if namespace is None or info.namespace == namespace:
                    infos.append(info)
        return infos

    def metadata(self) -> list[tuple[str, str]]:
        """Every key and stored value, for `unsafe show-metadata`."""
        with closing(self._connect()) as db:
            return [(key, value) for key, value in db.execute("SELECT key, value FROM meta ORDER BY key")]

    def update_changefeed(self, info: ChangefeedInfo) -> None:
        key = self._keys.info(info.namespace, info.id)
        with self._transaction() as db:
            if self._get(db, key) is None:
                raise _not_exists(info.namespace, info.id)
            self._put(db, key, asdict(info))

    def delete_changefeed(self, namespace: str, changefeed_id: str) -> None:
        with self._transaction() as db:
            cursor = db.execute("DELETE FROM meta WHERE key IN (?, ?)",
                                (self._keys.info(namespace, changefeed_id),
                                 self._keys.status(namespace, changefeed_id)))
            if cursor.rowcount == 0:
                raise _not_exists(namespace, changefeed_id)
            db.execute("DELETE FROM meta WHERE key IN (?, ?)", (self._keys.snapshot(namespace, changefeed_id),
                                                                self._keys.snapshot_requests(namespace, changefeed_id)))

    def get_status(self, namespace: str, changefeed_id: str) -> ChangefeedStatus:
        with closing(self._connect()) as db:
            document = self._get(db, self._keys.status(namespace, changefeed_id))
        if document is None:
            raise _not_exists(namespace, changefeed_id)
        return ChangefeedStatus(**document)

    def advance_checkpoint(self, namespace: str, changefeed_id: str, checkpoint_ts: int,
                           resolved_ts: int) -> None:
        """Move the checkpoint and resolved ts forward; a stale (smaller) value is ignored."""
        key = self._keys.status(namespace, changefeed_id)
        with self._transaction() as db:
            document = self._get(db, key)
            if document is None:
                raise _not_exists(namespace, changefeed_id)
            document["checkpoint_ts"] = max(document["checkpoint_ts"], checkpoint_ts)
            document["resolved_ts"] = max(document["resolved_ts"], resolved_ts, document["checkpoint_ts"])
            self._put(db, key, document)

    def set_checkpoint(self, namespace: str, changefeed_id: str, checkpoint_ts: int) -> None:
        """Overwrite the checkpoint, backwards too (resume --overwrite-checkpoint-ts)."""
        key = self._keys.status(namespace, changefeed_id)
        with self._transaction() as db:
            document = self._get(db, key)
            if document is None:
                raise _not_exists(namespace, changefeed_id)
            document["checkpoint_ts"] = document["min_table_barrier_ts"] = checkpoint_ts
            document["resolved_ts"] = checkpoint_ts
            self._put(db, key, document)

    # -- the initial snapshot (model/snapshot.py) -------------------------------------------------
    def get_snapshot(self, namespace: str, changefeed_id: str) -> dict | None:
        with closing(self._connect()) as db:
            return self._get(db, self._keys.snapshot(namespace, changefeed_id))

    def put_snapshot(self, namespace: str, changefeed_id: str, document: dict) -> None:
        with self._transaction() as db:
            self._put(db, self._keys.snapshot(namespace, changefeed_id), document)

    def snapshot_requests(self, namespace: str, changefeed_id: str) -> list[dict]:
        with closing(self._connect()) as db:
            document = self._get(db, self._keys.snapshot_requests(namespace, changefeed_id))
        return (document or {}).get("requests", [])

    def request_snapshot(self, namespace: str, changefeed_id: str, tables: list[str]) -> int:
        """Ask the changefeed to copy `tables` again; the request's id."""
        key = self._keys.snapshot_requests(namespace, changefeed_id)
        with self._transaction() as db:
            if self._get(db, self._keys.info(namespace, changefeed_id)) is None:
                raise _not_exists(namespace, changefeed_id)
            document = self._get(db, key) or {"requests": []}
            number = max((r["id"] for r in document["requests"]), default=0) + 1
            document["requests"] = [*document["requests"][-99:], {"id": number, "tables": list(tables)}]
            self._put(db, key, document)
        return number


def _not_exists(namespace: str, changefeed_id: str) -> ErrChangefeedNotExists:
    return ErrChangefeedNotExists(
        f"changefeed {namespace}/{changefeed_id} does not exist; `sparkcdc cli changefeed list -a` shows them all")
