"""What the JVM services tests start (Kafka, the schema registry) share: a small-heap, client-JIT
`java` command line, a log file, a clean stop, and a `python -m` entry that runs one until Ctrl-C."""

from __future__ import annotations

import contextlib
import signal
import subprocess
from pathlib import Path
from typing import Callable, ContextManager, Optional, Sequence

# A small heap and the client JIT only: starts in seconds on a busy 2-core machine.
JVM_OPTIONS = ("-Xmx512m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Djava.awt.headless=true")


def java_command(heap_start: str, *arguments: str) -> list[str]:
    return ["java", f"-Xms{heap_start}", *JVM_OPTIONS, *arguments]


def spawn(command: Sequence[str], log_file: Path, cwd: Optional[Path] = None) -> subprocess.Popen:
    """Start a service in its own session, stdout and stderr appended to `log_file`."""
    with open(log_file, "ab") as out:
        return subprocess.Popen(list(command), stdout=out, stderr=subprocess.STDOUT, start_new_session=True, cwd=cwd)


def terminate(process: Optional[subprocess.Popen], timeout: float) -> None:
    """SIGTERM (a clean shutdown), SIGKILL if it has not exited in `timeout` seconds."""
    if process is None or process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(10)


def serve_until_interrupted(service: ContextManager, ready: Callable[[object], str]) -> int:
    """Run a service until Ctrl-C, printing `ready(service)` once it is up."""
    with service as running:
        print(ready(running), flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            signal.pause()
    return 0
