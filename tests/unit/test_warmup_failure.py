"""The capture's Spark warm-up is an optimisation: when it fails it says so once, as a warning,
and raises nothing (the first changefeed then starts cold); a changefeed starting before its
delay is over cancels it before it touches Spark; its one batch has a read task per core."""

from __future__ import annotations

import logging

from sparkcdc.pipeline.warmup import start_warm_up


class _BrokenDataSources:
    def register(self, source) -> None:
        raise RuntimeError("Python worker failed to connect back.\nstack trace ...")


class _BrokenSpark:
    dataSource = _BrokenDataSources()


def test_a_failing_warm_up_only_warns(caplog):
    with caplog.at_level(logging.INFO, logger="sparkcdc.pipeline.warmup"):
        warm_up = start_warm_up(_BrokenSpark(), attempts=2)
        warm_up.thread.join(10)
    assert not warm_up.thread.is_alive()
    retries = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert retries == ["Spark warm-up attempt 1 failed; retrying: Python worker failed to connect back."]
    assert warnings == ["Spark warm-up failed (the first changefeed here starts cold): "
                        "Python worker failed to connect back."]
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_a_changefeed_starting_during_the_delay_skips_the_warm_up(caplog):
    with caplog.at_level(logging.DEBUG, logger="sparkcdc.pipeline.warmup"):
        warm_up = start_warm_up(_BrokenSpark(), delay=30)
        warm_up.cancel()  # what the runner's before_start does
        warm_up.thread.join(5)
    assert not warm_up.thread.is_alive()
    assert caplog.records == []  # it never touched Spark (which would have failed and said so)


def test_the_warm_up_batch_has_a_read_task_per_core_or_none():
    # Each task starts (and the reuse keeps) one of the executor's Python workers: with executors
    # elsewhere a changefeed's batch runs one read task per core, so none of them should import
    # the source's modules then. With a local master the driver reads the batches: no task.
    from sparkcdc.pipeline.warmup import _WarmupStreamReader

    reader = _WarmupStreamReader(tasks=2)
    start, end = reader.initialOffset(), reader.latestOffset()
    assert len(reader.partitions(start, end)) == 2
    assert reader.partitions(end, end) == []
    assert _WarmupStreamReader(tasks=0).partitions(start, end) == []
