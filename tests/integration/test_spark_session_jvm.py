"""The capture's Spark driver JVM really runs with sparkcdc's options (spark.driver.extraJavaOptions
reaches the JVM that bin/spark-submit starts in local mode), a user's --spark-conf goes over them,
its Python workers and the driver share Arrow's allocator, and a class archive the JVM cannot use (damaged, or made for another JDK) does not stop it. In a
child process: a process's first SparkSession fixes its JVM's options for every later one."""

from __future__ import annotations

import json
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

def worker_pool(batches):
    import pyarrow as pa
    for _ in batches:
        yield pa.RecordBatch.from_pydict({"pool": [pa.default_memory_pool().backend_name]})

import pyarrow as pa
worker = spark.range(1).mapInArrow(worker_pool, "pool string").collect()[0].pool
print(json.dumps({"arguments": arguments, "rows": rows, "partitions": spark.conf.get("spark.sql.shuffle.partitions"),
                  "pools": [pa.default_memory_pool().backend_name, worker]}))
spark.stop()
"""


def test_the_driver_jvm_runs_with_our_options_the_users_and_a_damaged_archive(tmp_path):
    archive = tmp_path / "damaged.jsa"
    archive.write_bytes(b"not a class archive" * 1000)
    done = subprocess.run([sys.executable, "-c", _CHILD, str(archive)], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    arguments = result["arguments"]
    for option in DRIVER_JAVA_OPTIONS:
        assert option in arguments, arguments
    assert f"-XX:SharedArchiveFile={archive}" in arguments
    assert "-XX:CICompilerCount=2" in arguments and "-Dsparkcdc.test=1" in arguments
    assert result["rows"] == 5  # the JVM ran Spark work without the archive it could not map
    assert result["partitions"] == "3"  # --spark-conf goes over sparkcdc's own settings
    assert result["pools"] == [ARROW_MEMORY_POOL] * 2  # the driver's Arrow allocator and its workers
