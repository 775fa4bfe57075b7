"""A cluster of `sparkcdc server --pd` captures on one private etcd, for the HA e2e tests.

Reads the cluster's state straight from etcd (captures, owner, assignments, checkpoints), so a
test sees what the captures see even while some of them are dead or restarting; parses the
servers' logs into the time windows in which each capture wrote a changefeed's batches.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable, Optional

from sparkcdc.model.position import BinlogPosition
from sparkcdc.server.election.owner import OwnerElection
from sparkcdc.server.etcd_client import EtcdClient
from sparkcdc.server.etcd_store import ClusterKeys
from sparkcdc.testing.etcd import EtcdServer
from sparkcdc.testing.server_process import ServerProcess

NAMESPACE = "default"


def wait_until(predicate: Callable, timeout: float, what: str, interval: float = 0.25):
    """The first truthy value of `predicate()`, or AssertionError naming `what` after `timeout` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


WARM_UP_DONE = b"Spark warm-up done"
WARM_UP_FAILED = b"Spark warm-up failed"


class HACluster:
    def __init__(self, etcd: EtcdServer, servers: list[ServerProcess]):
        self.etcd = etcd
        self.servers = servers
        self.client = EtcdClient(etcd.endpoint, timeout=2.0)
        self.keys = ClusterKeys(NAMESPACE)
        self.killed: set[str] = set()  # capture ids killed by the test: never live again
        self._log_offsets: dict[str, int] = {}  # server log -> where its current run begins

    def start(self, server: ServerProcess, timeout: float = 240) -> ServerProcess:
        """Start (or restart, on the same data dir and, unless it is taken, port) one server;
        returns once it serves."""
        log_path = self.log_path(server)
        self._log_offsets[log_path] = os.path.getsize(log_path) if os.path.exists(log_path) else 0
        return server.start(timeout=timeout)

    def start_all(self, timeout: float = 240) -> None:
        with ThreadPoolExecutor(len(self.servers)) as pool:
            list(pool.map(lambda s: self.start(s, timeout), self.servers))

    @staticmethod
    def log_path(server: ServerProcess) -> str:
        return server.log_path or os.path.join(server.data_dir, "server.log")

    def warm_up_result(self, server: ServerProcess) -> Optional[bool]:
        """Whether the server's current run warmed its Spark (capture.py starts that at once):
        True when done, False when it gave up (the server still works, cold), None until then."""
        log_path = self.log_path(server)
        with open(log_path, "rb") as log:
            log.seek(self._log_offsets.get(log_path, 0))
            text = log.read()
        if WARM_UP_DONE in text:
            return True
        return False if WARM_UP_FAILED in text else None

    def ready_captures(self) -> dict[str, ServerProcess]:
        """Live captures whose Spark warm-up has ended, so a takeover does not compete with it."""
        return {cid: s for cid, s in self.live_captures().items() if self.warm_up_result(s) is not None}

    def stop_all(self) -> None:
        with ThreadPoolExecutor(len(self.servers)) as pool:
            list(pool.map(lambda s: s.stop(), self.servers))

    # -- what etcd says ------------------------------------------------------------------------
    def captures(self) -> dict[str, ServerProcess]:
        """Registered capture id -> its server (a dead capture stays until its lease expires)."""
        by_address = {f"127.0.0.1:{s.port}": s for s in self.servers}
        return {kv.json()["id"]: by_address[kv.json()["address"]] for kv in self.client.get_prefix(self.keys.capture())}

    def live_captures(self) -> dict[str, ServerProcess]:
        """Registered captures whose process runs (a restarted server is a new capture id)."""
        return {cid: s for cid, s in self.captures().items()
                if cid not in self.killed and s.process is not None and s.process.poll() is None}

    def kill(self, capture_id: str) -> ServerProcess:
        """SIGKILL the server of `capture_id` (and its Spark JVM)."""
        server = self.captures()[capture_id]
        self.killed.add(capture_id)
        server.kill()
        return server

    def owner_id(self) -> Optional[str]:
        return OwnerElection(self.client, self.keys, "observer").owner_id()

    def runner_of(self, changefeed_id: str) -> Optional[str]:
        """The capture that replicates the changefeed (None while unassigned or moving)."""
        kv = self.client.get(self.keys.assignment(NAMESPACE, changefeed_id))
        if kv is None:
            return None
        document = kv.json()
        return document["capture_id"] if document["state"] == "replicating" else None

    def checkpoint_position(self, changefeed_id: str) -> tuple[str, int]:
        status = self.client.get(self.keys.status(NAMESPACE, changefeed_id)).json()
        return BinlogPosition.parse(status["checkpoint_position"]).key()

    def wait_checkpoint_reaches(self, changefeed_id: str, position: BinlogPosition, timeout: float) -> None:
        """Wait until the changefeed's checkpoint covers every upstream change before `position`.

        The barrier to compare tables after: a replicated finish-mark row alone is not one, since
        a MySQL sink with several workers may commit it before other rows of its batch, while the
        checkpoint moves only once the whole batch is downstream."""
        wait_until(lambda: self.checkpoint_position(changefeed_id) >= position.key(), timeout,
                   f"the checkpoint of {changefeed_id} to reach {position}")

    def live_runner(self, changefeed_id: str) -> Optional[str]:
        """The changefeed's capture, once that is a live one (not killed, not unassigned)."""
        runner = self.runner_of(changefeed_id)
        return runner if runner and runner in self.live_captures() else None


class ThrottledLoad:
    """Runs `step()` every `interval` s in a background thread until the block ends.

    A fixed rate, not as fast as MariaDB takes it: a failover test needs load the cluster can
    catch up with on a 2-core machine, or every takeover only adds backlog."""

    def __init__(self, step: Callable[[], None], interval: float = 0.25):
        self.step = step
        self.interval = interval
        self.steps = 0
        self.error: Optional[BaseException] = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="load", daemon=True)

    def _run(self) -> None:
        try:
            while not self._stop.wait(self.interval):
                self.step()
                self.steps += 1
        except BaseException as exc:  # surfaced by __exit__
            self.error = exc

    def __enter__(self) -> "ThrottledLoad":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(60)
        if self.error is not None:
            raise self.error


def upstream_position(conn) -> BinlogPosition:
    """Where the upstream's binlog ends now (SHOW MASTER STATUS)."""
    with conn.cursor() as cursor:
        cursor.execute("SHOW MASTER STATUS")
        row = cursor.fetchone()
    return BinlogPosition(row[0], int(row[1]))


# -- logs ----------------------------------------------------------------------------------------
# Not anchored: Spark's console progress bar may precede a log line on the same line.
_BATCH_LINE = re.compile(
    r"\[(?P<time>[\d-]+ [\d:,]+)\] \[INFO\] \[sparkcdc\.pipeline\.runner\] changefeed (?P<cf>\S+) "
    r"batch \d+: .*? in (?P<seconds>[\d.]+)s")


@dataclass(frozen=True)
class WriteWindow:
    """A batch's decode-and-write time on one server, from its log line."""

    server: str
    begin: dt.datetime
    end: dt.datetime


def write_windows(log_paths: dict[str, str], changefeed_id: str) -> list[WriteWindow]:
    """Every logged batch of `changefeed_id`, as (server, begin, end), sorted by begin."""
    windows = []
    for server, path in log_paths.items():
        with open(path, encoding="utf-8", errors="replace") as log:
            for line in log:
                match = _BATCH_LINE.search(line.rstrip("\n"))
                if match and match["cf"] == changefeed_id:
                    end = dt.datetime.strptime(match["time"], "%Y-%m-%d %H:%M:%S,%f")
                    windows.append(WriteWindow(server, end - dt.timedelta(seconds=float(match["seconds"])), end))
    return sorted(windows, key=lambda w: w.begin)


def concurrent_writes(windows: list[WriteWindow]) -> list[tuple[WriteWindow, WriteWindow]]:
    """Pairs of batches of one changefeed that two servers wrote at overlapping times."""
    overlaps = []
    for i, first in enumerate(windows):
        for second in windows[i + 1:]:
            if second.begin >= first.end:
                break
            if second.server != first.server:
                overlaps.append((first, second))
    return overlaps
