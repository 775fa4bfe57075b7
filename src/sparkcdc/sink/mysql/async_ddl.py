"""ADD INDEX / CREATE INDEX on a TiDB downstream run in the background, as TiCDC does
(cdc/sink/ddlsink/mysql/async_ddl.go and the DDL document): building an index on a large table
can take hours, and TiDB keeps running the job even if the client goes away.

Rules, all TiCDC's:
- The index DDL runs on its own connection and thread. If it ends within `grace` seconds its
  result is the DDL's result; otherwise the sink returns and the changefeed (its checkpoint and
  its rows, including rows of that table) moves on while the index builds.
- The next DDL that touches the same table (ALTER, DROP, RENAME, TRUNCATE, another index, or a
  DROP DATABASE of its database) first waits for the build. DDLs on other tables do not wait.
- On TiDB a build may also be one this process did not start (a restart while it ran): before
  such a DDL the sink polls the server's DDL job list for a running or queueing `add index` job
  on the table. A failing check counts as "nothing running", as in TiCDC.
- Closing the sink does not wait: the job belongs to the downstream now.
- A build that fails after the grace period is logged; there is no later DDL to fail for it
  (TiCDC: "the downstream ddl is lost").
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Optional

from sparkcdc.model.events import DDLEvent
from sparkcdc.schema import ddl_types as T

log = logging.getLogger(__name__)

# TiCDC waits this long for an index DDL before handing it over to the downstream.
ASYNC_DDL_GRACE_SECONDS = 10.0
# How often TiCDC asks the downstream whether an index job it did not start is still running.
SERVER_JOB_POLL_SECONDS = 5.0
ASYNC_DDL_TYPES = frozenset({T.CREATE_INDEX})  # TiDB's ActionAddIndex: ADD [UNIQUE] INDEX, CREATE INDEX


@dataclass(frozen=True)
class TouchedObjects:
    """What a DDL acts on: tables by (schema, table), and whole databases."""

    tables: frozenset[tuple[str, str]]
    schemas: frozenset[str]

    def covers(self, schema: str, table: str) -> bool:
        return (schema, table) in self.tables or schema in self.schemas


def touched_objects(ddl: DDLEvent) -> TouchedObjects:
    """The tables and databases `ddl` acts on: its own table, the table before a rename, every
    table of a multi-table statement; a database-level DDL covers its whole database."""
    if not ddl.table:
        return TouchedObjects(frozenset(), frozenset({ddl.schema}) if ddl.schema else frozenset())
    tables = {(ddl.schema, ddl.table)}
    for info in (ddl.table_info, ddl.pre_table_info):
        if info is not None:
            tables.add((info.schema, info.table))
    for old_schema, old_table, new_schema, new_table in ddl.extra.get("renames", ()):
        tables.update({(old_schema, old_table), (new_schema, new_table)})
    for schema, table in ddl.extra.get("tables", ()):
        tables.add((schema, table))
    return TouchedObjects(frozenset(tables), frozenset())


@dataclass
class IndexBuild:
    ddl: DDLEvent
    done: threading.Event = field(default_factory=threading.Event)
    error: Optional[BaseException] = None
    handed_over: bool = False  # the grace period passed: the sink returned without its result


class AsyncIndexBuilds:
    """Index DDLs running in the background, and the waiting rules for the DDLs after them.

    `execute` runs one DDL to completion on a connection of its own (retries and "already
    applied" handling included) and raises if it fails. `server_job_running(schema, table)`, when
    given, asks the downstream whether an index job is running there (TiDB only).
    """

    def __init__(
        self,
        execute: Callable[[DDLEvent], None],
        grace: float = ASYNC_DDL_GRACE_SECONDS,
        server_job_running: Optional[Callable[[str, str], bool]] = None,
        poll_interval: float = SERVER_JOB_POLL_SECONDS,
        sleep: Callable[[float], None] = time.sleep,
    ):
        self._execute = execute
        self._grace = grace
        self._server_job_running = server_job_running
        self._poll_interval = poll_interval
        self._sleep = sleep
        self._lock = threading.Lock()
        self._builds: list[IndexBuild] = []

    def start(self, ddl: DDLEvent) -> IndexBuild:
        """Run `ddl` in the background; return once it ended or the grace period passed. An error
        within the grace period is raised here, like a synchronous DDL's."""
        build = IndexBuild(ddl)
        with self._lock:
            self._builds.append(build)
        threading.Thread(target=self._run, args=(build,), name=f"async-ddl-{ddl.commit_ts}", daemon=True).start()
        build.done.wait(self._grace)
        with self._lock:
            if not build.done.is_set():
                build.handed_over = True
        if not build.handed_over:
            if build.error is not None:
                raise build.error
            return build
        log.info("index DDL at %d still running downstream after %.0fs; replication moves on while it builds: %s",
                 ddl.commit_ts, self._grace, ddl.query)
        return build

    def _run(self, build: IndexBuild) -> None:
        try:
            self._execute(build.ddl)
        except BaseException as exc:  # start() raises it, or it is logged once nobody waits for it
            build.error = exc
        # Under the lock start() decides whether it hands the build over; a handed-over build's
        # outcome is logged before anyone waiting for it goes on.
        with self._lock:
            if build.handed_over and build.error is not None:
                log.error("background index DDL at %d failed downstream: %s; the index is missing downstream, "
                          "create it there by hand: %s", build.ddl.commit_ts, build.error, build.ddl.query)
            elif build.handed_over:
                log.info("background index DDL at %d finished downstream: %s", build.ddl.commit_ts, build.ddl.query)
            build.done.set()

    def running(self) -> list[DDLEvent]:
        """Index DDLs started and not yet finished."""
        with self._lock:
            return [b.ddl for b in self._builds if not b.done.is_set()]

    def wait_before(self, ddl: DDLEvent) -> None:
        """Block until no index build on a table `ddl` touches is running."""
        touched = touched_objects(ddl)
        with self._lock:
            blocking = [b for b in self._builds if touched.covers(b.ddl.schema, b.ddl.table)]
        for build in blocking:
            if not build.done.is_set():
                log.info("DDL at %d waits for the index DDL at %d on %s.%s to finish downstream", ddl.commit_ts,
                         build.ddl.commit_ts, build.ddl.schema, build.ddl.table)
                build.done.wait()
        # Finished builds are no longer needed (their failures were logged when they ended).
        with self._lock:
            self._builds = [b for b in self._builds if not b.done.is_set()]
        if self._server_job_running is not None:
            for schema, table in sorted(touched.tables):
                while self._server_job_running(schema, table):
                    log.info("DDL at %d waits for a running index job on %s.%s downstream", ddl.commit_ts,
                             schema, table)
                    self._sleep(self._poll_interval)
