"""`sparkcdc cli ...`: TiCDC's `cdc cli` (changefeed, capture, tso) over the Open API v2."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Callable

from sparkcdc import errors
from sparkcdc.api.client import APIClient
from sparkcdc.config.replica import parse_replica_config, replica_config_to_dict
from sparkcdc.model import tso

DEFAULT_SERVER = "http://127.0.0.1:8300"


def register(subparsers: argparse._SubParsersAction) -> None:
    cli = subparsers.add_parser("cli", help="manage changefeeds on a running sparkcdc server (like `cdc cli`)")
    cli.add_argument("--server", default=DEFAULT_SERVER, help=f"sparkcdc server address (default {DEFAULT_SERVER})")
    groups = cli.add_subparsers(dest="group", metavar="{changefeed,capture,tso}")
    groups.required = True

    # TiCDC's flags are persistent: --server works before or after the subcommand.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--server", default=argparse.SUPPRESS, help="sparkcdc server address")
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
    create.add_argument("--start-ts", type=_tso_arg, default=0, help="0 = now")
    create.add_argument("--target-ts", type=_tso_arg, default=0)
    create.add_argument("--no-confirm", action="store_true", help="do not ask for confirmation")

    listing = add("list", _list, "list changefeeds")
    listing.add_argument("-a", "--all", action="store_true", help="include finished and removed changefeeds")

    query = add("query", _query, "show one changefeed")
    query.add_argument("-c", "--changefeed-id", required=True)
    query.add_argument("-s", "--simple", action="store_true", help="only the state and checkpoint")

    pause = add("pause", _pause, "pause a changefeed")
    pause.add_argument("-c", "--changefeed-id", required=True)

    resume = add("resume", _resume, "resume a paused or failed changefeed")
    resume.add_argument("-c", "--changefeed-id", required=True)
    resume.add_argument("--overwrite-checkpoint-ts", default="", help="`now` or a TSO to restart from")
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

    tso_group = groups.add_parser("tso", help="timestamps")
    tso_commands = tso_group.add_subparsers(dest="action", metavar="ACTION")
    tso_commands.required = True
    tso_commands.add_parser("query", parents=[common], help="print the current TSO").set_defaults(func=_tso_query)


def _tso_arg(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a TSO (a non-negative integer)") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a TSO (a non-negative integer)")
    return value


def _client(args: argparse.Namespace) -> APIClient:
    return APIClient(args.server)


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
    })
    return 0


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
                overwrite = _tso_arg(args.overwrite_checkpoint_ts)
            except argparse.ArgumentTypeError as exc:
                raise errors.ErrStartTsInvalid(f"--overwrite-checkpoint-ts: {exc}; use `now` or a TSO") from None
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
