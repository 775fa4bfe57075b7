"""A capture's part in the cluster: its session, its owner campaign, and two loops.

- processor loop: runs exactly the changefeeds etcd assigns to this capture, acknowledges moves,
  and stops everything the moment the session may have expired (self-fencing by own clock);
  when the lease is lost it registers again under a new lease.
- owner loop: when this capture is the owner, applies `scheduler.plan` with writes fenced on
  the owner key's create revision, so a deposed owner's late writes do nothing.

We poll etcd (every `tick` seconds) instead of watching: etcd3gw's watch stops silently when
etcd restarts, and a range with a timeout cannot fail that way.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from dataclasses import dataclass
from typing import Callable, Optional, Protocol

from sparkcdc.errors import ErrCaptureFenced, ErrChangefeedNotExists, SparkCDCError
from sparkcdc.server.election.owner import OwnerElection
from sparkcdc.server.etcd_client import EtcdClient, delete_op, key_exists_at, key_missing, key_unchanged, put_op
from sparkcdc.server.etcd_store import ClusterKeys, EtcdMetaStore
from sparkcdc.model.changefeed import ChangefeedInfo
from sparkcdc.server.scheduler import (
    REPLICATING,
    RUNNABLE_STATES,
    STOPPING,
    Action,
    Assignment,
    CaptureView,
    ChangefeedView,
    plan,
)
from sparkcdc.server.session import Session

log = logging.getLogger(__name__)


class LocalRunner(Protocol):
    def start_or_retry_later(self, info: ChangefeedInfo) -> None: ...
    def stop(self, namespace: str, changefeed_id: str) -> None: ...
    def running(self) -> list[tuple[str, str]]: ...


@dataclass
class _Held:
    assignment_revision: int


class ClusterMember:
    def __init__(self, client: EtcdClient, store: EtcdMetaStore, capture_id: str,
                 capture_info: Callable[[], dict], session_ttl: int = 10, tick: float = 0.5):
        self.client = client
        self.store = store
        self.keys: ClusterKeys = store.keys
        self.capture_id = capture_id
        self._capture_info = capture_info
        self.session_ttl = session_ttl
        self.tick = tick
        self.session: Optional[Session] = None
        self._reported_lost_lease: Optional[int] = None
        self.election = OwnerElection(client, self.keys, capture_id)
        self._capture_revision = 0
        self._held: dict[tuple[str, str], _Held] = {}
        self._held_lock = threading.Lock()
        self._runner: Optional[LocalRunner] = None
        self._closed = threading.Event()
        self._threads: list[threading.Thread] = []

    # -- lifecycle -----------------------------------------------------------------------------
    def open(self, runner: LocalRunner) -> None:
        self._runner = runner
        self._register()
        for name, loop in (("processor", self._processor_loop), ("owner", self._owner_loop)):
            thread = threading.Thread(target=self._forever, args=(loop,), name=f"{name}-{self.capture_id[:8]}",
                                      daemon=True)
            thread.start()
            self._threads.append(thread)

    def close(self) -> None:
        """Stop the loops and revoke the lease, so others take over at once, not after the TTL."""
        self._closed.set()
        for thread in self._threads:
            thread.join(timeout=30)
        self._stop_all_local()
        if self.session is not None:
            self.session.close(revoke=True)

    def _register(self) -> None:
        session = Session(self.client, self.session_ttl).open()
        key = self.keys.capture(self.capture_id)
        value = json.dumps(self._capture_info(), sort_keys=True)
        # A fresh create revision per session: fences taken under an older session never match.
        self.client.txn([], [delete_op(key)])
        self.client.txn([key_missing(key)], [put_op(key, value, session.lease_id)])
        kv = self.client.get(key)
        self._capture_revision = kv.create_revision if kv is not None else 0
        self.session = session
        self.election.campaign(session.lease_id)
        log.info("capture %s registered with lease %x (ttl %ds)", self.capture_id, session.lease_id, session.ttl)

    def _forever(self, loop: Callable[[], None]) -> None:
        while not self._closed.wait(self.tick):
            try:
                loop()
            except SparkCDCError as exc:
                log.warning("%s: %s", threading.current_thread().name, exc)
            except Exception:
                log.exception("%s failed; retrying", threading.current_thread().name)

    # -- what others ask ---------------------------------------------------------------------------
    def session_valid(self) -> bool:
        return self.session is not None and self.session.valid()

    def is_owner(self) -> bool:
        return self.session_valid() and self.election.is_owner()

    def fence_for(self, namespace: str, changefeed_id: str) -> list[dict]:
        """Compares under which this capture may write the changefeed's metadata."""
        with self._held_lock:
            held = self._held.get((namespace, changefeed_id))
        if held is None or not self.session_valid():
            raise ErrCaptureFenced(
                f"capture {self.capture_id} does not hold changefeed {namespace}/{changefeed_id} "
                "(session expired or moved); it stops writing")
        return [key_exists_at(self.keys.capture(self.capture_id), self._capture_revision),
                key_unchanged(self.keys.assignment(namespace, changefeed_id), held.assignment_revision)]

    def captures(self) -> list[dict]:
        owner = self.election.owner_id()
        result = []
        for kv in self.client.get_prefix(self.keys.capture()):
            info = kv.json()
            result.append({"id": info["id"], "is_owner": info["id"] == owner, "address": info.get("address", ""),
                           "cluster_id": self.keys.cluster_id})
        return result

    def assignments(self) -> dict[tuple[str, str], Assignment]:
        result = {}
        for kv in self.client.get_prefix(self.keys.prefix):
            parsed = self.keys.parse_changefeed_key(kv.key)
            if parsed and parsed[1] == "task/assignment":
                document = kv.json()
                result[(parsed[0], parsed[2])] = Assignment(document["capture_id"], document["state"], kv.mod_revision)
        return result

    def drain(self, capture_id: str) -> int:
        """Ask the owner to move every changefeed off `capture_id`; returns how many it runs."""
        if self.client.get(self.keys.capture(capture_id)) is None:
            raise ErrChangefeedNotExists(f"capture {capture_id} is not alive; `sparkcdc cli capture list` shows them")
        self.client.put(self.keys.drain(capture_id), str(int(time.time())))
        return sum(1 for a in self.assignments().values() if a.capture_id == capture_id)

    def resign(self) -> bool:
        """Give up ownership; this capture queues again behind the others on its next tick."""
        return self.election.resign()

    # -- processor -------------------------------------------------------------------------------
    def _stop_all_local(self) -> None:
        if self._runner is not None:
            for namespace, changefeed_id in self._runner.running():
                self._stop_local(namespace, changefeed_id)
        with self._held_lock:
            self._held.clear()

    def _stop_local(self, namespace: str, changefeed_id: str) -> None:
        """Stop a changefeed here. It is let go only once stopped: the batch in flight finishes
        during the stop, and its checkpoint must still pass the fence, or the capture that takes
        over replays a batch already downstream (rows of a table without a key twice). A capture
        that lost its session or the assignment is fenced by etcd's compares all the same."""
        try:
            self._runner.stop(namespace, changefeed_id)
        except Exception:
            log.exception("stopping changefeed %s/%s failed", namespace, changefeed_id)
        finally:
            with self._held_lock:
                self._held.pop((namespace, changefeed_id), None)

    def _processor_loop(self) -> None:
        if self.session is None or self.session.lost:
            if self.session is not None and self.session.lease_id != self._reported_lost_lease:
                # Said once per lost session, whether or not a changefeed was still running (one
                # that failed on etcd meanwhile is already stopped).
                self._reported_lost_lease = self.session.lease_id
                log.error("capture %s: lease %x: this capture lost its session; stopping its changefeeds "
                          "and registering again", self.capture_id, self.session.lease_id)
            self._stop_all_local()
            if self.session is not None:
                self.session.close(revoke=False)
            self._register()  # raises while etcd is unreachable; the loop retries
        mine = {key: a for key, a in self.assignments().items() if a.capture_id == self.capture_id}
        running = set(self._runner.running())
        for key in running:
            assignment = mine.get(key)
            with self._held_lock:
                held = self._held.get(key)
                if assignment is not None and assignment.state == STOPPING and held is not None:
                    # Moved away (a drain): the assignment stays this capture's until it deletes it
                    # below, so the last batch's checkpoint may still be written under it.
                    held = self._held[key] = _Held(assignment.mod_revision)
            if assignment is None or assignment.state != REPLICATING or held is None \
                    or held.assignment_revision != assignment.mod_revision:
                log.info("capture %s: changefeed %s/%s is no longer assigned here; stopping it", self.capture_id, *key)
                self._stop_local(*key)
        running = set(self._runner.running())
        fence = [key_exists_at(self.keys.capture(self.capture_id), self._capture_revision)]
        for key, assignment in sorted(mine.items()):
            if not self.session_valid():
                return
            if assignment.state == STOPPING:
                if key not in running:
                    self.client.txn([key_unchanged(self.keys.assignment(*key), assignment.mod_revision), *fence],
                                    [delete_op(self.keys.assignment(*key))])
                continue
            if key in running:
                continue
            try:
                info = self.store.get_changefeed(*key)
            except ErrChangefeedNotExists:
                continue
            if info.state not in RUNNABLE_STATES:
                continue
            with self._held_lock:
                self._held[key] = _Held(assignment.mod_revision)
            # A start that fails (the upstream is down) shows on the changefeed and is retried by
            # the runner, which holds it meanwhile (running() lists it).
            self._runner.start_or_retry_later(info)
            log.info("capture %s: started changefeed %s/%s", self.capture_id, *key)

    # -- owner -----------------------------------------------------------------------------------
    def _owner_loop(self) -> None:
        if not self.session_valid():
            return
        if not self.election.in_queue():
            self.election.campaign(self.session.lease_id)
        if not self.election.is_owner():
            return
        captures = self.client.get_prefix(self.keys.capture())
        alive = {kv.json()["id"]: kv.json() for kv in captures}
        draining = {kv.key.rsplit("/", 1)[1] for kv in self.client.get_prefix(self.keys.drain())}
        views = [CaptureView(cid, cid in draining, info.get("index-start-position", ""), info.get("index-start-gtid", ""))
                 for cid, info in alive.items()]
        assignments = self.assignments()
        feeds = []
        for info in self.store.list_changefeeds():
            position = gtid = ""
            if info.state in RUNNABLE_STATES and (info.namespace, info.id) not in assignments:
                try:
                    status = self.store.get_status(info.namespace, info.id)
                except ErrChangefeedNotExists:
                    continue
                position, gtid = status.checkpoint_position, status.checkpoint_gtid
            feeds.append(ChangefeedView(info.namespace, info.id, info.state, position, gtid))
        fence = self.election.fence()
        for action in plan(views, feeds, assignments):
            self._apply(action, fence)
        for capture_id in draining - set(alive):
            self.client.txn(fence, [delete_op(self.keys.drain(capture_id))])

    def _apply(self, action: Action, fence: list[dict]) -> None:
        key = self.keys.assignment(action.namespace, action.changefeed_id)
        if action.kind == "assign":
            value = json.dumps({"capture_id": action.capture_id, "state": REPLICATING})
            ok, _ = self.client.txn([key_missing(key), *fence], [put_op(key, value)])
        elif action.kind == "stop":
            value = json.dumps({"capture_id": action.capture_id, "state": STOPPING})
            ok, _ = self.client.txn([key_unchanged(key, action.mod_revision), *fence], [put_op(key, value)])
        else:
            ok, _ = self.client.txn([key_unchanged(key, action.mod_revision), *fence], [delete_op(key)])
        log.info("owner %s: %s %s/%s -> %s%s", self.capture_id, action.kind, action.namespace,
                 action.changefeed_id, action.capture_id, "" if ok else " (skipped: state moved)")


def capture_info_document(capture_id: str, address: str, index_start: str, version: str,
                          index_start_gtid: str = "") -> dict:
    """TiCDC's CaptureInfo, plus where this capture's transaction index begins (binlog position
    and GTID state)."""
    return {"id": capture_id, "address": address, "version": version, "git-hash": "",
            "deploy-path": os.path.abspath(os.getcwd()), "start-timestamp": int(time.time()),
            "index-start-position": index_start, "index-start-gtid": index_start_gtid}
