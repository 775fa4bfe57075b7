"""Named failpoints, in the spirit of TiCDC's `failpoint.Inject` (pingcap/failpoint): a point in the
code that does nothing unless armed, so tests can crash a server mid-batch or shorten an interval
without a test-only branch in the data path.

A point is evaluated where it sits (`value(name)` is one dictionary lookup; None when unarmed) and
the code around it stays the one path production runs. Points are armed only through the
SPARKCDC_FAILPOINTS environment variable, read once when `sparkcdc server` starts
(`arm_from_environment`), which logs a warning naming every armed point; a test arms a point in its
own process with `enabled(...)`. docs/failpoints.md lists the points.

    SPARKCDC_FAILPOINTS="kill-after-ddl=return(ADD COLUMN c);sync-point-interval=return(2s)"

Each entry is `name=return(VALUE)` (pingcap/failpoint's term): the armed point gets VALUE, whose
meaning the point defines. Every point is declared in POINTS, so a misspelt name fails at start.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import signal
from typing import Iterator, Mapping, Optional

from sparkcdc.errors import ErrInvalidFailpoint

ENV = "SPARKCDC_FAILPOINTS"

# Every failpoint: name -> what arming it does (docs/failpoints.md shows the same).
POINTS: dict[str, str] = {
    "kill-after-first-table": (
        "return(TABLE): with a redo log, in the first batch with rows of TABLE and of another table, the "
        "server SIGKILLs its process group once the sink has taken and flushed the first table of the redo "
        "piece holding TABLE's rows: a crash that leaves the downstream mid-batch"),
    "kill-after-ddl": (
        "return(TEXT): the server SIGKILLs its process group right after it executed a DDL whose text "
        "contains TEXT, before the checkpoint passes the DDL: the restart replays the DDL"),
    "changefeed-error-stuck-duration": (
        "return(DURATION): replaces every changefeed's changefeed-error-stuck-duration (minimum 30m), so a "
        "test can watch a changefeed give up"),
    "sync-point-interval": (
        "return(DURATION): replaces every changefeed's sync-point-interval (minimum 30s)"),
    "pause-inside-transaction": (
        "return(SECONDS): a batch that ends inside a large transaction (after some of its pieces) waits SECONDS "
        "before its checkpoint, once per transaction, logging where: a test can fail the upstream over there"),
    "snapshot-wave-pause": (
        "return(SECONDS): an initial snapshot waits SECONDS before each wave of chunk reads, so that a test "
        "can fail the upstream over while the copy is under way"),
    "kill-after-lake-commit": (
        "return(N): the server SIGKILLs its process group in the N-th batch checkpoint of a lakehouse sink "
        "that committed rows, after the table commits and before the checkpoint is recorded"),
}

_TERM = re.compile(r"return\((?P<value>.*)\)", re.S)
_armed: dict[str, str] = {}  # process-wide, as failpoints are: set at start or by a test's enabled()
log = logging.getLogger(__name__)


def value(name: str) -> Optional[str]:
    """The value of the armed failpoint `name`, or None (always, unless armed)."""
    return _armed.get(name)


def parse(text: str) -> dict[str, str]:
    """`name=return(VALUE);...` as {name: VALUE}; ErrInvalidFailpoint for anything else."""
    points: dict[str, str] = {}
    for entry in filter(None, (part.strip() for part in text.split(";"))):
        name, _, term = (part.strip() for part in entry.partition("="))
        match = _TERM.fullmatch(term)
        if name not in POINTS or match is None:
            raise ErrInvalidFailpoint(
                f"{ENV} entry {entry!r} is not NAME=return(VALUE) with NAME one of {', '.join(POINTS)}; "
                "fix or unset it (failpoints are for tests, never for production)")
        points[name] = match["value"]
    return points


def arm_from_environment(environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """Arm the failpoints SPARKCDC_FAILPOINTS names (at process start), warning loudly about each."""
    points = parse(environ.get(ENV, ""))
    _armed.clear()
    _armed.update(points)
    for name, armed in points.items():
        log.warning("FAILPOINT ARMED: %s=return(%s) (%s is set: this process injects faults; never set it "
                    "in production)", name, armed, ENV)
    return points


@contextlib.contextmanager
def enabled(name: str, armed: str) -> Iterator[None]:
    """Arm one failpoint in this process for the duration of the block (tests)."""
    parse(f"{name}=return({armed})")
    previous = _armed.get(name)
    _armed[name] = armed
    try:
        yield
    finally:
        if previous is None:
            _armed.pop(name, None)
        else:
            _armed[name] = previous


def kill_process_group(name: str, where: str) -> None:
    """What a kill failpoint does: log, then SIGKILL this process's group (the server and its Spark)."""
    log.error("FAILPOINT %s: killing the server %s", name, where)
    os.killpg(os.getpgrp(), signal.SIGKILL)
