"""`sparkcdc demo`: a local MariaDB, a sample workload and a changefeed to file storage.

Starts a private MariaDB with row binlog, a `sparkcdc server`, creates a canal-json changefeed
to the output directory, runs a workload, waits for it to be replicated, rebuilds every table
from the files, compares it with MariaDB, and prints where to look.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "demo", help="run a local demo changefeed (MariaDB -> Spark -> file storage, canal-json)"
    )
    parser.add_argument("--dir", default="./demo-data", help="MariaDB and server state (default %(default)s)")
    parser.add_argument("--output", default="./demo-output", help="the changefeed's storage sink (default %(default)s)")
    parser.add_argument("--transactions", type=int, default=300, help="workload size (default %(default)s)")
    parser.add_argument("--protocol", default="canal-json", choices=["canal-json", "csv"])
    parser.add_argument("--keep-running", action="store_true", help="leave MariaDB and the server running")
    parser.set_defaults(func=run_demo)


def run_demo(args: argparse.Namespace) -> int:
    from sparkcdc.consumer.storage_reader import checkpoint_ts, rebuild_tables
    from sparkcdc.model import tso
    from sparkcdc.testing.compare import diff_tables, read_upstream_table
    from sparkcdc.testing.mariadb import MariaDBServer
    from sparkcdc.testing.server_process import ServerProcess
    from sparkcdc.testing.workload import Workload

    base = os.path.abspath(args.dir)
    output = os.path.abspath(args.output)
    shutil.rmtree(base, ignore_errors=True)
    shutil.rmtree(output, ignore_errors=True)
    os.makedirs(base)
    database = "demo"

    print("1/5 starting MariaDB with row binlog ...", flush=True)
    mariadb = MariaDBServer(os.path.join(base, "mariadb"))
    mariadb.start()
    server = ServerProcess(os.path.join(base, "cdc"), mariadb.uri)
    try:
        print(f"    upstream {mariadb.uri}")
        print("2/5 starting sparkcdc server (Spark local[*]) ...", flush=True)
        server.start()
        print(f"    Open API at {server.url}; log in {os.path.join(base, 'cdc', 'server.log')}")
        sink_uri = f"file://{output}?protocol={args.protocol}"
        if args.protocol == "canal-json":
            sink_uri += "&enable-tidb-extension=true"
        config = os.path.join(base, "changefeed.toml")
        with open(config, "w") as f:
            f.write(f'[filter]\nrules = ["{database}.*"]\n')
        print(f"3/5 creating changefeed 'demo' -> {sink_uri}", flush=True)
        server.cli("changefeed", "create", "-c", "demo", "--sink-uri", sink_uri, "--config", config)

        print(f"4/5 running a workload of {args.transactions} transactions ...", flush=True)
        conn = mariadb.connect()
        workload = Workload(conn, database, seed=42)
        workload.create_tables()
        started = time.monotonic()
        workload.run(args.transactions)
        workload.finish()

        print("5/5 waiting for the changefeed to catch up ...", flush=True)
        rebuilt = None
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            if os.path.exists(os.path.join(output, "metadata")):
                rebuilt = rebuild_tables(output, args.protocol)
                if rebuilt.get((database, "finish_mark")):
                    break
            time.sleep(1)
        else:
            print("the changefeed did not catch up within 300s; see the server log", file=sys.stderr)
            return 1
        lag = time.monotonic() - started

        failures = 0
        print("\nsummary")
        for (schema, table) in sorted(k for k in rebuilt if k[0] == database):
            expected = read_upstream_table(conn, schema, table)
            actual = {tuple(str(v) for v in key): row for key, row in rebuilt[(schema, table)].items()}
            problems = diff_tables(expected, actual)
            failures += bool(problems)
            verdict = "equal to upstream" if not problems else "DIFFERS: " + "; ".join(problems)
            print(f"  {schema}.{table:<12} {len(actual):>5} rows  {verdict}")
        files = sum(len(f) for _, _, f in os.walk(output))
        checkpoint = checkpoint_ts(output)
        print(f"  checkpoint-ts {checkpoint} ({tso.format_time(checkpoint)} UTC), {files} files, "
              f"workload + replication {lag:.1f}s")
        print(f"\nlook at: {output}  (metadata, {database}/<table>/<version>/.../CDC*.json, meta/schema_*.json)")
        print(f"         curl {server.url}/api/v2/changefeeds/demo" if args.keep_running else "")
        return 1 if failures else 0
    finally:
        if not args.keep_running:
            server.stop()
            mariadb.stop()
