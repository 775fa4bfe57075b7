"""The capture's SparkSession: local or a cluster master, its Python workers running this interpreter.

Settings here serve the changefeeds' streaming queries (pipeline/runner.py): the source paces the
batches (a 0 s trigger polling every POLLING_DELAY) and Spark's own offset log is thrown away at
every restart, so it is kept short and written with the plain FileSystem API.

The driver JVM (in local mode also the executor) gets options that cut its fixed cost: its
compilers' and collector's settings and, when one was made, a class-data-sharing archive
(pipeline/class_archive.py). A user's own JVM options win flag by flag: those in
spark.driver.extraJavaOptions (`sparkcdc server --spark-conf`) and in JAVA_TOOL_OPTIONS,
_JAVA_OPTIONS or JDK_JAVA_OPTIONS.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shlex
import subprocess
import sys
import tempfile
import threading
from contextlib import contextmanager
from typing import Mapping, Optional

from sparkcdc.pipeline.source import BinlogDataSource, PlannedBinlogSource

# How often a query asks its source whether the next batch may run (source.BatchPacer).
POLLING_DELAY = "100ms"
# pyspark 4.3's name (pinned in pyproject.toml); its FileContext default costs ~3x per log write.
_PLAIN_CHECKPOINT_FILE_MANAGER = \
    "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager"


# The capture's driver JVM spent ~21 of its ~45 CPU s on a 1M-change catch-up compiling with C2:
# C1 only (TieredStopAtLevel=1) and the serial collector cut the run's CPU from 47-50 s to 33-35 s
# and did not slow it (docs/benchmarks.md). The heap's limit is spark.driver.memory's; it starts at
# 32 MiB instead of the JVM's 1/64 of the machine's memory (384 MiB at 24 GB), whose young
# generation the serial collector touched whole: a 1M-change catch-up with local executors (batches
# spooled to files, pipeline/transport.py) peaks at ~100 MiB of heap, and the JVM's RSS went from
# 433 to 344 MiB at no cost in CPU (bench/README.md).
DRIVER_JAVA_OPTIONS: tuple[str, ...] = ("-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xms32m")
# Arrow's allocator in the driver and the Python workers: the C library's, which hands large freed
# buffers back to the system at once. pyarrow's default (mimalloc) kept tens of MiB of a batch's
# freed buffers in each process (bench/README.md). A user's ARROW_DEFAULT_MEMORY_POOL wins.
ARROW_MEMORY_POOL = "system"
_ENVIRONMENT_JAVA_OPTIONS = ("JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS", "JDK_JAVA_OPTIONS")
_GARBAGE_COLLECTORS = {"UseSerialGC", "UseParallelGC", "UseG1GC", "UseZGC", "UseShenandoahGC", "UseEpsilonGC"}

log = logging.getLogger(__name__)


def _setting(option: str) -> str:
    """What a JVM option sets, so a user's option can replace ours: `-XX:+UseG1GC` and
    `-XX:+UseSerialGC` both choose the collector (two would stop the JVM), `-Xmx2g` the heap."""
    if option.startswith("-XX:"):
        name = option[4:].lstrip("+-").split("=", 1)[0]
        if name in _GARBAGE_COLLECTORS:
            return "collector"
        return "class archive" if name == "SharedArchiveFile" else name
    if option.startswith("-Xshare"):
        return "class archive"
    for prefix in ("-Xmx", "-Xms", "-Xss"):
        if option.startswith(prefix):
            return prefix
    return option.split("=", 1)[0]


def driver_java_options(user_options: str = "", class_archive: Optional[str] = None,
                        environ: Mapping[str, str] = os.environ) -> str:
    """spark.driver.extraJavaOptions: ours (DRIVER_JAVA_OPTIONS, the class archive) except what the
    user sets in `user_options` or the JVM's environment variables, then `user_options`."""
    ours = list(DRIVER_JAVA_OPTIONS)
    if class_archive:
        ours.append(f"-XX:SharedArchiveFile={class_archive}")
    theirs = shlex.split(user_options)
    for variable in _ENVIRONMENT_JAVA_OPTIONS:
        theirs += shlex.split(environ.get(variable, ""))
    taken = {_setting(option) for option in theirs}
    kept = [option for option in ours if _setting(option) not in taken]
    return " ".join([shlex.quote(option) for option in kept] + ([user_options] if user_options else []))


def use_arrow_memory_pool(environ=os.environ) -> str:
    """Sets ARROW_MEMORY_POOL (or the user's ARROW_DEFAULT_MEMORY_POOL) as this process's Arrow
    allocator and in its environment, which the Python workers that Spark starts inherit; its name."""
    import pyarrow as pa

    name = environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", ARROW_MEMORY_POOL)
    pools = {"system": pa.system_memory_pool, "jemalloc": pa.jemalloc_memory_pool,
             "mimalloc": pa.mimalloc_memory_pool}
    if name in pools:
        try:
            pa.set_memory_pool(pools[name]())
        except NotImplementedError:  # a pyarrow built without that allocator keeps its default
            pass
    return name


def cache_dir(environ: Mapping[str, str] = os.environ) -> str:
    """Where the session's made files are kept (the class archive, the Python launcher):
    $SPARKCDC_CACHE_DIR, else $XDG_CACHE_HOME/sparkcdc, else ~/.cache/sparkcdc."""
    if environ.get("SPARKCDC_CACHE_DIR"):
        return environ["SPARKCDC_CACHE_DIR"]
    base = environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "sparkcdc")


# Spark puts $SPARK_HOME/python/lib/pyspark.zip (and py4j's zip) first on the path of every Python
# process it starts (PythonUtils.sparkPythonPath), and Python compiles each module it imports from
# a zip again at every start: ~1 s of CPU for pyspark in each fresh process. A changefeed's query
# starts one (its streaming source runner) and a session several (the workers' daemons), so the
# source was first asked ~1.8 s after a query started on a warm session (docs/benchmarks.md).
# The launcher drops the two zips from PYTHONPATH, then runs this interpreter, which has the same
# pyspark installed with its modules compiled once.
_LAUNCHER = """#!/bin/sh
# sparkcdc: runs {python} for Spark without pyspark.zip and py4j's zip on PYTHONPATH
# (pipeline/spark_session.py, python_launcher).
set -f
kept=
IFS=:
for entry in $PYTHONPATH; do
  case "$entry" in
    */pyspark.zip|*/py4j-*-src.zip) ;;
    *) kept="${{kept:+$kept:}}$entry" ;;
  esac
done
unset IFS
if [ -n "$kept" ]; then export PYTHONPATH="$kept"; else unset PYTHONPATH; fi
exec {quoted} "$@"
"""


def python_launcher(master: str, environ: Mapping[str, str] = os.environ) -> Optional[str]:
    """An executable that runs this interpreter for Spark's Python processes without the zips on
    their path (see _LAUNCHER), made once in the cache directory; None where it does not apply:
    a master other than local (the executors' machines have their own path), PYSPARK_PYTHON
    naming another interpreter (which may have no pyspark of its own), no /bin/sh, or a cache
    directory where it cannot be made."""
    requested = environ.get("PYSPARK_PYTHON") or sys.executable
    if not (master == "local" or master.startswith("local[")) or not os.path.exists("/bin/sh"):
        return None
    if os.path.abspath(requested) != os.path.abspath(sys.executable):
        return None
    text = _LAUNCHER.format(python=sys.executable, quoted=shlex.quote(sys.executable))
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    path = os.path.join(cache_dir(environ), f"python-{digest}")
    if os.path.exists(path):
        return path
    partial = None
    try:
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        fd, partial = tempfile.mkstemp(prefix=".python-", dir=os.path.dirname(path))
        with os.fdopen(fd, "w") as out:
            out.write(text)
        os.chmod(partial, 0o700)
        # A cache on a file system mounted noexec: keep Spark's own way.
        subprocess.run([partial, "-c", "pass"], check=True, timeout=60, capture_output=True)
        os.replace(partial, path)
    except (OSError, subprocess.SubprocessError) as exc:
        log.info("Spark's Python processes import pyspark from its zip (no launcher in %s: %s)",
                 os.path.dirname(path), exc)
        return None
    finally:  # as class_archive.build: no half-made file stays behind
        if partial is not None and os.path.exists(partial):
            os.remove(partial)
    return path


def skip_data_source_lookup(spark) -> bool:
    """Tells the driver JVM's DataSourceManager that it has already looked for installed Python
    data sources, so Spark never starts the Python daemon and worker that look (PySpark modules
    named `pyspark_*` on the path; the capture registers its own sources by class). That lookup
    ran at the first `dataSource.register` and cost ~2 s of the session's start and ~100 MiB of
    RSS (a daemon and a worker that stay for the JVM's life; docs/benchmarks.md). Spark 4.3 keeps the
    answer in `DataSourceManager.dataSourceBuilders`, set once per JVM; this sets it to no
    sources when nothing has yet. False (and Spark looks as before) if this Spark has no such
    field or the session has no JVM here (Spark Connect)."""
    jvm = getattr(spark, "_jvm", None)
    if jvm is None:
        return False
    try:
        manager = getattr(getattr(jvm.org.apache.spark.sql.execution.datasources, "DataSourceManager$"), "MODULE$")
        if not manager.dataSourceBuilders().isEmpty():
            return False
        no_sources = jvm.org.apache.spark.api.python.PythonUtils.toScalaMap(jvm.java.util.HashMap())
        getattr(manager, "dataSourceBuilders_$eq")(jvm.scala.Some(no_sources))
    except Exception as exc:  # Py4JError: another Spark's internals; the lookup runs as before
        log.info("Spark looks for installed Python data sources (%s)", str(exc).splitlines()[0] if str(exc) else exc)
        return False
    return True


def numpy_converters_without_pandas() -> int:
    """Replaces PySpark's py4j input converters for numpy values (pyspark.sql.types registers them
    when imported) with the same checks made against numpy directly; how many it replaced.

    PySpark's own ask `pyspark.testing.utils` whether numpy is installed, on the first argument of
    the first call into the JVM, and that module imports pandas: ~43 MiB of RSS (28 of them
    private) and ~1 s in the driver, which never uses pandas (docs/benchmarks.md). numpy is a
    dependency of ours, so the check needs no import. Spark Connect's driver has no such
    converters (0)."""
    import numpy as np
    from py4j import protocol
    from pyspark.sql import types

    if not hasattr(types, "NumpyScalarConverter") or not hasattr(types, "NumpyArrayConverter"):
        return 0

    class NumpyScalarConverter(types.NumpyScalarConverter):
        def can_convert(self, obj) -> bool:
            return isinstance(obj, np.generic)

    class NumpyArrayConverter(types.NumpyArrayConverter):
        def can_convert(self, obj) -> bool:
            return isinstance(obj, np.ndarray) and obj.ndim == 1

    ours = {types.NumpyScalarConverter: NumpyScalarConverter, types.NumpyArrayConverter: NumpyArrayConverter}
    replaced = 0
    for i, converter in enumerate(protocol.INPUT_CONVERTER):
        if (replacement := ours.get(type(converter))) is not None:
            protocol.INPUT_CONVERTER[i] = replacement()
            replaced += 1
    return replaced


def make_spark_session(master: str = "local[*]", app_name: str = "sparkcdc",
                       spark_conf: Optional[Mapping[str, str]] = None, class_archive: Optional[str] = None):
    """A SparkSession whose Python workers run this interpreter (see components.md); `spark_conf`
    (`sparkcdc server --spark-conf`) goes over our settings; `class_archive` is a class-data-sharing
    archive for the driver JVM (class_archive.existing_archive())."""
    spark_conf = dict(spark_conf or {})
    java_options = driver_java_options(spark_conf.pop("spark.driver.extraJavaOptions", ""), class_archive)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    launcher = python_launcher(master)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    arrow_pool = use_arrow_memory_pool()
    from pyspark.sql import SparkSession

    numpy_converters_without_pandas()
    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.python.worker.reuse", "true")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.driver.memory", "1g")
        .config("spark.sql.streaming.stopTimeout", "30s")
        # Spark's own offset and commit logs are thrown away at every (re)start (the metastore
        # checkpoint is where a changefeed resumes), yet written twice per micro-batch: keep few
        # and write them with the plain FileSystem API, 60 -> 20 ms each (docs/benchmarks.md).
        .config("spark.sql.streaming.minBatchesToRetain", "2")
        # With the source pacing batches (a 0 s trigger), how often an idle query asks it again.
        .config("spark.sql.streaming.pollingDelay", POLLING_DELAY)
        .config("spark.sql.streaming.checkpointFileManagerClass", _PLAIN_CHECKPOINT_FILE_MANAGER)
        # ... and without Hadoop's checksum files: its default local FileSystem writes (and
        # renames) a .crc file beside each log file. Nothing else of sparkcdc's goes through
        # Hadoop's file:// (the sinks write with their own clients). The two logs of a catch-up
        # batch: 21-23 -> 12 and 34-35 -> 14-17 ms (docs/benchmarks.md).
        .config("spark.hadoop.fs.file.impl", "org.apache.hadoop.fs.RawLocalFileSystem")
        # Hadoop's FileSystem applies its own umask (022), not the process's: keep the checkpoint
        # files as private as the rest of the data directory (`sparkcdc server` sets umask 077).
        .config("spark.hadoop.fs.permissions.umask-mode", "077")
        # Read by bin/spark-submit when it starts the driver JVM, so they must be set here.
        .config("spark.driver.extraJavaOptions", java_options)
        # Local executors' Python workers inherit this process's environment, a cluster's get this.
        .config("spark.executorEnv.ARROW_DEFAULT_MEMORY_POOL", arrow_pool)
    )
    for key, value in spark_conf.items():
        builder = builder.config(key, value)
    # The SparkContext takes its Python processes' interpreter from PYSPARK_PYTHON when it starts.
    python = os.environ["PYSPARK_PYTHON"]
    if launcher is not None:
        os.environ["PYSPARK_PYTHON"] = launcher
    try:
        spark = builder.getOrCreate()
    finally:
        os.environ["PYSPARK_PYTHON"] = python
    spark.sparkContext.setLogLevel("WARN")
    skip_data_source_lookup(spark)
    spark.dataSource.register(BinlogDataSource)
    # Batch reads of planned partitions: the snapshot's chunk reads (pipeline/snapshot.py).
    spark.dataSource.register(PlannedBinlogSource)
    return spark


# Spark's planner processes for Python data sources: a daemon and a worker for each of these
# modules. They serve a query's start (the source's unpickling and its reader's planning) and each
# batch read of planned partitions (the snapshot's waves), then idle until Spark stops them a minute
# later (PythonWorkerFactory's idle timeout).
_PLANNER_MODULES = ("pyspark.sql.worker.create_data_source", "pyspark.sql.worker.plan_data_source_read")
_planner_lock = threading.Lock()
_planner_users: set[object] = set()


def begin_planner_use() -> object:
    """Mark a query start or a batch read that needs the planner processes until
    `end_planner_use(token)`: `retire_planner_workers` leaves them running meanwhile."""
    token = object()
    with _planner_lock:
        _planner_users.add(token)
    return token


def end_planner_use(token: object) -> None:
    """The use `token` marked is over (a second call changes nothing)."""
    with _planner_lock:
        _planner_users.discard(token)


@contextmanager
def planner_use():
    token = begin_planner_use()
    try:
        yield
    finally:
        end_planner_use(token)


def retire_planner_workers(spark) -> list[str]:
    """Stop Spark's planner processes (~180 MiB RSS) now rather than a minute idle from now, unless
    a query start or a batch read needs them; Spark starts them again for the next one (~0.8 s of
    that query's start, as after any minute without one). Returns the modules stopped.

    A changefeed's query calls this at its first batch of a catch-up (one that comes while the
    last is still being written, or a large one after its first: read by Spark's tasks, not the
    driver), whose peak memory then does not hold them (1,142 -> 998-1,064 MiB RSS on the
    1M-change run, docs/benchmarks.md); a changefeed that never falls behind leaves
    them to Spark, so that changefeeds made one after another do not each start them again.
    Spark has no API for it: SparkEnv's factories are read by reflection (py4j cannot list
    SparkEnv's own methods: their signatures name protobuf classes the driver's class path
    lacks). Anything unexpected (another Spark, a Connect session) stops nothing."""
    with _planner_lock:
        if _planner_users:
            return []
        try:
            jvm = spark.sparkContext._jvm
            field = jvm.java.lang.Class.forName("org.apache.spark.SparkEnv").getDeclaredField("pythonWorkers")
            field.setAccessible(True)
            factories = jvm.scala.jdk.javaapi.CollectionConverters.asJava(
                field.get(spark.sparkContext._jsc.sc().env()))
            stopped = []
            for key in list(factories.keySet()):
                module = key.workerModule()
                if module in _PLANNER_MODULES:
                    factories.get(key).stop()
                    stopped.append(module)
            return sorted(stopped)
        except Exception as exc:  # noqa: BLE001 - an optimisation: Spark stops them by itself a minute later
            log.debug("cannot stop Spark's planner workers: %s", exc)
            return []
