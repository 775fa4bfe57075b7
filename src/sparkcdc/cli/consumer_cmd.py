"""`sparkcdc consumer storage`: replay a storage sink's output into MySQL (TiCDC's storage-consumer).

    sparkcdc consumer storage --upstream-uri 's3://b/cdc?protocol=canal-json&endpoint=...' \\
        --downstream-uri 'mysql://root@127.0.0.1:3306/?safe-mode=true'
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from urllib.parse import parse_qsl, urlsplit

from sparkcdc.cli.logs import add_log_format_argument, configure_logging
from sparkcdc.cli.passwords import PasswordOption
from sparkcdc.observability.progress import Progress
from sparkcdc.errors import ErrSinkUnknownProtocol, ErrSinkURIInvalid, ErrUpstreamURIInvalid

# --downstream-uri with --downstream-password-file / SPARKCDC_DOWNSTREAM_PASSWORD, and the Kafka
# consumer's --upstream-mysql-uri with --upstream-mysql-password-file / SPARKCDC_UPSTREAM_MYSQL_PASSWORD.
DOWNSTREAM = PasswordOption("downstream", ErrSinkURIInvalid)
UPSTREAM_MYSQL = PasswordOption("upstream-mysql", ErrUpstreamURIInvalid)


def register(subparsers) -> None:
    parser = subparsers.add_parser("consumer", help="consume a changefeed's output")
    kinds = parser.add_subparsers(dest="consumer_kind", metavar="KIND")
    kinds.required = True
    storage = kinds.add_parser(
        "storage", help="replay a storage sink (s3://, gcs://, azblob://, file://) into mysql://")
    storage.add_argument("--upstream-uri", required=True,
                         help="the storage sink URI, with protocol=canal-json|csv and its credentials")
    DOWNSTREAM.add_arguments(storage, "mysql:// or tidb:// sink URI", required=True)
    storage.add_argument("--config", help="changefeed TOML the files were written with (csv options, ...)")
    storage.add_argument("--flush-interval", default="10s", help="how often to poll metadata (default %(default)s)")
    storage.add_argument("--start-ts", type=int, default=0,
                         help="consumer checkpoint to start from, if the saved one is older")
    storage.add_argument("--checkpoint-file",
                         help="keep the consumer checkpoint in this local file instead of the "
                              "downstream table sparkcdc_consumer.storage_checkpoint")
    storage.add_argument("--once", action="store_true", help="apply up to the current checkpoint, then exit")
    add_log_format_argument(storage)
    storage.set_defaults(func=run_storage_consumer)
    kafka = kinds.add_parser("kafka", help="replay a Kafka sink's topics (canal-json, open-protocol, avro, simple) into mysql://")
    kafka.add_argument("--upstream-uri", required=True,
                       help="kafka://host:9092/topic?protocol=canal-json&enable-tidb-extension=true")
    DOWNSTREAM.add_arguments(kafka, "mysql:// or tidb:// sink URI", required=True)
    kafka.add_argument("--config", help="changefeed TOML the topic was written with")
    kafka.add_argument("--topics", default="",
                       help="comma-separated topics to read instead of the default: the URI's topic and "
                            "every topic expression of the --config's [[sink.dispatchers]]")
    kafka.add_argument("--topic-regex", default="",
                       help="read every topic this regex matches in full (with --topics, those too)")
    UPSTREAM_MYSQL.add_arguments(kafka, "mysql://user@host:3306/ of the upstream database, to read the rows of "
                                        "handle-key-only large messages (their current values: MariaDB has no "
                                        "snapshot reads)", default="")
    kafka.add_argument("--group-id", default="", help="consumer group id (default sparkcdc-consumer-<topic>)")
    kafka.add_argument("--until-ts", type=int, help="exit once everything up to this commit-ts is applied")
    add_log_format_argument(kafka)
    kafka.set_defaults(func=run_kafka_consumer)


def run_kafka_consumer(args: argparse.Namespace) -> int:
    downstream_uri, upstream_mysql_uri = DOWNSTREAM.uri(args), UPSTREAM_MYSQL.uri(args)
    from sparkcdc.config.replica import ReplicaConfig, parse_replica_config
    from sparkcdc.consumer.kafka_consumer import KafkaConsumer
    from sparkcdc.sink.kafka.config import parse_kafka_sink_uri
    from sparkcdc.sink.mysql.config import parse_mysql_sink_uri
    from sparkcdc.sink.mysql.connection import connect
    from sparkcdc.sink.mysql.sink import MySQLSink
    from sparkcdc.upstream.schema_reader import read_table_info

    configure_logging("info", log_format=args.log_format)
    config = ReplicaConfig()
    if args.config:
        with open(args.config, encoding="utf-8") as handle:
            config = parse_replica_config(handle.read())
    kafka_config = parse_kafka_sink_uri(args.upstream_uri, config)
    # The topic is read from its beginning on every start: every write is idempotent.
    downstream = MySQLSink(downstream_uri, config, replicating_ts=2**63 - 1)
    connection = connect(parse_mysql_sink_uri(downstream_uri, config), None)
    cache: dict = {}

    def table_info(schema: str, table: str):
        if (schema, table) not in cache:
            cache[(schema, table)] = read_table_info(connection, schema, table, 0, 0)
        return cache[(schema, table)]

    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    topics = [topic for topic in args.topics.split(",") if topic]
    upstream = None
    if upstream_mysql_uri:
        from sparkcdc.upstream.row_lookup import UpstreamRowReader

        upstream_config = parse_mysql_sink_uri(upstream_mysql_uri, config)
        upstream = UpstreamRowReader(lambda: connect(upstream_config, None))
    consumer = KafkaConsumer(kafka_config, downstream, table_info, cache.clear, args.group_id,
                             topics=topics, topic_regex=args.topic_regex,
                             upstream_row=upstream.read if upstream is not None else None)
    try:
        reached = consumer.run(stop, args.until_ts, progress=Progress("kafka consumer", unit="rows"))
    finally:
        if upstream is not None:
            upstream.close()
        consumer.close()
        downstream.close()
        connection.close()
    print(f"kafka consumer checkpoint {reached}, {consumer.rows_applied} rows applied", file=sys.stderr)
    return 0


def _protocol(upstream_uri: str, default: str) -> str:
    for name, value in parse_qsl(urlsplit(upstream_uri).query):
        if name == "protocol":
            return value
    return default


def run_storage_consumer(args: argparse.Namespace) -> int:
    downstream_uri = DOWNSTREAM.uri(args)
    from sparkcdc.config.replica import ReplicaConfig, parse_go_duration, parse_replica_config
    from sparkcdc.config.sink_uri import mask_sink_uri
    from sparkcdc.consumer.storage_consumer import (
        FileCheckpointStore,
        MySQLCheckpointStore,
        StorageConsumer,
        run_consumer,
        upstream_identity,
    )
    from sparkcdc.consumer.storage_reader import checkpoint_ts
    from sparkcdc.sink.mysql.config import parse_mysql_sink_uri
    from sparkcdc.sink.mysql.connection import connect
    from sparkcdc.sink.mysql.sink import MySQLSink
    from sparkcdc.upstream.schema_reader import read_table_info

    configure_logging("info", log_format=args.log_format)
    config = ReplicaConfig()
    if args.config:
        with open(args.config, encoding="utf-8") as handle:
            config = parse_replica_config(handle.read())
    protocol = _protocol(args.upstream_uri, config.sink.protocol or "")
    if protocol not in ("canal-json", "csv"):
        raise ErrSinkUnknownProtocol(
            f"the upstream URI {mask_sink_uri(args.upstream_uri)} needs protocol=canal-json or protocol=csv")
    config.sink.protocol = protocol
    interval = parse_go_duration(args.flush_interval)
    # Transactions up to the storage checkpoint may already be downstream after a restart:
    # the sink writes them idempotently.
    replicating_ts = checkpoint_ts(args.upstream_uri)
    downstream = MySQLSink(downstream_uri, config, replicating_ts=replicating_ts)
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    mysql_config = parse_mysql_sink_uri(downstream_uri, config)
    upstream = upstream_identity(args.upstream_uri)
    # The checkpoint survives restarts, so a restarted consumer does not replay from the start.
    store = (FileCheckpointStore(args.checkpoint_file, upstream) if args.checkpoint_file
             else MySQLCheckpointStore(lambda: connect(mysql_config, "+00:00"), upstream))
    lookup = connect(mysql_config, None)
    try:
        consumer = StorageConsumer(
            args.upstream_uri, downstream, protocol, config.sink, args.start_ts,
            checkpoint_store=store,
            downstream_table=lambda schema, table: read_table_info(lookup, schema, table, 0, 0))
        reached = run_consumer(consumer, interval, once=args.once, stop=stop,
                               progress=Progress("storage consumer", unit="rows"))
    finally:
        downstream.close()
        lookup.close()
        if isinstance(store, MySQLCheckpointStore):
            store.close()
    print(f"storage consumer checkpoint {reached}", file=sys.stderr)
    return 0
