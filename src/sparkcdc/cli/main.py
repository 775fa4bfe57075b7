"""`sparkcdc` entry point. Each subcommand module registers itself with `register(subparsers)`."""

from __future__ import annotations

import argparse
import importlib
import sys

from sparkcdc.errors import SparkCDCError

SUBCOMMAND_MODULES = ["sparkcdc.cli.cli_cmd", "sparkcdc.cli.server_cmd", "sparkcdc.cli.demo_cmd", "sparkcdc.cli.consumer_cmd", "sparkcdc.cli.diff_cmd", "sparkcdc.cli.redo_cmd"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sparkcdc", description="Change data capture with TiCDC's contract")
    parser.add_argument("--version", action="version", version=version_text())
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    subparsers.required = True
    for module_name in SUBCOMMAND_MODULES:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name == module_name:
                continue  # that subcommand is not part of this build; anything else is a real bug
            raise
        module.register(subparsers)
    return parser


def version_text() -> str:
    """`sparkcdc --version`: the release and which row decoder this installation uses."""
    from sparkcdc import __version__
    from sparkcdc.upstream.native_decode import decoder_description

    return f"sparkcdc {__version__}, {decoder_description()}"


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args) or 0
    except SparkCDCError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
