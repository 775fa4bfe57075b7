"""Changefeed failure handling: warning + restart with backoff for retryable errors, failed for
others or after changefeed-error-stuck-duration (TiCDC's changefeed states, contract §2)."""

from __future__ import annotations

import datetime as dt
import threading
import time

import pytest

from sparkcdc import failpoint
from sparkcdc.errors import ErrBinlogUnsupportedEvent, ErrEtcdUnavailable, ErrUpstreamUnreachable
from sparkcdc.pipeline import runner as runner_module
from sparkcdc.model.changefeed import ChangefeedInfo, ChangefeedStatus
from sparkcdc.pipeline.failure import user_message
from sparkcdc.pipeline.runner import STUCK_DURATION_FAILPOINT, ChangefeedRunner
from sparkcdc.server.metastore import MetaStore
from sparkcdc.upstream.puller import FAILED, RECONNECTING, RUNNING, PullerHealth

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
    store = MetaStore(str(tmp_path / "meta.sqlite"))
    store.create_changefeed(ChangefeedInfo("default", "cf", 0, "mysql://root@x:1/", "t", 1, 0, "normal", None,
                                           {}, "0.1"), ChangefeedStatus(1, 1))
    clock = Clock()
    runner = ChangefeedRunner(None, store, "", "", str(tmp_path), "127.0.0.1:8300", clock=clock)
    starts = []
    monkeypatch.setattr(runner, "start", lambda info: starts.append(info.state))
    return runner, store, clock, starts


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


def test_stuck_duration_override_is_a_failpoint(setup, monkeypatch, tmp_path):
    _, store, clock, _ = setup
    with failpoint.enabled(STUCK_DURATION_FAILPOINT, "30s"):
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


# -- the binlog puller's health (runner module docstring) -------------------------------------------

class Puller:
    """The capture's puller as the runner sees it: a health report the test moves."""

    def __init__(self):
        self.health = PullerHealth(RUNNING, "mysql://root@127.0.0.1:3306/", 0.0, connects=1)

    def __call__(self) -> PullerHealth:
        return self.health

    def lose(self, error):
        self.health = PullerHealth(RECONNECTING if error.retryable else FAILED, self.health.upstream, 0.0,
                                   self.health.connects, error)

    def reconnect(self):
        self.health = PullerHealth(RUNNING, self.health.upstream, 0.0, self.health.connects + 1)


DOWN = ErrUpstreamUnreachable("the binlog puller reading from mysql-bin.000002:4: the connection to upstream "
                              "mysql://root@127.0.0.1:3306/ failed ((2003, \"Can't connect\"))")


@pytest.fixture
def watched(tmp_path, monkeypatch):
    store = MetaStore(str(tmp_path / "meta.sqlite"))
    store.create_changefeed(ChangefeedInfo("default", "cf", 0, "mysql://root@x:1/", "t", 1, 0, "normal", None,
                                           {}, "0.1"), ChangefeedStatus(1, 1))
    clock, puller = Clock(), Puller()
    runner = ChangefeedRunner(None, store, "", "", str(tmp_path), "127.0.0.1:8300", clock=clock,
                              upstream_health=puller)
    starts = []
    monkeypatch.setattr(runner, "start", lambda info: starts.append(time.monotonic()))
    return runner, store, clock, puller, starts


def test_a_running_changefeed_shows_the_pullers_outage_and_is_normal_again_once_it_is_back(watched):
    runner, store, _, puller, _ = watched
    assert runner._check_upstream(KEY) is None and store.get_changefeed(*KEY).state == "normal"
    puller.lose(DOWN)
    assert runner._check_upstream(KEY) is None  # the query keeps running: it has nothing to read
    info = store.get_changefeed(*KEY)
    assert info.state == "warning" and info.error["code"] == "SPARKCDC:ErrUpstreamUnreachable"
    assert "mysql://root@127.0.0.1:3306/" in info.error["message"]
    runner._recovered(KEY)  # a batch planned before the outage completes: still waiting for the upstream
    assert store.get_changefeed(*KEY).state == "warning"
    puller.reconnect()
    runner._recovered(KEY)  # the first checkpoint after the puller is back
    assert store.get_changefeed(*KEY).state == "normal" and store.get_changefeed(*KEY).error is None


def test_a_puller_that_stopped_for_good_fails_every_changefeed_with_its_error(watched):
    runner, store, _, puller, _ = watched
    puller.lose(ErrBinlogUnsupportedEvent("binlog event type 0xA6 cannot be decoded; refusing to skip it"))
    problem = runner._check_upstream(KEY)
    assert isinstance(problem, ErrBinlogUnsupportedEvent)  # the watcher stops the query with it
    runner._handle_failure(KEY, user_message(problem))
    info = store.get_changefeed(*KEY)
    assert info.state == "failed" and info.error["code"] == "SPARKCDC:ErrBinlogUnsupportedEvent"


def test_an_outage_longer_than_the_stuck_duration_fails_the_changefeed(watched):
    runner, store, clock, puller, _ = watched
    puller.lose(DOWN)
    runner._check_upstream(KEY)
    clock.now += dt.timedelta(minutes=31)
    problem = runner._check_upstream(KEY)
    runner._handle_failure(KEY, user_message(problem))
    info = store.get_changefeed(*KEY)
    assert info.state == "failed" and "changefeed-error-stuck-duration 1800s" in info.error["message"]


def test_a_failure_from_the_upstream_restarts_as_soon_as_the_puller_is_back_not_after_the_backoff(watched):
    runner, store, _, puller, starts = watched
    puller.lose(DOWN)
    worker = threading.Thread(target=runner._handle_failure, args=(KEY, str(DOWN)))
    worker.start()
    wait_for(lambda: store.get_changefeed(*KEY).state == "warning")
    assert KEY in runner.running()  # held while it waits: a cluster's processor does not start it again
    time.sleep(1)
    assert not starts  # still down
    puller.reconnect()
    back = time.monotonic()
    worker.join(timeout=5)
    assert not worker.is_alive() and len(starts) == 1
    assert starts[0] - back < 2 * runner_module.UPSTREAM_POLL_SECONDS + 0.5  # the backoff is 10 s


def test_a_start_that_fails_while_the_upstream_is_down_is_retried_when_it_returns(watched, monkeypatch):
    runner, store, _, puller, starts = watched
    puller.lose(DOWN)

    def start(info):
        if puller.health.problem is not None:
            raise DOWN
        starts.append(time.monotonic())

    monkeypatch.setattr(runner, "start", start)
    runner.start_or_retry_later(store.get_changefeed(*KEY))
    wait_for(lambda: store.get_changefeed(*KEY).state == "warning")
    assert KEY in runner.running()
    puller.reconnect()
    wait_for(lambda: starts)
    runner.stop(*KEY)


def test_handling_a_failure_is_tried_again_when_the_store_cannot_record_it(watched, monkeypatch):
    runner, store, _, _, _ = watched
    monkeypatch.setattr(runner_module, "HANDLE_AGAIN_SECONDS", 0.05)
    real_update, calls = store.update_changefeed, []

    def flaky_update(info, **kwargs):
        calls.append(info.state)
        if len(calls) == 1:
            raise ErrEtcdUnavailable("etcd did not answer")
        real_update(info, **kwargs)

    monkeypatch.setattr(store, "update_changefeed", flaky_update)
    runner._handle_failure(KEY, "[SPARKCDC:ErrExecDDLFailed] DDL failed")
    assert calls == ["failed", "failed"] and store.get_changefeed(*KEY).state == "failed"


def wait_for(predicate, timeout: float = 5.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_a_failover_restarts_a_running_changefeed_from_its_checkpoint_once_the_puller_switched(watched,
                                                                                              monkeypatch):
    """A query planned on the old server's positions (a large transaction's pieces too) plans
    again after the puller re-mapped them: stopped and started once, quietly. The stop waits for
    the batch in flight only briefly: it mostly reads the old primary, which may be dead."""
    from dataclasses import replace

    runner, store, _, puller, starts = watched
    stopped = []
    monkeypatch.setattr(runner, "stop", lambda *key, rest_timeout: stopped.append((key, rest_timeout)))

    class Query:
        def __init__(self):
            self.done = threading.Event()

        def awaitTermination(self, timeout):
            return self.done.wait(timeout)

    query = Query()
    watcher = threading.Thread(target=runner._watch, args=(KEY, query, runner_module.PipelinedWriter("w"),
                                                            threading.Event()))
    watcher.start()
    time.sleep(1.5)
    puller.health = replace(puller.health, state="switching", epoch=1, error=DOWN)  # not yet re-mapped
    time.sleep(1.5)
    assert not stopped and not starts
    puller.health = replace(puller.health, state=RUNNING, error=None, server="127.0.0.1:3307")
    wait_for(lambda: starts)
    watcher.join(timeout=5)
    assert stopped == [(KEY, runner_module.SWITCH_REST_TIMEOUT_SECONDS)] and len(starts) == 1
    from sparkcdc.upstream.range_reader import UPSTREAM_WAIT_SECONDS
    assert runner_module.SWITCH_REST_TIMEOUT_SECONDS < UPSTREAM_WAIT_SECONDS
    runner._recovered(KEY)  # its first checkpoint on the new primary
    assert store.get_changefeed(*KEY).state == "normal"
    query.done.set()


def test_a_start_waits_for_a_stop_of_the_same_changefeed_in_flight_and_none_starts_at_shutdown(tmp_path,
                                                                                                 monkeypatch):
    """Spark refuses a second query of one name while the first is active: a start (the cluster's
    reconcile loop while a failover restarts the changefeed) waits until the stop is done."""
    store = MetaStore(str(tmp_path / "meta.sqlite"))
    store.create_changefeed(ChangefeedInfo("default", "cf", 0, "mysql://root@x:1/", "t", 1, 0, "normal", None,
                                           {}, "0.1"), ChangefeedStatus(1, 1))
    runner = ChangefeedRunner(None, store, "", "", str(tmp_path), "127.0.0.1:8300")
    proceeded = []

    class Planned(Exception):
        pass

    def check(info, checkpoint_ts):
        proceeded.append(info.id)
        raise Planned  # the test ends the start here

    monkeypatch.setattr(runner, "_parallelism", lambda: 1)
    monkeypatch.setattr(runner, "_check_binlog_retained", check)
    runner._stopping.add(KEY)
    failed = []
    starting = threading.Thread(target=lambda: failed.append(pytest.raises(Planned, runner.start,
                                                                           store.get_changefeed(*KEY))))
    starting.start()
    time.sleep(0.5)
    assert proceeded == [], "started while the stop was in flight"
    with runner._lock:
        runner._stopping.discard(KEY)
    starting.join(timeout=5)
    assert proceeded == ["cf"] and failed
    runner._shutdown.set()
    runner.start(store.get_changefeed(*KEY))  # returns: nothing starts on a server shutting down
    assert proceeded == ["cf"]
