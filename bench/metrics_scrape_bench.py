"""What one scrape of /metrics costs the server, in CPU: the part of the cost of metrics that
grows with the scrape rate (issue 26: < 3% of catch-up rows/s with metrics on).

    .venv/bin/python bench/metrics_scrape_bench.py [--scrapes 300] [--changefeeds 2]

A private MariaDB and a `sparkcdc server` with changefeeds to the file sink, caught up and idle.
Then, alternately, a phase of back-to-back scrapes of /metrics and an idle phase of the same
length; the server tree's CPU in the scrape phases less that of the idle phases, over the
scrapes, is the CPU of one scrape. Prints it, the wall time of a scrape, the exposition's size,
and what it comes to at a scrape every 1 s and every 15 s as a share of one core. The per-batch
recording costs microseconds and is not measured here (docs/operations.md).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))

from sparkcdc.testing.mariadb import MariaDBServer  # noqa: E402
from sparkcdc.testing.process_usage import tree_usage  # noqa: E402
from sparkcdc.testing.scratch import scratch_dir  # noqa: E402
from sparkcdc.testing.server_process import ServerProcess  # noqa: E402


def scrape(url: str) -> int:
    with urllib.request.urlopen(url + "/metrics", timeout=30) as response:
        return len(response.read())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scrapes", type=int, default=300, help="scrapes per scrape phase")
    parser.add_argument("--rounds", type=int, default=3, help="scrape phase + idle phase pairs")
    parser.add_argument("--changefeeds", type=int, default=2)
    args = parser.parse_args()
    base = scratch_dir("sparkcdc-scrape-bench-")
    mariadb = MariaDBServer(os.path.join(base, "mariadb")).start()
    server = None
    try:
        with mariadb.connect().cursor() as cur:
            cur.execute("CREATE DATABASE scrape")
            cur.execute("CREATE TABLE scrape.t (id INT PRIMARY KEY, v VARCHAR(20))")
            cur.execute("USE scrape")  # the sequence engine's seq_ tables are per database
            cur.execute("INSERT INTO t SELECT seq, 'x' FROM seq_1_to_1000")
        server = ServerProcess(os.path.join(base, "cdc"), mariadb.uri).start()
        for number in range(args.changefeeds):
            server.cli("changefeed", "create", "-c", f"scrape-{number}",
                       "--sink-uri", f"file://{base}/out-{number}?protocol=canal-json")
        for number in range(args.changefeeds):
            first = server.checkpoint(f"scrape-{number}")
            while server.checkpoint(f"scrape-{number}") == first:
                time.sleep(0.5)
        time.sleep(10)  # past the first batches and the warm-up
        print(f"load average before: {os.getloadavg()}", flush=True)
        pid = server.process.pid
        per_scrape, walls, size = [], [], 0
        for round_number in range(1, args.rounds + 1):
            cpu0 = tree_usage(pid)[0]
            began = time.monotonic()
            for _ in range(args.scrapes):
                size = scrape(server.url)
            wall = time.monotonic() - began
            cpu1 = tree_usage(pid)[0]
            time.sleep(wall)  # the same length idle: the changefeeds' own batches, the sampler
            idle = tree_usage(pid)[0] - cpu1
            cpu = (cpu1 - cpu0 - idle) / args.scrapes
            per_scrape.append(cpu)
            walls.append(wall / args.scrapes)
            print(f"round {round_number}: {args.scrapes} scrapes in {wall:.1f}s, server CPU {cpu1 - cpu0:.2f}s "
                  f"(idle for as long: {idle:.2f}s): {cpu * 1000:.1f} ms CPU per scrape", flush=True)
        cpu = statistics.median(per_scrape)
        print(f"load average after: {os.getloadavg()}")
        print(f"\nmedian of {args.rounds}: {cpu * 1000:.1f} ms of server CPU and {statistics.median(walls) * 1000:.1f} ms "
              f"wall per scrape, {size:,} bytes, {args.changefeeds} changefeeds; a scrape every 1 s takes "
              f"{cpu * 100:.2f}% of a core, every 15 s {cpu * 100 / 15:.3f}%")
    finally:
        if server is not None:
            server.stop()
        mariadb.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
