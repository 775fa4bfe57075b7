"""What the binlog puller says about itself (upstream/puller.py `health()`): the state the runner
shows on every changefeed. The reconnecting and failed states against a real MariaDB are in
tests/integration/test_puller_supervision.py."""

from __future__ import annotations

import threading
import time

from sparkcdc.errors import ErrPullerFailed, ErrPullerStalled
from sparkcdc.upstream import puller as puller_module
from sparkcdc.upstream.connection import UpstreamConfig
from sparkcdc.upstream.puller import FAILED, RUNNING, STALLED, STARTING, Puller


def make_puller(tmp_path) -> Puller:
    from sparkcdc.upstream.txn_index import TxnIndex

    return Puller(UpstreamConfig.from_uri("mysql://cdc:secret@db.example:3306/"), TxnIndex(str(tmp_path / "i")), 1)


def test_a_running_puller_that_reads_nothing_is_stalled_and_says_so(tmp_path, monkeypatch):
    puller = make_puller(tmp_path)
    assert puller.health().state == STARTING and puller.health().problem is None
    puller._set_state(RUNNING, connected=True)
    assert puller.health().state == RUNNING and puller.health().connects == 1
    monkeypatch.setattr(puller_module, "STALL_SECONDS", 0.05)
    time.sleep(0.1)
    health = puller.health()
    assert health.state == STALLED and isinstance(health.problem, ErrPullerStalled)
    assert health.problem.retryable and "mysql://cdc:xxxxx@db.example:3306/" in health.problem.message
    assert "secret" not in str(health.to_json())
    puller._last_event = time.monotonic()  # an event (a heartbeat) arrives
    assert puller.health().state == RUNNING


def test_a_puller_thread_that_ended_without_saying_why_is_failed(tmp_path):
    puller = make_puller(tmp_path)
    puller._thread = threading.Thread(target=lambda: None)
    puller._thread.start()
    puller._thread.join()
    health = puller.health()
    assert health.state == FAILED and isinstance(health.problem, ErrPullerFailed)
    assert health.to_json()["error"]["code"] == "SPARKCDC:ErrPullerFailed"
