"""Scratch directories of benchmarks: removed when the process exits, so repeated runs do not
fill the disk (a 10M-row snapshot run leaves tens of GB of datadirs, binlogs and sink output).

`SPARKCDC_BENCH_KEEP=1` keeps them, to read a failed run's logs."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

KEEP_VARIABLE = "SPARKCDC_BENCH_KEEP"


def scratch_dir(prefix: str) -> str:
    """A new directory under the system's temp dir, removed at exit unless SPARKCDC_BENCH_KEEP is set.
    Servers started in it must be stopped before then (the benches stop theirs in `finally`)."""
    path = tempfile.mkdtemp(prefix=prefix)
    if os.environ.get(KEEP_VARIABLE, "") not in ("", "0"):
        print(f"{KEEP_VARIABLE}: keeping {path}", flush=True)
    else:
        atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path
