"""`sparkcdc diff`: compare tables between two MySQL-compatible endpoints (sync-diff-inspector).

    sparkcdc diff --source mysql://root@127.0.0.1:3306/ --target mysql://root@127.0.0.1:3307/ \\
        --filter 'shop.*' --filter '!shop.audit_log'

Exit code 0: every compared table is equal; 1: differences (listed row by row); 2: the diff
could not run (unreachable endpoint, bad filter or URI, no table selected).
"""

from __future__ import annotations

import argparse
import json
import sys

from sparkcdc.cli.logs import add_log_format_argument, configure_logging
from sparkcdc.cli.passwords import PasswordOption
from sparkcdc.errors import ErrSinkURIInvalid, ErrUpstreamURIInvalid, SparkCDCError

EXIT_EQUAL, EXIT_DIFFERENT, EXIT_ERROR = 0, 1, 2
# --source / --target with --source-password-file / SPARKCDC_SOURCE_PASSWORD and the same for target.
SOURCE = PasswordOption("source", ErrUpstreamURIInvalid, "--source")
TARGET = PasswordOption("target", ErrSinkURIInvalid, "--target")


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "diff", help="compare tables between two MySQL-compatible endpoints by chunked checksums",
        description="Compare tables between two MySQL/MariaDB/TiDB endpoints. Exit code 0 when equal, "
                    "1 when they differ, 2 on errors.")
    SOURCE.add_arguments(parser, "mysql:// URI of the reference side (the upstream)", required=True)
    TARGET.add_arguments(parser, "mysql:// URI of the side to check (the downstream)", required=True)
    parser.add_argument("--filter", action="append", default=None, metavar="RULE",
                        help="table filter rule as in a changefeed's [filter] rules; repeatable "
                             "(default '*.*'; system schemas are never compared)")
    parser.add_argument("--case-sensitive", action="store_true", help="match filter rules case-sensitively")
    parser.add_argument("--chunk-size", type=int, default=1000, help="rows per checksum chunk (default %(default)s)")
    parser.add_argument("--max-reported-rows", type=int, default=100,
                        help="row differences listed per table (counts are always exact; default %(default)s)")
    parser.add_argument("--output", choices=["text", "json"], default="text")
    parser.add_argument("--log-level", default="warn", choices=["debug", "info", "warn", "error"])
    add_log_format_argument(parser)
    parser.set_defaults(func=run_diff)


def run_diff(args: argparse.Namespace) -> int:
    from sparkcdc.diff import DiffOptions, diff_endpoints
    from sparkcdc.observability.progress import Progress

    configure_logging(args.log_level, log_format=args.log_format)
    if args.chunk_size < 1 or args.max_reported_rows < 0:
        print("Error: --chunk-size must be at least 1 and --max-reported-rows at least 0", file=sys.stderr)
        return EXIT_ERROR
    options = DiffOptions(filter_rules=tuple(args.filter or ["*.*"]), case_sensitive=args.case_sensitive,
                          chunk_size=args.chunk_size, max_reported_rows=args.max_reported_rows)
    try:
        source, target = SOURCE.uri(args), TARGET.uri(args)
        progress = Progress("diff", unit="rows")
        report = diff_endpoints(source, target, options, rows_progress=progress)
        progress.finish()
    except SparkCDCError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    if not report.tables:
        print(f"Error: no table matches the filter {list(options.filter_rules)} on either side", file=sys.stderr)
        return EXIT_ERROR
    if args.output == "json":
        print(json.dumps({"equal": report.equal, "tables": [t.to_json() for t in report.tables]}, indent=2,
                         ensure_ascii=False))
    else:
        print(report.summary())
    return EXIT_EQUAL if report.equal else EXIT_DIFFERENT
