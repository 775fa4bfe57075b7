import threading

import pytest

from sparkcdc.errors import ErrChangefeedAlreadyExists, ErrChangefeedNotExists
from sparkcdc.model.changefeed import ChangefeedInfo, ChangefeedStatus
from sparkcdc.server.metastore import MetaStore


def make_info(changefeed_id="cf-1", namespace="default", state="normal"):
    return ChangefeedInfo(namespace=namespace, id=changefeed_id, upstream_id=0, sink_uri="blackhole://",
                          create_time="2024-01-01T00:00:00.000+00:00", start_ts=100, target_ts=0,
                          state=state, error=None, config={"memory_quota": 1}, creator_version="0.1.0")


@pytest.fixture
def store(tmp_path):
    return MetaStore(str(tmp_path / "meta.sqlite"))


def test_create_get_list_update_delete(store):
    store.create_changefeed(make_info(), ChangefeedStatus(100, 100))
    store.create_changefeed(make_info("cf-2", namespace="other"), ChangefeedStatus(5, 5))
    assert store.get_changefeed("default", "cf-1") == make_info()
    assert [i.id for i in store.list_changefeeds()] == ["cf-1", "cf-2"]
    assert [i.id for i in store.list_changefeeds("other")] == ["cf-2"]
    with pytest.raises(ErrChangefeedAlreadyExists):
        store.create_changefeed(make_info(), ChangefeedStatus(1, 1))
    failed = make_info(state="failed")
    failed.error = {"addr": "a", "code": "C", "message": "m", "time": "t"}
    store.update_changefeed(failed)
    assert store.get_changefeed("default", "cf-1").error["code"] == "C"
    store.delete_changefeed("default", "cf-1")
    for call in (lambda: store.get_changefeed("default", "cf-1"), lambda: store.get_status("default", "cf-1"),
                 lambda: store.delete_changefeed("default", "cf-1"),
                 lambda: store.update_changefeed(make_info()),
                 lambda: store.advance_checkpoint("default", "cf-1", 1, 1),
                 lambda: store.set_checkpoint("default", "cf-1", 1)):
        with pytest.raises(ErrChangefeedNotExists):
            call()


def test_checkpoint_never_moves_backwards_unless_overwritten(store):
    store.create_changefeed(make_info(), ChangefeedStatus(100, 100))
    store.advance_checkpoint("default", "cf-1", 200, 300)
    store.advance_checkpoint("default", "cf-1", 150, 250)
    assert store.get_status("default", "cf-1") == ChangefeedStatus(200, 300)
    store.set_checkpoint("default", "cf-1", 50)
    assert store.get_status("default", "cf-1").checkpoint_ts == 50
    # TiCDC's ResumeChangefeed: the overwritten checkpoint is also the barrier, so the DDL at it
    # runs again (pipeline/runner.py replay_start); moving on leaves the barrier behind.
    assert store.get_status("default", "cf-1").min_table_barrier_ts == 50
    store.advance_checkpoint("default", "cf-1", 60, 60)
    assert store.get_status("default", "cf-1").min_table_barrier_ts == 50


def test_a_start_at_an_overwritten_checkpoint_replays_the_ddl_there():
    from sparkcdc.pipeline.runner import replay_start

    class Index:  # the one TxnIndex query replay_start makes
        def ddls_between(self, lo_exclusive, hi_inclusive):
            return [ts for ts in (40, 50) if lo_exclusive < ts <= hi_inclusive]

    assert replay_start(ChangefeedStatus(50, 50, min_table_barrier_ts=50), Index()) == 49
    assert replay_start(ChangefeedStatus(50, 50, min_table_barrier_ts=0), Index()) == 50  # a plain restart
    assert replay_start(ChangefeedStatus(45, 45, min_table_barrier_ts=45), Index()) == 45  # no DDL at 45


def test_keys_follow_ticdc_etcd_layout(store):
    import sqlite3
    store.create_changefeed(make_info(), ChangefeedStatus(1, 1))
    keys = {row[0] for row in sqlite3.connect(store.path).execute("SELECT key FROM meta")}
    assert keys == {"/tidb/cdc/default/default/changefeed/info/cf-1",
                    "/tidb/cdc/default/default/changefeed/status/cf-1"}


def test_two_threads_and_a_second_store_on_the_same_file(store, tmp_path):
    store.create_changefeed(make_info(), ChangefeedStatus(0, 0))
    other = MetaStore(store.path)
    failures = []

    def advance(meta, offset):
        try:
            for ts in range(offset, 400, 2):
                meta.advance_checkpoint("default", "cf-1", ts, ts)
        except Exception as exc:  # pragma: no cover - reported below
            failures.append(exc)

    threads = [threading.Thread(target=advance, args=(store, 1)), threading.Thread(target=advance, args=(other, 2))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures
    assert store.get_status("default", "cf-1").checkpoint_ts == 399
