"""PipelinedWriter: a changefeed's batches are written in order on one thread, one batch behind the
query, and a failed write fails the query."""

from __future__ import annotations

import threading

import pytest

from sparkcdc.errors import ErrStorageIO
from sparkcdc.pipeline import runner as runner_module
from sparkcdc.pipeline.runner import ChangefeedRunner, PipelinedWriter
from sparkcdc.server.metastore import MetaStore


def test_the_next_batch_is_decoded_while_the_previous_one_is_written_in_order():
    writer, written = PipelinedWriter("write-cf"), []
    release = threading.Event()

    def slow_write():
        release.wait(10)
        written.append(1)

    writer.submit(slow_write)
    # submit returned while batch 1 is still being written: the caller goes on to decode batch 2.
    assert written == [] and writer.failure is None
    threading.Timer(0.2, release.set).start()
    writer.submit(lambda: written.append(2))  # waits for batch 1 first
    assert written[0] == 1
    writer.wait()
    assert written == [1, 2]


def test_a_failed_write_fails_the_next_batch_and_is_reported_once_done():
    writer = PipelinedWriter("write-cf")
    error = ErrStorageIO("disk full")

    def failing():
        raise error

    writer.submit(failing)
    with pytest.raises(ErrStorageIO):
        writer.submit(lambda: None)
    assert writer.failure is error
    with pytest.raises(ErrStorageIO):  # and every batch after it: nothing is written past a gap
        writer.submit(lambda: None)


def test_close_lets_the_write_in_flight_finish():
    writer, written = PipelinedWriter("write-cf"), []
    release = threading.Event()
    writer.submit(lambda: (release.wait(10), written.append(1)))
    threading.Timer(0.05, release.set).start()
    writer.close()
    assert written == [1]


class _IdleQuery:
    """A query with no next batch: it never terminates by itself."""

    def __init__(self):
        self.stopped = threading.Event()

    def awaitTermination(self, timeout=None):
        self.stopped.wait(timeout)
        return self.stopped.is_set()

    def stop(self):
        self.stopped.set()


def test_the_watcher_fails_a_query_whose_last_write_failed(tmp_path, monkeypatch):
    monkeypatch.setattr(runner_module, "WATCH_SECONDS", 0.01)
    runner = ChangefeedRunner(None, MetaStore(str(tmp_path / "meta.sqlite")), str(tmp_path / "i"), "", str(tmp_path),
                              "127.0.0.1:8300")
    failures = []
    monkeypatch.setattr(runner, "_handle_failure", lambda key, message: failures.append((key, message)))
    writer, query = PipelinedWriter("write-cf"), _IdleQuery()

    def failing():
        raise ErrStorageIO("disk full")

    writer.submit(failing)
    watcher = threading.Thread(target=runner._watch, args=(("default", "cf"), query, writer, threading.Event()),
                               daemon=True)
    watcher.start()
    watcher.join(30)  # it returns once it has failed the query
    assert not watcher.is_alive() and query.stopped.is_set()
    assert failures == [(("default", "cf"), "[SPARKCDC:ErrStorageIO] disk full")]
