"""A Spark Connect server (`--master local[N]`) from the pyspark installation's own jars."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from dataclasses import dataclass, field
from typing import Optional

from sparkcdc.testing.ports import free_port
from sparkcdc.testing.spark_cluster import spark_home, spawn_logged, stop_processes

CONNECT_SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"


@dataclass
class ConnectServer:
    work_dir: str
    cores: int = 2
    memory: str = "1g"
    port: int = field(default_factory=free_port)
    _processes: list[subprocess.Popen] = field(default_factory=list, init=False)

    @property
    def remote_url(self) -> str:
        return f"sc://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> str:
        return os.path.join(self.work_dir, "connect-server.log")

    def start(self, timeout: float = 120.0) -> "ConnectServer":
        return self.launch().wait_ready(timeout)

    def launch(self) -> "ConnectServer":
        """Start the server and return at once (wait_ready() waits for it), to overlap its ~30 s start."""
        os.makedirs(self.work_dir, exist_ok=True)
        # bin/spark-submit, as sbin/start-connect-server.sh runs it minus the daemon wrapper: its launcher
        # adds the JVM's module options Arrow and Netty need.
        process = spawn_logged(self.work_dir, "connect-server", [
            os.path.join(spark_home(), "bin", "spark-submit"),
            "--class", CONNECT_SERVER_CLASS, "--name", "sparkcdc-connect", "--master", f"local[{self.cores}]",
            "--driver-memory", self.memory,
            "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
            "--conf", f"spark.connect.grpc.binding.port={self.port}",
            "--conf", "spark.ui.enabled=false",
            "--conf", f"spark.sql.warehouse.dir={os.path.join(self.work_dir, 'warehouse')}",
            "--conf", f"spark.local.dir={os.path.join(self.work_dir, 'local')}",
            "--conf", "spark.python.worker.reuse=true",
            "spark-internal"])
        self._processes.append(process)
        return self

    def wait_ready(self, timeout: float = 120.0) -> "ConnectServer":
        process = self._processes[0]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise RuntimeError(f"the Spark Connect server exited with {process.returncode}; see {self.log_path}")
            if self._listening():
                return self
            time.sleep(0.5)
        raise TimeoutError(f"the Spark Connect server did not listen within {timeout}s; see {self.log_path}")

    def _listening(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                return True
        except OSError:
            return False

    @property
    def pid(self) -> Optional[int]:
        return self._processes[0].pid if self._processes else None

    def log_text(self) -> str:
        with open(self.log_path, encoding="utf-8", errors="replace") as f:
            return f.read()

    def stop(self) -> None:
        stop_processes(self._processes)
