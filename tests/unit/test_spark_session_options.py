"""The Spark driver JVM's options: sparkcdc's defaults, replaced flag by flag by a user's own
(`--spark-conf spark.driver.extraJavaOptions=...`, JAVA_TOOL_OPTIONS and the like), and the class
archive's place, which changes with the JDK so that an upgrade never maps a stale archive."""

import os
import shlex

import pytest

from sparkcdc.pipeline import class_archive
from sparkcdc.pipeline.spark_session import DRIVER_JAVA_OPTIONS, driver_java_options


def test_without_user_options_the_driver_gets_ours_and_the_archive():
    options = shlex.split(driver_java_options("", "/cache/a b.jsa", environ={}))
    assert options == [*DRIVER_JAVA_OPTIONS, "-XX:SharedArchiveFile=/cache/a b.jsa"]


@pytest.mark.parametrize("user, environ, dropped", [
    ("-XX:+UseG1GC", {}, "-XX:+UseSerialGC"),  # two collectors would stop the JVM
    ("", {"JAVA_TOOL_OPTIONS": "-XX:+UseParallelGC -Xmx2g"}, "-XX:+UseSerialGC"),
    ("", {"_JAVA_OPTIONS": "-XX:TieredStopAtLevel=4"}, "-XX:TieredStopAtLevel=1"),
    ("-Xshare:off", {}, "-XX:SharedArchiveFile=/c.jsa"),
    ("-Xms1g", {}, "-Xms32m"),
    ("", {"JDK_JAVA_OPTIONS": "-XX:SharedArchiveFile=/mine.jsa"}, "-XX:SharedArchiveFile=/c.jsa"),
])
def test_a_user_option_replaces_ours_for_the_same_setting(user, environ, dropped):
    options = shlex.split(driver_java_options(user, "/c.jsa", environ=environ))
    ours = [*DRIVER_JAVA_OPTIONS, "-XX:SharedArchiveFile=/c.jsa"]
    assert dropped in ours and dropped not in options
    assert [o for o in options if o in ours] == [o for o in ours if o != dropped]
    assert options[len(ours) - 1:] == shlex.split(user)  # the user's come last, as given


def test_unrelated_user_options_are_kept_beside_ours():
    options = driver_java_options("-Dfoo=1 -XX:+HeapDumpOnOutOfMemoryError", None, environ={})
    assert shlex.split(options) == [*DRIVER_JAVA_OPTIONS, "-Dfoo=1", "-XX:+HeapDumpOnOutOfMemoryError"]


def test_the_archive_name_follows_the_jdk(tmp_path):
    java_home = tmp_path / "jdk"
    (java_home / "bin").mkdir(parents=True)
    java = java_home / "bin" / "java"
    java.write_text("#!/bin/sh\n")
    environ = {"JAVA_HOME": str(java_home), "SPARKCDC_CACHE_DIR": str(tmp_path / "cache")}
    first = class_archive.archive_path(environ)
    assert first.startswith(str(tmp_path / "cache") + os.sep) and first.endswith(".jsa")
    assert class_archive.archive_path(environ) == first
    assert class_archive.existing_archive(environ) is None  # not made yet
    java.write_text("#!/bin/sh\n# another build\n")  # a JDK update
    assert class_archive.archive_path(environ) != first


def test_the_archive_name_follows_sparks_jars(tmp_path):
    """The JVM refuses an archive whose class-path jars changed since (a virtualenv made again at
    the same path): such jars get another name, so setup makes a new archive."""
    java_home = tmp_path / "jdk"
    (java_home / "bin").mkdir(parents=True)
    (java_home / "bin" / "java").write_text("#!/bin/sh\n")
    spark_home = tmp_path / "pyspark"
    (spark_home / "jars").mkdir(parents=True)
    jar = spark_home / "jars" / "spark-core.jar"
    jar.write_bytes(b"PK")
    environ = {"JAVA_HOME": str(java_home), "SPARKCDC_CACHE_DIR": str(tmp_path / "cache")}
    first = class_archive.archive_path(environ, str(spark_home))
    assert class_archive.archive_path(environ, str(spark_home)) == first
    os.utime(jar, ns=(1, 1))  # reinstalled: same name and size, another time
    assert class_archive.archive_path(environ, str(spark_home)) != first


def test_no_java_no_archive(tmp_path):
    assert class_archive.archive_path({"JAVA_HOME": str(tmp_path / "none")}) is None


def test_the_cache_dir_defaults_to_xdg_then_home():
    from sparkcdc.pipeline.spark_session import cache_dir

    assert cache_dir({"XDG_CACHE_HOME": "/x"}) == os.path.join("/x", "sparkcdc")
    assert cache_dir({"SPARKCDC_CACHE_DIR": "/y", "XDG_CACHE_HOME": "/x"}) == "/y"


def test_arrow_allocator_is_the_systems_unless_the_user_chose_one():
    import pyarrow as pa

    from sparkcdc.pipeline.spark_session import ARROW_MEMORY_POOL, use_arrow_memory_pool

    before = pa.default_memory_pool()
    try:
        environ: dict[str, str] = {}
        assert use_arrow_memory_pool(environ) == ARROW_MEMORY_POOL == "system"
        assert environ == {"ARROW_DEFAULT_MEMORY_POOL": "system"}  # what the Python workers inherit
        assert pa.default_memory_pool().backend_name == "system"
        environ = {"ARROW_DEFAULT_MEMORY_POOL": "mimalloc"}
        assert use_arrow_memory_pool(environ) == "mimalloc"
        assert pa.default_memory_pool().backend_name == "mimalloc"
    finally:
        pa.set_memory_pool(before)


def test_the_python_launcher_drops_sparks_zips_and_keeps_the_rest_of_the_path(tmp_path):
    import subprocess
    import sys

    from sparkcdc.pipeline.spark_session import python_launcher

    environ = {"SPARKCDC_CACHE_DIR": str(tmp_path)}
    launcher = python_launcher("local[*]", environ)
    assert launcher is not None and os.path.dirname(launcher) == str(tmp_path)
    assert oct(os.stat(launcher).st_mode & 0o777) == "0o700"
    assert python_launcher("local[2]", environ) == launcher  # made once
    spark_lib = tmp_path / "spark" / "python" / "lib"
    path = os.pathsep.join([str(spark_lib / "pyspark.zip"), str(spark_lib / "py4j-0.10.9.9-src.zip"),
                            "/opt/a b/extra", "/opt/*/glob"])
    done = subprocess.run([launcher, "-c", "import os, sys; print(os.environ.get('PYTHONPATH')); print(sys.executable)"],
                          env=dict(os.environ, PYTHONPATH=path), capture_output=True, text=True, check=True)
    kept, python = done.stdout.splitlines()
    assert kept == "/opt/a b/extra:/opt/*/glob"  # spaces and a star pass as they are
    assert python == sys.executable
    only_zips = subprocess.run([launcher, "-c", "import os; print('PYTHONPATH' in os.environ)"],
                               env=dict(os.environ, PYTHONPATH=str(spark_lib / "pyspark.zip")),
                               capture_output=True, text=True, check=True)
    assert only_zips.stdout.strip() == "False"


def test_no_launcher_for_a_cluster_or_another_interpreter(tmp_path):
    import sys

    from sparkcdc.pipeline.spark_session import python_launcher

    environ = {"SPARKCDC_CACHE_DIR": str(tmp_path)}
    assert python_launcher("spark://127.0.0.1:7077", environ) is None  # the executors' machines
    assert python_launcher("local[*]", dict(environ, PYSPARK_PYTHON="/usr/bin/python3-other")) is None
    assert python_launcher("local[*]", dict(environ, PYSPARK_PYTHON=sys.executable)) is not None
    assert os.listdir(tmp_path) == [os.path.basename(python_launcher("local", environ))]
