"""`sparkcdc server`: one capture process serving the Open API v2."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import stat
import sys
import threading

from sparkcdc.cli.logs import add_log_format_argument, configure_logging
from sparkcdc.cli.passwords import PasswordOption
from sparkcdc.errors import ErrUpstreamURIInvalid, SparkCDCError
from sparkcdc.upstream.native_decode import decoder_description


# --upstream-uri, --upstream-password-file, SPARKCDC_UPSTREAM_PASSWORD.
UPSTREAM = PasswordOption("upstream", ErrUpstreamURIInvalid)


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "server",
        help="run a capture: the binlog puller, the changefeeds and the Open API",
        description="Run a sparkcdc capture: single node on an embedded SQLite store, or, with --pd, "
                    "one member of a cluster whose metadata and owner election live in etcd.",
    )
    parser.add_argument("--addr", default="127.0.0.1:8300", help="API listen address (default %(default)s); bound before the puller and Spark start (one in "
                        "use is an error at once), it takes connections once the server prints ready")
    parser.add_argument("--data-dir", default="./cdc-data", help="metadata, transaction index and Spark state (default %(default)s)")
    UPSTREAM.add_arguments(parser, "the upstream MariaDB/MySQL, e.g. mysql://cdc@127.0.0.1:3306/, or the servers of a "
                                   "replication topology, mysql://cdc@db1:3306,db2:3306/: the primary is followed, and "
                                   "a promoted replica after a failover (docs/failover.md)", required=True)
    parser.add_argument("--cluster-id", default="default", help="captures with the same etcd and cluster id form one cluster")
    parser.add_argument("--pd", default="", metavar="URL",
                        help="etcd endpoint for cluster metadata, e.g. http://127.0.0.1:2379 (TiCDC's flag name); "
                             "empty: single node with SQLite in --data-dir")
    parser.add_argument("--capture-session-ttl", type=int, default=10,
                        help="seconds a capture's etcd lease lives without keepalive (default %(default)s)")
    parser.add_argument("--spark-master", default=None, metavar="URL",
                        help="Spark master URL, e.g. spark://host:7077; this process is the driver (default local[*]; "
                             "with a local master the driver reads the binlog and a snapshot's chunks itself, a thread "
                             "per core; local[1] reads a batch's binlog ranges and a snapshot's chunks one at a time)")
    parser.add_argument("--spark-remote", default=None, metavar="sc://HOST:PORT",
                        help="run changefeeds over Spark Connect: the Connect server's executors decode the binlog, "
                             "this process plans the batches and writes the sinks (sparkcdc must be installed "
                             "for the server's Python workers); not with --spark-master")
    parser.add_argument("--spark-conf", action="append", default=[], type=spark_conf_entry, metavar="KEY=VALUE",
                        help="a Spark setting over sparkcdc's own, e.g. spark.driver.memory=2g; repeatable. "
                             "A JVM flag in spark.driver.extraJavaOptions (or JAVA_TOOL_OPTIONS, _JAVA_OPTIONS) "
                             "replaces sparkcdc's own for the same setting, e.g. -XX:+UseG1GC its collector; "
                             "not with --spark-remote")
    parser.add_argument("--trigger-interval", default="1s", type=trigger_interval, metavar="DURATION",
                        help="the least time between two micro-batches of a changefeed that has caught up, a "
                             "Go duration from 100ms to 1m (default 1s); a shorter one lowers the latency of a "
                             "caught-up changefeed at some CPU: 200ms gave p99 0.44 s at 5,000 rows/s for 0.55 "
                             "cores, 1s 1.23 s for 0.29 (docs/benchmarks.md). A backlog runs batch after batch "
                             "whatever this is, and an idle changefeed moves its checkpoint twice a second at most")
    parser.add_argument("--log-level", default="info", choices=["debug", "info", "warn", "error"])
    parser.add_argument("--log-file", default=None, help="log to this file (mode 0600) instead of stderr")
    add_log_format_argument(parser)
    parser.add_argument("--metrics", default="on", choices=["on", "off"],
                        help="serve Prometheus metrics at /metrics and the status page at /dashboard, both on "
                             "the API's address with its TLS (default %(default)s); off records nothing per batch")
    parser.add_argument("--config", default=None, metavar="TOML",
                        help="server config file; its [security] table takes TiCDC's keys (ca-path, cert-path, "
                             "key-path, cert-allowed-cn, mtls, client-user-required, client-allowed-user)")
    parser.add_argument("--ca", default="", help="CA of client certificates (PEM); needed with --cert-allowed-cn")
    parser.add_argument("--cert", default="", help="server certificate (PEM): serve the API over TLS")
    parser.add_argument("--key", default="", help="server private key (PEM)")
    parser.add_argument("--cert-allowed-cn", default="",
                        help="comma-separated Common Names a client certificate must have (requires --ca)")
    parser.set_defaults(func=run_server)


def trigger_interval(text: str) -> str:
    """--trigger-interval: a Go duration, the source's batch interval (source.BatchPacer)."""
    from sparkcdc.config.replica import parse_go_duration

    try:
        seconds = parse_go_duration(text)
    except ValueError:
        seconds = -1.0
    if not 0.1 <= seconds <= 60:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration from 100ms to 1m; give e.g. 1s or 250ms")
    return f"{round(seconds * 1000)} milliseconds"


def spark_conf_entry(text: str) -> tuple[str, str]:
    """--spark-conf: KEY=VALUE with a spark.* key."""
    key, equals, value = text.partition("=")
    key = key.strip()
    if not equals or not key.startswith("spark."):
        raise argparse.ArgumentTypeError(f"{text!r} is not KEY=VALUE with a spark.* key; give e.g. "
                                         "spark.driver.memory=2g")
    return key, value


def _spark_mode(args: argparse.Namespace) -> tuple[str, str]:
    """(spark master, Spark Connect URL): one of the two, validated."""
    from sparkcdc.errors import ErrSparkRemoteInvalid
    from sparkcdc.pipeline.connect_loop import validate_spark_remote

    if args.spark_remote is None:
        return args.spark_master or "local[*]", ""
    if args.spark_conf:
        raise ErrSparkRemoteInvalid(
            "--spark-conf sets this process's Spark driver, which --spark-remote does not start: set the Spark "
            "Connect server's configuration where it is started")
    if args.spark_master is not None:
        raise ErrSparkRemoteInvalid(
            "--spark-master and --spark-remote exclude each other: give --spark-master to drive Spark from this "
            "process (local or a cluster), or --spark-remote sc://host:port to use a Spark Connect server")
    return "local[*]", validate_spark_remote(args.spark_remote)


def _security(args: argparse.Namespace):
    """[security] from --config, then the TLS flags on top (as TiCDC: flags win), validated."""
    import tomllib

    from sparkcdc.errors import ErrSecurityConfig
    from sparkcdc.server.security import SecurityConfig, security_from_toml

    security = SecurityConfig()
    if args.config:
        try:
            with open(args.config, "rb") as f:
                document = tomllib.load(f)
        except OSError as exc:
            raise ErrSecurityConfig(f"cannot read --config {args.config}: {exc.strerror}") from None
        except tomllib.TOMLDecodeError as exc:
            raise ErrSecurityConfig(f"--config {args.config} is not valid TOML: {exc}") from None
        unknown = sorted(set(document) - {"security"})
        if unknown:
            raise ErrSecurityConfig(
                f"--config {args.config}: sparkcdc reads only the [security] table; remove {', '.join(unknown)} "
                "(other settings are flags of `sparkcdc server`)")
        security = security_from_toml(document, security)
    flags = {name: value for name, value in (("ca_path", args.ca), ("cert_path", args.cert),
                                             ("key_path", args.key)) if value}
    if args.cert_allowed_cn:
        flags["cert_allowed_cn"] = tuple(cn.strip() for cn in args.cert_allowed_cn.split(",") if cn.strip())
    from dataclasses import replace

    security = replace(security, **flags).validate()
    security.server_ssl_context()  # load the files now: a bad certificate fails before Spark starts
    return security


def make_private(path: str, directory: bool) -> None:
    """Create `path` for this user only (0700 directory / 0600 file), or take group and other
    access away from an existing one: it holds sink URIs with passwords and binlog statements."""
    if directory:
        os.makedirs(path, mode=0o700, exist_ok=True)
    elif not os.path.exists(path):
        return
    mode = stat.S_IMODE(os.stat(path).st_mode)
    if mode & 0o077:
        log = logging.getLogger("sparkcdc.server")
        try:
            os.chmod(path, mode & 0o700)
            log.info("%s was mode %o; made it %o", path, mode, mode & 0o700)
        except OSError as exc:
            log.warning("%s is mode %o, readable by other users, and cannot be changed: %s", path, mode, exc)


def run_server(args: argparse.Namespace) -> int:
    # Every file this process, Spark's JVM and its Python workers create (metadata, transaction
    # index, spool, Spark checkpoints, redo files, the log) is for this user only.
    os.umask(0o077)
    configure_logging(args.log_level, args.log_file, args.log_format)
    if args.log_file:
        make_private(args.log_file, directory=False)
    from sparkcdc import failpoint
    from sparkcdc.api.server import serve
    from sparkcdc.pipeline.without_pandas import keep_pandas_out
    from sparkcdc.server.capture import Capture, CaptureOptions
    from sparkcdc.server.observer import CaptureObserver

    try:
        failpoint.arm_from_environment()  # SPARKCDC_FAILPOINTS, for tests: warns about each point
        spark_master, spark_remote = _spark_mode(args)
        if not spark_remote:  # Spark Connect's client needs pandas
            keep_pandas_out()
        security = _security(args)
        make_private(args.data_dir, directory=True)
        capture = Capture(
            CaptureOptions(
                addr=args.addr,
                data_dir=args.data_dir,
                upstream_uri=UPSTREAM.uri(args),
                cluster_id=args.cluster_id,
                spark_master=spark_master,
                spark_remote=spark_remote,
                pd=args.pd,
                capture_session_ttl=args.capture_session_ttl,
                trigger_interval=args.trigger_interval,
                spark_conf=tuple(args.spark_conf),
            ),
            metrics=_metrics(args),
        )
    except SparkCDCError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1
    log = logging.getLogger("sparkcdc.server")
    observer = CaptureObserver(capture, capture.metrics) if capture.metrics is not None else None
    try:
        # --addr is bound before the puller and Spark start: one in use fails at once, and no
        # socket Spark's JVM opens meanwhile can take the port.
        api = serve(args.addr, capture.store, capture, security, capture.verify_user, observer)
    except SparkCDCError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        capture.close()
        return 1
    log.info("starting capture %s for upstream %s", capture.id, capture.upstream.masked_uri())
    log.info("%s", decoder_description())
    try:
        capture.open()
    except SparkCDCError as exc:  # e.g. an unreachable Spark Connect server
        print(f"Error: {exc}", file=sys.stderr)
        api.shutdown()
        capture.close()
        return 1
    try:
        api.start()
    except SparkCDCError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        capture.close()
        return 1
    if observer is not None:
        observer.start()
    scheme = "https" if security.tls_enabled else "http"
    log.info("Open API listening on %s://%s", scheme, args.addr)
    print(f"sparkcdc server ready: {scheme}://{args.addr} (capture {capture.id})", flush=True)

    done = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: done.set())
    done.wait()
    log.info("shutting down")
    api.shutdown()
    if observer is not None:
        observer.close()
    capture.close()
    return 0


def _metrics(args: argparse.Namespace):
    """The process's metrics (one registry, passed down), or None with --metrics off."""
    if args.metrics == "off":
        return None
    from sparkcdc.observability.metrics import Metrics

    return Metrics()
