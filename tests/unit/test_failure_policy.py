"""The changefeed failure policy (pipeline/failure.py, errors.py `retryable`): which failures pass
by themselves, and the one line a user sees of a failure that crossed Spark."""

from __future__ import annotations

import pytest

from sparkcdc import errors
from sparkcdc.pipeline.failure import error_code, is_retryable_failure, is_upstream_failure, user_message

# What a failed read task looks like by the time the query's exception reaches the runner.
SPARK_TRACE = """[STREAM_FAILED] Query [id = 4f1c, runId = 9a2e] terminated with exception: Job aborted due to stage failure: Task 0 in stage 3.0 failed 1 times
org.apache.spark.api.python.PythonException: Traceback (most recent call last):
  File "/x/pyspark/worker.py", line 1247, in main
    process()
  File "/x/sparkcdc/upstream/range_reader.py", line 412, in framed_range_batches
    status = reader.read(batch_rows)
{cause}
\tat org.apache.spark.api.python.BasePythonRunner$ReaderIterator.handlePythonException(PythonRunner.scala:572)
"""


def test_every_error_class_says_whether_it_is_retryable():
    assert errors.ErrUpstreamUnreachable.retryable is True
    assert errors.ErrPullerStalled.retryable is True
    assert errors.ErrBinlogPurged.retryable is False
    assert errors.ErrBinlogUnsupportedEvent.retryable is False
    assert errors.ErrMySQLTxnError.retryable is None  # its MySQL error decides
    assert errors.ErrFilterRuleInvalid.retryable is False  # inherited from ErrInvalidReplicaConfig
    assert errors.error_class("SPARKCDC:ErrBinlogPurged") is errors.ErrBinlogPurged
    assert errors.error_class("SPARKCDC:ErrNoSuchThing") is None


@pytest.mark.parametrize("message, retryable", [
    ("[SPARKCDC:ErrMySQLConnectionError] the downstream mysql://root@x:1/ stayed unreachable: (2003, ...)", True),
    ("[SPARKCDC:ErrUpstreamUnreachable] the binlog puller failed", True),
    ("[SPARKCDC:ErrUpstreamUnreachable] cannot connect: (1045, \"Access denied for user 'x'\")", False),
    ("[SPARKCDC:ErrPullerStalled] the binlog puller has read nothing for 31s", True),
    ("[SPARKCDC:ErrBinlogPurged] the binlog from mysql-bin.000001:4 is no longer on upstream", False),
    ("[SPARKCDC:ErrBinlogUnsupportedEvent] binlog event type 0xA6 cannot be decoded", False),
    ("[SPARKCDC:ErrPullerFailed] the binlog puller stopped on an unexpected error", False),
    ("[SPARKCDC:ErrMySQLTxnError] writing failed: (1213, 'Deadlock found when trying to get lock')", True),
    ("[SPARKCDC:ErrMySQLTxnError] writing failed: (1146, \"Table 'db.t' doesn't exist\")", False),
    ("[SPARKCDC:ErrEtcdUnavailable] etcd at http://127.0.0.1:2379 did not answer", True),
    ("[SPARKCDC:ErrProcessorUnknown] a Spark task failed: pymysql.err.OperationalError: (2013, 'Lost')", True),
    ("[SPARKCDC:ErrProcessorUnknown] the changefeed failed: RuntimeError: no table info for db.t at 5", False),
    ("[SPARKCDC:ErrNoSuchCode] something", False),
    ("[SPARKCDC:ErrExecDDLFailed] DDL 'ALTER TABLE t ...' failed downstream: (1064, ...)", False),
    ("[SPARKCDC:ErrInvalidReplicaConfig] bad", False),
    ("[SPARKCDC:ErrStorageUnavailable] cannot write s3://bucket/out/db/t/1/CDC000001.json: connection refused", True),
    ("[SPARKCDC:ErrStorageIO] cannot write file:///x/db/t/meta: [Errno 20] Not a directory", False),
    ("[SPARKCDC:ErrRedoFileOp] writing the redo log to s3://redo failed: timed out", True),
    ("[SPARKCDC:ErrConsistentStorage] consistent.storage 'ftp://x' is not supported", False),
    ("RuntimeError: no table info for db.t at 5", False),
    ("[STREAM_FAILED] Query terminated with exception: Python worker failed to connect back.", True),
    ("pymysql.err.OperationalError: (2013, 'Lost connection to MySQL server during query')", True),
])
def test_retryable_failures(message, retryable):
    assert is_retryable_failure(message) is retryable


def test_a_coded_line_inside_a_spark_trace_is_what_the_user_sees():
    cause = ("sparkcdc.errors.ErrUpstreamUnreachable: [SPARKCDC:ErrUpstreamUnreachable] a Spark task reading the "
             "binlog range mysql-bin.000002:4..mysql-bin.000002:900: the connection to upstream "
             "mysql://root@127.0.0.1:3306/ failed")
    message = user_message(RuntimeError(SPARK_TRACE.format(cause=cause)))
    assert message.startswith("[SPARKCDC:ErrUpstreamUnreachable] a Spark task reading the binlog range")
    assert error_code(message) == "SPARKCDC:ErrUpstreamUnreachable"
    assert is_retryable_failure(message) and is_upstream_failure(message)


def test_an_uncoded_failure_names_the_component_its_cause_and_the_fix_never_the_trace_header():
    message = user_message(RuntimeError(SPARK_TRACE.format(cause="KeyError: 'orders'")))
    assert message.startswith("[SPARKCDC:ErrProcessorUnknown] a Spark task reading the binlog failed: KeyError: 'orders'")
    assert "STREAM_FAILED" not in message and "Traceback" not in message
    assert "resume the changefeed" in message and not is_retryable_failure(message)

    transient = user_message(RuntimeError(SPARK_TRACE.format(
        cause="pymysql.err.OperationalError: (2013, 'Lost connection to MySQL server during query')")))
    assert "pymysql.err.OperationalError: (2013" in transient and "restarts from its checkpoint" in transient
    assert is_retryable_failure(transient)

    spark_only = user_message(RuntimeError(
        "[STREAM_FAILED] Query [id = 1] terminated with exception: Python worker failed to connect back.\n"
        "java.net.SocketTimeoutException: Accept timed out"))
    assert "Python worker failed to connect back" in spark_only and is_retryable_failure(spark_only)
    assert user_message(ValueError()) .startswith("[SPARKCDC:ErrProcessorUnknown] the changefeed failed: ValueError")
