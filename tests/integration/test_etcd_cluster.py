"""The etcd metadata layer against a real etcd (Debian's etcd-server): the store has the SQLite
store's semantics, sessions self-fence, the owner election fails over, and fenced writes from a
capture that lost its lease or its assignment are refused."""

from __future__ import annotations

import threading
import time
from dataclasses import replace

import pytest

from sparkcdc.errors import ErrCaptureFenced, ErrChangefeedAlreadyExists, ErrChangefeedNotExists, ErrEtcdUnavailable
from sparkcdc.model.position import BinlogPosition
from sparkcdc.server.capture_store import CaptureStoreView
from sparkcdc.server.cluster import ClusterMember, capture_info_document
from sparkcdc.server.election.owner import OwnerElection
from sparkcdc.server.etcd_client import EtcdClient, key_exists_at
from sparkcdc.server.etcd_store import ClusterKeys, EtcdMetaStore
from sparkcdc.model.changefeed import ChangefeedInfo, ChangefeedStatus
from sparkcdc.server.session import Session
from sparkcdc.testing.etcd import EtcdServer, etcd_binary
from sparkcdc.upstream.txn_index import TxnIndex, TxnRecord

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(etcd_binary() is None, reason="etcd-server is not installed (scripts/setup.sh)")]


@pytest.fixture
def etcd(tmp_path):
    server = EtcdServer(str(tmp_path / "etcd")).start()
    yield server
    server.stop()


@pytest.fixture
def client(etcd):
    return EtcdClient(etcd.endpoint, timeout=2.0)


def make_info(changefeed_id="cf-1", namespace="default", state="normal"):
    return ChangefeedInfo(namespace=namespace, id=changefeed_id, upstream_id=0, sink_uri="blackhole://",
                          create_time="2024-01-01T00:00:00.000+00:00", start_ts=100, target_ts=0,
                          state=state, error=None, config={"memory_quota": 1}, creator_version="0.1.0")


def wait_until(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def test_store_has_the_sqlite_stores_semantics_under_ticdc_keys(client):
    store = EtcdMetaStore(client, "c1")
    store.create_changefeed(make_info(), ChangefeedStatus(100, 100))
    store.create_changefeed(make_info("cf-2", namespace="other"), ChangefeedStatus(5, 5))
    assert store.get_changefeed("default", "cf-1") == make_info()
    assert [i.id for i in store.list_changefeeds()] == ["cf-1", "cf-2"]
    assert [i.id for i in store.list_changefeeds("other")] == ["cf-2"]
    assert client.get("/tidb/cdc/c1/default/changefeed/info/cf-1").json()["sink_uri"] == "blackhole://"
    assert client.get("/tidb/cdc/c1/default/changefeed/status/cf-1").json()["checkpoint_ts"] == 100
    assert client.get("/tidb/cdc/c1/__cdc_meta__/meta/meta-version").value == b"1"
    with pytest.raises(ErrChangefeedAlreadyExists):
        store.create_changefeed(make_info(), ChangefeedStatus(1, 1))
    store.advance_checkpoint("default", "cf-1", 200, 300)
    store.advance_checkpoint("default", "cf-1", 150, 250)
    assert store.get_status("default", "cf-1") == ChangefeedStatus(200, 300)
    store.set_checkpoint("default", "cf-1", 50)
    assert store.get_status("default", "cf-1").checkpoint_ts == 50
    store.update_changefeed(make_info(state="failed"))
    assert store.get_changefeed("default", "cf-1").state == "failed"
    store.delete_changefeed("default", "cf-1")
    for call in (lambda: store.get_changefeed("default", "cf-1"), lambda: store.get_status("default", "cf-1"),
                 lambda: store.delete_changefeed("default", "cf-1"), lambda: store.update_changefeed(make_info()),
                 lambda: store.advance_checkpoint("default", "cf-1", 1, 1)):
        with pytest.raises(ErrChangefeedNotExists):
            call()


def test_concurrent_checkpoint_advances_keep_the_maximum(client):
    store = EtcdMetaStore(client)
    store.create_changefeed(make_info(), ChangefeedStatus(0, 0))
    threads = [threading.Thread(target=lambda n=n: [store.advance_checkpoint("default", "cf-1", n * 100 + i, 0)
                                                    for i in range(10)]) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert store.get_status("default", "cf-1").checkpoint_ts == 309


def test_checkpoint_position_decides_across_captures(client):
    """Two captures' indexes give the same transaction different commit-ts: positions order them."""
    store = EtcdMetaStore(client)
    store.create_changefeed(make_info(), ChangefeedStatus(1000, 1000, checkpoint_position="mysql-bin.000001:100"))
    store.advance_checkpoint("default", "cf-1", 5000, 5000, checkpoint_position="mysql-bin.000001:900")
    # Another capture with smaller commit-ts values, further along in the binlog, wins.
    store.advance_checkpoint("default", "cf-1", 4000, 4000, checkpoint_position="mysql-bin.000002:120")
    assert store.get_status("default", "cf-1").checkpoint_position == "mysql-bin.000002:120"
    assert store.get_status("default", "cf-1").checkpoint_ts == 4000
    # An older position never moves it back, whatever its commit-ts.
    store.advance_checkpoint("default", "cf-1", 9000, 9000, checkpoint_position="mysql-bin.000001:900")
    assert store.get_status("default", "cf-1").checkpoint_position == "mysql-bin.000002:120"


def _index(path, first_ts, offsets):
    """An index over the same binlog as another capture's, with different commit-ts values."""
    index = TxnIndex(path)
    index.bootstrap(BinlogPosition("mysql-bin.000001", 100), first_ts, [])
    ends = [200, 300, 400]
    starts = [100, 200, 300]
    index.append([TxnRecord(first_ts + off, f"0-1-{n + 1}", BinlogPosition("mysql-bin.000001", s),
                            BinlogPosition("mysql-bin.000001", e), e - s, False)
                  for n, (s, e, off) in enumerate(zip(starts, ends, offsets))], [], [], first_ts + offsets[-1] + 50)
    return index


def test_a_checkpoint_means_the_same_transaction_on_every_capture(client, tmp_path):
    store = EtcdMetaStore(client)
    a = _index(str(tmp_path / "a.sqlite"), 10_000, [1, 2, 10])
    b = _index(str(tmp_path / "b.sqlite"), 20_000, [7, 9, 30])
    view_a = CaptureStoreView(store, a.path, fence_for=lambda ns, cf: [])
    view_b = CaptureStoreView(store, b.path, fence_for=lambda ns, cf: [])
    view_a.create_changefeed(make_info(), ChangefeedStatus(10_000, 10_000))
    # Capture a wrote everything up to its second transaction, plus a heartbeat beyond it.
    view_a.advance_checkpoint("default", "cf-1", 10_002 + 1, 10_003)
    assert store.get_status("default", "cf-1").checkpoint_position == "mysql-bin.000001:300"
    # Capture b resumes right after that same transaction (0-1-2), in its own commit-ts.
    assert view_b.get_status("default", "cf-1").checkpoint_ts == 20_009
    assert view_a.get_status("default", "cf-1").checkpoint_ts == 10_002
    # A position this index never saw as a boundary (e.g. another index's start) maps to the
    # last transaction before it.
    assert view_b.local_ts("mysql-bin.000001:350") == 20_009


def test_session_self_fences_before_etcd_can_expire_the_lease(etcd, client):
    session = Session(client, ttl=3, margin=1.0).open()
    time.sleep(2.5)  # keepalives keep it valid past one TTL
    assert session.valid()
    etcd.pause()
    try:
        stopped = time.monotonic()
        wait_until(lambda: not session.valid(), 5, "the session to give up")
        # It gave up before the server-side TTL (3 s from the last refresh) could pass.
        assert time.monotonic() - stopped < 3.0
    finally:
        etcd.resume()
    with pytest.raises(ErrEtcdUnavailable):
        EtcdClient("http://127.0.0.1:1", timeout=0.5).get("/x")


def test_owner_election_fails_over_and_fences_the_deposed_owner(client):
    keys = ClusterKeys("default")
    first, second = Session(client, ttl=2).open(), Session(client, ttl=2).open()
    one, two = OwnerElection(client, keys, "one"), OwnerElection(client, keys, "two")
    one.campaign(first.lease_id)
    two.campaign(second.lease_id)
    assert one.is_owner() and not two.is_owner() and two.owner_id() == "one"
    fence = one.fence()
    assert client.txn(fence, [])[0]
    first.close(revoke=False)  # a crash: the lease is no longer kept alive
    wait_until(two.is_owner, 10, "the second capture to become owner")
    assert not client.txn(fence, [])[0], "a deposed owner's writes must fail"
    # Resign hands over to the next in line.
    third = Session(client, ttl=5).open()
    three = OwnerElection(client, keys, "three")
    three.campaign(third.lease_id)
    assert two.resign() and three.is_owner()
    for s in (second, third):
        s.close()


class FakeRunner:
    def __init__(self):
        self.started: list[tuple[str, str]] = []
        self._running: set[tuple[str, str]] = set()

    def start_or_retry_later(self, info):
        self.started.append((info.namespace, info.id))
        self._running.add((info.namespace, info.id))

    def stop(self, namespace, changefeed_id):
        self._running.discard((namespace, changefeed_id))

    def running(self):
        return sorted(self._running)


def _member(client, name, ttl=3):
    store = EtcdMetaStore(client)
    member = ClusterMember(client, store, name, lambda: capture_info_document(name, f"{name}:8300", "", "t"),
                           session_ttl=ttl, tick=0.2)
    runner = FakeRunner()
    member.open(runner)
    return member, runner, store


def test_changefeeds_are_assigned_failed_over_drained_and_fenced(client):
    a, runner_a, store = _member(client, "a")
    b, runner_b, _ = _member(client, "b")
    try:
        wait_until(a.is_owner, 5, "a to be owner")
        store.create_changefeed(make_info("f1"), ChangefeedStatus(1, 1))
        store.create_changefeed(make_info("f2"), ChangefeedStatus(1, 1))
        wait_until(lambda: runner_a.running() and runner_b.running(), 10, "one changefeed on each capture")
        assert {c["id"]: c["is_owner"] for c in a.captures()} == {"a": True, "b": False}
        (on_b,) = runner_b.running()
        fence = b.fence_for(*on_b)
        assert client.txn(fence, [])[0]

        # Drain b: its changefeed moves to a, and b's old fence stops holding.
        assert b.drain("b") == 1
        wait_until(lambda: not runner_b.running() and len(runner_a.running()) == 2, 10, "the drain")
        assert not client.txn(fence, [])[0]
        with pytest.raises(ErrCaptureFenced):
            b.fence_for(*on_b)

        # Crash the owner a (no lease revoke, loops stop): b becomes owner and takes both.
        a._closed.set()
        for t in a._threads:
            t.join()
        a.session.close(revoke=False)
        client.delete(a.keys.drain("b"))  # b is back in service
        started = time.monotonic()
        wait_until(lambda: len(runner_b.running()) == 2, 15, "failover to b")
        assert time.monotonic() - started < 3 + 5
        assert b.is_owner()
        # A fence taken under a's session no longer passes, so a's late checkpoint writes fail.
        stale = [key_exists_at(a.keys.capture("a"), a._capture_revision)]
        assert not client.txn(stale, [])[0]

        # Pausing removes the assignment and b stops it.
        info = store.get_changefeed("default", "f1")
        info.state = "stopped"
        store.update_changefeed(info)
        wait_until(lambda: runner_b.running() == [("default", "f2")], 5, "b to stop the paused changefeed")
    finally:
        for member in (a, b):
            member.close()


class CheckpointingRunner(FakeRunner):
    """A runner whose stop writes one last checkpoint through the member's fence, as the batch in
    flight does when a changefeed stops at rest; records whether etcd took it."""

    def __init__(self, client):
        super().__init__()
        self.client, self.member, self.last_write = client, None, {}

    def stop(self, namespace, changefeed_id):
        try:
            self.last_write[changefeed_id] = self.client.txn(self.member.fence_for(namespace, changefeed_id), [])[0]
        except ErrCaptureFenced:
            self.last_write[changefeed_id] = False
        super().stop(namespace, changefeed_id)


def test_a_changefeed_leaving_a_capture_writes_its_last_checkpoint(client):
    """The batch in flight finishes while a changefeed stops: on a drain, a pause asked of another
    capture and a capture's shutdown its checkpoint must still pass the fence, or the next capture
    (or the resume) replays it."""
    members, runners = {}, {}
    for name in ("a", "b"):
        runners[name] = CheckpointingRunner(client)
        members[name] = ClusterMember(client, EtcdMetaStore(client), name,
                                      lambda name=name: capture_info_document(name, f"{name}:8300", "", "t"),
                                      session_ttl=3, tick=0.2)
        runners[name].member = members[name]
        members[name].open(runners[name])
    try:
        wait_until(lambda: len(members["a"].captures()) == 2, 5, "two captures")
        EtcdMetaStore(client).create_changefeed(make_info("f1"), ChangefeedStatus(1, 1))
        wait_until(lambda: runners["a"].running() or runners["b"].running(), 10, "f1 to start")
        first = "a" if runners["a"].running() else "b"
        other = "b" if first == "a" else "a"
        assert members[first].drain(first) == 1
        wait_until(lambda: runners[other].running(), 10, "the drain to move f1")
        assert runners[first].last_write == {"f1": True}
        store = EtcdMetaStore(client)
        store.update_changefeed(replace(store.get_changefeed("default", "f1"), state="stopped"))  # paused
        wait_until(lambda: not runners[other].running(), 10, "the pause to stop f1")
        assert runners[other].last_write == {"f1": True}
        wait_until(lambda: not members[other].assignments(), 10, "the capture to let go of f1")
        store.update_changefeed(replace(store.get_changefeed("default", "f1"), state="normal"))  # resumed
        wait_until(lambda: runners["a"].running() or runners["b"].running(), 10, "f1 to start again")
        last = "a" if runners["a"].running() else "b"
        runners[last].last_write.clear()
        members[last].close()
        assert runners[last].last_write == {"f1": True}
    finally:
        for member in members.values():
            member.close()


def test_checkpoint_gtid_decides_across_a_failover(client):
    """After a failover positions are another server's (mysql-bin.000001 again); the GTID state
    orders checkpoints, so none moves back (docs/failover.md)."""
    store = EtcdMetaStore(client)
    store.create_changefeed(make_info(), ChangefeedStatus(1000, 1000, checkpoint_position="mysql-bin.000007:100",
                                                          checkpoint_gtid="0-1-70"))
    store.advance_checkpoint("default", "cf-1", 4000, 4000, checkpoint_position="mysql-bin.000001:500",
                             checkpoint_gtid="0-2-75")
    assert (store.get_status("default", "cf-1").checkpoint_gtid, store.get_status("default", "cf-1").checkpoint_ts) \
        == ("0-2-75", 4000)
    store.advance_checkpoint("default", "cf-1", 9000, 9000, checkpoint_position="mysql-bin.000009:100",
                             checkpoint_gtid="0-1-70")
    assert store.get_status("default", "cf-1").checkpoint_gtid == "0-2-75", "an older GTID state never moves it back"


def test_after_a_failover_a_checkpoint_means_the_same_transaction_on_every_capture(client, tmp_path):
    """Capture a followed a failover (its positions are the new primary's), b not yet: b still
    resumes right after the same transaction, found by the checkpoint's GTID state."""
    from sparkcdc.model.gtid import parse_state
    from sparkcdc.upstream.txn_index import Remapped

    store = EtcdMetaStore(client)
    a = _index(str(tmp_path / "a.sqlite"), 10_000, [1, 2, 10])
    b = _index(str(tmp_path / "b.sqlite"), 20_000, [7, 9, 30])
    for index in (a, b):
        index.set_start_gtid(parse_state("0-1-0"))
        index.record_source("db1", 3306, 1, None, "mariadb", new_epoch=False)
    epoch = a.record_source("db2", 3306, 2, None, "mariadb", new_epoch=True).epoch
    a.remap(epoch, [Remapped(10_000 + off, BinlogPosition("mysql-bin.000001", 1000 + 50 * n),
                             BinlogPosition("mysql-bin.000001", 1050 + 50 * n), (), n == 0)
                    for n, off in enumerate([1, 2, 10])])
    view_a = CaptureStoreView(store, a.path, fence_for=lambda ns, cf: [])
    view_b = CaptureStoreView(store, b.path, fence_for=lambda ns, cf: [])
    view_a.create_changefeed(make_info(), ChangefeedStatus(10_000, 10_000))
    view_a.advance_checkpoint("default", "cf-1", 10_002, 10_003)
    status = store.get_status("default", "cf-1")
    assert (status.checkpoint_gtid, status.checkpoint_position) == ("0-1-2", "mysql-bin.000001:1100")
    # b's index has no transaction ending at that position of the new primary (its own 0-1-2
    # ends at mysql-bin.000001:300 of the old one): the GTID state finds it.
    assert view_b.get_status("default", "cf-1").checkpoint_ts == 20_009
