"""`sparkcdc cli ...`: TiCDC's `cdc cli` (changefeed, capture, tso) over the Open API v2."""

from __future__ import annotations

import argparse
import getpass
import json
import os
import sys
import time
from typing import Callable
from urllib.parse import quote

from sparkcdc import errors
from sparkcdc.api.client import APIClient
from sparkcdc.cli.logs import configure_logging
from sparkcdc.config.replica import parse_replica_config, replica_config_to_dict
from sparkcdc.model import tso
from sparkcdc.server.security import client_ssl_context

DEFAULT_SERVER = "http://127.0.0.1:8300"


def register(subparsers: argparse._SubParsersAction) -> None:
    cli = subparsers.add_parser("cli", help="manage changefeeds on a running sparkcdc server (like `cdc cli`)")
    _add_connection_flags(cli, defaults=True)
    groups = cli.add_subparsers(dest="group", metavar="{changefeed,capture,processor,tso,unsafe,configure-credentials}")
    groups.required = True

    # TiCDC's flags are persistent: --server, --ca, --user... work before or after the subcommand.
    common = argparse.ArgumentParser(add_help=False)
    _add_connection_flags(common, defaults=False)
    changefeed_common = argparse.ArgumentParser(add_help=False, parents=[common])
    changefeed_common.add_argument("-n", "--namespace", default="default", help="changefeed namespace")

    changefeed = groups.add_parser("changefeed", help="create, list, query, pause, resume, update, remove")
    commands = changefeed.add_subparsers(dest="action", metavar="ACTION")
    commands.required = True

    def add(name: str, func: Callable, help_text: str, parents=None) -> argparse.ArgumentParser:
        parser = commands.add_parser(name, help=help_text, parents=parents or [changefeed_common])
        parser.set_defaults(func=func)
        return parser

    create = add("create", _create, "create a changefeed")
    create.add_argument("-c", "--changefeed-id", default="", help="id (a UUID when omitted)")
    create.add_argument("--sink-uri", required=True)
    create.add_argument("--config", help="changefeed TOML file")
    create.add_argument("--start-ts", type=_start_arg, default=0, metavar="TSO|GTID|FILE:POS",
                        help="where to start: a TSO, a GTID (0-1-25) or a binlog FILE:POS; 0 = now (default). "
                             "Not past the current TSO")
    create.add_argument("--target-ts", type=_tso_arg, default=0)
    create.add_argument("--no-confirm", action="store_true", help="do not ask for confirmation")
    create.add_argument("--schema-registry", default="",
                        help="Avro schema registry URL (sets [sink] schema-registry, as TiCDC's flag)")

    listing = add("list", _list, "list changefeeds")
    listing.add_argument("-a", "--all", action="store_true", help="include finished and removed changefeeds")

    query = add("query", _query, "show one changefeed")
    query.add_argument("-c", "--changefeed-id", required=True)
    query.add_argument("-s", "--simple", action="store_true", help="only the state and checkpoint")

    snapshot = add("snapshot", _snapshot, "show the initial snapshot's progress, or copy tables again")
    snapshot.add_argument("-c", "--changefeed-id", required=True)
    snapshot.add_argument("--tables", default="", metavar="DB.TABLE[,...]",
                          help="copy these tables again while the changefeed streams (like Debezium's ad-hoc "
                               "snapshot); they must be in the changefeed's filter")
    snapshot.add_argument("--follow", action="store_true", help="print the progress every --interval seconds "
                                                                "until the snapshot is done")
    snapshot.add_argument("--interval", type=float, default=5.0, help="seconds between --follow lines (default 5)")

    pause = add("pause", _pause, "pause a changefeed")
    pause.add_argument("-c", "--changefeed-id", required=True)

    resume = add("resume", _resume, "resume a paused or failed changefeed")
    resume.add_argument("-c", "--changefeed-id", required=True)
    resume.add_argument("--overwrite-checkpoint-ts", default="", metavar="now|TSO|GTID|FILE:POS",
                        help="restart from `now`, a TSO, a GTID or a binlog FILE:POS (not past the current TSO)")
    resume.add_argument("--no-confirm", action="store_true")

    update = add("update", _update, "change a stopped or failed changefeed")
    update.add_argument("-c", "--changefeed-id", required=True)
    update.add_argument("--sink-uri")
    update.add_argument("--config")
    update.add_argument("--target-ts", type=_tso_arg)
    update.add_argument("--no-confirm", action="store_true")

    remove = add("remove", _remove, "remove a changefeed")
    remove.add_argument("-c", "--changefeed-id", required=True)

    capture = groups.add_parser("capture", help="captures (server processes)")
    capture_commands = capture.add_subparsers(dest="action", metavar="ACTION")
    capture_commands.required = True
    capture_commands.add_parser("list", parents=[common], help="list captures").set_defaults(func=_capture_list)

    processor = groups.add_parser("processor", help="processors: the changefeeds each capture runs")
    processor_commands = processor.add_subparsers(dest="action", metavar="ACTION")
    processor_commands.required = True
    processor_commands.add_parser("list", parents=[common], help="list processors").set_defaults(
        func=_processor_list)
    processor_query = processor_commands.add_parser("query", parents=[changefeed_common], help="show one processor")
    processor_query.add_argument("-c", "--changefeed-id", required=True)
    processor_query.add_argument("-p", "--capture-id", required=True)
    processor_query.set_defaults(func=_processor_query)

    statistics = add("statistics", _statistics, "print the changefeed's rows/s, rows written, gaps and checkpoint "
                                                "every interval")
    statistics.add_argument("-c", "--changefeed-id", required=True)
    statistics.add_argument("-I", "--interval", type=int, default=10, help="seconds between outputs (default 10)")
    statistics.add_argument("--iterations", type=int, default=0, help="stop after this many outputs (0 = run until ^C)")

    synced = add("synced", _synced, "whether the downstream has caught up with the upstream")
    synced.add_argument("-c", "--changefeed-id", required=True)

    unsafe = groups.add_parser("unsafe", help="inspect metadata (read-only here)")
    unsafe_commands = unsafe.add_subparsers(dest="action", metavar="ACTION")
    unsafe_commands.required = True
    unsafe_commands.add_parser("show-metadata", parents=[common], help="print every metadata key and value "
                               "(secrets masked)").set_defaults(func=_unsafe_show_metadata)

    groups.add_parser("configure-credentials", parents=[common],
                      help=f"store a user, password and TLS files in ~/{CREDENTIALS_FILE}").set_defaults(
        func=_configure_credentials)

    tso_group = groups.add_parser("tso", help="timestamps")
    tso_commands = tso_group.add_subparsers(dest="action", metavar="ACTION")
    tso_commands.required = True
    tso_commands.add_parser("query", parents=[common], help="print the current TSO").set_defaults(func=_tso_query)


def _start_arg(text: str) -> int | str:
    """--start-ts: what the API's start_ts takes, a TSO or a GTID / FILE:POS the server resolves."""
    text = text.strip()
    if text.isdigit():
        return int(text)
    if not text or text.lstrip("-").isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not a TSO (an integer >= 0), a GTID (0-1-25) or a binlog FILE:POS")
    return text


def _tso_arg(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a TSO (a non-negative integer)") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a TSO (a non-negative integer)")
    return value


def _add_connection_flags(parser: argparse.ArgumentParser, defaults: bool) -> None:
    """TiCDC's persistent `cdc cli` flags; `defaults` only on the top parser so a later flag wins."""
    def default(value):
        return value if defaults else argparse.SUPPRESS

    parser.add_argument("--server", default=default(DEFAULT_SERVER),
                        help=f"sparkcdc server address (default {DEFAULT_SERVER}; https:// for TLS)")
    parser.add_argument("--ca", default=default(""), help="CA of the server certificate (env TICDC_CA_PATH)")
    parser.add_argument("--cert", default=default(""), help="client certificate (env TICDC_CERT_PATH)")
    parser.add_argument("--key", default=default(""), help="client private key (env TICDC_KEY_PATH)")
    parser.add_argument("--user", default=default(""), help="client user for basic auth (env TICDC_USER)")
    parser.add_argument("--password", default=default(""),
                        help="its password (env TICDC_PASSWORD; asked on the terminal when --user is given alone). "
                             "A password given here shows in `ps`: prefer TICDC_PASSWORD, the prompt or "
                             "`configure-credentials`")
    parser.add_argument("--log-level", default=default("warn"), choices=["debug", "info", "warn", "error"],
                        help="the CLI's own log level (default warn)")


CREDENTIALS_FILE = os.path.join(".ticdc", "credentials")  # under the home directory, as TiCDC
_CREDENTIAL_KEYS = ("ticdc_user", "ticdc_password", "ca_path", "cert_path", "key_path")


def credentials_path() -> str:
    return os.path.join(os.path.expanduser("~"), CREDENTIALS_FILE)


def read_credentials() -> dict[str, str]:
    """TiCDC's shared credential file (TOML: ticdc_user, ticdc_password, ca_path, cert_path, key_path)."""
    import tomllib

    path = credentials_path()
    if not os.path.exists(path):
        return {}
    try:
        with open(path, "rb") as f:
            document = tomllib.load(f)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise errors.ErrSecurityConfig(f"cannot read the credential file {path}: {exc}; fix it or run "
                                       "`sparkcdc cli configure-credentials`") from None
    unknown = sorted(set(document) - set(_CREDENTIAL_KEYS))
    if unknown or not all(isinstance(value, str) for value in document.values()):
        raise errors.ErrSecurityConfig(f"the credential file {path} may only hold strings under "
                                       f"{', '.join(_CREDENTIAL_KEYS)}; found {', '.join(unknown) or 'a non-string'}")
    return document


def _client(args: argparse.Namespace) -> APIClient:
    """Credentials in TiCDC's order: flags, then TICDC_* variables, then ~/.ticdc/credentials."""
    configure_logging(args.log_level)
    ca, cert, key = args.ca, args.cert, args.key
    if not (ca or cert or key):
        ca, cert, key = (os.environ.get(name, "") for name in ("TICDC_CA_PATH", "TICDC_CERT_PATH", "TICDC_KEY_PATH"))
    if not (ca or cert or key):
        stored = read_credentials()
        ca, cert, key = (stored.get(name, "") for name in ("ca_path", "cert_path", "key_path"))
    user, password = args.user, args.password
    if user and not password and sys.stdin.isatty():
        password = getpass.getpass("Enter password: ")
    if not user:
        user, password = os.environ.get("TICDC_USER", ""), os.environ.get("TICDC_PASSWORD", "")
    if not user and not password:
        stored = read_credentials()
        user, password = stored.get("ticdc_user", ""), stored.get("ticdc_password", "")
    if password and not user:
        raise errors.ErrSecurityConfig("a password is given without a user: pass --user (or TICDC_USER)")
    server = args.server
    if (ca or cert) and server.startswith("http://"):
        raise errors.ErrSecurityConfig(f"--ca/--cert are for TLS but --server {server} is http://; use https://")
    return APIClient(server, ssl_context=client_ssl_context(ca, cert, key), user=user, password=password)


def _configure_credentials(args) -> int:
    """TiCDC's `cli configure-credentials`: ask for each value and store them (mode 0600)."""
    current = read_credentials()
    prompts = [("ticdc_user", "TiCDC user"), ("ticdc_password", "TiCDC password"),
               ("ca_path", "CA certificate path"), ("cert_path", "Certificate path"), ("key_path", "Private key path")]
    values = {}
    for key, label in prompts:
        shown = "xxxxx" if key == "ticdc_password" and current.get(key) else current.get(key, "")
        sys.stdout.write(f"{label} [{shown}]: ")
        sys.stdout.flush()
        answer = (getpass.getpass("") if key == "ticdc_password" and sys.stdin.isatty()
                  else sys.stdin.readline().rstrip("\n"))
        values[key] = answer or current.get(key, "")
    path = credentials_path()
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        for key, value in values.items():
            if value:
                f.write(f"{key} = {json.dumps(value)}\n")  # a JSON string is a valid TOML basic string
    print(f"Credentials saved to {path}")
    return 0


def _print_json(value) -> None:
    print(json.dumps(value, indent=2))


def _read_config(path: str) -> dict:
    """Parse the TOML here, so a bad config fails before anything is sent."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as exc:
        raise errors.ErrInvalidReplicaConfig(f"cannot read the changefeed config {path}: {exc.strerror}") from None
    return replica_config_to_dict(parse_replica_config(text))


def _confirm(question: str) -> bool:
    sys.stdout.write(f"{question} (Y/n) ")
    sys.stdout.flush()
    answer = sys.stdin.readline().strip().lower()
    return answer in ("y", "yes")


def _accept_ineligible_tables(client, body: dict, no_confirm: bool) -> bool:
    """List tables without a valid index (TiCDC skips them) and ask, unless --no-confirm."""
    verify = {k: body[k] for k in ("replica_config", "start_ts", "sink_uri") if k in body}
    tables = client.request("POST", "/api/v2/verify_table", verify)
    ineligible = tables.get("ineligible_tables") or []
    if not ineligible:
        return True
    names = ", ".join(f"{t['database_name']}.{t['table_name']}" for t in ineligible)
    print("[WARN] some tables are not eligible to replicate, because they do not have a primary "
          f"key or a not-null unique key: {names}")
    if no_confirm or body.get("replica_config", {}).get("force_replicate"):
        return True
    return _confirm("Could you agree to ignore those tables, and continue to replicate")


def _create(args) -> int:
    body = {"namespace": args.namespace, "sink_uri": args.sink_uri,
            "start_ts": args.start_ts, "target_ts": args.target_ts}
    if args.changefeed_id:
        body["changefeed_id"] = args.changefeed_id
    if args.config:
        body["replica_config"] = _read_config(args.config)
    if args.schema_registry:
        config = body.setdefault("replica_config", replica_config_to_dict(parse_replica_config("")))
        config["sink"]["schema_registry"] = args.schema_registry
    client = _client(args)
    if not _accept_ineligible_tables(client, body, args.no_confirm):
        print("No changefeed is created because you don't want to ignore some tables.")
        return 0
    info = client.create_changefeed(body, args.namespace)
    print(f"Create changefeed successfully!\nID: {info['id']}\nInfo: {json.dumps(info)}")
    return 0


def _list(args) -> int:
    result = _client(args).list_changefeeds(state="all" if args.all else "", namespace=None)
    rows = [{
        "id": item["id"],
        "namespace": item["namespace"],
        "summary": {
            "state": item["state"],
            "tso": item["checkpoint_tso"],
            "checkpoint": item["checkpoint_time"],
            "error": item["error"],
        },
    } for item in result.get("items", [])]
    _print_json(rows)
    return 0


def _query(args) -> int:
    client = _client(args)
    info = client.get_changefeed(args.changefeed_id, args.namespace)
    if args.simple:
        _print_json({
            "upstream_id": info["upstream_id"],
            "namespace": info["namespace"],
            "id": info["id"],
            "state": info["state"],
            "checkpoint_tso": info["checkpoint_ts"],
            "checkpoint_time": info["checkpoint_time"],
            "error": info["error"],
        })
        return 0
    _print_json({
        "upstream_id": info["upstream_id"],
        "namespace": info["namespace"],
        "id": info["id"],
        "sink_uri": info["sink_uri"],
        "config": info["config"],
        "create_time": info["create_time"],
        "start_ts": info["start_ts"],
        "resolved_ts": info["resolved_ts"],
        "target_ts": info["target_ts"],
        "checkpoint_tso": info["checkpoint_ts"],
        "checkpoint_time": info["checkpoint_time"],
        "state": info["state"],
        "error": info["error"],
        "error_history": None,
        "creator_version": info["creator_version"],
        "task_status": info.get("task_status", []),
        "puller": info.get("puller"),
        **({"snapshot": info["snapshot"]} if "snapshot" in info else {}),
    })
    return 0


def _snapshot(args) -> int:
    """Ask for tables to be copied again, or show (and with --follow, keep showing) the snapshot's progress."""
    client = _client(args)
    path = f"/api/v2/changefeeds/{quote(args.changefeed_id, safe='')}/snapshot"
    if args.tables:
        tables = [t.strip() for t in args.tables.split(",") if t.strip()]
        _print_json(client.request("POST", path, {"tables": tables}, query={"namespace": args.namespace}))
        return 0
    while True:
        progress = client.request("GET", path, query={"namespace": args.namespace})
        if not args.follow:
            _print_json(progress)
            return 0
        eta = progress.get("eta_seconds")
        print(f"{time.strftime('%H:%M:%S')} {progress['state']}: tables {progress.get('tables_done', 0)}/"
              f"{progress.get('tables_total', 0)}, chunks {progress.get('chunks_done', 0)}/"
              f"{progress.get('chunks_total', 0)}, rows {progress.get('rows', 0)}, "
              f"{progress.get('rows_per_second', 0):.0f} rows/s, ETA {'?' if eta is None else f'{eta:.0f}s'}",
              flush=True)
        if progress["state"] in ("done", "none"):
            return 0
        time.sleep(args.interval)


def _pause(args) -> int:
    _client(args).pause_changefeed(args.changefeed_id, args.namespace)
    return 0


def _resume(args) -> int:
    client = _client(args)
    overwrite = 0
    if args.overwrite_checkpoint_ts:
        if args.overwrite_checkpoint_ts.lower() == "now":
            current = client.query_tso()
            overwrite = tso.compose(current["timestamp"], current["logic_time"])
        else:
            try:
                overwrite = _start_arg(args.overwrite_checkpoint_ts)
            except argparse.ArgumentTypeError:
                overwrite = 0
            if not overwrite:  # a negative number, or 0, which moves nothing (TiCDC's CDC:ErrCliInvalidCheckpointTs)
                raise errors.ErrStartTsInvalid(
                    f"invalid --overwrite-checkpoint-ts {args.overwrite_checkpoint_ts!r}: use `now`, a TSO above 0, "
                    "a GTID (0-1-25) or a binlog FILE:POS")
        client.get_changefeed(args.changefeed_id, args.namespace)  # fail on a wrong id before asking
        if not args.no_confirm and not _confirm(
                f"Resuming changefeed {args.changefeed_id} from checkpoint {overwrite} may skip or repeat "
                f"data. Could you agree to resume the changefeed with the overwrite checkpoint ts?"):
            print("No changefeed is resumed.")
            return 0
    client.resume_changefeed(args.changefeed_id, overwrite, args.namespace)
    return 0


def _update(args) -> int:
    body: dict = {"namespace": args.namespace}
    if args.sink_uri:
        body["sink_uri"] = args.sink_uri
    if args.config:
        body["replica_config"] = _read_config(args.config)
    if args.target_ts is not None:
        body["target_ts"] = args.target_ts
    client = _client(args)
    if "replica_config" in body:  # column selectors and dispatchers against the tables, as at create
        client.request("POST", "/api/v2/verify_table", {"replica_config": body["replica_config"]})
    if not args.no_confirm:
        old = client.get_changefeed(args.changefeed_id, args.namespace)
        changes = {key: value for key, value in body.items() if key != "namespace"}
        print(f"Changefeed {args.changefeed_id} now: sink_uri={old['sink_uri']} target_ts={old['target_ts']}")
        print(f"Changes: {json.dumps(changes)}")
        if not _confirm("Could you agree to apply changes above to changefeed?"):
            print("No update to changefeed.")
            return 0
    info = client.update_changefeed(args.changefeed_id, body, args.namespace)
    print(f"Update changefeed config successfully! \nID: {info['id']}\nInfo: {json.dumps(info)}")
    return 0


def _remove(args) -> int:
    client = _client(args)
    info = client.get_changefeed(args.changefeed_id, args.namespace)
    client.delete_changefeed(args.changefeed_id, args.namespace)
    print(f"Changefeed remove successfully.\nID: {info['id']}\nCheckpointTs: {info['checkpoint_ts']}\n"
          f"SinkURI: {info['sink_uri']}")
    return 0


def _capture_list(args) -> int:
    result = _client(args).list_captures()
    _print_json([{"id": c["id"], "is-owner": c["is_owner"], "address": c["address"],
                  "cluster-id": c["cluster_id"]} for c in result.get("items", [])])
    return 0


def _tso_query(args) -> int:
    current = _client(args).query_tso()
    print(tso.compose(current["timestamp"], current["logic_time"]))
    return 0


def _processor_list(args) -> int:
    result = _client(args).list_processors()
    _print_json(result.get("items", []))  # TiCDC's ProcessorCommonInfo list
    return 0


def _processor_query(args) -> int:
    client = _client(args)
    detail = client.get_processor(args.changefeed_id, args.capture_id, args.namespace)
    status = client.changefeed_status(args.changefeed_id, args.namespace)
    _print_json({"status": {"table_ids": detail["table_ids"]},
                 "position": {"checkpoint-ts": status["checkpoint_ts"], "resolved-ts": status["resolved_ts"]}})
    return 0


def _synced(args) -> int:
    _print_json(_client(args).changefeed_synced(args.changefeed_id, args.namespace))
    return 0


def _unsafe_show_metadata(args) -> int:
    entries = _client(args).unsafe_metadata()
    for entry in entries:
        print(f"Key: {entry['key']}, Value: {entry['value']}")
    print(f"Show {len(entries)} KVs")
    return 0


def _statistics(args) -> int:
    """TiCDC's `changefeed statistics`: every --interval seconds one JSON line with `ops` (rows/s
    the sink wrote since the previous line; null on the first), `count` (rows written by the
    changefeed's sink on the capture that runs it, from that capture's /metrics; null when no
    capture runs it or its metrics are off), `sink_gap` (resolved - checkpoint), `replication_gap`
    (now - checkpoint) and `checkpoint` (the checkpoint's time)."""
    if args.interval < 1:
        raise errors.ErrAPIInvalidParam("--interval must be at least 1 second")
    client = _client(args)
    printed = 0
    previous: tuple[float, int] | None = None
    while True:
        info = client.get_changefeed(args.changefeed_id, args.namespace)
        now = client.query_tso()["timestamp"]
        checkpoint_ms = tso.physical_ms(info["checkpoint_ts"])
        count, taken = _rows_written(client, info), time.monotonic()
        ops = None
        if count is not None and previous is not None and count >= previous[1] and taken > previous[0]:
            ops = round((count - previous[1]) / (taken - previous[0]), 1)
        previous = (taken, count) if count is not None else None
        print(json.dumps({"ops": ops, "count": count,
                          "sink_gap": f"{tso.physical_ms(info['resolved_ts']) - checkpoint_ms}ms",
                          "replication_gap": f"{now - checkpoint_ms}ms",
                          "checkpoint": info.get("checkpoint_time") or tso.format_time(info["checkpoint_ts"])}),
              flush=True)
        printed += 1
        if args.iterations and printed >= args.iterations:
            return 0
        time.sleep(args.interval)


def _rows_written(client: APIClient, info: dict) -> int | None:
    """Rows the changefeed's sink wrote (ticdc_sink_batch_row_count's sum) on the capture that runs
    it; None when no capture runs it or that capture does not answer with metrics."""
    from prometheus_client.parser import text_string_to_metric_families

    running = [task["capture_id"] for task in info.get("task_status") or []]
    if not running:
        return None
    address = next((c.get("address") for c in client.list_captures().get("items", []) if c.get("id") == running[0]),
                   None)
    if address is None:
        return None
    try:
        text = client.metrics(address)
    except errors.SparkCDCError:
        return None
    for family in text_string_to_metric_families(text):
        if family.name == "ticdc_sink_batch_row_count":
            return sum(int(sample.value) for sample in family.samples
                       if sample.name.endswith("_sum") and sample.labels.get("namespace") == info["namespace"]
                       and sample.labels.get("changefeed") == info["id"])
    return None
