"""Per-micro-batch cost: where one changefeed micro-batch's fixed time goes, empty and ~5k rows.

    .venv/bin/python bench/batch_cost_bench.py [--idle-seconds 20] [--batches 6] [--rows 5000]
                                               [--trigger "1 second"] [--conf KEY=VALUE ...]

A private MariaDB and an in-process capture (puller + Spark session + one changefeed to the file
storage sink, canal-json), so Spark's StreamingQueryProgress is at hand. After a warm-up, the
upstream stays idle for --idle-seconds (empty micro-batches), then --batches times --rows rows
are written in 100-row transactions and the next batch is awaited. Per batch kind the medians of
Spark's durationMs (latestOffset, getBatch, queryPlanning, walCommit, addBatch, commitOffsets,
triggerExecution) are printed, and inside addBatch: the foreachBatch callback, df.toArrow()
(which runs the read tasks), write_batch, the sink's calls and the metastore checkpoint write.
--conf sets a runtime Spark SQL setting before the changefeed starts, to compare settings.
The load average and the process's CPU seconds are printed with the figures.
"""

from __future__ import annotations

import argparse
import collections
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))

from sparkcdc.testing.mariadb import MariaDBServer, _read_pid  # noqa: E402
from sparkcdc.testing.process_usage import tree_usage  # noqa: E402
from sparkcdc.testing.scratch import scratch_dir  # noqa: E402

DATABASE, TABLE = "batchcost", "sbtest1"
PROGRESS_KEYS = ("latestOffset", "getBatch", "queryPlanning", "walCommit", "addBatch", "commitOffsets",
                 "triggerExecution")


class Timings:
    """Seconds spent in named calls, per micro-batch id."""

    def __init__(self):
        self.by_batch: dict[int, dict[str, float]] = collections.defaultdict(lambda: collections.defaultdict(float))
        self.rows: dict[int, int] = {}
        self.current = -1

    def add(self, name: str, seconds: float) -> None:
        self.by_batch[self.current][name] += seconds


def timed(timings: Timings, name: str, function):
    def wrapper(*args, **kwargs):
        began = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            timings.add(name, time.perf_counter() - began)

    return wrapper


class TimedSink:
    """Times every call of the wrapped sink under `sink.<method>` (and passes its properties, such
    as accepts_arrow, through)."""

    def __init__(self, sink, timings: Timings):
        self._sink, self._timings = sink, timings

    def __getattr__(self, name):
        value = getattr(self._sink, name)
        return timed(self._timings, f"sink.{name}", value) if callable(value) else value


def instrument(timings: Timings) -> None:
    """Wrap the runner's foreachBatch callback, toArrow, write_batch and the sink it opens with timers."""
    from pyspark.sql.classic.dataframe import DataFrame  # what foreachBatch hands over

    import sparkcdc.pipeline.runner as runner

    open_sink, write_batch, batch_writer = runner.SinkSpec.open, runner.write_batch, runner.ChangefeedRunner._batch_writer
    runner.SinkSpec.open = lambda spec, *a, **k: TimedSink(open_sink(spec, *a, **k), timings)
    runner.write_batch = timed(timings, "write_batch", write_batch)
    to_arrow = DataFrame.toArrow

    def timed_to_arrow(self):
        began = time.perf_counter()
        table = to_arrow(self)
        timings.add("toArrow", time.perf_counter() - began)
        timings.rows[timings.current] = table.num_rows - 1  # less the range-marker row
        return table

    DataFrame.toArrow = timed_to_arrow

    def timed_batch_writer(self, *args, **kwargs):
        write = batch_writer(self, *args, **kwargs)

        def callback(df, batch_id):
            timings.current = batch_id
            began = time.perf_counter()
            try:
                write(df, batch_id)
            finally:
                timings.add("foreachBatch callback", time.perf_counter() - began)

        return callback

    runner.ChangefeedRunner._batch_writer = timed_batch_writer


def median_row(label: str, values: list[float]) -> str:
    return f"  {label:<28} median {statistics.median(values) * 1000:7.0f} ms   (min {min(values) * 1000:.0f}, " \
           f"max {max(values) * 1000:.0f}, n={len(values)})"


def report(kind: str, batch_ids: list[int], progress: dict[int, dict], timings: Timings) -> None:
    batch_ids = [b for b in batch_ids if b in progress]
    if not batch_ids:
        print(f"{kind}: no batches")
        return
    rows = [timings.rows.get(b, 0) for b in batch_ids]
    print(f"{kind}: {len(batch_ids)} batches, rows per batch median {statistics.median(rows):.0f}")
    print(" Spark durationMs:")
    for key in PROGRESS_KEYS:
        values = [progress[b]["durationMs"].get(key, 0) / 1000 for b in batch_ids]
        print(median_row(key, values))
    print(" inside addBatch:")
    names = sorted({name for b in batch_ids for name in timings.by_batch[b]})
    for name in names:
        print(median_row(name, [timings.by_batch[b].get(name, 0.0) for b in batch_ids]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--idle-seconds", type=float, default=20, help="length of the idle phase (empty batches)")
    parser.add_argument("--batches", type=int, default=6, help="how many loaded batches to measure")
    parser.add_argument("--rows", type=int, default=5000, help="rows written before each loaded batch")
    parser.add_argument("--trigger", default="1 second", help="the changefeed's trigger interval")
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                        help="a runtime Spark SQL setting applied before the changefeed starts (repeatable)")
    args = parser.parse_args()
    if args.batches <= 0 or args.rows <= 0 or args.idle_seconds < 0:
        parser.error("--batches and --rows must be positive, --idle-seconds not negative")
    confs = []
    for item in args.conf:
        key, sep, value = item.partition("=")
        if not sep or not key:
            parser.error(f"--conf {item!r}: give KEY=VALUE, e.g. spark.sql.adaptive.enabled=false")
        confs.append((key, value))

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    timings = Timings()
    instrument(timings)
    from sparkcdc.model import tso
    from sparkcdc.api.server import _now_iso
    from sparkcdc.config.replica import ReplicaConfig, replica_config_to_dict
    from sparkcdc.server.capture import Capture, CaptureOptions
    from sparkcdc.model.changefeed import ChangefeedInfo, ChangefeedStatus

    base = scratch_dir("sparkcdc-batchcost-")
    mariadb = MariaDBServer(os.path.join(base, "mariadb")).start()
    capture = None
    try:
        conn = mariadb.connect()
        with conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE {DATABASE}")
            cur.execute(f"CREATE TABLE {DATABASE}.{TABLE} (id INT PRIMARY KEY, k INT NOT NULL, "
                        "c CHAR(120) NOT NULL, pad CHAR(60) NOT NULL)")
        capture = Capture(CaptureOptions(addr="127.0.0.1:0", data_dir=os.path.join(base, "cdc"),
                                         upstream_uri=mariadb.uri, trigger_interval=args.trigger))
        capture.open()
        for key, value in confs:
            capture._spark.conf.set(key, value)
        start_ts = capture.resolve_start_ts(0)
        info = ChangefeedInfo(namespace="default", id="batchcost", upstream_id=0,
                              sink_uri=f"file://{base}/out?protocol=canal-json&enable-tidb-extension=true",
                              create_time=_now_iso(), start_ts=start_ts, target_ts=0, state="normal", error=None,
                              config=replica_config_to_dict(ReplicaConfig()), creator_version="bench")
        capture.store.create_changefeed(info, ChangefeedStatus(checkpoint_ts=start_ts, resolved_ts=start_ts))
        capture.start(info)
        query = capture._runner._running[("default", "batchcost")].query

        def wait_checkpoint_past(ts: int, timeout: float = 300) -> None:
            deadline = time.monotonic() + timeout
            while capture.store.get_status("default", "batchcost").checkpoint_ts < ts:
                if time.monotonic() > deadline:
                    raise SystemExit(f"the checkpoint did not pass {ts} within {timeout:.0f}s")
                time.sleep(0.02)

        for _ in range(5):  # warm-up: the first batches of a new query take seconds each
            wait_checkpoint_past(tso.compose(int(time.time() * 1000)))
        print(f"load average before: {os.getloadavg()}; settings: {confs or 'defaults'}; trigger {args.trigger}",
              flush=True)
        mariadb_pid = _read_pid(mariadb.pid_file)

        def own_cpu() -> float:  # this process tree less MariaDB's
            return tree_usage(os.getpid())[0] - (tree_usage(mariadb_pid)[0] if mariadb_pid else 0.0)

        cpu_before = own_cpu()
        idle_first = query.lastProgress["batchId"] + 1 if query.lastProgress else 0
        time.sleep(args.idle_seconds)
        idle_last = query.lastProgress["batchId"]
        cpu_idle = own_cpu()

        loaded: list[int] = []
        next_id = 1
        with conn.cursor() as cur:
            for _ in range(args.batches):
                before = query.lastProgress["batchId"]
                for first in range(next_id, next_id + args.rows, 100):
                    cur.execute("BEGIN")
                    cur.executemany(f"INSERT INTO {DATABASE}.{TABLE} VALUES (%s,%s,%s,%s)",
                                    [(i, i, "c" * 120, "p" * 60) for i in range(first, min(first + 100, next_id + args.rows))])
                    cur.execute("COMMIT")
                next_id += args.rows
                committed = tso.compose(int(time.time() * 1000) + 1000)
                wait_checkpoint_past(committed)
                loaded.extend(b for b in range(before + 1, query.lastProgress["batchId"] + 1)
                              if timings.rows.get(b, 0) > 0)
        progress = {p["batchId"]: p for p in query.recentProgress}
        idle = [b for b in range(idle_first, idle_last + 1) if timings.rows.get(b, 0) == 0]
        print(f"idle {args.idle_seconds:.0f}s: {len(idle)} empty batches; process CPU in the idle phase "
              f"{cpu_idle - cpu_before:.1f}s ({(cpu_idle - cpu_before) / max(args.idle_seconds, 1e-9):.2f} cores; "
              "this process tree: driver, JVM, Python workers, not MariaDB)")
        report("empty batches", idle, progress, timings)
        report(f"loaded batches ({args.rows} rows written per batch)", loaded, progress, timings)
        print("loaded batches one by one (batch id: rows, triggerExecution, toArrow):")
        for b in loaded:
            if b in progress:
                print(f"  {b}: {timings.rows.get(b, 0)} rows, {progress[b]['durationMs'].get('triggerExecution', 0)} ms, "
                      f"toArrow {timings.by_batch[b].get('toArrow', 0) * 1000:.0f} ms")
        print(f"load average after: {os.getloadavg()}")
    finally:
        if capture is not None:
            capture.close()
        mariadb.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
