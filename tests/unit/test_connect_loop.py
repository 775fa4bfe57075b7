"""Spark Connect mode without a server: the --spark-remote checks, the batch plan that travels in
the read's option, and the capture-side loop that plans and writes the batches."""

from __future__ import annotations

import argparse
import base64
import re
import threading

import pyarrow as pa
import pytest

from sparkcdc.cli.server_cmd import _spark_mode
from sparkcdc.errors import ErrSparkRemoteInvalid
from sparkcdc.model.events import ColumnInfo, TableInfo
from sparkcdc.pipeline.connect_loop import (
    ConnectBatchLoop,
    masked_remote,
    trigger_seconds,
    validate_spark_remote,
)
from sparkcdc.model.change_batch import RANGE_MARKER
from sparkcdc.pipeline.source import BATCH_SOURCE_NAME
from sparkcdc.pipeline.stream_reader import BinlogStreamReader, PlannedBinlogReader
from sparkcdc.pipeline.planning import (PASSWORD_OPTION, PLAN_OPTION, BatchPlan, MarkerPartition, RangePartition,
                                        SourceOptions, batch_marker, plan_partitions)
from sparkcdc.pipeline.transport import unpack_changes

from test_pipeline_planning import FakeIndex, txn

KEYED = TableInfo("db", "keyed", 1, (ColumnInfo("id", "int", nullable=False, is_primary_key=True),), 1, ("id",))


class TablesIndex(FakeIndex):
    def tables_at(self, ts):
        return self.tables


def options(**overrides) -> SourceOptions:
    values = dict(index_path="unused", upstream_uri="mysql://cdc:s3cret-pw@db:3306/", start_ts=5, parallelism=2,
                  server_id_base=500)
    values.update(overrides)
    return SourceOptions(**values)


# -- --spark-remote at the edge ------------------------------------------------------------------

@pytest.mark.parametrize("url", ["sc://127.0.0.1:15002", "sc://spark-connect", "sc://h:1/;token=abc;use_ssl=true"])
def test_spark_connect_urls_are_accepted(url):
    assert validate_spark_remote(url) == url


@pytest.mark.parametrize("url", ["spark://h:7077", "sc//h:1", "", "http://h:15002", "sc://h:port", "sc://h:1 x"])
def test_other_urls_are_refused_with_the_fix(url):
    with pytest.raises(ErrSparkRemoteInvalid, match=r"give sc://host:port"):
        validate_spark_remote(url)


def test_a_refused_url_does_not_echo_its_token():
    with pytest.raises(ErrSparkRemoteInvalid) as error:
        validate_spark_remote("sc://h:x/;token=s3cret")
    assert "s3cret" not in str(error.value)
    assert masked_remote("sc://h:1/;token=s3cret") == "sc://h:1"


def args(master=None, remote=None) -> argparse.Namespace:
    return argparse.Namespace(spark_master=master, spark_remote=remote, spark_conf=[])


def test_spark_master_and_spark_remote_exclude_each_other():
    assert _spark_mode(args()) == ("local[*]", "")
    assert _spark_mode(args(master="spark://h:7077")) == ("spark://h:7077", "")
    assert _spark_mode(args(remote="sc://h:15002")) == ("local[*]", "sc://h:15002")
    with pytest.raises(ErrSparkRemoteInvalid, match="exclude each other"):
        _spark_mode(args(master="local[2]", remote="sc://h:15002"))
    with pytest.raises(ErrSparkRemoteInvalid, match="not a Spark Connect URL"):
        _spark_mode(args(remote="spark://h:7077"))


def test_trigger_intervals():
    assert trigger_seconds("1 second") == 1.0
    assert trigger_seconds("500 milliseconds") == 0.5
    assert trigger_seconds("2 minutes") == 120.0
    with pytest.raises(ValueError, match="unit"):
        trigger_seconds("1 fortnight")


# -- the plan ------------------------------------------------------------------------------------

def test_the_loop_plans_the_partitions_the_stream_reader_plans():
    index = TablesIndex([txn(10), txn(20), txn(30, ddl=True), txn(40)], resolved=50, tables=[KEYED])
    planned = plan_partitions(index, options(), 5, 30, set())
    reader = BinlogStreamReader(options())
    reader._index = lambda: index
    assert reader.partitions({"ts": 5}, {"ts": 30}) == planned
    marker, read = batch_marker(planned)
    assert marker == MarkerPartition(5, 30) and planned[0].marker == marker
    ranges = [p.binlog_range for p in read]
    assert all(isinstance(p, RangePartition) for p in read)
    assert [r.commit_ts for r in ranges] == [(10,), (20,)]
    assert [r.server_id for r in ranges] == [500, 501]
    assert ranges[0].tables.get("db.keyed") == KEYED.to_json() and ranges[0].tables.get("db.other") is None
    assert ranges[0].tables is ranges[1].tables  # packed once for the batch
    assert plan_partitions(index, options(), 30, 30, set()) == []


def test_a_batch_read_in_one_range_is_one_read_task_and_a_batch_without_rows_its_marker_alone():
    # A marker of its own would be a second task, so a second Python worker on two cores.
    index = TablesIndex([txn(10), txn(20)], resolved=50, tables=[KEYED])
    (only,) = plan_partitions(index, options(parallelism=1), 5, 20, set())
    assert isinstance(only, RangePartition) and only.marker == MarkerPartition(5, 20)
    assert only.binlog_range.commit_ts == (10, 20)
    assert batch_marker([only]) == (MarkerPartition(5, 20), [RangePartition(only.binlog_range)])
    assert plan_partitions(index, options(), 20, 50, set()) == [MarkerPartition(20, 50)]
    assert batch_marker([RangePartition(only.binlog_range)]) == (None, [RangePartition(only.binlog_range)])


def test_a_plan_travels_as_an_option_and_reads_its_marker_on_the_server_side():
    index = TablesIndex([txn(10)], resolved=20, tables=[KEYED])
    plan = BatchPlan(options(), tuple(plan_partitions(index, options(), 5, 20, set())))
    read_options = plan.to_options()
    # The password travels beside the pickle, under a key Spark redacts (spark.redaction.regex).
    assert read_options[PASSWORD_OPTION] == "s3cret-pw" and re.search(r"(?i)secret|password", PASSWORD_OPTION)
    assert b"s3cret-pw" not in base64.b64decode(read_options[PLAN_OPTION])
    assert BatchPlan.from_options(read_options) == plan
    reader = PlannedBinlogReader(BatchPlan.from_options(read_options))
    assert reader.partitions() == list(plan.partitions)
    assert reader.partitions()[0].binlog_range.upstream.password == "s3cret-pw"
    [packed] = list(reader.read(batch_marker(reader.partitions())[0]))
    marker = unpack_changes(pa.Table.from_batches([packed]))
    assert marker.to_pylist() == [{"commit_ts": 20, "seq": 5, "schema_name": "", "table_name": "",
                                   "op": RANGE_MARKER, "before": None, "after": None}]


def test_a_plan_option_that_is_no_plan_is_refused():
    import pickle

    with pytest.raises(TypeError, match="not a BatchPlan"):
        BatchPlan.from_options({PLAN_OPTION: base64.b64encode(pickle.dumps({"a": 1})).decode()})


# -- the loop (a recording stand-in for the Connect session: the real one is in the e2e) --------

class Frame:
    def __init__(self, plan: BatchPlan):
        self.plan = plan


class RecordingSession:
    """Records the reads the loop asks for; `frame` is what load() returns."""

    def __init__(self):
        self.tags, self.interrupted, self.source, self.block = [], [], None, None

    def addTag(self, tag):
        self.tags.append(tag)

    def interruptTag(self, tag):
        self.interrupted.append(tag)
        if self.block is not None:
            self.block.set()

    @property
    def read(self):
        session = self

        class Reader:
            def format(self, name):
                session.source = name
                return self

            def options(self, **read_options):
                self.value = BatchPlan.from_options(read_options)
                return self

            def load(self):
                return Frame(self.value)

        return Reader()


def run_loop(index, write, session=None, interval=0.01, **option_overrides):
    session = session or RecordingSession()
    loop = ConnectBatchLoop(session, options(**option_overrides), index, write, interval, "changefeed-test")
    return session, loop.start()


def test_the_loop_runs_batch_after_batch_from_start_ts_and_skips_empty_triggers():
    index = TablesIndex([txn(10), txn(20, ddl=True), txn(30)], resolved=40, tables=[KEYED])
    seen, three = [], threading.Event()

    def write(frame, batch_id):
        seen.append((batch_id, batch_marker(frame.plan.partitions)[0]))
        if len(seen) == 2:
            index.txns.append(txn(50))
            index.resolved = 60
        if len(seen) == 3:
            three.set()

    session, loop = run_loop(index, write)
    assert three.wait(10)
    loop.stop()
    assert loop.awaitTermination(5)
    assert seen == [(0, MarkerPartition(5, 20)), (1, MarkerPartition(20, 40)), (2, MarkerPartition(40, 60))]
    assert session.source == BATCH_SOURCE_NAME and session.tags


def test_the_loop_stops_at_target_ts():
    index = TablesIndex([txn(10), txn(30)], resolved=40, tables=[KEYED])
    seen = []
    session, loop = run_loop(index, lambda frame, batch_id: seen.append(batch_marker(frame.plan.partitions)[0]),
                             target_ts=20)
    assert not loop.awaitTermination(0.3)  # it keeps triggering, with nothing past the target to read
    loop.stop()
    assert seen == [MarkerPartition(5, 20)]


def test_a_failed_batch_ends_the_loop_and_awaittermination_raises_it():
    index = TablesIndex([txn(10)], resolved=20, tables=[KEYED])

    def write(frame, batch_id):
        raise RuntimeError("[SPARKCDC:ErrMySQLConnectionError] downstream gone")

    _, loop = run_loop(index, write)
    with pytest.raises(RuntimeError, match="downstream gone"):
        loop.awaitTermination(5)


def test_stop_interrupts_the_read_in_flight_and_swallows_its_error():
    index = TablesIndex([txn(10)], resolved=20, tables=[KEYED])
    session = RecordingSession()
    session.block = threading.Event()
    started = threading.Event()

    def write(frame, batch_id):  # a toArrow() that runs until the server interrupts it
        started.set()
        session.block.wait(10)
        raise RuntimeError("OPERATION_CANCELED")

    _, loop = run_loop(index, write, session=session)
    assert started.wait(5)
    loop.stop()
    assert session.interrupted == session.tags
    assert loop.awaitTermination(5)  # stopped: no error


def test_an_unreachable_connect_server_is_a_clear_error_at_once():
    import time

    from sparkcdc.errors import ErrSparkRemoteUnreachable
    from sparkcdc.pipeline.connect_loop import make_connect_session
    from sparkcdc.testing.ports import free_port

    began = time.monotonic()
    with pytest.raises(ErrSparkRemoteUnreachable, match=r"cannot reach the Spark Connect server at sc://127.0.0.1:\d+ "):
        make_connect_session(f"sc://127.0.0.1:{free_port()}/;token=s3cret")
    assert time.monotonic() - began < 10


def test_a_lost_connect_server_is_retryable():
    from sparkcdc.pipeline.connect_loop import as_changefeed_error
    from sparkcdc.pipeline.failure import is_retryable_failure, user_message

    lost = RuntimeError('<_MultiThreadedRendezvous of RPC that terminated with:\n\tstatus = StatusCode.UNAVAILABLE\n'
                        '\tdetails = "failed to connect to all addresses; Connection refused"\n>')
    error = as_changefeed_error(lost)
    assert "Connection refused" in str(error) and is_retryable_failure(user_message(error))
    stopping = RuntimeError("(java.lang.IllegalStateException) Cannot call methods on a stopped SparkContext.")
    assert is_retryable_failure(user_message(as_changefeed_error(stopping)))
    other = ValueError("boom")
    assert as_changefeed_error(other) is other


def test_a_loop_that_lost_its_session_has_the_capture_open_a_new_one():
    from sparkcdc.errors import ErrSparkRemoteSessionLost
    from sparkcdc.pipeline.connect_loop import ConnectSession
    from sparkcdc.pipeline.failure import is_retryable_failure, user_message

    old, new = RecordingSession(), RecordingSession()
    old.stop = new.stop = lambda: None
    opened = [old, new]
    capture_session = ConnectSession("sc://h:1", open_session=lambda remote: opened.pop(0))
    index = TablesIndex([txn(10)], resolved=20, tables=[KEYED])

    def write(frame, batch_id):
        raise RuntimeError("[INVALID_HANDLE.SESSION_CHANGED] The existing Spark server driver instance has restarted.")

    _, loop = run_loop(index, write, session=capture_session)
    with pytest.raises(ErrSparkRemoteSessionLost, match="on a new session") as error:
        loop.awaitTermination(5)
    assert is_retryable_failure(user_message(error.value))
    assert capture_session.session is new and old.source == BATCH_SOURCE_NAME and new.source is None
    capture_session.renew(old)  # a second changefeed that saw the same session gone: nothing more to open
    assert capture_session.session is new and opened == []


@pytest.mark.parametrize("message", [
    "[INVALID_HANDLE.SESSION_CHANGED] The existing Spark server driver instance has restarted.",
    "[NO_ACTIVE_SESSION] No active Spark session found.",
    "Received incorrect server side session identifier for request. Please create a new Spark Session to reconnect.",
    "(org.apache.spark.SparkClassNotFoundException) [DATA_SOURCE_NOT_FOUND] Failed to find the data source: "
    "sparkcdc_binlog_batch. Make sure the provider name is correct",
])
def test_what_pyspark_says_about_a_forgotten_session(message):
    from sparkcdc.pipeline.connect_loop import is_session_lost

    assert is_session_lost(RuntimeError(message))
    assert not is_session_lost(RuntimeError("[SPARKCDC:ErrMySQLConnectionError] downstream gone"))


def test_a_changefeed_restart_after_a_server_restart_asks_a_new_session():
    from sparkcdc.errors import ErrSparkRemoteUnreachable
    from sparkcdc.pipeline.connect_loop import ConnectSession, connect_parallelism

    class PlanOnly:
        def __init__(self, error=None):
            self.error = error

        def stop(self):
            pass

        def range(self, start, end):
            session = self

            class Frame:
                def _explain_string(self):
                    if session.error:
                        raise session.error
                    return "*(1) Range (0, 1048576, step=1, splits=3)"

            return Frame()

    forgotten = PlanOnly(RuntimeError("[INVALID_HANDLE.SESSION_CHANGED] The server restarted."))
    opened = [forgotten, PlanOnly()]
    capture_session = ConnectSession("sc://h:1", open_session=lambda remote: opened.pop(0))
    assert connect_parallelism(capture_session) == 3 and opened == []
    down = PlanOnly(RuntimeError('status = StatusCode.UNAVAILABLE\n\tdetails = "Connection refused"'))
    with pytest.raises(ErrSparkRemoteUnreachable, match="Connection refused"):
        connect_parallelism(ConnectSession("sc://h:1", open_session=lambda remote: down))
