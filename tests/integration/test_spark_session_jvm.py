"""The capture's Spark driver JVM really runs with sparkcdc's options (spark.driver.extraJavaOptions
reaches the JVM that bin/spark-submit starts in local mode), a user's --spark-conf goes over them,
its Python workers and the driver share Arrow's allocator and import the same compiled pyspark, a
class archive the JVM cannot use (damaged, or made for another JDK) does not stop it, the driver
does not import pandas, Hadoop's local files (Spark's offset and commit logs) have no checksum
files beside them, Spark never starts its lookup of installed Python data sources while a
source registered by class still reads, and Spark's planner processes stop when retired. In a
child process: a process's first SparkSession fixes its JVM's options for every later one."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from sparkcdc.pipeline.spark_session import ARROW_MEMORY_POOL, DRIVER_JAVA_OPTIONS

_CHILD = """
import json, sys
from sparkcdc.pipeline.spark_session import make_spark_session
spark = make_spark_session("local[1]", "sparkcdc-test-jvm", class_archive=sys.argv[1],
                           spark_conf={"spark.driver.extraJavaOptions": "-XX:CICompilerCount=2 -Dsparkcdc.test=1",
                                       "spark.sql.shuffle.partitions": "3"})
jvm = spark.sparkContext._jvm
arguments = list(jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments())
rows = spark.range(5).count()
pandas_in_driver = "pandas" in sys.modules  # nothing so far needs it (numpy_converters_without_pandas)
import numpy as np
from pyspark.sql import functions as F
below_numpy = spark.range(5).filter(F.col("id") < F.lit(np.int64(3))).count()  # a numpy value crosses py4j

def worker_pool(batches):
    import pyarrow as pa
    import pyspark
    for _ in batches:
        yield pa.RecordBatch.from_pydict({"pool": [pa.default_memory_pool().backend_name],
                                          "pyspark": [pyspark.__file__]})

import pyarrow as pa
import pyspark
worker_row = spark.range(1).mapInArrow(worker_pool, "pool string, pyspark string").collect()[0]
worker = worker_row.pool

from pyspark.sql.datasource import DataSource, DataSourceReader

class Reader(DataSourceReader):
    def read(self, partition):
        yield (7,)

class Source(DataSource):
    @classmethod
    def name(cls):
        return "sparkcdc_test_source"

    def schema(self):
        return "n int"

    def reader(self, schema):
        return Reader()

# Spark's offset and commit logs go through Hadoop's file:// FileSystem: without a .crc file beside
# each, and for this user only (spark.hadoop.fs.permissions.umask-mode).
import os
hadoop_fs = jvm.org.apache.hadoop.fs
local_fs = hadoop_fs.FileSystem.get(jvm.java.net.URI("file:///"), spark.sparkContext._jsc.hadoopConfiguration())
log_file = os.path.join(sys.argv[2], "0")
written = local_fs.create(hadoop_fs.Path("file://" + log_file))
written.write(7)
written.close()
hadoop_log = {"class": local_fs.getClass().getName(), "files": sorted(os.listdir(sys.argv[2])),
              "mode": oct(os.stat(log_file).st_mode & 0o777)}

spark.dataSource.register(Source)
read = [row.n for row in spark.read.format("sparkcdc_test_source").load().collect()]
import subprocess
import time
jvm_pid = str(jvm.java.lang.ProcessHandle.current().pid())
children = subprocess.run(["ps", "-ww", "-o", "args=", "--ppid", jvm_pid], capture_output=True, text=True).stdout

def planner_daemons():
    listed = subprocess.run(["ps", "-ww", "-o", "args=", "--ppid", jvm_pid], capture_output=True, text=True).stdout
    return sorted(line.split()[-1] for line in listed.splitlines() if "pyspark.sql.worker." in line)

from sparkcdc.pipeline.spark_session import begin_planner_use, end_planner_use, retire_planner_workers
planners = {"after_read": planner_daemons()}
token = begin_planner_use()  # a query starting: they stay
planners["while_used"] = retire_planner_workers(spark)
end_planner_use(token)
planners["retired"] = retire_planner_workers(spark)
deadline = time.monotonic() + 20
while planner_daemons() and time.monotonic() < deadline:
    time.sleep(0.1)
planners["after_retire"] = planner_daemons()
planners["read_again"] = [row.n for row in spark.read.format("sparkcdc_test_source").load().collect()]
planners["after_second_read"] = planner_daemons()
print(json.dumps({"arguments": arguments, "rows": rows, "partitions": spark.conf.get("spark.sql.shuffle.partitions"),
                  "pools": [pa.default_memory_pool().backend_name, worker], "read": read,
                  "children": children.splitlines(), "pandas_in_driver": pandas_in_driver,
                  "below_numpy": below_numpy, "pyspark": [pyspark.__file__, worker_row.pyspark],
                  "planners": planners, "hadoop_log": hadoop_log}))
spark.stop()
"""


def test_the_driver_jvm_runs_with_our_options_the_users_and_a_damaged_archive(tmp_path):
    archive = tmp_path / "damaged.jsa"
    archive.write_bytes(b"not a class archive" * 1000)
    # Its own cache directory, where the Python processes' launcher is made.
    environ = dict(os.environ, SPARKCDC_CACHE_DIR=str(tmp_path / "cache"))
    environ.pop("PYSPARK_PYTHON", None)
    logs = tmp_path / "logs"
    logs.mkdir()
    done = subprocess.run([sys.executable, "-c", _CHILD, str(archive), str(logs)], capture_output=True, text=True,
                          timeout=300, env=environ)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    arguments = result["arguments"]
    for option in DRIVER_JAVA_OPTIONS:
        assert option in arguments, arguments
    assert f"-XX:SharedArchiveFile={archive}" in arguments
    assert "-XX:CICompilerCount=2" in arguments and "-Dsparkcdc.test=1" in arguments
    assert result["rows"] == 5  # the JVM ran Spark work without the archive it could not map
    assert result["pandas_in_driver"] is False  # PySpark's numpy converters no longer import it
    assert result["below_numpy"] == 3  # and numpy values still reach the JVM
    assert result["partitions"] == "3"  # --spark-conf goes over sparkcdc's own settings
    assert result["pools"] == [ARROW_MEMORY_POOL] * 2  # the driver's Arrow allocator and its workers
    assert result["read"] == [7]  # a data source registered by class is found and read
    assert result["hadoop_log"] == {"class": "org.apache.hadoop.fs.RawLocalFileSystem", "files": ["0"],
                                    "mode": "0o600"}, result["hadoop_log"]
    # The workers import the driver's compiled pyspark, not Spark's zip of its sources (python_launcher).
    driver_pyspark, worker_pyspark = result["pyspark"]
    assert worker_pyspark == driver_pyspark and "pyspark.zip" not in worker_pyspark
    children = result["children"]
    assert any("pyspark.daemon" in child for child in children), children  # the workers' daemons are seen
    assert not any("lookup_data_sources" in child for child in children), children
    # Spark's planner daemons stay while a query start or a batch read marks them used, stop when
    # retired, and come back for the next read (retire_planner_workers).
    planners = result["planners"]
    modules = ["pyspark.sql.worker.create_data_source", "pyspark.sql.worker.plan_data_source_read"]
    assert planners["after_read"] == modules, planners
    assert planners["while_used"] == [] and planners["retired"] == modules, planners
    assert planners["after_retire"] == [], planners
    assert planners["read_again"] == [7] and planners["after_second_read"] == modules, planners
