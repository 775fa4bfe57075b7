"""`sparkcdc redo apply | meta`: restore a MySQL downstream from a changefeed's redo log (TiCDC's
`cdc redo`).

    sparkcdc redo meta --storage file:///data/redo
    sparkcdc redo apply --storage s3://bucket/redo?endpoint=... --tmp-dir /tmp/redo \\
        --sink-uri mysql://root@127.0.0.1:3306/

`apply` brings the downstream to the upstream's state as of the redo resolved-ts; see docs/redo.md.
"""

from __future__ import annotations

import argparse

from sparkcdc.cli.logs import add_log_format_argument, configure_logging
from sparkcdc.cli.passwords import PasswordOption
from sparkcdc.errors import ErrSinkURIInvalid

# --sink-uri with --sink-password-file / SPARKCDC_SINK_PASSWORD.
SINK = PasswordOption("sink", ErrSinkURIInvalid)


def register(subparsers) -> None:
    parser = subparsers.add_parser("redo", help="read or apply a changefeed's redo log",
                                   description="Read or apply the redo log of a changefeed with "
                                               "[consistent] level = \"eventual\".")
    commands = parser.add_subparsers(dest="redo_command", metavar="COMMAND")
    commands.required = True

    def common(sub) -> None:
        sub.add_argument("--storage", required=True,
                         help="the changefeed's consistent.storage URI (file://, s3://, gcs://, azblob://)")
        sub.add_argument("--tmp-dir", default="", help="local directory that remote log files are staged in")
        sub.add_argument("--log-level", default="info", choices=["debug", "info", "warn", "error"])
        add_log_format_argument(sub)

    apply = commands.add_parser("apply", help="apply the redo log to a MySQL-compatible downstream",
                                description="Apply rows and DDLs with checkpoint-ts < commit-ts <= resolved-ts "
                                            "to the downstream, idempotently.")
    common(apply)
    SINK.add_arguments(apply, "mysql:// or tidb:// URI of the downstream", required=True)
    apply.set_defaults(func=run_apply)
    meta = commands.add_parser("meta", help="print the redo log's checkpoint-ts and resolved-ts")
    common(meta)
    meta.set_defaults(func=run_meta)


def run_meta(args: argparse.Namespace) -> int:
    from sparkcdc.redo.reader import RedoReader
    from sparkcdc.redo.storage import RedoStorage

    configure_logging(args.log_level, log_format=args.log_format)
    meta = RedoReader(RedoStorage.from_uri(args.storage), args.tmp_dir or None).effective_meta()
    print(f"checkpoint-ts:{meta.checkpoint_ts}, resolved-ts:{meta.resolved_ts}")
    return 0


def run_apply(args: argparse.Namespace) -> int:
    from sparkcdc.config.replica import ReplicaConfig
    from sparkcdc.config.sink_uri import mask_sink_uri
    from sparkcdc.sink.registry import classify_sink_uri
    from sparkcdc.redo.applier import apply_steps
    from sparkcdc.redo.reader import RedoReader
    from sparkcdc.redo.storage import RedoStorage
    from sparkcdc.observability.progress import Progress

    configure_logging(args.log_level, log_format=args.log_format)
    sink_uri = SINK.uri(args)
    if classify_sink_uri(sink_uri) != "mysql":
        raise ErrSinkURIInvalid(f"redo apply writes to a MySQL-compatible downstream; {mask_sink_uri(sink_uri)!r} "
                                "is not a mysql:// or tidb:// URI")
    from sparkcdc.sink.mysql.sink import MySQLSink

    reader = RedoReader(RedoStorage.from_uri(args.storage), args.tmp_dir or None)
    meta = reader.effective_meta()
    # Every transaction at or below replicating_ts is written idempotently: all of them here.
    with MySQLSink(sink_uri, ReplicaConfig(), replicating_ts=2**64 - 1) as sink:
        result = apply_steps(reader.steps(meta), sink, meta, Progress("redo apply", unit="rows"))
    print(f"applied {result.rows} row changes and {result.ddls} DDLs; the downstream is at resolved-ts "
          f"{result.resolved_ts} (checkpoint-ts was {result.checkpoint_ts})")
    return 0
