"""Start-up benchmark: `changefeed create` -> the changefeed's first checkpoint move, on a fresh
`sparkcdc server`, with the create sent right after the server is ready or after a gap.

    .venv/bin/python bench/startup_bench.py [--gaps 0,30] [--trigger-interval 1s]

A private MariaDB with one small table; for each gap a new server (new data dir, so nothing is
resumed) starts, waits `gap` seconds after "ready", then creates a changefeed to the file sink and
polls the Open API until its checkpoint-ts moves. A single-node server warms its Spark session 5 s
after start when no changefeed was resumed (server/capture.py), so a gap longer than that plus the
warm-up itself (~5-18 s on 2 cores, by load) measures a warm first query; gap 0 a cold one. Prints,
per gap: time to "ready", how long the create call took, create -> first checkpoint move, and the
load average.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))

from sparkcdc.testing.mariadb import MariaDBServer  # noqa: E402
from sparkcdc.testing.server_process import ServerProcess  # noqa: E402
from sparkcdc.testing.scratch import scratch_dir  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gaps", default="0,30", help="comma-separated seconds between ready and create")
    parser.add_argument("--trigger-interval", default=None, metavar="DURATION", help="the server's --trigger-interval")
    args = parser.parse_args()
    try:
        gaps = [float(gap) for gap in args.gaps.split(",") if gap.strip()]
    except ValueError:
        parser.error(f"--gaps {args.gaps!r}: give seconds separated by commas, e.g. 0,30")
    if not gaps or min(gaps) < 0:
        parser.error("--gaps needs at least one gap, none negative")
    extra = ("--trigger-interval", args.trigger_interval) if args.trigger_interval else ()

    base = scratch_dir("sparkcdc-startup-")
    mariadb = MariaDBServer(os.path.join(base, "mariadb")).start()
    try:
        with mariadb.connect().cursor() as cur:
            cur.execute("CREATE DATABASE startup")
            cur.execute("CREATE TABLE startup.t (id INT PRIMARY KEY)")
            cur.execute("INSERT INTO startup.t VALUES (1), (2), (3)")
        for number, gap in enumerate(gaps):
            began = time.monotonic()
            server = ServerProcess(os.path.join(base, f"cdc-{number}"), mariadb.uri, extra_args=extra).start()
            ready = time.monotonic() - began
            try:
                time.sleep(gap)
                load = os.getloadavg()
                began = time.monotonic()
                server.cli("changefeed", "create", "-c", "startup",
                           "--sink-uri", f"file://{base}/out-{number}?protocol=canal-json")
                created = time.monotonic() - began
                first = server.checkpoint("startup")
                while server.checkpoint("startup") == first:
                    time.sleep(0.05)
                print(f"gap {gap:.0f}s: server ready in {ready:.1f}s; create call {created:.1f}s; "
                      f"create -> first checkpoint move {time.monotonic() - began:.1f}s; "
                      f"load average at create {load[0]:.1f}, now {os.getloadavg()[0]:.1f}", flush=True)
            finally:
                server.stop()
    finally:
        mariadb.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
