"""Changefeed failure handling: warning + restart with backoff for retryable errors, failed for
others or after changefeed-error-stuck-duration (TiCDC's changefeed states, contract §2)."""

from __future__ import annotations

import datetime as dt
import threading

import pytest

from sparkcdc.pipeline import runner as runner_module
from sparkcdc.pipeline.runner import TEST_ONLY_STUCK_DURATION_ENV, ChangefeedRunner, is_retryable_failure
from sparkcdc.server.metastore import ChangefeedInfo, ChangefeedStatus, MetaStore

KEY = ("default", "cf")
UNREACHABLE = "[SPARKCDC:ErrMySQLConnectionError] the downstream mysql://root@x:1/ stayed unreachable: (2003, ...)"


class Clock:
    def __init__(self):
        self.now = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)

    def __call__(self):
        return self.now


@pytest.fixture
def setup(tmp_path, monkeypatch):
    monkeypatch.setattr(runner_module, "RESTART_BACKOFF_INITIAL", 0.0)
    monkeypatch.delenv(TEST_ONLY_STUCK_DURATION_ENV, raising=False)
    store = MetaStore(str(tmp_path / "meta.sqlite"))
    store.create_changefeed(ChangefeedInfo("default", "cf", 0, "mysql://root@x:1/", "t", 1, 0, "normal", None,
                                           {}, "0.1"), ChangefeedStatus(1, 1))
    clock = Clock()
    runner = ChangefeedRunner(None, store, "", "", str(tmp_path), "127.0.0.1:8300", clock=clock)
    starts = []
    monkeypatch.setattr(runner, "start", lambda info: starts.append(info.state))
    return runner, store, clock, starts


@pytest.mark.parametrize("message, retryable", [
    (UNREACHABLE, True),
    ("[SPARKCDC:ErrUpstreamUnreachable] the binlog puller failed", True),
    ("[SPARKCDC:ErrMySQLTxnError] writing failed: (1213, 'Deadlock found when trying to get lock')", True),
    ("pymysql.err.OperationalError: (2013, 'Lost connection to MySQL server during query')", True),
    ("[SPARKCDC:ErrMySQLConnectionError] cannot connect: (1045, \"Access denied for user 'x'\")", False),
    ("[SPARKCDC:ErrExecDDLFailed] DDL 'ALTER TABLE t ...' failed downstream: (1064, ...)", False),
    ("[SPARKCDC:ErrMySQLTxnError] writing failed: (1146, \"Table 'db.t' doesn't exist\")", False),
    ("[SPARKCDC:ErrInvalidReplicaConfig] bad", False),
    ("[SPARKCDC:ErrStorageUnavailable] cannot write s3://bucket/out/db/t/1/CDC000001.json: connection refused", True),
    ("[SPARKCDC:ErrStorageIO] cannot write file:///x/db/t/meta: [Errno 20] Not a directory", False),
    ("[SPARKCDC:ErrRedoFileOp] writing the redo log to s3://redo failed: timed out", True),
    ("[SPARKCDC:ErrConsistentStorage] consistent.storage 'ftp://x' is not supported", False),
    ("RuntimeError: no table info for db.t at 5", False),
    ("[STREAM_FAILED] Query terminated with exception: Python worker failed to connect back.", True),
])
def test_retryable_failures(message, retryable):
    assert is_retryable_failure(message) is retryable


def test_a_config_error_fails_at_once(setup):
    runner, store, _, starts = setup
    runner._handle_failure(KEY, "[SPARKCDC:ErrExecDDLFailed] DDL failed")
    info = store.get_changefeed(*KEY)
    assert info.state == "failed" and info.error["code"] == "SPARKCDC:ErrExecDDLFailed" and starts == []


def test_a_retryable_error_warns_restarts_and_recovers(setup):
    runner, store, _, starts = setup
    runner._handle_failure(KEY, UNREACHABLE)
    info = store.get_changefeed(*KEY)
    assert info.state == "warning" and info.error["message"] == UNREACHABLE
    assert info.error["code"] == "SPARKCDC:ErrMySQLConnectionError" and starts == ["warning"]
    runner._recovered(KEY)  # the first batch after the restart
    info = store.get_changefeed(*KEY)
    assert info.state == "normal" and info.error is None
    runner._recovered(KEY)  # later batches do not touch the store's state
    assert store.get_changefeed(*KEY).state == "normal"


def test_failed_after_the_stuck_duration(setup, monkeypatch):
    runner, store, clock, starts = setup
    failures = iter([UNREACHABLE] * 3)

    def restart_fails(key):
        clock.now += dt.timedelta(minutes=20)
        return next(failures)

    monkeypatch.setattr(runner, "_restart", restart_fails)
    runner._handle_failure(KEY, UNREACHABLE)  # t=0 warning, t=20m warning, t=40m > 30m: failed
    info = store.get_changefeed(*KEY)
    assert info.state == "failed" and "changefeed-error-stuck-duration 1800s" in info.error["message"]
    assert info.error["message"].startswith(UNREACHABLE)


def test_stuck_duration_override_is_test_only_env(setup, monkeypatch, tmp_path):
    _, store, clock, _ = setup
    monkeypatch.setenv(TEST_ONLY_STUCK_DURATION_ENV, "30s")
    runner = ChangefeedRunner(None, store, "", "", str(tmp_path), "a", clock=clock)

    def restart_fails(key):
        clock.now += dt.timedelta(seconds=31)
        return UNREACHABLE

    monkeypatch.setattr(runner, "_restart", restart_fails)
    runner._handle_failure(KEY, UNREACHABLE)
    assert store.get_changefeed(*KEY).state == "failed"


def test_pause_during_backoff_cancels_the_restart(setup, monkeypatch):
    runner, store, _, starts = setup
    monkeypatch.setattr(runner_module, "RESTART_BACKOFF_INITIAL", 30.0)
    worker = threading.Thread(target=runner._handle_failure, args=(KEY, UNREACHABLE))
    worker.start()
    while KEY not in runner._backing_off:
        pass
    runner.stop(*KEY)
    worker.join(timeout=5)
    assert not worker.is_alive() and starts == []
