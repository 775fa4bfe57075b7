"""Background index DDLs (TiDB downstream): the waiting rules, with a fake DDL executor whose
builds the test finishes by hand."""

from __future__ import annotations

import threading

import pytest

from sparkcdc.model.events import DDLEvent
from sparkcdc.sink.mysql.async_ddl import AsyncIndexBuilds, touched_objects


def event(ts: int, schema: str, table: str, query: str, ddl_type: str, **extra) -> DDLEvent:
    return DDLEvent(commit_ts=ts, schema=schema, table=table, query=query, ddl_type=ddl_type, extra=extra)


ADD_INDEX = event(1, "db", "t", "CREATE INDEX ix ON t (v)", "create index")


class FakeDownstream:
    """Runs DDLs; an index DDL blocks until the test releases it (or fails it)."""

    def __init__(self):
        self.executed: list[int] = []
        self.release = threading.Event()
        self.started = threading.Event()
        self.fail_with: BaseException | None = None

    def execute(self, ddl: DDLEvent) -> None:
        if ddl.ddl_type == "create index":
            self.started.set()
            self.release.wait(10)
            if self.fail_with is not None:
                raise self.fail_with
        self.executed.append(ddl.commit_ts)


def run_in_thread(action) -> threading.Thread:
    thread = threading.Thread(target=action, daemon=True)
    thread.start()
    return thread


def test_an_index_that_finishes_within_the_grace_period_is_synchronous():
    downstream = FakeDownstream()
    downstream.release.set()
    builds = AsyncIndexBuilds(downstream.execute, grace=5.0)
    builds.start(ADD_INDEX)
    assert downstream.executed == [1] and builds.running() == []


def test_an_error_within_the_grace_period_is_raised():
    downstream = FakeDownstream()
    downstream.fail_with = RuntimeError("bad index")
    downstream.release.set()
    with pytest.raises(RuntimeError, match="bad index"):
        AsyncIndexBuilds(downstream.execute, grace=5.0).start(ADD_INDEX)


def test_a_long_build_returns_after_the_grace_and_blocks_only_ddls_on_its_table():
    downstream = FakeDownstream()
    builds = AsyncIndexBuilds(downstream.execute, grace=0.05)
    builds.start(ADD_INDEX)  # returns while the build runs: the changefeed moves on
    assert downstream.started.is_set() and builds.running() == [ADD_INDEX]

    other_table = event(2, "db", "u", "ALTER TABLE u ADD COLUMN c INT", "add column")
    other_db_same_name = event(3, "db2", "t", "DROP TABLE t", "drop table")
    for ddl in (other_table, other_db_same_name, event(4, "db2", "", "DROP DATABASE db2", "drop database")):
        builds.wait_before(ddl)  # returns at once
        downstream.execute(ddl)
    assert downstream.executed == [2, 3, 4]

    same_table = event(5, "db", "t", "ALTER TABLE t ADD COLUMN c INT", "add column")
    waiter = run_in_thread(lambda: (builds.wait_before(same_table), downstream.execute(same_table)))
    waiter.join(0.3)
    assert waiter.is_alive() and downstream.executed == [2, 3, 4]  # still waiting for the index
    downstream.release.set()
    waiter.join(5)
    assert not waiter.is_alive() and downstream.executed == [2, 3, 4, 1, 5]  # the index first, then the DDL
    assert builds.running() == []


@pytest.mark.parametrize("later", [
    event(6, "db", "t2", "RENAME TABLE t TO t2", "rename table", renames=[["db", "t", "db", "t2"]]),
    event(6, "db", "x", "DROP TABLE x, t", "drop table", tables=[["db", "x"], ["db", "t"]]),
    event(6, "db", "t", "TRUNCATE TABLE t", "truncate table"),
    event(6, "db", "t", "CREATE INDEX ix2 ON t (w)", "create index"),
    event(6, "db", "", "DROP DATABASE db", "drop database"),
])
def test_rename_drop_truncate_another_index_and_drop_database_wait(later):
    downstream = FakeDownstream()
    builds = AsyncIndexBuilds(downstream.execute, grace=0.05)
    builds.start(ADD_INDEX)
    waiter = run_in_thread(lambda: builds.wait_before(later))
    waiter.join(0.2)
    assert waiter.is_alive()
    downstream.release.set()
    waiter.join(5)
    assert not waiter.is_alive()


def test_a_build_failing_after_the_grace_is_logged_not_raised(caplog):
    downstream = FakeDownstream()
    downstream.fail_with = RuntimeError("duplicate entry for the new unique key")
    builds = AsyncIndexBuilds(downstream.execute, grace=0.05)
    builds.start(ADD_INDEX)
    downstream.release.set()
    builds.wait_before(event(2, "db", "t", "ALTER TABLE t ADD COLUMN c INT", "add column"))
    assert "index is missing downstream" in caplog.text and "duplicate entry" in caplog.text


def test_index_jobs_the_sink_did_not_start_are_polled_on_the_server():
    answers = iter([True, True, False])
    asked, slept = [], []

    def running(schema: str, table: str) -> bool:
        asked.append((schema, table))
        return next(answers)

    builds = AsyncIndexBuilds(FakeDownstream().execute, server_job_running=running, poll_interval=5.0,
                              sleep=slept.append)
    builds.wait_before(event(2, "db", "t", "ALTER TABLE t ADD COLUMN c INT", "add column"))
    assert asked == [("db", "t")] * 3 and slept == [5.0, 5.0]


def test_touched_objects():
    rename = event(1, "b", "new", "RENAME TABLE a.old TO b.new", "rename table", renames=[["a", "old", "b", "new"]])
    assert touched_objects(rename).tables == {("a", "old"), ("b", "new")}
    dropped_db = touched_objects(event(1, "db", "", "DROP DATABASE db", "drop database"))
    assert dropped_db.covers("db", "anything") and not dropped_db.covers("db2", "t")
