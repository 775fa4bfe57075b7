"""A class-data-sharing archive of the Spark driver JVM's classes, made once per machine.

A capture's JVM loads, verifies and links ~15k Spark classes before its first changefeed batch.
JDK 17's dynamic AppCDS keeps them in a file instead: a JVM run with -XX:ArchiveClassesAtExit
writes the classes it loaded when it exits, and a later JVM given -XX:SharedArchiveFile maps
them (docs/benchmarks.md has the gain). `python -m sparkcdc.pipeline.class_archive` makes one by
running the capture's warm-up query (pipeline/warmup.py); scripts/setup.sh runs it and the capture
uses the archive when it exists.

An archive is only ever an optimisation. Its name carries the JDK and the Spark it was made for
(down to its jars' sizes and times, which the JVM checks: a virtualenv made again at the same
path gets a new archive), so an upgrade leaves it unused rather than wrong; and a JVM that finds
an archive it cannot use (another class path, a damaged file) runs without it.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
from typing import Mapping, Optional


def _java_executable(environ: Mapping[str, str]) -> Optional[str]:
    """The `java` Spark's launcher runs (bin/spark-class: $JAVA_HOME/bin/java, else PATH's)."""
    if environ.get("JAVA_HOME"):
        return os.path.join(environ["JAVA_HOME"], "bin", "java")
    return shutil.which("java", path=environ.get("PATH"))


def _jars_signature(spark_home: str) -> str:
    """Name, size and modification time of every jar Spark's JVM puts on its class path: the JVM
    refuses an archive when one of them changed (a reinstalled pyspark at the same path)."""
    jars = os.path.join(spark_home, "jars")
    try:
        names = sorted(name for name in os.listdir(jars) if name.endswith(".jar"))
    except OSError:
        return ""
    entries = []
    for name in names:
        stat = os.stat(os.path.join(jars, name))
        entries.append(f"{name}:{stat.st_size}:{stat.st_mtime_ns}")
    return ",".join(entries)


def archive_path(environ: Mapping[str, str] = os.environ, spark_home: Optional[str] = None) -> Optional[str]:
    """Where the archive for this JDK and this pyspark (`spark_home`, by default pyspark's
    directory) lives; None without a `java`."""
    import pyspark

    from sparkcdc.pipeline.spark_session import cache_dir

    java = _java_executable(environ)
    if java is None or not os.path.exists(java):
        return None
    java = os.path.realpath(java)
    jvm_stat = os.stat(java)
    spark_home = os.path.realpath(spark_home or os.path.dirname(pyspark.__file__))
    key = "\n".join([java, str(jvm_stat.st_mtime_ns), str(jvm_stat.st_size), spark_home, pyspark.__version__,
                     _jars_signature(spark_home)])
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    return os.path.join(cache_dir(environ), f"spark-{pyspark.__version__}-{digest}.jsa")


def existing_archive(environ: Mapping[str, str] = os.environ) -> Optional[str]:
    """The archive for this JDK and pyspark if it has been made, else None."""
    path = archive_path(environ)
    return path if path is not None and os.path.isfile(path) else None


def build(path: str, timeout: float = 600.0) -> None:
    """Make the archive at `path`: a child process runs the warm-up query on a Spark session whose
    JVM writes its classes at exit. Written beside `path` and renamed, so a capture never maps a
    half-written archive."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    partial = f"{path}.{os.getpid()}.partial"
    log_path = f"{path}.log"
    try:
        with open(log_path, "wb") as log:
            done = subprocess.run([sys.executable, "-m", "sparkcdc.pipeline.class_archive", "--dump", partial],
                                  stdout=log, stderr=subprocess.STDOUT, timeout=timeout)
        if done.returncode != 0 or not os.path.isfile(partial):
            raise RuntimeError(f"making the class archive failed (exit {done.returncode}); see {log_path}")
        os.replace(partial, path)
        os.remove(log_path)
    finally:
        if os.path.exists(partial):
            os.remove(partial)


def _dump(partial: str) -> None:
    """In the child: warm a session whose JVM archives its classes at exit, then make it exit."""
    from pyspark import SparkContext

    from sparkcdc.pipeline.spark_session import make_spark_session
    from sparkcdc.pipeline.warmup import warm_up

    spark = make_spark_session(spark_conf={"spark.driver.extraJavaOptions":
                                           f"-XX:ArchiveClassesAtExit={partial} -Xlog:cds=error"})
    warm_up(spark)
    jvm = SparkContext._gateway.proc  # bin/spark-submit exec's the JVM: this is its process
    spark.stop()
    # The JVM exits (and writes the archive) when its stdin closes (PythonGatewayServer).
    jvm.stdin.close()
    jvm.wait(timeout=300)


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m sparkcdc.pipeline.class_archive",
        description="Make the class-data-sharing archive that speeds up a sparkcdc capture's Spark start, "
                    "in $SPARKCDC_CACHE_DIR (default ~/.cache/sparkcdc); kept until the JDK or pyspark changes.")
    parser.add_argument("--force", action="store_true", help="make it again even if it exists")
    parser.add_argument("--dump", metavar="PATH", help=argparse.SUPPRESS)  # the child of build()
    args = parser.parse_args(argv)
    if args.dump:
        _dump(args.dump)
        return 0
    path = archive_path()
    if path is None:
        print("no `java` found (JAVA_HOME or PATH): nothing to archive", file=sys.stderr)
        return 1
    if os.path.isfile(path) and not args.force:
        print(f"class archive up to date: {path}")
        return 0
    build(path)
    print(f"class archive made: {path} ({os.path.getsize(path) / 2**20:,.0f} MiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
