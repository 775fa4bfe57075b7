"""A Spark standalone cluster (one master, one worker) from the pyspark installation's own jars."""

from __future__ import annotations

import glob
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from typing import Optional

from sparkcdc.testing.ports import free_port


def spark_home() -> str:
    import pyspark

    return os.path.dirname(pyspark.__file__)


def cluster_env() -> dict[str, str]:
    """Environment for the master, the worker, the executors it forks and the driver."""
    # SPARK_SCALA_VERSION: the worker's launcher would otherwise look for a source build's dirs.
    return dict(os.environ, SPARK_HOME=spark_home(), SPARK_LOCAL_IP="127.0.0.1", SPARK_SCALA_VERSION="2.13",
                PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)


def start_spark_jvm(work_dir: str, name: str, main_class: str, *args: str) -> subprocess.Popen:
    """A Spark daemon (master, worker) on pyspark's jars, logging to <work_dir>/<name>.log."""
    classpath = os.path.join(spark_home(), "jars", "*")
    return spawn_logged(work_dir, name, ["java", "-Xmx512m", "-cp", classpath, main_class, *args])


def spawn_logged(work_dir: str, name: str, argv: list[str]) -> subprocess.Popen:
    """A process in its own session with cluster_env(), stdout and stderr to <work_dir>/<name>.log."""
    with open(os.path.join(work_dir, f"{name}.log"), "ab") as log:
        return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=cluster_env(), start_new_session=True)


def stop_processes(processes: list[subprocess.Popen]) -> None:
    """SIGTERM each process group (newest first), SIGKILL what outlives 30 s; empties the list."""
    for process in reversed(processes):
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=30)
    processes.clear()


@dataclass
class StandaloneCluster:
    work_dir: str
    worker_cores: int = 2
    worker_memory: str = "1g"
    port: int = field(default_factory=free_port)
    master_ui_port: int = field(default_factory=free_port)
    worker_ui_port: int = field(default_factory=free_port)
    _processes: list[subprocess.Popen] = field(default_factory=list, init=False)

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def _java(self, name: str, main_class: str, *args: str) -> subprocess.Popen:
        process = start_spark_jvm(self.work_dir, name, main_class, *args)
        self._processes.append(process)
        return process

    def start(self, timeout: float = 90.0) -> "StandaloneCluster":
        """Starts a master and one worker and waits for the worker to register; a start that fails
        stops the daemons it started before it raises, so no JVM outlives the test."""
        try:
            return self._start(timeout)
        except BaseException:
            self.stop()
            raise

    def _start(self, timeout: float) -> "StandaloneCluster":
        os.makedirs(self.work_dir, exist_ok=True)
        self._java("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                   "--port", str(self.port), "--webui-port", str(self.master_ui_port))
        self._java("worker", "org.apache.spark.deploy.worker.Worker", self.master_url,
                   "--host", "127.0.0.1", "--cores", str(self.worker_cores), "--memory", self.worker_memory,
                   "--webui-port", str(self.worker_ui_port),
                   "--work-dir", os.path.join(self.work_dir, "worker"))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for process in self._processes:
                if process.poll() is not None:
                    raise RuntimeError(f"a Spark daemon exited with {process.returncode}; see {self.work_dir}/*.log")
            state = self.master_state()
            if state and any(w.get("state") == "ALIVE" for w in state.get("workers", [])):
                return self
            time.sleep(0.5)
        raise TimeoutError(f"no Spark worker registered within {timeout}s; see {self.work_dir}/*.log")

    def master_state(self) -> Optional[dict]:
        """The master's JSON status (workers, applications), or None while it is not up. Just
        after the master's web UI binds its port, it can answer /json/ with an HTML page (seen
        once in CI, 2026-12-02): that is not up yet either."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.master_ui_port}/json/", timeout=5) as response:
                return json.loads(response.read())
        except (OSError, ValueError):  # json.JSONDecodeError is a ValueError
            return None

    def executor_logs(self) -> str:
        """The stderr of every executor the worker ran (in its work dir: app-*/<executor>/stderr)."""
        text = []
        for path in sorted(glob.glob(os.path.join(self.work_dir, "worker", "app-*", "*", "stderr"))):
            with open(path, encoding="utf-8", errors="replace") as f:
                text.append(f.read())
        return "\n".join(text)

    def stop(self) -> None:
        stop_processes(self._processes)
