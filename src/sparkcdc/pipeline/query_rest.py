"""Stopping a streaming query quietly.

`StreamingQuery.stop()` interrupts the query's thread wherever it is. Inside a batch that
cancels the batch's read job (the batch function then fails in Python: Py4J logs a traceback)
or a checkpoint file write (Hadoop logs the interruption with a stack). While the query still
starts, it strands the Python process Spark launched for a Python data source's driver side,
which fails 15 s later connecting back (PySpark's `CANNOT_OPEN_SOCKET` traceback in the server
log: issue 21, two of them per pause/resume). So a query is stopped at rest: started, and with
no batch in flight, where the interrupt only ends a wait. Waiting is bounded; past the bound
the query is stopped anyway (noisy, never wrong: a stopped changefeed resumes from its
checkpoint).
"""

from __future__ import annotations

import logging
import os
import time
from typing import Callable

log = logging.getLogger(__name__)

# How long a stop waits for its query to come to rest: a batch in flight usually ends within a
# few seconds, a query's start (a Python process Spark launches) within ~20 s at load 10+.
REST_TIMEOUT_SECONDS = 30.0
# Spark's status messages (MicroBatchExecution): still starting, and having asked the sources and
# found nothing to do.
_STARTING = ("Initializing StreamExecution", "Initializing sources")
_AT_REST = "Waiting for data to arrive"


def _wait_for_status(query, done: Callable[[dict], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if not query.isActive:
                return
            status = query.status
        except Exception:  # the query or its session is gone: nothing to wait for
            return
        if done(status):
            return
        time.sleep(0.05)
    log.warning("query %s did not %s within %.0fs; stopping it anyway", query.name, what, timeout)


def wait_until_started(query, timeout: float = REST_TIMEOUT_SECONDS) -> None:
    """Wait until the query's sources are initialized (its Python source process connected)."""
    _wait_for_status(query, lambda status: status.get("message") not in _STARTING, timeout, "finish starting")


def bring_to_rest(query, hold_file: str, timeout: float = REST_TIMEOUT_SECONDS) -> None:
    """Hold the query's source (it plans no batch while `hold_file` exists: the binlog source's
    `hold_file` option) and wait until the query has finished the batch in flight and found
    nothing more to do."""
    os.makedirs(os.path.dirname(hold_file), exist_ok=True)
    with open(hold_file, "w"):
        pass
    _wait_for_status(query, lambda status: status.get("message") == _AT_REST and not status.get("isDataAvailable"),
                     timeout, "come to rest")
