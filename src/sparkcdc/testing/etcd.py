"""A private single-node etcd (Debian's `etcd-server`) on 127.0.0.1, for tests and demos.

Own data dir, own client and peer ports. `pause()`/`resume()` SIGSTOP/SIGCONT it, the way a
partition or a stalled etcd looks to the captures.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from typing import Optional

from sparkcdc.testing.ports import free_port


def etcd_binary() -> Optional[str]:
    return shutil.which("etcd") or ("/usr/bin/etcd" if os.path.exists("/usr/bin/etcd") else None)


@dataclass
class EtcdServer:
    data_dir: str
    client_port: int = field(default_factory=free_port)
    peer_port: int = field(default_factory=free_port)
    process: Optional[subprocess.Popen] = field(default=None, init=False)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.client_port}"

    def start(self, timeout: float = 30.0) -> "EtcdServer":
        binary = etcd_binary()
        if binary is None:
            raise RuntimeError("etcd is not installed: apt-get install etcd-server (scripts/setup.sh does it)")
        os.makedirs(self.data_dir, exist_ok=True)
        peer = f"http://127.0.0.1:{self.peer_port}"
        log = open(os.path.join(os.path.dirname(self.data_dir.rstrip("/")) or ".", "etcd.log"), "ab")
        self.process = subprocess.Popen(
            [binary, "--name", "n1", "--data-dir", os.path.join(self.data_dir, "member-data"),
             "--listen-client-urls", self.endpoint, "--advertise-client-urls", self.endpoint,
             "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
             "--initial-cluster", f"n1={peer}", "--initial-cluster-state", "new",
             "--log-level", "warn"],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"etcd exited with {self.process.returncode}")
            try:
                with urllib.request.urlopen(self.endpoint + "/health", timeout=1) as response:
                    if b'"true"' in response.read():
                        return self
            except OSError:
                pass
            time.sleep(0.1)
        raise TimeoutError(f"etcd not healthy after {timeout}s on {self.endpoint}")

    def pause(self) -> None:
        os.kill(self.process.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.process.pid, signal.SIGCONT)

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        os.kill(self.process.pid, signal.SIGCONT)
        self.process.terminate()
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=15)
