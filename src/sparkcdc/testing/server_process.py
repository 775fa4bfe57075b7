"""`sparkcdc server` as a child process, for the demo, e2e tests and benchmarks."""

from __future__ import annotations

import json
import os
import signal
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Optional

from sparkcdc.testing.ports import free_port


def run_sparkcdc(*args: str, timeout: float = 180.0) -> subprocess.CompletedProcess:
    """One `sparkcdc ...` command (a consumer run `--once`, a diff) in a child process."""
    return subprocess.run([sys.executable, "-m", "sparkcdc.cli.main", *args],
                          capture_output=True, text=True, timeout=timeout)


# Starts of a server whose chosen port turned out taken (ServerProcess.start).
PORT_ATTEMPTS = 3


class _PortTaken(RuntimeError):
    """The server exited because another process holds its port."""


@dataclass
class ServerProcess:
    data_dir: str
    upstream_uri: str
    port: int = 0  # 0: a free port, chosen again when the server finds it taken at its start
    log_path: Optional[str] = None
    extra_args: tuple[str, ...] = ()  # more `sparkcdc server` flags, e.g. ("--pd", etcd.endpoint)
    ssl_context: Optional[ssl.SSLContext] = None  # for a server started with --cert/--key (https)
    process: Optional[subprocess.Popen] = field(default=None, init=False)

    def __post_init__(self) -> None:
        self._port_chosen = not self.port
        if self._port_chosen:
            self.port = free_port()

    @property
    def url(self) -> str:
        return f"{'https' if self.ssl_context else 'http'}://127.0.0.1:{self.port}"

    def start(self, timeout: float = 180.0) -> "ServerProcess":
        """Start the server and return once it serves. A port chosen here was free when chosen;
        another process may take it before the server binds it (its first step; until 2026-12-03
        it bound only after its Spark had started, whose JVM took the port once in CI): a server
        that exits because its port was taken starts again on another."""
        for attempt in range(1, PORT_ATTEMPTS + 1):
            try:
                return self._start_once(timeout)
            except _PortTaken:
                if not self._port_chosen or attempt == PORT_ATTEMPTS:
                    raise
                self.port = free_port()
        raise AssertionError("unreachable")

    def _start_once(self, timeout: float) -> "ServerProcess":
        os.makedirs(self.data_dir, exist_ok=True)
        log_path = self.log_path or os.path.join(self.data_dir, "server.log")
        env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
        log_offset = os.path.getsize(log_path) if os.path.exists(log_path) else 0
        # The server's output may show its data: private, as the files the server makes itself.
        with os.fdopen(os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600), "ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "sparkcdc.cli.main", "server",
                 "--addr", f"127.0.0.1:{self.port}", "--data-dir", self.data_dir,
                 "--upstream-uri", self.upstream_uri, *self.extra_args],
                stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                failure = _PortTaken if _log_contains(log_path, log_offset, b"Address already in use") else RuntimeError
                raise failure(f"sparkcdc server exited with {self.process.returncode}; see {log_path}")
            # Poll the port only once the server says it listens: until then another process (a
            # Spark JVM's short-lived Python-worker auth socket, which reads a length prefix and
            # dies with OutOfMemoryError on "GET ") may own the port, above all after a restart.
            if not _log_contains(log_path, log_offset, b"sparkcdc server ready:"):
                time.sleep(0.5)
                continue
            try:
                self.api("GET", "/api/v2/health")
                return self
            except OSError:
                time.sleep(0.5)
        raise TimeoutError(f"sparkcdc server not ready after {timeout}s; see {log_path}")

    def api(self, method: str, path: str, body: Optional[dict] = None, timeout: float = 120.0):
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.url + path, data=data, method=method,
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=timeout, context=self.ssl_context) as response:
                text = response.read().decode()
        except urllib.error.HTTPError as exc:
            raise ApiError(exc.code, exc.read().decode()) from None
        return json.loads(text) if text else None

    def cli(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        result = subprocess.run(
            [sys.executable, "-m", "sparkcdc.cli.main", "cli", *args, "--server", self.url],
            capture_output=True, text=True, timeout=180, stdin=subprocess.DEVNULL,  # a prompt is answered "no"
        )
        if check and result.returncode != 0:
            raise RuntimeError(f"sparkcdc cli {' '.join(args)} failed: {result.stderr}{result.stdout}")
        return result

    def checkpoint(self, changefeed_id: str) -> int:
        return int(self.api("GET", f"/api/v2/changefeeds/{changefeed_id}")["checkpoint_ts"])

    def query(self, changefeed_id: str) -> dict:
        """`cli changefeed query -c CHANGEFEED`: its state, error, checkpoint, puller and more."""
        return json.loads(self.cli("changefeed", "query", "-c", changefeed_id).stdout)

    def recovers_from_warning(self, changefeed_id: str, error_code: str, timeout: float,
                              states: Optional[list[str]] = None) -> list[str]:
        """Polls `changefeed query` until the changefeed is `normal` after a `warning` whose error
        is `error_code` (a retryable fault it got over by itself); `states`, the states seen before
        (during the fault), with those seen here appended. AssertionError when a warning names
        another error, or it is not normal again in time."""
        states = [] if states is None else states
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            state = self.query(changefeed_id)
            states.append(state["state"])
            if state["state"] == "warning":
                assert state["error"]["code"] == error_code, state
            if state["state"] == "normal" and "warning" in states:
                return states
            time.sleep(1)
        raise AssertionError(f"{changefeed_id}: no warning then normal in {timeout:.0f} s: {states}")

    def stop(self) -> None:
        self._signal(signal.SIGTERM, wait=60)

    def kill(self) -> None:
        """SIGKILL the whole process group (the server and its Spark JVM), as a crash would."""
        self._signal(signal.SIGKILL, wait=30)

    def _signal(self, sig: int, wait: float) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        try:
            if sig == signal.SIGKILL:
                os.killpg(self.process.pid, sig)
            else:
                self.process.send_signal(sig)
            self.process.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=30)
        except ProcessLookupError:
            pass


def _log_contains(path: str, offset: int, text: bytes) -> bool:
    with open(path, "rb") as log:
        log.seek(offset)
        return text in log.read()


class ApiError(Exception):
    def __init__(self, status: int, body: str):
        super().__init__(f"HTTP {status}: {body}")
        self.status = status
        self.body = body
