"""An empty micro-batch (only the binlog source's range marker) is written without a Spark job:
the runner rebuilds the marker's table from the batch's planned partition (a small batch with
binlog ranges is read the same way: tests/integration/test_native_framer.py)."""

from __future__ import annotations

import pickle
import threading

import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from sparkcdc.pipeline.stream_reader import read_small_batch
from sparkcdc.pipeline.planning import MarkerPartition
from sparkcdc.model.change_batch import marker_batch
from sparkcdc.pipeline.transport import pack_batch


def test_a_sole_marker_partition_gives_the_marker_table():
    table = read_small_batch([pickle.dumps(MarkerPartition(17, 42))], limit_bytes=0)
    assert table is not None
    assert table.schema == marker_batch(17, 42).schema
    assert table.to_pylist() == marker_batch(17, 42).to_pylist()
    assert table.column("seq").to_pylist() == [17] and table.column("commit_ts").to_pylist() == [42]


def test_anything_else_runs_the_batch():
    assert read_small_batch(None) is None  # no plan to read: another Spark's internals
    assert read_small_batch([]) is None
    assert read_small_batch([b"not a pickle"]) is None
    assert read_small_batch([pickle.dumps(InputPartition(0))]) is None  # another source's partition
    marker = pickle.dumps(MarkerPartition(1, 2))
    assert read_small_batch([marker, pickle.dumps(InputPartition(0))]) is None


class _Plan:
    """Just enough of a foreachBatch DataFrame's JVM plan: one planned partition."""

    def __init__(self, picked: bytes):
        self._picked = picked

    def __getattr__(self, name):  # queryExecution().logical().rdd(), inputPartition().get()
        return lambda: self

    def partitions(self):
        return [self]

    def pickedPartition(self):
        return self._picked


class _Batch:
    def __init__(self, partition, jobs: list):
        self._jdf, self._jobs, self.partition = _Plan(pickle.dumps(partition)), jobs, partition

    def toArrow(self):  # what Spark returns: the source's packed batches
        self._jobs.append(self)
        table = read_small_batch([self._jdf.pickedPartition()])  # None: a stand-in range, read here as no rows
        return pa.Table.from_batches([pack_batch(b) for b in (table.to_batches() if table else [])],
                                     schema=pack_batch(marker_batch(0, 0)).schema)


def test_an_idle_changefeed_still_runs_a_job_every_keep_warm_interval(tmp_path, monkeypatch):
    import types

    from sparkcdc.config.replica import ReplicaConfig, replica_config_to_dict
    from sparkcdc.pipeline import runner as runner_module
    from sparkcdc.model.changefeed import ChangefeedInfo
    from sparkcdc.server.metastore import MetaStore
    from sparkcdc.sink.registry import parse_sink_spec

    now = [0.0]
    monkeypatch.setattr(runner_module, "time", types.SimpleNamespace(monotonic=lambda: now[0]))
    written = []
    monkeypatch.setattr(runner_module, "write_batch", lambda table, *rest: written.append(table))
    runner = runner_module.ChangefeedRunner(None, MetaStore(str(tmp_path / "meta.sqlite")), str(tmp_path / "i"),
                                            "", str(tmp_path), "127.0.0.1:8300")
    info = ChangefeedInfo("default", "cf", 0, f"file://{tmp_path}/out?protocol=canal-json", "t", 1, 0, "normal",
                          None, replica_config_to_dict(ReplicaConfig()), "0.1")
    writer = runner_module.PipelinedWriter("write-cf")
    stopping = threading.Event()
    write = runner._batch_writer(info, parse_sink_spec(info.sink_uri, ReplicaConfig()), writer, sink=None,
                                 stopping=stopping)
    jobs: list = []
    for batch_id, (at, partition) in enumerate([(0, MarkerPartition(0, 1)), (1, MarkerPartition(1, 2)),
                                                (19, MarkerPartition(2, 3)), (21, MarkerPartition(3, 4)),
                                                (22, MarkerPartition(4, 5)), (23, InputPartition(7))]):
        now[0] = at
        write(_Batch(partition, jobs), batch_id)
    writer.wait()
    for thread in threading.enumerate():  # the jobs that keep a worker warm run beside the batches
        if thread.name.startswith("keep-python-worker-"):
            thread.join(10)
    # The first batch warms a Python worker, then a job at least every KEEP_PYTHON_WORKER_SECONDS (20 s);
    # a batch with anything but the marker always runs.
    assert runner_module.KEEP_PYTHON_WORKER_SECONDS == 20.0
    assert sorted(str(getattr(batch.partition, "end", "range")) for batch in jobs) == ["1", "4", "range"]
    assert [t.column("commit_ts").to_pylist() if t is not None else None for t in written] == \
        [[1], [2], [3], [4], [5], []]
    # A batch that comes while the one before is still being written (a catch-up's) is not
    # looked at: Spark reads it, even when it is the marker alone.
    release = threading.Event()

    def slow_write(table, *rest) -> None:
        release.wait(10)
        written.append(table)

    monkeypatch.setattr(runner_module, "write_batch", slow_write)
    now[0] = 24
    write(_Batch(MarkerPartition(5, 6), jobs), 6)  # read here: nothing was being written
    threading.Timer(0.5, release.set).start()  # batch 7 hands over once batch 6 is written
    write(_Batch(MarkerPartition(6, 7), jobs), 7)  # read while batch 6 is still being written
    writer.wait()
    assert len(jobs) == 4 and jobs[-1].partition == MarkerPartition(6, 7)
    assert [t.column("commit_ts").to_pylist() for t in written[-2:]] == [[6], [7]]
    # A stopping changefeed neither reads nor writes the batches its query still runs.
    stopping.set()
    write(_Batch(InputPartition(8), jobs), 8)
    writer.wait()
    assert len(jobs) == 4 and len(written) == 8
